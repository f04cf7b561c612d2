// The forward kernel on Hopper (sm90a): the sm80 kernel's schedule, masking and online softmax
// with the products on warpgroup MMAs. One block is one warpgroup (4 warps x 16 rows) over a
// 64-row tile of the schedule and one head:
//   S = Q Kᵀ: wgmma m64n64k16 with Q and K in shared memory (K-major, 128-byte swizzle);
//   the softmax runs on S in registers (the accumulator layout is mma.sync's, so the sm80
//   kernel's row bookkeeping carries over); O += P V: wgmma m64nDk16 with P from registers
//   and V in shared memory (MN-major, the same swizzled tile layout as K).
// K and V are double-buffered with cp.async (16-byte chunks written straight into their
// swizzled places). Compiled for sm_90a only (its own object library in CMakeLists.txt); with
// VISATTN_CUDA_SM90=1 the host launches it on compute capability 9.0 for head dims padded to
// 64, 80, 96 and 128 when the tensors allow 16-byte copies, and the sm80 kernel everywhere
// else. This first version is correct (visattn check 500 cases, memcheck) but slower than the
// sm80 kernel: every GEMM is waited for, nothing overlaps the softmax, and there is no TMA or
// producer warp yet (bench/NOTES.md CUDA entry 10; issue 8's next steps).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backends/cuda/block_work.cuh"
#include "backends/cuda/flash_params.h"
#include "backends/cuda/flash_sm90.h"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/wgmma.cuh"

namespace visattn::cuda {

namespace {

constexpr int kRows = kTileRows;  // query rows per block: one warpgroup, 16 per warp
constexpr int kKeys = 64;         // keys per block: S is m64n64
constexpr int kThreads = 128;
static_assert(kRows == 64, "one warpgroup covers 64 rows");

// Shared memory of head dim D (padded): Q, then two buffers of K and two of V, each a tile of
// 128-byte rows (64 elements) per 64-column atom of the head dim.
template <int D>
struct Tiles {
  static constexpr int kAtoms = (D + 63) / 64;
  static constexpr int kQBytes = kAtoms * kRows * 128;
  static constexpr int kKVBytes = kAtoms * kKeys * 128;
  static constexpr int kBytes = kQBytes + 4 * kKVBytes;
  static constexpr int kStagedPitch = D + 8;  // the output, staged row-major over the K buffers
  static_assert(kRows * kStagedPitch * 2 <= 2 * kKVBytes, "the staged output fits the K buffers");
};

// Byte offset of 16-byte chunk c (columns 8c..8c+7) of row r in a swizzled tile of `rows` rows.
__device__ inline int chunk_offset(int r, int c, int rows) {
  return (c / 8) * rows * 128 + r * 128 + ((c % 8) ^ (r % 8)) * 16;
}

// Rows [0, kHeight) of a tile from a [tokens, heads, head_dim] tensor from token `first` into the
// swizzled layout; rows >= valid and columns >= head_dim are zeros (cp.async zero-fill).
template <typename T, int D, int kHeight>
__device__ inline void load_swizzled(unsigned char* tile, const T* base, int64_t first, int valid,
                                     int64_t token_stride, int64_t head_offset, int head_dim) {
  constexpr int kChunks = D / 8, kTotal = kHeight * kChunks;
  const T* rows = base + first * token_stride + head_offset;
  for (int i = threadIdx.x; i < kTotal; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool inside = r < valid && c * 8 < head_dim;
    cp_async_16(tile + chunk_offset(r, c, kHeight), inside ? rows + r * token_stride + c * 8 : base, inside ? 16 : 0);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) flash_fwd_sm90_kernel(const KernelParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Layout = Tiles<D>;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(1024) unsigned char shared[];
  unsigned char* q_tile = shared;
  unsigned char* k_tiles = shared + Layout::kQBytes;       // [2] K buffers
  unsigned char* v_tiles = k_tiles + 2 * Layout::kKVBytes;  // [2] V buffers

  BlockWork w;
  if (!block_work(p, kRows, w)) return;
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const int64_t k_head_offset = w.kv_head * p.k_head_stride, v_head_offset = w.kv_head * p.v_head_stride;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, quad = lane % 4;

  auto load_kv = [&](int stage, int kb) {
    const int valid = min(kKeys, w.key_end - kb);
    load_swizzled<T, D, kKeys>(k_tiles + stage * Layout::kKVBytes, k, kb, valid, p.k_token_stride, k_head_offset,
                               p.head_dim);
    load_swizzled<T, D, kKeys>(v_tiles + stage * Layout::kKVBytes, v, kb, valid, p.v_token_stride, v_head_offset,
                               p.head_dim);
  };
  load_swizzled<T, D, kRows>(q_tile, q, w.q_begin, w.rows, p.q_token_stride, w.head * p.q_head_stride, p.head_dim);
  load_kv(0, w.key_begin);
  cp_async_commit();

  // This thread's two rows (slot h: row 16 warp + group + 8 h) and the keys each sees.
  int key_min[2], key_max[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) row_keys(p, w, 16 * warp + group + 8 * h, key_min[h], key_max[h]);
  const bool windowed = p.window_left >= 0 || p.window_right >= 0;
  const float sink = p.sinks ? p.sinks[w.head * p.sinks_stride] * kLog2e : -INFINITY;
  float row_max[2] = {sink, sink};
  float row_sum[2] = {p.sinks && quad == 0 ? 1.0f : 0.0f, p.sinks && quad == 0 ? 1.0f : 0.0f};
  float o[D / 2];  // register 4 j + e: row slot e / 2, column 8 j + 2 quad + e % 2
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;

  for (int kb = w.key_begin, stage = 0; kb < w.key_end; kb += kKeys, stage ^= 1) {
    cp_async_wait_all();
    sm90::fence_async_shared();  // the cp.async writes, visible to the tensor cores' reads
    __syncthreads();       // ... of every thread; and every warp is done with the other buffer
    if (kb + kKeys < w.key_end) {
      load_kv(stage ^ 1, kb + kKeys);
      cp_async_commit();
    }
    const unsigned char* k_tile = k_tiles + stage * Layout::kKVBytes;
    const unsigned char* v_tile = v_tiles + stage * Layout::kKVBytes;

    // S = Q Kᵀ; register 4 n + e: row slot e / 2, key kb + 8 n + 2 quad + e % 2.
    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.0f;
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int atom = kk / 4, inside = kk % 4 * 32;  // 64-column atom, bytes into its 128-byte rows
      sm90::Wgmma<T, 64>::ss(s, sm90::descriptor(q_tile + atom * kRows * 128 + inside, 16, 1024),
                             sm90::descriptor(k_tile + atom * kKeys * 128 + inside, 16, 1024), kk > 0);
    }
    sm90::wgmma_commit();
    sm90::wgmma_wait_all();

    const bool masked = w.packed || windowed || kb + kKeys > w.key_end;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int h = i % 4 / 2, key = kb + 8 * (i / 4) + 2 * quad + i % 2;
      s[i] = masked && (key < key_min[h] || key >= key_max[h]) ? -INFINITY : s[i] * p.scale_log2;
    }

    // Online softmax, as in the sm80 kernel.
    float block_max[2] = {-INFINITY, -INFINITY}, row_scale[2], row_base[2];
#pragma unroll
    for (int i = 0; i < 32; ++i) block_max[i % 4 / 2] = fmaxf(block_max[i % 4 / 2], s[i]);
#pragma unroll
    for (int h = 0; h < 2; ++h) fold_block_max(block_max[h], row_max[h], row_sum[h], row_base[h], row_scale[h]);
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      s[i] = exp2_fast(s[i] - row_base[i % 4 / 2]);
      row_sum[i % 4 / 2] += s[i];
    }
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] *= row_scale[i % 4 / 2];

