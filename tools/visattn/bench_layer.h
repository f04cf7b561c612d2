// visattn bench: the whole attention layer (qkv GEMM, rope, attention, proj GEMM) on a workload,
// timed beside attention alone, so a user sees what the GEMMs around attention cost.
#pragma once

#include <string>

#include "visattn/tensor.h"
#include "workloads.h"

namespace visattn::cli {

struct LayerTiming {
  double ms = 0;
  double flops = 0;  // 2 T E (4 heads head_dim) + the workload's attention FLOPs
};

// A Qwen2-VL-style layer (embed_dim = heads * head_dim, qkv and proj bias, rope) with random
// weights, its attention run by `backend`; the median of replays after a warm-up.
LayerTiming time_layer(const Workload& w, DType dtype, const std::string& backend);

}  // namespace visattn::cli
