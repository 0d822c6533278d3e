//===- Dispatch.h - MoE dispatch / combine: the handle ----------*- C++ -*-===//
//
// Internal to libmfrt: the state a dispatch leaves for its combine (the
// mfrt_dispatch handle of mfrt.h) and the two algorithms (Dispatch.cpp,
// Combine.cpp), which the entry points run inside an opened Op on the EP
// group.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_COMM_DISPATCH_H
#define MFRT_COMM_DISPATCH_H

#include "mfrt/comm/CommRuntime.h"

#include <vector>

namespace mfrt::comm {

/// Token tracing: the bit of an int32 expert id in the routing metadata
/// that marks the traced token's rows (expert ids stay far below it).
constexpr int32_t kTraceBit = int32_t(1) << 30;

/// What a relay learns about each slot of an inbound token.
struct SlotMeta {
  int32_t expert; // -1: not for this node
  float weight;
};
static_assert(sizeof(SlotMeta) == 8, "SlotMeta is sent as bytes");

/// One row a relay forwards: inbound token row, choice j.
struct Forward {
  int32_t source;
  int64_t tokenRow;
  int32_t j;
};

} // namespace mfrt::comm

struct mfrt_dispatch {
  mfrt::comm::RankState *st = nullptr;
  int64_t groupHandle = -1;
  mfrt_dispatch_mode mode = MFRT_DISPATCH_FLAT;
  mfrt_dtype dtype = MFRT_F32;
  /// k: routed slots per token, replicas x the routing's choices once
  /// dispatchTokens has read the group's expert table (an expert split over
  /// etp is held by `replicas` members, and each gets the token).
  int64_t hidden = 0, nTokens = 0, k = 0, nExperts = 0, replicas = 1;
  /// The expert table dispatchTokens routed by (combine routes back by it).
  std::shared_ptr<const mfrt::comm::ExpertTable> table;
  size_t rowBytes = 0;

  // As owner: rows received, by source group rank.
  int64_t count = 0;
  void *rows = nullptr;
  std::vector<int64_t> experts;
  std::vector<int64_t> fromSlots, rowOffset;
  /// Token tracing: received rows (as owner) and inbound tokens (as relay)
  /// that carry the traced token.
  std::vector<uint8_t> traced, inTraced;

  // As token rank: per slot, its owner, position among the slots sent to that
  // owner, relay (-1: direct) and row in the relay's returned partials.
  std::vector<float> weights;
  std::vector<int32_t> slotOwner, slotRelay;
  std::vector<int64_t> slotPos, slotRelayRow;
  std::vector<int64_t> slotsTo, tokensTo, relayOffset;

  // As relay: inbound tokens by source, their slot metadata, and the rows
  // forwarded to each owner on this node.
  std::vector<int64_t> fromTokens, inOffset;
  std::vector<mfrt::comm::SlotMeta> inMeta;
  std::vector<std::vector<mfrt::comm::Forward>> forward;

  ~mfrt_dispatch() {
    if (rows && st)
      st->compute.release(rows);
  }
};

namespace mfrt::comm {

/// Dispatches the `h.nTokens` x `h.k` routed slots of `x` (`experts`,
/// `weights`) to the owners of their experts on op's group; `h` holds the
/// checked arguments and receives the rows this rank owns. The experts are
/// placed by `placement` (meshfold::ExpertPlacement's table over the
/// group's EP coordinates; empty: contiguous blocks).
Status dispatchTokens(Op &op, mfrt_dispatch &h, const void *x,
                      const int64_t *experts, const float *weights,
                      const std::vector<int64_t> &placement);
/// Returns the expert outputs `out` of the rows `h` received to their
/// tokens' ranks and sums them, weighted, into `y` (Combine.cpp).
Status combineTokens(Op &op, mfrt_dispatch &h, const void *out, void *y);

/// Relay group rank through which source `s` reaches owner `o`, or -1 for a
/// direct message (same node, flat mode, or the relay is not in the group).
int routeVia(const RankState &st, const Group &g, mfrt_dispatch_mode mode,
             int s, int o);
/// Allocates `rows` rows of `rowBytes` in `buf`.
Status allocRows(Buffer &buf, int64_t rows, size_t rowBytes);
/// Row `row` of rows of `rowBytes` at `base`.
char *rowPtr(void *base, int64_t row, size_t rowBytes);

} // namespace mfrt::comm

#endif // MFRT_COMM_DISPATCH_H
