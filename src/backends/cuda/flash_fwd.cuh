// The CUDA backend's forward kernel (first version: correct on every sm80+ GPU, tensor cores
// through WMMA, tiles staged in shared memory). One block owns one (image, head, query tile)
// of the schedule (the head is blockIdx.y); each warp owns 16 query rows of the tile and walks the key blocks the tile
// can see with an online softmax in the log2 domain:
//   S = Q·Kᵀ (WMMA, fp32 accumulate) -> scale, mask, running max/sum -> P (input dtype)
//   O (fp32, shared) = O·alpha + P·V (WMMA)
// head_dim runs at its own size rounded up to the MMA granularity of 16 (72 -> 80).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>

#include "backends/cuda/flash_params.h"

namespace visattn::cuda {

// Tile shape per padded head dim: 16 query rows per warp; BN keys per block. Sized so the
// shared memory stays under the 99 KB that sm86/sm89 allow a block (A100/H100 allow more).
template <int kHeadDimPad>
struct TileConfig {
  static constexpr int kRows = kHeadDimPad <= 128 ? 64 : 32;  // query rows per block
  static constexpr int kKeys = kHeadDimPad <= 80 ? 64 : 32;   // keys per block
  static constexpr int kWarps = kRows / 16;
  static_assert(kHeadDimPad % 16 == 0 && kHeadDimPad <= 256, "head dim tile");
  static_assert(kKeys % 16 == 0 && kRows % 16 == 0, "WMMA tiles are 16 x 16");

  // Shared memory: Q, K, V tiles (input dtype), S (fp32), P (input dtype), O (fp32), m, l.
  template <typename T>
  static constexpr size_t shared_bytes() {
    return sizeof(T) * (size_t(kRows) + 2 * kKeys) * kHeadDimPad + 4 * size_t(kRows) * kKeys +
           sizeof(T) * size_t(kRows) * kKeys + 4 * size_t(kRows) * kHeadDimPad + 8 * kRows;
  }
};

template <typename T>
__device__ inline float to_float(T x);
template <>
__device__ inline float to_float(__half x) { return __half2float(x); }
template <>
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ inline T from_float(float x);
template <>
__device__ inline __half from_float(float x) { return __float2half_rn(x); }
template <>
__device__ inline __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }

// rows x head_dim of a strided tensor into a [rows_pad][kHeadDimPad] tile, zeros elsewhere.
template <typename T, int kHeadDimPad>
__device__ inline void load_tile(T* tile, int tile_rows, const T* base, int64_t first_token,
                                 int valid_rows, int64_t token_stride, int head, int64_t head_stride,
                                 int head_dim) {
  for (int i = threadIdx.x; i < tile_rows * kHeadDimPad; i += blockDim.x) {
    const int row = i / kHeadDimPad, c = i % kHeadDimPad;
    tile[i] = row < valid_rows && c < head_dim
                  ? base[(first_token + row) * token_stride + head * head_stride + c]
                  : from_float<T>(0.0f);
  }
}

