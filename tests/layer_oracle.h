// The attention layer composed from plain reference operations, for the layer tests: GEMMs,
// RMSNorm, rotate-half rope and per-image softmax attention as loops. In fp64 it is the
// reference; with `round_to` set it is the baseline of the tolerance rule (fp32 arithmetic,
// values rounded to the dtype wherever the layer stores them, P rounded before P·V).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "visattn/layer.h"

namespace visattn::testing {

struct LayerCase {
  VisionAttentionConfig config;  // normalized (num_kv_heads, head_dim filled in)
  std::vector<int64_t> lengths;  // tokens per image
  // Host values, already rounded to the dtype under test (norm weights and rope tables: f32).
  std::vector<float> x, qkv_weight, qkv_bias, q_norm, k_norm, proj_weight, proj_bias;
  std::vector<float> cos, sin;  // [tokens, rope_width]
  int rope_width = 0;           // head_dim or head_dim / 2
  int64_t tokens() const;
};

// Random weights with the scale of trained ones (1/sqrt(fan_in)), unit-variance x, rope tables
// of 2D positions; every value rounded to `dtype`.
LayerCase make_layer_case(const VisionAttentionConfig& config, std::vector<int64_t> lengths, DType dtype,
                          uint64_t seed, bool half_width_rope = false);

// [tokens, embed_dim] outputs, row-major. round_to: the baseline's dtype, or the fp64 reference.
std::vector<double> layer_oracle(const LayerCase& c, std::optional<DType> round_to);

}  // namespace visattn::testing
