// visattn: attention for vision encoders. Include this one header.
#pragma once

#include "visattn/attention.h"
#include "visattn/error.h"
#include "visattn/layer.h"
#include "visattn/tensor.h"
#include "visattn/varlen_batch.h"

#include <string>
#include <vector>

namespace visattn {

const char* version();

// What this build and machine offer; `visattn info` prints it.
struct SystemInfo {
  std::string version;
  std::string compiler;
  std::string build_type;
  std::string sanitizers;           // empty when none
  bool cuda_compiled = false;       // the CUDA backends were compiled in
  std::string cpu_model;
  std::vector<std::string> cpu_features;  // the SIMD extensions backends can use
  int num_threads = 1;              // threads CPU backends use (VISATTN_NUM_THREADS, OMP_NUM_THREADS)
  std::vector<std::string> gpus;    // one line per visible GPU
};

SystemInfo system_info();

}  // namespace visattn
