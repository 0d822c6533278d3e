//===- Collectives.cpp - Generic collectives over a Transport -------------===//
//
// Direct algorithms: every member exchanges its blocks with every other
// member in one round (groups are small: TP, CP, PP pairs, a 16-rank EP
// group), so a rank sends (n-1) blocks and the accounting attributes each
// block to the link class of its actual destination. Reductions sum in group
// rank order in f32 (Compute::weightedSum), so every member computes the
// same bits and an all-reduce leaves identical buffers everywhere.
//
//===----------------------------------------------------------------------===//

#include "mfrt/comm/CommDType.h"
#include "mfrt/comm/CommRuntime.h"

#include <algorithm>

using namespace mfrt::comm;

namespace {

const char *cptr(const void *p, size_t offset) {
  return static_cast<const char *>(p) + offset;
}
char *mptr(void *p, size_t offset) { return static_cast<char *>(p) + offset; }

Status allocError(size_t bytes) {
  return Status::error(MFRT_ERR_BACKEND, "cannot allocate " +
                                             std::to_string(bytes) +
                                             " bytes of scratch memory");
}

} // namespace

Status mfrt::comm::allGather(Op &op, const void *send, void *recv,
                             int64_t count, mfrt_dtype dtype) {
  const Group &g = *op.group;
  const size_t bytes = size_t(count) * dtypeSize(dtype);
  const int me = g.index;
  if (bytes) {
    Status s = op.st.compute.copy(mptr(recv, size_t(me) * bytes), send, bytes);
    if (!s.ok())
      return s;
  }
  Phase phase(op, 0);
  for (int i = 0; i < g.size(); ++i) {
    if (i == me)
      continue;
    phase.send(g.members[size_t(i)], {ConstSpan{send, bytes}});
    phase.recv(g.members[size_t(i)],
               {Span{mptr(recv, size_t(i) * bytes), bytes}});
  }
  return phase.wait();
}

/// Receives block `me` of every other member's `send` (blocks of `blockOf(i)`
/// elements at `offsetOf(i)`) and sums all members' blocks into `dst` in
/// group rank order.
template <typename Off, typename Len>
static Status reduceBlocks(Op &op, unsigned phaseId, const void *send,
                           void *dst, mfrt_dtype dtype, Off offsetOf,
                           Len blockOf) {
  const Group &g = *op.group;
  const int n = g.size(), me = g.index;
  const size_t elem = dtypeSize(dtype);
  const size_t myBytes = size_t(blockOf(me)) * elem;
  Buffer scratch(op.st.compute);
  if (!scratch.allocate(myBytes * size_t(n - 1)))
    return allocError(myBytes * size_t(n - 1));
  {
    Phase phase(op, phaseId);
    for (int i = 0, slot = 0; i < n; ++i) {
      if (i == me)
        continue;
      phase.send(g.members[size_t(i)],
                 {ConstSpan{cptr(send, size_t(offsetOf(i)) * elem),
                            size_t(blockOf(i)) * elem}});
      phase.recv(g.members[size_t(i)],
                 {Span{scratch.data() + size_t(slot++) * myBytes, myBytes}});
    }
    Status s = phase.wait();
    if (!s.ok())
      return s;
  }
  std::vector<const void *> bufs;
  std::vector<Term> terms;
  for (int i = 0, slot = 0; i < n; ++i) {
    if (i == me)
      bufs.push_back(cptr(send, size_t(offsetOf(me)) * elem));
    else
      bufs.push_back(scratch.data() + size_t(slot++) * myBytes);
    terms.push_back(Term{int32_t(i), 0, 1.0f});
  }
  const int64_t termBegin[2] = {0, int64_t(n)};
  return op.st.compute.weightedSum(dst, 1, termBegin, terms.data(), bufs.data(),
                                   n, blockOf(me), dtype);
}

Status mfrt::comm::reduceScatter(Op &op, const void *send, void *recv,
                                 int64_t count, mfrt_dtype dtype) {
  return reduceBlocks(
      op, 0, send, recv, dtype, [&](int i) { return int64_t(i) * count; },
      [&](int) { return count; });
}

