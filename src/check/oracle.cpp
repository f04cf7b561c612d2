#include "check/oracle.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/half.h"
#include "core/parallel.h"

namespace visattn::check {

namespace {

bool visible(const AttentionOptions& o, int64_t query, int64_t key) {
  if (o.window_left >= 0 && key < query - o.window_left) return false;
  if (o.window_right >= 0 && key > query + o.window_right) return false;
  return true;
}

// Rows [start, start + length) of one head of a view, as doubles, row-major.
std::vector<double> gather(const TensorView& view, int64_t start, int64_t length, int64_t head) {
  const int64_t d = view.shape[2];
  std::vector<double> rows(length * d);
  for (int64_t t = 0; t < length; ++t)
    for (int64_t c = 0; c < d; ++c) rows[t * d + c] = element(view, start + t, head, c);
  return rows;
}

}  // namespace

OracleResult run_oracle(const CaseData& data) {
  const TensorView& q = data.q;
  const int64_t T = q.shape[0], H = q.shape[1], D = q.shape[2];
  const int64_t group = H / data.k.shape[1];
  const DType dt = q.dtype;
  const auto& cu = data.batch.cu_seqlens();
  const double scale = data.options.softmax_scale.value_or(1.0 / std::sqrt(double(D)));
  const float scale_f = static_cast<float>(scale);

  OracleResult r;
  r.out.assign(T * H * D, 0.0);
  r.baseline.assign(T * H * D, 0.0f);
  r.lse.assign(H * T, 0.0);

  const int64_t images = data.batch.num_images();
  parallel_for(images * H, default_num_threads(), [&](int64_t item) {
    const int64_t image = item / H, head = item % H;
    const int64_t start = cu[image], n = cu[image + 1] - cu[image];
    const std::vector<double> qs = gather(q, start, n, head);
    const std::vector<double> ks = gather(data.k, start, n, head / group);
    const std::vector<double> vs = gather(data.v, start, n, head / group);
    const bool has_sink = data.sinks.has_value();
    const double sink = has_sink ? data.sink_values[head] : 0.0;

    std::vector<double> logits(n);
    std::vector<float> logits_f(n), probs_f(n);
    std::vector<double> acc(D);
    std::vector<float> acc_f(D);
    for (int64_t i = 0; i < n; ++i) {
      // fp64: two passes over the visible keys.
      double row_max = has_sink ? sink : -std::numeric_limits<double>::infinity();
      float row_max_f = has_sink ? float(sink) : -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        if (!visible(data.options, i, j)) continue;
        double dot = 0;
        float dot_f = 0;
        for (int64_t c = 0; c < D; ++c) {
          dot += qs[i * D + c] * ks[j * D + c];
          dot_f += float(qs[i * D + c]) * float(ks[j * D + c]);
        }
        logits[j] = dot * scale;
        logits_f[j] = dot_f * scale_f;
        row_max = std::max(row_max, logits[j]);
        row_max_f = std::max(row_max_f, logits_f[j]);
      }
      double sum = has_sink ? std::exp(sink - row_max) : 0.0;
      float sum_f = has_sink ? std::exp(float(sink) - row_max_f) : 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        if (!visible(data.options, i, j)) continue;
        logits[j] = std::exp(logits[j] - row_max);
        sum += logits[j];
        probs_f[j] = std::exp(logits_f[j] - row_max_f);
        sum_f += probs_f[j];
        probs_f[j] = round_to_dtype(probs_f[j], dt);  // P in the input dtype before P·V
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      std::fill(acc_f.begin(), acc_f.end(), 0.0f);
      for (int64_t j = 0; j < n; ++j) {
        if (!visible(data.options, i, j)) continue;
        for (int64_t c = 0; c < D; ++c) {
          acc[c] += logits[j] * vs[j * D + c];
          acc_f[c] += probs_f[j] * float(vs[j * D + c]);
        }
      }
      const int64_t row = ((start + i) * H + head) * D;
      for (int64_t c = 0; c < D; ++c) {
        r.out[row + c] = acc[c] / sum;
        r.baseline[row + c] = round_to_dtype(acc_f[c] / sum_f, dt);
      }
      r.lse[head * T + start + i] = row_max + std::log(sum);
    }
  });
  return r;
}

}  // namespace visattn::check
