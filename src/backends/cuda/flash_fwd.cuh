// The CUDA backend's forward kernel: flash attention on mma.sync tensor cores (sm80+), in the
// register layout of FlashAttention 2. One block owns one (tile of the schedule, head): 64
// query rows, 16 or 32 per warp, which walk the key blocks the tile can see. Blocks run group by
// group (heaviest first), head by head within a group (see Tile).
//   Q fragments stay in registers (head dims up to 128) or are re-read from shared memory (256);
//   S = Q·Kᵀ is accumulated in registers, scaled, masked and exponentiated there (online
//   softmax, log2 domain), turned into the A operand of P·V without leaving registers, and O
//   accumulates in registers; only K and V tiles pass through shared memory, loaded with
//   cp.async so that V of this block and K of the next arrive while the tensor cores work
//   (V of the first block is asked for with Q and K: a tile of one key block, the common case
//   of short images, waits for memory once).
// head_dim runs at its own size rounded up to the MMA granularity of 16 (72 -> 80). Tiles whose
// images are shorter than the tile hold several whole images ("packed") and mask by image.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/block_work.cuh"
#include "backends/cuda/flash_params.h"
#include "backends/cuda/mma.cuh"

namespace visattn::cuda {

// kMTiles: 16-row m-tiles per warp. Two halve the ldmatrix traffic per MMA (each K or V
// fragment feeds both) at the price of twice the accumulator registers.
// kStages: K/V buffers. One: V of a block loads during its Q·Kᵀ and K of the next during its
// P·V (two barriers a block). Two: the next block's K and V load into the other buffer during
// the whole of this block (one barrier a block, twice the K/V shared memory).
template <int kHeadDimPad, int kMTiles, int kStages = 1>
struct TileConfig {
  static constexpr int kRows = kTileRows;  // query rows per block
  static constexpr int kWarpRows = 16 * kMTiles;
  static constexpr int kWarps = kRows / kWarpRows;
  static constexpr int kThreads = kWarps * 32;
  // Keys per block: as many as keep the S accumulators at 64 registers or fewer.
  static constexpr int kKeys = (kHeadDimPad <= 64 ? 128 : kHeadDimPad <= 128 ? 64 : 32) / kMTiles;
  // Shared-memory row pitch in elements: 16 bytes past the row, so that the 8 rows one
  // ldmatrix reads start in 8 different bank groups for every head dim (no conflicts).
  static constexpr int kPitch = kHeadDimPad + 8;
  // Q as mma fragments in registers for the whole block (else re-read from shared memory).
  static constexpr bool kQInRegisters = kHeadDimPad * kMTiles <= 128;
  static_assert(kHeadDimPad % 16 == 0 && kHeadDimPad <= 256, "head dim tile");
  static_assert(kMTiles == 1 || kHeadDimPad <= 128, "two m-tiles of O at head dim 256 exceed the registers");
  static_assert(kStages == 1 || kStages == 2, "one or two K/V buffers");

