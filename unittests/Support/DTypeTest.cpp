//===- DTypeTest.cpp - The element-type codec -----------------------------===//

#include "meshfold/Support/DType.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdint>
#include <limits>

using namespace meshfold;

TEST(Conversions, BF16RoundToNearestEven) {
  EXPECT_EQ(f32ToBF16(1.0f), 0x3f80);
  EXPECT_EQ(f32ToBF16(-2.0f), 0xc000);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(f32ToBF16(1.0f + 1.0f / 256), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6: ties to even.
  EXPECT_EQ(f32ToBF16(1.0f + 3.0f / 256), 0x3f82);
  // Just above halfway rounds up.
  EXPECT_EQ(f32ToBF16(1.0f + 1.0f / 256 + 1.0f / 65536), 0x3f81);
  EXPECT_EQ(f32ToBF16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16ToF32(f32ToBF16(std::nanf("")))));
  EXPECT_EQ(bf16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(bf16ToF32(0xc040), -3.0f);
}

TEST(Conversions, F16) {
  EXPECT_EQ(f16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(f16ToF32(0xc000), -2.0f);
  EXPECT_EQ(f16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(f16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16ToF32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_TRUE(std::isinf(f16ToF32(0x7c00)));
  EXPECT_TRUE(std::isnan(f16ToF32(0x7e00)));
  EXPECT_EQ(f32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(f32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(f32ToF16(65520.0f), 0x7c00); // Halfway to 65536: rounds to inf.
  EXPECT_EQ(f32ToF16(1.0f + 1.0f / 2048), 0x3c00);    // Tie to even.
  EXPECT_EQ(f32ToF16(std::ldexp(1.0f, -25)), 0x0000); // Tie to even (0).
  EXPECT_EQ(f32ToF16(std::ldexp(3.0f, -26)), 0x0001);
  // Every half value survives f16 -> f32 -> f16.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
      continue; // NaN payloads need not round trip.
    ASSERT_EQ(f32ToF16(f16ToF32(static_cast<uint16_t>(h))), h) << h;
  }
}

// A NaN stays a quiet NaN with the top bits of its payload, in both 16-bit
// formats (the messages of f16 collectives keep them too).
TEST(Conversions, NaNPayloads) {
  float nan = bitsToFloat(0x7fc12345u);
  EXPECT_EQ(f32ToF16(nan), 0x7e09);
  EXPECT_EQ(f32ToF16(-nan), 0xfe09);
  EXPECT_EQ(f32ToBF16(bitsToFloat(0x7f812345u)), 0x7fc1);
  EXPECT_TRUE(std::isnan(f16ToF32(0x7e09)));
}

// fp8 e4m3 (e4m3fn): every code against its definition, (-1)^s 2^(e-7)
// (1 + m/8), or m 2^-9 for e = 0, and S.1111.111 NaN (no infinities).
TEST(Conversions, F8E4M3Decode) {
  for (uint32_t code = 0; code < 256; ++code) {
    uint32_t e = (code >> 3) & 0xf, m = code & 7;
    float value = f8E4M3ToF32(static_cast<uint8_t>(code));
    if (e == 0xf && m == 7) {
      EXPECT_TRUE(std::isnan(value)) << code;
      continue;
    }
    double expected = e == 0 ? std::ldexp(double(m), -9)
                             : std::ldexp(1.0 + m / 8.0, int(e) - 7);
    if (code & 0x80)
      expected = -expected;
    ASSERT_EQ(value, float(expected)) << code;
    // Every finite code survives e4m3 -> f32 -> e4m3 (but -0 and +0 may
    // both be 0; the sign is kept).
    ASSERT_EQ(f32ToF8E4M3(value), code) << code;
  }
  EXPECT_EQ(f8E4M3ToF32(0x7e), 448.0f);
  EXPECT_EQ(f8E4M3ToF32(0x01), std::ldexp(1.0f, -9));
}

// Rounding to nearest even, against the nearest of all finite codes, on a
// sweep of magnitudes from below the smallest subnormal to beyond 448.
TEST(Conversions, F8E4M3RoundToNearestEven) {
  EXPECT_EQ(f32ToF8E4M3(1.0f), 0x38);
  EXPECT_EQ(f32ToF8E4M3(1.0f + 1.0f / 16), 0x38);      // Tie to even (1).
  EXPECT_EQ(f32ToF8E4M3(1.0f + 3.0f / 16), 0x3a);      // Tie to even (1.25).
  EXPECT_EQ(f32ToF8E4M3(std::ldexp(1.0f, -10)), 0x00); // Tie to even (0).
  EXPECT_EQ(f32ToF8E4M3(std::ldexp(3.0f, -11)), 0x01);
  EXPECT_EQ(f32ToF8E4M3(464.0f), 0x7e); // Beyond 448: saturates.
  EXPECT_EQ(f32ToF8E4M3(-1e9f), 0xfe);
  EXPECT_EQ(f32ToF8E4M3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(f32ToF8E4M3(std::nanf("")), 0x7f);
  for (float x = std::ldexp(1.0f, -12); x < 600.0f; x *= 1.0007f) {
    // The nearest finite code, ties to the even code.
    uint32_t best = 0;
    double bestError = INFINITY;
    for (uint32_t code = 0; code < 0x7f; ++code) {
      double error = std::fabs(double(f8E4M3ToF32(uint8_t(code))) - x);
      if (error < bestError || (error == bestError && (code & 1) == 0)) {
        best = code;
        bestError = error;
      }
    }
    ASSERT_EQ(f32ToF8E4M3(x), best) << x;
    ASSERT_EQ(f32ToF8E4M3(-x), best | 0x80) << x;
  }
}
