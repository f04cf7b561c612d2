#include "check/tolerance.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/half.h"

namespace visattn::check {

double error_cap(DType dtype, double logit_std) {
  const double growth = std::max(1.0, logit_std);
  switch (dtype) {
    case DType::f32: return 1e-5 * growth;
    case DType::f16: return 3e-3 * growth;
    case DType::bf16: return 2e-2 * growth;
  }
  return 0;
}

namespace {
// Rounding slack of the dtype around a value: |((R + 0.3) - 0.3) - R| in dtype arithmetic.
double rounding_slack(double ref, DType dtype) {
  const float r = round_to_dtype(static_cast<float>(ref), dtype);
  const float up = round_to_dtype(r + 0.3f, dtype);
  const float back = round_to_dtype(up - 0.3f, dtype);
  return std::fabs(double(back) - double(r));
}
}  // namespace

Verdict judge_output(std::span<const float> out, std::span<const double> ref,
                     std::span<const float> baseline, DType dtype, double logit_std) {
  Verdict v;
  double atol = 0;
  size_t nonfinite = 0, first_nonfinite = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) {
      if (nonfinite++ == 0) first_nonfinite = i;
      continue;
    }
    v.max_error = std::max(v.max_error, std::fabs(double(out[i]) - ref[i]));
    v.baseline_error = std::max(v.baseline_error, std::fabs(double(baseline[i]) - ref[i]));
    atol = std::max(atol, 2 * rounding_slack(ref[i], dtype));
  }
  v.bound = std::min(2 * v.baseline_error + atol, error_cap(dtype, logit_std));
  std::ostringstream why;
  if (nonfinite) {
    why << nonfinite << " non-finite outputs (first at element " << first_nonfinite << ": "
        << out[first_nonfinite] << ")";
  } else if (v.max_error > v.bound) {
    why << "max error " << v.max_error << " > bound " << v.bound << " (baseline error "
        << v.baseline_error << ", cap " << error_cap(dtype, logit_std) << ")";
  }
  v.failure = why.str();
  v.passed = v.failure.empty();
  return v;
}

Verdict judge_layer_output(std::span<const float> out, std::span<const double> ref,
                           std::span<const float> baseline, DType dtype) {
  double squares = 0;
  for (double r : ref) squares += r * r;
  const double rms = ref.empty() ? 0 : std::sqrt(squares / double(ref.size()));
  return judge_output(out, ref, baseline, dtype, 2 * std::max(1.0, rms));
}

void judge_lse(std::span<const float> lse, std::span<const double> ref, Verdict& verdict) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const double error = std::fabs(double(lse[i]) - ref[i]);
    if (!(error <= 1e-4 + 1e-5 * std::fabs(ref[i]))) {  // also catches NaN
      if (verdict.passed) {
        std::ostringstream why;
        why << "lse[" << i << "]=" << lse[i] << " differs from " << ref[i] << " by " << error;
        verdict.failure = why.str();
        verdict.passed = false;
      }
    }
    if (std::isfinite(error)) verdict.max_lse_error = std::max(verdict.max_lse_error, error);
  }
}

}  // namespace visattn::check
