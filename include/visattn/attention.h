// visattn: attention within each image of a packed batch, and the backends that run it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "visattn/tensor.h"
#include "visattn/varlen_batch.h"

namespace visattn {

struct AttentionOptions {
  // Multiplies q·k before the softmax. Unset: 1/sqrt(head_dim). Must be finite.
  std::optional<double> softmax_scale;
  // Sliding window inside each image: query i sees keys j with
  // i - window_left <= j <= i + window_right. -1 means unbounded on that side.
  int64_t window_left = -1;
  int64_t window_right = -1;
  // Optional per-head attention sink, f32 [num_heads]: one extra logit (not scaled) in each
  // softmax denominator that takes probability mass but contributes no value.
  std::optional<TensorView> sinks;
  // Optional output, f32 [num_heads, tokens]: natural log of each row's softmax
  // denominator (sink included), i.e. logsumexp of the scaled logits.
  std::optional<TensorView> lse;
  // Threads of CPU backends; 0: VISATTN_NUM_THREADS, else OMP_NUM_THREADS, else every core.
  int num_threads = 0;
  // CUDA backends: the cudaStream_t to run on; null means the default stream.
  void* cuda_stream = nullptr;
};

// Softmax attention within each image of `batch`, non-causal:
//   out[t, h] = softmax_j(scale * q[t, h] · k[j, h / g]) v[j, h / g]   over j in t's image,
// where g = num_heads / num_kv_heads (grouped kv heads). q and out are [tokens, num_heads,
// head_dim]; k and v are [tokens, num_kv_heads, head_dim]; 4-D [batch, seq, heads, head_dim]
// views are accepted with a uniform batch. backend: "auto" or a name from backends().
// Everything is checked before anything is written; on error `out` and `lse` are untouched.
void attention(const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& out, const VarlenBatch& batch,
               const AttentionOptions& options = {}, std::string_view backend = "auto");

struct BackendInfo {
  std::string name;
  std::string description;
  DeviceType device;             // where its tensors live
  bool available;                // built in and usable on this machine
  std::string unavailable_reason;  // empty when available
  std::vector<DType> dtypes;     // dtypes it runs
  std::vector<int> head_dims;    // head dims it runs; empty means any up to max_head_dim
  int max_head_dim;              // 0: no limit
  std::string detail;            // what runs on this machine (e.g. the SIMD path)
  int64_t plans_built = 0;       // plans (e.g. cuDNN graphs) this process built; 0 if none
};

std::vector<BackendInfo> backends();
// The backend "auto" chooses for tensors on `device`; throws backend_unavailable if none.
std::string auto_backend(DeviceType device);

}  // namespace visattn
