// Software prefetch of the work item a thread runs next, spread over the current item.
//
// Small images (Qwen2.5-VL's 64-token windows) use each key in only a few query tiles, so
// their items are as much memory traffic as arithmetic: packing q, k, v from DRAM and writing
// the output would otherwise stall the core between bursts of tile work. Issuing the next
// item's lines a slice at a time while this item computes overlaps the two.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backends/cpu/work.h"
#include "visattn/tensor.h"

namespace visattn::cpu {

// Walks the next item's lines (q rows, output rows unless the output is streamed past the
// caches, then k and v rows) and prefetches a few at a time: a burst of hundreds would hold
// every fill buffer and stall this item's own loads.
class NextItemPrefetch {
 public:
  // Items reading more than this are compute-bound (their keys serve many query tiles), or
  // large enough to push the current item's packed data out of L2: measured on a Sapphire
  // Rapids VM (2 MiB L2), prefetching 64-token windows made bf16 (0.66 MiB an item) 12%
  // faster and f32 (1.3 MiB) 10% slower. plan_work splits items to fit it (bench/NOTES.md CPU
  // entry 15).
  static constexpr int64_t kMaxBytes = int64_t(1) << 20;

  // Whether items like this one are worth prefetching: kernels ask it of their largest item
  // to decide whether to claim items ahead at all (see parallel_for). The output's bytes count
  // even when it is streamed: kMaxBytes was measured with them.
  static bool helps(const AttentionParams& p, const WorkItem& item) {
    const int64_t n = p.cu_seqlens[item.image + 1] - p.cu_seqlens[item.image];
    const KeyRange keys = visible_keys(p, n, item.row_begin, item.row_end);
    const int group = p.num_heads / p.num_kv_heads;
    const int64_t kv_heads = (item.head_end - 1) / group - item.head_begin / group + 1;
    const int64_t rows = item.row_end - item.row_begin;
    return int64_t(p.head_dim) * dtype_size(p.dtype) *
               (2 * rows * (item.head_end - item.head_begin) + 2 * (keys.end - keys.begin) * kv_heads) <=
           kMaxBytes;
  }

  // Prefetches `next` (null: nothing) over `ticks` calls of tick(); output_streamed: the kernel
  // writes the output with non-temporal stores (output_streamable), so its lines are not fetched.
  NextItemPrefetch(const AttentionParams& p, const WorkItem* next, int64_t ticks, bool output_streamed)
      : p_(p) {
    if (!next || !helps(p, *next)) return;
    const int64_t start = p.cu_seqlens[next->image];
    const KeyRange keys =
        visible_keys(p, p.cu_seqlens[next->image + 1] - start, next->row_begin, next->row_end);
    const int group = p.num_heads / p.num_kv_heads;
    const int kv_begin = next->head_begin / group, kv_end = (next->head_end - 1) / group + 1;
    const int64_t r0 = start + next->row_begin, rows = next->row_end - next->row_begin;
    const int64_t k0 = start + keys.begin, nk = keys.end - keys.begin;
    regions_[0] = {p.q, r0, rows, p.q_token_stride, p.q_head_stride, next->head_begin, next->head_end, false};
    regions_[1] = {p.out, r0, output_streamed ? 0 : rows, p.out_token_stride, p.out_head_stride,
                   next->head_begin, next->head_end, true};
    regions_[2] = {p.k, k0, nk, p.k_token_stride, p.k_head_stride, kv_begin, kv_end, false};
    regions_[3] = {p.v, k0, nk, p.v_token_stride, p.v_head_stride, kv_begin, kv_end, false};
    int64_t lines = 0;
    for (const Region& r : regions_) lines += r.tokens * r.lines_per_token(p.head_dim, dtype_size(p.dtype));
    per_tick_ = (lines + std::max<int64_t>(ticks, 1) - 1) / std::max<int64_t>(ticks, 1);
    region_ = 0;
  }

  // Prefetches the next few lines; cheap once everything is issued.
  void tick() {
    for (int64_t n = per_tick_; n > 0 && region_ < 4;) {
      const Region& r = regions_[region_];
      if (token_ == r.tokens) {
        ++region_, token_ = 0, head_ = 0, line_ = 0;
        continue;
      }
      const int64_t elem = dtype_size(p_.dtype);
      // Heads packed back to back are one span per token; otherwise one span per head.
      const bool packed = r.head_stride <= p_.head_dim;
      const int head = packed ? r.h0 : r.h0 + head_;
      const char* from = static_cast<const char*>(r.base) +
                         ((r.first + token_) * r.token_stride + head * r.head_stride) * elem;
      const int64_t bytes = (packed ? (r.h1 - 1 - r.h0) * r.head_stride + p_.head_dim : p_.head_dim) * elem;
      const uintptr_t first = reinterpret_cast<uintptr_t>(from) & ~uintptr_t(63);
      const uintptr_t end = reinterpret_cast<uintptr_t>(from) + bytes;
      for (uintptr_t line = first + 64 * line_; line < end && n > 0; line += 64, ++line_, --n) {
        // Into L2 (locality 2): the packing step reads it once, then works from scratch.
        if (r.write) {
          __builtin_prefetch(reinterpret_cast<const void*>(line), 1, 2);
        } else {
          __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 2);
        }
      }
      if (first + 64 * line_ >= end) {
        line_ = 0;
        if (packed || ++head_ == r.h1 - r.h0) head_ = 0, ++token_;
      }
    }
  }

 private:
  // Tokens [first, first + tokens) x heads [h0, h1) of one tensor.
  struct Region {
    const void* base = nullptr;
    int64_t first = 0, tokens = 0, token_stride = 0, head_stride = 0;
    int h0 = 0, h1 = 0;
    bool write = false;
    int64_t lines_per_token(int head_dim, int64_t elem) const {
      const bool packed = head_stride <= head_dim;
      return packed ? ((h1 - 1 - h0) * head_stride + head_dim) * elem / 64 + 2
                    : (h1 - h0) * (head_dim * elem / 64 + 2);
    }
  };

  const AttentionParams& p_;
  Region regions_[4];
  int64_t per_tick_ = 0;
  int region_ = 4;  // 4: nothing (left) to prefetch
  int64_t token_ = 0, line_ = 0;
  int head_ = 0;
};

}  // namespace visattn::cpu
