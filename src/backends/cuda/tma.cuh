// Tensor copies (TMA, sm90): a box of a global tensor, described by a CUtensorMap the host
// encoded, copied into shared memory by the copy engine; the bytes complete on an mbarrier
// (mbarrier::arrive_expect_bytes announces them).
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

#include "backends/cuda/mbarrier.cuh"

namespace visattn::cuda::tma {

// The box at coordinates (c0, c1, c2), innermost first, of a rank-3 map into `target` (laid out
// as the map's swizzle says; 1024-byte aligned for the 128-byte swizzle).
__device__ inline void load_3d(void* target, const CUtensorMap* map, int c0, int c1, int c2, uint64_t* barrier) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
          static_cast<uint32_t>(__cvta_generic_to_shared(target))),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(mbarrier::address(barrier))
      : "memory");
}

}  // namespace visattn::cuda::tma
