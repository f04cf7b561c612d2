// The one file that includes the cuDNN frontend (half a minute of compile time: keep it alone).
// CMake compiles it with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING (every cuDNN call goes through
// the library library.cpp opened) and CUDNN_FRONTEND_SKIP_JSON_LIB (no second copy of
// nlohmann json beside the CLI's).
#include <cudnn_frontend.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "backends/cuda/device_metadata.h"
#include "backends/cudnn/dense_batch.h"
#include "backends/cudnn/library.h"
#include "backends/cudnn/plan_cache.h"
#include "core/error_message.h"
#include "core/log.h"

namespace fe = cudnn_frontend;

namespace visattn::cudnn {

namespace {

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;
using Implementation = fe::AttentionImplementation_t;

// UIDs of the graph's tensors: a plan holds no pointers, each execute maps these to the call's.
enum Uid : int64_t {
  kUidQ = 1,
  kUidK,
  kUidV,
  kUidOut,
  kUidLse,
  kUidSeqLenQ,
  kUidSeqLenKv,
  kUidOffsets,  // + RaggedTensor
};

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;  // null: the build failed, `error` says why
  std::string error;
  int64_t workspace_bytes = 0;
};

struct DeviceState {
  cudnnHandle_t handle = nullptr;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  std::vector<void*> retired;  // smaller workspaces a captured graph may still point at
};

struct State {
  std::mutex mutex;  // plans, devices and every execute
  std::map<PlanKey, Plan> plans;
  std::vector<DeviceState> devices;
  int64_t largest_workspace = 0;  // of any plan built
  std::set<int64_t> dense_lengths;  // image lengths with dense plans (at most dense_length_limit())
  std::atomic<int64_t> built{0};
};

// Never destroyed: destroying cuDNN handles and plans from a static destructor can run after
// the CUDA driver has shut down, and a graph captured by the user may still hold a plan.
State& state() {
  static State* const s = new State;
  return *s;
}

fe::DataType_t io_type(DType dtype) {
  return dtype == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

// cuDNN's logical order is [batch, heads, seq, dim]. With ragged offsets the batch stride is
// ignored (each image starts at its offset); it is set past every other extent so that no
// layout check sees overlapping batches. A multiple of 8 elements whenever the other strides
// are: cuDNN checks it for 16-byte alignment like the rest.
int64_t batch_stride(int64_t max_seqlen, int64_t token_stride, int64_t heads, int64_t head_stride) {
  return std::max(max_seqlen * token_stride, heads * head_stride);
}

TensorPtr index_tensor(fe::graph::Graph& g, int64_t uid, const std::string& name, int64_t entries,
                       fe::DataType_t type) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_uid(uid)
                      .set_name(name)
                      .set_dim({entries, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_data_type(type));
}

// The SDPA graph of `key` (ragged, or dense), not yet validated or built. sm_version > 0
// declares the GPU instead of asking the current device (the tests validate graphs on machines
// without one).
std::shared_ptr<fe::graph::Graph> make_graph(const PlanKey& key, Implementation implementation,
                                             int sm_version = 0) {
  const int64_t B = key.batch, S = key.max_seqlen, D = key.head_dim;
  const fe::DataType_t io = io_type(key.dtype);
  auto g = std::make_shared<fe::graph::Graph>();
  if (sm_version > 0) g->set_sm_version(sm_version);
  g->set_io_data_type(io)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);

  const char* names[] = {"q", "k", "v", "out", "lse"};
  auto offsets = [&](RaggedTensor tensor) {
    return index_tensor(*g, int64_t{kUidOffsets} + tensor, std::string(names[tensor]) + "_offsets", B + 1,
                        fe::DataType_t::INT64);
  };
  // A dense plan's images follow each other: the batch stride is an image's tokens.
  auto images_stride = [&](int64_t token_stride, int64_t heads, int64_t head_stride) {
    return key.dense ? S * token_stride : batch_stride(S, token_stride, heads, head_stride);
  };
  auto input = [&](int64_t uid, RaggedTensor tensor, int64_t heads) {
    const int64_t ts = key.token_stride(tensor), hs = key.head_stride(tensor);
    TensorPtr t = g->tensor(fe::graph::Tensor_attributes()
                                .set_uid(uid)
                                .set_name(names[tensor])
                                .set_data_type(io)
                                .set_dim({B, heads, S, D})
                                .set_stride({images_stride(ts, heads, hs), hs, ts, 1}));
    if (!key.dense) t->set_ragged_offset(offsets(tensor));
    return t;
  };
  const TensorPtr q = input(kUidQ, kRaggedQ, key.num_heads);
  const TensorPtr k = input(kUidK, kRaggedK, key.num_kv_heads);
  const TensorPtr v = input(kUidV, kRaggedV, key.num_kv_heads);

  // Self-attention: q and kv lengths are the same buffer, under two uids.
  auto options = fe::graph::SDPA_attributes()
                     .set_name("visattn_sdpa")
                     .set_generate_stats(key.lse)
                     .set_attn_scale(key.softmax_scale())
                     .set_implementation(implementation);
  if (!key.dense) {
    options.set_padding_mask(true)  // per-image lengths; ragged layouts require it
        .set_seq_len_q(index_tensor(*g, kUidSeqLenQ, "seq_len_q", B, fe::DataType_t::INT32))
        .set_seq_len_kv(index_tensor(*g, kUidSeqLenKv, "seq_len_kv", B, fe::DataType_t::INT32));
  }
  auto [o, stats] = g->sdpa(q, k, v, options);
  const int64_t ots = key.token_stride(kRaggedOut), ohs = key.head_stride(kRaggedOut);
  o->set_output(true)
      .set_uid(kUidOut)
      .set_data_type(io)
      .set_dim({B, key.num_heads, S, D})
      .set_stride({images_stride(ots, key.num_heads, ohs), ohs, ots, 1});
  if (!key.dense) o->set_ragged_offset(offsets(kRaggedOut));
  if (key.lse) {
    // Our lse is [heads, tokens] with its own strides; cuDNN's Stats is [batch, heads, seq, 1].
    stats->set_output(true)
        .set_uid(kUidLse)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({B, key.num_heads, S, 1})
        .set_stride({images_stride(key.lse_token_stride, key.num_heads, key.lse_head_stride),
                     key.lse_head_stride, key.lse_token_stride, 1});
    if (!key.dense) stats->set_ragged_offset(offsets(kRaggedLse));
  }
  return g;
}

// `key`'s graph validated and built into a plan; null with `error` set when cuDNN cannot run it.
std::shared_ptr<fe::graph::Graph> build_graph(const PlanKey& key, cudnnHandle_t handle,
                                              Implementation implementation, std::string& error) {
  std::shared_ptr<fe::graph::Graph> g = make_graph(key, implementation);
  auto step = [&](fe::error_t status, const char* what) {
    if (status.is_good()) return true;
    error = concat(what, ": ", status.get_message());
    return false;
  };
  const std::vector<fe::HeurMode_t> heuristics = {fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK};
  if (step(g->validate(), "validate") && step(g->build_operation_graph(handle), "build_operation_graph") &&
      step(g->create_execution_plans(heuristics), "create_execution_plans") &&
      step(g->check_support(), "check_support") && step(g->build_plans(), "build_plans")) {
    return g;
  }
  return nullptr;
}

// Which SDPA implementations to try. AUTO lets the frontend pick (UNIFIED from cuDNN 9.15 for
// this graph); COMPOSITE is the long-standing one that PyTorch's and FlashInfer's ragged paths
// ran on, tried when AUTO cannot build. VISATTN_CUDNN_IMPLEMENTATION=composite|unified forces one.
std::vector<std::pair<Implementation, const char*>> implementations() {
  const char* forced = std::getenv("VISATTN_CUDNN_IMPLEMENTATION");
  if (!forced || !*forced || std::strcmp(forced, "auto") == 0) {
    return {{Implementation::AUTO, "auto"}, {Implementation::COMPOSITE, "composite"}};
  }
  if (std::strcmp(forced, "composite") == 0) return {{Implementation::COMPOSITE, "composite"}};
  if (std::strcmp(forced, "unified") == 0) return {{Implementation::UNIFIED, "unified"}};
  fail(ErrorCode::invalid_value, "VISATTN_CUDNN_IMPLEMENTATION='", forced,
       "': expected auto, composite or unified");
}

Plan build_plan(const PlanKey& key, cudnnHandle_t handle) {
  const auto start = std::chrono::steady_clock::now();
  Plan plan;
  std::string errors;
  for (const auto& [implementation, name] : implementations()) {
    std::string error;
    try {
      plan.graph = build_graph(key, handle, implementation, error);
      if (plan.graph) {
        if (auto status = plan.graph->get_workspace_size(plan.workspace_bytes); status.is_bad()) {
          error = "get_workspace_size: " + status.get_message();
          plan.graph = nullptr;
        }
      }
    } catch (const std::exception& e) {  // the frontend throws for some unsupported graphs
      error = e.what();
      plan.graph = nullptr;
    }
    if (plan.graph) {
      state().built++;
      if (debug_log_enabled()) {
        std::string engine;
        (void)plan.graph->get_plan_name(engine);
        const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
        debug_log(concat("cudnn: built plan ", state().built.load(), " (", name, " implementation, engine ",
                         engine, ", workspace ", plan.workspace_bytes, " bytes) in ", ms.count(), " ms for ",
                         describe(key)));
      }
      return plan;
    }
    errors += concat(errors.empty() ? "" : "; ", name, " implementation: ", error);
  }
  plan.error = concat("backend='cudnn': cuDNN ", version_string(key.cudnn_version),
                      " has no plan for this call (", describe(key), "): ", errors);
  return plan;
}

DeviceState& device_state(State& s, int device) {
  if (int(s.devices.size()) <= device) s.devices.resize(device + 1);
  return s.devices[device];
}

cudnnHandle_t handle_of(DeviceState& d, int device) {
  if (!d.handle) {
    const cudnnStatus_t status = fe::detail::create_handle(&d.handle);
    if (status != CUDNN_STATUS_SUCCESS) {
      d.handle = nullptr;
      fail(ErrorCode::backend_unavailable, "backend='cudnn': cudnnCreate on cuda:", device,
           " failed: ", fe::detail::get_error_string(status));
    }
  }
  return d.handle;
}

// Grows the device's workspace to `bytes` (rounded up to MiB, so that few plans grow it).
void grow_workspace(State& s, DeviceState& d, int64_t bytes) {
  if (bytes <= d.workspace_bytes) return;
  const int64_t rounded = (bytes + (1 << 20) - 1) >> 20 << 20;
  void* fresh = nullptr;
  cuda::check(cudaMalloc(&fresh, size_t(rounded)), "cudaMalloc (cuDNN workspace)");
  if (d.workspace) d.retired.push_back(d.workspace);
  d.workspace = fresh;
  d.workspace_bytes = rounded;
  s.largest_workspace = std::max(s.largest_workspace, bytes);
}

// `key`'s plan, built now if it was not (refused while `capturing`). Call with s.mutex held.
const Plan& find_or_build(State& s, const PlanKey& key, bool capturing) {
  auto it = s.plans.find(key);
  if (it == s.plans.end()) {
    if (capturing) {
      fail(ErrorCode::invalid_value, "backend='cudnn': this call needs a cuDNN plan that was not "
           "built yet (", describe(key), "), and plans cannot be built while a CUDA graph is "
           "being captured (building compiles kernels and synchronizes): run the same call once "
           "before capturing (a warm-up with the same shapes, strides and options)");
    }
    DeviceState& d = device_state(s, key.device);
    Plan plan;
    try {
      plan = build_plan(key, handle_of(d, key.device));
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      fail(ErrorCode::internal, "backend='cudnn': building a plan failed: ", e.what());
    }
    it = s.plans.emplace(key, std::move(plan)).first;
  }
  return it->second;
}

}  // namespace

