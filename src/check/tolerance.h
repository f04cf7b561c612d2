// The one tolerance rule of the project (DESIGN.md, "Numerics"), defined once.
//
// Reference: fp64 softmax(QKᵀ·scale)V per image from the dtype-rounded inputs.
// Baseline: the same math in the input dtype, fp32 accumulation, P rounded before P·V.
// Pass when  max|out - ref| <= 2 * max|baseline - ref| + atol_dtype  and  <= cap(dtype),
// with atol_dtype = 2 * max|((R + 0.3) - 0.3) - R| in the dtype (R = ref rounded to it),
// and every output finite. LSE passes when |lse - ref| <= 1e-4 + 1e-5 * |ref|.
// The caps hold for unit-variance logits (default scale 1/sqrt(head_dim) on unit-variance
// inputs); fp rounding of the logits grows with their size, so for a larger scale the cap
// grows by the logit standard deviation scale * sqrt(head_dim). The relative bound is kept.
#pragma once

#include <span>
#include <string>

#include "visattn/tensor.h"

namespace visattn::check {

// Absolute error cap for logits of standard deviation `logit_std` (1 with the default scale).
double error_cap(DType dtype, double logit_std = 1.0);

struct Verdict {
  bool passed = true;
  double max_error = 0;     // max|out - ref|
  double baseline_error = 0;  // max|baseline - ref|
  double bound = 0;         // min(2 * baseline_error + atol_dtype, cap)
  double max_lse_error = 0;
  std::string failure;      // why it failed, empty when passed
};

// out, ref and baseline hold the same elements in the same order.
Verdict judge_output(std::span<const float> out, std::span<const double> ref,
                     std::span<const float> baseline, DType dtype, double logit_std = 1.0);
// The attention layer (GEMM, QK norm, rope, attention, GEMM) under the same rule: the baseline is
// the layer composed in the dtype (fp32 arithmetic, rounded where the layer stores values), and
// the cap, set for unit-variance attention outputs, doubles for the layer's extra rounding
// stages and grows with the outputs' RMS.
Verdict judge_layer_output(std::span<const float> out, std::span<const double> ref,
                           std::span<const float> baseline, DType dtype);
// Adds the LSE check to an existing verdict.
void judge_lse(std::span<const float> lse, std::span<const double> ref, Verdict& verdict);

}  // namespace visattn::check
