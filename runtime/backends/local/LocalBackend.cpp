//===- LocalBackend.cpp - Every rank a thread of this process -------------===//
//
// In CUDA mode (Device.h) buffers are managed or device memory: every copy is
// a cuMemcpyAsync on the stream of the rank whose thread makes it, and that
// stream is synchronized before the request completes, i.e. before the peer
// may read the data. All ranks share one context, so any rank's stream can
// copy between any two ranks' buffers.
//
//===----------------------------------------------------------------------===//

#include "mfrt/backends/LocalBackend.h"
#include "mfrt/comm/Device.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <set>

using namespace mfrt::comm;

namespace mfrt::comm {

/// A send or receive. Its state goes Posted -> Matched -> Done (or Posted ->
/// Cancelled). Posted -> Matched happens under the mutex of the mailbox whose
/// queue holds the request (the receiver's); Matched -> Done under the owner's
/// mutex, by whichever thread copied the data.
struct LocalRequest final : Request {
  enum State { Posted, Matched, Done, Cancelled };
  bool isSend = false;
  /// The rank that posted it, and the other side.
  int owner = -1, peer = -1;
  Tag tag = 0;
  std::vector<ConstSpan> sendParts;
  std::vector<Span> recvParts;
  size_t bytes = 0;
  /// A buffered send owns its copy and is deleted by whoever copies it.
  std::unique_ptr<char[]> owned;
  bool buffered = false;
  std::atomic<int> state{Posted};
  std::string error;
  mfrt_status errorCode = MFRT_ERR_ARGUMENT;
};

struct LocalMailbox {
  std::mutex mutex;
  std::condition_variable cv;
  /// Sends to this rank that no receive matched yet, in arrival order.
  std::deque<LocalRequest *> unexpected;
  /// Receives of this rank not matched yet, in posting order.
  std::deque<LocalRequest *> posted;
};

} // namespace mfrt::comm

namespace {

/// The device whose stream the calling rank copies with (CUDA mode), or
/// nullptr for host memcpy.
Device *copyDevice() {
  Device *device = activeDevice();
  return device && device->attached() ? device : nullptr;
}

/// Copies `n` bytes with memcpy, or queues the copy on the rank's stream.
Status copyBytes(Device *device, void *dst, const void *src, size_t n) {
  if (!device) {
    std::memcpy(dst, src, n);
    return Status::success();
  }
  return device->copyAsync(dst, src, n);
}

/// Copies the send's parts into the receive's parts (sizes already equal);
/// in CUDA mode the copies are complete when this returns.
Status copyParts(const LocalRequest &send, const LocalRequest &recv) {
  Device *device = copyDevice();
  size_t si = 0, soff = 0;
  for (const Span &dst : recv.recvParts) {
    size_t done = 0;
    while (done < dst.bytes) {
      const ConstSpan &src = send.sendParts[si];
      size_t n = std::min(dst.bytes - done, src.bytes - soff);
      if (n) {
        Status s = copyBytes(device, static_cast<char *>(dst.data) + done,
                             static_cast<const char *>(src.data) + soff, n);
        if (!s.ok())
          return s;
      }
      done += n;
      soff += n;
      if (soff == src.bytes) {
        ++si;
        soff = 0;
      }
    }
  }
  return device ? device->synchronize() : Status::success();
}

class LocalTransport final : public Transport {
public:
  LocalTransport(LocalFabric &fabric, int rank) : fabric(fabric), me(rank) {}

  int rank() const override { return me; }
  int size() const override { return fabric.size(); }

  /// A request of this rank with `peer`, of the parts' total size.
  template <typename Part>
  LocalRequest *newRequest(int peer, Tag tag, bool isSend, const Part *parts,
                           size_t numParts) {
    auto *req = new LocalRequest;
    req->isSend = isSend;
    req->owner = me;
    req->peer = peer;
    req->tag = tag;
    for (size_t i = 0; i < numParts; ++i)
      req->bytes += parts[i].bytes;
    return req;
  }

