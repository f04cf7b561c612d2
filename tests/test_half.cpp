// The 16-bit float conversions every backend and the oracle rely on.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/half.h"

namespace visattn {
namespace {

TEST(Half, F16RoundTripsEveryValue) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float f = f16_to_float(uint16_t(bits));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_f16(f), bits) << "f16 bits " << bits;
    EXPECT_EQ(f, float(std::bit_cast<_Float16>(uint16_t(bits)))) << "f16 bits " << bits;
  }
}

TEST(Half, F16RoundsLikeTheCompiler) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 2'000'000; ++i) {
    const float f = std::bit_cast<float>(any(rng));
    if (std::isnan(f)) continue;
    const uint16_t expected = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(float_to_f16(f), expected) << "float " << f;
  }
}

TEST(Half, Bf16RoundsToNearestEven) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 2'000'000; ++i) {
    const float f = std::bit_cast<float>(any(rng));
    if (!std::isfinite(f)) continue;
    const uint16_t down = uint16_t(std::bit_cast<uint32_t>(f) >> 16);
    const double lo = bf16_to_float(down);
    // The value above the largest finite bf16 is 2^128 (which rounds to infinity).
    const double hi = std::isinf(bf16_to_float(uint16_t(down + 1))) ? std::copysign(0x1p128, f)
                                                                     : bf16_to_float(uint16_t(down + 1));
    const double dlo = std::fabs(double(f) - lo), dhi = std::fabs(hi - f);
    const uint16_t expected = dlo < dhi ? down : dhi < dlo ? uint16_t(down + 1)
                                                           : (down % 2 == 0 ? down : uint16_t(down + 1));
    ASSERT_EQ(float_to_bf16(f), expected) << "float " << f;
  }
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_float(float_to_bf16(INFINITY)), INFINITY);
}

}  // namespace
}  // namespace visattn
