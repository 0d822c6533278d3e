//===- NCCLPlugin.cpp - libmfrt_nccl.so: the nccl backend -----------------===//
//
// One process per GPU, under mpirun or started by srun or by hand with a
// rendezvous (device = the rank's local index on its node, modulo the
// visible devices). Buffers are device
// pointers; dispatch's `experts` / `weights` may be host or device memory
// (they are read to the host), and mfrt_dispatch_experts is host memory.
//
// The host transport comes from the core (PluginRequest::host): the tcp
// transport after a rendezvous, or the mpi plugin's under mpirun. Bootstrap
// as nccl-tests does it: rank 0 makes an ncclUniqueId and sends it to all
// over the host transport, ncclCommInitRankConfig makes the world communicator;
// every group of mfrt_group gets its own communicator by ncclCommSplit. All
// communicators are non-blocking, so every wait polls against the op's
// deadline (a stuck peer times out; the communicators are then aborted).
//
//  - all-gather / reduce-scatter / all-reduce: ncclAllGather /
//    ncclReduceScatter / ncclAllReduce on the group's communicator; bf16 and
//    f16 reductions convert to f32 first (f32 accumulation, twice the bytes);
//  - everything else (K/V ring step, send / recv, gather, dispatch and
//    combine) runs the generic algorithms, whose messages become grouped
//    ncclSend / ncclRecv on the world communicator; their host parts (counts,
//    expert ids, routing weights) travel over the host transport.
//
// Every CUDA / NCCL error names the failing call.
//
// A program compiled for CUDA passes its Device (Device.h, libmfrt_cuda.a):
// the plugin then attaches this process's rank to it and runs every NCCL
// call, copy and kernel of the collectives on the rank's stream, the one the
// program's kernels run on (mgpuStreamCreate), instead of a stream of its own.
//
//===----------------------------------------------------------------------===//

#include "mfrt/backends/NCCLKernels.h"
#include "mfrt/comm/CommDType.h"
#include "mfrt/comm/Device.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

using namespace mfrt::comm;

namespace {

static_assert(sizeof(cuda::DeviceTerm) == sizeof(Term) &&
                  offsetof(cuda::DeviceTerm, row) == offsetof(Term, row) &&
                  offsetof(cuda::DeviceTerm, weight) == offsetof(Term, weight),
              "Term and DeviceTerm must match");

Status cudaFailure(const char *call, cudaError_t err) {
  return Status::error(MFRT_ERR_BACKEND,
                       std::string(call) + " failed: " + cudaGetErrorName(err) +
                           ": " + cudaGetErrorString(err));
}

Status ncclFailure(const char *call, ncclResult_t res, ncclComm_t comm) {
  std::string msg = std::string(call) + " failed: " + ncclGetErrorString(res);
  if (const char *last = ncclGetLastError(comm))
    if (*last)
      msg += std::string(" (") + last + ")";
  return Status::error(MFRT_ERR_BACKEND, msg);
}

#define CUDA_TRY(call)                                                         \
  do {                                                                         \
    cudaError_t _e = (call);                                                   \
    if (_e != cudaSuccess)                                                     \
      return cudaFailure(#call, _e);                                           \
  } while (0)

ncclDataType_t ncclType(mfrt_dtype dtype) {
  switch (dtype) {
  case MFRT_BF16:
    return ncclBfloat16;
  case MFRT_F16:
    return ncclFloat16;
  case MFRT_F32:
    break;
  }
  return ncclFloat32;
}

Clock::time_point deadlineIn(double seconds) { return deadlineAfter(seconds); }

/// Waits until a non-blocking communicator's pending call finished.
Status waitComm(ncclComm_t comm, const char *call, Clock::time_point deadline,
                double timeoutS, HostTransport &host) {
  int spins = 0;
  while (true) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t res = ncclCommGetAsyncError(comm, &state);
    if (res != ncclSuccess)
      return ncclFailure("ncclCommGetAsyncError", res, comm);
    if (state == ncclSuccess)
      return Status::success();
    if (state != ncclInProgress)
      return ncclFailure(call, state, comm);
    FailureRecord record;
    if (host.failureSeen(record))
      return Status::peer(record);
    if (Clock::now() >= deadline)
      return Status::error(MFRT_ERR_TIMEOUT,
                           timeoutDetail(timeoutS, {}) + " in " + call);
    backoff(spins);
  }
}

/// The device memory and kernels of the collectives.
class CudaCompute final : public Compute {
public:
  CudaCompute(cudaStream_t stream, HostTransport &host)
      : stream(stream), host(host) {}
  ~CudaCompute() override {
    for (auto &[bytes, ptr] : cached)
      cudaFree(ptr);
    for (void *p : scratch)
      cudaFree(p);
  }

