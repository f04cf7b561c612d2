#include "check/run_case.h"

#include <cmath>
#include <sstream>

#include "check/case_data.h"
#include "check/oracle.h"
#include "visattn/error.h"

namespace visattn::check {

CaseResult run_case(const CaseSpec& spec, std::string_view backend) {
  CaseResult result{spec, {}};
  CaseData data = make_case_data(spec);
  try {
    attention(data.q, data.k, data.v, data.out, data.batch, data.options, backend);
  } catch (const Error& e) {
    result.verdict.passed = false;
    result.verdict.failure = std::string("backend raised: ") + e.what();
    return result;
  }
  const OracleResult ref = run_oracle(data);
  const std::vector<float> out = read_all(data.out);
  const double scale = spec.softmax_scale.value_or(1.0 / std::sqrt(double(spec.head_dim)));
  const double logit_std = std::fabs(scale) * std::sqrt(double(spec.head_dim));
  result.verdict = judge_output(out, ref.out, ref.baseline, spec.dtype, logit_std);
  if (data.lse) {
    const auto* lse = static_cast<const float*>(data.lse->data);
    judge_lse({lse, ref.lse.size()}, ref.lse, result.verdict);
  }
  if (result.verdict.passed) {
    if (std::string why = check_untouched(data); !why.empty()) {
      result.verdict.passed = false;
      result.verdict.failure = why;
    }
  }
  return result;
}

std::string reproduce_command(const CaseSpec& spec, std::string_view backend) {
  std::ostringstream os;
  os << "visattn check --backend " << backend << " --seed " << spec.seed << " --case "
     << spec.index;
  return os.str();
}

}  // namespace visattn::check
