// Instantiates the forward kernel for every dtype x padded head dim: the one runtime-to-
// template dispatch of the CUDA backend.
#include "backends/cuda/flash_fwd.cuh"
#include "backends/cuda/flash_params.h"
#include "backends/cuda/flash_sm90.h"
#include "backends/cuda/head_dims.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace visattn::cuda {

namespace {

template <typename T, int kHeadDimPad, int kMTiles, int kStages>
cudaError_t launch_tiles(const KernelParams& kp, dim3 grid, cudaStream_t stream) {
  using Config = TileConfig<kHeadDimPad, kMTiles, kStages>;
  constexpr size_t shared = Config::template shared_bytes<T>();
  static_assert(shared <= 99 * 1024, "the tiles must fit the shared memory of every sm80+ GPU");
  auto kernel = flash_fwd_kernel<T, kHeadDimPad, kMTiles, kStages>;
  const cudaError_t status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared));
  if (status != cudaSuccess) return status;
  // As much of L1 as shared memory as the GPU allows: several blocks per SM hide latency.
  const cudaError_t carveout =
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (carveout != cudaSuccess) return carveout;
  kernel<<<grid, Config::kThreads, shared, stream>>>(kp);
  return cudaGetLastError();
}

bool env_is(const char* name, std::string_view value) {
  const char* set = std::getenv(name);
  return set && value == set;
}

// Rows per warp: 32 (two m-tiles) where the registers allow, if asked (experiment: the env
// variable VISATTN_CUDA_ROWS_PER_WARP=32), else 16. K/V buffers: two up to head dim 128, one at
// 256 (two would not fit 99 KB), and one when no image is longer than a key block: every tile
// then has a single key block and the second buffer would never fill (+5% on 64-token
// windows, bench/NOTES.md CUDA entry 13); VISATTN_CUDA_STAGES=1 forces one (experiment).
template <typename T, int kHeadDimPad>
cudaError_t launch(const KernelParams& kp, int64_t max_seqlen, dim3 grid, cudaStream_t stream) {
  static const bool two_m_tiles = env_is("VISATTN_CUDA_ROWS_PER_WARP", "32");
  static const bool forced_one_stage = env_is("VISATTN_CUDA_STAGES", "1");  // read once, not per call
  const bool one_stage = forced_one_stage || max_seqlen <= TileConfig<kHeadDimPad, 1, 2>::kKeys;
  if constexpr (kHeadDimPad <= 128) {
    if (two_m_tiles) {
      return one_stage ? launch_tiles<T, kHeadDimPad, 2, 1>(kp, grid, stream)
                       : launch_tiles<T, kHeadDimPad, 2, 2>(kp, grid, stream);
    }
    if (!one_stage) return launch_tiles<T, kHeadDimPad, 1, 2>(kp, grid, stream);
  }
  return launch_tiles<T, kHeadDimPad, 1, 1>(kp, grid, stream);
}

// The one runtime-to-template dispatch: dtype x padded head dim.
template <typename T>
cudaError_t dispatch_head_dim(const KernelParams& kp, int head_dim_pad, int64_t max_seqlen, dim3 grid,
                              cudaStream_t stream) {
  // cudaErrorInvalidValue: no kernel for this head dim (the host rounded it to the list).
  return Sm80HeadDims::visit(head_dim_pad, cudaErrorInvalidValue, [&](auto d) {
    return launch<T, decltype(d)::value>(kp, max_seqlen, grid, stream);
  });
}

#if VISATTN_WITH_SM90A
// The sm90 kernel's tail limit, kSm90TailKeys. Test knob: VISATTN_CUDA_SM90_TAIL=N sets it
// (0: never; large: the path on most images, to check it).
int sm90_tail_limit() {
  static const int limit = [] {
    const char* set = std::getenv("VISATTN_CUDA_SM90_TAIL");
    return set ? std::max(0, std::atoi(set)) : kSm90TailKeys;
  }();
  return limit;
}

// Whether an image of n tokens ends in a tail: whole blocks of `keys`, then at most tail_limit.
bool has_tail(int64_t n, int keys, int tail_limit) {
  const int64_t rest = n % keys;
  return n > keys && rest > 0 && rest <= tail_limit;
}

// The sm90 kernel's work at `keys` keys per block: each image's query rows times its keys
// rounded up to whole blocks (down, where the rest is a tail of at most tail_limit keys).
double padded_work(const int32_t* cu_seqlens, int64_t num_images, int keys, int tail_limit) {
  double work = 0.0;
  for (int64_t i = 0; i < num_images; ++i) {
    const int64_t n = cu_seqlens[i + 1] - cu_seqlens[i];
    work += double(n) * double(has_tail(n, keys, tail_limit) ? n - n % keys : (n + keys - 1) / keys * keys);
  }
  return work;
}

// Modeled time of an sm90 kernel form on a batch: per image, its items (tiles of `rows` query
// rows; a shorter image, packed, a fraction of one) times (its key blocks x a block's cost + an
// item's own cost), a tail of at most tail_limit keys as half a block. A partial item costs a
// whole one: it is one warpgroup's chain, not the tensor cores' work (bench/NOTES.md CUDA 36).
// The costs (arbitrary units) were fitted at head dim 64 on an H100 (CUDA 40) and predict its
// rates there within 7%.
struct Sm90Form {
  int rows, keys;
  double block, item;
};
constexpr Sm90Form kTwoGroups{kWideTileRows, kSm90Keys, 43.1, 59.4};
constexpr Sm90Form kTwoGroupsWide{kWideTileRows, sm90_wide_keys(64), 55.0, 59.4};
constexpr Sm90Form kThreeGroups{kTallTileRows, kSm90Keys, 55.3, 68.0};

