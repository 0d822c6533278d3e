//===- CollectiveCalls.cpp - The C entry points of the collectives --------===//
//
// Every entry point finds the calling rank's state, opens an Op (checks that
// no rank failed, picks the tag sequence and the deadline), checks its
// arguments, runs the generic algorithm (comm/Collectives.cpp,
// comm/Dispatch.cpp) or the backend's native one, records the hops of a
// traced token and closes the Op (OpScaffold.h).
//
//===----------------------------------------------------------------------===//

#include "mfrt/comm/CommDType.h"
#include "mfrt/comm/Dispatch.h"
#include "mfrt/comm/OpScaffold.h"

using namespace mfrt::comm;

namespace {

/// A buffer of `count` elements must not be NULL (unless `count` is 0).
Status checkBuffer(const void *p, int64_t count, const char *what) {
  if (count > 0 && !p)
    return Status::error(MFRT_ERR_ARGUMENT, std::string(what) +
                                                " is NULL with count " +
                                                std::to_string(count));
  return Status::success();
}

/// A count is >= 0 and a dtype one of mfrt_dtype.
Status checkCountDtype(int64_t count, mfrt_dtype dtype) {
  if (count < 0)
    return Status::error(MFRT_ERR_ARGUMENT, "count is " +
                                                std::to_string(count) +
                                                ", but must be >= 0");
  if (dtypeSize(dtype) == 0)
    return Status::error(MFRT_ERR_ARGUMENT,
                         "unknown dtype " + std::to_string(int(dtype)));
  return Status::success();
}

/// Records the hops of a traced group op: every marked row goes to every
/// other member, or, with `block` > 0 (reduce-scatter), to the member whose
/// block of `block` elements holds it.
void traceToMembers(Op &op, int64_t block) {
  const int n = op.group->size();
  std::vector<char> to(static_cast<size_t>(n), block <= 0);
  if (block > 0)
    for (int64_t row : op.traceMarks) {
      int64_t member = row * op.traceRowElems / block;
      if (member >= 0 && member < n)
        to[size_t(member)] = 1;
    }
  for (int i = 0; i < n; ++i)
    if (to[size_t(i)] && i != op.group->index)
      op.traceHop(op.group->members[size_t(i)]);
}

/// Counts what a native collective moves as if it ran the generic (direct)
/// algorithm: `bytesTo(i)` bytes to each other member i.
template <typename F> void accountDirect(Op &op, F bytesTo) {
  for (int i = 0; i < op.group->size(); ++i)
    if (i != op.group->index)
      op.account(op.group->members[size_t(i)], bytesTo(i));
}

/// A backend's own collective, and the core's generic one.
using NativeCollective = Status (Native::*)(int64_t, const void *, void *,
                                            int64_t, mfrt_dtype,
                                            Clock::time_point, double);
using CoreCollective = Status (*)(Op &, const void *, void *, int64_t,
                                  mfrt_dtype);

/// The entry points of the buffer collectives: check the arguments, then run
/// the backend's own collective (counting `bytesTo(member)` per member) or
/// the core's over the transport.
template <typename BytesTo>
mfrt_status runCollective(const char *entry, const char *name,
                          mfrt_op_kind kind, int64_t group, const void *send,
                          void *recv, int64_t count, mfrt_dtype dtype,
                          NativeCollective native, CoreCollective core,
                          BytesTo bytesTo, bool byBlock = false) {
  RankState *st = currentRank();
  if (!st)
    return outsideLaunch(entry);
  Op op(*st, name, kind);
  Status s = beginOp(op, group, false);
  if (s.ok())
    s = checkCountDtype(count, dtype);
  if (s.ok())
    s = checkBuffer(send, count, "send");
  if (s.ok())
    s = checkBuffer(recv, count, "recv");
  if (s.ok() && st->native) {
    accountDirect(op, [&](int i) { return bytesTo(op, i); });
    s = (st->native->*native)(op.group->handle, send, recv, count, dtype,
                              op.deadline, st->timeoutS);
  } else if (s.ok()) {
    s = core(op, send, recv, count, dtype);
  }
  if (s.ok() && op.traced())
    traceToMembers(op, byBlock ? count : 0);
  return finishOp(op, s);
}

/// Opens a point-to-point op with `peer` and checks its arguments.
Status beginPeerOp(Op &op, int peer, const void *buf, int64_t count,
                   mfrt_dtype dtype) {
  op.peer = peer;
  Status s = beginOp(op, -1, true);
  if (s.ok() && (peer < 0 || peer >= op.st.size))
    s = Status::error(MFRT_ERR_ARGUMENT,
                      "peer " + std::to_string(peer) + " is not a rank (0.." +
                          std::to_string(op.st.size - 1) + ")");
  if (s.ok())
    s = checkCountDtype(count, dtype);
  if (s.ok())
    s = checkBuffer(buf, count, "buf");
  return s;
}

/// A traced ring step's message goes to the next group rank.
void traceRingNext(Op &op) {
  const int n = op.group->size();
  op.traceHop(op.group->members[size_t((op.group->index + 1) % n)]);
}

} // namespace

