// The CPU layer's GEMM: y = x wᵀ + b in f32, OpenBLAS sgemm where the build found it, else
// plain loops over threads (correct everywhere, a few times slower).
#pragma once

#include <cstdint>

namespace visattn::layer {

// x [rows, in] (row stride ldx), w [out, in] (rows contiguous), b [out] or null,
// y [rows, out] (row stride ldy).
void linear_f32(const float* x, int64_t ldx, int64_t rows, const float* w, const float* b,
                int64_t out_features, int64_t in_features, float* y, int64_t ldy, int threads);

const char* cpu_gemm_name();

}  // namespace visattn::layer
