// Loading libcudnn at run time. The build never links cuDNN: the frontend headers are compiled
// with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING and call cuDNN through the handle opened here, so
// a machine without cuDNN (or with one too old) runs every other backend, and `cudnn` reports
// why it is unavailable.
#pragma once

#include <cstdint>
#include <string>

namespace visattn::cudnn {

// cuDNN versions as cudnnGetVersion() returns them: major * 10000 + minor * 100 + patch.
// 9.5: int64 ragged offsets. Older cuDNN 9 releases lack them; cuDNN 8 has no ragged layout.
inline constexpr int64_t kMinimumVersion = 90500;
// Hopper and newer run ragged attention from kMinimumVersion; Ampere/Ada from 9.18.1.
inline constexpr int64_t kRaggedBeforeSm90Version = 91801;

struct Library {
  bool usable = false;
  void* handle = nullptr;  // dlopen handle, null if the library could not be opened
  std::string path;        // the file that was loaded
  int64_t version = 0;     // cudnnGetVersion(), 0 if unknown
  std::string problem;     // why it is not usable; empty when usable
};

// "9.19.0" for 91900.
std::string version_string(int64_t version);

// Why cuDNN `version` cannot run this backend, or empty.
std::string version_problem(int64_t version);

// Opens `name` (a file name or path) and reads its version; never throws. Does not hand the
// library to the frontend (tests use it on any file).
Library open_library(const std::string& name);

// The process's cuDNN: $VISATTN_CUDNN_LIB, else libcudnn.so.9 from the loader's search path;
// opened on first use (thread-safe), handed to the frontend when usable.
const Library& library();

}  // namespace visattn::cudnn
