// What one block of a forward kernel owns, read from the tile schedule: shared by the sm80
// (mma.sync) and sm90 (wgmma) kernels, which walk the same schedule.
#pragma once

#include <climits>

#include "backends/cuda/flash_params.h"
#include "backends/cuda/mma.cuh"

namespace visattn::cuda {

struct BlockWork {
  int first_image, end_image;  // the tile's images: one (a run of its query rows), or several packed
  int head, kv_head;
  bool packed;                // several images in the tile, masked block-diagonally
  int span_begin, span_end;   // tokens of the tile's images
  int q_begin, rows;          // the tile's first query token and its rows
  int key_begin, key_end;     // keys some row of the tile can see
};

// Item b (a block's, or a persistent block's b-th) is in the group of tile b / heads (the
// group's items are consecutive: its tiles x heads); within the group, head-major. False for
// items past the schedule (the grid is sized for the bucket).
__device__ inline bool block_work(const KernelParams& p, int tile_rows, int item, BlockWork& w) {
  if (item / p.num_heads >= *p.tile_count) return false;
  const Tile& in_group = p.schedule[item / p.num_heads];
  const int local = item - in_group.group_first * p.num_heads;
  w.head = local / in_group.group_size;
  w.kv_head = w.head / (p.num_heads / p.num_kv_heads);
  const Tile& tile = p.schedule[in_group.group_first + local % in_group.group_size];
  w.first_image = tile.first_image, w.end_image = tile.end_image;
  w.packed = w.end_image - w.first_image > 1;
  w.span_begin = p.cu_seqlens[w.first_image], w.span_end = p.cu_seqlens[w.end_image];
  w.q_begin = w.span_begin + tile.first_row;  // tokens, not rows of an image
  w.rows = min(tile_rows, w.span_end - w.q_begin);
  const int q_last = w.q_begin + w.rows - 1;
  // Written so that huge windows cannot overflow.
  w.key_begin = p.window_left < 0 || p.window_left >= w.q_begin - w.span_begin ? w.span_begin
                                                                               : int(w.q_begin - p.window_left);
  w.key_end = p.window_right < 0 || p.window_right >= w.span_end - q_last ? w.span_end
                                                                           : int(q_last + p.window_right + 1);
  return true;
}

// The keys [key_min, key_max) that row r of the tile sees: its image's (packed tiles), cut by
// the window; nothing for rows past the tile.
__device__ inline void row_keys(const KernelParams& p, const BlockWork& w, int r, int& key_min, int& key_max) {
  const int token = w.q_begin + r;
  int lo = w.span_begin, hi = w.span_end;
  if (w.packed) {
    for (int image = w.first_image; image < w.end_image; ++image) {
      const int a = p.cu_seqlens[image], b = p.cu_seqlens[image + 1];
      if (token >= a && token < b) lo = a, hi = b;
    }
  }
  if (r >= w.rows) lo = hi = 0;
  key_min = p.window_left < 0 || p.window_left >= token - lo ? lo : int(token - p.window_left);
  key_max = p.window_right < 0 || p.window_right >= hi - token ? hi : int(token + p.window_right + 1);
}

// Online softmax, per row: folds a key block's maximum (this lane's; the quad's four lanes hold
// the row) into the running max (log2 domain). row_base: what the block's scores are
// exponentiated against; the running sum (and O, by the caller) shrink by row_scale.
__device__ inline void fold_block_max(float block_max, float& row_max, float& row_sum, float& row_base,
                                      float& row_scale) {
  block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
  block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
  const float new_max = fmaxf(row_max, block_max);
  row_base = new_max == -INFINITY ? 0.0f : new_max;  // a row that has seen nothing yet
  row_scale = exp2_fast(row_max - row_base);
  row_max = new_max;
  row_sum *= row_scale;
}

// Rows [0, w.rows) of the block's output, staged in shared memory `pitch` elements apart, to
// out: 16-byte stores where the tensors allow (vector_io), else element by element.
template <typename T, int kHeadDimPad, int kThreads>
__device__ inline void store_rows(const KernelParams& p, const BlockWork& w, const T* staged, int pitch) {
  T* out = static_cast<T*>(p.out) + int64_t(w.q_begin) * p.out_token_stride + w.head * p.out_head_stride;
  if (p.vector_io) {
    constexpr int kChunks = kHeadDimPad / 8;
    for (int i = threadIdx.x; i < w.rows * kChunks; i += kThreads) {
      const int row = i / kChunks, col = i % kChunks * 8;
      if (col < p.head_dim) {
        *reinterpret_cast<uint4*>(out + row * p.out_token_stride + col) =
            *reinterpret_cast<const uint4*>(staged + row * pitch + col);
      }
    }
  } else {
    for (int i = threadIdx.x; i < w.rows * p.head_dim; i += kThreads) {
      const int row = i / p.head_dim, col = i % p.head_dim;
      out[row * p.out_token_stride + col] = staged[row * pitch + col];
    }
  }
}

// lse = ln 2 · (m + log2 l) of tile row r (log2-domain running max m, sum l), if asked.
__device__ inline void store_lse(const KernelParams& p, const BlockWork& w, int r, float row_max, float row_sum) {
  if (p.lse && r < w.rows) {
    p.lse[w.head * p.lse_head_stride + int64_t(w.q_begin + r) * p.lse_token_stride] =
        (row_max + log2f(row_sum)) * 0.6931471805599453f;
  }
}

}  // namespace visattn::cuda