double modeled_time(const int32_t* cu_seqlens, int64_t num_images, const Sm90Form& form, int tail_limit) {
  double time = 0.0;
  for (int64_t i = 0; i < num_images; ++i) {
    const int64_t n = cu_seqlens[i + 1] - cu_seqlens[i];
    const double blocks = has_tail(n, form.keys, tail_limit) ? double(n / form.keys) + 0.5
                                                              : double((n + form.keys - 1) / form.keys);
    const double items = n >= form.rows ? double((n + form.rows - 1) / form.rows) : double(n) / form.rows;
    time += items * (blocks * form.block + form.item);
  }
  return time;
}
#endif

}  // namespace

// The sm90a kernel on compute capability 9.0 (sm90a code runs on nothing else) where it was
// built, has the head dim and tiles move in 16-byte copies, for batches with an image longer
// than one of its 128-row tiles: on 64-token windows the sm80 kernel's smaller tiles are faster
// (bench/NOTES.md CUDA entry 11). VISATTN_CUDA_SM90=0 turns it off, =1 runs it on every batch
// it can (tests, experiments). Its wider key blocks ran 2-13% faster than 128 keys where they
// padded at most 3% more keys, and lost 4-16% where they padded 12% or more (CUDA entry 18):
// they run where the padded work grows by 5% at most. At head dim 64 its three-warpgroup form
// runs where the cost model says it is faster (CUDA entry 40); VISATTN_CUDA_SM90_GROUPS=3 or =2
// forces either form there.
Kernel kernel_for(bool vector_io, int head_dim_pad, int compute_capability, const int32_t* cu_seqlens,
                  int64_t num_images) {
#if VISATTN_WITH_SM90A
  static const bool off = env_is("VISATTN_CUDA_SM90", "0"), forced = env_is("VISATTN_CUDA_SM90", "1");
  static const bool narrow = env_is("VISATTN_CUDA_SM90_KEYS", "128"), wide = env_is("VISATTN_CUDA_SM90_KEYS", "wide");
  if (off || compute_capability != 90 || !vector_io || !Sm90HeadDims::has(head_dim_pad)) return Kernel::sm80;
  int64_t max_seqlen = 0;
  for (int64_t i = 0; i < num_images; ++i) max_seqlen = std::max<int64_t>(max_seqlen, cu_seqlens[i + 1] - cu_seqlens[i]);
  if (!forced && max_seqlen <= kWideTileRows) return Kernel::sm80;
  static const bool three = env_is("VISATTN_CUDA_SM90_GROUPS", "3"), two = env_is("VISATTN_CUDA_SM90_GROUPS", "2");
  if (three && head_dim_pad == 64) return Kernel::sm90_three_groups;
  const int tail = sm90_tail_limit();
  // Two warpgroups: the wide key block where it pads the work little.
  const auto by_padding = [&] {
    const double wide_work = padded_work(cu_seqlens, num_images, sm90_wide_keys(head_dim_pad), tail),
                 work = padded_work(cu_seqlens, num_images, kSm90Keys, tail);
    // At head dim 64 the wide block was no faster at equal work (CUDA entry 18): it must save some.
    return wide_work <= (head_dim_pad == 64 ? 0.95 : 1.05) * work ? Kernel::sm90_wide_keys : Kernel::sm90;
  };
  const Kernel two_groups = narrow ? Kernel::sm90 : wide ? Kernel::sm90_wide_keys : by_padding();
  if (head_dim_pad != 64 || two || narrow || wide) return two_groups;
  // Head dim 64: three warpgroups where the model says they save 3% (CUDA 40: their blocks run
  // 17% faster per row, but an image a row past whole 192-row tiles costs a whole item).
  const double two_time = modeled_time(cu_seqlens, num_images,
                                       two_groups == Kernel::sm90_wide_keys ? kTwoGroupsWide : kTwoGroups, tail),
               three_time = modeled_time(cu_seqlens, num_images, kThreeGroups, tail);
  return three_time < 0.97 * two_time ? Kernel::sm90_three_groups : two_groups;
#else
  (void)vector_io, (void)head_dim_pad, (void)compute_capability, (void)cu_seqlens, (void)num_images;
  return Kernel::sm80;
#endif
}

cudaError_t launch_flash_forward(Kernel kernel, const KernelParams& params, bool bf16, int head_dim_pad,
                                 int64_t max_seqlen, dim3 grid, cudaStream_t stream) {
#if VISATTN_WITH_SM90A
  if (kernel != Kernel::sm80) {
    return launch_flash_forward_sm90(params, bf16, head_dim_pad, kernel, sm90_tail_limit(),
                                     grid, stream);
  }
#endif
  if (kernel != Kernel::sm80) return cudaErrorInvalidValue;
  return bf16 ? dispatch_head_dim<__nv_bfloat16>(params, head_dim_pad, max_seqlen, grid, stream)
              : dispatch_head_dim<__half>(params, head_dim_pad, max_seqlen, grid, stream);
}

}  // namespace visattn::cuda
