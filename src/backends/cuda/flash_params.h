// The CUDA kernel's parameters and its launch entry point, in plain C++ (no visattn or C++20
// headers), so the host code (C++20) and the kernels (nvcc, C++17) share them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace visattn::cuda {

// One tile of the schedule: up to kTileRows query rows of one image from `first_row`
// (end_image = first_image + 1), or several whole consecutive images of kTileRows tokens at
// most ("packed", first_row = 0), masked block-diagonally. Tiles come in groups (the tiles of
// one image, or one packed tile), heaviest group first; blocks walk a group head by head, so
// that the blocks running together share one head's K and V in L2.
struct alignas(16) Tile {
  int32_t first_image = 0, end_image = 0, first_row = 0;
  int32_t group_first = 0, group_size = 0;  // the group's tiles in the schedule
  int32_t unused[3] = {};
};

// What the kernel reads: AttentionParams in device terms.
struct KernelParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  int64_t q_token_stride, q_head_stride, k_token_stride, k_head_stride;
  int64_t v_token_stride, v_head_stride, out_token_stride, out_head_stride;
  int num_heads, num_kv_heads, head_dim;
  const int32_t* cu_seqlens;  // device, num_images + 1
  const Tile* schedule;       // device, tile_count tiles (see Tile)
  const int32_t* tile_count;  // device: tiles in the schedule; blocks past it exit (fixed grid)
  float scale_log2;           // softmax_scale * log2(e)
  int64_t window_left, window_right;
  const float* sinks;  // device [num_heads] (stride sinks_stride) or null
  int64_t sinks_stride;
  float* lse;  // device [num_heads, tokens] or null
  int64_t lse_head_stride, lse_token_stride;
  // q, k, v, out 16-byte aligned with strides and head_dim multiples of 8 elements: tiles move
  // in 16-byte copies (cp.async); otherwise element by element.
  bool vector_io;
};

// Query rows per tile: the sm80 kernel's (one schedule serves every head dim), the sm90
// kernel's (two consumer warpgroups of 64 rows share each K and V tile) and its three-warpgroup
// form's at head dim 64. Each has a schedule (schedule s: kScheduleRows[s] rows per tile).
constexpr int kTileRows = 64;
constexpr int kWideTileRows = 128;
constexpr int kTallTileRows = 192;
constexpr int kSchedules = 3;
constexpr int kScheduleRows[kSchedules] = {kTileRows, kWideTileRows, kTallTileRows};

// The forward kernels; each reads the schedule of its tile rows. The sm90 kernel comes with
// 128 keys per block or its head dim's wider block (sm90_wide_keys), and at head dim 64 with
// three consumer warpgroups on 192-row tiles (sm90_three_groups, 128 keys).
enum class Kernel { sm80, sm90, sm90_wide_keys, sm90_three_groups };

// The schedule `kernel` walks (an index into kScheduleRows).
constexpr int schedule_index(Kernel kernel) {
  return kernel == Kernel::sm80 ? 0 : kernel == Kernel::sm90_three_groups ? 2 : 1;
}

// The kernel a call runs: sm90 where it was built, the GPU is compute capability 9.0 (90), it has
// the padded head dim, tiles move in 16-byte copies and some image is longer than 128 tokens
// (VISATTN_CUDA_SM90=0: never; =1: regardless of the lengths); its wider key blocks where they
// pad the work by at most 5% more (VISATTN_CUDA_SM90_KEYS=128 or =wide forces either); at head
// dim 64 its three warpgroups where a cost model of the lengths says they are faster
// (VISATTN_CUDA_SM90_GROUPS=3 or =2 forces either). The
// lengths are the call's host cu_seqlens: for a prepared batch those of prepare(), which
// update_device leaves alone, so every call with it (eager or a graph's replay) runs one kernel.
// Any choice is correct for any lengths; the lengths only make it fast.
Kernel kernel_for(bool vector_io, int head_dim_pad, int compute_capability, const int32_t* cu_seqlens,
                  int64_t num_images);

// Launches `kernel` for bf16 (else f16) inputs at a padded head dim of 32, 64, 80, 96, 128 or
// 256 (sm90: 64-128); `params` carries that kernel's schedule; `max_seqlen` (the call's longest
// image) picks the sm80 kernel's buffering, correct for any lengths (a graph replays a batch of
// the bucket with others); returns the launch status.
cudaError_t launch_flash_forward(Kernel kernel, const KernelParams& params, bool bf16, int head_dim_pad,
                                 int64_t max_seqlen, dim3 grid, cudaStream_t stream);

}  // namespace visattn::cuda
