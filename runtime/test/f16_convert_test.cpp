// f32ToF16 (the model runner's f16 KV writes and f16 weight conversion) against binary16's
// definition: every value round-trips, every halfway point rounds to even, and the edges
// (overflow to infinity, subnormals, NaN) behave like a hardware conversion.
#include "hybridgen/runtime/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace hybridgen::rt {
namespace {

/// The magnitude of a non-negative binary16 pattern from its definition (0x7c00 reads as 2^16,
/// the value an exponent of 31 would have: the upper neighbour of 65504 for rounding).
double f16Magnitude(uint32_t h) {
  uint32_t exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  return exponent == 0 ? std::ldexp(double(mantissa), -24)
                       : std::ldexp(double(1024 + mantissa), int(exponent) - 25);
}

TEST(F32ToF16, EveryF16ValueRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    bool nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0;
    if (!nan)
      ASSERT_EQ(f32ToF16(f16ToF32(uint16_t(h))), h) << std::hex << h;
  }
}

TEST(F32ToF16, HalfwayPointsRoundToEvenAndNeighboursToTheNearest) {
  // Every pair of adjacent non-negative values, subnormals and 65504 -> infinity included; the
  // midpoint of two binary16 values needs 12 significant bits, so it is exact in f32.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    double lo = f16Magnitude(h), hi = f16Magnitude(h + 1);
    float mid = float((lo + hi) / 2);
    ASSERT_EQ(double(mid), (lo + hi) / 2);
    uint32_t even = (h % 2 == 0) ? h : h + 1;
    for (uint16_t sign : {uint16_t(0), uint16_t(0x8000)}) {
      float s = sign ? -1.0f : 1.0f;
      ASSERT_EQ(f32ToF16(s * mid), sign | even) << std::hex << h;
      ASSERT_EQ(f32ToF16(s * std::nextafter(mid, 0.0f)), sign | h) << std::hex << h;
      ASSERT_EQ(f32ToF16(s * std::nextafter(mid, 1e30f)), sign | (h + 1)) << std::hex << h;
    }
  }
}

TEST(F32ToF16, EdgesBehaveLikeAHardwareConversion) {
  EXPECT_EQ(f32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(f32ToF16(65519.996f), 0x7bff);
  EXPECT_EQ(f32ToF16(65520.0f), 0x7c00); // halfway to 2^16: ties to even, which is infinity
  EXPECT_EQ(f32ToF16(1e30f), 0x7c00);
  EXPECT_EQ(f32ToF16(-1e30f), 0xfc00);
  EXPECT_EQ(f32ToF16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(f32ToF16(std::ldexp(1.0f, -25)), 0x0000); // half the smallest subnormal: to even
  EXPECT_EQ(f32ToF16(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(f32ToF16(std::ldexp(3.0f, -26)), 0x0001);
  EXPECT_EQ(f32ToF16(1e-30f), 0x0000);
  uint16_t nan = f32ToF16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(f16ToF32(nan)));
  // A signalling NaN whose payload lives only in the low bits must not become infinity.
  EXPECT_TRUE(std::isnan(f16ToF32(f32ToF16(std::numeric_limits<float>::signaling_NaN()))));
  EXPECT_EQ(f32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(f32ToF16(-2.0f), 0xc000);
  EXPECT_EQ(f32ToF16(0.1f), 0x2e66); // 0.0999755859375, the nearest binary16
}

} // namespace
} // namespace hybridgen::rt