bool dense_plan_available(const PlanKey& key) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  const bool new_length = !s.dense_lengths.contains(key.max_seqlen);
  if (!s.plans.contains(key) && new_length && int64_t(s.dense_lengths.size()) >= dense_length_limit()) {
    return false;
  }
  const bool built = find_or_build(s, key, false).graph != nullptr;
  if (built) s.dense_lengths.insert(key.max_seqlen);
  return built;
}

bool dense_length_admitted(int64_t length) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  return s.dense_lengths.contains(length) || int64_t(s.dense_lengths.size()) < dense_length_limit();
}

void run_plan(const PlanKey& key, const CallTensors& t, CUstream_st* stream, bool capturing,
              const std::function<void()>& before_execute) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  const Plan& plan = find_or_build(s, key, capturing);
  if (!plan.graph) fail(ErrorCode::unsupported, plan.error);

  DeviceState& d = device_state(s, key.device);
  if (plan.workspace_bytes > d.workspace_bytes) {
    // Only after this device's first build of the plan: every plan built before has grown it.
    if (capturing) {
      fail(ErrorCode::internal, "backend='cudnn': the plan needs a ", plan.workspace_bytes,
           "-byte workspace and cuda:", key.device, " has ", d.workspace_bytes,
           " reserved; a workspace cannot grow while a CUDA graph is being captured: run the "
           "call once before capturing");
    }
    grow_workspace(s, d, plan.workspace_bytes);
  }

  before_execute();
  std::unordered_map<int64_t, void*> pack = {
      {kUidQ, const_cast<void*>(t.q)},
      {kUidK, const_cast<void*>(t.k)},
      {kUidV, const_cast<void*>(t.v)},
      {kUidOut, t.out},
  };
  if (!key.dense) {
    pack[kUidSeqLenQ] = pack[kUidSeqLenKv] = const_cast<int32_t*>(t.seq_len);
    for (int tensor = 0; tensor < kRaggedTensors; ++tensor) {
      if (tensor == kRaggedLse && !key.lse) continue;
      pack[kUidOffsets + tensor] = const_cast<int64_t*>(t.offsets[tensor]);
    }
  }
  if (key.lse) pack[kUidLse] = t.lse;
  try {
    if (const cudnnStatus_t status = fe::detail::set_stream(d.handle, stream);
        status != CUDNN_STATUS_SUCCESS) {
      fail(ErrorCode::internal, "backend='cudnn': cudnnSetStream failed: ",
           fe::detail::get_error_string(status));
    }
    if (auto status = plan.graph->execute(d.handle, pack, d.workspace); status.is_bad()) {
      fail(ErrorCode::internal, "backend='cudnn': executing the plan failed (", describe(key), "): ",
           status.get_message());
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(ErrorCode::internal, "backend='cudnn': executing the plan failed: ", e.what());
  }
}

int64_t plans_built() { return state().built.load(); }

std::string validate_graph(const PlanKey& key, int sm_version) {
  if (!library().usable) return "cuDNN unavailable: " + library().problem;
  // Each implementation run() may build with, in its order.
  for (const auto& [implementation, name] : implementations()) {
    try {
      std::shared_ptr<fe::graph::Graph> g = make_graph(key, implementation, sm_version);
      if (auto status = g->validate(); status.is_bad()) {
        return concat(name, " implementation: validate: ", status.get_message());
      }
    } catch (const std::exception& e) {
      return concat(name, " implementation: ", e.what());
    }
  }
  return {};
}

std::string frontend_version() {
  return concat(CUDNN_FRONTEND_MAJOR_VERSION, ".", CUDNN_FRONTEND_MINOR_VERSION, ".",
                CUDNN_FRONTEND_PATCH_VERSION);
}

void reserve_workspace(int device) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  if (s.largest_workspace == 0) return;
  const cuda::DeviceGuard guard(device);
  grow_workspace(s, device_state(s, device), s.largest_workspace);
}

}  // namespace visattn::cudnn
