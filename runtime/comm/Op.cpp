//===- Op.cpp - The calling rank, its last error and the Op scope ---------===//
//
// The core under every C entry point: the thread-local rank state and last
// error, the Op (where an op runs, its byte accounting by MeshLayout link
// class and layer, its trace hops), the Phase that posts and waits for one
// round of its messages, and the opening and closing of an Op: on failure it
// writes "mfrt: rank R: <op> on group <g>: <what>" to the thread's last error
// and, for a failure of its own, tells every other rank.
//
//===----------------------------------------------------------------------===//

#include "mfrt/comm/Device.h"
#include "mfrt/comm/OpScaffold.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

using namespace mfrt::comm;
using meshfold::LinkClass;

namespace {

thread_local RankState *tlsRank = nullptr;
thread_local std::string tlsError;

/// Token tracing: on/off and the hops every rank of this process recorded.
std::atomic<bool> gTracing{false};
std::mutex gTraceMutex;
std::vector<mfrt_trace_hop> gTraceHops;

} // namespace

//===----------------------------------------------------------------------===//
// Rank state, last error
//===----------------------------------------------------------------------===//

RankState *mfrt::comm::currentRank() { return tlsRank; }

void mfrt::comm::setCurrentRank(RankState *st) { tlsRank = st; }

const std::string &mfrt::comm::lastError() { return tlsError; }

mfrt_status mfrt::comm::setError(mfrt_status code, const std::string &msg) {
  tlsError = msg;
  return code;
}

void mfrt::comm::clearError() { tlsError.clear(); }

mfrt_status mfrt::comm::outsideLaunch(const char *fn) {
  return setError(MFRT_ERR_STATE,
                  std::string("mfrt: ") + fn + " called outside mfrt_launch");
}

//===----------------------------------------------------------------------===//
// Token tracing
//===----------------------------------------------------------------------===//

bool mfrt::comm::tracing() { return gTracing.load(std::memory_order_relaxed); }

void mfrt::comm::setTracing(bool on) { gTracing = on; }

int64_t mfrt::comm::traceHops(mfrt_trace_hop *out, int64_t max) {
  std::lock_guard<std::mutex> lock(gTraceMutex);
  for (int64_t i = 0; out && i < max && i < int64_t(gTraceHops.size()); ++i)
    out[i] = gTraceHops[size_t(i)];
  return int64_t(gTraceHops.size());
}

void mfrt::comm::clearTraceHops() {
  std::lock_guard<std::mutex> lock(gTraceMutex);
  gTraceHops.clear();
}

namespace {
void recordTraceHop(const Op &op, int to) {
  if (!tracing())
    return;
  std::lock_guard<std::mutex> lock(gTraceMutex);
  gTraceHops.push_back(mfrt_trace_hop{op.traceLayer, op.traceOp,
                                      int32_t(op.kind), int32_t(op.st.rank),
                                      int32_t(to)});
}
} // namespace

//===----------------------------------------------------------------------===//
// Op, Phase
//===----------------------------------------------------------------------===//

std::string Op::where() const {
  std::string out = name;
  if (group)
    return out + " on group " + group->name;
  if (peer >= 0)
    return out +
           (std::strcmp(name, "send") == 0 ? " to rank " : " from rank ") +
           std::to_string(peer);
  return out;
}

void Op::account(int to, uint64_t bytes) {
  LinkClass link = st.layout.link(st.rank, to);
  if (link == LinkClass::Self)
    return;
  int l = link == LinkClass::NVLink ? MFRT_LINK_NVLINK : MFRT_LINK_IB;
  st.bytes[kind][l][st.layerSlot()] += bytes;
}

void Op::traceHop(int to) const {
  if (to != st.rank)
    recordTraceHop(*this, to);
}

void Op::traceStay() const { recordTraceHop(*this, st.rank); }

Phase::~Phase() {
  if (!requests.empty())
    (void)op.st.transport.waitAll(requests.data(), requests.size(),
                                  Clock::now(), op.st.timeoutS);
}

void Phase::send(int peer, const ConstSpan *parts, size_t numParts) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < numParts; ++i)
    bytes += parts[i].bytes;
  op.account(peer, bytes);
  requests.push_back(
      op.st.transport.isend(peer, op.tag(phase), parts, numParts));
}

void Phase::recv(int peer, const Span *parts, size_t numParts) {
  requests.push_back(
      op.st.transport.irecv(peer, op.tag(phase), parts, numParts));
}

Status Phase::wait() {
  if (!op.st.faultExitOp.empty() && op.st.faultExitOp == op.name) {
    std::fprintf(stderr,
                 "mfrt: rank %d: fault injection (MFRT_FAULT_EXIT): exiting "
                 "with status 3 inside %s\n",
                 op.st.rank, op.where().c_str());
    std::fflush(stderr);
    _exit(3);
  }
  Status s = op.st.transport.waitAll(requests.data(), requests.size(),
                                     op.deadline, op.st.timeoutS);
  requests.clear();
  return s;
}

//===----------------------------------------------------------------------===//
// Opening and closing an op
//===----------------------------------------------------------------------===//

namespace {
/// CUDA mode: the kernels queued on the rank's stream finish before a
/// collective reads or writes their buffers.
Status syncDevice() {
  Device *device = activeDevice();
  if (!device || !device->attached())
    return Status::success();
  return device->synchronize();
}
} // namespace

Status mfrt::comm::beginOp(Op &op, int64_t groupHandle, bool p2p) {
  RankState &st = op.st;
  // The trace key and marks first: every call takes them, failed or not.
  op.traceLayer = st.traceLayer;
  // A transfer between pools is none of the pool's program ops: the ranks
  // of a pool send different numbers of them, and their ops keep one key.
  op.traceOp = op.kind == MFRT_OP_KV_TRANSFER ? 0 : st.traceOp++;
  op.traceMarks.swap(st.traceMarks);
  st.traceMarks.clear();
  op.traceRowElems = st.traceRowElems;
  // The group first, so that every error below names it.
  if (!p2p)
    op.group = st.group(groupHandle);
  if (st.failure.failed())
    return Status::error(MFRT_ERR_STATE, "this rank already failed (" +
                                             st.failure.detail + ")");
  FailureRecord seen;
  if (st.transport.failureSeen(seen))
    return Status::peer(seen);
  op.deadline = deadlineAfter(st.timeoutS);
  if (p2p) {
    op.channel = kP2PChannel;
    return syncDevice();
  }
  if (!op.group)
    return Status::error(MFRT_ERR_ARGUMENT,
                         "no group with handle " + std::to_string(groupHandle) +
                             " (make groups with mfrt_group)");
  op.channel = unsigned(op.group->handle);
  op.seq = op.group->seq++;
  return syncDevice();
}

mfrt_status mfrt::comm::finishOp(Op &op, const Status &s) {
  if (s.ok())
    return MFRT_OK;
  RankState &st = op.st;
  std::string detail = op.where() + ": ";
  if (s.code == MFRT_ERR_PEER)
    detail +=
        "rank " + std::to_string(s.cause.rank) + " failed: " + s.cause.detail;
  else
    detail += s.detail;
  tlsError = "mfrt: rank " + std::to_string(st.rank) + ": " + detail;
  if (s.code != MFRT_ERR_PEER && s.code != MFRT_ERR_STATE &&
      !st.failure.failed()) {
    st.failure = FailureRecord{st.rank, s.code, detail};
    st.transport.raiseFailure(st.failure);
  }
  return s.code;
}