  bool hostMemory() const override { return false; }

  void *alloc(size_t bytes) override {
    bytes = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
    auto it = cached.lower_bound(bytes);
    if (it != cached.end() && it->first <= 2 * bytes) {
      void *ptr = it->second;
      live[ptr] = it->first;
      cached.erase(it);
      return ptr;
    }
    void *ptr = nullptr;
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) {
      // Give the cache back and retry once.
      (void)cudaStreamSynchronize(stream);
      for (auto &[size, p] : cached)
        cudaFree(p);
      cached.clear();
      if (cudaMalloc(&ptr, bytes) != cudaSuccess)
        return nullptr;
    }
    live[ptr] = bytes;
    return ptr;
  }

  void release(void *ptr) override {
    auto it = live.find(ptr);
    if (it == live.end())
      return;
    cached.emplace(it->second, ptr);
    live.erase(it);
  }

  Status copy(void *dst, const void *src, size_t bytes) override {
    if (bytes && dst != src)
      CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
    return Status::success();
  }

  Status copyToHost(void *dst, const void *src, size_t bytes) override {
    if (!bytes)
      return Status::success();
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
    CUDA_TRY(cudaStreamSynchronize(stream));
    return Status::success();
  }

  Status gatherRows(void *dst, const void *src, const int64_t *rows,
                    int64_t numRows, size_t rowBytes) override {
    if (numRows <= 0)
      return Status::success();
    void *dRows = nullptr;
    Status s = upload(0, rows, size_t(numRows) * 8, &dRows);
    if (!s.ok())
      return s;
    CUDA_TRY(cuda::gatherRows(dst, src, static_cast<const int64_t *>(dRows),
                              numRows, rowBytes, stream));
    return Status::success();
  }

  Status weightedSum(void *dst, int64_t numRows, const int64_t *termBegin,
                     const Term *terms, const void *const *bufs, int numBufs,
                     int64_t width, mfrt_dtype dtype) override {
    if (numRows <= 0)
      return Status::success();
    void *dBegin = nullptr, *dTerms = nullptr, *dBufs = nullptr;
    Status s = upload(0, termBegin, size_t(numRows + 1) * 8, &dBegin);
    if (s.ok())
      s = upload(1, terms, size_t(termBegin[numRows]) * sizeof(Term), &dTerms);
    if (s.ok())
      s = upload(2, bufs, size_t(numBufs) * sizeof(void *), &dBufs);
    if (!s.ok())
      return s;
    CUDA_TRY(cuda::weightedSum(
        dst, numRows, static_cast<const int64_t *>(dBegin),
        static_cast<const cuda::DeviceTerm *>(dTerms),
        static_cast<const void *const *>(dBufs), width, int(dtype), stream));
    return Status::success();
  }

