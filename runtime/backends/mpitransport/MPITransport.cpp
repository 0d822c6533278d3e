//===- MPITransport.cpp - The mpi backend's transport ---------------------===//

#include "mfrt/backends/MPITransport.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>

using namespace mfrt::comm;

namespace {

/// MPI counts are int: messages go in chunks of at most 1 GiB.
constexpr size_t kChunk = size_t(1) << 30;
/// Control tags.
constexpr int kAbortTag = 1;
constexpr int kOutcomeTag = 2;
/// A failure record on the wire.
constexpr size_t kRecordBytes = 1024;

std::string mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, size_t(len));
}

std::vector<char> encode(const FailureRecord &r) {
  std::vector<char> out(kRecordBytes, 0);
  int32_t head[2] = {int32_t(r.rank), int32_t(r.status)};
  std::memcpy(out.data(), head, 8);
  std::strncpy(out.data() + 8, r.detail.c_str(), kRecordBytes - 9);
  return out;
}

FailureRecord decode(const char *buf) {
  int32_t head[2];
  std::memcpy(head, buf, 8);
  FailureRecord r;
  r.rank = head[0];
  r.status = mfrt_status(head[1]);
  r.detail.assign(buf + 8, strnlen(buf + 8, kRecordBytes - 8));
  return r;
}

struct MPIRequest final : Request {
  bool isSend = false;
  int peer = -1;
  size_t bytes = 0;
  std::vector<MPI_Request> reqs;
  std::vector<size_t> chunkBytes;
  /// Multi-part messages go through one contiguous buffer (from the
  /// transport's cache).
  char *staging = nullptr;
  size_t stagingBytes = 0;
  std::vector<Span> unpackTo;
  bool done = false;
  std::string error;
};

/// Posts `bytes` at `ptr` in chunks.
void postChunks(MPIRequest &r, void *ptr, size_t bytes, int tag,
                MPI_Comm comm) {
  size_t off = 0;
  do {
    size_t n = std::min(kChunk, bytes - off);
    MPI_Request req;
    char *p = static_cast<char *>(ptr) + off;
    if (r.isSend)
      MPI_Isend(p, int(n), MPI_BYTE, r.peer, tag, comm, &req);
    else
      MPI_Irecv(p, int(n), MPI_BYTE, r.peer, tag, comm, &req);
    r.reqs.push_back(req);
    r.chunkBytes.push_back(n);
    off += n;
  } while (off < bytes);
}

/// Tests a request; true when complete (r.error set on failure).
bool test(MPIRequest &r) {
  if (r.done)
    return true;
  std::vector<MPI_Status> statuses(r.reqs.size());
  int flag = 0;
  int rc =
      MPI_Testall(int(r.reqs.size()), r.reqs.data(), &flag, statuses.data());
  if (rc != MPI_SUCCESS) {
    int code = rc;
    if (rc == MPI_ERR_IN_STATUS)
      for (const MPI_Status &s : statuses)
        if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING)
          code = s.MPI_ERROR;
    r.error = std::string(r.isSend ? "MPI send to" : "MPI receive from") +
              " rank " + std::to_string(r.peer) + " failed: " + mpiError(code);
    r.done = true;
    return true;
  }
  if (!flag)
    return false;
  r.done = true;
  if (r.isSend)
    return true;
  size_t got = 0;
  for (size_t i = 0; i < statuses.size(); ++i) {
    int count = 0;
    MPI_Get_count(&statuses[i], MPI_BYTE, &count);
    got += size_t(count);
  }
  if (got != r.bytes) {
    r.error = "message size mismatch: rank " + std::to_string(r.peer) +
              " sent " + std::to_string(got) + " bytes where " +
              std::to_string(r.bytes) + " were expected";
    return true;
  }
  if (r.staging) {
    size_t off = 0;
    for (const Span &s : r.unpackTo) {
      if (s.bytes)
        std::memcpy(s.data, r.staging + off, s.bytes);
      off += s.bytes;
    }
  }
  return true;
}

/// Gives up on a request (after a failure): cancel, free, and leak its
/// staging buffer, which MPI may still touch.
void abandon(MPIRequest &r) {
  for (MPI_Request &req : r.reqs) {
    if (req == MPI_REQUEST_NULL)
      continue;
    if (!r.isSend)
      MPI_Cancel(&req);
    MPI_Request_free(&req);
  }
  r.staging = nullptr; // leaked on purpose: MPI may still touch it
}

} // namespace

struct MPITransport::Detached {
  std::vector<MPI_Request> reqs;
  std::unique_ptr<char[]> buffer;
  std::vector<char> record;
};