//===----------------------------------------------------------------------===//
// Collectives, point-to-point
//===----------------------------------------------------------------------===//

extern "C" mfrt_status mfrt_all_gather(int64_t group, const void *send,
                                       void *recv, int64_t count,
                                       mfrt_dtype dtype) {
  return runCollective(
      "mfrt_all_gather", "all_gather", MFRT_OP_ALL_GATHER, group, send, recv,
      count, dtype, &Native::allGather, &allGather,
      [&](Op &, int) { return uint64_t(count * int64_t(dtypeSize(dtype))); });
}

extern "C" mfrt_status mfrt_reduce_scatter(int64_t group, const void *send,
                                           void *recv, int64_t count,
                                           mfrt_dtype dtype) {
  return runCollective(
      "mfrt_reduce_scatter", "reduce_scatter", MFRT_OP_REDUCE_SCATTER, group,
      send, recv, count, dtype, &Native::reduceScatter, &reduceScatter,
      [&](Op &, int) { return uint64_t(count * int64_t(dtypeSize(dtype))); },
      /*byBlock=*/true);
}

extern "C" mfrt_status mfrt_all_reduce(int64_t group, const void *send,
                                       void *recv, int64_t count,
                                       mfrt_dtype dtype) {
  // Natively: reduce-scatter + all-gather of the blocks, each block to every
  // member.
  return runCollective(
      "mfrt_all_reduce", "all_reduce", MFRT_OP_ALL_REDUCE, group, send, recv,
      count, dtype, &Native::allReduce, &allReduce, [&](Op &op, int i) {
        const int n = op.group->size(), me = op.group->index;
        auto block = [&](int j) { return count * (j + 1) / n - count * j / n; };
        return uint64_t((block(i) + block(me)) * int64_t(dtypeSize(dtype)));
      });
}

extern "C" mfrt_status mfrt_kv_ring_step(int64_t group, const void *k,
                                         const void *v, void *k_out,
                                         void *v_out, int64_t count,
                                         mfrt_dtype dtype) {
  RankState *st = currentRank();
  if (!st)
    return outsideLaunch("mfrt_kv_ring_step");
  Op op(*st, "kv_ring_step", MFRT_OP_KV_RING);
  Status s = beginOp(op, group, false);
  if (s.ok())
    s = checkCountDtype(count, dtype);
  for (auto [p, what] : {std::pair<const void *, const char *>{k, "k"},
                         {v, "v"},
                         {k_out, "k_out"},
                         {v_out, "v_out"}})
    if (s.ok())
      s = checkBuffer(p, count, what);
  if (s.ok() && count > 0 &&
      (k_out == k || k_out == v || v_out == k || v_out == v))
    s = Status::error(MFRT_ERR_ARGUMENT,
                      "k_out and v_out must not be k or v (the step sends "
                      "while it receives)");
  if (s.ok())
    s = kvRingStep(op, k, v, k_out, v_out, count, dtype);
  if (s.ok() && op.traced())
    traceRingNext(op);
  return finishOp(op, s);
}

