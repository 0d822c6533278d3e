//===- KVCacheTest.cpp - A rank's paged K/V cache -------------------------===//

#include "mfrt/program/KVCache.h"

#include <gtest/gtest.h>

#include <set>

using namespace mfrt;

namespace {

// Two layers of 2 heads x 4 floats, blocks of 3 rows, K and V.
KVPool makePool() {
  KVPool pool;
  pool.configure(/*blockTokens=*/3, /*layers=*/2, /*headDim=*/4,
                 /*kvCopies=*/2, /*arrays=*/4);
  pool.useHeads(0, 2, 2);
  pool.useHeads(1, 2, 2);
  return pool;
}

TEST(KVCache, BlocksFor) {
  EXPECT_EQ(kvBlocksFor(0, 16), 0);
  EXPECT_EQ(kvBlocksFor(1, 16), 1);
  EXPECT_EQ(kvBlocksFor(16, 16), 1);
  EXPECT_EQ(kvBlocksFor(17, 16), 2);
}

TEST(KVCache, RowsLiveInTheirBlocks) {
  KVPool pool = makePool();
  std::vector<int32_t> a, b;
  // Interleaved requests: each slot's rows keep what was written, per layer
  // and tensor, and a block serves every layer.
  for (int64_t slot = 0; slot < 7; ++slot)
    for (int64_t layer = 0; layer < 2; ++layer)
      for (int64_t tensor = 0; tensor < 2; ++tensor) {
        float *ra = pool.row(a, layer, slot, tensor);
        float *rb = pool.row(b, layer, slot, tensor);
        for (int i = 0; i < 8; ++i) {
          ra[i] = float(1000 * slot + 100 * layer + 10 * tensor + i);
          rb[i] = -ra[i];
        }
      }
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(b.size(), 3u);
  EXPECT_EQ(pool.blocksInUse(), 6);
  std::set<int32_t> ids(a.begin(), a.end());
  ids.insert(b.begin(), b.end());
  EXPECT_EQ(ids.size(), 6u);
  for (int64_t slot = 0; slot < 7; ++slot)
    for (int64_t layer = 0; layer < 2; ++layer)
      for (int64_t tensor = 0; tensor < 2; ++tensor) {
        const float *ra = pool.row(std::as_const(a), layer, slot, tensor);
        const float *rb = pool.row(std::as_const(b), layer, slot, tensor);
        for (int i = 0; i < 8; ++i) {
          EXPECT_EQ(ra[i], float(1000 * slot + 100 * layer + 10 * tensor + i));
          EXPECT_EQ(rb[i], -ra[i]);
        }
      }
  // Each layer's K (and V) rows of every block are one array: slot i is
  // row table[i / 3] * 3 + i % 3 of it.
  for (int64_t layer = 0; layer < 2; ++layer)
    for (int64_t tensor = 0; tensor < 2; ++tensor) {
      const float *rows = pool.rows(layer, tensor);
      for (int64_t slot = 0; slot < 7; ++slot) {
        EXPECT_EQ(pool.poolRow(a, slot), a[size_t(slot / 3)] * 3 + slot % 3);
        EXPECT_EQ(pool.row(std::as_const(a), layer, slot, tensor),
                  rows + pool.poolRow(a, slot) * 8);
      }
    }
  EXPECT_EQ(pool.blocksMade(), 6);
}

TEST(KVCache, ReleasedBlocksAreReused) {
  KVPool pool = makePool();
  std::vector<int32_t> a, b;
  pool.row(a, 0, 0, 0);
  pool.row(a, 0, 3, 0);
  int64_t bytes = pool.allocatedBytes();
  EXPECT_EQ(bytes, 2 * 2 * 3 * 8 * int64_t(sizeof(float)));
  pool.release(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(pool.blocksInUse(), 0);
  pool.reserve(b, 5);
  EXPECT_EQ(b.size(), 2u);
  pool.row(b, 0, 4, 1);
  // The storage of the released blocks serves the next request.
  EXPECT_EQ(pool.allocatedBytes(), bytes);
  EXPECT_EQ(pool.peakBlocks(), 2);
}

TEST(KVCache, SharedBlocksLiveUntilTheLastRelease) {
  KVPool pool = makePool();
  std::vector<int32_t> a, b;
  for (int64_t slot = 0; slot < 7; ++slot)
    pool.row(a, 0, slot, 0)[0] = float(slot);
  // b starts with a's two full blocks and writes its own third.
  pool.share(a, 2, b);
  EXPECT_EQ(b, std::vector<int32_t>(a.begin(), a.begin() + 2));
  EXPECT_EQ(pool.row(std::as_const(b), 0, 4, 0)[0], 4.0f);
  pool.row(b, 0, 6, 0)[0] = -6.0f;
  EXPECT_NE(b[2], a[2]);
  EXPECT_EQ(pool.row(std::as_const(a), 0, 6, 0)[0], 6.0f);
  EXPECT_EQ(pool.blocksInUse(), 4);
  pool.release(a);
  EXPECT_EQ(pool.blocksInUse(), 3);
  EXPECT_EQ(pool.row(std::as_const(b), 0, 1, 0)[0], 1.0f);
  pool.release(b);
  EXPECT_EQ(pool.blocksInUse(), 0);
  EXPECT_EQ(pool.peakBlocks(), 4);
}

TEST(KVCache, HeadsAreFixedPerLayer) {
  KVPool pool = makePool();
  EXPECT_EQ(pool.headOffset(1), 2);
  EXPECT_EQ(pool.heads(1), 2);
  EXPECT_DEATH(pool.useHeads(1, 0, 2), "holds heads 2..3, not 0..1");
}

TEST(KVCache, SlotsAreRecordedInOrder) {
  KVPool pool = makePool();
  std::vector<int32_t> a;
  EXPECT_DEATH(pool.row(a, 0, 3, 0), "recorded before the slots of block 0");
}

} // namespace

TEST(KVCache, RowsStayWhereTheyAreAsBlocksAreMade) {
  KVPool pool = makePool();
  std::vector<int32_t> a;
  pool.row(a, 1, 0, 1)[5] = 42.0f;
  const float *rows = pool.rows(1, 1);
  // Thousands of blocks later (past the first 64 KiB committed), the array
  // has not moved and still holds the first row.
  for (int64_t slot = 1; slot < 3 * 4000; ++slot)
    pool.row(a, 1, slot, 1)[0] = float(slot);
  EXPECT_EQ(pool.rows(1, 1), rows);
  EXPECT_EQ(rows[5], 42.0f);
  EXPECT_EQ(pool.row(std::as_const(a), 1, 11999, 1)[0], 11999.0f);
  EXPECT_EQ(pool.blocksMade(), 4000);
}
