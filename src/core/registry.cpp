#include <algorithm>
#include <sstream>

#include "backends/cpu/cpu_backend.h"
#if VISATTN_WITH_CUDA
#include "backends/cuda/cuda_backend.h"
#endif
#if VISATTN_WITH_CUDNN
#include "backends/cudnn/cudnn_backend.h"
#endif
#include "backends/reference/reference.h"
#include "core/backend.h"
#include "core/error_message.h"
#include "core/log.h"

namespace visattn {

namespace {

std::string always_available() { return {}; }

std::string list_names(const std::vector<const Backend*>& backends) {
  if (backends.empty()) return "none";
  std::ostringstream os;
  for (size_t i = 0; i < backends.size(); ++i) os << (i ? ", " : "") << backends[i]->name;
  return os.str();
}

std::vector<const Backend*> available_for(DeviceType device) {
  std::vector<const Backend*> result;
  for (const Backend& b : backend_table()) {
    if (b.device == device && b.unavailable_reason().empty()) result.push_back(&b);
  }
  return result;
}

// Backends of `device`, highest auto_priority first (table order among equals). "auto" walks
// them in this order and asks a backend whether it is available only when every better one
// failed, so a lower backend (cudnn, which loads a library to answer) costs nothing while a
// better one runs the call.
std::vector<const Backend*> by_priority(DeviceType device) {
  std::vector<const Backend*> result;
  for (const Backend& b : backend_table()) {
    if (b.device == device) result.push_back(&b);
  }
  std::stable_sort(result.begin(), result.end(),
                   [](const Backend* a, const Backend* b) { return a->auto_priority > b->auto_priority; });
  return result;
}

// Empty when `backend` runs this dtype and head_dim; otherwise why not.
std::string unsupported_reason(const Backend& backend, const AttentionParams& p) {
  if (std::find(backend.dtypes.begin(), backend.dtypes.end(), p.dtype) == backend.dtypes.end()) {
    std::ostringstream os;
    os << "dtype " << dtype_name(p.dtype) << " is not supported (supported:";
    for (DType d : backend.dtypes) os << " " << dtype_name(d);
    os << ")";
    return os.str();
  }
  if (backend.max_head_dim > 0 && p.head_dim > backend.max_head_dim) {
    return concat("head_dim ", p.head_dim, " is not supported (at most ", backend.max_head_dim, ")");
  }
  if (!backend.head_dims.empty() &&
      std::find(backend.head_dims.begin(), backend.head_dims.end(), p.head_dim) ==
          backend.head_dims.end()) {
    std::ostringstream os;
    os << "head_dim " << p.head_dim << " is not supported (supported:";
    for (int d : backend.head_dims) os << " " << d;
    os << ")";
    return os.str();
  }
  if (backend.declines) {
    if (std::optional<std::string> why = backend.declines(p)) return *why;
  }
  return {};
}

}  // namespace

const std::vector<Backend>& backend_table() {
  static const std::vector<Backend> table = {
      {"reference", "plain loops, fp64 accumulation; the test oracle", DeviceType::cpu, 0,
       {DType::f32, DType::f16, DType::bf16}, {}, 0, always_available, nullptr, reference::run},
      {"cpu", "flash-style tiles, online softmax, SIMD by runtime dispatch, cost-balanced threads",
       DeviceType::cpu, 10, {DType::f32, DType::f16, DType::bf16}, {}, 0, always_available,
       cpu::describe_paths, cpu::run},
#if VISATTN_WITH_CUDA
      {"cuda", "one-launch varlen flash attention on tensor cores (sm80+)", DeviceType::cuda, 10,
       {DType::f16, DType::bf16}, {}, 256, cuda::unavailable_reason, cuda::describe, cuda::run},
#endif
#if VISATTN_WITH_CUDNN
      // Below `cuda`, and ahead of it where the bench shows it faster (auto_table.h); never
      // picked by auto for calls it declines (windows, sinks, misaligned views), nor where
      // cuDNN is missing.
      {"cudnn", "cuDNN fused attention (graph SDPA), ragged layout: one call per batch, plans cached by bucket",
       DeviceType::cuda, 5, {DType::f16, DType::bf16}, {}, 256, cudnn::unavailable_reason,
       cudnn::describe, cudnn::run, cudnn::declines, cudnn::plans_built, cudnn::auto_prefers},
#endif
  };
  return table;
}

const Backend& select_backend(std::string_view requested, const AttentionParams& p) {
  const auto& table = backend_table();
  if (requested == "auto") {
    // First a backend that prefers this call (its measured shapes), if it can run it.
    for (const Backend* b : by_priority(p.device.type)) {
      if (b->auto_prefers && b->auto_prefers(p) && b->unavailable_reason().empty() &&
          unsupported_reason(*b, p).empty()) {
        if (debug_log_enabled()) {
          debug_log(concat("auto chose backend '", b->name, "' (it leads on this shape) for ",
                           device_name(p.device), " ", dtype_name(p.dtype), " head_dim ", p.head_dim));
        }
        return *b;
      }
    }
    std::string why;  // what each available backend of that device lacks
    for (const Backend* b : by_priority(p.device.type)) {
      if (!b->unavailable_reason().empty()) continue;
      if (std::string reason = unsupported_reason(*b, p); !reason.empty()) {
        why += concat("; ", b->name, ": ", reason);
        continue;
      }
      if (debug_log_enabled()) {
        debug_log(concat("auto chose backend '", b->name, "' for ", device_name(p.device), " ",
                         dtype_name(p.dtype), " head_dim ", p.head_dim));
      }
      return *b;
    }
    fail(ErrorCode::backend_unavailable, "backend=auto: no backend available here runs ",
         dtype_name(p.dtype), " head_dim ", p.head_dim, " on ", device_name(p.device),
         why.empty() ? " (none is available for that device)" : why);
  }
  const auto it = std::find_if(table.begin(), table.end(),
                               [&](const Backend& b) { return requested == b.name; });
  if (it == table.end()) {
    std::vector<const Backend*> all;
    for (const Backend& b : table) all.push_back(&b);
    fail(ErrorCode::backend_unavailable, "backend='", requested, "' is not a backend of this "
         "build; known: auto, ", list_names(all));
  }
  const Backend& backend = *it;
  if (const std::string reason = backend.unavailable_reason(); !reason.empty()) {
    fail(ErrorCode::backend_unavailable, "backend='", requested, "' is unavailable: ", reason,
         "; available here: ", list_names(available_for(DeviceType::cpu)), " (cpu)",
         [] {
           const auto gpu = available_for(DeviceType::cuda);
           return gpu.empty() ? std::string() : ", " + list_names(gpu) + " (cuda)";
         }());
  }
  if (backend.device != p.device.type) {
    fail(ErrorCode::invalid_type, "backend='", requested, "' runs on ",
         backend.device == DeviceType::cpu ? "cpu" : "cuda", " tensors, but q is on ",
         device_name(p.device), "; backends for ", device_name(p.device), ": ",
         list_names(available_for(p.device.type)));
  }
  if (const std::string reason = unsupported_reason(backend, p); !reason.empty()) {
    fail(ErrorCode::unsupported, "backend='", requested, "': ", reason);
  }
  return backend;
}

std::vector<BackendInfo> backends() {
  std::vector<BackendInfo> result;
  for (const Backend& b : backend_table()) {
    std::string reason = b.unavailable_reason();
    const bool available = reason.empty();  // before `reason` is moved from
    result.push_back({b.name, b.description, b.device, available, std::move(reason), b.dtypes, b.head_dims,
                      b.max_head_dim, b.detail && available ? b.detail() : std::string(),
                      b.plans_built ? b.plans_built() : 0});
  }
  return result;
}

std::string auto_backend(DeviceType device) {
  for (const Backend* b : by_priority(device)) {
    if (b->unavailable_reason().empty()) return b->name;
  }
  fail(ErrorCode::backend_unavailable, "no backend is available for ",
       device == DeviceType::cpu ? "cpu" : "cuda", " tensors in this build");
}

}  // namespace visattn
