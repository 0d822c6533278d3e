//===- Dispatch.cpp - MoE dispatch / combine over an EP group -------------===//
//
// Each routed slot (token t, choice j) goes to the owner of its expert; every
// owner receives its rows ordered by (source group rank, token, j).
//
// Flat: every slot travels directly from its token's rank to the owner.
//
// Hierarchical (DeepEP high-throughput / SPEC hop 4): a token crosses to
// another node at most once per destination node, to the relay (MeshLayout::
// relay: the GPU on that node with the sender's local index, same IB rail),
// which forwards it over NVLink to the owners of its experts on that node.
// Combine goes back the same way, and the relay first sums the weighted
// outputs of its node's experts for the token so that one row crosses back.
// Where a relay is not a member of the group the slots go directly.
//
// Both modes compute y with the same arithmetic, so they agree bit for bit:
//   y[t] = round( sum over nodes N ascending of
//                 round( sum over j ascending with owner(j) on N of
//                        w[t,j] * out(t,j) ) )
// with f32 accumulation and rounding to the dtype (the inner round is what
// lets a relay send one dtype row; for f32 both rounds are exact). Every sum
// is Compute::weightedSum, in the same order, whether the relay or the
// token's rank computes the node's partial.
//
// Messages, by phase:
//   A  counts: (slots to you, tokens you relay for me) to every member;
//   B  rows + local expert ids to direct owners; token rows + (expert,
//      weight) x k to relays;
//   C  relays forward rows + local expert ids to the owners on their node;
//   combine: D owners return rows to direct sources and to relays; E relays
//   return one partial row per token.
//
//===----------------------------------------------------------------------===//

#include "mfrt/comm/Dispatch.h"
#include "mfrt/comm/CommDType.h"
#include "mfrt/comm/CommRuntime.h"

#include <algorithm>
#include <cstring>

using namespace mfrt::comm;

namespace {

/// Relay group rank through which source `s` reaches owner `o`, or -1 for a
/// direct message (same node, flat mode, or the relay is not in the group).
int routeVia(const RankState &st, const Group &g, mfrt_dispatch_mode mode,
             int s, int o) {
  if (mode != MFRT_DISPATCH_HIERARCHICAL || s == o)
    return -1;
  const int64_t gs = g.members[size_t(s)], go = g.members[size_t(o)];
  const int64_t node = st.layout.node(go);
  if (st.layout.node(gs) == node)
    return -1;
  auto it = g.indexOf.find(int(st.layout.relay(gs, node)));
  return it == g.indexOf.end() ? -1 : it->second;
}

/// Expert -> owner group rank, from MeshLayout for the expert mesh's "ep"
/// group, else by the documented rule (block e / (n_experts / group size)).
Status ownerTable(RankState &st, Group &g, int64_t nExperts) {
  if (g.ownerExperts == nExperts)
    return Status::success();
  const int64_t perRank = nExperts / g.size();
  std::vector<int> owner(static_cast<size_t>(nExperts));
  for (int64_t e = 0; e < nExperts; ++e) {
    if (g.axes != "ep") {
      owner[size_t(e)] = int(e / perRank);
      continue;
    }
    int64_t rank =
        st.layout.expertOwner(e, nExperts, st.layout.stageOf(st.rank));
    auto it = g.indexOf.find(int(rank));
    if (it == g.indexOf.end())
      return Status::error(MFRT_ERR_ARGUMENT,
                           "MeshLayout places expert " + std::to_string(e) +
                               " on rank " + std::to_string(rank) +
                               ", which is not in the group");
    owner[size_t(e)] = it->second;
  }
  g.owner = std::move(owner);
  g.ownerExperts = nExperts;
  return Status::success();
}

Status allocRows(Buffer &buf, int64_t rows, size_t rowBytes) {
  if (buf.allocate(size_t(rows) * rowBytes))
    return Status::success();
  return Status::error(MFRT_ERR_BACKEND,
                       "cannot allocate " + std::to_string(rows) + " rows of " +
                           std::to_string(rowBytes) + " bytes");
}

char *rowPtr(void *base, int64_t row, size_t rowBytes) {
  return static_cast<char *>(base) + size_t(row) * rowBytes;
}

/// Appends rows[0..n) of `base` as message parts, merging runs of
/// consecutive rows.
void appendRows(std::vector<ConstSpan> &parts, const void *base,
                const int64_t *rows, size_t n, size_t rowBytes) {
  for (size_t a = 0; a < n;) {
    size_t b = a + 1;
    while (b < n && rows[b] == rows[b - 1] + 1)
      ++b;
    parts.push_back(
        ConstSpan{static_cast<const char *>(base) + size_t(rows[a]) * rowBytes,
                  (b - a) * rowBytes});
    a = b;
  }
}

} // namespace