  template <typename T>
  static constexpr size_t shared_bytes() {
    return sizeof(T) * size_t(kRows + 2 * kStages * kKeys) * kPitch;  // Q, K and V per stage
  }
};

template <typename T>
__device__ inline T zero() {
  return T(0.0f);
}

// Rows [0, kTileHeight) of a tile from a strided [tokens, heads, head_dim] tensor, starting at
// token `first` (`head_offset` selects the head): rows >= `valid` and columns >= head_dim are
// zeros. Asynchronous (cp.async) when the tensors allow 16-byte copies.
template <typename T, typename Config, int kTileHeight>
__device__ inline void load_tile(T* tile, const T* base, int64_t first, int valid, int64_t token_stride,
                                 int64_t head_offset, int head_dim, bool vector_io) {
  constexpr int kHeadDimPad = Config::kPitch - 8;
  const T* rows = base + first * token_stride + head_offset;
  if (vector_io) {
    constexpr int kChunks = kHeadDimPad / 8, kTotal = kTileHeight * kChunks;  // 16-byte chunks
#pragma unroll
    for (int j = 0; j < (kTotal + Config::kThreads - 1) / Config::kThreads; ++j) {
      const int i = threadIdx.x + j * Config::kThreads;
      if (kTotal % Config::kThreads != 0 && i >= kTotal) break;
      const int row = i / kChunks, col = i % kChunks * 8;
      const bool inside = row < valid && col < head_dim;
      cp_async_16(tile + row * Config::kPitch + col, inside ? rows + row * token_stride + col : base,
                  inside ? 16 : 0);
    }
  } else {
    for (int i = threadIdx.x; i < kTileHeight * kHeadDimPad; i += Config::kThreads) {
      const int row = i / kHeadDimPad, col = i % kHeadDimPad;
      tile[row * Config::kPitch + col] =
          row < valid && col < head_dim ? rows[row * token_stride + col] : zero<T>();
    }
  }
}

// No minimum of blocks per SM in the launch bounds: stating one (even 1) changes ptxas's
// register choice; at head dim 80 it then took 206 registers instead of 168 (2 blocks per SM
// instead of 3) and the d72/d80 workloads ran 10-19% slower. Stating 3 spills (20 bytes).
template <typename T, int kHeadDimPad, int kMTiles, int kStages>
__global__ void __launch_bounds__(TileConfig<kHeadDimPad, kMTiles, kStages>::kThreads)
    flash_fwd_kernel(const KernelParams p) {
  using Config = TileConfig<kHeadDimPad, kMTiles, kStages>;
  constexpr int kSlots = 2 * kMTiles;  // rows per lane: slot h is row 16 (h / 2) + group + 8 (h % 2)
  constexpr int BM = Config::kRows, BN = Config::kKeys, D = kHeadDimPad, kPitch = Config::kPitch;
  constexpr float kLog2e = 1.4426950408889634f;

  extern __shared__ __align__(128) unsigned char shared[];
  T* q_tile = reinterpret_cast<T*>(shared);
  T* k_tiles = q_tile + BM * kPitch;              // [kStages][BN][kPitch]
  T* v_tiles = k_tiles + kStages * BN * kPitch;  // [kStages][BN][kPitch]

  BlockWork w;
  if (!block_work(p, BM, blockIdx.x, w)) return;
  const int head = w.head, kv_head = w.kv_head, q_begin = w.q_begin, rows = w.rows;
  const int key_begin = w.key_begin, key_end = w.key_end;
  const bool packed = w.packed;
  const bool windowed = p.window_left >= 0 || p.window_right >= 0;

  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const int64_t k_head_offset = kv_head * p.k_head_stride, v_head_offset = kv_head * p.v_head_stride;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, quad = lane % 4;  // mma fragment coordinates

  // K and V of the block at key kb into buffer `stage`.
  auto load_k = [&](int stage, int kb) {
    load_tile<T, Config, BN>(k_tiles + stage * BN * kPitch, k, kb, min(BN, key_end - kb), p.k_token_stride,
                             k_head_offset, p.head_dim, p.vector_io);
  };
  auto load_v = [&](int stage, int kb) {
    load_tile<T, Config, BN>(v_tiles + stage * BN * kPitch, v, kb, min(BN, key_end - kb), p.v_token_stride,
                             v_head_offset, p.head_dim, p.vector_io);
  };
  load_tile<T, Config, BM>(q_tile, q, q_begin, rows, p.q_token_stride, head * p.q_head_stride, p.head_dim,
                           p.vector_io);
  load_k(0, key_begin);
  cp_async_commit();
  load_v(0, key_begin);
  cp_async_commit();

  // This thread's rows (slots; see kSlots): the keys each may see; and the keys any row of the
  // warp may see, to skip 16-key slabs no row of the warp can see (packed tiles, windows).
  auto row_of = [&](int slot) { return warp * Config::kWarpRows + slot / 2 * 16 + group + 8 * (slot % 2); };
  int key_min[kSlots], key_max[kSlots], warp_key_min = INT_MAX, warp_key_max = 0;
#pragma unroll
  for (int h = 0; h < kSlots; ++h) {
    const int r = row_of(h);
    row_keys(p, w, r, key_min[h], key_max[h]);
    if (r < rows) warp_key_min = min(warp_key_min, key_min[h]), warp_key_max = max(warp_key_max, key_max[h]);
  }
  warp_key_min = __reduce_min_sync(0xffffffffu, warp_key_min);
  warp_key_max = __reduce_max_sync(0xffffffffu, warp_key_max);

  // Running max (log2 domain) and this lane's share of the running sum, per row; a sink is
  // one more logit in every row's softmax, counted once (by the quad's first lane).
  const float sink = p.sinks ? p.sinks[head * p.sinks_stride] * kLog2e : -INFINITY;
  float row_max[kSlots], row_sum[kSlots];
#pragma unroll
  for (int h = 0; h < kSlots; ++h) row_max[h] = sink, row_sum[h] = p.sinks && quad == 0 ? 1.0f : 0.0f;
  float o[kMTiles][D / 8][4];
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
    for (int d = 0; d < D / 8; ++d) o[m][d][0] = o[m][d][1] = o[m][d][2] = o[m][d][3] = 0.0f;
  }
  uint32_t q_frag[Config::kQInRegisters ? kMTiles : 1][Config::kQInRegisters ? D / 16 : 1][4];
  // This lane's ldmatrix row of m-tile 0 (m-tile m is 16 m rows further).
  const T* q_warp = q_tile + (warp * Config::kWarpRows + lane % 16) * kPitch + lane / 16 * 8;