  Request *isend(int peer, Tag tag, const ConstSpan *parts,
                 size_t numParts) override {
    LocalRequest *req = newRequest(peer, tag, true, parts, numParts);
    req->sendParts.assign(parts, parts + numParts);
    post(req);
    return req;
  }

  Status sendBuffered(int peer, Tag tag, const ConstSpan *parts,
                      size_t numParts, Clock::time_point, double) override {
    LocalRequest *req = newRequest(peer, tag, true, parts, numParts);
    req->buffered = true;
    req->owned.reset(new char[std::max<size_t>(req->bytes, 1)]);
    size_t off = 0;
    Device *device = copyDevice();
    for (size_t i = 0; i < numParts; ++i) {
      if (parts[i].bytes) {
        Status s = copyBytes(device, req->owned.get() + off, parts[i].data,
                             parts[i].bytes);
        if (!s.ok()) {
          delete req;
          return s;
        }
      }
      off += parts[i].bytes;
    }
    if (device) {
      Status s = device->synchronize();
      if (!s.ok()) {
        delete req;
        return s;
      }
    }
    req->sendParts = {ConstSpan{req->owned.get(), req->bytes}};
    post(req);
    return Status::success();
  }

  Request *irecv(int peer, Tag tag, const Span *parts,
                 size_t numParts) override {
    LocalRequest *req = newRequest(peer, tag, false, parts, numParts);
    req->recvParts.assign(parts, parts + numParts);

    LocalMailbox &box = fabric.box(me);
    if (LocalRequest *send = matchOrQueue(
            box, box.unexpected, box.posted, req,
            [&](LocalRequest *s) { return s->owner == peer && s->tag == tag; }))
      transfer(send, req);
    return req;
  }

  Status waitAll(Request *const *requests, size_t numRequests,
                 Clock::time_point deadline, double timeoutS) override {
    std::vector<LocalRequest *> reqs;
    for (size_t i = 0; i < numRequests; ++i)
      reqs.push_back(static_cast<LocalRequest *>(requests[i]));
    auto allDone = [&] {
      for (LocalRequest *r : reqs)
        if (r->state.load() != LocalRequest::Done)
          return false;
      return true;
    };

    Status result;
    LocalMailbox &box = fabric.box(me);
    {
      std::unique_lock<std::mutex> lock(box.mutex);
      while (!allDone()) {
        if (fabric.failed()) {
          result = Status::peer(fabric.firstFailure());
          break;
        }
        if (box.cv.wait_until(lock, deadline) == std::cv_status::timeout &&
            !allDone() && !fabric.failed()) {
          result = Status::error(MFRT_ERR_TIMEOUT,
                                 timeoutDetail(timeoutS, pendingPeers(reqs)));
          break;
        }
      }
    }
    if (!result.ok())
      cancel(reqs);
    else
      for (LocalRequest *r : reqs)
        if (!r->error.empty()) {
          result = Status::error(r->errorCode, r->error);
          break;
        }
    for (LocalRequest *r : reqs)
      delete r;
    return result;
  }

  void raiseFailure(const FailureRecord &record) override {
    fabric.raise(record);
  }

  bool failureSeen(FailureRecord &record) override {
    if (!fabric.failed())
      return false;
    record = fabric.firstFailure();
    return true;
  }

private:
  /// Under `box`'s lock: takes the first request of `from` that `matches`
  /// and marks it and `req` matched, or else queues `req` on `queue`.
  /// Returns the partner, or null if `req` was queued.
  template <typename Pred>
  static LocalRequest *matchOrQueue(LocalMailbox &box,
                                    std::deque<LocalRequest *> &from,
                                    std::deque<LocalRequest *> &queue,
                                    LocalRequest *req, Pred matches) {
    std::lock_guard<std::mutex> lock(box.mutex);
    auto it = std::find_if(from.begin(), from.end(), matches);
    if (it == from.end()) {
      queue.push_back(req);
      return nullptr;
    }
    LocalRequest *partner = *it;
    from.erase(it);
    partner->state = LocalRequest::Matched;
    req->state = LocalRequest::Matched;
    return partner;
  }