namespace {
/// One ring step of an opaque buffer, counted as `kind`.
mfrt_status ringStepBytes(const char *name, mfrt_op_kind kind, int64_t group,
                          const void *send, void *recv, int64_t bytes) {
  RankState *st = currentRank();
  if (!st)
    return outsideLaunch(name);
  Op op(*st, "ring_step", kind);
  Status s = beginOp(op, group, false);
  if (s.ok() && bytes < 0)
    s = Status::error(MFRT_ERR_ARGUMENT, "bytes is " + std::to_string(bytes) +
                                             ", but must be >= 0");
  if (s.ok())
    s = checkBuffer(send, bytes, "send");
  if (s.ok())
    s = checkBuffer(recv, bytes, "recv");
  if (s.ok() && bytes > 0 && send == recv)
    s = Status::error(MFRT_ERR_ARGUMENT,
                      "recv must not be send (the step sends while it "
                      "receives)");
  if (s.ok())
    s = ringStep(op, {ConstSpan{send, size_t(bytes)}},
                 {Span{recv, size_t(bytes)}});
  if (s.ok() && op.traced())
    traceRingNext(op);
  return finishOp(op, s);
}
} // namespace

extern "C" mfrt_status mfrt_ring_step_bytes(int64_t group, const void *send,
                                            void *recv, int64_t bytes) {
  return ringStepBytes("mfrt_ring_step_bytes", MFRT_OP_KV_RING, group, send,
                       recv, bytes);
}

extern "C" mfrt_status mfrt_q_ring_step_bytes(int64_t group, const void *send,
                                              void *recv, int64_t bytes) {
  return ringStepBytes("mfrt_q_ring_step_bytes", MFRT_OP_Q_RING, group, send,
                       recv, bytes);
}

namespace {
/// "" when `peer` is in the calling rank's pool (`samePool`) or in the
/// other one (transfers), else why not.
std::string checkPool(const RankState &st, int peer, bool samePool) {
  if (peer < 0 || peer >= st.size)
    return ""; // beginPeerOp names it
  int pool = peer < st.place.sizes[0] ? 0 : 1;
  if ((pool == st.place.pool) == samePool)
    return "";
  return "rank " + std::to_string(peer) + " is in pool " +
         std::to_string(pool) +
         (samePool ? ", not this rank's: a transfer "
                     "between pools is "
                     "mfrt_transfer_send/recv"
                   : ", this rank's own: a transfer "
                     "goes to the other pool");
}

/// mfrt_send / mfrt_transfer_send (`fn`), as `kind`.
mfrt_status sendPeer(const char *fn, mfrt_op_kind kind, int peer,
                     const void *buf, int64_t count, mfrt_dtype dtype) {
  RankState *st = currentRank();
  if (!st)
    return outsideLaunch(fn);
  Op op(*st, "send", kind);
  Status s = beginPeerOp(op, peer, buf, count, dtype);
  std::string pool = checkPool(*st, peer, kind != MFRT_OP_KV_TRANSFER);
  if (s.ok() && !pool.empty())
    s = Status::error(MFRT_ERR_ARGUMENT, pool);
  if (s.ok())
    s = sendTo(op, peer, buf, count, dtype);
  if (s.ok() && op.traced())
    op.traceHop(peer);
  return finishOp(op, s);
}

/// mfrt_recv / mfrt_transfer_recv (`fn`), as `kind`.
mfrt_status recvPeer(const char *fn, mfrt_op_kind kind, int peer, void *buf,
                     int64_t count, mfrt_dtype dtype) {
  RankState *st = currentRank();
  if (!st)
    return outsideLaunch(fn);
  Op op(*st, "recv", kind);
  Status s = beginPeerOp(op, peer, buf, count, dtype);
  std::string pool = checkPool(*st, peer, kind != MFRT_OP_KV_TRANSFER);
  if (s.ok() && !pool.empty())
    s = Status::error(MFRT_ERR_ARGUMENT, pool);
  if (s.ok())
    s = recvFrom(op, peer, buf, count, dtype);
  return finishOp(op, s);
}
} // namespace

