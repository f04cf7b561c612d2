#include "backends/cudnn/cudnn_backend.h"

#include <cuda_runtime.h>

#include <span>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device_metadata.h"
#include "backends/cudnn/auto_table.h"
#include "backends/cudnn/dense_batch.h"
#include "backends/cudnn/library.h"
#include "backends/cudnn/plan_cache.h"
#include "backends/cudnn/plan_key.h"
#include "backends/cudnn/ragged_indices.h"
#include "core/error_message.h"
#include "visattn/varlen_batch.h"

namespace visattn::cudnn {

namespace {

constexpr int kMaxHeadDim = 256;  // Hopper and Ampere since cuDNN 9.9/9.10; older ones build no plan

bool aligned16(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

// Why cuDNN cannot take a [tokens, heads, head_dim] operand: it moves q, k, v and out in
// 16-byte vectors (and TMA tiles), so their pointers and every stride it steps over must be
// multiples of 16 bytes (the frontend checks; misaligned calls give wrong output on sm90).
std::string misaligned(const char* name, const void* data, int64_t token_stride,
                       int64_t head_stride, int heads, int64_t element_bytes) {
  const char* advice = "; cuDNN moves q, k, v and out in 16-byte vectors (pad rows to a "
                       "multiple of 8 elements, or use backend 'cuda')";
  if (!aligned16(data)) {
    return concat("alignment: ", name, " starts at ", data, ", not a multiple of 16 bytes", advice);
  }
  if (token_stride * element_bytes % 16 != 0) {
    return concat("alignment: ", name, " token stride ", token_stride, " (", token_stride * element_bytes,
                  " bytes) is not a multiple of 16 bytes", advice);
  }
  if (heads > 1 && head_stride * element_bytes % 16 != 0) {
    return concat("alignment: ", name, " head stride ", head_stride, " (", head_stride * element_bytes,
                  " bytes) is not a multiple of 16 bytes", advice);
  }
  return {};
}

// The image length of a call that may run on dense plans (dense_batch.h): a uniform batch that
// was not prepared, in token-major layouts, of a length still admitted to dense plans; 0 for
// every other call.
int64_t dense_length(const AttentionParams& p) {
  if (p.prepared || dense_length_limit() == 0) return 0;
  const int64_t length = uniform_length(std::span<const int32_t>(p.cu_seqlens, size_t(p.num_images + 1)));
  const bool layouts = length > 0 &&
                       token_major(p.q_token_stride, p.q_head_stride, p.num_heads, length) &&
                       token_major(p.k_token_stride, p.k_head_stride, p.num_kv_heads, length) &&
                       token_major(p.v_token_stride, p.v_head_stride, p.num_kv_heads, length) &&
                       token_major(p.out_token_stride, p.out_head_stride, p.num_heads, length) &&
                       (!p.lse || token_major(p.lse_token_stride, p.lse_head_stride, p.num_heads, length));
  return layouts && dense_length_admitted(length) ? length : 0;
}

// The call on dense plans, one call per power of two of images. False, with nothing run, where
// it must run ragged: not a dense call, or no dense plan (dense_plan_available).
bool run_dense(const AttentionParams& p, int64_t cudnn_version, cudaStream_t stream) {
  const int64_t length = dense_length(p);
  if (length == 0) return false;
  const std::vector<int64_t> calls = dense_calls(p.num_images);
  std::vector<PlanKey> keys;
  keys.reserve(calls.size());
  for (int64_t images : calls) {
    keys.push_back(plan_key(p, images, length, cudnn_version, true));
    if (!dense_plan_available(keys.back())) return false;
  }
  const int64_t bytes = dtype_size(p.dtype);
  int64_t token = p.cu_seqlens[0];
  for (size_t call = 0; call < calls.size(); ++call) {
    const auto at = [&](const void* base, int64_t token_stride, int64_t element_bytes) {
      return const_cast<char*>(static_cast<const char*>(base)) + token * token_stride * element_bytes;
    };
    const CallTensors tensors{at(p.q, p.q_token_stride, bytes),
                              at(p.k, p.k_token_stride, bytes),
                              at(p.v, p.v_token_stride, bytes),
                              at(p.out, p.out_token_stride, bytes),
                              p.lse ? reinterpret_cast<float*>(at(p.lse, p.lse_token_stride, 4)) : nullptr,
                              nullptr,
                              {}};
    run_plan(keys[call], tensors, stream, false, [] {});
    token += calls[call] * length;
  }
  return true;
}

}  // namespace

bool auto_prefers(const AttentionParams& p) {
  const auto runs_sm90 = [&] { return cuda::runs_sm90(p); };
  int64_t images = 0;
  for (int64_t i = 0; i < p.num_images; ++i) images += p.cu_seqlens[i + 1] > p.cu_seqlens[i];
  const int64_t length = dense_length(p);
  if (length > 0 ? !auto_prefers_dense(length, p.head_dim, runs_sm90)
                 : !auto_prefers_shape(p.cu_seqlens[p.num_images], images, p.head_dim, runs_sm90)) {
    return false;
  }
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(static_cast<cudaStream_t>(p.cuda_stream), &capturing) == cudaSuccess &&
         capturing == cudaStreamCaptureStatusNone;
}

std::optional<std::string> declines(const AttentionParams& p) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) {
    return concat("dtype: ", dtype_name(p.dtype),
                  " is not supported; cuDNN's fused attention runs f16 and bf16");
  }
  if (p.head_dim % 8 != 0 || p.head_dim > kMaxHeadDim) {
    return concat("head_dim: ", p.head_dim, " is not supported; cuDNN's fused attention runs head dims "
                  "that are multiples of 8 up to ", kMaxHeadDim, " (8, 16, 24, ..., 248, 256)");
  }
  if (p.window_left >= 0 || p.window_right >= 0) {
    return concat("window: window_left=", p.window_left, ", window_right=", p.window_right,
                  "; this backend runs full attention within each image (backend 'cuda' runs windows)");
  }
  if (p.sinks) {
    return std::string("sinks: attention sinks are not supported by this backend (backend 'cuda' runs them)");
  }
  const int64_t bytes = dtype_size(p.dtype);
  const struct {
    const char* name;
    const void* data;
    int64_t token_stride, head_stride;
    int heads;
  } operands[] = {{"q", p.q, p.q_token_stride, p.q_head_stride, p.num_heads},
                  {"k", p.k, p.k_token_stride, p.k_head_stride, p.num_kv_heads},
                  {"v", p.v, p.v_token_stride, p.v_head_stride, p.num_kv_heads},
                  {"out", p.out, p.out_token_stride, p.out_head_stride, p.num_heads}};
  for (const auto& o : operands) {
    std::string why = misaligned(o.name, o.data, o.token_stride, o.head_stride, o.heads, bytes);
    if (!why.empty()) return why;
  }
  if (p.lse && !aligned16(p.lse)) {
    return concat("alignment: lse starts at ", static_cast<const void*>(p.lse),
                  ", not a multiple of 16 bytes (cuDNN assumes 16-byte aligned tensors)");
  }
  return std::nullopt;
}

