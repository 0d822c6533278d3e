//===- TraceCalls.cpp - mfrt_trace_*: the hops of the traced token --------===//
//
// The rows marked on a rank go with its next call; every op that moves them
// records a hop (layer, op, kind, from, to) in the store of this process
// (OpScaffold.h).
//
//===----------------------------------------------------------------------===//

#include "mfrt/comm/OpScaffold.h"

using namespace mfrt::comm;

extern "C" void mfrt_trace_enable(int on) { setTracing(on != 0); }

extern "C" void mfrt_trace_mark(const int64_t *rows, int64_t n,
                                int64_t row_elems) {
  RankState *st = currentRank();
  if (!st || !tracing())
    return;
  st->traceMarks.assign(rows, rows + (rows && n > 0 ? n : 0));
  st->traceRowElems = row_elems;
}

extern "C" void mfrt_trace_new_request(void) {
  RankState *st = currentRank();
  if (!st)
    return;
  st->traceLayer = -1;
  st->traceOp = 0;
}

extern "C" int64_t mfrt_trace_hops(mfrt_trace_hop *out, int64_t max) {
  return traceHops(out, max);
}

extern "C" void mfrt_trace_clear(void) { clearTraceHops(); }
