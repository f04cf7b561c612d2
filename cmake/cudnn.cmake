# The cudnn backend, included where the CUDA backend is built. It needs two sets of headers and
# no library: cudnn.h (cuDNN 9) and the header-only cuDNN frontend (the nvidia-cudnn-frontend
# wheel's include/, which scripts/fetch_cudnn_frontend.sh puts in .deps; `make deps` runs it).
# libcudnn.so.9 is opened at run time (src/backends/cudnn/library.cpp), so a build without cuDNN
# installed still has the backend, and reports it unavailable.
if(NOT VISATTN_CUDNN)
  message(STATUS "visattn: no cudnn backend (VISATTN_CUDNN=OFF)")
  return()
endif()
if(NOT EXISTS "${VISATTN_CUDNN_FRONTEND_DIR}/cudnn_frontend.h")
  message(STATUS "visattn: no cudnn backend: no cuDNN frontend headers in ${VISATTN_CUDNN_FRONTEND_DIR} "
                 "(run scripts/fetch_cudnn_frontend.sh, or set VISATTN_CUDNN_FRONTEND_DIR)")
  return()
endif()

# cudnn.h: the toolkit's include dir, the usual system places, $CUDNN_PATH, or the headers of
# the nvidia-cudnn pip package of this Python (torch's), in that order.
find_path(VISATTN_CUDNN_INCLUDE_DIR cudnn_version.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDNN_PATH ENV CUDNN_INCLUDE_DIR
  PATH_SUFFIXES include)
if(NOT VISATTN_CUDNN_INCLUDE_DIR)
  find_program(VISATTN_PYTHON3 python3)
  if(VISATTN_PYTHON3)
    execute_process(
      COMMAND "${VISATTN_PYTHON3}" -c
              "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'include'))"
      OUTPUT_VARIABLE pip_cudnn_include OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(pip_cudnn_include AND EXISTS "${pip_cudnn_include}/cudnn_version.h")
      set(VISATTN_CUDNN_INCLUDE_DIR "${pip_cudnn_include}" CACHE PATH "cudnn.h's directory" FORCE)
    endif()
  endif()
endif()
if(NOT VISATTN_CUDNN_INCLUDE_DIR)
  message(STATUS "visattn: no cudnn backend: cudnn.h not found (set VISATTN_CUDNN_INCLUDE_DIR or CUDNN_PATH)")
  return()
endif()
file(STRINGS "${VISATTN_CUDNN_INCLUDE_DIR}/cudnn_version.h" cudnn_version_lines
     REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) +[0-9]+")
string(REGEX REPLACE ".*CUDNN_MAJOR +([0-9]+).*" "\\1" cudnn_major "${cudnn_version_lines}")
string(REGEX REPLACE ".*CUDNN_MINOR +([0-9]+).*" "\\1" cudnn_minor "${cudnn_version_lines}")
if(cudnn_major LESS 9)
  message(STATUS "visattn: no cudnn backend: ${VISATTN_CUDNN_INCLUDE_DIR} has cuDNN ${cudnn_major} headers; "
                 "the frontend needs cuDNN 9")
  return()
endif()

target_sources(visattn PRIVATE
  src/backends/cudnn/cudnn_backend.cpp
  src/backends/cudnn/dense_batch.cpp
  src/backends/cudnn/library.cpp
  src/backends/cudnn/plan_key.cpp
  src/backends/cudnn/plan_cache.cpp
  src/backends/cudnn/ragged_indices.cu)
# Only plan_cache.cpp includes the frontend: every cuDNN and frontend call goes through dlsym
# (no link dependency), and the frontend's bundled nlohmann json stays out (the CLI has its own).
set_source_files_properties(src/backends/cudnn/plan_cache.cpp PROPERTIES
  COMPILE_DEFINITIONS "NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING;CUDNN_FRONTEND_SKIP_JSON_LIB")
target_include_directories(visattn SYSTEM PRIVATE
  "${VISATTN_CUDNN_FRONTEND_DIR}" "${VISATTN_CUDNN_INCLUDE_DIR}")
target_compile_definitions(visattn PRIVATE VISATTN_WITH_CUDNN=1)
target_link_libraries(visattn PRIVATE ${CMAKE_DL_LIBS})
set(VISATTN_WITH_CUDNN ON)
message(STATUS "visattn: cudnn backend (cuDNN ${cudnn_major}.${cudnn_minor} headers in "
               "${VISATTN_CUDNN_INCLUDE_DIR}, frontend in ${VISATTN_CUDNN_FRONTEND_DIR})")
