// The CPU kernel for AVX-512: fp32 arithmetic for every input dtype. Only this file's own code
// is compiled for AVX-512 (see kernel_prelude.h); it runs only when the CPU has it.
#include "backends/cpu/kernel_prelude.h"

#include "backends/cpu/target.h"

VISATTN_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")

#define VISATTN_CPU_ISA avx512
#include "backends/cpu/ops_avx512.h"
#include "backends/cpu/flash_kernel.h"

namespace visattn::cpu {

void run_avx512(const AttentionParams& p, int threads) {
  avx512::FlashKernel<avx512::Avx512Ops, avx512::F32Mma<avx512::Avx512Ops>>::run(p, threads);
}

}  // namespace visattn::cpu

VISATTN_TARGET_END
