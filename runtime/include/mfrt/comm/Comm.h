//===- Comm.h - Internal interfaces of the comm runtime ---------*- C++ -*-===//
//
// The collectives of mfrt.h are written once (Collectives.cpp, Dispatch.cpp,
// Combine.cpp) on top of three small interfaces that a backend implements:
//
//  - Transport: tagged, non-blocking send / receive of bytes between global
//    ranks, a wait with a deadline, and a failure signal that reaches every
//    rank (the abort that turns a failure on one rank into MFRT_ERR_PEER on
//    all others instead of a hang).
//  - Compute: the local arithmetic of the collectives (row gathers and
//    fp32-accumulated weighted sums) on the memory the transport moves: host
//    memory for `local` and `mpi`, device memory for `nccl`.
//  - Native (optional): a backend's own all-gather / reduce-scatter /
//    all-reduce (NCCL); the generic algorithms are used where it has none.
//
// Byte accounting is done above the transport, on every message, by
// MeshLayout link class (Op.cpp), so every backend reports the same
// figures for the same program.
//
// `local` lives in libmfrt itself; `mpi` and `nccl` are plugins
// (libmfrt_mpi.so, libmfrt_nccl.so) that mfrt_launch loads with dlopen, so an
// emitted executable links only libmfrt.a and still runs every backend. A
// plugin exports `mfrt_comm_plugin_create` (see PluginCreateFn).
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_COMM_COMM_H
#define MFRT_COMM_COMM_H

#include "mfrt/mfrt.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace mfrt::comm {

using Clock = std::chrono::steady_clock;

/// A message tag: [channel:8][sequence:19][phase:4], 31 bits (so it is a
/// valid MPI tag). The channel is a group handle (or kP2PChannel), the
/// sequence counts the group's collectives (it wraps, which is harmless:
/// matching is FIFO per sender and tag), the phase numbers the message rounds
/// of one collective.
using Tag = uint32_t;
constexpr unsigned kMaxGroups = 254;
constexpr unsigned kP2PChannel = 254;
/// The channel of a backend's own start-up messages (nccl's unique id).
constexpr unsigned kBootstrapChannel = 255;

/// The deadline `seconds` from now. Longer than ~31 years (1e9 s, also inf)
/// means forever: clamped so that now + duration cannot overflow the clock's
/// int64 nanoseconds (past ~9.2e9 s the deadline would wrap into the past).
inline Clock::time_point deadlineAfter(double seconds) {
  constexpr double kForeverS = 1e9;
  if (!(seconds < kForeverS)) // also NaN and inf
    seconds = kForeverS;
  if (seconds < 0)
    seconds = 0;
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}

inline Tag makeTag(unsigned channel, uint32_t seq, unsigned phase) {
  return (Tag(channel & 0xffu) << 23) | (Tag(seq & 0x7ffffu) << 4) |
         Tag(phase & 0xfu);
}

/// A piece of a message. `host` marks host memory where the transport moves
/// device memory (nccl: metadata and counts travel on the host); host
/// transports ignore it. Sender and receiver split a message differently, but
/// agree on its total and on its host / device bytes.
struct Span {
  void *data;
  size_t bytes;
  bool host = false;
};
struct ConstSpan {
  const void *data;
  size_t bytes;
  bool host = false;
};

/// A rank's failure, as every rank learns it.
struct FailureRecord {
  int rank = -1;
  mfrt_status status = MFRT_OK;
  /// What went wrong, without the "mfrt: rank R: " prefix, e.g.
  /// "all_gather on group tp{4,5}: timed out after 2.0 s waiting for rank 4".
  std::string detail;
  bool failed() const { return status != MFRT_OK; }
};

/// Of two ranks' failures, is `a` the better one to report as the cause? A
/// timeout is usually a consequence, so other failures win; then the lower
/// rank.
inline bool preferRoot(const FailureRecord &a, const FailureRecord &b) {
  bool aTimeout = a.status == MFRT_ERR_TIMEOUT;
  bool bTimeout = b.status == MFRT_ERR_TIMEOUT;
  if (aTimeout != bTimeout)
    return !aTimeout;
  return a.rank < b.rank;
}

