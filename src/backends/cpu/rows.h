// Row conversion between the tensor dtypes and fp32 for the CPU kernels' packing steps.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/half.h"

namespace visattn::cpu {

// dst[0..n) = element offset..offset+n of base, as float.
inline void load_row(const void* base, DType dtype, int64_t offset, int n, float* dst) {
  switch (dtype) {
    case DType::f32:
      std::memcpy(dst, static_cast<const float*>(base) + offset, n * sizeof(float));
      return;
    case DType::bf16: {
      const uint16_t* src = static_cast<const uint16_t*>(base) + offset;
      for (int c = 0; c < n; ++c) dst[c] = bf16_to_float(src[c]);
      return;
    }
    case DType::f16: {
      const uint16_t* src = static_cast<const uint16_t*>(base) + offset;
      for (int c = 0; c < n; ++c) dst[c] = f16_to_float(src[c]);
      return;
    }
  }
}

// Elements offset..offset+n of base = src rounded to dtype.
inline void store_row(void* base, DType dtype, int64_t offset, const float* src, int n) {
  switch (dtype) {
    case DType::f32:
      std::memcpy(static_cast<float*>(base) + offset, src, n * sizeof(float));
      return;
    case DType::bf16: {
      uint16_t* dst = static_cast<uint16_t*>(base) + offset;
      for (int c = 0; c < n; ++c) dst[c] = float_to_bf16(src[c]);
      return;
    }
    case DType::f16: {
      uint16_t* dst = static_cast<uint16_t*>(base) + offset;
      for (int c = 0; c < n; ++c) dst[c] = float_to_f16(src[c]);
      return;
    }
  }
}

// Two bf16 values as one 32-bit pair (the operand format of vdpbf16ps and AMX tiles).
inline uint32_t bf16_pair(uint16_t lo, uint16_t hi) { return uint32_t(lo) | uint32_t(hi) << 16; }

}  // namespace visattn::cpu
