// cuBLASLt, opened at run time (like cuDNN): a machine whose loader path lacks it still loads
// visattn, and only the GPU layer reports it missing. Inside a process that imported torch,
// torch's copy (same soname) is the one used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "visattn/tensor.h"

namespace visattn::layer {

// y = x wᵀ + b on the GPU, fp32 accumulation, the bias added in the epilogue.
// x [rows, in] (row stride ldx), w [out, in] (row stride ldw), b [out] or null, y [rows, out]
// (row stride ldy), all of `dtype` (bf16 or f16). workspace: kGemmWorkspaceBytes of device memory.
void linear_cuda(const void* x, int64_t ldx, int64_t rows, const void* w, int64_t ldw, const void* b, int64_t out_features,
                 int64_t in_features, void* y, int64_t ldy, DType dtype, int device, void* stream,
                 void* workspace);

constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;

// "cuBLASLt 13.x (path)", or why it cannot be loaded.
std::string cublaslt_description();

}  // namespace visattn::layer