    // O += P V, P straight from the S registers (two n-blocks of S are one k16 A fragment),
    // packed before the fence so that the four wgmmas issue back to back.
    uint32_t a[kKeys / 16][4];
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
#pragma unroll
      for (int j = 0; j < 4; ++j) a[kk][j] = pack2<T>(s[8 * kk + 2 * j], s[8 * kk + 2 * j + 1]);
    }
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      sm90::Wgmma<T, D>::rs_mn(o, a[kk], sm90::descriptor(v_tile + kk * 16 * 128, kKeys * 128, 1024), 1);
    }
    sm90::wgmma_commit();
    sm90::wgmma_wait_all();
  }

  // out = O / l, staged row-major over the K buffers so that the stores are whole rows.
  float inverse[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
    inverse[h] = row_sum[h] > 0.0f ? 1.0f / row_sum[h] : 0.0f;
  }
  __syncthreads();  // every warp is done with K and V (its wgmmas have completed)
  T* staged = reinterpret_cast<T*>(k_tiles);
  constexpr int kPitch = Layout::kStagedPitch;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      *reinterpret_cast<uint32_t*>(staged + (16 * warp + group + 8 * h) * kPitch + 8 * j + 2 * quad) =
          pack2<T>(o[4 * j + 2 * h] * inverse[h], o[4 * j + 2 * h + 1] * inverse[h]);
    }
  }
  __syncthreads();
  store_rows<T, D, kThreads>(p, w, staged, kPitch);
  if (quad == 0) {
    for (int h = 0; h < 2; ++h) store_lse(p, w, 16 * warp + group + 8 * h, row_max[h], row_sum[h]);
  }
#else
  __trap();  // built for another architecture: the host launches this kernel on sm90a only
#endif
}

template <typename T, int D>
cudaError_t launch(const KernelParams& kp, dim3 grid, cudaStream_t stream) {
  auto kernel = flash_fwd_sm90_kernel<T, D>;
  const cudaError_t status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tiles<D>::kBytes);
  if (status != cudaSuccess) return status;
  kernel<<<grid, kThreads, Tiles<D>::kBytes, stream>>>(kp);
  return cudaGetLastError();
}

template <typename T>
cudaError_t dispatch(const KernelParams& kp, int head_dim_pad, dim3 grid, cudaStream_t stream) {
  switch (head_dim_pad) {
    case 64: return launch<T, 64>(kp, grid, stream);
    case 80: return launch<T, 80>(kp, grid, stream);
    case 96: return launch<T, 96>(kp, grid, stream);
    case 128: return launch<T, 128>(kp, grid, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

bool sm90_kernel_runs(int head_dim_pad) {
  return head_dim_pad == 64 || head_dim_pad == 80 || head_dim_pad == 96 || head_dim_pad == 128;
}

cudaError_t launch_flash_forward_sm90(const KernelParams& params, bool bf16, int head_dim_pad, dim3 grid,
                                      cudaStream_t stream) {
  return bf16 ? dispatch<__nv_bfloat16>(params, head_dim_pad, grid, stream)
              : dispatch<__half>(params, head_dim_pad, grid, stream);
}

}  // namespace visattn::cuda
