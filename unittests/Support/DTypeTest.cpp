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
