//===- Dispatch.cpp - MoE dispatch over an EP group -----------------------===//
//
// Each routed slot (token t, choice j) goes to the owner of its expert; every
// owner receives its rows ordered by (source group rank, token, j). An expert
// split over etp has one owner per slice (MeshLayout::expertHolders): the
// routing is expanded to a slot per (choice, slice), each with the choice's
// weight, so that combine sums the slices' partial outputs.
//
// Flat: every slot travels directly from its token's rank to the owner.
//
// Hierarchical (as DeepEP's high-throughput kernels; hop 4 of
// docs/design.md §4): a token crosses to another node at most once per
// destination node, to the relay (MeshLayout::relay: the GPU on that node
// with the sender's local index, same IB rail), which forwards it over NVLink
// to the owners of its experts on that node. Combine goes back the same way,
// and the relay first sums the weighted outputs of its node's experts for the
// token so that one row crosses back. Where a relay is not a member of the
// group the slots go directly.
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
//   combine (Combine.cpp): D owners return rows to direct sources and to
//   relays; E relays return one partial row per token.
//
//===----------------------------------------------------------------------===//

#include "mfrt/comm/Dispatch.h"
#include "meshfold/Support/ExpertPlacement.h"
#include "meshfold/Support/Text.h"
#include "mfrt/comm/CommDType.h"
#include "mfrt/comm/CommRuntime.h"

#include <algorithm>
#include <cstring>

using namespace mfrt::comm;

/// Relay group rank through which source `s` reaches owner `o`, or -1 for a
/// direct message (same node, flat mode, or the relay is not in the group).
int mfrt::comm::routeVia(const RankState &st, const Group &g,
                         mfrt_dispatch_mode mode, int s, int o) {
  if (mode != MFRT_DISPATCH_HIERARCHICAL || s == o)
    return -1;
  const int64_t gs = g.members[size_t(s)], go = g.members[size_t(o)];
  const int64_t node = st.layout.node(go);
  if (st.layout.node(gs) == node)
    return -1;
  auto it = g.indexOf.find(int(st.layout.relay(gs, node)));
  return it == g.indexOf.end() ? -1 : it->second;
}

Status mfrt::comm::allocRows(Buffer &buf, int64_t rows, size_t rowBytes) {
  if (buf.allocate(size_t(rows) * rowBytes))
    return Status::success();
  return Status::error(MFRT_ERR_BACKEND,
                       "cannot allocate " + std::to_string(rows) + " rows of " +
                           std::to_string(rowBytes) + " bytes");
}

char *mfrt::comm::rowPtr(void *base, int64_t row, size_t rowBytes) {
  return static_cast<char *>(base) + size_t(row) * rowBytes;
}