/// Result of a transport / compute / collective step.
struct Status {
  mfrt_status code = MFRT_OK;
  /// The error, without rank / op / group (the caller adds those).
  std::string detail;
  /// For MFRT_ERR_PEER: the failure that aborted the world.
  FailureRecord cause;

  bool ok() const { return code == MFRT_OK; }
  static Status success() { return {}; }
  static Status error(mfrt_status code, std::string detail) {
    Status s;
    s.code = code;
    s.detail = std::move(detail);
    return s;
  }
  static Status peer(FailureRecord cause) {
    Status s;
    s.code = MFRT_ERR_PEER;
    s.cause = std::move(cause);
    return s;
  }
};

/// A pending send or receive; owned by its transport and released by the
/// waitAll that it is passed to (each request goes to exactly one waitAll).
class Request {
public:
  virtual ~Request() = default;
};

/// Moves bytes between the global ranks of one launch.
class Transport {
public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// Starts sending the concatenation of `parts` to `peer` with `tag`. The
  /// parts must stay valid until the request completes. Messages between one
  /// sender and receiver with one tag are received in the order sent.
  virtual Request *isend(int peer, Tag tag, const ConstSpan *parts,
                         size_t numParts) = 0;
  /// Sends a copy of the concatenation of `parts`: returns once the data is
  /// copied out, and the message completes on its own (mfrt_send). A device
  /// transport may instead return when the message was received.
  virtual Status sendBuffered(int peer, Tag tag, const ConstSpan *parts,
                              size_t numParts, Clock::time_point deadline,
                              double timeoutS) = 0;
  /// Starts receiving a message from `peer` with `tag` into `parts`; its size
  /// must be the parts' total (a mismatch is an error).
  virtual Request *irecv(int peer, Tag tag, const Span *parts,
                         size_t numParts) = 0;
  /// Waits for all requests. Fails with MFRT_ERR_TIMEOUT at the deadline
  /// (naming the peers still outstanding, with `timeoutS` in the text), with
  /// MFRT_ERR_PEER when another rank signalled a failure, or with another
  /// error. The requests are released (cancelled if not complete) in every
  /// case.
  virtual Status waitAll(Request *const *requests, size_t numRequests,
                         Clock::time_point deadline, double timeoutS) = 0;
  /// Tells every rank that `record` failed; their waits end with
  /// MFRT_ERR_PEER. Best effort and non-blocking.
  virtual void raiseFailure(const FailureRecord &record) = 0;
  /// True (and the record) once some rank's failure reached this rank.
  virtual bool failureSeen(FailureRecord &record) = 0;
  /// The process exits at once after a failure: deliver what is queued (the
  /// failure notices) first, within a short bound.
  virtual void beforeExit() {}
};

/// The transport of a backend whose ranks are processes (mpi, tcp): it also
/// knows the process's place on its node and agrees on the launch's end. The
/// nccl backend moves its host messages and its bootstrap over one.
class HostTransport : public Transport {
public:
  /// This process's index among the ranks on its node (its GPU).
  virtual int localRank() const = 0;
  /// The launch's outcome: every rank sends its record to every other one
  /// (bounded by the timeout); the best root failure wins (preferRoot).
  virtual FailureRecord finish(const FailureRecord &mine, double timeoutS) = 0;
  /// Releases the transport. After a failure it does not wait on the peers
  /// beyond a short bound, so the process can exit non-zero.
  virtual void shutdown(bool success) = 0;
};

/// One term of a weighted sum: weight * row `row` of buffer `buf`.
struct Term {
  int32_t buf;
  int64_t row;
  float weight;
};

