//===- CommRuntime.h - Per-rank state of the communication core -*- C++ -*-===//
//
// Internal to libmfrt: the state of the calling rank (groups, counters, its
// transport), the Op scope every collective runs in (error text, deadline,
// tags, byte accounting) and the generic algorithms.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_COMM_COMMRUNTIME_H
#define MFRT_COMM_COMMRUNTIME_H

#include "meshfold/Support/MeshLayout.h"
#include "mfrt/comm/Comm.h"

#include <array>
#include <initializer_list>
#include <map>
#include <memory>
#include <unordered_map>

namespace mfrt {
/// The emitted program's part of a rank's state (mfrt/program/ProgramRank.h).
struct ProgramRank;
} // namespace mfrt

namespace mfrt::comm {

/// Where a dispatch sends its rows: each expert in one or more slots (its
/// replicas; `slotsOf`: those a row from this rank may go to), each slot
/// held by `replicas` members of the group
/// (its etp slices). Routing target s * replicas + m (slice m of slot s) ->
/// group rank of its holder (`owner`), and the slot's index among the
/// holder's (`ownerLocal`).
struct ExpertTable {
  int64_t replicas = 1;
  std::vector<std::vector<int64_t>> slotsOf;
  std::vector<int> owner, ownerLocal;
};

/// A group of the calling rank, made by mfrt_group from MeshLayout.
struct Group {
  int64_t handle = -1;
  /// The axes as given, without spaces ("tp,cp").
  std::string axes;
  /// "tp{4,5}": axes and members, for error messages.
  std::string name;
  /// Global ranks by group rank.
  std::vector<int> members;
  /// The calling rank's group rank.
  int index = -1;
  std::unordered_map<int, int> indexOf;
  /// Collectives started on this group (the tag sequence).
  uint32_t seq = 0;
  /// The expert tables of the dispatches on this group, by number of
  /// experts and placement (empty: contiguous blocks).
  std::map<int64_t,
           std::map<std::vector<int64_t>, std::shared_ptr<const ExpertTable>>>
      expertTables;

  int size() const { return int(members.size()); }
};

constexpr int kLayerSlots = MFRT_MAX_LAYERS + 1;

/// Which of a launch's pools a rank is in (mfrt_options.second_plan): its
/// pool's first global rank, and every pool's devices.
struct PoolPlace {
  int pool = 0, base = 0;
  std::array<int, 2> sizes = {0, 0};
};

/// Everything one rank needs; thread-local for `local`, one per process for
/// the plugins.
struct RankState {
  /// `layout` is the rank's own pool's; `rank` is global.
  RankState(const meshfold::MeshLayout &layout, int rank, double timeoutS,
            Transport &transport, Compute &compute, Native *native,
            PoolPlace place = {})
      : layout(layout), rank(rank), size(place.sizes[0] + place.sizes[1] > 0
                                             ? place.sizes[0] + place.sizes[1]
                                             : int(layout.numDevices())),
        timeoutS(timeoutS), transport(transport), compute(compute),
        native(native), place(place), sendSeq(size, 0), recvSeq(size, 0) {
    if (this->place.sizes[0] == 0)
      this->place.sizes[0] = size; // one pool
  }

  const meshfold::MeshLayout &layout;
  int rank, size;
  double timeoutS;
  Transport &transport;
  Compute &compute;
  Native *native;
  PoolPlace place;
  /// The layout's rank of global rank `global` of this rank's pool, and
  /// back.
  int64_t local(int64_t global) const { return global - place.base; }
  int global(int64_t local) const { return int(local) + place.base; }

  std::vector<std::unique_ptr<Group>> groups;
  std::map<std::string, int64_t> groupByAxes;
  int64_t layer = -1;
  uint64_t bytes[MFRT_OP_KIND_COUNT][MFRT_LINK_COUNT][kLayerSlots] = {};
  /// Point-to-point sequence numbers per peer.
  std::vector<uint32_t> sendSeq, recvSeq;
  /// Token tracing: the key of the current op (layer, index of the call
  /// since the layer was set) and the rows marked for the next call.
  int64_t traceLayer = -1, traceOp = 0;
  std::vector<int64_t> traceMarks;
  int64_t traceRowElems = 0;
  /// This rank's own (root) failure, if any.
  FailureRecord failure;
  /// Fault injection (MFRT_FAULT_EXIT="<rank>:<op>"): the op in which this
  /// rank calls _exit(3) after posting its messages; "" for none.
  std::string faultExitOp;
  /// The emitted program's part (weights, the request being run), set by
  /// the program while the rank runs its function; null otherwise and for
  /// other callers of mfrt_launch.
  ProgramRank *program = nullptr;

