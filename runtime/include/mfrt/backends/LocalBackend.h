//===- LocalBackend.h - Every rank a thread of this process -----*- C++ -*-===//
//
// The `local` backend's transport: one mailbox (mutex + condition variable)
// per rank. A send is matched against the receiver's posted receive and
// copied once, directly from the sender's buffer into the receiver's (the
// sender's request completes when the copy is done), so a collective costs
// one memcpy per byte moved. A shared failure board aborts every waiting
// rank when one fails.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_BACKENDS_LOCALBACKEND_H
#define MFRT_BACKENDS_LOCALBACKEND_H

#include "mfrt/comm/Comm.h"

#include <atomic>
#include <memory>
#include <mutex>

namespace mfrt::comm {

struct LocalMailbox;

/// The ranks of one mfrt_launch.
class LocalFabric {
public:
  explicit LocalFabric(int numRanks);
  ~LocalFabric();
  /// The transport of `rank` (used by that rank's thread only).
  std::unique_ptr<Transport> transport(int rank);
  /// Records `record` if it is the first failure and wakes every rank.
  void raise(const FailureRecord &record);
  bool failed() const { return hasFailed.load(std::memory_order_acquire); }
  FailureRecord firstFailure();
  LocalMailbox &box(int rank) { return *boxes[size_t(rank)]; }
  int size() const { return int(boxes.size()); }

private:
  std::vector<std::unique_ptr<LocalMailbox>> boxes;
  std::mutex failureMutex;
  FailureRecord first;
  std::atomic<bool> hasFailed{false};
};

} // namespace mfrt::comm

#endif // MFRT_BACKENDS_LOCALBACKEND_H
