// The CUDA kernel's parameters and its launch entry point, in plain C++ (no visattn or C++20
// headers), so the host code (C++20) and the kernels (nvcc, C++17) share them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace visattn::cuda {

// What the kernel reads: AttentionParams in device terms.
struct KernelParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  int64_t q_token_stride, q_head_stride, k_token_stride, k_head_stride;
  int64_t v_token_stride, v_head_stride, out_token_stride, out_head_stride;
  int num_heads, num_kv_heads, head_dim;
  const int32_t* cu_seqlens;  // device, num_images + 1
  // device, per tile, heaviest first: (first image, end image, first query row, unused). A tile
  // of one image (end = first + 1) holds up to kTileRows of its rows from the first; a packed
  // tile holds whole consecutive images, kTileRows tokens at most, masked block-diagonally.
  const int4* schedule;
  const int32_t* tile_count;  // device: tiles in the schedule; blocks past it exit (fixed grid)
  float scale_log2;           // softmax_scale * log2(e)
  int64_t window_left, window_right;
  const float* sinks;  // device [num_heads] (stride sinks_stride) or null
  int64_t sinks_stride;
  float* lse;  // device [num_heads, tokens] or null
  int64_t lse_head_stride, lse_token_stride;
  // q, k, v, out 16-byte aligned with strides and head_dim multiples of 8 elements: tiles move
  // in 16-byte copies (cp.async); otherwise element by element.
  bool vector_io;
};

// Query rows of every tile of the kernel (one tile schedule serves every head dim).
constexpr int kTileRows = 64;

// Launches the forward kernel for bf16 (else f16) inputs at a padded head dim of 32, 64, 80,
// 96, 128 or 256; returns the launch status.
cudaError_t launch_flash_forward(const KernelParams& params, bool bf16, int head_dim_pad,
                                 dim3 grid, cudaStream_t stream);

}  // namespace visattn::cuda