  /// Matches a send against the receiver's posted receives, or queues it.
  void post(LocalRequest *send) {
    LocalMailbox &box = fabric.box(send->peer);
    if (LocalRequest *recv = matchOrQueue(
            box, box.posted, box.unexpected, send, [&](LocalRequest *r) {
              return r->peer == me && r->tag == send->tag;
            }))
      transfer(send, recv);
  }

  /// Copies a matched pair outside any lock, then completes both.
  void transfer(LocalRequest *send, LocalRequest *recv) {
    if (send->bytes != recv->bytes) {
      std::string what = "rank " + std::to_string(send->owner) + " sent " +
                         std::to_string(send->bytes) + " bytes where rank " +
                         std::to_string(recv->owner) + " expected " +
                         std::to_string(recv->bytes);
      send->error = recv->error = "message size mismatch: " + what;
    } else {
      Status s = copyParts(*send, *recv);
      if (!s.ok()) {
        send->error = recv->error = s.detail;
        send->errorCode = recv->errorCode = s.code;
      }
    }
    complete(recv);
    if (send->buffered)
      delete send;
    else
      complete(send);
  }

  void complete(LocalRequest *req) {
    LocalMailbox &box = fabric.box(req->owner);
    std::lock_guard<std::mutex> lock(box.mutex);
    req->state = LocalRequest::Done;
    box.cv.notify_all();
  }

  /// Withdraws requests that are not done; waits for those being copied.
  void cancel(const std::vector<LocalRequest *> &reqs) {
    LocalMailbox &mine = fabric.box(me);
    for (LocalRequest *r : reqs) {
      LocalMailbox &queueBox = r->isSend ? fabric.box(r->peer) : mine;
      {
        std::lock_guard<std::mutex> lock(queueBox.mutex);
        if (r->state.load() == LocalRequest::Posted) {
          auto &queue = r->isSend ? queueBox.unexpected : queueBox.posted;
          queue.erase(std::find(queue.begin(), queue.end(), r));
          r->state = LocalRequest::Cancelled;
          continue;
        }
      }
      std::unique_lock<std::mutex> lock(mine.mutex);
      mine.cv.wait(lock, [&] {
        int s = r->state.load();
        return s == LocalRequest::Done || s == LocalRequest::Cancelled;
      });
    }
  }

  /// Peers of the unfinished receives (or, if none, sends).
  std::vector<int> pendingPeers(const std::vector<LocalRequest *> &reqs) {
    std::set<int> recvPeers, sendPeers;
    for (LocalRequest *r : reqs)
      if (r->state.load() != LocalRequest::Done)
        (r->isSend ? sendPeers : recvPeers).insert(r->peer);
    const std::set<int> &peers = recvPeers.empty() ? sendPeers : recvPeers;
    return std::vector<int>(peers.begin(), peers.end());
  }

  LocalFabric &fabric;
  int me;
};

} // namespace

LocalFabric::LocalFabric(int numRanks) {
  for (int i = 0; i < numRanks; ++i)
    boxes.push_back(std::make_unique<LocalMailbox>());
}

LocalFabric::~LocalFabric() {
  // Buffered sends nobody received; other requests belong to their senders,
  // which withdrew them before returning.
  for (auto &box : boxes)
    for (LocalRequest *r : box->unexpected)
      if (r->buffered)
        delete r;
}

std::unique_ptr<Transport> LocalFabric::transport(int rank) {
  return std::make_unique<LocalTransport>(*this, rank);
}

void LocalFabric::raise(const FailureRecord &record) {
  {
    std::lock_guard<std::mutex> lock(failureMutex);
    if (hasFailed.load())
      return;
    first = record;
    hasFailed.store(true, std::memory_order_release);
  }
  for (auto &box : boxes) {
    std::lock_guard<std::mutex> lock(box->mutex);
    box->cv.notify_all();
  }
}

FailureRecord LocalFabric::firstFailure() {
  std::lock_guard<std::mutex> lock(failureMutex);
  return first;
}
