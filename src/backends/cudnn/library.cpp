#include "backends/cudnn/library.h"

#include <cuda_runtime_api.h>  // CUDART_VERSION
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/error_message.h"

// The frontend's dynamic-loading shim calls cuDNN through this handle (it declares it extern;
// the application defines it and sets it before the first frontend call).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace visattn::cudnn {

namespace {

std::string dl_error() {
  const char* error = dlerror();
  return error ? error : "unknown error";
}

// The frontend (in dynamic-loading mode) also opens a CUDA runtime of its own, by the names
// libcudart.so.12 and libcudart.so.13, keeping the first it finds when both are on the search
// path. Point it at the major this library was compiled against, and at the toolkit's copy
// when the search path has none. The user's CUDNN_FRONTEND_CUDART_LIB_NAME always wins.
void choose_cudart_for_frontend(const std::string& cudnn_path) {
  if (std::getenv("CUDNN_FRONTEND_CUDART_LIB_NAME")) return;
  const std::string soname = concat("libcudart.so.", CUDART_VERSION / 1000);
  std::vector<std::string> candidates = {soname};
  if (const char* home = std::getenv("CUDA_HOME")) candidates.push_back(concat(home, "/lib64/", soname));
  candidates.push_back("/usr/local/cuda/lib64/" + soname);
  // pip's layout: site-packages/nvidia/{cudnn,cuda_runtime}/lib
  const std::filesystem::path lib_dir = std::filesystem::path(cudnn_path).parent_path();
  candidates.push_back((lib_dir.parent_path().parent_path() / "cuda_runtime" / "lib" / soname).string());
  for (const std::string& candidate : candidates) {
    // Local: its symbols must not stand in for another runtime's in libraries loaded later.
    if (void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      (void)handle;  // stays loaded; the frontend opens it again by this name
      setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", candidate.c_str(), /*overwrite=*/0);
      return;
    }
  }
  dlerror();  // none found: the frontend tries its own names and reports what it tried
}

}  // namespace

std::string version_string(int64_t version) {
  return concat(version / 10000, ".", version / 100 % 100, ".", version % 100);
}

std::string version_problem(int64_t version) {
  if (version < kMinimumVersion) {
    return concat("cuDNN ", version_string(version), " is too old: the cudnn backend needs ",
                  version_string(kMinimumVersion), " or newer (int64 ragged offsets)");
  }
  if (version == 91000 || version == 91001) {
    return concat("cuDNN ", version_string(version), " has known bugs in its fp16/bf16 attention "
                  "(the cuDNN frontend refuses it): use 9.10.2 or newer");
  }
  return {};
}

Library open_library(const std::string& name) {
  Library lib;
  dlerror();
  lib.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);  // as the frontend's own loader does
  if (!lib.handle) {
    lib.problem = concat("cannot load ", name, ": ", dl_error(),
                         " (install cuDNN 9 >= ", version_string(kMinimumVersion),
                         ", or set VISATTN_CUDNN_LIB to the path of a libcudnn.so.9)");
    return lib;
  }
  // A library we cannot use is closed again, so that it does not stand in for another
  // libcudnn.so.9 that the process loads later (the loader reuses a loaded soname).
  auto reject = [&](std::string problem) {
    lib.problem = std::move(problem);
    dlclose(lib.handle);
    lib.handle = nullptr;
    return lib;
  };
  using GetVersion = size_t (*)();
  const auto get_version = reinterpret_cast<GetVersion>(dlsym(lib.handle, "cudnnGetVersion"));
  if (!get_version) return reject(concat(name, " has no cudnnGetVersion: ", dl_error(), "; is it cuDNN?"));
  Dl_info info{};
  lib.path = dladdr(reinterpret_cast<void*>(get_version), &info) && info.dli_fname ? info.dli_fname : name;
  lib.version = static_cast<int64_t>(get_version());
  if (std::string problem = version_problem(lib.version); !problem.empty()) {
    return reject(problem + " (loaded " + lib.path + ")");
  }
  lib.usable = true;
  return lib;
}

const Library& library() {
  static const Library lib = [] {
    const char* override_path = std::getenv("VISATTN_CUDNN_LIB");
    Library loaded = open_library(override_path && *override_path ? override_path : "libcudnn.so.9");
    if (loaded.usable) {
      choose_cudart_for_frontend(loaded.path);
      cudnn_frontend::cudnn_dlhandle = loaded.handle;
    }
    return loaded;
  }();
  return lib;
}

}  // namespace visattn::cudnn
