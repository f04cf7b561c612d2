// What a VisionAttentionLayer holds once built, shared by its CPU and GPU forward passes.
#pragma once

#include <memory>
#include <vector>

#include "visattn/layer.h"

namespace visattn::layer {

struct LayerState {
  VisionAttentionConfig config;  // num_kv_heads and head_dim filled in
  DType dtype = DType::f32;
  Device device{};
  VisionAttentionWeights weights;  // views, possibly into `owned`
  // Norm weights as f32 on the layer's device (null when qk_norm is none).
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  // CPU layers: the projection weights and biases as f32 (views of `weights` for f32 layers).
  const float* qkv_weight_f32 = nullptr;
  const float* qkv_bias_f32 = nullptr;
  const float* proj_weight_f32 = nullptr;
  const float* proj_bias_f32 = nullptr;
  std::vector<std::shared_ptr<void>> owned;  // storage the layer owns (host or device)

  int64_t q_features() const { return int64_t(config.num_heads) * config.head_dim; }
  int64_t kv_features() const { return int64_t(config.num_kv_heads) * config.head_dim; }
  int64_t qkv_features() const { return q_features() + 2 * kv_features(); }
  double softmax_scale() const;
};

// The attention step of a forward pass: q, k and v as strided views of the fused qkv buffer
// ([tokens, qkv_features], dtype of the layer), out as [tokens, num_heads, head_dim].
void attend(const LayerState& layer, void* qkv, void* attention_out, const VarlenBatch& batch,
            const VisionAttentionCall& call);

// The rows of one token's q and k in a qkv row, normalized and rotated in place (f32 math).
// Shared description of the math both devices implement:
//   norm: x * rsqrt(mean(x^2) + eps) * w over all heads of q (k) [full] or over each head [per_head]
//   rope: x[j] * cos[j] + r[j] * sin[j], r = [-x[d/2:], x[:d/2]] per head, after the norm
struct RopeTables {
  const float* cos = nullptr;  // null: no rope
  const float* sin = nullptr;
  int64_t cos_stride = 0, sin_stride = 0;  // elements between tokens' rows
  bool half_width = false;                 // rows hold head_dim / 2 values, used as cat(t, t)
};

void forward_cpu(const LayerState& layer, const TensorView& x, const VarlenBatch& batch,
                 const TensorView& out, const RopeTables& rope, const VisionAttentionCall& call);
void forward_cuda(const LayerState& layer, const TensorView& x, const VarlenBatch& batch,
                  const TensorView& out, const RopeTables& rope, const VisionAttentionCall& call);

}  // namespace visattn::layer

namespace visattn {
struct VisionAttentionLayer::State : layer::LayerState {};
}  // namespace visattn