std::unique_ptr<MPITransport> MPITransport::create(std::string *error) {
  std::unique_ptr<MPITransport> t(new MPITransport);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    *error = "MPI is already finalized (the mpi and nccl backends run one "
             "mfrt_launch per process)";
    return nullptr;
  }
  if (!initialized) {
    int provided = 0;
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) {
      *error = "MPI_Init_thread failed: " + mpiError(rc);
      return nullptr;
    }
    t->initializedMPI = true;
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &t->data);
  MPI_Comm_dup(MPI_COMM_WORLD, &t->control);
  MPI_Comm_set_errhandler(t->data, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(t->control, MPI_ERRORS_RETURN);
  MPI_Comm_rank(t->data, &t->me);
  MPI_Comm_size(t->data, &t->worldSize);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, t->me,
                      MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &t->local);
  MPI_Comm_free(&node);
  void *attr = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &flag);
  if (flag && *static_cast<int *>(attr) < 0x7fffffff) {
    *error = "MPI_TAG_UB is " + std::to_string(*static_cast<int *>(attr)) +
             ", but the runtime needs 31-bit tags";
    return nullptr;
  }
  return t;
}

MPITransport::~MPITransport() {
  for (auto &[bytes, ptr] : stagingCache)
    std::free(ptr);
}

void MPITransport::progress() {
  for (size_t i = 0; i < detached.size();) {
    int flag = 0;
    MPI_Testall(int(detached[i]->reqs.size()), detached[i]->reqs.data(), &flag,
                MPI_STATUSES_IGNORE);
    if (flag) {
      detached[i] = std::move(detached.back());
      detached.pop_back();
    } else {
      ++i;
    }
  }
}

Request *MPITransport::isend(int peer, Tag tag, const ConstSpan *parts,
                             size_t numParts) {
  auto *r = new MPIRequest;
  r->isSend = true;
  r->peer = peer;
  for (size_t i = 0; i < numParts; ++i)
    r->bytes += parts[i].bytes;
  void *ptr = numParts ? const_cast<void *>(parts[0].data) : nullptr;
  if (numParts > 1) {
    r->stagingBytes = r->bytes;
    r->staging = stagingAlloc(r->bytes);
    size_t off = 0;
    for (size_t i = 0; i < numParts; ++i) {
      if (parts[i].bytes)
        std::memcpy(r->staging + off, parts[i].data, parts[i].bytes);
      off += parts[i].bytes;
    }
    ptr = r->staging;
  }
  postChunks(*r, ptr, r->bytes, int(tag), data);
  return r;
}

Status MPITransport::sendBuffered(int peer, Tag tag, const ConstSpan *parts,
                                  size_t numParts, Clock::time_point, double) {
  auto d = std::make_unique<Detached>();
  size_t bytes = 0;
  for (size_t i = 0; i < numParts; ++i)
    bytes += parts[i].bytes;
  d->buffer.reset(new char[std::max<size_t>(bytes, 1)]);
  size_t off = 0;
  for (size_t i = 0; i < numParts; ++i) {
    if (parts[i].bytes)
      std::memcpy(d->buffer.get() + off, parts[i].data, parts[i].bytes);
    off += parts[i].bytes;
  }
  MPIRequest r;
  r.isSend = true;
  r.peer = peer;
  postChunks(r, d->buffer.get(), bytes, int(tag), data);
  d->reqs = r.reqs;
  detached.push_back(std::move(d));
  progress();
  return Status::success();
}

Request *MPITransport::irecv(int peer, Tag tag, const Span *parts,
                             size_t numParts) {
  auto *r = new MPIRequest;
  r->peer = peer;
  for (size_t i = 0; i < numParts; ++i)
    r->bytes += parts[i].bytes;
  void *ptr = numParts ? parts[0].data : nullptr;
  if (numParts > 1) {
    r->stagingBytes = r->bytes;
    r->staging = stagingAlloc(r->bytes);
    r->unpackTo.assign(parts, parts + numParts);
    ptr = r->staging;
  }
  postChunks(*r, ptr, r->bytes, int(tag), data);
  return r;
}

Status MPITransport::waitAll(Request *const *requests, size_t numRequests,
                             Clock::time_point deadline, double timeoutS) {
  std::vector<std::unique_ptr<MPIRequest>> reqs;
  for (size_t i = 0; i < numRequests; ++i)
    reqs.emplace_back(static_cast<MPIRequest *>(requests[i]));
  int spins = 0;
  Status result = waitLoop(
      *this, reqs,
      [&] {
        bool all = true;
        for (auto &r : reqs)
          all &= test(*r);
        progress();
        return all;
      },
      [&] { backoff(spins); }, deadline, timeoutS);
  for (auto &r : reqs) {
    if (!r->done) {
      abandon(*r);
      continue;
    }
    if (result.ok() && !r->error.empty())
      result = Status::error(MFRT_ERR_BACKEND, r->error);
    if (r->staging)
      stagingFree(r->staging, r->stagingBytes);
  }
  return result;
}

char *MPITransport::stagingAlloc(size_t bytes) {
  auto it = stagingCache.lower_bound(bytes);
  if (it != stagingCache.end() && it->first <= 2 * bytes + 4096) {
    char *ptr = it->second;
    stagingCached -= it->first;
    stagingCache.erase(it);
    return ptr;
  }
  return static_cast<char *>(std::malloc(std::max<size_t>(bytes, 1)));
}

