#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/flash_fwd.cuh"
#include "core/error_message.h"

namespace visattn::cuda {

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    fail(ErrorCode::internal, "cuda: ", what, " failed: ", cudaGetErrorString(status));
  }
}

// Restores the caller's current device on scope exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (device != previous_) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

// Per-device buffers for the schedule and cu_seqlens, grown (never shrunk) as batches need.
// One mutex per process keeps concurrent calls from sharing a buffer mid-copy.
struct DeviceBuffers {
  void* data = nullptr;
  size_t bytes = 0;
};
std::mutex buffers_mutex;
std::vector<DeviceBuffers> buffers;

void* device_buffer(int device, size_t bytes) {
  if (int(buffers.size()) <= device) buffers.resize(device + 1);
  DeviceBuffers& b = buffers[device];
  if (b.bytes < bytes) {
    if (b.data) check(cudaFree(b.data), "cudaFree");
    b.data = nullptr;
    check(cudaMalloc(&b.data, bytes), "cudaMalloc (schedule)");
    b.bytes = bytes;
  }
  return b.data;
}

int compute_capability(int device) {
  int major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute");
  return major * 10 + minor;
}

// Query tiles of every image and head, heaviest (most keys) first.
std::vector<int4> build_schedule(const AttentionParams& p, int tile_rows) {
  std::vector<std::pair<int64_t, int4>> tiles;
  for (int64_t image = 0; image < p.num_images; ++image) {
    const int n = p.cu_seqlens[image + 1] - p.cu_seqlens[image];
    for (int q0 = 0; q0 < n; q0 += tile_rows) {
      const int rows = std::min(tile_rows, n - q0);
      const int64_t first = p.window_left < 0 ? 0 : std::max<int64_t>(0, q0 - p.window_left);
      const int64_t last = p.window_right < 0 ? n : std::min<int64_t>(n, q0 + rows + p.window_right);
      for (int head = 0; head < p.num_heads; ++head) {
        tiles.push_back({int64_t(rows) * (last - first), int4{int(image), head, q0, 0}});
      }
    }
  }
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<int4> schedule(tiles.size());
  for (size_t i = 0; i < tiles.size(); ++i) schedule[i] = tiles[i].second;
  return schedule;
}

template <typename T, int kHeadDimPad>
void launch(const KernelParams& kp, int blocks, cudaStream_t stream) {
  using Config = TileConfig<kHeadDimPad>;
  constexpr size_t shared = Config::template shared_bytes<T>();
  static_assert(shared <= 99 * 1024, "the tiles must fit the shared memory of every sm80+ GPU");
  auto kernel = flash_fwd_kernel<T, kHeadDimPad>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)),
        "cudaFuncSetAttribute (shared memory)");
  kernel<<<blocks, Config::kWarps * 32, shared, stream>>>(kp);
  check(cudaGetLastError(), "kernel launch");
}

// The one runtime-to-template dispatch: dtype x padded head dim.
template <typename T>
void dispatch_head_dim(const KernelParams& kp, int head_dim_pad, int blocks, cudaStream_t stream) {
  switch (head_dim_pad) {
    case 32: return launch<T, 32>(kp, blocks, stream);
    case 64: return launch<T, 64>(kp, blocks, stream);
    case 80: return launch<T, 80>(kp, blocks, stream);
    case 96: return launch<T, 96>(kp, blocks, stream);
    case 128: return launch<T, 128>(kp, blocks, stream);
    case 256: return launch<T, 256>(kp, blocks, stream);
  }
  fail(ErrorCode::internal, "cuda: no kernel for padded head_dim ", head_dim_pad);
}

// The instantiated head dims; a head dim runs at the smallest one that holds it.
constexpr int kPaddedHeadDims[] = {32, 64, 80, 96, 128, 256};

}  // namespace

std::vector<std::string> gpu_names() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return {};
  }
  std::vector<std::string> names;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) {
      names.push_back(concat("cuda:", d, " ", prop.name, " (sm", prop.major, prop.minor, ", ",
                             prop.totalGlobalMem >> 20, " MiB)"));
    }
  }
  return names;
}

std::string unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return concat("no usable CUDA device (cudaGetDeviceCount: ", cudaGetErrorString(status), ")");
  }
  if (count == 0) return "no CUDA device";
  for (int d = 0; d < count; ++d) {
    if (compute_capability(d) >= 80) return {};
  }
  return concat("needs a GPU of compute capability 8.0 or newer; cuda:0 is sm", compute_capability(0));
}

std::string describe() {
  return "WMMA tensor-core tiles (first version), head_dim rounded up to 32/64/80/96/128/256";
}

void run(const AttentionParams& p) {
  const int device = p.device.index;
  DeviceGuard guard(device);
  if (const int cc = compute_capability(device); cc < 80) {
    fail(ErrorCode::unsupported, "backend='cuda': ", device_name(p.device), " is sm", cc,
         "; the kernel needs sm80 or newer");
  }
  const int* padded = std::find_if(std::begin(kPaddedHeadDims), std::end(kPaddedHeadDims),
                                   [&](int d) { return d >= p.head_dim; });
  if (padded == std::end(kPaddedHeadDims)) {
    fail(ErrorCode::unsupported, "backend='cuda': head_dim ", p.head_dim, " is larger than 256");
  }
  const int tile_rows = *padded <= 128 ? TileConfig<128>::kRows : TileConfig<256>::kRows;
  const std::vector<int4> schedule = build_schedule(p, tile_rows);
  if (schedule.empty()) return;

  const auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  std::lock_guard lock(buffers_mutex);
  const size_t cu_bytes = sizeof(int32_t) * (p.num_images + 1);
  const size_t schedule_offset = (cu_bytes + 15) / 16 * 16;
  char* buffer = static_cast<char*>(device_buffer(device, schedule_offset + sizeof(int4) * schedule.size()));
  check(cudaMemcpyAsync(buffer, p.cu_seqlens, cu_bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  check(cudaMemcpyAsync(buffer + schedule_offset, schedule.data(), sizeof(int4) * schedule.size(),
                        cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");

  KernelParams kp{};
  kp.q = p.q, kp.k = p.k, kp.v = p.v, kp.out = p.out;
  kp.q_token_stride = p.q_token_stride, kp.q_head_stride = p.q_head_stride;
  kp.k_token_stride = p.k_token_stride, kp.k_head_stride = p.k_head_stride;
  kp.v_token_stride = p.v_token_stride, kp.v_head_stride = p.v_head_stride;
  kp.out_token_stride = p.out_token_stride, kp.out_head_stride = p.out_head_stride;
  kp.num_heads = p.num_heads, kp.num_kv_heads = p.num_kv_heads, kp.head_dim = p.head_dim;
  kp.cu_seqlens = reinterpret_cast<const int32_t*>(buffer);
  kp.schedule = reinterpret_cast<const int4*>(buffer + schedule_offset);
  kp.scale_log2 = float(p.softmax_scale * 1.4426950408889634);
  kp.window_left = p.window_left, kp.window_right = p.window_right;
  kp.sinks = p.sinks, kp.sinks_stride = p.sinks_stride;
  kp.lse = p.lse, kp.lse_head_stride = p.lse_head_stride, kp.lse_token_stride = p.lse_token_stride;

  const int blocks = int(schedule.size());
  if (p.dtype == DType::bf16) {
    dispatch_head_dim<__nv_bfloat16>(kp, *padded, blocks, stream);
  } else {
    dispatch_head_dim<__half>(kp, *padded, blocks, stream);
  }
  // The host buffers (cu_seqlens, schedule) must outlive the copies: wait for them.
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

}  // namespace visattn::cuda
