// The `cpu` backend: flash-style tiled attention with runtime SIMD dispatch and threads
// balanced by image cost.
#pragma once

#include <string>

#include "visattn/params.h"

namespace visattn::cpu {

void run(const AttentionParams& params);

// Which kernel runs each dtype on this CPU, e.g. "bf16: avx512_bf16; f16, f32: avx512".
std::string describe_paths();

}  // namespace visattn::cpu