template <typename T, int kHeadDimPad>
__global__ void __launch_bounds__(TileConfig<kHeadDimPad>::kWarps * 32)
    flash_fwd_kernel(const KernelParams p) {
  using Config = TileConfig<kHeadDimPad>;
  constexpr int BM = Config::kRows, BN = Config::kKeys, D = kHeadDimPad;
  namespace wmma = nvcuda::wmma;

  extern __shared__ __align__(128) unsigned char shared[];
  T* q_tile = reinterpret_cast<T*>(shared);
  T* k_tile = q_tile + BM * D;
  T* v_tile = k_tile + BN * D;
  float* s_tile = reinterpret_cast<float*>(v_tile + BN * D);
  T* p_tile = reinterpret_cast<T*>(s_tile + BM * BN);
  float* o_tile = reinterpret_cast<float*>(p_tile + BM * BN);
  float* row_max = o_tile + BM * D;
  float* row_sum = row_max + BM;

  if (int(blockIdx.x) >= *p.tile_count) return;  // the grid is sized for the batch's bucket
  const int2 item = p.schedule[blockIdx.x];
  const int image = item.x, q0 = item.y, head = blockIdx.y;
  const int64_t start = p.cu_seqlens[image];
  const int n = p.cu_seqlens[image + 1] - int(start);
  const int rows = min(BM, n - q0);
  const int kv_head = head / (p.num_heads / p.num_kv_heads);
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  load_tile<T, D>(q_tile, BM, q, start + q0, rows, p.q_token_stride, head, p.q_head_stride, p.head_dim);
  const float sink = p.sinks ? p.sinks[head * p.sinks_stride] * 1.4426950408889634f : -INFINITY;
  for (int i = threadIdx.x; i < BM * D; i += blockDim.x) o_tile[i] = 0.0f;
  for (int i = threadIdx.x; i < BM; i += blockDim.x) {
    row_max[i] = sink;
    row_sum[i] = p.sinks ? 1.0f : 0.0f;
  }

  // Keys any row of the tile can see.
  const int key_begin = p.window_left < 0 ? 0 : max(0, int(q0 - p.window_left));
  const int key_end = p.window_right < 0 ? n : min(n, int(q0 + rows - 1 + p.window_right + 1));

  for (int kb = key_begin; kb < key_end; kb += BN) {
    __syncthreads();  // previous block's K/V are no longer read
    const int keys = min(BN, key_end - kb);
    load_tile<T, D>(k_tile, BN, k, start + kb, keys, p.k_token_stride, kv_head, p.k_head_stride, p.head_dim);
    load_tile<T, D>(v_tile, BN, v, start + kb, keys, p.v_token_stride, kv_head, p.v_head_stride, p.head_dim);
    __syncthreads();

    // S[warp's 16 rows][BN] = Q Kᵀ.
    for (int j = 0; j < BN; j += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int c = 0; c < D; c += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
        wmma::load_matrix_sync(a, q_tile + warp * 16 * D + c, D);
        wmma::load_matrix_sync(b, k_tile + j * D + c, D);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(s_tile + warp * 16 * BN + j, acc, BN, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax: two lanes per row, each over half of the block's keys.
    {
      const int r = warp * 16 + lane / 2, half = lane % 2;
      const int query = q0 + r;  // row within the image
      float* s_row = s_tile + r * BN;
      float block_max = -INFINITY;
      for (int j = half; j < BN; j += 2) {
        const int key = kb + j;
        const bool visible = j < keys && (p.window_left < 0 || key >= query - p.window_left) &&
                             (p.window_right < 0 || key <= query + p.window_right);
        const float x = visible ? s_row[j] * p.scale_log2 : -INFINITY;
        s_row[j] = x;
        block_max = fmaxf(block_max, x);
      }
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
      const float m_old = row_max[r];
      const float m_new = fmaxf(m_old, block_max);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      float sum = 0.0f;
      for (int j = half; j < BN; j += 2) {
        const float e = exp2f(s_row[j] - m_use);
        sum += e;
        p_tile[r * BN + j] = from_float<T>(e);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      const float alpha = exp2f(m_old - m_use);
      for (int c = half; c < D; c += 2) o_tile[r * D + c] *= alpha;
      __syncwarp();
      if (half == 0) {
        row_sum[r] = row_sum[r] * alpha + sum;
        row_max[r] = m_new;
      }
    }
    __syncwarp();

    // O[warp's 16 rows][D] += P V.
    for (int c = 0; c < D; c += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, o_tile + warp * 16 * D + c, D, wmma::mem_row_major);
      for (int j = 0; j < BN; j += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
        wmma::load_matrix_sync(a, p_tile + warp * 16 * BN + j, BN);
        wmma::load_matrix_sync(b, v_tile + j * D + c, D);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(o_tile + warp * 16 * D + c, acc, D, wmma::mem_row_major);
    }
    __syncwarp();
  }
  __syncthreads();

  // out = O / l for the tile's rows; lse = ln 2 · (m + log2 l).
  T* out = static_cast<T*>(p.out);
  for (int i = threadIdx.x; i < rows * p.head_dim; i += blockDim.x) {
    const int r = i / p.head_dim, c = i % p.head_dim;
    out[(start + q0 + r) * p.out_token_stride + head * p.out_head_stride + c] =
        from_float<T>(o_tile[r * D + c] / row_sum[r]);
  }
  if (p.lse) {
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
      p.lse[head * p.lse_head_stride + (start + q0 + r) * p.lse_token_stride] =
          (row_max[r] + log2f(row_sum[r])) * 0.6931471805599453f;
    }
  }
}

}  // namespace visattn::cuda
