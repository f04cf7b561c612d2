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

#if defined(__x86_64__) && defined(__linux__)
// CPUID feature bits (read directly: compilers disagree on __builtin_cpu_supports names) and
// the register state the OS saves (XCR0), without which the instructions fault.
struct X86Features {
  bool fma, f16c, avx2, avx512, avx512_bf16, amx;

  static X86Features read() {
    X86Features f{};
    unsigned a, b, c, d;
    if (!__get_cpuid_count(1, 0, &a, &b, &c, &d) || !(c & (1u << 27))) return f;  // OSXSAVE
    const bool fma = c & (1u << 12), f16c = c & (1u << 29);
    unsigned xcr0_lo, xcr0_hi;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    const bool os_avx = (xcr0_lo & 0x6) == 0x6, os_avx512 = (xcr0_lo & 0xe6) == 0xe6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
    const unsigned leaf7_ebx = b, leaf7_edx = d;
    const bool avx512 = os_avx512 && (leaf7_ebx & (1u << 16)) && (leaf7_ebx & (1u << 17)) &&
                        (leaf7_ebx & (1u << 30)) && (leaf7_ebx & (1u << 31));  // F DQ BW VL
    __get_cpuid_count(7, 1, &a, &b, &c, &d);
    f.fma = os_avx && fma;
    f.f16c = os_avx && f16c;
    f.avx2 = os_avx && (leaf7_ebx & (1u << 5));
    f.avx512 = avx512;
    f.avx512_bf16 = avx512 && (a & (1u << 5));
    // AMX: AMX-TILE and AMX-BF16, and Linux's permission for this process to use the tile
    // state (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA).
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    f.amx = f.avx512_bf16 && (leaf7_edx & (1u << 24)) && (leaf7_edx & (1u << 22)) &&
            syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
    return f;
  }
};
#endif

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
#if defined(__x86_64__) && defined(__linux__)
  static const X86Features f = X86Features::read();
  switch (path) {
    case Path::amx: return f.amx;
    case Path::avx512_bf16: return f.avx512_bf16 && f.fma && f.f16c;
    case Path::avx512: return f.avx512 && f.fma && f.f16c;
    case Path::avx2: return f.avx2 && f.fma && f.f16c;
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
#if defined(__x86_64__) && defined(__linux__)
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