  for (int kb = key_begin, stage = 0; kb < key_end; kb += BN, stage = (stage + 1) % kStages) {
    const T* k_tile = k_tiles + stage * BN * kPitch;
    const T* v_tile = v_tiles + stage * BN * kPitch;
    if constexpr (kStages == 2) {
      cp_async_wait_all();
      __syncthreads();  // K and V of this block landed; every warp is done with the last block
      if (kb + BN < key_end) {
        load_k(1 - stage, kb + BN);
        load_v(1 - stage, kb + BN);
        cp_async_commit();
      }
    } else if (kb == key_begin) {
      cp_async_wait_all_but_newest();  // Q and K; V may still be on its way
      __syncthreads();
    } else {
      cp_async_wait_all();
      __syncthreads();  // K of this block landed; every warp is done with the last V
      load_v(0, kb);
      cp_async_commit();
    }
    if constexpr (Config::kQInRegisters) {
      if (kb == key_begin) {
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(q_frag[m][kk], q_warp + m * 16 * kPitch + kk * 16);
        }
      }
    }

    // Whether some row of the warp sees some key of 16-key slab `slab` of this block (the same
    // answer for every lane: warp-uniform branches around the sync instructions).
    auto live = [&](int slab) {
      const int first = kb + 16 * slab;
      return first < key_end && first < warp_key_max && first + 16 > warp_key_min;
    };
    // The common block: every row of the warp sees every key of it. Its code has no branch
    // and no mask, so that the compiler can run the shared-memory loads ahead of the MMAs;
    // other blocks (edges of images, packed tiles, windows) test slabs and keys.
    const bool masked = packed || windowed || kb + BN > key_end;
    const bool full = !masked && kb >= warp_key_min && kb + BN <= warp_key_max;

    // S (kWarpRows rows x BN keys per warp) = Q Kᵀ, scaled to the log2 domain and masked.
    // Element e of s[m][n] is slot 2 m + e / 2, key kb + 8 n + 2 quad + e % 2.
    float s[kMTiles][BN / 8][4];
    auto each_score = [](auto&& f) {
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) f(m, n, e);
        }
      }
    };
    auto scores = [&](auto full_block) {
      constexpr bool kFull = decltype(full_block)::value;
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) s[m][n][0] = s[m][n][1] = s[m][n][2] = s[m][n][3] = 0.0f;
      }
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[kMTiles][4];
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          if constexpr (Config::kQInRegisters) {
            a[m][0] = q_frag[m][kk][0], a[m][1] = q_frag[m][kk][1];
            a[m][2] = q_frag[m][kk][2], a[m][3] = q_frag[m][kk][3];
          } else {
            ldmatrix_x4(a[m], q_warp + m * 16 * kPitch + kk * 16);
          }
        }
        uint32_t b[BN / 16][4];
#pragma unroll
        for (int n2 = 0; n2 < BN / 16; ++n2) {
          if (kFull || live(n2)) {
            ldmatrix_x4(b[n2], k_tile + (n2 * 16 + lane / 16 * 8 + lane % 8) * kPitch + kk * 16 + lane / 8 % 2 * 8);
          }
        }
#pragma unroll
        for (int n2 = 0; n2 < BN / 16; ++n2) {
          if (kFull || live(n2)) {
#pragma unroll
            for (int m = 0; m < kMTiles; ++m) {
              mma_16x8x16<T>(s[m][2 * n2], a[m], b[n2][0], b[n2][1]);
              mma_16x8x16<T>(s[m][2 * n2 + 1], a[m], b[n2][2], b[n2][3]);
            }
          }
        }
      }
      each_score([&](int m, int n, int e) {
        const int h = 2 * m + e / 2, key = kb + 8 * n + 2 * quad + e % 2;
        s[m][n][e] *= p.scale_log2;
        if (!kFull && (!live(n / 2) || key < key_min[h] || key >= key_max[h])) s[m][n][e] = -INFINITY;
      });
    };
    if (full) {
      scores(std::true_type{});
    } else {
      scores(std::false_type{});
    }

    // Online softmax.
    float block_max[kSlots], row_scale[kSlots], row_base[kSlots];
