// visattn: AttentionParams, the plain struct every backend's run() receives.
// Core fills it after validating the user's arguments; backends trust it and never
// re-validate. Strides are in elements; head_dim is contiguous in every tensor.
#pragma once

#include <cstdint>

#include "visattn/tensor.h"

namespace visattn {

struct AttentionParams {
  DType dtype;    // of q, k, v and out
  Device device;  // of every tensor below

  const void* q;  // [total_tokens, num_heads, head_dim]
  const void* k;  // [total_tokens, num_kv_heads, head_dim]
  const void* v;  // [total_tokens, num_kv_heads, head_dim]
  void* out;      // [total_tokens, num_heads, head_dim]; no overlap with any input
  int64_t q_token_stride, q_head_stride;
  int64_t k_token_stride, k_head_stride;
  int64_t v_token_stride, v_head_stride;
  int64_t out_token_stride, out_head_stride;

  int64_t total_tokens;  // == cu_seqlens[num_images]
  int num_heads;
  int num_kv_heads;  // divides num_heads; head h reads kv head h / (num_heads / num_kv_heads)
  int head_dim;

  int64_t num_images;
  const int32_t* cu_seqlens;  // host, num_images + 1 validated offsets
  int64_t max_seqlen;         // >= every image's length

  double softmax_scale;  // finite
  int64_t window_left;   // -1: unbounded; else query i sees keys >= i - window_left
  int64_t window_right;  // -1: unbounded; else query i sees keys <= i + window_right

  const float* sinks;  // [num_heads] extra logit per head, or null
  int64_t sinks_stride;
  float* lse;          // [num_heads, total_tokens] natural-log denominators, or null
  int64_t lse_head_stride, lse_token_stride;

  int num_threads;    // CPU backends: threads to use; 0 means the default
  void* cuda_stream;  // CUDA backends: cudaStream_t, null for the default stream
  const struct DeviceMetadata* prepared;  // the batch prepared for this device, or null
};

}  // namespace visattn
