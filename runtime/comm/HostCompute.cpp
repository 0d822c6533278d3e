//===- HostCompute.cpp - The collectives' arithmetic on host memory -------===//
//
// Used by the local and mpi backends. The weighted sum is the one function
// that produces every reduced value (reduce-scatter, all-reduce, the relay's
// partial sums and the final combine), so the flat and hierarchical combine
// paths run the same instructions on the same operands and agree bit for bit.
//
//===----------------------------------------------------------------------===//

#include "mfrt/comm/Comm.h"
#include "mfrt/comm/CommDType.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <unordered_map>

using namespace mfrt::comm;

namespace {

/// Columns processed at a time, so the f32 accumulators stay in cache.
constexpr int64_t kTile = 2048;

/// acc[c] += w * row[c] for c < n.
void accumulate(float *acc, const void *row, int64_t n, float w,
                mfrt_dtype dtype) {
  switch (dtype) {
  case MFRT_F32: {
    const float *r = static_cast<const float *>(row);
    for (int64_t c = 0; c < n; ++c)
      acc[c] += w * r[c];
    return;
  }
  case MFRT_BF16: {
    const uint16_t *r = static_cast<const uint16_t *>(row);
    for (int64_t c = 0; c < n; ++c)
      acc[c] += w * meshfold::bf16ToF32(r[c]);
    return;
  }
  case MFRT_F16: {
    const uint16_t *r = static_cast<const uint16_t *>(row);
    for (int64_t c = 0; c < n; ++c)
      acc[c] += w * meshfold::f16ToF32(r[c]);
    return;
  }
  }
}

void store(void *row, const float *acc, int64_t n, mfrt_dtype dtype) {
  switch (dtype) {
  case MFRT_F32:
    std::memcpy(row, acc, size_t(n) * 4);
    return;
  case MFRT_BF16: {
    uint16_t *r = static_cast<uint16_t *>(row);
    for (int64_t c = 0; c < n; ++c)
      r[c] = meshfold::f32ToBF16(acc[c]);
    return;
  }
  case MFRT_F16: {
    uint16_t *r = static_cast<uint16_t *>(row);
    for (int64_t c = 0; c < n; ++c)
      r[c] = meshfold::f32ToF16(acc[c]);
    return;
  }
  }
}

/// Host memory with a small cache of freed blocks: the collectives allocate
/// their scratch (packed rows, received rows) per call, and fresh pages cost
/// a page fault each, which at tens of MiB dominates the copy itself. One
/// instance per rank, so no locking.
class HostCompute final : public Compute {
public:
  ~HostCompute() override {
    for (auto &[size, ptr] : cached)
      std::free(ptr);
  }
  void *alloc(size_t bytes) override {
    bytes = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    if (bytes >= kMinCached) {
      // A cached block of at least `bytes` but not more than twice that.
      auto it = cached.lower_bound(bytes);
      if (it != cached.end() && it->first <= 2 * bytes) {
        void *ptr = it->second;
        live[ptr] = it->first;
        cachedBytes -= it->first;
        cached.erase(it);
        return ptr;
      }
    }
    void *ptr = std::aligned_alloc(64, bytes);
    if (ptr && bytes >= kMinCached)
      live[ptr] = bytes;
    return ptr;
  }
  void release(void *ptr) override {
    if (!ptr)
      return;
    auto it = live.find(ptr);
    if (it == live.end()) {
      std::free(ptr);
      return;
    }
    const size_t bytes = it->second;
    live.erase(it);
    cached.emplace(bytes, ptr);
    cachedBytes += bytes;
    // Keep at most kMaxCachedBytes, dropping the largest blocks first.
    while (cachedBytes > kMaxCachedBytes && !cached.empty()) {
      auto last = std::prev(cached.end());
      cachedBytes -= last->first;
      std::free(last->second);
      cached.erase(last);
    }
  }
  Status copy(void *dst, const void *src, size_t bytes) override {
    if (dst != src && bytes)
      std::memmove(dst, src, bytes);
    return Status::success();
  }
  Status copyToHost(void *dst, const void *src, size_t bytes) override {
    return copy(dst, src, bytes);
  }
  Status gatherRows(void *dst, const void *src, const int64_t *rows,
                    int64_t numRows, size_t rowBytes) override {
    char *d = static_cast<char *>(dst);
    const char *s = static_cast<const char *>(src);
    for (int64_t i = 0; i < numRows; ++i)
      std::memcpy(d + size_t(i) * rowBytes, s + size_t(rows[i]) * rowBytes,
                  rowBytes);
    return Status::success();
  }
  Status weightedSum(void *dst, int64_t numRows, const int64_t *termBegin,
                     const Term *terms, const void *const *bufs, int numBufs,
                     int64_t width, mfrt_dtype dtype) override {
    const size_t elem = dtypeSize(dtype);
    float acc[kTile];
    for (int64_t i = 0; i < numRows; ++i) {
      for (int64_t c0 = 0; c0 < width; c0 += kTile) {
        const int64_t n = std::min(kTile, width - c0);
        std::fill(acc, acc + n, 0.0f);
        for (int64_t t = termBegin[i]; t < termBegin[i + 1]; ++t) {
          const Term &term = terms[t];
          const char *row =
              static_cast<const char *>(bufs[term.buf]) +
              (size_t(term.row) * size_t(width) + size_t(c0)) * elem;
          accumulate(acc, row, n, term.weight, dtype);
        }
        store(static_cast<char *>(dst) +
                  (size_t(i) * size_t(width) + size_t(c0)) * elem,
              acc, n, dtype);
      }
    }
    return Status::success();
  }

private:
  static constexpr size_t kMinCached = 64 << 10;
  static constexpr size_t kMaxCachedBytes = size_t(1) << 30;
  std::unordered_map<void *, size_t> live;
  std::multimap<size_t, void *> cached;
  size_t cachedBytes = 0;
};

} // namespace

std::unique_ptr<Compute> mfrt::comm::createHostCompute() {
  return std::make_unique<HostCompute>();
}