namespace {

/// True if the group's axes name the expert mesh's "ep".
bool placesExperts(const Group &g) {
  std::vector<std::string> axes = meshfold::split(g.axes, ',');
  return std::find(axes.begin(), axes.end(), "ep") != axes.end();
}

/// The group's routing targets for `nExperts` experts placed by `placement`
/// (empty: contiguous): on a group along the expert mesh's ep (and etp),
/// each slot's EP coordinate's members (MeshLayout::epHolders: one per etp
/// slice); on any other group, block e / (n_experts / group size).
Status ownerTable(RankState &st, Group &g, int64_t nExperts,
                  const std::vector<int64_t> &placement,
                  std::shared_ptr<const ExpertTable> &out) {
  std::shared_ptr<const ExpertTable> &cached =
      g.expertTables[nExperts][placement];
  if (cached) {
    out = cached;
    return Status::success();
  }
  std::vector<int> owner, local;
  int64_t replicas = 1;
  meshfold::ExpertPlacement p;
  if (!placesExperts(g)) {
    if (!placement.empty())
      return Status::error(MFRT_ERR_ARGUMENT,
                           "an expert placement needs a group along the "
                           "expert mesh's ep, not " +
                               g.name);
    if (nExperts % g.size())
      return Status::error(
          MFRT_ERR_ARGUMENT,
          "the group's " + std::to_string(g.size()) +
              " ranks must divide n_experts=" + std::to_string(nExperts));
    p = meshfold::ExpertPlacement::contiguous(nExperts, g.size());
    for (int64_t s = 0; s < nExperts; ++s) {
      owner.push_back(int(s / p.slots));
      local.push_back(int(s % p.slots));
    }
  } else {
    const int64_t ep = st.layout.axisSize("ep");
    if (placement.empty() && nExperts % ep)
      return Status::error(MFRT_ERR_ARGUMENT, "EP=" + std::to_string(ep) +
                                                  " must divide n_experts=" +
                                                  std::to_string(nExperts));
    p = placement.empty()
            ? meshfold::ExpertPlacement::contiguous(nExperts, ep)
            : meshfold::ExpertPlacement::fromTable(nExperts, ep, placement);
    if (std::string why = p.check(); !why.empty())
      return Status::error(MFRT_ERR_ARGUMENT,
                           "the expert placement is malformed: " + why);
    for (int64_t s = 0; s < int64_t(p.experts.size()); ++s) {
      std::vector<int64_t> holders =
          st.layout.epHolders(st.local(st.rank), p.coordOf(s));
      if (s == 0)
        replicas = int64_t(holders.size());
      if (holders.empty() || int64_t(holders.size()) != replicas)
        return Status::error(MFRT_ERR_ARGUMENT,
                             "experts have different numbers of holders");
      for (int64_t rank : holders) {
        auto it = g.indexOf.find(int(st.global(rank)));
        if (it == g.indexOf.end())
          return Status::error(MFRT_ERR_ARGUMENT,
                               "MeshLayout places slot " + std::to_string(s) +
                                   " on rank " + std::to_string(rank) +
                                   ", which is not in the group");
        owner.push_back(it->second);
        local.push_back(int(s % p.slots));
      }
    }
  }
  // The slots a row of each expert goes to from this rank: its replicas,
  // those on this rank's node where every node holds as many of them.
  std::vector<int64_t> nodeOfSlot;
  for (int64_t s = 0; s < int64_t(p.experts.size()); ++s)
    nodeOfSlot.push_back(st.layout.node(
        st.local(g.members[size_t(owner[size_t(s * replicas)])])));
  std::vector<std::vector<int64_t>> slotsOf(static_cast<size_t>(nExperts));
  for (int64_t s = 0; s < int64_t(p.experts.size()); ++s)
    slotsOf[size_t(p.experts[size_t(s)])].push_back(s);
  auto table = std::make_shared<ExpertTable>();
  const int64_t myNode = st.layout.node(st.local(st.rank));
  for (const std::vector<int64_t> &slots : slotsOf)
    table->slotsOf.push_back(
        meshfold::localReplicas(slots, nodeOfSlot, myNode));
  table->owner = std::move(owner);
  table->ownerLocal = std::move(local);
  table->replicas = replicas;
  cached = table;
  out = std::move(table);
  return Status::success();
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

/// One dispatch call on this rank: its arguments, and the routing, counts and
/// buffers that its phases share. As token rank it sends rows to the owners
/// and relays; as owner it receives them; as relay it forwards them.
struct Dispatcher {
  Dispatcher(Op &op, mfrt_dispatch &h, const void *x)
      : op(op), h(h), x(x), st(op.st), g(*op.group), compute(st.compute),
        n(g.size()), me(g.index), k(h.k), nTokens(h.nTokens),
        slots(nTokens * k), rowBytes(h.rowBytes) {}

  Status readRouting(const int64_t *expertsIn, const float *weightsIn);
  void planRoutes();
  Status exchangeCounts();
  Status readCounts();
  Status allocate();
  Status packOutbound();
  Status placeOwnRows();
  Status exchangeRows();
  void sendDirect(Phase &direct);
  void sendToRelays(Phase &relayed);
  void postRowReceives(Phase &direct, Phase &relayed);
  void stripInboundTraceBits();
  Status forwardOnNode();
  Status planForwards();
  void packForwards();
  Status placeOwnForwards();
  void sendForwards(Phase &phase, const Buffer &fwd);
  void recvForwards(Phase &phase);
  Status finish();

  /// The trace bit for the rows of `slot`: set if its token is traced.
  int32_t traceBit(int64_t slot) const {
    return tokenTraced[size_t(slot / k)] ? kTraceBit : 0;
  }
  /// Routing target `e` as an index among the experts of its holder.
  int32_t localExpert(int64_t e) const {
    return int32_t(h.table->ownerLocal[size_t(e)]);
  }
  /// The rows of the message whose pack rows start at `offset`.
  std::vector<ConstSpan> rowParts(int64_t offset, size_t count) const {
    std::vector<ConstSpan> parts;
    if (zeroCopy)
      appendRows(parts, x, packRows.data() + offset, count, rowBytes);
    else
      parts.push_back(
          ConstSpan{rowPtr(pack.data(), offset, rowBytes), count * rowBytes});
    return parts;
  }

  Op &op;
  mfrt_dispatch &h;
  const void *x;
  RankState &st;
  Group &g;
  Compute &compute;
  const int n, me;
  const int64_t k, nTokens, slots;
  const size_t rowBytes;

  /// The expert of each slot, on the host.
  std::vector<int64_t> experts;
  /// Token tracing: the marked tokens of x.
  std::vector<uint8_t> tokenTraced;
  /// By group rank: the slots it owns, in slot order; the tokens this rank
  /// sends through it as relay; the relay through which it is reached (-1:
  /// direct).
  std::vector<std::vector<int64_t>> slotsTo, tokensTo;
  std::vector<int> relayOf;
  /// Phase A messages: (slots, relayed tokens) to and from each member.
  std::vector<int64_t> sendCounts, recvCounts;
  /// Inbound tokens this rank relays, from all sources.
  int64_t inTotal = 0;
  /// Received rows; a relay's inbound tokens; this rank's packed outbound
  /// rows.
  Buffer rows{compute}, inRows{compute}, pack{compute};
  /// The local expert id of each received row, with the trace bit.
  std::vector<int32_t> rowExpert;
  /// Outbound rows (tokens of x) in pack order, and where the rows of each
  /// message start: [o] for direct owner o, [n + r] for relay r.
  std::vector<int64_t> packRows, packOffset;
  /// Rows are sent straight from x (host memory) rather than from `pack`.
  bool zeroCopy = false;
  /// Phase B metadata: local expert ids to each direct owner, slot metadata
  /// to each relay.
  std::vector<std::vector<int32_t>> directMeta;
  std::vector<std::vector<SlotMeta>> relayMeta;
  /// Phase C: inbound token rows forwarded, grouped by owner; where each
  /// owner's rows start; their local expert ids, with the trace bit.
  std::vector<int64_t> fwdRows, fwdOffset;
  std::vector<std::vector<int32_t>> fwdMeta;
};

/// Copies the routing to the host, checks its expert ids, sends each choice
/// to one slot of its expert (its replicas take turns, starting from this
/// rank's group index; only those on this node where every node holds as
/// many, meshfold::localReplicas) and expands it to the `replicas` holders of
/// that slot (routing target s * replicas + m, same weight); marks the traced
/// tokens.
Status Dispatcher::readRouting(const int64_t *expertsIn,
                               const float *weightsIn) {
  const int64_t replicas = h.replicas, choices = k / replicas;
  std::vector<int64_t> chosen(size_t(nTokens * choices));
  std::vector<float> weights(chosen.size());
  if (!chosen.empty()) {
    Status s = compute.copyToHost(chosen.data(), expertsIn, chosen.size() * 8);
    if (s.ok())
      s = compute.copyToHost(weights.data(), weightsIn, weights.size() * 4);
    if (!s.ok())
      return s;
  }
  experts.resize(size_t(slots));
  h.weights.resize(size_t(slots));
  std::vector<int64_t> turns(size_t(h.nExperts), me);
  for (size_t i = 0; i < chosen.size(); ++i) {
    const int64_t e = chosen[i];
    if (e < 0 || e >= h.nExperts)
      return Status::error(
          MFRT_ERR_ARGUMENT,
          "token " + std::to_string(int64_t(i) / choices) + " choice " +
              std::to_string(int64_t(i) % choices) + " routes to expert " +
              std::to_string(e) + ", but there are " +
              std::to_string(h.nExperts) + " experts");
    const std::vector<int64_t> &held = h.table->slotsOf[size_t(e)];
    const int64_t slot =
        held[size_t(turns[size_t(e)]++ % int64_t(held.size()))];
    for (int64_t m = 0; m < replicas; ++m) {
      experts[i * size_t(replicas) + size_t(m)] = slot * replicas + m;
      h.weights[i * size_t(replicas) + size_t(m)] = weights[i];
    }
  }

  tokenTraced.assign(size_t(nTokens), 0);
  for (int64_t t : op.traceMarks)
    if (t >= 0 && t < nTokens)
      tokenTraced[size_t(t)] = 1;
  return Status::success();
}

/// As token rank: the owner of each slot, its position among the slots sent
/// to that owner, its relay and its row among the partials that relays
/// return; per member, the slots it owns and the tokens it relays.
void Dispatcher::planRoutes() {
  slotsTo.assign(size_t(n), {});
  h.slotOwner.resize(size_t(slots));
  h.slotPos.resize(size_t(slots));
  h.slotRelay.assign(size_t(slots), -1);
  h.slotRelayRow.assign(size_t(slots), -1);
  relayOf.resize(size_t(n));
  for (int o = 0; o < n; ++o)
    relayOf[size_t(o)] = routeVia(st, g, h.mode, me, o);
  tokensTo.assign(size_t(n), {});
  for (int64_t t = 0; t < nTokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t slot = t * k + j;
      const int o = h.table->owner[size_t(experts[size_t(slot)])];
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
}

/// Phase A: sends every other member (slots it owns, tokens it relays) and
/// receives the same from it.
Status Dispatcher::exchangeCounts() {
  sendCounts.resize(size_t(2 * n));
  recvCounts.resize(size_t(2 * n));
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
  return phase.wait();
}

/// Lays out the received counts: each source's rows as owner and inbound
/// tokens as relay. Fails on negative counts and on tokens relayed through a
/// rank that is not the source's relay.
Status Dispatcher::readCounts() {
  h.fromSlots.resize(size_t(n));
  h.rowOffset.resize(size_t(n));
  h.fromTokens.resize(size_t(n));
  h.inOffset.resize(size_t(n));
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
  return Status::success();
}

/// Allocates the received rows and their local expert ids, and a relay's
/// inbound tokens and their slot metadata.
Status Dispatcher::allocate() {
  Status s = allocRows(rows, h.count, rowBytes);
  if (s.ok())
    s = allocRows(inRows, inTotal, rowBytes);
  if (!s.ok())
    return s;
  rowExpert.resize(size_t(h.count));
  h.inMeta.resize(size_t(inTotal * k));
  return Status::success();
}

/// Orders the outbound rows, direct owners ascending, then relays ascending;
/// on a device, gathers them into `pack` (one kernel instead of a copy per
/// row), while on the host they go straight from x as message parts.
Status Dispatcher::packOutbound() {
  packOffset.assign(size_t(2 * n), 0);
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
  zeroCopy = compute.hostMemory();
  Status s = Status::success();
  if (!zeroCopy) {
    s = allocRows(pack, int64_t(packRows.size()), rowBytes);
    if (s.ok() && !packRows.empty())
      s = compute.gatherRows(pack.data(), x, packRows.data(),
                             int64_t(packRows.size()), rowBytes);
  }
  return s;
}

/// Copies the slots this rank owns itself straight to their place among the
/// received rows.
Status Dispatcher::placeOwnRows() {
  if (slotsTo[size_t(me)].empty())
    return Status::success();
  std::vector<int64_t> selfRows;
  bool stays = false;
  for (int64_t slot : slotsTo[size_t(me)]) {
    selfRows.push_back(slot / k);
    rowExpert[size_t(h.rowOffset[size_t(me)]) + selfRows.size() - 1] =
        localExpert(experts[size_t(slot)]) | traceBit(slot);
    stays |= traceBit(slot) != 0;
  }
  if (stays)
    op.traceStay();
  return compute.gatherRows(
      rowPtr(rows.data(), h.rowOffset[size_t(me)], rowBytes), x,
      selfRows.data(), int64_t(selfRows.size()), rowBytes);
}

/// Phase B: rows and local expert ids to the direct owners, token rows and
/// their slot metadata to the relays; receives the same.
Status Dispatcher::exchangeRows() {
  directMeta.assign(size_t(n), {});
  relayMeta.assign(size_t(n), {});
  Phase direct(op, 1), relayed(op, 2);
  sendDirect(direct);
  sendToRelays(relayed);
  postRowReceives(direct, relayed);
  Status s = direct.wait();
  Status s2 = relayed.wait();
  if (s.ok())
    s = s2;
  return s;
}

/// Phase B, to each direct owner: the rows of its slots, then their local
/// expert ids.
void Dispatcher::sendDirect(Phase &direct) {
  for (int o = 0; o < n; ++o) {
    if (o == me || relayOf[size_t(o)] >= 0 || slotsTo[size_t(o)].empty())
      continue;
    std::vector<int32_t> &meta = directMeta[size_t(o)];
    bool carries = false;
    for (int64_t slot : slotsTo[size_t(o)]) {
      meta.push_back(localExpert(experts[size_t(slot)]) | traceBit(slot));
      carries |= traceBit(slot) != 0;
    }
    if (carries)
      op.traceHop(g.members[size_t(o)]);
    std::vector<ConstSpan> parts = rowParts(packOffset[size_t(o)], meta.size());
    parts.push_back(ConstSpan{meta.data(), meta.size() * 4, true});
    direct.send(g.members[size_t(o)], parts.data(), parts.size());
  }
}

/// Phase B, to each relay: the rows of the tokens it relays, then per token
/// k slot metadata (the expert and weight of each choice for the relay's
/// node, expert -1 for the others).
void Dispatcher::sendToRelays(Phase &relayed) {
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
}

/// Phase B receives, per source: its direct rows and their local expert ids
/// into their place among the received rows; the tokens it relays through
/// this rank and their slot metadata.
void Dispatcher::postRowReceives(Phase &direct, Phase &relayed) {
  for (int src = 0; src < n; ++src) {
    if (src == me)
      continue;
    const int64_t cnt = h.fromSlots[size_t(src)];
    if (cnt && routeVia(st, g, h.mode, src, me) < 0)
      direct.recv(g.members[size_t(src)],
                  {Span{rowPtr(rows.data(), h.rowOffset[size_t(src)], rowBytes),
                        size_t(cnt) * rowBytes},
                   Span{&rowExpert[size_t(h.rowOffset[size_t(src)])],
                        size_t(cnt) * 4, true}});
    const int64_t toks = h.fromTokens[size_t(src)];
    if (toks)
      relayed.recv(
          g.members[size_t(src)],
          {Span{rowPtr(inRows.data(), h.inOffset[size_t(src)], rowBytes),
                size_t(toks) * rowBytes},
           Span{&h.inMeta[size_t(h.inOffset[size_t(src)] * k)],
                size_t(toks * k) * sizeof(SlotMeta), true}});
  }
}

/// Inbound tokens a relay forwards: takes the trace bit off their metadata
/// and notes the traced tokens.
void Dispatcher::stripInboundTraceBits() {
  h.inTraced.assign(size_t(inTotal), 0);
  for (int64_t row = 0; row < inTotal; ++row)
    for (int64_t j = 0; j < k; ++j) {
      SlotMeta &m = h.inMeta[size_t(row * k + j)];
      if (m.expert >= 0 && (m.expert & kTraceBit)) {
        m.expert &= ~kTraceBit;
        h.inTraced[size_t(row)] = 1;
      }
    }
}

/// Phase C (hierarchical only): relays forward the inbound rows and their
/// local expert ids to the owners on their node; owners receive the rows
/// relayed to them.
Status Dispatcher::forwardOnNode() {
  if (h.mode != MFRT_DISPATCH_HIERARCHICAL)
    return Status::success();
  Status s = planForwards();
  if (!s.ok())
    return s;
  packForwards();
  Buffer fwd(compute);
  if (!zeroCopy) {
    s = allocRows(fwd, int64_t(fwdRows.size()), rowBytes);
    if (s.ok() && !fwdRows.empty())
      s = compute.gatherRows(fwd.data(), inRows.data(), fwdRows.data(),
                             int64_t(fwdRows.size()), rowBytes);
    if (!s.ok())
      return s;
  }
  s = placeOwnForwards();
  if (!s.ok())
    return s;
  Phase phase(op, 3);
  sendForwards(phase, fwd);
  recvForwards(phase);
  return phase.wait();
}

/// Phase C: the inbound slots for each owner on this node, by (source,
/// token, j); fails on metadata naming an expert off this node.
Status Dispatcher::planForwards() {
  h.forward.assign(size_t(n), {});
  const int64_t myNode = st.layout.node(st.rank);
  for (int src = 0; src < n; ++src)
    for (int64_t i = 0; i < h.fromTokens[size_t(src)]; ++i) {
      const int64_t row = h.inOffset[size_t(src)] + i;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = h.inMeta[size_t(row * k + j)].expert;
        if (e < 0)
          continue;
        if (e >= int64_t(h.table->owner.size()))
          return Status::error(MFRT_ERR_BACKEND, "bad relay metadata");
        const int o = h.table->owner[size_t(e)];
        if (st.layout.node(g.members[size_t(o)]) != myNode)
          return Status::error(MFRT_ERR_BACKEND, "relayed expert " +
                                                     std::to_string(e) +
                                                     " is not on this node");
        h.forward[size_t(o)].push_back(Forward{int32_t(src), row, int32_t(j)});
      }
    }
  return Status::success();
}

/// Phase C: the forwarded rows in owner order, and their local expert ids
/// with the trace bit; records the hops of the traced token.
void Dispatcher::packForwards() {
  fwdOffset.assign(size_t(n), 0);
  fwdMeta.assign(size_t(n), {});
  for (int o = 0; o < n; ++o) {
    fwdOffset[size_t(o)] = int64_t(fwdRows.size());
    bool carries = false;
    for (const Forward &f : h.forward[size_t(o)]) {
      fwdRows.push_back(f.tokenRow);
      const bool t = h.inTraced[size_t(f.tokenRow)] != 0;
      fwdMeta[size_t(o)].push_back(
          localExpert(h.inMeta[size_t(f.tokenRow * k + f.j)].expert) |
          (t ? kTraceBit : 0));
      carries |= t;
    }
    if (carries && o != me)
      op.traceHop(g.members[size_t(o)]);
  }
}

/// Phase C: the relayed rows this relay owns itself go, per source, straight
/// to their place among the received rows.
Status Dispatcher::placeOwnForwards() {
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
    Status s = compute.gatherRows(
        rowPtr(rows.data(), h.rowOffset[size_t(src)], rowBytes), inRows.data(),
        fwdRows.data() + fwdOffset[size_t(me)] + int64_t(a), int64_t(b - a),
        rowBytes);
    if (!s.ok())
      return s;
    std::copy(fwdMeta[size_t(me)].begin() + long(a),
              fwdMeta[size_t(me)].begin() + long(b),
              rowExpert.begin() + h.rowOffset[size_t(src)]);
    a = b;
  }
  return Status::success();
}

/// Phase C sends: to each other owner on this node, its forwarded rows (from
/// the inbound rows, or packed in `fwd` on a device), then their local
/// expert ids.
void Dispatcher::sendForwards(Phase &phase, const Buffer &fwd) {
  for (int o = 0; o < n; ++o) {
    if (o == me || h.forward[size_t(o)].empty())
      continue;
    std::vector<ConstSpan> parts;
    const size_t cnt = h.forward[size_t(o)].size();
    if (zeroCopy)
      appendRows(parts, inRows.data(), fwdRows.data() + fwdOffset[size_t(o)],
                 cnt, rowBytes);
    else
      parts.push_back(ConstSpan{
          rowPtr(fwd.data(), fwdOffset[size_t(o)], rowBytes), cnt * rowBytes});
    parts.push_back(ConstSpan{fwdMeta[size_t(o)].data(), cnt * 4, true});
    phase.send(g.members[size_t(o)], parts.data(), parts.size());
  }
}

/// Phase C receives: from each other relay, one message with the rows of
/// every source that reaches this rank through it, then their local expert
/// ids, each into its source's place.
void Dispatcher::recvForwards(Phase &phase) {
  for (int r = 0; r < n; ++r) {
    if (r == me)
      continue;
    std::vector<Span> parts, metaParts;
    for (int src = 0; src < n; ++src) {
      const int64_t cnt = h.fromSlots[size_t(src)];
      if (!cnt || src == me || routeVia(st, g, h.mode, src, me) != r)
        continue;
      parts.push_back(
          Span{rowPtr(rows.data(), h.rowOffset[size_t(src)], rowBytes),
               size_t(cnt) * rowBytes});
      metaParts.push_back(Span{&rowExpert[size_t(h.rowOffset[size_t(src)])],
                               size_t(cnt) * 4, true});
    }
    if (parts.empty())
      continue;
    parts.insert(parts.end(), metaParts.begin(), metaParts.end());
    phase.recv(g.members[size_t(r)], parts.data(), parts.size());
  }
}

/// Waits for the queued work, takes the trace bit off the received rows'
/// expert ids and hands the rows to the handle.
Status Dispatcher::finish() {
  Status s = compute.sync(op.deadline, st.timeoutS);
  if (!s.ok())
    return s;
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
} // namespace

/// Dispatches x by its routing: counts (A), rows to owners and relays (B),
/// relays to the owners on their node (C); fills `h` as owner, token rank
/// and relay.
Status mfrt::comm::dispatchTokens(Op &op, mfrt_dispatch &h, const void *x,
                                  const int64_t *expertsIn,
                                  const float *weightsIn,
                                  const std::vector<int64_t> &placement) {
  Status table = ownerTable(op.st, *op.group, h.nExperts, placement, h.table);
  if (!table.ok())
    return table;
  h.replicas = h.table->replicas;
  h.k *= h.replicas;
  Dispatcher d(op, h, x);
  Status s = d.readRouting(expertsIn, weightsIn);
  if (!s.ok())
    return s;
  d.planRoutes();
  s = d.exchangeCounts();
  if (s.ok())
    s = d.readCounts();
  if (s.ok())
    s = d.allocate();
  if (s.ok())
    s = d.packOutbound();
  if (s.ok())
    s = d.placeOwnRows();
  if (s.ok())
    s = d.exchangeRows();
  if (!s.ok())
    return s;
  d.stripInboundTraceBits();
  s = d.forwardOnNode();
  if (!s.ok())
    return s;
  return d.finish();
}
