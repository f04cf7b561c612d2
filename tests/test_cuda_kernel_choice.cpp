// The cuda backend's kernel choice on the host (no GPU needed): which kernel and key block a
// batch's lengths pick (flash_params.h kernel_for, bench/NOTES.md CUDA entries 18 and 40).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "backends/cuda/flash_params.h"

namespace visattn::cuda {
namespace {

std::vector<int32_t> cu_seqlens_of(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu = {0};
  for (int32_t n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

// kernel_for on an image list's host cu_seqlens.
Kernel choice(bool vector_io, int head_dim_pad, int compute_capability, const std::vector<int32_t>& lengths) {
  const std::vector<int32_t> cu = cu_seqlens_of(lengths);
  return kernel_for(vector_io, head_dim_pad, compute_capability, cu.data(), int64_t(lengths.size()));
}

std::vector<int32_t> repeat(int32_t n, int times) { return std::vector<int32_t>(times, n); }

// Why the default choice cannot be tested here, or "" where it can.
const char* skip_reason() {
  if (std::getenv("VISATTN_CUDA_SM90") || std::getenv("VISATTN_CUDA_SM90_KEYS") || std::getenv("VISATTN_CUDA_SM90_TAIL") ||
      std::getenv("VISATTN_CUDA_SM90_GROUPS")) {
    return "a VISATTN_CUDA_SM90* variable is set: the choice is forced or its tail limit changed";
  }
  if (choice(true, 128, 90, {4096}) == Kernel::sm80) return "built without the sm90a kernel (nvcc older than 12)";
  return "";
}

TEST(CudaKernelChoice, WideKeyBlocksWhereTheyPadLittle) {
  if (const char* why = skip_reason(); *why) GTEST_SKIP() << why;
  // The public workloads on an H200 (compute capability 90), 16-byte aligned tensors.
  EXPECT_EQ(choice(true, 128, 90, repeat(1025, 16)), Kernel::sm90_wide_keys);  // internvit
  EXPECT_EQ(choice(true, 128, 90, repeat(16384, 4)), Kernel::sm90_wide_keys);  // hd128-long4
  EXPECT_EQ(choice(true, 80, 90, repeat(729, 64)), Kernel::sm90_wide_keys);    // siglip (72)
  EXPECT_EQ(choice(true, 80, 90, {16384, 12544, 9216, 6400}), Kernel::sm90_wide_keys);
  // clip: 3 blocks of 192 and a class token by mma.sync (a tail of at most 4 keys is
  // free), 576 keys against 640; on three warpgroups its 577th row would be a fourth item.
  EXPECT_EQ(choice(true, 64, 90, repeat(577, 64)), Kernel::sm90_wide_keys);
  EXPECT_EQ(choice(true, 80, 90, repeat(577, 64)), Kernel::sm90_wide_keys);
  EXPECT_EQ(choice(true, 64, 90, repeat(581, 64)), Kernel::sm90);  // 5 keys are no tail: 768 against 640
  EXPECT_EQ(choice(true, 128, 90, repeat(256, 64)), Kernel::sm90);  // 176 keys: 37% more
  EXPECT_EQ(choice(true, 80, 90, repeat(64, 500)), Kernel::sm80);  // windows: 64-row tiles
  // The 5% line: 192-key blocks at 1.001x and 1.052x (just over) the work of 128-key ones.
  EXPECT_EQ(choice(true, 80, 90, {192, 198, 384, 390, 576}), Kernel::sm90_wide_keys);
  EXPECT_EQ(choice(true, 80, 90, {191, 192, 198, 384, 390}), Kernel::sm90);
  // Off sm90, without 16-byte copies, or at head dim 256: the sm80 kernel.
  EXPECT_EQ(choice(true, 128, 80, repeat(1025, 16)), Kernel::sm80);
  EXPECT_EQ(choice(false, 128, 90, repeat(1025, 16)), Kernel::sm80);
  EXPECT_EQ(choice(true, 256, 90, repeat(1025, 16)), Kernel::sm80);
}

// Head dim 64 on three warpgroups (192-row tiles) where the cost model says they save 3%:
// whole 192-row tiles or few partial ones (bench/NOTES.md CUDA 40 measured 512, 576, 577, 640,
// 1024 and 2048 tokens on an H100).
TEST(CudaKernelChoice, ThreeWarpgroupsWhereTheModelFavoursThem) {
  if (const char* why = skip_reason(); *why) GTEST_SKIP() << why;
  EXPECT_EQ(choice(true, 64, 90, repeat(512, 64)), Kernel::sm90_three_groups);
  EXPECT_EQ(choice(true, 64, 90, repeat(576, 64)), Kernel::sm90_three_groups);
  EXPECT_EQ(choice(true, 64, 90, repeat(1024, 32)), Kernel::sm90_three_groups);
  EXPECT_EQ(choice(true, 64, 90, repeat(2048, 8)), Kernel::sm90_three_groups);
  EXPECT_EQ(choice(true, 64, 90, repeat(257, 64)), Kernel::sm90_three_groups);  // 256 and a class token
  // tests/test_backends.cpp's head_dim_64_tall_tile_edges runs on this form.
  EXPECT_EQ(choice(true, 64, 90, {191, 192, 193, 384, 385, 576}), Kernel::sm90_three_groups);
  // A row past whole 192-row tiles is a whole item: clip (577, above) keeps two warpgroups,
  // and so do 640 (4 items of 192 rows against 5 of 128: even) and 197 (192 rows and 5).
  EXPECT_EQ(choice(true, 64, 90, repeat(640, 64)), Kernel::sm90);
  EXPECT_EQ(choice(true, 64, 90, repeat(197, 64)), Kernel::sm90);
  EXPECT_NE(choice(true, 80, 90, repeat(2048, 8)), Kernel::sm90_three_groups);  // head dim 64 only
}

}  // namespace
}  // namespace visattn::cuda
