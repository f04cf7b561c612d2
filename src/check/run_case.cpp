#include "check/run_case.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "check/case_data.h"
#include "check/device_case.h"
#include "check/oracle.h"
#include "core/backend.h"
#include "core/validate.h"
#include "visattn/error.h"

namespace visattn::check {

namespace {
// The named backend ("auto" checks the CPU's choice); null if unknown.
std::optional<BackendInfo> find_backend(std::string_view backend) {
  const std::string name = backend == "auto" ? auto_backend(DeviceType::cpu) : std::string(backend);
  for (BackendInfo& b : backends()) {
    if (b.name == name) return std::move(b);
  }
  return std::nullopt;
}

DeviceType backend_device(std::string_view backend) {
  const auto b = find_backend(backend);
  return b ? b->device : DeviceType::cpu;
}

}  // namespace

std::string declined_by(std::string_view backend, const TensorView& q, const TensorView& k,
                        const TensorView& v, const TensorView& out, const VarlenBatch& batch,
                        const AttentionOptions& options) {
  const auto& table = backend_table();
  const auto it = std::find_if(table.begin(), table.end(), [&](const Backend& b) { return backend == b.name; });
  if (it == table.end() || !it->declines) return {};
  AttentionParams params;
  try {
    params = validate_attention_args(q, k, v, out, batch, options);
  } catch (const Error&) {
    return {};
  }
  return it->declines(params).value_or(std::string());
}

std::string skip_category(const std::string& reason) { return reason.substr(0, reason.find(':')); }

std::string unsupported_by(std::string_view backend, const CaseSpec& spec) {
  const auto b = find_backend(backend);
  if (!b) return {};  // unknown names fail in attention() with the proper message
  if (std::find(b->dtypes.begin(), b->dtypes.end(), spec.dtype) == b->dtypes.end()) {
    return std::string("dtype ") + dtype_name(spec.dtype);
  }
  if (b->max_head_dim > 0 && spec.head_dim > b->max_head_dim) {
    return "head_dim " + std::to_string(spec.head_dim);
  }
  return {};
}

CaseResult run_case(const CaseSpec& spec, std::string_view backend) {
  CaseResult result{spec, {}, {}};
  CaseData data = make_case_data(spec);
  try {
    if (backend_device(backend) == DeviceType::cuda) {
      const DeviceCase device(data, 0);  // the views as the backend gets them: device addresses
      result.skipped = declined_by(backend, device.q, device.k, device.v, device.out, data.batch, device.options);
      if (!result.skipped.empty()) return result;
      attention(device.q, device.k, device.v, device.out, data.batch, device.options, backend);
      device.copy_outputs_to(data);
    } else {
      result.skipped = declined_by(backend, data.q, data.k, data.v, data.out, data.batch, data.options);
      if (!result.skipped.empty()) return result;
      attention(data.q, data.k, data.v, data.out, data.batch, data.options, backend);
    }
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
