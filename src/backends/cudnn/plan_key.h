// What a cuDNN plan is built for. A plan bakes in everything below (flashinfer's cuDNN path
// once cached plans without the strides and ran views with the wrong ones), and nothing that
// changes between calls of one bucket: pointers, image lengths and offsets go in at execute.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <string>

#include "visattn/params.h"

namespace visattn::cudnn {

struct PlanKey {
  int device = 0;
  int64_t cudnn_version = 0;
  DType dtype = DType::bf16;
  int64_t batch = 0;       // images per call: the batch bucket (padded with empty images)
  int64_t max_seqlen = 0;  // the longest image the plan runs: a max_seqlen bucket
  // A dense plan (dense_batch.h): exactly `batch` images of exactly `max_seqlen` tokens each,
  // without ragged offsets or a padding mask, which runs cuDNN's dense kernel.
  bool dense = false;
  int num_heads = 0, num_kv_heads = 0, head_dim = 0;
  // Elements between tokens and between heads of q, k, v, out, in that order. A tensor with one
  // head stores its head stride as head_dim: cuDNN never steps over it, so it must not split
  // plans (a [tokens, 1, d] view of a head-major buffer has a token-dependent one).
  std::array<int64_t, 8> strides{};
  bool lse = false;
  int64_t lse_head_stride = 0, lse_token_stride = 0;
  uint32_t scale_bits = 0;  // softmax_scale as float bits: the plan holds it as a constant

  auto operator<=>(const PlanKey&) const = default;

  float softmax_scale() const;
  int64_t token_stride(int tensor) const { return strides[2 * tensor]; }  // 0 q, 1 k, 2 v, 3 out
  int64_t head_stride(int tensor) const { return strides[2 * tensor + 1]; }
};

// The key of a call: `batch` and `max_seqlen` are the plan's sizes (buckets unless `dense`).
PlanKey plan_key(const AttentionParams& params, int64_t batch, int64_t max_seqlen,
                 int64_t cudnn_version, bool dense = false);

// One line for error messages and logs.
std::string describe(const PlanKey& key);

}  // namespace visattn::cudnn