Status mfrt::comm::dispatchTokens(Op &op, mfrt_dispatch &h, const void *x,
                                  const int64_t *expertsIn,
                                  const float *weightsIn) {
  RankState &st = op.st;
  Group &g = *op.group;
  const int n = g.size(), me = g.index;
  const int64_t k = h.k, nTokens = h.nTokens, slots = nTokens * k;
  const size_t rowBytes = h.rowBytes;
  Compute &compute = st.compute;

  Status s = ownerTable(st, g, h.nExperts);
  if (!s.ok())
    return s;

  // Routing, on the host.
  std::vector<int64_t> experts(static_cast<size_t>(slots));
  h.weights.resize(size_t(slots));
  if (slots) {
    s = compute.copyToHost(experts.data(), expertsIn, size_t(slots) * 8);
    if (s.ok())
      s = compute.copyToHost(h.weights.data(), weightsIn, size_t(slots) * 4);
    if (!s.ok())
      return s;
  }
  for (int64_t i = 0; i < slots; ++i)
    if (experts[size_t(i)] < 0 || experts[size_t(i)] >= h.nExperts)
      return Status::error(MFRT_ERR_ARGUMENT,
                           "token " + std::to_string(i / k) + " choice " +
                               std::to_string(i % k) + " routes to expert " +
                               std::to_string(experts[size_t(i)]) +
                               ", but there are " + std::to_string(h.nExperts) +
                               " experts");

  // Token tracing: the marked tokens of x.
  std::vector<uint8_t> tokenTraced(static_cast<size_t>(nTokens), 0);
  for (int64_t t : op.traceMarks)
    if (t >= 0 && t < nTokens)
      tokenTraced[size_t(t)] = 1;
  auto traceBit = [&](int64_t slot) {
    return tokenTraced[size_t(slot / k)] ? kTraceBit : 0;
  };

  // As token rank: owners, positions, relays.
  std::vector<std::vector<int64_t>> slotsTo(static_cast<size_t>(n));
  h.slotOwner.resize(size_t(slots));
  h.slotPos.resize(size_t(slots));
  h.slotRelay.assign(size_t(slots), -1);
  h.slotRelayRow.assign(size_t(slots), -1);
  std::vector<int> relayOf(static_cast<size_t>(n));
  for (int o = 0; o < n; ++o)
    relayOf[size_t(o)] = routeVia(st, g, h.mode, me, o);
  std::vector<std::vector<int64_t>> tokensTo(static_cast<size_t>(n));
  for (int64_t t = 0; t < nTokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t slot = t * k + j;
      const int o = g.owner[size_t(experts[size_t(slot)])];
      h.slotOwner[size_t(slot)] = o;
      h.slotPos[size_t(slot)] = int64_t(slotsTo[size_t(o)].size());
      slotsTo[size_t(o)].push_back(slot);
      const int r = relayOf[size_t(o)];
      if (r < 0)
        continue;
      h.slotRelay[size_t(slot)] = r;
      std::vector<int64_t> &list = tokensTo[size_t(r)];
      if (list.empty() || list.back() != t)
        list.push_back(t);
      h.slotRelayRow[size_t(slot)] = int64_t(list.size()) - 1;
    }
  }
  h.slotsTo.resize(size_t(n));
  h.tokensTo.resize(size_t(n));
  h.relayOffset.assign(size_t(n), 0);
  for (int i = 0, off = 0; i < n; ++i) {
    h.slotsTo[size_t(i)] = int64_t(slotsTo[size_t(i)].size());
    h.tokensTo[size_t(i)] = int64_t(tokensTo[size_t(i)].size());
    h.relayOffset[size_t(i)] = off;
    off += int(h.tokensTo[size_t(i)]);
  }
  for (int64_t slot = 0; slot < slots; ++slot)
    if (h.slotRelay[size_t(slot)] >= 0)
      h.slotRelayRow[size_t(slot)] +=
          h.relayOffset[size_t(h.slotRelay[size_t(slot)])];

  // Phase A: counts.
  std::vector<int64_t> sendCounts(static_cast<size_t>(2 * n)),
      recvCounts(size_t(2 * n));
  {
    Phase phase(op, 0);
    for (int d = 0; d < n; ++d) {
      sendCounts[size_t(2 * d)] = h.slotsTo[size_t(d)];
      sendCounts[size_t(2 * d + 1)] = h.tokensTo[size_t(d)];
      if (d == me)
        continue;
      phase.send(g.members[size_t(d)],
                 {ConstSpan{&sendCounts[size_t(2 * d)], 16, true}});
      phase.recv(g.members[size_t(d)],
                 {Span{&recvCounts[size_t(2 * d)], 16, true}});
    }
    recvCounts[size_t(2 * me)] = sendCounts[size_t(2 * me)];
    recvCounts[size_t(2 * me + 1)] = 0;
    s = phase.wait();
    if (!s.ok())
      return s;
  }
  h.fromSlots.resize(size_t(n));
  h.rowOffset.resize(size_t(n));
  h.fromTokens.resize(size_t(n));
  h.inOffset.resize(size_t(n));
  int64_t inTotal = 0;
  for (int i = 0; i < n; ++i) {
    h.fromSlots[size_t(i)] = recvCounts[size_t(2 * i)];
    h.fromTokens[size_t(i)] = recvCounts[size_t(2 * i + 1)];
    if (h.fromSlots[size_t(i)] < 0 || h.fromTokens[size_t(i)] < 0)
      return Status::error(MFRT_ERR_BACKEND,
                           "bad counts from rank " +
                               std::to_string(g.members[size_t(i)]));
    h.rowOffset[size_t(i)] = h.count;
    h.count += h.fromSlots[size_t(i)];
    h.inOffset[size_t(i)] = inTotal;
    inTotal += h.fromTokens[size_t(i)];
    if (h.fromTokens[size_t(i)] && routeVia(st, g, h.mode, i, me) != me)
      return Status::error(MFRT_ERR_BACKEND,
                           "rank " + std::to_string(g.members[size_t(i)]) +
                               " relays tokens through this rank, which is "
                               "not its relay (inconsistent plans?)");
  }

  // Buffers: received rows and their local expert ids; a relay's inbound
  // tokens; this rank's packed outbound rows.
  Buffer rows(compute), inRows(compute), pack(compute);
  s = allocRows(rows, h.count, rowBytes);
  if (s.ok())
    s = allocRows(inRows, inTotal, rowBytes);
  if (!s.ok())
    return s;
  std::vector<int32_t> rowExpert(static_cast<size_t>(h.count));
  h.inMeta.resize(size_t(inTotal * k));

  auto localExpert = [&](int64_t e, int o) {
    return int32_t(e - int64_t(o) * h.perRank);
  };

  // Phase B. Pack order: direct owners ascending, then relays ascending.
  std::vector<int64_t> packRows;
  std::vector<int64_t> packOffset(static_cast<size_t>(2 * n), 0);
  for (int o = 0; o < n; ++o) {
    packOffset[size_t(o)] = int64_t(packRows.size());
    if (o == me || relayOf[size_t(o)] >= 0)
      continue;
    for (int64_t slot : slotsTo[size_t(o)])
      packRows.push_back(slot / k);
  }
  for (int r = 0; r < n; ++r) {
    packOffset[size_t(n + r)] = int64_t(packRows.size());
    for (int64_t t : tokensTo[size_t(r)])
      packRows.push_back(t);
  }
  // On the host, rows go straight from x as message parts; device memory
  // is packed first (one gather kernel instead of a copy per row).
  const bool zeroCopy = compute.hostMemory();
  if (!zeroCopy) {
    s = allocRows(pack, int64_t(packRows.size()), rowBytes);
    if (s.ok() && !packRows.empty())
      s = compute.gatherRows(pack.data(), x, packRows.data(),
                             int64_t(packRows.size()), rowBytes);
  }
  // The rows of the message whose pack rows start at `offset`.
  auto rowParts = [&](int64_t offset, size_t count) {
    std::vector<ConstSpan> parts;
    if (zeroCopy)
      appendRows(parts, x, packRows.data() + offset, count, rowBytes);
    else
      parts.push_back(
          ConstSpan{rowPtr(pack.data(), offset, rowBytes), count * rowBytes});
    return parts;
  };
  // Slots this rank owns itself go straight to their place.
  if (s.ok() && !slotsTo[size_t(me)].empty()) {
    std::vector<int64_t> selfRows;
    bool stays = false;
    for (int64_t slot : slotsTo[size_t(me)]) {
      selfRows.push_back(slot / k);
      rowExpert[size_t(h.rowOffset[size_t(me)]) + selfRows.size() - 1] =
          localExpert(experts[size_t(slot)], me) | traceBit(slot);
      stays |= traceBit(slot) != 0;
    }
    if (stays)
      op.traceStay();
    s = compute.gatherRows(
        rowPtr(rows.data(), h.rowOffset[size_t(me)], rowBytes), x,
        selfRows.data(), int64_t(selfRows.size()), rowBytes);
  }
  if (!s.ok())
    return s;
  std::vector<std::vector<int32_t>> directMeta(static_cast<size_t>(n));
  std::vector<std::vector<SlotMeta>> relayMeta(static_cast<size_t>(n));
  {
    Phase direct(op, 1), relayed(op, 2);
    for (int o = 0; o < n; ++o) {
      if (o == me || relayOf[size_t(o)] >= 0 || slotsTo[size_t(o)].empty())
        continue;
      std::vector<int32_t> &meta = directMeta[size_t(o)];
      bool carries = false;
      for (int64_t slot : slotsTo[size_t(o)]) {
        meta.push_back(localExpert(experts[size_t(slot)], o) | traceBit(slot));
        carries |= traceBit(slot) != 0;
      }
      if (carries)
        op.traceHop(g.members[size_t(o)]);
      std::vector<ConstSpan> parts =
          rowParts(packOffset[size_t(o)], meta.size());
      parts.push_back(ConstSpan{meta.data(), meta.size() * 4, true});
      direct.send(g.members[size_t(o)], parts.data(), parts.size());
    }
    for (int r = 0; r < n; ++r) {
      if (tokensTo[size_t(r)].empty())
        continue;
      std::vector<SlotMeta> &meta = relayMeta[size_t(r)];
      bool carries = false;
      for (int64_t t : tokensTo[size_t(r)])
        for (int64_t j = 0; j < k; ++j) {
          const int64_t slot = t * k + j;
          bool here = h.slotRelay[size_t(slot)] == r;
          meta.push_back(
              SlotMeta{here ? int32_t(experts[size_t(slot)]) | traceBit(slot)
                            : int32_t(-1),
                       here ? h.weights[size_t(slot)] : 0.0f});
          carries |= tokenTraced[size_t(t)] != 0;
        }
      if (carries)
        op.traceHop(g.members[size_t(r)]);
      std::vector<ConstSpan> parts =
          rowParts(packOffset[size_t(n + r)], tokensTo[size_t(r)].size());
      parts.push_back(
          ConstSpan{meta.data(), meta.size() * sizeof(SlotMeta), true});
      relayed.send(g.members[size_t(r)], parts.data(), parts.size());
    }
    for (int src = 0; src < n; ++src) {
      if (src == me)
        continue;
      const int64_t cnt = h.fromSlots[size_t(src)];
      if (cnt && routeVia(st, g, h.mode, src, me) < 0)
        direct.recv(
            g.members[size_t(src)],
            {Span{rowPtr(rows.data(), h.rowOffset[size_t(src)], rowBytes),
                  size_t(cnt) * rowBytes},
             Span{&rowExpert[size_t(h.rowOffset[size_t(src)])], size_t(cnt) * 4,
                  true}});
      const int64_t toks = h.fromTokens[size_t(src)];
      if (toks)
        relayed.recv(
            g.members[size_t(src)],
            {Span{rowPtr(inRows.data(), h.inOffset[size_t(src)], rowBytes),
                  size_t(toks) * rowBytes},
             Span{&h.inMeta[size_t(h.inOffset[size_t(src)] * k)],
                  size_t(toks * k) * sizeof(SlotMeta), true}});
    }
    s = direct.wait();
    Status s2 = relayed.wait();
    if (s.ok())
      s = s2;
    if (!s.ok())
      return s;
  }
  // Inbound tokens a relay forwards: take the trace bit off their metadata.
  h.inTraced.assign(size_t(inTotal), 0);
  for (int64_t row = 0; row < inTotal; ++row)
    for (int64_t j = 0; j < k; ++j) {
      SlotMeta &m = h.inMeta[size_t(row * k + j)];
      if (m.expert >= 0 && (m.expert & kTraceBit)) {
        m.expert &= ~kTraceBit;
        h.inTraced[size_t(row)] = 1;
      }
    }

  // Phase C: relays forward to the owners on their node.
  if (h.mode == MFRT_DISPATCH_HIERARCHICAL) {
    h.forward.assign(size_t(n), {});
    const int64_t myNode = st.layout.node(st.rank);
    for (int src = 0; src < n; ++src)
      for (int64_t i = 0; i < h.fromTokens[size_t(src)]; ++i) {
        const int64_t row = h.inOffset[size_t(src)] + i;
        for (int64_t j = 0; j < k; ++j) {
          const int32_t e = h.inMeta[size_t(row * k + j)].expert;
          if (e < 0)
            continue;
          if (e >= h.nExperts)
            return Status::error(MFRT_ERR_BACKEND, "bad relay metadata");
          const int o = g.owner[size_t(e)];
          if (st.layout.node(g.members[size_t(o)]) != myNode)
            return Status::error(MFRT_ERR_BACKEND, "relayed expert " +
                                                       std::to_string(e) +
                                                       " is not on this node");
          h.forward[size_t(o)].push_back(
              Forward{int32_t(src), row, int32_t(j)});
        }
      }
    std::vector<int64_t> fwdRows, fwdOffset(static_cast<size_t>(n), 0);
    std::vector<std::vector<int32_t>> fwdMeta(static_cast<size_t>(n));
    for (int o = 0; o < n; ++o) {
      fwdOffset[size_t(o)] = int64_t(fwdRows.size());
      bool carries = false;
      for (const Forward &f : h.forward[size_t(o)]) {
        fwdRows.push_back(f.tokenRow);
        const bool t = h.inTraced[size_t(f.tokenRow)] != 0;
        fwdMeta[size_t(o)].push_back(
            localExpert(h.inMeta[size_t(f.tokenRow * k + f.j)].expert, o) |
            (t ? kTraceBit : 0));
        carries |= t;
      }
      if (carries && o != me)
        op.traceHop(g.members[size_t(o)]);
    }
    Buffer fwd(compute);
    if (!zeroCopy) {
      s = allocRows(fwd, int64_t(fwdRows.size()), rowBytes);
      if (s.ok() && !fwdRows.empty())
        s = compute.gatherRows(fwd.data(), inRows.data(), fwdRows.data(),
                               int64_t(fwdRows.size()), rowBytes);
      if (!s.ok())
        return s;
    }
    // Rows this relay owns itself: per source, in place.
    {
      const std::vector<Forward> &mine = h.forward[size_t(me)];
      for (size_t a = 0; a < mine.size();) {
        size_t b = a;
        const int src = mine[a].source;
        while (b < mine.size() && mine[b].source == src)
          ++b;
        if (int64_t(b - a) != h.fromSlots[size_t(src)])
          return Status::error(MFRT_ERR_BACKEND,
                               "relayed row count mismatch for rank " +
                                   std::to_string(g.members[size_t(src)]));
        s = compute.gatherRows(
            rowPtr(rows.data(), h.rowOffset[size_t(src)], rowBytes),
            inRows.data(), fwdRows.data() + fwdOffset[size_t(me)] + int64_t(a),
            int64_t(b - a), rowBytes);
        if (!s.ok())
          return s;
        std::copy(fwdMeta[size_t(me)].begin() + long(a),
                  fwdMeta[size_t(me)].begin() + long(b),
                  rowExpert.begin() + h.rowOffset[size_t(src)]);
        a = b;
      }
    }
    Phase phase(op, 3);
    for (int o = 0; o < n; ++o) {
      if (o == me || h.forward[size_t(o)].empty())
        continue;
      std::vector<ConstSpan> parts;
      const size_t cnt = h.forward[size_t(o)].size();
      if (zeroCopy)
        appendRows(parts, inRows.data(), fwdRows.data() + fwdOffset[size_t(o)],
                   cnt, rowBytes);
      else
        parts.push_back(
            ConstSpan{rowPtr(fwd.data(), fwdOffset[size_t(o)], rowBytes),
                      cnt * rowBytes});
      parts.push_back(ConstSpan{fwdMeta[size_t(o)].data(), cnt * 4, true});
      phase.send(g.members[size_t(o)], parts.data(), parts.size());
    }
    for (int r = 0; r < n; ++r) {
      if (r == me)
        continue;
      std::vector<Span> rowParts, metaParts;
      for (int src = 0; src < n; ++src) {
        const int64_t cnt = h.fromSlots[size_t(src)];
        if (!cnt || src == me || routeVia(st, g, h.mode, src, me) != r)
          continue;
        rowParts.push_back(
            Span{rowPtr(rows.data(), h.rowOffset[size_t(src)], rowBytes),
                 size_t(cnt) * rowBytes});
        metaParts.push_back(Span{&rowExpert[size_t(h.rowOffset[size_t(src)])],
                                 size_t(cnt) * 4, true});
      }
      if (rowParts.empty())
        continue;
      rowParts.insert(rowParts.end(), metaParts.begin(), metaParts.end());
      phase.recv(g.members[size_t(r)], rowParts.data(), rowParts.size());
    }
    s = phase.wait();
    if (!s.ok())
      return s;
  }

  s = compute.sync(op.deadline, st.timeoutS);
  if (!s.ok())
    return s;
  // Received rows: take the trace bit off their expert ids.
  h.traced.assign(size_t(h.count), 0);
  for (int64_t row = 0; row < h.count; ++row)
    if (rowExpert[size_t(row)] & kTraceBit) {
      rowExpert[size_t(row)] &= ~kTraceBit;
      h.traced[size_t(row)] = 1;
    }
  h.experts.assign(rowExpert.begin(), rowExpert.end());
  h.rows = rows.take();
  return Status::success();
}

