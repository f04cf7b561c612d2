// The check oracle: per image and head, q, k and v gathered into fp64 and attention
// computed densely with an explicit visibility predicate — written independently of the
// reference backend so that the two cross-check each other. It also computes the baseline of
// the tolerance rule (input dtype, fp32 accumulation, P rounded before P·V).
#pragma once

#include <vector>

#include "check/case_data.h"

namespace visattn::check {

struct OracleResult {
  std::vector<double> out;      // (token, head, c) order
  std::vector<float> baseline;  // same order
  std::vector<double> lse;      // (head, token) order
};

OracleResult run_oracle(const CaseData& data);

}  // namespace visattn::check