extern "C" mfrt_status mfrt_send(int peer, const void *buf, int64_t count,
                                 mfrt_dtype dtype) {
  return sendPeer("mfrt_send", MFRT_OP_PP, peer, buf, count, dtype);
}

extern "C" mfrt_status mfrt_recv(int peer, void *buf, int64_t count,
                                 mfrt_dtype dtype) {
  return recvPeer("mfrt_recv", MFRT_OP_PP, peer, buf, count, dtype);
}

extern "C" mfrt_status mfrt_transfer_send(int peer, const void *buf,
                                          int64_t count, mfrt_dtype dtype) {
  return sendPeer("mfrt_transfer_send", MFRT_OP_KV_TRANSFER, peer, buf, count,
                  dtype);
}

extern "C" mfrt_status mfrt_transfer_recv(int peer, void *buf, int64_t count,
                                          mfrt_dtype dtype) {
  return recvPeer("mfrt_transfer_recv", MFRT_OP_KV_TRANSFER, peer, buf, count,
                  dtype);
}

extern "C" mfrt_status mfrt_gather(int64_t group, int root, const void *send,
                                   void *recv, int64_t count,
                                   mfrt_dtype dtype) {
  RankState *st = currentRank();
  if (!st)
    return outsideLaunch("mfrt_gather");
  Op op(*st, "gather", MFRT_OP_GATHER);
  Status s = beginOp(op, group, false);
  if (s.ok() && (root < 0 || root >= op.group->size()))
    s = Status::error(MFRT_ERR_ARGUMENT,
                      "root " + std::to_string(root) +
                          " is not a group rank (0.." +
                          std::to_string(op.group->size() - 1) + ")");
  if (s.ok())
    s = checkCountDtype(count, dtype);
  if (s.ok())
    s = checkBuffer(send, count, "send");
  if (s.ok() && root == op.group->index)
    s = checkBuffer(recv, count, "recv (on the root)");
  if (s.ok())
    s = gather(op, root, send, recv, count, dtype);
  if (s.ok() && op.traced())
    op.traceHop(op.group->members[size_t(root)]);
  return finishOp(op, s);
}

extern "C" mfrt_status mfrt_barrier(int64_t group) {
  RankState *st = currentRank();
  if (!st)
    return outsideLaunch("mfrt_barrier");
  Op op(*st, "barrier", MFRT_OP_BARRIER);
  Status s = beginOp(op, group, false);
  if (s.ok())
    s = barrier(op);
  return finishOp(op, s);
}

//===----------------------------------------------------------------------===//
// MoE dispatch / combine
//===----------------------------------------------------------------------===//

extern "C" mfrt_status
mfrt_dispatch_tokens(int64_t group, mfrt_dispatch_mode mode, const void *x,
                     int64_t n_tokens, int64_t hidden, mfrt_dtype dtype,
                     const int64_t *experts, const float *weights, int64_t k,
                     int64_t n_experts, mfrt_dispatch **h) {
  return mfrt_dispatch_tokens_placed(group, mode, x, n_tokens, hidden, dtype,
                                     experts, weights, k, n_experts, nullptr, 0,
                                     h);
}

