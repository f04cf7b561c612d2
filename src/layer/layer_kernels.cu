#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "layer/layer_kernels.h"

namespace visattn::layer {

namespace {

constexpr int kThreads = 256;

__device__ float load(const void* base, int64_t i, bool bf16) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i])
              : __half2float(static_cast<const __half*>(base)[i]);
}

__device__ void store(void* base, int64_t i, float v, bool bf16) {
  if (bf16) {
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
  } else {
    static_cast<__half*>(base)[i] = __float2half_rn(v);
  }
}

__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum of squares over values [first, end) of the row in shared memory, on every thread.
__device__ float block_sum_squares(const float* row, int first, int end, float* partials) {
  float sum = 0;
  for (int i = first + threadIdx.x; i < end; i += blockDim.x) sum += row[i] * row[i];
  sum = warp_sum(sum);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // partials may still be read by a previous call
  if (lane == 0) partials[warp] = sum;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < warps; ++w) total += partials[w];
  return total;
}

// Shared memory: the token's q and k values in f32, then one inverse RMS per head, then the
// warp partials.
__global__ void __launch_bounds__(kThreads) norm_rope_kernel(NormRopeParams p) {
  extern __shared__ float shared[];
  const int d = p.head_dim, heads = p.num_heads + p.num_kv_heads;
  const int n = heads * d, q_values = p.num_heads * d;
  float* row = shared;
  float* inv_rms = shared + n;
  float* partials = inv_rms + heads;
  const int64_t token = blockIdx.x;
  void* qkv = static_cast<char*>(p.qkv) + token * p.row_stride * 2;
  for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] = load(qkv, i, p.bf16);
  __syncthreads();

  if (p.norm == 1) {  // over all heads of q, then of k
    const float q_sum = block_sum_squares(row, 0, q_values, partials);
    const float k_sum = block_sum_squares(row, q_values, n, partials);
    const float q_inv = rsqrtf(q_sum / q_values + p.eps), k_inv = rsqrtf(k_sum / (n - q_values) + p.eps);
    for (int h = threadIdx.x; h < heads; h += blockDim.x) inv_rms[h] = h < p.num_heads ? q_inv : k_inv;
  } else if (p.norm == 2) {  // a warp per head
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int h = warp; h < heads; h += blockDim.x / 32) {
      float sum = 0;
      for (int j = lane; j < d; j += 32) sum += row[h * d + j] * row[h * d + j];
      sum = warp_sum(sum);
      if (lane == 0) inv_rms[h] = rsqrtf(sum / d + p.eps);
    }
  }
  __syncthreads();
  if (p.norm != 0) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const int h = i / d;
      const float* w = h < p.num_heads ? p.q_norm : p.k_norm;
      const int wi = p.norm == 1 ? (h < p.num_heads ? i : i - q_values) : i % d;
      row[i] *= inv_rms[h] * w[wi];
    }
    __syncthreads();
  }
  const int half = d / 2;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float v = row[i];
    if (p.cos) {
      const int j = i % d, t = p.half_width ? j % half : j;
      const float partner = j < half ? -row[i + half] : row[i - half];
      v = v * p.cos[token * p.cos_stride + t] + partner * p.sin[token * p.sin_stride + t];
    }
    store(qkv, i, v, p.bf16);
  }
}

__global__ void gather_rows_kernel(const char* src, int64_t src_stride, const int64_t* index, char* dst,
                                   int64_t dst_stride, int64_t row_elements) {
  const int64_t row = blockIdx.x;
  const uint16_t* from = reinterpret_cast<const uint16_t*>(src + index[row] * src_stride);
  uint16_t* to = reinterpret_cast<uint16_t*>(dst + row * dst_stride);
  for (int64_t i = threadIdx.x; i < row_elements; i += blockDim.x) to[i] = from[i];
}

}  // namespace

void launch_norm_rope(const NormRopeParams& p, void* stream) {
  if (p.tokens == 0) return;
  const int heads = p.num_heads + p.num_kv_heads;
  const size_t shared = size_t(heads * p.head_dim + heads + kThreads / 32) * sizeof(float);
  if (shared > 48 * 1024) cudaFuncSetAttribute(norm_rope_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared));
  norm_rope_kernel<<<unsigned(p.tokens), kThreads, shared, static_cast<cudaStream_t>(stream)>>>(p);
}

void launch_gather_rows(const void* src, int64_t src_stride, const int64_t* index, void* dst, int64_t dst_stride,
                        int64_t rows, int64_t row_bytes, void* stream) {
  if (rows == 0) return;
  gather_rows_kernel<<<unsigned(rows), 128, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const char*>(src), src_stride, index, static_cast<char*>(dst), dst_stride, row_bytes / 2);
}

}  // namespace visattn::layer
