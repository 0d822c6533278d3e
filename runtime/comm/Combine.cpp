//===- Combine.cpp - MoE combine: expert outputs back to their tokens -----===//
//
// The second half of a dispatch (Dispatch.cpp has the first and the message
// phases): owners return each row's expert output to its token's rank, or to
// the relay it came through (D); a relay sums the weighted outputs of its
// node's experts for each token and returns one row (E); the token's rank
// sums its node partials in node order, so that flat and hierarchical
// dispatch give the same y bit for bit.
//
//===----------------------------------------------------------------------===//

#include "mfrt/comm/CommDType.h"
#include "mfrt/comm/CommRuntime.h"
#include "mfrt/comm/Dispatch.h"

#include <algorithm>
#include <cstring>

using namespace mfrt::comm;

namespace {

/// One combine call on this rank: the handle of its dispatch, the expert
/// outputs and y, and the buffers that its phases share.
struct Combiner {
  Combiner(Op &op, mfrt_dispatch &h, const void *out, void *y)
      : op(op), h(h), out(out), y(y), st(op.st), g(*op.group),
        compute(st.compute), n(g.size()), me(g.index), k(h.k),
        nTokens(h.nTokens), rowBytes(h.rowBytes),
        hier(h.mode == MFRT_DISPATCH_HIERARCHICAL) {}

  void traceOwnRows();
  void planReturns();
  Status allocate();
  Status returnRows();
  void sendReturns(Phase &direct,
                   std::vector<std::vector<ConstSpan>> &relayParts);
  void postReturnReceives(Phase &direct, Phase &toRelay);
  Status relaySum();
  Status sumNodePartials();
  Status returnPartials();
  void buildFinalTerms();
  Status sumFinal();

  /// Expert output row `row`.
  const char *outRow(int64_t row) const {
    return static_cast<const char *>(out) + size_t(row) * rowBytes;
  }

  Op &op;
  mfrt_dispatch &h;
  const void *out;
  void *y;
  RankState &st;
  Group &g;
  Compute &compute;
  const int n, me;
  const int64_t k, nTokens;
  const size_t rowBytes;
  const bool hier;

