#include "backends/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "backends/cpu/work.h"
#include "core/error_message.h"
#include "core/parallel.h"

namespace visattn::cpu {

namespace {

// Kernels from fastest to most portable. VISATTN_CPU_ISA=<name> caps the choice (tests use it
// to run every path on one machine).
enum class Path { amx, avx512_bf16, avx512, avx2, portable };
constexpr Path kAllPaths[] = {Path::amx, Path::avx512_bf16, Path::avx512, Path::avx2, Path::portable};

// AMX needs the CPU bits and, on Linux, the kernel's permission for this process to use the
// tile state (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA); asked once.
bool amx_usable() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool usable = [] {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool tile = edx & (1u << 24), bf16 = edx & (1u << 22);
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return tile && bf16 && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
#else
  return false;
#endif
}

const char* path_name(Path path) {
  switch (path) {
    case Path::amx: return "amx";
    case Path::avx512_bf16: return "avx512_bf16";
    case Path::avx512: return "avx512";
    case Path::avx2: return "avx2";
    case Path::portable: return "portable";
  }
  return "?";
}

bool cpu_has(Path path) {
#if defined(__x86_64__) || defined(_M_X64)
  switch (path) {
    case Path::amx: return cpu_has(Path::avx512_bf16) && amx_usable();
    case Path::avx512_bf16:
      return cpu_has(Path::avx512) && __builtin_cpu_supports("avx512bf16");
    case Path::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Path::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Path::portable: return true;
  }
  return false;
#else
  return path == Path::portable;
#endif
}

// The most capable path allowed by VISATTN_CPU_ISA, if set.
Path ceiling_path() {
  static const Path ceiling = [] {
    const char* requested = std::getenv("VISATTN_CPU_ISA");
    for (Path p : kAllPaths) {
      if (requested && std::strcmp(requested, path_name(p)) == 0) return p;
    }
    return Path::amx;
  }();
  return ceiling;
}

Path choose_path(DType dtype) {
  for (Path p : kAllPaths) {
    if (p < ceiling_path()) continue;
    if ((p == Path::amx || p == Path::avx512_bf16) && dtype != DType::bf16) continue;  // bf16 only
    if (cpu_has(p)) return p;
  }
  return Path::portable;
}

}  // namespace

void run(const AttentionParams& p) {
  const int threads = p.num_threads > 0 ? p.num_threads : default_num_threads();
  switch (choose_path(p.dtype)) {
#if defined(__x86_64__) || defined(_M_X64)
    case Path::amx: return run_amx(p, threads);
    case Path::avx512_bf16: return run_avx512_bf16(p, threads);
    case Path::avx512: return run_avx512(p, threads);
    case Path::avx2: return run_avx2(p, threads);
#endif
    default: return run_portable(p, threads);
  }
}

std::string describe_paths() {
  const Path bf16 = choose_path(DType::bf16), f32 = choose_path(DType::f32);
  if (bf16 == f32) return concat("all dtypes: ", path_name(f32));
  return concat("bf16: ", path_name(bf16), "; f16, f32: ", path_name(f32), " (fp32 arithmetic)");
}

}  // namespace visattn::cpu
