// The CPU kernel for AVX2 + FMA: fp32 arithmetic for every input dtype. Only this file's own
// code is compiled for AVX2 (see kernel_prelude.h); it runs only when the CPU has AVX2 and FMA.
#include "backends/cpu/kernel_prelude.h"

#include "backends/cpu/target.h"

VISATTN_TARGET_BEGIN("avx2,fma,f16c")

#define VISATTN_CPU_ISA avx2
#include "backends/cpu/ops_avx2.h"
#include "backends/cpu/flash_kernel.h"

namespace visattn::cpu {

void run_avx2(const AttentionParams& p, int threads) {
  avx2::FlashKernel<avx2::Avx2Ops, avx2::F32Mma<avx2::Avx2Ops>>::run(p, threads);
}

}  // namespace visattn::cpu

VISATTN_TARGET_END
