// Shared-memory barriers (mbarrier, sm80+) for a producer/consumer ring of tiles: the
// producer's cp.async copies complete a stage's "full" barrier, consumers complete its "empty"
// barrier when they are done reading it. A barrier's phases alternate; a waiter names the
// parity of the phase it waits for (round r of a stage: parity r & 1).
#pragma once

#include <cstdint>

namespace visattn::cuda::mbarrier {

__device__ inline uint32_t address(const uint64_t* barrier) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(barrier));
}

// A phase completes after `arrivals` arrivals.
__device__ inline void init(uint64_t* barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(address(barrier)), "r"(arrivals) : "memory");
}

__device__ inline void arrive(uint64_t* barrier) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(address(barrier))
               : "memory");
}

// One arrival of this thread once its earlier cp.async copies have landed (the barrier's count
// includes it: noinc).
__device__ inline void arrive_on_copies(uint64_t* barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(address(barrier)) : "memory");
}

// After init, before the barriers are shared (a block barrier follows): makes the
// initialized barriers visible to the async proxy, whose bulk (TMA) copies complete them.
__device__ inline void fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// One arrival that also makes the phase wait for `bytes` more from bulk (TMA) copies, which
// complete them on this barrier as they land.
__device__ inline void arrive_expect_bytes(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(address(barrier)), "r"(bytes) : "memory");
}

// Blocks until the phase of this parity has completed; what was written before it is visible.
__device__ inline void wait(uint64_t* barrier, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(address(barrier)), "r"(parity)
        : "memory");
  } while (!done);
}

}  // namespace visattn::cuda::mbarrier