  Status sync(Clock::time_point deadline, double timeoutS) override {
    cudaEvent_t event;
    CUDA_TRY(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    cudaError_t err = cudaEventRecord(event, stream);
    int spins = 0;
    Status result;
    while (err == cudaSuccess) {
      err = cudaEventQuery(event);
      if (err == cudaSuccess)
        break;
      if (err != cudaErrorNotReady)
        break;
      err = cudaSuccess;
      FailureRecord record;
      if (host.failureSeen(record)) {
        result = Status::peer(record);
        break;
      }
      if (Clock::now() >= deadline) {
        result = Status::error(MFRT_ERR_TIMEOUT,
                               timeoutDetail(timeoutS, {}) +
                                   " for the device work of the op");
        break;
      }
      backoff(spins);
    }
    cudaEventDestroy(event);
    if (err != cudaSuccess)
      return cudaFailure("cudaEventQuery", err);
    return result;
  }

  cudaStream_t stream;

private:
  /// Copies host data into device scratch slot `slot` (grown as needed).
  /// Stream-ordered: a later upload to the same slot waits for the kernels
  /// queued before it (cudaMemcpy from pageable memory synchronizes).
  Status upload(int slot, const void *data, size_t bytes, void **out) {
    if (scratchBytes[slot] < bytes) {
      CUDA_TRY(cudaStreamSynchronize(stream));
      if (scratch[slot])
        cudaFree(scratch[slot]);
      scratch[slot] = nullptr;
      scratchBytes[slot] = 0;
      CUDA_TRY(cudaMalloc(&scratch[slot], bytes));
      scratchBytes[slot] = bytes;
    }
    CUDA_TRY(cudaMemcpyAsync(scratch[slot], data, bytes, cudaMemcpyHostToDevice,
                             stream));
    // The host source may be freed right after this call returns.
    CUDA_TRY(cudaStreamSynchronize(stream));
    *out = scratch[slot];
    return Status::success();
  }

  HostTransport &host;
  std::map<void *, size_t> live;
  std::multimap<size_t, void *> cached;
  void *scratch[3] = {nullptr, nullptr, nullptr};
  size_t scratchBytes[3] = {0, 0, 0};
};

/// A message split into its device bytes (NCCL) and host bytes (MPI).
struct NcclRequest final : Request {
  bool isSend = false;
  int peer = -1;
  Tag tag = 0;
  std::vector<ConstSpan> sendParts;
  std::vector<Span> recvParts;
  size_t deviceBytes = 0;
  /// The MPI request of the host bytes (null if none).
  Request *hostRequest = nullptr;
};

/// Splits a message's parts: device parts (NCCL) go to `device`, their
/// bytes to `deviceBytes`; the host parts (MPI) are returned.
template <typename SpanT>
std::vector<SpanT> splitParts(const SpanT *parts, size_t numParts,
                              std::vector<SpanT> &device, size_t &deviceBytes) {
  std::vector<SpanT> hostParts;
  for (size_t i = 0; i < numParts; ++i) {
    if (parts[i].host) {
      hostParts.push_back(parts[i]);
      continue;
    }
    device.push_back(parts[i]);
    deviceBytes += parts[i].bytes;
  }
  return hostParts;
}

class NCCLTransport final : public Transport {
public:
  NCCLTransport(HostTransport &host, ncclComm_t world, CudaCompute &compute)
      : host(host), world(world), compute(compute) {}

  int rank() const override { return host.rank(); }
  int size() const override { return host.size(); }

  Request *isend(int peer, Tag tag, const ConstSpan *parts,
                 size_t numParts) override {
    auto *r = new NcclRequest;
    r->isSend = true;
    r->peer = peer;
    r->tag = tag;
    std::vector<ConstSpan> hostParts =
        splitParts(parts, numParts, r->sendParts, r->deviceBytes);
    // A message without device bytes still exists: it goes over MPI.
    if (!hostParts.empty() || r->deviceBytes == 0)
      r->hostRequest =
          host.isend(peer, tag, hostParts.data(), hostParts.size());
    return r;
  }

  Status sendBuffered(int peer, Tag tag, const ConstSpan *parts,
                      size_t numParts, Clock::time_point deadline,
                      double timeoutS) override {
    // NCCL has no buffered sends: this one returns when received.
    Request *r = isend(peer, tag, parts, numParts);
    return waitAll(&r, 1, deadline, timeoutS);
  }

