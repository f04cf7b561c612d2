#include "backends/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>

#include "backends/cpu/work.h"
#include "core/error_message.h"
#include "core/parallel.h"

namespace visattn::cpu {

namespace {

// Kernels from fastest to most portable. VISATTN_CPU_ISA=<name> caps the choice (tests use it
// to run every path on one machine).
enum class Path { avx512_bf16, avx512, avx2, portable };

const char* path_name(Path path) {
  switch (path) {
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
    for (Path p : {Path::avx512_bf16, Path::avx512, Path::avx2, Path::portable}) {
      if (requested && std::strcmp(requested, path_name(p)) == 0) return p;
    }
    return Path::avx512_bf16;
  }();
  return ceiling;
}

Path choose_path(DType dtype) {
  for (Path p : {Path::avx512_bf16, Path::avx512, Path::avx2, Path::portable}) {
    if (p < ceiling_path()) continue;
    if (p == Path::avx512_bf16 && dtype != DType::bf16) continue;  // pairs of bf16 only
    if (cpu_has(p)) return p;
  }
  return Path::portable;
}

}  // namespace

void run(const AttentionParams& p) {
  const int threads = p.num_threads > 0 ? p.num_threads : default_num_threads();
  switch (choose_path(p.dtype)) {
#if defined(__x86_64__) || defined(_M_X64)
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