Status mfrt::comm::combineTokens(Op &op, mfrt_dispatch &h, const void *out,
                                 void *y) {
  RankState &st = op.st;
  Group &g = *op.group;
  const int n = g.size(), me = g.index;
  const int64_t k = h.k, nTokens = h.nTokens;
  const size_t rowBytes = h.rowBytes;
  Compute &compute = st.compute;
  const bool hier = h.mode == MFRT_DISPATCH_HIERARCHICAL;

  // The traced token's rows for this rank's own experts stay here.
  {
    const auto first = h.traced.begin() + h.rowOffset[size_t(me)];
    const auto last = first + h.fromSlots[size_t(me)];
    if (std::find(first, last, 1) != last)
      op.traceStay();
  }

  // Where returned rows land: per direct owner, per relay.
  std::vector<int64_t> directOffset(static_cast<size_t>(n), 0),
      returnOffset(size_t(n), 0);
  int64_t directTotal = 0, returnTotal = 0, relayTotal = 0;
  for (int o = 0; o < n; ++o) {
    directOffset[size_t(o)] = directTotal;
    if (o != me && routeVia(st, g, h.mode, me, o) < 0)
      directTotal += h.slotsTo[size_t(o)];
    returnOffset[size_t(o)] = returnTotal;
    if (hier && o != me)
      returnTotal += int64_t(h.forward[size_t(o)].size());
    relayTotal += h.tokensTo[size_t(o)];
  }
  int64_t inTotal = 0;
  for (int i = 0; i < n; ++i)
    inTotal += h.fromTokens[size_t(i)];
  Buffer directBack(compute), returned(compute), relayBack(compute),
      partials(compute), local(compute);
  Status s = allocRows(directBack, directTotal, rowBytes);
  if (s.ok())
    s = allocRows(returned, returnTotal, rowBytes);
  if (s.ok())
    s = allocRows(relayBack, relayTotal, rowBytes);
  if (s.ok())
    s = allocRows(partials, inTotal, rowBytes);
  if (!s.ok())
    return s;
  auto outRow = [&](int64_t row) {
    return static_cast<const char *>(out) + size_t(row) * rowBytes;
  };

  // Phase D: owners return rows to direct sources and to relays.
  {
    Phase direct(op, 0), toRelay(op, 1);
    std::vector<std::vector<ConstSpan>> relayParts(static_cast<size_t>(n));
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
    for (int r = 0; r < n; ++r)
      if (!relayParts[size_t(r)].empty())
        toRelay.send(g.members[size_t(r)], relayParts[size_t(r)].data(),
                     relayParts[size_t(r)].size());
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
    s = direct.wait();
    Status s2 = toRelay.wait();
    if (s.ok())
      s = s2;
    if (!s.ok())
      return s;
  }

  // Phase E: relays sum their node's weighted outputs per token.
  if (hier) {
    std::vector<int64_t> cursor(static_cast<size_t>(n), 0),
        selfCursor(size_t(n), 0);
    std::vector<int64_t> termBegin{0};
    std::vector<Term> terms;
    for (int src = 0; src < n; ++src)
      for (int64_t i = 0; i < h.fromTokens[size_t(src)]; ++i) {
        const int64_t row = h.inOffset[size_t(src)] + i;
        for (int64_t j = 0; j < k; ++j) {
          const SlotMeta &m = h.inMeta[size_t(row * k + j)];
          if (m.expert < 0)
            continue;
          const int o = g.owner[size_t(m.expert)];
          if (o == me)
            terms.push_back(
                Term{0, h.rowOffset[size_t(src)] + selfCursor[size_t(src)]++,
                     m.weight});
          else
            terms.push_back(Term{
                1, returnOffset[size_t(o)] + cursor[size_t(o)]++, m.weight});
        }
        termBegin.push_back(int64_t(terms.size()));
      }
    const void *bufs[2] = {out, returned.data()};
    if (inTotal) {
      s = compute.weightedSum(partials.data(), inTotal, termBegin.data(),
                              terms.data(), bufs, 2, h.hidden, h.dtype);
      if (!s.ok())
        return s;
    }
    Phase phase(op, 2);
    for (int src = 0; src < n; ++src) {
      const auto first = h.inTraced.begin() + h.inOffset[size_t(src)];
      const auto last = first + h.fromTokens[size_t(src)];
      if (std::find(first, last, 1) != last)
        op.traceHop(g.members[size_t(src)]);
    }
    for (int src = 0; src < n; ++src)
      if (h.fromTokens[size_t(src)])
        phase.send(g.members[size_t(src)],
                   {ConstSpan{rowPtr(partials.data(), h.inOffset[size_t(src)],
                                     rowBytes),
                              size_t(h.fromTokens[size_t(src)]) * rowBytes}});
    for (int r = 0; r < n; ++r)
      if (h.tokensTo[size_t(r)])
        phase.recv(
            g.members[size_t(r)],
            {Span{rowPtr(relayBack.data(), h.relayOffset[size_t(r)], rowBytes),
                  size_t(h.tokensTo[size_t(r)]) * rowBytes}});
    s = phase.wait();
    if (!s.ok())
      return s;
  }

  // Final: per token, node partials in ascending node order.
  // Buffers: 0 = out (slots this rank owns), 1 = directBack, 2 = relayBack,
  // 3 = local node partials.
  std::vector<int64_t> localBegin{0}, finalBegin{0};
  std::vector<Term> localTerms, finalTerms;
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
  const int64_t numLocal = int64_t(localBegin.size()) - 1;
  s = allocRows(local, numLocal, rowBytes);
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
