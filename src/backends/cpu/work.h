// The CPU backend's unit of work and the entry points of its per-ISA kernels.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "visattn/params.h"

namespace visattn::cpu {

// Query rows [row_begin, row_end) of one image and one head.
struct WorkItem {
  int64_t image;
  int head;
  int64_t row_begin, row_end;
  double cost;  // query-key pairs, for largest-first scheduling
};

// Splits every (image, head) into chunks of whole query tiles (tile_rows each), small enough
// that `threads` threads stay busy, and orders them largest cost first.
std::vector<WorkItem> plan_work(const AttentionParams& p, int tile_rows, int threads);

// Kernels, one per instruction set; each runs `items` on `threads` threads.
// avx512_bf16 takes bf16 inputs only; the others take every dtype and compute in fp32.
void run_avx512_bf16(const AttentionParams& p, int threads);
void run_avx512(const AttentionParams& p, int threads);
void run_avx2(const AttentionParams& p, int threads);
void run_portable(const AttentionParams& p, int threads);

}  // namespace visattn::cpu
