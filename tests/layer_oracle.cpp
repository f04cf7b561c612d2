#include "layer_oracle.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/half.h"

namespace visattn::testing {

namespace {

// Values rounded to the baseline's dtype (through f32), or kept in fp64 for the reference.
struct Rounder {
  std::optional<DType> dtype;
  double operator()(double v) const { return dtype ? double(round_to_dtype(float(v), *dtype)) : v; }
  double f32(double v) const { return dtype ? double(float(v)) : v; }
};

// y[r] = W x[r] + b, rows of x of length in, W [out, in].
std::vector<double> linear(const std::vector<double>& x, int64_t rows, int64_t in, const std::vector<float>& w,
                           const std::vector<float>& b, int64_t out, const Rounder& round) {
  std::vector<double> y(size_t(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0;  // f32 accumulation in the baseline
      for (int64_t i = 0; i < in; ++i) sum = round.f32(sum + x[size_t(r * in + i)] * w[size_t(o * in + i)]);
      y[size_t(r * out + o)] = round(round.f32(sum + (b.empty() ? 0 : b[size_t(o)])));
    }
  }
  return y;
}

void rms_norm(double* v, int64_t n, const float* w, double eps) {
  double squares = 0;
  for (int64_t i = 0; i < n; ++i) squares += v[i] * v[i];
  const double inv = 1 / std::sqrt(squares / double(n) + eps);
  for (int64_t i = 0; i < n; ++i) v[i] *= inv * w[i];
}

void rotate_half(double* v, int d, const float* cos, const float* sin, bool half_width) {
  std::vector<double> x(v, v + d);
  for (int j = 0; j < d; ++j) {
    const int t = half_width ? j % (d / 2) : j;
    const double partner = j < d / 2 ? -x[size_t(j + d / 2)] : x[size_t(j - d / 2)];
    v[j] = x[size_t(j)] * cos[t] + partner * sin[t];
  }
}

}  // namespace

int64_t LayerCase::tokens() const {
  int64_t total = 0;
  for (int64_t n : lengths) total += n;
  return total;
}

LayerCase make_layer_case(const VisionAttentionConfig& config, std::vector<int64_t> lengths, DType dtype,
                          uint64_t seed, bool half_width_rope) {
  LayerCase c;
  c.config = config;
  if (c.config.num_kv_heads == 0) c.config.num_kv_heads = c.config.num_heads;
  if (c.config.head_dim == 0) c.config.head_dim = int(c.config.embed_dim / c.config.num_heads);
  c.lengths = std::move(lengths);
  const VisionAttentionConfig& k = c.config;
  const int64_t embed = k.embed_dim, d = k.head_dim, q_features = int64_t(k.num_heads) * d;
  const int64_t features = q_features + 2 * int64_t(k.num_kv_heads) * d, tokens = c.tokens();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  auto fill = [&](std::vector<float>& v, int64_t n, float scale, float offset, DType as) {
    v.resize(size_t(n));
    for (float& e : v) e = round_to_dtype(offset + scale * normal(rng), as);
  };
  fill(c.x, tokens * embed, 1, 0, dtype);
  fill(c.qkv_weight, features * embed, float(1 / std::sqrt(double(embed))), 0, dtype);
  if (k.qkv_bias) fill(c.qkv_bias, features, 0.1f, 0, dtype);
  fill(c.proj_weight, embed * q_features, float(1 / std::sqrt(double(q_features))), 0, dtype);
  if (k.proj_bias) fill(c.proj_bias, embed, 0.1f, 0, dtype);
  if (k.qk_norm != QkNorm::none) {
    const bool full = k.qk_norm == QkNorm::full;
    fill(c.q_norm, full ? q_features : d, 0.1f, 1, dtype);
    fill(c.k_norm, full ? int64_t(k.num_kv_heads) * d : d, 0.1f, 1, dtype);
  }
  if (k.rope == Rope::rotate_half) {
    // Qwen2-VL's 2D rope: half the frequencies follow the row, half the column of a patch grid.
    c.rope_width = half_width_rope ? int(d / 2) : int(d);
    const int half = int(d / 2);
    c.cos.resize(size_t(tokens * c.rope_width));
    c.sin.resize(c.cos.size());
    int64_t t = 0;
    for (int64_t n : c.lengths) {
      const int64_t side = std::max<int64_t>(1, int64_t(std::sqrt(double(n))));
      for (int64_t i = 0; i < n; ++i, ++t) {
        for (int j = 0; j < c.rope_width; ++j) {
          const int f = j % half;
          const double position = f < half / 2 ? double(i / side) : double(i % side);
          const double angle = position * std::pow(10000.0, -2.0 * (f % std::max(1, half / 2)) / double(half));
          c.cos[size_t(t * c.rope_width + j)] = float(std::cos(angle));
          c.sin[size_t(t * c.rope_width + j)] = float(std::sin(angle));
        }
      }
    }
  }
  return c;
}

std::vector<double> layer_oracle(const LayerCase& c, std::optional<DType> round_to) {
  const Rounder round{round_to};
  const VisionAttentionConfig& k = c.config;
  const int64_t tokens = c.tokens(), embed = k.embed_dim, d = k.head_dim;
  const int heads = k.num_heads, kv_heads = k.num_kv_heads, group = heads / kv_heads;
  const int64_t q_features = int64_t(heads) * d, kv_features = int64_t(kv_heads) * d;
  const int64_t features = q_features + 2 * kv_features;

  std::vector<double> x(c.x.begin(), c.x.end());
  std::vector<double> qkv = linear(x, tokens, embed, c.qkv_weight, c.qkv_bias, features, round);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int part = 0; part < 2; ++part) {
      double* v = qkv.data() + t * features + (part ? q_features : 0);
      const int n_heads = part ? kv_heads : heads;
      const float* w = part ? c.k_norm.data() : c.q_norm.data();
      if (k.qk_norm == QkNorm::full) rms_norm(v, int64_t(n_heads) * d, w, k.qk_norm_eps);
      for (int h = 0; h < n_heads; ++h) {
        if (k.qk_norm == QkNorm::per_head) rms_norm(v + h * d, d, w, k.qk_norm_eps);
        if (k.rope == Rope::rotate_half) {
          rotate_half(v + h * d, int(d), c.cos.data() + t * c.rope_width, c.sin.data() + t * c.rope_width,
                      c.rope_width != d);
        }
      }
      for (int64_t i = 0; i < int64_t(n_heads) * d; ++i) v[i] = round(v[i]);
    }
  }

  const double scale = k.softmax_scale ? *k.softmax_scale : 1 / std::sqrt(double(d));
  std::vector<double> attended(size_t(tokens * q_features));
  int64_t first = 0;
  for (int64_t n : c.lengths) {
    for (int h = 0; h < heads; ++h) {
      const int kh = h / group;
      for (int64_t i = 0; i < n; ++i) {
        const double* q = qkv.data() + (first + i) * features + h * d;
        std::vector<double> p(static_cast<size_t>(n));
        double top = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          const double* kr = qkv.data() + (first + j) * features + q_features + kh * d;
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot = round.f32(dot + q[e] * kr[e]);
          p[size_t(j)] = round.f32(dot * scale);
          top = std::max(top, p[size_t(j)]);
        }
        for (double& e : p) e = round.f32(std::exp(e - top)), sum += e;
        double* o = attended.data() + (first + i) * q_features + h * d;
        for (int64_t j = 0; j < n; ++j) {
          const double* vr = qkv.data() + (first + j) * features + q_features + kv_features + kh * d;
          const double pj = round(p[size_t(j)]);  // P rounded to the dtype before P·V
          for (int64_t e = 0; e < d; ++e) o[e] = round.f32(o[e] + pj * vr[e]);
        }
        for (int64_t e = 0; e < d; ++e) o[e] = round(o[e] / sum);
      }
    }
    first += n;
  }
  return linear(attended, tokens, q_features, c.proj_weight, c.proj_bias, embed, round);
}

}  // namespace visattn::testing