  Request *irecv(int peer, Tag tag, const Span *parts,
                 size_t numParts) override {
    auto *r = new NcclRequest;
    r->peer = peer;
    r->tag = tag;
    std::vector<Span> hostParts =
        splitParts(parts, numParts, r->recvParts, r->deviceBytes);
    if (!hostParts.empty() || r->deviceBytes == 0)
      r->hostRequest =
          host.irecv(peer, tag, hostParts.data(), hostParts.size());
    return r;
  }

  Status waitAll(Request *const *requests, size_t numRequests,
                 Clock::time_point deadline, double timeoutS) override {
    std::vector<std::unique_ptr<NcclRequest>> reqs;
    std::vector<Request *> hostReqs;
    for (size_t i = 0; i < numRequests; ++i) {
      reqs.emplace_back(static_cast<NcclRequest *>(requests[i]));
      if (reqs.back()->hostRequest)
        hostReqs.push_back(reqs.back()->hostRequest);
    }
    Status s = deviceExchange(reqs, deadline, timeoutS);
    // The MPI half completes (or is released) in any case.
    Status h = host.waitAll(hostReqs.data(), hostReqs.size(),
                            s.ok() ? deadline : Clock::now(), timeoutS);
    if (!s.ok())
      return s;
    if (!h.ok())
      return h;
    return compute.sync(deadline, timeoutS);
  }

  void raiseFailure(const FailureRecord &record) override {
    host.raiseFailure(record);
  }
  bool failureSeen(FailureRecord &record) override {
    return host.failureSeen(record);
  }
  void beforeExit() override { host.beforeExit(); }

private:
  /// The device halves: one grouped ncclSend / ncclRecv per message, in
  /// (peer, tag) order on both sides (NCCL matches per peer in issue order).
  Status deviceExchange(std::vector<std::unique_ptr<NcclRequest>> &reqs,
                        Clock::time_point deadline, double timeoutS) {
    std::vector<NcclRequest *> ops;
    for (auto &r : reqs)
      if (r->deviceBytes)
        ops.push_back(r.get());
    if (ops.empty())
      return Status::success();
    std::sort(ops.begin(), ops.end(), [](NcclRequest *a, NcclRequest *b) {
      return std::make_tuple(a->isSend, a->peer, a->tag) <
             std::make_tuple(b->isSend, b->peer, b->tag);
    });
    // Multi-part messages go through one contiguous device buffer.
    std::vector<void *> staging(ops.size(), nullptr);
    auto freeStaging = [&] {
      for (void *p : staging)
        if (p)
          compute.release(p);
    };
    for (size_t i = 0; i < ops.size(); ++i) {
      NcclRequest &r = *ops[i];
      if ((r.isSend ? r.sendParts.size() : r.recvParts.size()) <= 1)
        continue;
      staging[i] = compute.alloc(r.deviceBytes);
      if (!staging[i]) {
        freeStaging();
        return Status::error(MFRT_ERR_BACKEND,
                             "cannot allocate " +
                                 std::to_string(r.deviceBytes) +
                                 " bytes of device staging memory");
      }
      if (!r.isSend)
        continue;
      size_t off = 0;
      for (const ConstSpan &p : r.sendParts) {
        Status s = compute.copy(static_cast<char *>(staging[i]) + off, p.data,
                                p.bytes);
        if (!s.ok()) {
          freeStaging();
          return s;
        }
        off += p.bytes;
      }
    }
    ncclResult_t res = ncclGroupStart();
    for (size_t i = 0; i < ops.size() && res == ncclSuccess; ++i) {
      NcclRequest &r = *ops[i];
      if (r.isSend)
        res = ncclSend(staging[i] ? staging[i] : r.sendParts[0].data,
                       r.deviceBytes, ncclUint8, r.peer, world, compute.stream);
      else
        res = ncclRecv(staging[i] ? staging[i] : r.recvParts[0].data,
                       r.deviceBytes, ncclUint8, r.peer, world, compute.stream);
    }
    ncclResult_t end = ncclGroupEnd();
    if (res == ncclSuccess)
      res = end;
    Status s;
    if (res == ncclInProgress)
      s = waitComm(world, "ncclGroupEnd (ncclSend/ncclRecv)", deadline,
                   timeoutS, host);
    else if (res != ncclSuccess)
      s = ncclFailure("ncclSend/ncclRecv", res, world);
    if (s.ok())
      s = compute.sync(deadline, timeoutS);
    if (s.code == MFRT_ERR_TIMEOUT) {
      std::set<int> peers;
      for (NcclRequest *r : ops)
        peers.insert(r->peer);
      s.detail = timeoutDetail(timeoutS, {peers.begin(), peers.end()}) +
                 " (ncclSend/ncclRecv)";
    }
    if (s.ok())
      for (size_t i = 0; i < ops.size() && s.ok(); ++i) {
        NcclRequest &r = *ops[i];
        if (r.isSend || !staging[i])
          continue;
        size_t off = 0;
        for (const Span &p : r.recvParts) {
          s = compute.copy(p.data, static_cast<char *>(staging[i]) + off,
                           p.bytes);
          off += p.bytes;
        }
      }
    if (s.ok())
      s = compute.sync(deadline, timeoutS);
    freeStaging();
    return s;
  }