  /// Where returned rows land: per direct owner in directBack, per owner on
  /// this relay's node in returned.
  std::vector<int64_t> directOffset, returnOffset;
  int64_t directTotal = 0, returnTotal = 0, relayTotal = 0;
  /// Inbound tokens this rank relays, from all sources.
  int64_t inTotal = 0;
  /// Rows from direct owners; rows from the owners on this relay's node;
  /// partials from relays; this relay's partials; this rank's own node
  /// partials.
  Buffer directBack{compute}, returned{compute}, relayBack{compute},
      partials{compute}, local{compute};
  /// Phase E: the terms of each inbound token's partial.
  std::vector<int64_t> termBegin{0};
  std::vector<Term> terms;
  /// Final: the terms of each local node partial, and of each token's y.
  std::vector<int64_t> localBegin{0}, finalBegin{0};
  std::vector<Term> localTerms, finalTerms;
};

/// The traced token's rows for this rank's own experts stay here.
void Combiner::traceOwnRows() {
  const auto first = h.traced.begin() + h.rowOffset[size_t(me)];
  const auto last = first + h.fromSlots[size_t(me)];
  if (std::find(first, last, 1) != last)
    op.traceStay();
}

/// Lays out the returned rows: per direct owner, per owner on this relay's
/// node, per relay; counts this relay's inbound tokens.
void Combiner::planReturns() {
  directOffset.assign(size_t(n), 0);
  returnOffset.assign(size_t(n), 0);
  for (int o = 0; o < n; ++o) {
    directOffset[size_t(o)] = directTotal;
    if (o != me && routeVia(st, g, h.mode, me, o) < 0)
      directTotal += h.slotsTo[size_t(o)];
    returnOffset[size_t(o)] = returnTotal;
    if (hier && o != me)
      returnTotal += int64_t(h.forward[size_t(o)].size());
    relayTotal += h.tokensTo[size_t(o)];
  }
  for (int i = 0; i < n; ++i)
    inTotal += h.fromTokens[size_t(i)];
}

/// Allocates the returned rows and the relay partials.
Status Combiner::allocate() {
  Status s = allocRows(directBack, directTotal, rowBytes);
  if (s.ok())
    s = allocRows(returned, returnTotal, rowBytes);
  if (s.ok())
    s = allocRows(relayBack, relayTotal, rowBytes);
  if (s.ok())
    s = allocRows(partials, inTotal, rowBytes);
  return s;
}

/// Phase D: owners return rows to direct sources and to relays; receives the
/// rows of this rank's direct slots and, as relay, those of its node.
Status Combiner::returnRows() {
  Phase direct(op, 0), toRelay(op, 1);
  std::vector<std::vector<ConstSpan>> relayParts(static_cast<size_t>(n));
  sendReturns(direct, relayParts);
  for (int r = 0; r < n; ++r)
    if (!relayParts[size_t(r)].empty())
      toRelay.send(g.members[size_t(r)], relayParts[size_t(r)].data(),
                   relayParts[size_t(r)].size());
  postReturnReceives(direct, toRelay);
  Status s = direct.wait();
  Status s2 = toRelay.wait();
  if (s.ok())
    s = s2;
  return s;
}

/// Phase D, per source: its output rows straight back if it sent them
/// directly, else collected in `relayParts` for the relay they came
/// through; records the hops of the traced token.
void Combiner::sendReturns(Phase &direct,
                           std::vector<std::vector<ConstSpan>> &relayParts) {
  for (int src = 0; src < n; ++src) {
    const int64_t cnt = h.fromSlots[size_t(src)];
    if (!cnt || src == me)
      continue;
    const ConstSpan seg{outRow(h.rowOffset[size_t(src)]),
                        size_t(cnt) * rowBytes};
    const int r = routeVia(st, g, h.mode, src, me);
    const auto first = h.traced.begin() + h.rowOffset[size_t(src)];
    if (r != me && std::find(first, first + cnt, 1) != first + cnt)
      op.traceHop(g.members[size_t(r < 0 ? src : r)]);
    if (r < 0)
      direct.send(g.members[size_t(src)], {seg});
    else if (r != me)
      relayParts[size_t(r)].push_back(seg);
  }
}

/// Phase D receives: from each direct owner, the rows of this rank's slots;
/// as relay, from each owner on this node, the rows forwarded to it.
void Combiner::postReturnReceives(Phase &direct, Phase &toRelay) {
  for (int o = 0; o < n; ++o) {
    if (o == me)
      continue;
    if (h.slotsTo[size_t(o)] && routeVia(st, g, h.mode, me, o) < 0)
      direct.recv(
          g.members[size_t(o)],
          {Span{rowPtr(directBack.data(), directOffset[size_t(o)], rowBytes),
                size_t(h.slotsTo[size_t(o)]) * rowBytes}});
    if (hier && !h.forward[size_t(o)].empty())
      toRelay.recv(
          g.members[size_t(o)],
          {Span{rowPtr(returned.data(), returnOffset[size_t(o)], rowBytes),
                h.forward[size_t(o)].size() * rowBytes}});
  }
}

/// Phase E (hierarchical only): relays sum their node's weighted outputs per
/// token and return one partial row per token.
Status Combiner::relaySum() {
  if (!hier)
    return Status::success();
  Status s = sumNodePartials();
  if (!s.ok())
    return s;
  return returnPartials();
}

/// Phase E: per inbound token, the weighted sum over j ascending of the
/// outputs of this node's experts, from this rank's own output rows or the
/// rows returned to it.
Status Combiner::sumNodePartials() {
  std::vector<int64_t> cursor(static_cast<size_t>(n), 0),
      selfCursor(size_t(n), 0);
  for (int src = 0; src < n; ++src)
    for (int64_t i = 0; i < h.fromTokens[size_t(src)]; ++i) {
      const int64_t row = h.inOffset[size_t(src)] + i;
      for (int64_t j = 0; j < k; ++j) {
        const SlotMeta &m = h.inMeta[size_t(row * k + j)];
        if (m.expert < 0)
          continue;
        const int o = h.table->owner[size_t(m.expert)];
        if (o == me)
          terms.push_back(
              Term{0, h.rowOffset[size_t(src)] + selfCursor[size_t(src)]++,
                   m.weight});
        else
          terms.push_back(
              Term{1, returnOffset[size_t(o)] + cursor[size_t(o)]++, m.weight});
      }
      termBegin.push_back(int64_t(terms.size()));
    }
  const void *bufs[2] = {out, returned.data()};
  if (inTotal)
    return compute.weightedSum(partials.data(), inTotal, termBegin.data(),
                               terms.data(), bufs, 2, h.hidden, h.dtype);
  return Status::success();
}

/// Phase E messages: each source's partials back to it; receives the
/// partials of this rank's tokens from their relays.
Status Combiner::returnPartials() {
  Phase phase(op, 2);
  for (int src = 0; src < n; ++src) {
    const auto first = h.inTraced.begin() + h.inOffset[size_t(src)];
    const auto last = first + h.fromTokens[size_t(src)];
    if (std::find(first, last, 1) != last)
      op.traceHop(g.members[size_t(src)]);
  }
  for (int src = 0; src < n; ++src)
    if (h.fromTokens[size_t(src)])
      phase.send(
          g.members[size_t(src)],
          {ConstSpan{rowPtr(partials.data(), h.inOffset[size_t(src)], rowBytes),
                     size_t(h.fromTokens[size_t(src)]) * rowBytes}});
  for (int r = 0; r < n; ++r)
    if (h.tokensTo[size_t(r)])
      phase.recv(
          g.members[size_t(r)],
          {Span{rowPtr(relayBack.data(), h.relayOffset[size_t(r)], rowBytes),
                size_t(h.tokensTo[size_t(r)]) * rowBytes}});
  return phase.wait();
}

/// Final terms: per token, its node partials in ascending node order, each
/// a relay's partial or a local partial over the direct slots of that node.
/// Buffers: 0 = out (slots this rank owns), 1 = directBack, 2 = relayBack,
/// 3 = local node partials.
void Combiner::buildFinalTerms() {
  std::vector<std::pair<int64_t, int64_t>> byNode; // (node, j)
  for (int64_t t = 0; t < nTokens; ++t) {
    byNode.clear();
    for (int64_t j = 0; j < k; ++j)
      byNode.push_back(
          {st.layout.node(g.members[size_t(h.slotOwner[size_t(t * k + j)])]),
           j});
    std::sort(byNode.begin(), byNode.end());
    for (size_t a = 0; a < byNode.size();) {
      size_t b = a;
      while (b < byNode.size() && byNode[b].first == byNode[a].first)
        ++b;
      const int64_t first = t * k + byNode[a].second;
      if (h.slotRelay[size_t(first)] >= 0) {
        finalTerms.push_back(Term{2, h.slotRelayRow[size_t(first)], 1.0f});
      } else {
        for (size_t c = a; c < b; ++c) {
          const int64_t slot = t * k + byNode[c].second;
          const int o = h.slotOwner[size_t(slot)];
          if (o == me)
            localTerms.push_back(
                Term{0, h.rowOffset[size_t(me)] + h.slotPos[size_t(slot)],
                     h.weights[size_t(slot)]});
          else
            localTerms.push_back(
                Term{1, directOffset[size_t(o)] + h.slotPos[size_t(slot)],
                     h.weights[size_t(slot)]});
        }
        finalTerms.push_back(Term{3, int64_t(localBegin.size()) - 1, 1.0f});
        localBegin.push_back(int64_t(localTerms.size()));
      }
      a = b;
    }
    finalBegin.push_back(int64_t(finalTerms.size()));
  }
}

/// Computes the local node partials, then y from all node partials, and
/// waits for the queued work.
Status Combiner::sumFinal() {
  const int64_t numLocal = int64_t(localBegin.size()) - 1;
  Status s = allocRows(local, numLocal, rowBytes);
  if (!s.ok())
    return s;
  const void *bufs[4] = {out, directBack.data(), relayBack.data(),
                         local.data()};
  if (numLocal)
    s = compute.weightedSum(local.data(), numLocal, localBegin.data(),
                            localTerms.data(), bufs, 4, h.hidden, h.dtype);
  if (s.ok() && nTokens)
    s = compute.weightedSum(y, nTokens, finalBegin.data(), finalTerms.data(),
                            bufs, 4, h.hidden, h.dtype);
  if (s.ok())
    s = compute.sync(op.deadline, st.timeoutS);
  return s;
}
} // namespace

/// Combines the expert outputs `out` into y: owners return rows (D), relays
/// return their node's partials (E), then each token's rank sums its node
/// partials.
Status mfrt::comm::combineTokens(Op &op, mfrt_dispatch &h, const void *out,
                                 void *y) {
  Combiner c(op, h, out, y);
  c.traceOwnRows();
  c.planReturns();
  Status s = c.allocate();
  if (s.ok())
    s = c.returnRows();
  if (s.ok())
    s = c.relaySum();
  if (!s.ok())
    return s;
  c.buildFinalTerms();
  return c.sumFinal();
}