/// Local arithmetic on the memory the transport moves.
class Compute {
public:
  virtual ~Compute() = default;
  /// True for host memory: messages may then be sent as many small parts
  /// (rows straight from the caller's buffers) instead of packed first.
  virtual bool hostMemory() const { return true; }
  /// Allocates / frees memory of the transport's kind (nullptr on failure).
  virtual void *alloc(size_t bytes) = 0;
  virtual void release(void *ptr) = 0;
  virtual Status copy(void *dst, const void *src, size_t bytes) = 0;
  /// Copies `bytes` from `src` (this memory kind, or host) to host `dst`.
  virtual Status copyToHost(void *dst, const void *src, size_t bytes) = 0;
  /// dst row i = src row rows[i] (rows of rowBytes; `rows` is host memory).
  virtual Status gatherRows(void *dst, const void *src, const int64_t *rows,
                            int64_t numRows, size_t rowBytes) = 0;
  /// For each output row i: dst row i = round(sum over the terms
  /// [termBegin[i], termBegin[i+1]) in order of weight * bufs[buf] row),
  /// accumulated in f32 starting from 0 and rounded once to `dtype`. Rows have
  /// `width` elements. `termBegin` and `terms` are host memory. Destination
  /// row i may alias a source row of output row i only (as in an in-place
  /// reduce). Zero terms give a zero row.
  virtual Status weightedSum(void *dst, int64_t numRows,
                             const int64_t *termBegin, const Term *terms,
                             const void *const *bufs, int numBufs,
                             int64_t width, mfrt_dtype dtype) = 0;
  /// Waits for the work queued so far (device backends).
  virtual Status sync(Clock::time_point deadline, double timeoutS) {
    return Status::success();
  }
};

/// A backend's own collectives over groups (nccl). The core still checks the
/// arguments, names the op in errors and counts bytes.
class Native {
public:
  virtual ~Native() = default;
  /// Called on every rank when mfrt_group creates a group (collective).
  virtual Status createGroup(int64_t handle, const std::vector<int> &members,
                             int index) = 0;
  virtual Status allGather(int64_t group, const void *send, void *recv,
                           int64_t count, mfrt_dtype dtype,
                           Clock::time_point deadline, double timeoutS) = 0;
  virtual Status reduceScatter(int64_t group, const void *send, void *recv,
                               int64_t count, mfrt_dtype dtype,
                               Clock::time_point deadline, double timeoutS) = 0;
  virtual Status allReduce(int64_t group, const void *send, void *recv,
                           int64_t count, mfrt_dtype dtype,
                           Clock::time_point deadline, double timeoutS) = 0;
};

/// What a plugin backend (mpi, nccl) gives the core for one process.
class PluginBackend {
public:
  virtual ~PluginBackend() = default;
  virtual Transport &transport() = 0;
  /// nullptr: host memory (the core's host Compute).
  virtual Compute *compute() { return nullptr; }
  virtual Native *native() { return nullptr; }
  /// The host transport of a backend of processes (mpi), which the nccl
  /// backend can run its host messages over; nullptr otherwise.
  virtual HostTransport *hostTransport() { return nullptr; }
  /// The launch's outcome, agreed by all ranks after fn returned on each
  /// (collective, bounded by the timeout): the root failure of any rank, or
  /// a record with MFRT_OK.
  virtual FailureRecord finish(const FailureRecord &mine, double timeoutS) = 0;
  /// Releases the backend's resources (MPI_Finalize after a success if the
  /// plugin initialized MPI; after a failure MPI is left as it is, so that
  /// the process exits non-zero without hanging in MPI_Finalize).
  virtual void shutdown(bool success) = 0;
};

/// A backend that is its host transport (mpi, tcp): host memory, the core's
/// algorithms.
class HostBackend final : public PluginBackend {
public:
  explicit HostBackend(std::unique_ptr<HostTransport> t) : t(std::move(t)) {}
  Transport &transport() override { return *t; }
  HostTransport *hostTransport() override { return t.get(); }
  FailureRecord finish(const FailureRecord &mine, double timeoutS) override {
    return t->finish(mine, timeoutS);
  }
  void shutdown(bool success) override { t->shutdown(success); }

private:
  std::unique_ptr<HostTransport> t;
};