  HostTransport &host;
  ncclComm_t world;
  CudaCompute &compute;
};

class NCCLNative final : public Native {
public:
  NCCLNative(ncclComm_t world, CudaCompute &compute, HostTransport &host,
             double setupTimeoutS)
      : world(world), compute(compute), host(host),
        setupTimeoutS(setupTimeoutS) {}

  Status createGroup(int64_t handle, const std::vector<int> &members,
                     int index) override {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    // Color: the group's first member, which no other group of this handle
    // has; key: the group rank, so NCCL ranks are group ranks.
    ncclResult_t res =
        ncclCommSplit(world, members.front(), index, &comm, &config);
    if (res != ncclSuccess && res != ncclInProgress)
      return ncclFailure("ncclCommSplit", res, world);
    Status s = waitComm(comm, "ncclCommSplit", deadlineIn(setupTimeoutS),
                        setupTimeoutS, host);
    if (!s.ok())
      return s;
    comms[handle] = comm;
    return Status::success();
  }

  Status allGather(int64_t group, const void *send, void *recv, int64_t count,
                   mfrt_dtype dtype, Clock::time_point deadline,
                   double timeoutS) override {
    ncclComm_t comm = comms.at(group);
    return finish(comm, "ncclAllGather",
                  ncclAllGather(send, recv, size_t(count), ncclType(dtype),
                                comm, compute.stream),
                  deadline, timeoutS);
  }

  Status reduceScatter(int64_t group, const void *send, void *recv,
                       int64_t count, mfrt_dtype dtype,
                       Clock::time_point deadline, double timeoutS) override {
    ncclComm_t comm = comms.at(group);
    int n = 0;
    ncclCommCount(comm, &n);
    if (dtype == MFRT_F32)
      return finish(comm, "ncclReduceScatter",
                    ncclReduceScatter(send, recv, size_t(count), ncclFloat32,
                                      ncclSum, comm, compute.stream),
                    deadline, timeoutS);
    // f32 accumulation: widen, reduce in f32, narrow.
    return widened(int64_t(n) * count, count, send, recv, dtype, deadline,
                   timeoutS, [&](const float *in, float *out) {
                     return finish(comm, "ncclReduceScatter",
                                   ncclReduceScatter(in, out, size_t(count),
                                                     ncclFloat32, ncclSum, comm,
                                                     compute.stream),
                                   deadline, timeoutS);
                   });
  }

  Status allReduce(int64_t group, const void *send, void *recv, int64_t count,
                   mfrt_dtype dtype, Clock::time_point deadline,
                   double timeoutS) override {
    ncclComm_t comm = comms.at(group);
    if (dtype == MFRT_F32)
      return finish(comm, "ncclAllReduce",
                    ncclAllReduce(send, recv, size_t(count), ncclFloat32,
                                  ncclSum, comm, compute.stream),
                    deadline, timeoutS);
    return widened(count, count, send, recv, dtype, deadline, timeoutS,
                   [&](const float *in, float *out) {
                     return finish(comm, "ncclAllReduce",
                                   ncclAllReduce(in, out, size_t(count),
                                                 ncclFloat32, ncclSum, comm,
                                                 compute.stream),
                                   deadline, timeoutS);
                   });
  }

