// Conversions between float and the 16-bit float formats, round to nearest even.
// Scalar and portable: used by the reference backend, the check harness and tests.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "visattn/tensor.h"

namespace visattn {

inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  // Subnormal: mant * 2^-24.
  const float magnitude = float(mant) * 0x1p-24f;
  return sign ? -magnitude : magnitude;
}

inline uint16_t float_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;       // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;      // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {                             // below 2^-14: subnormal or zero
    // Adding 0.5 (2^-1) aligns the mantissa so that float addition does the RNE rounding.
    const float shifted = std::bit_cast<float>(abs) + 0.5f;
    return sign | uint16_t(std::bit_cast<uint32_t>(shifted) - 0x3f000000u);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  rounded -= 0x38000000u;  // rebias exponent 127 -> 15
  return sign | uint16_t(rounded >> 13);
}

// Load element i of a buffer of `dtype` as float.
inline float load_as_float(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
  }
  return 0.0f;
}

// Store a float into element i of a buffer of `dtype`, rounding to nearest even.
inline void store_from_float(void* base, DType dtype, int64_t i, float value) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(base)[i] = value; return;
    case DType::f16: static_cast<uint16_t*>(base)[i] = float_to_f16(value); return;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = float_to_bf16(value); return;
  }
}

// Round a float to the nearest value representable in `dtype`.
inline float round_to_dtype(float value, DType dtype) {
  switch (dtype) {
    case DType::f32: return value;
    case DType::f16: return f16_to_float(float_to_f16(value));
    case DType::bf16: return bf16_to_float(float_to_bf16(value));
  }
  return value;
}

}  // namespace visattn
