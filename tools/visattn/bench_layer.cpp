#include "bench_layer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "core/half.h"
#include "visattn/visattn.h"

namespace visattn::cli {

namespace {

using Clock = std::chrono::steady_clock;

// A tensor of `dtype` with normal values times `scale`, in 4-byte words so f32 is aligned.
struct Filled {
  std::vector<uint32_t> words;
  TensorView view;
  Filled(std::initializer_list<int64_t> shape, DType dtype, float scale, std::mt19937_64& rng) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    words.resize(size_t(n * dtype_size(dtype) + 3) / 4 + 1);
    view = TensorView::contiguous(words.data(), dtype, shape);
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < n; ++i) store_from_float(words.data(), dtype, i, scale * normal(rng));
  }
};

}  // namespace

LayerTiming time_layer(const Workload& w, DType dtype, const std::string& backend) {
  std::mt19937_64 rng(3);
  const int64_t embed = int64_t(w.heads) * w.head_dim, tokens = w.tokens();
  VisionAttentionConfig config;
  config.embed_dim = embed, config.num_heads = w.heads, config.head_dim = w.head_dim;
  config.rope = Rope::rotate_half;
  const float weight_scale = float(1 / std::sqrt(double(embed)));
  Filled qkv_weight({3 * embed, embed}, dtype, weight_scale, rng), qkv_bias({3 * embed}, dtype, 0.1f, rng);
  Filled proj_weight({embed, embed}, dtype, weight_scale, rng), proj_bias({embed}, dtype, 0.1f, rng);
  Filled x({tokens, embed}, dtype, 1, rng), out({tokens, embed}, dtype, 0, rng);
  VisionAttentionWeights weights;
  weights.qkv_weight = qkv_weight.view, weights.qkv_bias = qkv_bias.view;
  weights.proj_weight = proj_weight.view, weights.proj_bias = proj_bias.view;
  const VisionAttentionLayer layer(config, weights);

  std::vector<float> cos(size_t(tokens * w.head_dim / 2)), sin(cos.size());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < w.head_dim / 2; ++j) {
      const double angle = double(t % 64) * std::pow(10000.0, -2.0 * j / w.head_dim);
      cos[size_t(t * w.head_dim / 2 + j)] = float(std::cos(angle)), sin[size_t(t * w.head_dim / 2 + j)] = float(std::sin(angle));
    }
  }
  VisionAttentionCall call;
  call.cos = TensorView::contiguous(cos.data(), DType::f32, {tokens, w.head_dim / 2});
  call.sin = TensorView::contiguous(sin.data(), DType::f32, {tokens, w.head_dim / 2});
  call.backend = backend;
  const VarlenBatch batch = VarlenBatch::from_lengths(w.seqlens);

  layer.forward(x.view, batch, out.view, call);  // warm-up
  std::vector<double> ms;
  const auto start = Clock::now();
  while (ms.size() < 50 && (ms.size() < 3 || std::chrono::duration<double>(Clock::now() - start).count() < 0.5)) {
    const auto replay = Clock::now();
    layer.forward(x.view, batch, out.view, call);
    ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - replay).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return {ms[ms.size() / 2], 8.0 * double(tokens) * double(embed) * double(embed) + w.flops()};
}

}  // namespace visattn::cli