  Group *group(int64_t handle) {
    if (handle < 0 || handle >= int64_t(groups.size()))
      return nullptr;
    return groups[size_t(handle)].get();
  }
  int layerSlot() const {
    return layer >= 0 && layer < MFRT_MAX_LAYERS ? int(layer) + 1 : 0;
  }
};

/// The calling thread's rank state (nullptr outside mfrt_launch).
RankState *currentRank();

/// One collective (or p2p call) in progress on the calling rank.
struct Op {
  RankState &st;
  const char *name;
  mfrt_op_kind kind;
  /// nullptr for p2p.
  Group *group = nullptr;
  /// p2p: the peer; "send to rank 7".
  int peer = -1;
  unsigned channel = 0;
  uint32_t seq = 0;
  Clock::time_point deadline;
  /// Token tracing: this call's key and the marked rows of its send buffer
  /// (see mfrt_trace_mark).
  int64_t traceLayer = -1, traceOp = 0;
  std::vector<int64_t> traceMarks;
  int64_t traceRowElems = 0;

  Op(RankState &st, const char *name, mfrt_op_kind kind)
      : st(st), name(name), kind(kind) {}
  /// "all_gather on group tp{4,5}" / "send to rank 7".
  std::string where() const;
  Tag tag(unsigned phase) const { return makeTag(channel, seq, phase); }
  /// Counts `bytes` sent to global rank `peer` (by link class and layer).
  void account(int peer, uint64_t bytes);
  /// Records that a message of this op to global rank `peer` carries the
  /// traced token's data (no-op unless tracing is on).
  void traceHop(int peer) const;
  /// Records that this op used the traced token's data where it is (an
  /// expert on the token's own GPU): a hop from this rank to itself.
  void traceStay() const;
  bool traced() const { return !traceMarks.empty(); }
};

/// One round of messages of an Op: post every send and receive, then wait.
class Phase {
public:
  Phase(Op &op, unsigned phase) : op(op), phase(phase) {}
  ~Phase();
  void send(int peer, std::initializer_list<ConstSpan> parts) {
    send(peer, parts.begin(), parts.size());
  }
  void send(int peer, const ConstSpan *parts, size_t numParts);
  void recv(int peer, std::initializer_list<Span> parts) {
    recv(peer, parts.begin(), parts.size());
  }
  void recv(int peer, const Span *parts, size_t numParts);
  Status wait();

private:
  Op &op;
  unsigned phase;
  std::vector<Request *> requests;
};

/// Generic algorithms (Collectives.cpp), over Transport and
/// Compute. Arguments are checked by the caller.
Status allGather(Op &op, const void *send, void *recv, int64_t count,
                 mfrt_dtype dtype);
Status reduceScatter(Op &op, const void *send, void *recv, int64_t count,
                     mfrt_dtype dtype);
Status allReduce(Op &op, const void *send, void *recv, int64_t count,
                 mfrt_dtype dtype);
Status kvRingStep(Op &op, const void *k, const void *v, void *kOut, void *vOut,
                  int64_t count, mfrt_dtype dtype);
/// One message of `send` to group rank r+1, `recv` from r-1.
Status ringStep(Op &op, const std::vector<ConstSpan> &send,
                const std::vector<Span> &recv);
Status sendTo(Op &op, int peer, const void *buf, int64_t count,
              mfrt_dtype dtype);
Status recvFrom(Op &op, int peer, void *buf, int64_t count, mfrt_dtype dtype);
Status gather(Op &op, int root, const void *send, void *recv, int64_t count,
              mfrt_dtype dtype);
Status barrier(Op &op);

/// True when token tracing is on (mfrt_trace_enable).
bool tracing();

/// Scoped buffer from Compute::alloc.
class Buffer {
public:
  Buffer(Compute &compute) : compute(compute) {}
  Buffer(const Buffer &) = delete;
  ~Buffer() { reset(); }
  /// Allocates `bytes` (at least 1); false on failure.
  bool allocate(size_t bytes) {
    reset();
    ptr = compute.alloc(bytes ? bytes : 1);
    return ptr != nullptr;
  }
  void reset() {
    if (ptr)
      compute.release(ptr);
    ptr = nullptr;
  }
  char *data() const { return static_cast<char *>(ptr); }
  /// Gives up ownership.
  char *take() {
    char *p = data();
    ptr = nullptr;
    return p;
  }

private:
  Compute &compute;
  void *ptr = nullptr;
};

} // namespace mfrt::comm

#endif // MFRT_COMM_COMMRUNTIME_H
