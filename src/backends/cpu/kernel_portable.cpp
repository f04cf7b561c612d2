// The CPU kernel in plain C++ (baseline target): the fallback on every CPU.
#include "backends/cpu/kernel_prelude.h"

#define VISATTN_CPU_ISA portable
#include "backends/cpu/ops_portable.h"
#include "backends/cpu/flash_kernel.h"

namespace visattn::cpu {

void run_portable(const AttentionParams& p, int threads) {
  portable::FlashKernel<portable::PortableOps, portable::F32Mma<portable::PortableOps>>::run(p, threads);
}

}  // namespace visattn::cpu
