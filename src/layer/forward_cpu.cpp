// The layer's forward pass on the CPU: f32 GEMMs (OpenBLAS), QK norm and rotary embedding in
// one pass over each token's q and k, attention on strided views of the fused qkv buffer.
#include <cmath>
#include <vector>

#include "backends/cpu/rows.h"
#include "core/parallel.h"
#include "layer/gemm_cpu.h"
#include "layer/layer_state.h"

namespace visattn::layer {

namespace {

constexpr int64_t kTokensPerItem = 64;  // parallel_for granularity of the per-token passes

// Calls body(first, end) over token ranges on the layer's threads.
template <typename Body>
void for_token_ranges(int64_t tokens, int threads, const Body& body) {
  const int64_t items = (tokens + kTokensPerItem - 1) / kTokensPerItem;
  parallel_for(items, threads ? threads : default_num_threads(), [&](int64_t item) {
    body(item * kTokensPerItem, std::min(tokens, (item + 1) * kTokensPerItem));
  });
}

// x * rsqrt(mean(x^2) + eps) * w over `n` values, w of length n.
void rms_norm(float* x, int64_t n, const float* w, double eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * x[i];
  const float inv = float(1.0 / std::sqrt(sum / double(n) + eps));
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * w[i];
}

void rotate_half(float* x, int d, const float* cos, const float* sin, bool half_width) {
  const int half = d / 2;
  for (int j = 0; j < half; ++j) {
    const float a = x[j], b = x[j + half];
    const float c0 = cos[j], s0 = sin[j];
    const float c1 = half_width ? cos[j] : cos[j + half], s1 = half_width ? sin[j] : sin[j + half];
    x[j] = a * c0 - b * s0;
    x[j + half] = b * c1 + a * s1;
  }
}

// q then k of one token's qkv row, normalized and rotated in place.
void norm_and_rotate(const LayerState& layer, float* row, int64_t token, const RopeTables& rope) {
  const VisionAttentionConfig& c = layer.config;
  const int d = c.head_dim;
  for (int part = 0; part < 2; ++part) {
    float* values = row + (part == 0 ? 0 : layer.q_features());
    const int heads = part == 0 ? c.num_heads : c.num_kv_heads;
    const float* w = part == 0 ? layer.q_norm : layer.k_norm;
    if (c.qk_norm == QkNorm::full) rms_norm(values, int64_t(heads) * d, w, c.qk_norm_eps);
    for (int h = 0; h < heads; ++h) {
      float* head = values + int64_t(h) * d;
      if (c.qk_norm == QkNorm::per_head) rms_norm(head, d, w, c.qk_norm_eps);
      if (rope.cos) {
        rotate_half(head, d, rope.cos + token * rope.cos_stride, rope.sin + token * rope.sin_stride, rope.half_width);
      }
    }
  }
}

// Rows of a [tokens, features] tensor of `dtype` converted to f32 and back.
void rows_to_f32(const void* src, DType dtype, int64_t src_stride, int64_t tokens, int64_t features, float* dst,
                 int threads) {
  for_token_ranges(tokens, threads, [&](int64_t first, int64_t end) {
    for (int64_t t = first; t < end; ++t) {
      cpu::load_row(src, dtype, t * src_stride, int(features), dst + t * features);
    }
  });
}

void rows_from_f32(const float* src, int64_t tokens, int64_t features, void* dst, DType dtype, int64_t dst_stride,
                   int threads) {
  for_token_ranges(tokens, threads, [&](int64_t first, int64_t end) {
    for (int64_t t = first; t < end; ++t) {
      cpu::store_row(dst, dtype, t * dst_stride, src + t * features, int(features));
    }
  });
}

}  // namespace

void forward_cpu(const LayerState& layer, const TensorView& x, const VarlenBatch& batch, const TensorView& out,
                 const RopeTables& rope, const VisionAttentionCall& call) {
  const int64_t tokens = batch.total_tokens(), embed = layer.config.embed_dim;
  const int64_t features = layer.qkv_features(), q_features = layer.q_features();
  const int threads = call.num_threads;
  const bool f32 = layer.dtype == DType::f32;

  std::vector<float> x32;
  const float* x_rows = static_cast<const float*>(x.data);
  int64_t x_stride = x.stride[0];
  if (!f32) {
    x32.resize(size_t(tokens * embed));
    rows_to_f32(x.data, x.dtype, x.stride[0], tokens, embed, x32.data(), threads);
    x_rows = x32.data(), x_stride = embed;
  }
  std::vector<float> qkv32(size_t(tokens * features));
  linear_f32(x_rows, x_stride, tokens, layer.qkv_weight_f32, layer.qkv_bias_f32, features, embed, qkv32.data(),
             features, threads);
  if (layer.config.qk_norm != QkNorm::none || rope.cos) {
    for_token_ranges(tokens, threads, [&](int64_t first, int64_t end) {
      for (int64_t t = first; t < end; ++t) norm_and_rotate(layer, qkv32.data() + t * features, t, rope);
    });
  }

  // Attention reads q, k, v in the layer's dtype, as views of one buffer.
  std::vector<uint16_t> qkv16;
  void* qkv = qkv32.data();
  if (!f32) {
    qkv16.resize(qkv32.size());
    rows_from_f32(qkv32.data(), tokens, features, qkv16.data(), layer.dtype, features, threads);
    qkv = qkv16.data();
  }
  std::vector<float> attended32(size_t(tokens * q_features));
  std::vector<uint16_t> attended16(f32 ? 0 : attended32.size());
  attend(layer, qkv, f32 ? static_cast<void*>(attended32.data()) : attended16.data(), batch, call);
  if (!f32) rows_to_f32(attended16.data(), layer.dtype, q_features, tokens, q_features, attended32.data(), threads);

  if (f32) {
    linear_f32(attended32.data(), q_features, tokens, layer.proj_weight_f32, layer.proj_bias_f32, embed, q_features,
               static_cast<float*>(out.data), out.stride[0], threads);
    return;
  }
  std::vector<float> out32(size_t(tokens * embed));
  linear_f32(attended32.data(), q_features, tokens, layer.proj_weight_f32, layer.proj_bias_f32, embed, q_features,
             out32.data(), embed, threads);
  rows_from_f32(out32.data(), tokens, embed, out.data, layer.dtype, out.stride[0], threads);
}

}  // namespace visattn::layer
