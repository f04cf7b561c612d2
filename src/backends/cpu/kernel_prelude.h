// Everything the per-ISA kernel headers use, included by each kernel TU *before* it switches
// the compiler's target: code defined in these headers stays baseline in every TU, so the
// linker can never pick an AVX-512 copy of a shared inline function for the portable path.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

#include "backends/cpu/prefetch.h"
#include "backends/cpu/rows.h"
#include "backends/cpu/work.h"
#include "core/parallel.h"
