// The CPU ceiling of the bench: the machine's fp32 GEMM rate through OpenBLAS.
#pragma once

#include <optional>

namespace visattn::cli {

// Median GFLOP/s of cblas_sgemm on n x n x n with `threads` OpenBLAS threads; nothing when
// this build has no OpenBLAS.
std::optional<double> measure_sgemm_gflops(int n, int threads);

}  // namespace visattn::cli