  void shutdown(bool success) {
    for (auto &[handle, comm] : comms) {
      if (success && ncclCommFinalize(comm) == ncclInProgress)
        (void)waitComm(comm, "ncclCommFinalize", deadlineIn(30), 30, host);
      if (success)
        ncclCommDestroy(comm);
      else
        ncclCommAbort(comm);
    }
    comms.clear();
  }

  ncclComm_t world;

private:
  /// Waits for an enqueued collective.
  Status finish(ncclComm_t comm, const char *call, ncclResult_t res,
                Clock::time_point deadline, double timeoutS) {
    Status s;
    if (res == ncclInProgress)
      s = waitComm(comm, call, deadline, timeoutS, host);
    else if (res != ncclSuccess)
      s = ncclFailure(call, res, comm);
    if (s.ok())
      s = compute.sync(deadline, timeoutS);
    return s;
  }

  template <typename F>
  Status widened(int64_t inCount, int64_t outCount, const void *send,
                 void *recv, mfrt_dtype dtype, Clock::time_point deadline,
                 double timeoutS, F reduce) {
    float *in = static_cast<float *>(compute.alloc(size_t(inCount) * 4));
    float *out = static_cast<float *>(compute.alloc(size_t(outCount) * 4));
    Status s;
    if (!in || !out)
      s = Status::error(MFRT_ERR_BACKEND,
                        "cannot allocate the f32 reduction buffers");
    cudaError_t err = cudaSuccess;
    if (s.ok() && (err = cuda::toF32(in, send, inCount, int(dtype),
                                     compute.stream)) != cudaSuccess)
      s = cudaFailure("toF32 kernel", err);
    if (s.ok())
      s = reduce(in, out);
    if (s.ok() && (err = cuda::fromF32(recv, out, outCount, int(dtype),
                                       compute.stream)) != cudaSuccess)
      s = cudaFailure("fromF32 kernel", err);
    if (s.ok())
      s = compute.sync(deadline, timeoutS);
    if (in)
      compute.release(in);
    if (out)
      compute.release(out);
    return s;
  }

  CudaCompute &compute;
  HostTransport &host;
  double setupTimeoutS;
  std::map<int64_t, ncclComm_t> comms;
};

class NCCLBackend final : public PluginBackend {
public:
  static NCCLBackend *create(const PluginRequest &request, std::string *error);
  ~NCCLBackend() override {
    native_.reset();
    transport_.reset();
    compute_.reset();
    if (stream && ownsStream)
      cudaStreamDestroy(stream);
  }

  Transport &transport() override { return *transport_; }
  Compute *compute() override { return compute_.get(); }
  Native *native() override { return native_.get(); }

  FailureRecord finish(const FailureRecord &mine, double timeoutS) override {
    return host->finish(mine, timeoutS);
  }

