#include "backends/reference/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/half.h"
#include "core/parallel.h"

namespace visattn::reference {

namespace {

// Keys [first, last] that query `i` of an image of `length` tokens may attend to.
std::pair<int64_t, int64_t> key_range(const AttentionParams& p, int64_t i, int64_t length) {
  const int64_t first = p.window_left < 0 ? 0 : std::max<int64_t>(0, i - p.window_left);
  const int64_t last =
      p.window_right < 0 ? length - 1 : std::min<int64_t>(length - 1, i + p.window_right);
  return {first, last};
}

// One (image, head): every query row of the image for one head, in fp64.
void run_image_head(const AttentionParams& p, int64_t image, int head) {
  const int64_t start = p.cu_seqlens[image];
  const int64_t length = p.cu_seqlens[image + 1] - start;
  const int kv_head = head / (p.num_heads / p.num_kv_heads);
  const int64_t d = p.head_dim;
  std::vector<double> query(d), logits(length), accum(d);

  for (int64_t i = 0; i < length; ++i) {
    const int64_t q_base = (start + i) * p.q_token_stride + head * p.q_head_stride;
    for (int64_t c = 0; c < d; ++c) query[c] = load_as_float(p.q, p.dtype, q_base + c);

    const auto [first, last] = key_range(p, i, length);
    double max_logit = p.sinks ? double(p.sinks[head * p.sinks_stride])
                               : -std::numeric_limits<double>::infinity();
    for (int64_t j = first; j <= last; ++j) {
      const int64_t k_base = (start + j) * p.k_token_stride + kv_head * p.k_head_stride;
      double dot = 0.0;
      for (int64_t c = 0; c < d; ++c) dot += query[c] * load_as_float(p.k, p.dtype, k_base + c);
      logits[j] = dot * p.softmax_scale;
      max_logit = std::max(max_logit, logits[j]);
    }

    double denominator = p.sinks ? std::exp(double(p.sinks[head * p.sinks_stride]) - max_logit)
                                 : 0.0;
    std::fill(accum.begin(), accum.end(), 0.0);
    for (int64_t j = first; j <= last; ++j) {
      const double weight = std::exp(logits[j] - max_logit);
      denominator += weight;
      const int64_t v_base = (start + j) * p.v_token_stride + kv_head * p.v_head_stride;
      for (int64_t c = 0; c < d; ++c) accum[c] += weight * load_as_float(p.v, p.dtype, v_base + c);
    }

    const int64_t out_base = (start + i) * p.out_token_stride + head * p.out_head_stride;
    for (int64_t c = 0; c < d; ++c) {
      store_from_float(p.out, p.dtype, out_base + c, static_cast<float>(accum[c] / denominator));
    }
    if (p.lse) {
      p.lse[head * p.lse_head_stride + (start + i) * p.lse_token_stride] =
          static_cast<float>(max_logit + std::log(denominator));
    }
  }
}

}  // namespace

void run(const AttentionParams& p) {
  parallel_for(p.num_images * p.num_heads, default_num_threads(), [&](int64_t item) {
    run_image_head(p, item / p.num_heads, static_cast<int>(item % p.num_heads));
  });
}

}  // namespace visattn::reference