extern "C" mfrt_status mfrt_dispatch_tokens_placed(
    int64_t group, mfrt_dispatch_mode mode, const void *x, int64_t n_tokens,
    int64_t hidden, mfrt_dtype dtype, const int64_t *experts,
    const float *weights, int64_t k, int64_t n_experts,
    const int64_t *placement, int64_t n_slots, mfrt_dispatch **h) {
  RankState *st = currentRank();
  if (!st)
    return outsideLaunch("mfrt_dispatch_tokens");
  if (h)
    *h = nullptr;
  Op op(*st, "dispatch", MFRT_OP_DISPATCH);
  Status s = beginOp(op, group, false);
  auto bad = [&](const std::string &what) {
    s = Status::error(MFRT_ERR_ARGUMENT, what);
  };
  if (s.ok()) {
    if (!h)
      bad("the handle pointer is NULL");
    else if (mode != MFRT_DISPATCH_FLAT && mode != MFRT_DISPATCH_HIERARCHICAL)
      bad("unknown dispatch mode " + std::to_string(int(mode)));
    else if (n_tokens < 0 || hidden < 1 || k < 0)
      bad("n_tokens (" + std::to_string(n_tokens) + ") and k (" +
          std::to_string(k) + ") must be >= 0 and hidden (" +
          std::to_string(hidden) + ") >= 1");
    else if (dtypeSize(dtype) == 0)
      bad("unknown dtype " + std::to_string(int(dtype)));
    else if (n_experts >= kTraceBit)
      bad("n_experts=" + std::to_string(n_experts) + " is over the " +
          std::to_string(kTraceBit - 1) + " the routing metadata holds");
    else if (n_experts < 1)
      bad("n_experts=" + std::to_string(n_experts) + " must be >= 1");
    else if (n_tokens > 0 && !x)
      bad("x is NULL");
    else if (n_tokens * k > 0 && (!experts || !weights))
      bad("experts or weights is NULL");
    else if (placement && (n_slots < n_experts || n_slots >= kTraceBit))
      bad("a placement of n_experts=" + std::to_string(n_experts) +
          " experts needs at least as many slots, got " +
          std::to_string(n_slots));
  }
  auto handle = std::make_unique<mfrt_dispatch>();
  if (s.ok()) {
    handle->st = st;
    handle->groupHandle = group;
    handle->mode = mode;
    handle->dtype = dtype;
    handle->hidden = hidden;
    handle->nTokens = n_tokens;
    handle->k = k;
    handle->nExperts = n_experts;
    handle->rowBytes = size_t(hidden) * dtypeSize(dtype);
    s = dispatchTokens(
        op, *handle, x, experts, weights,
        std::vector<int64_t>(placement, placement + (placement ? n_slots : 0)));
  }
  mfrt_status code = finishOp(op, s);
  if (code == MFRT_OK)
    *h = handle.release();
  return code;
}

extern "C" int64_t mfrt_dispatch_count(const mfrt_dispatch *h) {
  return h ? h->count : 0;
}

extern "C" const void *mfrt_dispatch_rows(const mfrt_dispatch *h) {
  return h ? h->rows : nullptr;
}

extern "C" const int64_t *mfrt_dispatch_experts(const mfrt_dispatch *h) {
  return h ? h->experts.data() : nullptr;
}

extern "C" mfrt_status mfrt_combine_tokens(mfrt_dispatch *h, const void *out,
                                           void *y) {
  RankState *st = currentRank();
  if (!st) {
    delete h;
    return outsideLaunch("mfrt_combine_tokens");
  }
  std::unique_ptr<mfrt_dispatch> owned(h);
  Op op(*st, "combine", MFRT_OP_COMBINE);
  Status s;
  if (!h) {
    s = Status::error(MFRT_ERR_ARGUMENT, "the dispatch handle is NULL");
  } else if (h->st != st) {
    s = Status::error(MFRT_ERR_ARGUMENT,
                      "the dispatch handle belongs to another rank");
  } else {
    s = beginOp(op, h->groupHandle, false);
    if (s.ok() && h->count > 0 && !out)
      s = Status::error(MFRT_ERR_ARGUMENT, "out is NULL with " +
                                               std::to_string(h->count) +
                                               " rows");
    if (s.ok() && h->nTokens > 0 && !y)
      s = Status::error(MFRT_ERR_ARGUMENT, "y is NULL");
    if (s.ok())
      s = combineTokens(op, *h, out, y);
  }
  return finishOp(op, s);
}