Status mfrt::comm::allReduce(Op &op, const void *send, void *recv,
                             int64_t count, mfrt_dtype dtype) {
  const Group &g = *op.group;
  const int n = g.size(), me = g.index;
  const size_t elem = dtypeSize(dtype);
  // Block i: elements [count*i/n, count*(i+1)/n).
  auto offsetOf = [&](int i) { return count * i / n; };
  auto blockOf = [&](int i) { return count * (i + 1) / n - count * i / n; };
  Status s = reduceBlocks(op, 0, send, mptr(recv, size_t(offsetOf(me)) * elem),
                          dtype, offsetOf, blockOf);
  if (!s.ok())
    return s;
  Phase phase(op, 1);
  const ConstSpan mine{cptr(recv, size_t(offsetOf(me)) * elem),
                       size_t(blockOf(me)) * elem};
  for (int i = 0; i < n; ++i) {
    if (i == me)
      continue;
    phase.send(g.members[size_t(i)], {mine});
    phase.recv(g.members[size_t(i)],
               {Span{mptr(recv, size_t(offsetOf(i)) * elem),
                     size_t(blockOf(i)) * elem}});
  }
  return phase.wait();
}

Status mfrt::comm::kvRingStep(Op &op, const void *k, const void *v, void *kOut,
                              void *vOut, int64_t count, mfrt_dtype dtype) {
  const size_t bytes = size_t(count) * dtypeSize(dtype);
  return ringStep(op, {ConstSpan{k, bytes}, ConstSpan{v, bytes}},
                  {Span{kOut, bytes}, Span{vOut, bytes}});
}

Status mfrt::comm::ringStep(Op &op, const std::vector<ConstSpan> &send,
                            const std::vector<Span> &recv) {
  const Group &g = *op.group;
  const int n = g.size(), me = g.index;
  if (n == 1) {
    // To itself: copy the parts across (they do not overlap).
    size_t si = 0, soff = 0;
    for (const Span &dst : recv) {
      for (size_t done = 0; done < dst.bytes;) {
        if (si >= send.size())
          return Status::error(MFRT_ERR_ARGUMENT, "ring step size mismatch");
        const size_t len = std::min(dst.bytes - done, send[si].bytes - soff);
        Status s = op.st.compute.copy(mptr(dst.data, done),
                                      cptr(send[si].data, soff), len);
        if (!s.ok())
          return s;
        done += len;
        soff += len;
        if (soff == send[si].bytes) {
          ++si;
          soff = 0;
        }
      }
    }
    return Status::success();
  }
  Phase phase(op, 0);
  phase.send(g.members[size_t((me + 1) % n)], send.data(), send.size());
  phase.recv(g.members[size_t((me - 1 + n) % n)], recv.data(), recv.size());
  return phase.wait();
}

Status mfrt::comm::sendTo(Op &op, int peer, const void *buf, int64_t count,
                          mfrt_dtype dtype) {
  const size_t bytes = size_t(count) * dtypeSize(dtype);
  op.seq = op.st.sendSeq[size_t(peer)]++;
  op.account(peer, bytes);
  const ConstSpan part{buf, bytes};
  return op.st.transport.sendBuffered(peer, op.tag(0), &part, 1, op.deadline,
                                      op.st.timeoutS);
}

Status mfrt::comm::recvFrom(Op &op, int peer, void *buf, int64_t count,
                            mfrt_dtype dtype) {
  const size_t bytes = size_t(count) * dtypeSize(dtype);
  op.seq = op.st.recvSeq[size_t(peer)]++;
  Phase phase(op, 0);
  phase.recv(peer, {Span{buf, bytes}});
  return phase.wait();
}

Status mfrt::comm::gather(Op &op, int root, const void *send, void *recv,
                          int64_t count, mfrt_dtype dtype) {
  const Group &g = *op.group;
  const size_t bytes = size_t(count) * dtypeSize(dtype);
  const int me = g.index;
  Phase phase(op, 0);
  if (me != root) {
    phase.send(g.members[size_t(root)], {ConstSpan{send, bytes}});
    return phase.wait();
  }
  if (bytes) {
    Status s = op.st.compute.copy(mptr(recv, size_t(me) * bytes), send, bytes);
    if (!s.ok())
      return s;
  }
  for (int i = 0; i < g.size(); ++i)
    if (i != me)
      phase.recv(g.members[size_t(i)],
                 {Span{mptr(recv, size_t(i) * bytes), bytes}});
  return phase.wait();
}

Status mfrt::comm::barrier(Op &op) {
  // Dissemination: in round r, signal member +2^r and hear from -2^r.
  const Group &g = *op.group;
  const int n = g.size(), me = g.index;
  unsigned round = 0;
  for (int dist = 1; dist < n; dist *= 2, ++round) {
    Phase phase(op, round);
    phase.send(g.members[size_t((me + dist) % n)], {ConstSpan{nullptr, 0}});
    phase.recv(g.members[size_t((me - dist + n) % n)], {Span{nullptr, 0}});
    Status s = phase.wait();
    if (!s.ok())
      return s;
  }
  return Status::success();
}
