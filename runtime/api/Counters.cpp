//===- Counters.cpp - mfrt_bytes_sent*: the calling rank's byte counters --===//
//
// Every message an op sends is counted by op kind, link class and layer
// (Op::account); these read, sum and reset the calling rank's counters.
//
//===----------------------------------------------------------------------===//

#include "mfrt/comm/OpScaffold.h"

#include <cstring>

using namespace mfrt::comm;

extern "C" uint64_t mfrt_bytes_sent(mfrt_op_kind kind, mfrt_link link,
                                    int64_t layer) {
  RankState *st = currentRank();
  if (!st || kind < 0 || kind >= MFRT_OP_KIND_COUNT || link < 0 ||
      link >= MFRT_LINK_COUNT || layer < -1 || layer >= MFRT_MAX_LAYERS)
    return 0;
  return st->bytes[kind][link][layer + 1];
}

extern "C" uint64_t mfrt_bytes_sent_total(mfrt_op_kind kind, mfrt_link link) {
  RankState *st = currentRank();
  if (!st || kind < 0 || kind >= MFRT_OP_KIND_COUNT || link < 0 ||
      link >= MFRT_LINK_COUNT)
    return 0;
  uint64_t total = 0;
  for (int l = 0; l < kLayerSlots; ++l)
    total += st->bytes[kind][link][l];
  return total;
}

extern "C" void mfrt_reset_counters(void) {
  if (RankState *st = currentRank())
    std::memset(st->bytes, 0, sizeof(st->bytes));
}

extern "C" const char *mfrt_op_kind_name(mfrt_op_kind kind) {
  switch (kind) {
  case MFRT_OP_ALL_GATHER:
    return "all_gather";
  case MFRT_OP_REDUCE_SCATTER:
    return "reduce_scatter";
  case MFRT_OP_KV_RING:
    return "kv_ring";
  case MFRT_OP_DISPATCH:
    return "dispatch";
  case MFRT_OP_COMBINE:
    return "combine";
  case MFRT_OP_PP:
    return "pp";
  case MFRT_OP_GATHER:
    return "gather";
  case MFRT_OP_ALL_REDUCE:
    return "all_reduce";
  case MFRT_OP_BARRIER:
    return "barrier";
  case MFRT_OP_Q_RING:
    return "q_ring";
  case MFRT_OP_KV_TRANSFER:
    return "kv_transfer";
  case MFRT_OP_KIND_COUNT:
    break;
  }
  return "unknown";
}
