// The `cuda` backend: varlen flash attention on NVIDIA GPUs (sm80 and newer), one launch for
// every image and head of a batch.
#pragma once

#include <string>
#include <vector>

#include "visattn/params.h"

namespace visattn::cuda {

void run(const AttentionParams& params);
std::string unavailable_reason();  // empty when a usable GPU is present
std::string describe();            // the GPUs and the kernel that runs
std::vector<std::string> gpu_names();

}  // namespace visattn::cuda
