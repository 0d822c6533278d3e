//===- WgmmaLayoutTest.cpp - warpgroup-MMA layouts against the PTX ISA ----===//
//
// The accumulator fragment, the matrix descriptor and the 128-byte swizzle
// of meshfold/Dialect/GPU/Transforms/WgmmaLayout.h, against the PTX ISA's
// tables ("Asynchronous Warpgroup Level Matrix" sections of the sm_90a ISA):
// each map a bijection with the documented layout.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/GPU/Transforms/WgmmaLayout.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>

using namespace meshfold::wgmma;

namespace {
std::pair<int64_t, int64_t> element(int64_t t, int64_t r) {
  return {rowOfThread(t) + rowOfRegister(r), colOfThread(t) + colOfRegister(r)};
}
} // namespace

// The ISA's figure for the m64nNk16 D fragment: thread T of warp W holds
// d[4i + 0..3] at rows 16W + T%32/4 (+8 for d[4i+2], d[4i+3]) and columns
// 8i + 2(T%4) (+1 for the odd registers).
TEST(WgmmaLayoutTest, AccumulatorMatchesTheIsaTable) {
  EXPECT_EQ(element(0, 0), std::make_pair(int64_t(0), int64_t(0)));
  EXPECT_EQ(element(0, 1), std::make_pair(int64_t(0), int64_t(1)));
  EXPECT_EQ(element(0, 2), std::make_pair(int64_t(8), int64_t(0)));
  EXPECT_EQ(element(0, 3), std::make_pair(int64_t(8), int64_t(1)));
  EXPECT_EQ(element(0, 4), std::make_pair(int64_t(0), int64_t(8)));
  EXPECT_EQ(element(1, 0), std::make_pair(int64_t(0), int64_t(2)));
  EXPECT_EQ(element(3, 1), std::make_pair(int64_t(0), int64_t(7)));
  EXPECT_EQ(element(4, 0), std::make_pair(int64_t(1), int64_t(0)));
  EXPECT_EQ(element(31, 3), std::make_pair(int64_t(15), int64_t(7)));
  EXPECT_EQ(element(32, 0), std::make_pair(int64_t(16), int64_t(0)));
  EXPECT_EQ(element(127, 63), std::make_pair(int64_t(63), int64_t(127)));
}

TEST(WgmmaLayoutTest, AccumulatorIsABijectionForEveryN) {
  for (int64_t n = 8; n <= 256; n += 8) {
    std::set<std::pair<int64_t, int64_t>> seen;
    for (int64_t t = 0; t < kThreads; ++t)
      for (int64_t r = 0; r < registersPerThread(n); ++r) {
        auto [row, col] = element(t, r);
        ASSERT_GE(row, 0);
        ASSERT_LT(row, kRows);
        ASSERT_GE(col, 0);
        ASSERT_LT(col, n);
        ASSERT_TRUE(seen.insert({row, col}).second)
            << "n " << n << ": thread " << t << " register " << r;
      }
    EXPECT_EQ(int64_t(seen.size()), kRows * n);
  }
}

// Bits of the shared-memory matrix descriptor: start address [0, 14), leading
// byte offset [16, 30), stride byte offset [32, 46), base offset [49, 52),
// swizzle mode [62, 64) (1: 128-byte), each address field in 16-byte units.
TEST(WgmmaLayoutTest, DescriptorFields) {
  uint64_t d = descriptor(0x12340, 16, 1024, Swizzle::B128, 5);
  EXPECT_EQ(d & 0x3fff, 0x1234u);
  EXPECT_EQ(d >> 16 & 0x3fff, 1u);
  EXPECT_EQ(d >> 32 & 0x3fff, 64u);
  EXPECT_EQ(d >> 49 & 7, 5u);
  EXPECT_EQ(d >> 62, 1u);
  EXPECT_EQ(d >> 14 & 3, 0u);
  EXPECT_EQ(d >> 30 & 3, 0u);
  EXPECT_EQ(d >> 46 & 7, 0u);
  EXPECT_EQ(d >> 52 & 0x3ff, 0u);
  // The constant part the pass ORs the address into: 8-row atoms of the
  // row's span apart, the swizzle of that span.
  EXPECT_EQ(kMajorSwizzled(128), descriptor(0, 16, 1024, Swizzle::B128));
  EXPECT_EQ(kMajorSwizzled(64), descriptor(0, 16, 512, Swizzle::B64));
  EXPECT_EQ(kMajorSwizzled(32), descriptor(0, 16, 256, Swizzle::B32));
  EXPECT_EQ(kMajorSwizzled(64) >> 62, 2u);
  EXPECT_EQ(kMajorSwizzled(32) >> 62, 3u);
  EXPECT_EQ(kMajorSwizzled(128) | (0x8000 >> 4),
            descriptor(0x8000, 16, 1024, Swizzle::B128));
  // Shared memory holds at most 228 KB: the address field never overflows.
  EXPECT_EQ(descriptor(227 * 1024, 0, 0, Swizzle::None), (227u * 1024) >> 4);
}

// The 128-byte swizzle: 16-byte chunk c of row r (of 128 bytes) lies at
// chunk c ^ (r mod 8); bytes within a chunk keep their order; a bijection
// of every 1024-byte atom.
TEST(WgmmaLayoutTest, Swizzle128) {
  for (uint64_t row = 0; row < 16; ++row)
    for (uint64_t chunk = 0; chunk < 8; ++chunk)
      for (uint64_t byte = 0; byte < 16; ++byte) {
        uint64_t offset = row * 128 + chunk * 16 + byte;
        EXPECT_EQ(swizzle128(offset),
                  row * 128 + ((chunk ^ (row % 8)) * 16) + byte);
      }
  std::set<uint64_t> seen;
  for (uint64_t offset = 0; offset < kAtomBytes; ++offset) {
    uint64_t s = swizzle128(offset);
    ASSERT_LT(s, kAtomBytes);
    ASSERT_TRUE(seen.insert(s).second);
  }
}