std::string unavailable_reason() {
  // No GPU: say so, without loading cuDNN.
  if (std::string gpu = cuda::unavailable_reason(); !gpu.empty()) return gpu;
  return library().problem;
}

std::string describe() {
  const Library& lib = library();
  return concat("cuDNN ", version_string(lib.version), " (", lib.path, "), frontend ", frontend_version(),
                ": ragged SDPA forward (dense for uniform batches, up to ", dense_length_limit(),
                " image lengths), f16/bf16, head dims multiples of 8 up to ", kMaxHeadDim,
                ", no window or sinks; ", plans_built(), " plans built");
}

void run(const AttentionParams& p) {
  // The registry asked already; direct callers (tests) get the same answer.
  if (const auto why = declines(p)) fail(ErrorCode::unsupported, "backend='cudnn': ", *why);
  const Library& lib = library();
  if (!lib.usable) fail(ErrorCode::backend_unavailable, "backend='cudnn' is unavailable: ", lib.problem);
  const int device = p.device.index;
  const cuda::DeviceGuard guard(device);
  const int cc = cuda::compute_capability(device);
  if (cc < 80) {
    fail(ErrorCode::unsupported, "backend='cudnn': ", device_name(p.device), " is sm", cc,
         "; cuDNN's fused attention needs sm80 or newer");
  }
  if (cc < 90 && lib.version < kRaggedBeforeSm90Version) {
    fail(ErrorCode::unsupported, "backend='cudnn': ragged (packed) attention on ", device_name(p.device),
         " (sm", cc, ") needs cuDNN ", version_string(kRaggedBeforeSm90Version), " or newer, found ",
         version_string(lib.version), " (sm90 and newer run it from ", version_string(kMinimumVersion), ")");
  }
  const auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cuda::check(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
  if (capture == cudaStreamCaptureStatusNone && run_dense(p, lib.version, stream)) return;

  cuda::MetadataLease lease(p);  // refuses an unprepared batch while capturing
  const DeviceMetadata& metadata = lease.metadata();
  // The plan's batch and longest image: a prepared batch's are fixed by its buffers (a graph
  // captured with them replays on any batch update_device writes there); an unprepared one's
  // are its own buckets.
  int64_t batch = 0, max_seqlen = 0;
  if (lease.prepared()) {
    batch = metadata.layout.image_capacity;
    metadata.max_seqlen_bound_used = true;
    max_seqlen = metadata.max_seqlen_bound;
  } else {
    const VarlenBatch own = VarlenBatch::from_cu_seqlens(
        std::span<const int32_t>(p.cu_seqlens, size_t(p.num_images + 1)), p.max_seqlen);
    batch = own.batch_bucket();
    max_seqlen = own.max_seqlen_bucket();
  }
  const PlanKey key = plan_key(p, batch, max_seqlen, lib.version);

  RaggedIndexArgs indices{};
  indices.cu_seqlens = metadata.cu_seqlens();
  indices.batch = batch;
  indices.seq_len = metadata.seq_len();
  const int64_t token_strides[kRaggedTensors] = {p.q_token_stride, p.k_token_stride, p.v_token_stride,
                                                 p.out_token_stride, p.lse ? p.lse_token_stride : 0};
  CallTensors tensors{p.q, p.k, p.v, p.out, p.lse, metadata.seq_len(), {}};
  for (int t = 0; t < kRaggedTensors; ++t) {
    indices.offsets[t] = metadata.ragged_offsets(RaggedTensor(t));
    indices.token_stride[t] = token_strides[t];
    tensors.offsets[t] = indices.offsets[t];
  }
  run_plan(key, tensors, stream, capture != cudaStreamCaptureStatusNone, [&] {
    cuda::check(static_cast<cudaError_t>(launch_ragged_indices(indices, stream)),
                "ragged index kernel launch");
  });
  lease.finish();
}

}  // namespace visattn::cudnn