/// Version of this interface; a plugin built from another tree is refused.
constexpr int kPluginAbiVersion = 3;

class Device;

struct PluginRequest {
  int abiVersion = kPluginAbiVersion;
  mfrt_backend backend = MFRT_BACKEND_MPI;
  /// The plan's devices (the world size must match; the core checks).
  int64_t devices = 0;
  double timeoutS = 60;
  /// The program's device (Device.h), nullptr for a host program. A plugin
  /// that drives the device itself (nccl) attaches this process's rank to it
  /// and uses the rank's stream; otherwise the core attaches it.
  Device *device = nullptr;
  /// nccl: the host transport made by the core (tcp after a rendezvous, or
  /// the mpi plugin's under mpirun). The core keeps it alive until the
  /// backend is destroyed; the backend's finish and shutdown end it (once).
  HostTransport *host = nullptr;
};

/// `extern "C" PluginBackend *mfrt_comm_plugin_create(const PluginRequest *,
/// std::string *error)`: nullptr (and *error) on failure.
using PluginCreateFn = PluginBackend *(*)(const PluginRequest *, std::string *);
constexpr const char *kPluginCreateSymbol = "mfrt_comm_plugin_create";

/// "timed out after 2.0 s waiting for rank 4" / "... for ranks 4, 6" (at
/// most 8 ranks named).
inline std::string timeoutDetail(double timeoutS,
                                 const std::vector<int> &peers) {
  char secs[32];
  std::snprintf(secs, sizeof(secs), timeoutS < 1e6 ? "%.1f" : "%.3g", timeoutS);
  std::string out = std::string("timed out after ") + secs + " s";
  if (peers.empty())
    return out;
  out += peers.size() == 1 ? " waiting for rank " : " waiting for ranks ";
  for (size_t i = 0; i < peers.size() && i < 8; ++i)
    out += (i ? ", " : "") + std::to_string(peers[i]);
  if (peers.size() > 8)
    out += " and " + std::to_string(peers.size() - 8) + " more";
  return out;
}

/// A wait's timeout: MFRT_ERR_TIMEOUT naming the peers of its outstanding
/// receives, else of its outstanding sends (`reqs`: pointers to requests
/// with `done`, `isSend` and `peer`).
template <typename Requests>
Status waitTimedOut(const Requests &reqs, double timeoutS) {
  std::set<int> recvPeers, sendPeers;
  for (const auto &r : reqs)
    if (!r->done)
      (r->isSend ? sendPeers : recvPeers).insert(r->peer);
  const std::set<int> &stuck = recvPeers.empty() ? sendPeers : recvPeers;
  return Status::error(
      MFRT_ERR_TIMEOUT,
      timeoutDetail(timeoutS, std::vector<int>(stuck.begin(), stuck.end())));
}

/// The loop of a transport's waitAll: until `allDone()` (which may advance
/// the transport), a failure reaches this rank, or the deadline, with
/// `idle()` between the rounds.
template <typename Requests, typename AllDone, typename Idle>
Status waitLoop(Transport &transport, const Requests &reqs, AllDone allDone,
                Idle idle, Clock::time_point deadline, double timeoutS) {
  while (true) {
    if (allDone())
      return Status::success();
    FailureRecord record;
    if (transport.failureSeen(record))
      return Status::peer(record);
    if (Clock::now() >= deadline)
      return waitTimedOut(reqs, timeoutS);
    idle();
  }
}

/// Sleeps a little more on each call, for polling loops: spins, then
/// yields, then naps of up to 1 ms (so oversubscribed runs stay usable).
inline void backoff(int &spins) {
  ++spins;
  if (spins < 32)
    return;
  if (spins < 256) {
    sched_yield();
    return;
  }
  usleep(useconds_t(std::min(1000, 10 * (spins - 255))));
}

/// The host-memory Compute (local, mpi and tcp backends).
std::unique_ptr<Compute> createHostCompute();

} // namespace mfrt::comm

#endif // MFRT_COMM_COMM_H
