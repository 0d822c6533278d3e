//===- PrefixCache.h - Reusing the K/V of a shared prompt prefix -*- C++
//-*-===//
//
// --prefix-cache: a request whose prompt starts with whole blocks of tokens
// whose K/V a rank of its replica already holds (a running request that
// computed them, or a finished one the rank retained) takes them instead of
// computing them: each rank gives the new request its own rows of those
// positions (its KV heads, its share of the positions, its stage's layers),
// sharing the blocks where the rows fill whole ones and copying them
// otherwise, so the prefix keeps the placement it was computed in, and the
// rest of the prompt runs as a chunk of decode steps. Every rank of
// a replica holds the same requests, so all find the same prefix without a
// message. Finished requests are retained, least recently used evicted
// first when admission needs their blocks.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_PROGRAM_PREFIXCACHE_H
#define MFRT_PROGRAM_PREFIXCACHE_H

#include "mfrt/program/ProgramRank.h"

#include <cstdint>
#include <vector>

namespace mfrt {

struct Program;

/// The finished requests a rank retains without --kv-memory (with it, as
/// many as its blocks allow).
constexpr size_t kRetainedWithoutLimit = 16;

/// A prompt prefix the rank holds: the sequence that computed it (a live
/// one or a retained one) and its positions.
struct PrefixHit {
  const Sequence *source = nullptr;
  int64_t rows = 0;
};

/// The token at place `p` of `s`: its prompt's, then the generated tokens
/// its steps ran.
int64_t tokenAt(const Program &prog, const Sequence &s, int64_t p);

/// The longest prefix of `prompt` the rank holds, in whole blocks of
/// `blockTokens`, leaving at least the prompt's last position to compute
/// (rows 0: none).
PrefixHit findPrefix(const Program &prog, const ProgramRank &rs,
                     const std::vector<int64_t> &prompt, int64_t blockTokens);

/// Gives `s` (just admitted, its cache empty) the rank's rows of `hit`'s
/// positions from its source: the source's blocks themselves, shared,
/// where those rows are its first slots and fill whole blocks, else copies;
/// and with --out's K/V, into its request's outputs.
void copyPrefix(const Program &prog, ProgramRank &rs, Sequence &s,
                const PrefixHit &hit);

/// Makes `blocks` blocks free for an admission, evicting retained requests
/// least recently used first; `hit`'s source goes last, and `hit` is
/// cleared when it has to.
void makeRoom(ProgramRank &rs, int64_t blocks, PrefixHit &hit);

/// Gives `s`'s blocks back to the rank's pool and its reserved count to the
/// free count (its block table and reservation are then empty).
void releaseBlocks(ProgramRank &rs, Sequence &s);

/// The blocks the rank's retained requests hold (free for admissions).
int64_t retainedBlocks(const ProgramRank &rs);

/// Keeps the finished `s` (its blocks and tokens) for later prefixes; the
/// least recently used go beyond kRetainedWithoutLimit when the pool has
/// no limit.
void retain(const Program &prog, ProgramRank &rs, Sequence &s);

} // namespace mfrt

#endif // MFRT_PROGRAM_PREFIXCACHE_H