void MPITransport::stagingFree(char *ptr, size_t bytes) {
  stagingCache.emplace(bytes, ptr);
  stagingCached += bytes;
  while (stagingCached > (size_t(1) << 30) && !stagingCache.empty()) {
    auto last = std::prev(stagingCache.end());
    stagingCached -= last->first;
    std::free(last->second);
    stagingCache.erase(last);
  }
}

void MPITransport::raiseFailure(const FailureRecord &record) {
  if (!seenFailure) {
    seenFailure = true;
    seen = record;
  }
  for (int p = 0; p < worldSize; ++p) {
    if (p == me)
      continue;
    auto d = std::make_unique<Detached>();
    d->record = encode(record);
    MPI_Request req;
    MPI_Isend(d->record.data(), int(kRecordBytes), MPI_BYTE, p, kAbortTag,
              control, &req);
    d->reqs.push_back(req);
    detached.push_back(std::move(d));
  }
  progress();
}

bool MPITransport::failureSeen(FailureRecord &record) {
  while (true) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kAbortTag, control, &flag, &status);
    if (!flag)
      break;
    std::vector<char> buf(kRecordBytes);
    MPI_Recv(buf.data(), int(kRecordBytes), MPI_BYTE, status.MPI_SOURCE,
             kAbortTag, control, MPI_STATUS_IGNORE);
    if (!seenFailure) {
      seenFailure = true;
      seen = decode(buf.data());
    }
  }
  if (seenFailure)
    record = seen;
  return seenFailure;
}

FailureRecord MPITransport::finish(const FailureRecord &mine, double timeoutS) {
  const Clock::time_point deadline = deadlineAfter(timeoutS);
  std::vector<char> myRecord = encode(mine);
  std::vector<std::vector<char>> records(static_cast<size_t>(worldSize),
                                         std::vector<char>(kRecordBytes));
  std::vector<MPI_Request> sends, recvs(size_t(worldSize), MPI_REQUEST_NULL);
  for (int p = 0; p < worldSize; ++p) {
    if (p == me)
      continue;
    MPI_Request req;
    MPI_Isend(myRecord.data(), int(kRecordBytes), MPI_BYTE, p, kOutcomeTag,
              control, &req);
    sends.push_back(req);
    MPI_Irecv(records[size_t(p)].data(), int(kRecordBytes), MPI_BYTE, p,
              kOutcomeTag, control, &recvs[size_t(p)]);
  }
  std::vector<bool> arrived(static_cast<size_t>(worldSize), false);
  arrived[size_t(me)] = true;
  int spins = 0;
  bool sendsDone = sends.empty();
  while (true) {
    bool all = true;
    for (int p = 0; p < worldSize; ++p) {
      if (arrived[size_t(p)])
        continue;
      int flag = 0;
      MPI_Test(&recvs[size_t(p)], &flag, MPI_STATUS_IGNORE);
      if (flag)
        arrived[size_t(p)] = true;
      else
        all = false;
    }
    if (!sendsDone) {
      int flag = 0;
      MPI_Testall(int(sends.size()), sends.data(), &flag, MPI_STATUSES_IGNORE);
      sendsDone = flag;
    }
    progress();
    if ((all && sendsDone) || Clock::now() >= deadline)
      break;
    backoff(spins);
  }

  std::vector<FailureRecord> candidates;
  if (mine.failed())
    candidates.push_back(mine);
  FailureRecord notice;
  if (failureSeen(notice))
    candidates.push_back(notice);
  std::vector<int> missing;
  for (int p = 0; p < worldSize; ++p) {
    if (!arrived[size_t(p)]) {
      missing.push_back(p);
      MPI_Cancel(&recvs[size_t(p)]);
      MPI_Request_free(&recvs[size_t(p)]);
      continue;
    }
    if (p == me)
      continue;
    FailureRecord r = decode(records[size_t(p)].data());
    if (r.failed())
      candidates.push_back(r);
  }
  if (!missing.empty())
    candidates.push_back(FailureRecord{
        me, MFRT_ERR_TIMEOUT,
        "mfrt_launch: " + timeoutDetail(timeoutS, missing) + " to finish"});
  if (!sendsDone)
    for (MPI_Request &req : sends)
      if (req != MPI_REQUEST_NULL)
        MPI_Request_free(&req);
  if (candidates.empty())
    return FailureRecord{};
  return *std::min_element(candidates.begin(), candidates.end(), preferRoot);
}

void MPITransport::shutdown(bool success) {
  if (!success)
    return; // a failed run exits without MPI_Finalize (which could hang)
  const Clock::time_point until = Clock::now() + std::chrono::seconds(2);
  int spins = 0;
  while (!detached.empty() && Clock::now() < until) {
    progress();
    backoff(spins);
  }
  if (!detached.empty()) {
    std::fprintf(stderr,
                 "mfrt: rank %d: %zu sends were never received; MPI is left "
                 "unfinalized\n",
                 me, detached.size());
    return;
  }
  MPI_Comm_free(&data);
  MPI_Comm_free(&control);
  if (initializedMPI)
    MPI_Finalize();
}
