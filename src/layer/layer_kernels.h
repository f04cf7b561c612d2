// The GPU layer's own kernels (C++17 interface: included by the .cu file).
#pragma once

#include <cstdint>

namespace visattn::layer {

// QK RMSNorm and rotary embedding of every token's q and k, in place in the fused qkv buffer,
// one block per token; the math of layer_state.h's description, in f32.
struct NormRopeParams {
  void* qkv = nullptr;  // [tokens, row_stride] of bf16 (or f16): q | k | v per row
  int64_t row_stride = 0;
  int64_t tokens = 0;
  int num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int norm = 0;  // 0 none, 1 full, 2 per_head
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float eps = 0;
  const float* cos = nullptr;  // null: no rope
  const float* sin = nullptr;
  int64_t cos_stride = 0, sin_stride = 0;
  bool half_width = false;
  bool bf16 = true;
};
void launch_norm_rope(const NormRopeParams& params, void* stream);

// dst row i = src row index[i], rows of row_bytes (a multiple of 2) bytes; strides in bytes.
void launch_gather_rows(const void* src, int64_t src_stride, const int64_t* index, void* dst,
                        int64_t dst_stride, int64_t rows, int64_t row_bytes, void* stream);

}  // namespace visattn::layer
