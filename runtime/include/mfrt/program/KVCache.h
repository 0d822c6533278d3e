//===- KVCache.h - A rank's paged K/V cache ---------------------*- C++ -*-===//
//
// Each rank keeps the K/V rows it records (its KV heads of its share of a
// request's positions) in one pool of fixed-size blocks of --kv-block rows.
// A request's rows on a rank are numbered in the order the rank recorded
// them (its slots, per layer); slot i lives in row i % B of block
// table[i / B] of the request's block table, the same block for every
// layer. Blocks come from a free list and go back to it when the last
// request holding them ends (a prompt prefix's full blocks can be shared);
// their storage is kept for the next owner.
//
// The scheduler reserves a request's blocks before it runs (Run.cpp), from
// counts every rank of a replica computes alike, so a hook that records a
// row never waits for a block and the ranks never disagree on who runs.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_PROGRAM_KVCACHE_H
#define MFRT_PROGRAM_KVCACHE_H

#include "meshfold/Support/Manifest.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mfrt {

/// The --kv-block and --kv-memory settings of a run.
struct KVSettings {
  /// Rows per block.
  int64_t blockTokens = 16;
  /// Bytes of K/V cache each rank may hold (0: as many blocks as the
  /// running requests need).
  int64_t memoryBytes = 0;
  /// --kv-memory as given.
  std::string memoryText;
};

/// The blocks holding `rows` rows.
inline int64_t kvBlocksFor(int64_t rows, int64_t blockTokens) {
  return (rows + blockTokens - 1) / blockTokens;
}

/// The K/V arrays of a rank of `m`'s plan: its stage's layers times the
/// tensors (K and V, or one where they are one).
int64_t kvArraysPerRank(const meshfold::Manifest &m);

/// The bytes one block takes on a rank of `m`'s plan: its KV heads of
/// --kv-block rows in every layer of its pipeline stage, K and V (one
/// tensor where they are one, kv_shared), f32.
int64_t kvBlockBytes(const meshfold::Manifest &m, int64_t blockTokens);

/// The blocks each rank of `m`'s plan may hold under `settings` (-1: no
/// limit).
int64_t kvBlockCapacity(const meshfold::Manifest &m,
                        const KVSettings &settings);

/// A rank's pool of K/V blocks.
class KVPool {
public:
  /// An empty pool of blocks of `blockTokens` rows for `layers` layers, each
  /// row `kvCopies` tensors (K, and V unless one tensor is both) of the
  /// rank's KV heads of `headDim` floats.
  /// `arrays`: the rank's arrays (its stage's layers times the tensors),
  /// which share the machine's memory.
  void configure(int64_t blockTokens, int64_t layers, int64_t headDim,
                 int64_t kvCopies, int64_t arrays);
  int64_t blockTokens() const { return blockTokens_; }

  /// Records that `layer`'s rows hold KV heads `headOffset ..` (`heads` of
  /// them): set by the layer's first row, the same for every later one (an
  /// internal error otherwise).
  void useHeads(int64_t layer, int64_t headOffset, int64_t heads);
  /// The first KV head of `layer`'s rows, and their count.
  int64_t headOffset(int64_t layer) const;
  int64_t heads(int64_t layer) const;

  /// Tensor `tensor` (0: K, 1: V) of row `slot` of `layer` in the request
  /// whose block table is `table`: the row's heads (useHeads) of headDim
  /// floats each. The first slot of a block past the table's takes a block
  /// from the free list (slots are recorded in order; a later one is an
  /// internal error).
  float *row(std::vector<int32_t> &table, int64_t layer, int64_t slot,
             int64_t tensor);
  /// The same row of a slot already recorded.
  const float *row(const std::vector<int32_t> &table, int64_t layer,
                   int64_t slot, int64_t tensor) const;

  /// Tensor `tensor` (0: K, 1: V) of every row of `layer`: [blocksMade() x
  /// blockTokens() rows][heads(layer)][headDim] floats. Valid until the pool
  /// makes another block.
  float *rows(int64_t layer, int64_t tensor);
  int64_t blocksMade() const { return created_; }
  /// The row of rows() that holds slot `slot` of the table.
  int64_t poolRow(const std::vector<int32_t> &table, int64_t slot) const;

  /// Takes blocks from the free list until `table` holds `slots` rows (a
  /// request whose rows arrive out of order: K/V moved from another pool).
  void reserve(std::vector<int32_t> &table, int64_t slots);

  /// Makes the first `blocks` blocks of `from` the start of the empty
  /// `table` too (a shared prompt prefix, --prefix-cache): both tables read
  /// them, neither writes them again (their slots are all recorded), and a
  /// block returns to the free list when its last table releases it.
  void share(const std::vector<int32_t> &from, int64_t blocks,
             std::vector<int32_t> &table);

  /// The blocks of `table` back to the free list (those no other table
  /// shares); `table` is emptied.
  void release(std::vector<int32_t> &table);

  /// Blocks held by requests now (a shared one once), the most held at
  /// once, and the bytes of block storage made (it is kept for reuse; in
  /// CUDA mode the managed arrays may hold up to half as much again).
  int64_t blocksInUse() const { return inUse_; }
  int64_t peakBlocks() const { return peak_; }
  int64_t allocatedBytes() const;

  /// One layer's rows of one tensor for every block (see the file comment).
  class Rows {
  public:
    Rows() = default;
    Rows(const Rows &) = delete;
    Rows &operator=(const Rows &) = delete;
    ~Rows();
    /// Room for `bytes` bytes at least, of at most `reserve` (the address
    /// space a host array reserves).
    float *ensure(size_t bytes, size_t reserve);
    float *data() const { return base; }

  private:
    float *base = nullptr;
    size_t reserved = 0, committed = 0;
    bool device = false;
  };

private:
  struct Layer {
    int64_t headOffset = -1, heads = 0;
    /// K, then V unless one tensor is both.
    std::unique_ptr<Rows> tensors[2];
    /// The blocks its rows have room for.
    int64_t blocks = 0;
  };
  /// Tensor `tensor` of `layer` with room for every block made.
  float *storage(int64_t layer, int64_t tensor);
  int64_t blockTokens_ = 16, headDim_ = 0, kvCopies_ = 2;
  size_t arrayReserve_ = 0;
  std::vector<Layer> layers_;
  std::vector<int32_t> free_;
  /// By block id: the tables that hold it.
  std::vector<int32_t> refs_;
  int32_t created_ = 0;
  int64_t inUse_ = 0, peak_ = 0;
};

} // namespace mfrt

#endif // MFRT_PROGRAM_KVCACHE_H
