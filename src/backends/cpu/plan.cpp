#include <algorithm>
#include <cmath>

#include "backends/cpu/prefetch.h"
#include "backends/cpu/work.h"

namespace visattn::cpu {

namespace {
// Keys a query row sees on average in an image of n tokens under the window.
double keys_per_row(const AttentionParams& p, int64_t n) {
  const int64_t left = p.window_left < 0 ? n : p.window_left;
  const int64_t right = p.window_right < 0 ? n : p.window_right;
  return double(std::min<int64_t>(n, left + right + 1));
}
}  // namespace

std::vector<WorkItem> plan_work(const AttentionParams& p, int tile_rows, int threads) {
  double total = 0;
  for (int64_t i = 0; i < p.num_images; ++i) {
    const int64_t n = p.cu_seqlens[i + 1] - p.cu_seqlens[i];
    total += double(n) * keys_per_row(p, n) * p.num_heads;
  }
  // About 8 items per thread so the largest-first order can even out the tail; an item is at
  // least one tile, and a long image is split into several items of whole tiles.
  const double target = std::max(1.0, total / (8.0 * threads));
  std::vector<WorkItem> items;
  for (int64_t image = 0; image < p.num_images; ++image) {
    const int64_t n = p.cu_seqlens[image + 1] - p.cu_seqlens[image];
    if (n == 0) continue;
    const double row_cost = keys_per_row(p, n);
    const int64_t tiles = (n + tile_rows - 1) / tile_rows;
    const int64_t chunks = std::clamp<int64_t>(int64_t(std::ceil(n * row_cost / target)), 1, tiles);
    const int64_t rows_per_chunk = (tiles + chunks - 1) / chunks * tile_rows;
    int heads_per_item = chunks > 1 ? 1 : std::clamp(int(target / (double(n) * row_cost)), 1, p.num_heads);
    // ... and few enough that the next-item prefetch covers the item's q, out, k and v rows
    // (fp32 64-token windows: two items of 8 heads instead of one of 16), split evenly.
    const int64_t head_bytes = int64_t(p.head_dim) * dtype_size(p.dtype) * 2 * (n + int64_t(row_cost));
    const int fitting = int(std::max<int64_t>(1, NextItemPrefetch::kMaxBytes / head_bytes));
    if (heads_per_item > fitting) {
      const int items_per_image = (heads_per_item + fitting - 1) / fitting;
      heads_per_item = (heads_per_item + items_per_image - 1) / items_per_image;
    }
    for (int head = 0; head < p.num_heads; head += heads_per_item) {
      const int head_end = std::min(p.num_heads, head + heads_per_item);
      for (int64_t row = 0; row < n; row += rows_per_chunk) {
        const int64_t end = std::min(n, row + rows_per_chunk);
        items.push_back({image, head, head_end, row, end, double(end - row) * row_cost * (head_end - head)});
      }
    }
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const WorkItem& a, const WorkItem& b) { return a.cost > b.cost; });
  return items;
}

}  // namespace visattn::cpu