#pragma unroll
    for (int h = 0; h < kSlots; ++h) block_max[h] = -INFINITY;
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
      for (int n = 0; n < BN / 8; ++n) {
        block_max[2 * m] = fmaxf(block_max[2 * m], fmaxf(s[m][n][0], s[m][n][1]));
        block_max[2 * m + 1] = fmaxf(block_max[2 * m + 1], fmaxf(s[m][n][2], s[m][n][3]));
      }
    }
#pragma unroll
    for (int h = 0; h < kSlots; ++h) fold_block_max(block_max[h], row_max[h], row_sum[h], row_base[h], row_scale[h]);
    each_score([&](int m, int n, int e) {
      s[m][n][e] = exp2_fast(s[m][n][e] - row_base[2 * m + e / 2]);
      row_sum[2 * m + e / 2] += s[m][n][e];
    });
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
      for (int d = 0; d < D / 8; ++d) {
        o[m][d][0] *= row_scale[2 * m], o[m][d][1] *= row_scale[2 * m];
        o[m][d][2] *= row_scale[2 * m + 1], o[m][d][3] *= row_scale[2 * m + 1];
      }
    }

    if constexpr (kStages == 1) {
      cp_async_wait_all();
      __syncthreads();  // V landed; every warp is done with K
      if (kb + BN < key_end) {
        load_k(0, kb + BN);
        cp_async_commit();
      }
    }

    // O += P V, P straight from the S registers (the accumulator layout of two n-blocks is
    // the A-operand layout of one k-step).
    auto accumulate = [&](auto full_block) {
      constexpr bool kFull = decltype(full_block)::value;
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        if (!kFull && !live(kk)) continue;  // P is zero there
        uint32_t a[kMTiles][4];
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          a[m][0] = pack2<T>(s[m][2 * kk][0], s[m][2 * kk][1]);
          a[m][1] = pack2<T>(s[m][2 * kk][2], s[m][2 * kk][3]);
          a[m][2] = pack2<T>(s[m][2 * kk + 1][0], s[m][2 * kk + 1][1]);
          a[m][3] = pack2<T>(s[m][2 * kk + 1][2], s[m][2 * kk + 1][3]);
        }
#pragma unroll
        for (int d2 = 0; d2 < D / 16; ++d2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, v_tile + (kk * 16 + lane % 8 + lane / 8 % 2 * 8) * kPitch + d2 * 16 + lane / 16 * 8);
#pragma unroll
          for (int m = 0; m < kMTiles; ++m) {
            mma_16x8x16<T>(o[m][2 * d2], a[m], b[0], b[1]);
            mma_16x8x16<T>(o[m][2 * d2 + 1], a[m], b[2], b[3]);
          }
        }
      }
    };
    if (full) {
      accumulate(std::true_type{});
    } else {
      accumulate(std::false_type{});
    }
  }

  // out = O / l, staged through the Q tile so that the stores are whole rows.
  float inverse[kSlots];
#pragma unroll
  for (int h = 0; h < kSlots; ++h) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
    inverse[h] = row_sum[h] > 0.0f ? 1.0f / row_sum[h] : 0.0f;
  }
  __syncthreads();  // every warp is done reading Q, K and V
#pragma unroll
  for (int h = 0; h < kSlots; ++h) {
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      const float* acc = o[h / 2][d] + 2 * (h % 2);
      *reinterpret_cast<uint32_t*>(q_tile + row_of(h) * kPitch + d * 8 + 2 * quad) =
          pack2<T>(acc[0] * inverse[h], acc[1] * inverse[h]);
    }
  }
  __syncthreads();
  store_rows<T, D, Config::kThreads>(p, w, q_tile, kPitch);
  // lse by the quad's first lane.
  if (quad == 0) {
    for (int h = 0; h < kSlots; ++h) store_lse(p, w, row_of(h), row_max[h], row_sum[h]);
  }
}

}  // namespace visattn::cuda
