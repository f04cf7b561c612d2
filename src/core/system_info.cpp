#include <fstream>
#include <set>
#include <sstream>

#include "core/parallel.h"
#if VISATTN_WITH_CUDA
#include "backends/cuda/cuda_backend.h"
#endif
#include "visattn/visattn.h"

namespace visattn {

namespace {

// The SIMD extensions (Linux /proc/cpuinfo names) that matter to attention kernels.
constexpr const char* kInterestingFeatures[] = {
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
    "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8"};

void read_cpuinfo(SystemInfo& info) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  std::set<std::string> flags;
  while (std::getline(cpuinfo, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && info.cpu_model.empty()) info.cpu_model = value;
    if (key == "flags" && flags.empty()) {
      std::istringstream words(value);
      for (std::string word; words >> word;) flags.insert(word);
    }
  }
  for (const char* feature : kInterestingFeatures) {
    if (flags.count(feature)) info.cpu_features.emplace_back(feature);
  }
}

}  // namespace

SystemInfo system_info() {
  SystemInfo info;
  info.version = VISATTN_VERSION;
  info.compiler = VISATTN_COMPILER;
  info.build_type = VISATTN_BUILD_TYPE;
  info.sanitizers = VISATTN_SANITIZERS;
  info.num_threads = default_num_threads();
  read_cpuinfo(info);
#if VISATTN_WITH_CUDA
  info.cuda_compiled = true;
  info.gpus = cuda::gpu_names();
#endif
  return info;
}

}  // namespace visattn
