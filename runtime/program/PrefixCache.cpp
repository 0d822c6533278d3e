//===- PrefixCache.cpp - Reusing the K/V of a shared prompt prefix --------===//

#include "mfrt/program/PrefixCache.h"

#include "mfrt/program/Program.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <mutex>
#include <utility>

using namespace mfrt;

int64_t mfrt::tokenAt(const Program &prog, const Sequence &s, int64_t p) {
  const std::vector<int64_t> &prompt =
      s.prompt.empty() ? prog.requests[size_t(s.request)] : s.prompt;
  if (p < int64_t(prompt.size()))
    return prompt[size_t(p)];
  return s.fed[size_t(p - int64_t(prompt.size()))];
}

namespace {
/// The places of `prompt` from the start that `source` computed with the
/// same tokens (at most `limit`).
int64_t commonPrefix(const Program &prog, const Sequence &source,
                     const std::vector<int64_t> &prompt, int64_t limit) {
  int64_t n = std::min(limit, source.length);
  int64_t p = 0;
  while (p < n && tokenAt(prog, source, p) == prompt[size_t(p)])
    ++p;
  return p;
}

/// Moves `out`'s K/V of place `pos`, KV heads `first ..` (`heads` of them),
/// from `from`'s outputs to `to`'s.
void copyOutputs(const meshfold::Manifest &m, RequestOutput &from,
                 RequestOutput &to, int64_t layer, int64_t pos, int64_t first,
                 int64_t heads) {
  std::scoped_lock lock(from.mutex, to.mutex);
  size_t at = size_t((pos * m.kvHeads + first) * m.headDim);
  size_t n = size_t(heads * m.headDim);
  std::copy_n(from.keys[size_t(layer)].begin() + at, n,
              to.keys[size_t(layer)].begin() + at);
  if (!m.kvShared)
    std::copy_n(from.values[size_t(layer)].begin() + at, n,
                to.values[size_t(layer)].begin() + at);
  for (int64_t h = 0; h < heads; ++h)
    to.written[size_t(layer)][size_t(pos * m.kvHeads + first + h)] = 1;
}
} // namespace

PrefixHit mfrt::findPrefix(const Program &prog, const ProgramRank &rs,
                           const std::vector<int64_t> &prompt,
                           int64_t blockTokens) {
  PrefixHit best;
  int64_t limit = int64_t(prompt.size()) - 1;
  auto consider = [&](const Sequence &s) {
    if (!s.output)
      return;
    int64_t rows = commonPrefix(prog, s, prompt, limit);
    rows -= rows % blockTokens;
    if (rows > best.rows)
      best = PrefixHit{&s, rows};
  };
  for (const Sequence &s : rs.sequences)
    consider(s);
  for (const Sequence &s : rs.retained)
    consider(s);
  return best;
}

namespace {
/// The rank's rows of `from` before place `rows` when, in every layer it
/// holds, they are its first slots and fill whole blocks (so that `s` can
/// share those blocks); 0 otherwise.
int64_t shareableSlots(const ProgramRank &rs, const Sequence &from,
                       int64_t rows) {
  int64_t count = -1;
  for (const std::vector<int64_t> &cached : from.cachedPositions) {
    if (cached.empty())
      continue; // a layer of another stage
    int64_t n = std::count_if(cached.begin(), cached.end(),
                              [&](int64_t p) { return p < rows; });
    if ((count >= 0 && n != count) ||
        !std::all_of(cached.begin(), cached.begin() + n,
                     [&](int64_t p) { return p < rows; }))
      return 0;
    count = n;
  }
  return count > 0 && count % rs.kv.blockTokens() == 0 ? count : 0;
}
} // namespace

void mfrt::copyPrefix(const Program &prog, ProgramRank &rs, Sequence &s,
                      const PrefixHit &hit) {
  const meshfold::Manifest &m = *rs.manifest;
  const Sequence &from = *hit.source;
  int64_t copies = m.kvCopies();
  // Whole blocks are shared; rows anywhere else are copied.
  int64_t shared = shareableSlots(rs, from, hit.rows);
  if (shared > 0)
    rs.kv.share(from.blocks, shared / rs.kv.blockTokens(), s.blocks);
  for (int64_t layer = 0; layer < m.layers; ++layer) {
    const std::vector<int64_t> &cached = from.cachedPositions[size_t(layer)];
    std::vector<int64_t> &to = s.cachedPositions[size_t(layer)];
    size_t width = size_t(rs.kv.heads(layer) * m.headDim);
    for (size_t i = 0; i < cached.size(); ++i) {
      if (cached[i] >= hit.rows)
        continue;
      int64_t slot = int64_t(to.size());
      to.push_back(cached[i]);
      for (int64_t t = 0; shared == 0 && t < copies; ++t)
        std::memcpy(rs.kv.row(s.blocks, layer, slot, t),
                    rs.kv.row(from.blocks, layer, int64_t(i), t),
                    width * sizeof(float));
      if (prog.kvOutputs)
        copyOutputs(m, *from.output, *s.output, layer, cached[i],
                    rs.kv.headOffset(layer), rs.kv.heads(layer));
    }
  }
  s.length = hit.rows;
  // The source was used: retained, it is now the most recently used.
  for (auto it = rs.retained.begin(); it != rs.retained.end(); ++it)
    if (&*it == hit.source) {
      rs.retained.splice(rs.retained.end(), rs.retained, it);
      break;
    }
}

int64_t mfrt::retainedBlocks(const ProgramRank &rs) {
  int64_t blocks = 0;
  for (const Sequence &s : rs.retained)
    blocks += s.kvReserved;
  return blocks;
}

void mfrt::releaseBlocks(ProgramRank &rs, Sequence &s) {
  rs.kv.release(s.blocks);
  if (rs.kvFree >= 0)
    rs.kvFree += s.kvReserved;
  s.kvReserved = 0;
}

namespace {
/// Frees retained request `it`'s blocks.
void evict(ProgramRank &rs, std::list<Sequence>::iterator it) {
  releaseBlocks(rs, *it);
  rs.retained.erase(it);
}
} // namespace

void mfrt::makeRoom(ProgramRank &rs, int64_t blocks, PrefixHit &hit) {
  if (rs.kvFree < 0)
    return;
  // Least recently used first (the list's front); erasing one leaves the
  // others where they are.
  for (auto it = rs.retained.begin();
       rs.kvFree < blocks && it != rs.retained.end();) {
    auto next = std::next(it);
    if (&*it != hit.source)
      evict(rs, it);
    it = next;
  }
  if (rs.kvFree >= blocks)
    return;
  // Only the hit's source is left to evict: the prefix goes with it.
  for (auto it = rs.retained.begin(); it != rs.retained.end(); ++it)
    if (&*it == hit.source) {
      evict(rs, it);
      hit = PrefixHit();
      return;
    }
}

void mfrt::retain(const Program &prog, ProgramRank &rs, Sequence &s) {
  if (prog.source)
    s.prompt = prog.requests[size_t(s.request)];
  rs.retained.push_back(std::move(s));
  s = Sequence();
  if (rs.kvFree >= 0)
    return;
  while (rs.retained.size() > kRetainedWithoutLimit) {
    rs.kv.release(rs.retained.front().blocks);
    rs.retained.pop_front();
  }
}
