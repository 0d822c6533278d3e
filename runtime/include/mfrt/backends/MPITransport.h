//===- MPITransport.h - The mpi backend's transport -------------*- C++ -*-===//
//
// One process per rank under mpirun. Messages are MPI_Isend / MPI_Irecv on a
// private duplicate of MPI_COMM_WORLD, completed by MPI_Test polling against
// the op's deadline (with back-off, so oversubscribed runs stay usable), so
// nothing blocks forever. Failures travel on a second duplicate as small
// notices that every waiting rank polls for. Built into libmfrt_mpi.so, whose
// backend also lends it to the nccl backend under mpirun (host messages and
// bootstrap).
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_BACKENDS_MPITRANSPORT_H
#define MFRT_BACKENDS_MPITRANSPORT_H

#include "mfrt/comm/Comm.h"

#include <mpi.h>

#include <map>
#include <memory>

namespace mfrt::comm {

class MPITransport final : public HostTransport {
public:
  /// Initializes MPI (MPI_THREAD_FUNNELED) unless the program did; nullptr
  /// and *error on failure.
  static std::unique_ptr<MPITransport> create(std::string *error);
  ~MPITransport() override;

  int rank() const override { return me; }
  int size() const override { return worldSize; }
  /// The rank's index among the processes of its node (MPI's shared-memory
  /// split).
  int localRank() const override { return local; }
  Request *isend(int peer, Tag tag, const ConstSpan *parts,
                 size_t numParts) override;
  Status sendBuffered(int peer, Tag tag, const ConstSpan *parts,
                      size_t numParts, Clock::time_point deadline,
                      double timeoutS) override;
  Request *irecv(int peer, Tag tag, const Span *parts,
                 size_t numParts) override;
  Status waitAll(Request *const *requests, size_t numRequests,
                 Clock::time_point deadline, double timeoutS) override;
  void raiseFailure(const FailureRecord &record) override;
  bool failureSeen(FailureRecord &record) override;

  FailureRecord finish(const FailureRecord &mine, double timeoutS) override;
  /// MPI_Finalize after a success if this transport initialized MPI.
  void shutdown(bool success) override;
  /// Advances detached sends (buffered sends, failure notices).
  void progress();

private:
  MPITransport() = default;
  /// Staging buffers of multi-part messages, cached: fresh pages would cost
  /// a page fault each.
  char *stagingAlloc(size_t bytes);
  void stagingFree(char *ptr, size_t bytes);
  std::multimap<size_t, char *> stagingCache;
  size_t stagingCached = 0;

  MPI_Comm data = MPI_COMM_NULL, control = MPI_COMM_NULL;
  int me = 0, worldSize = 0, local = 0;
  bool initializedMPI = false;
  struct Detached;
  std::vector<std::unique_ptr<Detached>> detached;
  bool seenFailure = false;
  FailureRecord seen;
};

} // namespace mfrt::comm

#endif // MFRT_BACKENDS_MPITRANSPORT_H
