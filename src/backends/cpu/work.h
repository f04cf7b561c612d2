// The CPU backend's unit of work and the entry points of its per-ISA kernels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "visattn/params.h"
#include "visattn/tensor.h"

namespace visattn::cpu {

// Query rows [row_begin, row_end) of one image for heads [head_begin, head_end).
struct WorkItem {
  int64_t image;
  int head_begin, head_end;
  int64_t row_begin, row_end;
  double cost;  // query-key pairs, for largest-first scheduling
};

// Splits every (image, head) into chunks of whole query tiles (tile_rows each), small enough
// that `threads` threads stay busy; groups the heads of small images into one item (their
// rows are read together, not once per scattered item) as far as the next-item prefetch
// covers (NextItemPrefetch::kMaxBytes); orders items largest cost first.
std::vector<WorkItem> plan_work(const AttentionParams& p, int tile_rows, int threads);

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Keys [begin, end) that query rows [row_begin, row_end) of an image of n tokens can see.
struct KeyRange {
  int64_t begin, end;
};
inline KeyRange visible_keys(const AttentionParams& p, int64_t n, int64_t row_begin,
                             int64_t row_end) {
  return {p.window_left < 0 ? 0 : std::max<int64_t>(0, row_begin - p.window_left),
          p.window_right < 0 ? n : std::min<int64_t>(n, row_end + p.window_right)};
}

// True when every key of [key, key + count) is below key_end and inside the window of every
// row of [row_begin, row_end]: the block needs no mask.
inline bool block_unmasked(const AttentionParams& p, int64_t key, int64_t count, int64_t key_end,
                           int64_t first_row, int64_t last_row) {
  return key + count <= key_end && (p.window_left < 0 || key >= last_row - p.window_left) &&
         (p.window_right < 0 || key + count - 1 <= first_row + p.window_right);
}

// Whether kernels write the output past the caches (non-temporal stores: no read for ownership
// of lines nobody reads soon): when the batch's output is too large to still be cached when
// the next layer reads it, and each token's heads are adjacent in it (whole lines per token).
// Measured on a Sapphire Rapids VM: qwen25vl-window bf16 (15 MB out) 9% faster on AMX, 7% on
// the avx512_bf16 kernel; fp32 3% (bench/NOTES.md CPU entries 11 and 12).
inline constexpr int64_t kStreamOutputBytes = int64_t(8) << 20;
inline bool output_streamable(const AttentionParams& p) {
  return p.out_head_stride == p.head_dim &&
         int64_t(p.cu_seqlens[p.num_images]) * p.num_heads * p.head_dim * dtype_size(p.dtype) >= kStreamOutputBytes;
}

// Kernels, one per instruction set; each plans its items and runs them on `threads` threads.
// amx and avx512_bf16 take bf16 inputs only; the others take every dtype and compute in fp32.
void run_amx(const AttentionParams& p, int threads);
void run_avx512_bf16(const AttentionParams& p, int threads);
void run_avx512(const AttentionParams& p, int threads);
void run_avx2(const AttentionParams& p, int threads);
void run_portable(const AttentionParams& p, int threads);

}  // namespace visattn::cpu