  void shutdown(bool success) override {
    if (native_) {
      native_->shutdown(success);
      ncclComm_t world = native_->world;
      if (success && ncclCommFinalize(world) == ncclInProgress)
        (void)waitComm(world, "ncclCommFinalize", deadlineIn(30), 30, *host);
      if (success)
        ncclCommDestroy(world);
      else
        ncclCommAbort(world);
    }
    host->shutdown(success);
  }

private:
  HostTransport *host = nullptr;
  cudaStream_t stream = nullptr;
  /// False when the stream is the program's (CUDA mode).
  bool ownsStream = true;
  std::unique_ptr<CudaCompute> compute_;
  std::unique_ptr<NCCLTransport> transport_;
  std::unique_ptr<NCCLNative> native_;
};

/// Rank 0's ncclUniqueId, sent to every rank over the host transport.
Status shareUniqueId(HostTransport &host, ncclUniqueId &id, double timeoutS) {
  const Tag tag = makeTag(kBootstrapChannel, 0, 0);
  std::vector<Request *> reqs;
  if (host.rank() == 0) {
    if (ncclResult_t res = ncclGetUniqueId(&id); res != ncclSuccess) {
      Status s = ncclFailure("ncclGetUniqueId", res, nullptr);
      host.raiseFailure(FailureRecord{0, s.code, s.detail});
      return s;
    }
    ConstSpan part{&id, sizeof(id), true};
    for (int p = 1; p < host.size(); ++p)
      reqs.push_back(host.isend(p, tag, &part, 1));
  } else {
    Span part{&id, sizeof(id), true};
    reqs.push_back(host.irecv(0, tag, &part, 1));
  }
  return host.waitAll(reqs.data(), reqs.size(), deadlineIn(timeoutS), timeoutS);
}

NCCLBackend *NCCLBackend::create(const PluginRequest &request,
                                 std::string *error) {
  if (!request.host) {
    *error = "the nccl backend needs the core's host transport";
    return nullptr;
  }
  auto b = std::make_unique<NCCLBackend>();
  b->host = request.host;
  auto fail = [&](const Status &s) -> NCCLBackend * {
    *error = s.detail;
    return nullptr;
  };
  // One GPU per process: the rank's index among its node's processes.
  const int localRank = b->host->localRank();
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess)
    return fail(cudaFailure("cudaGetDeviceCount", err));
  if (devices < 1)
    return fail(Status::error(MFRT_ERR_BACKEND, "no CUDA device"));
  if ((err = cudaSetDevice(localRank % devices)) != cudaSuccess)
    return fail(cudaFailure("cudaSetDevice", err));
  if (request.device) {
    // The program's stream (same primary context as cudaSetDevice's).
    Status s = request.device->attach(b->host->rank(), localRank % devices);
    if (!s.ok())
      return fail(s);
    b->stream = static_cast<cudaStream_t>(request.device->stream());
    b->ownsStream = false;
  } else if ((err = cudaStreamCreateWithFlags(
                  &b->stream, cudaStreamNonBlocking)) != cudaSuccess) {
    return fail(cudaFailure("cudaStreamCreateWithFlags", err));
  }

  // The world communicator, bootstrapped like nccl-tests.
  const double setupS = std::max(60.0, request.timeoutS);
  ncclUniqueId id;
  if (Status s = shareUniqueId(*b->host, id, setupS); !s.ok()) {
    *error = s.code == MFRT_ERR_PEER ? "rank " + std::to_string(s.cause.rank) +
                                           " failed: " + s.cause.detail
                                     : s.detail;
    return nullptr;
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t world = nullptr;
  ncclResult_t res = ncclCommInitRankConfig(&world, b->host->size(), id,
                                            b->host->rank(), &config);
  Status s;
  if (res == ncclInProgress)
    s = waitComm(world, "ncclCommInitRankConfig", deadlineIn(setupS), setupS,
                 *b->host);
  else if (res != ncclSuccess)
    s = ncclFailure("ncclCommInitRankConfig", res, world);
  if (!s.ok())
    return fail(s);

  b->compute_ = std::make_unique<CudaCompute>(b->stream, *b->host);
  b->transport_ =
      std::make_unique<NCCLTransport>(*b->host, world, *b->compute_);
  b->native_ =
      std::make_unique<NCCLNative>(world, *b->compute_, *b->host, setupS);
  return b.release();
}

} // namespace

extern "C" __attribute__((visibility("default"))) PluginBackend *
mfrt_comm_plugin_create(const PluginRequest *request, std::string *error) {
  if (!request || request->abiVersion != kPluginAbiVersion) {
    *error = "libmfrt_nccl.so was built for another runtime version";
    return nullptr;
  }
  if (request->backend != MFRT_BACKEND_NCCL) {
    *error = "libmfrt_nccl.so provides only the nccl backend";
    return nullptr;
  }
  return NCCLBackend::create(*request, error);
}
