//===- CudaDevice.h - The runtime's CUDA device (driver API) ----*- C++ -*-===//
//
// One CUDA context per process: the primary context of the process's device
// (under mpi / nccl the local rank modulo the device count, under the local
// backend device 0 for every rank). One stream per rank: ranks are threads
// under the local backend, so the stream is thread-local state set by
// attach(); mgpuStreamCreate returns it and mgpuStreamDestroy of it does
// nothing, so the program's kernels, the runtime's copies and NCCL share it.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_CUDA_CUDADEVICE_H
#define MFRT_CUDA_CUDADEVICE_H

#include "mfrt/comm/Device.h"

#include <cuda.h>

#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

namespace mfrt::cuda {

/// "<call> failed: <name> (<code>): <text>" for a failed driver call.
std::string cudaErrorMessage(const std::string &call, CUresult result);

class CudaDevice final : public comm::Device {
public:
  static CudaDevice &get();

  const char *name() const override { return "cuda"; }
  comm::Status deviceCount(int &count) override;
  comm::Status attach(int rank, int ordinal) override;
  bool attached() const override;
  void detach() override;
  void *stream() override;
  comm::Status synchronize() override;
  comm::Status copyAsync(void *dst, const void *src, size_t bytes) override;
  comm::Status allocShared(size_t bytes, void **ptr) override;
  comm::Status allocDevice(size_t bytes, void **ptr) override;
  void release(void *ptr) override;

  /// For the mgpu ABI: attaches a thread that is not a rank (a test, a
  /// benchmark) to the default device with a stream of its own.
  comm::Status ensureThread();
  /// The calling thread's stream (after ensureThread).
  CUstream currentStream() const;
  bool isRankStream(CUstream stream);
  void setDefaultOrdinal(int ordinal) { defaultOrdinal = ordinal; }
  /// Allocates managed memory and prefetches it to the device on `stream`.
  comm::Status allocManaged(size_t bytes, CUstream stream, void **ptr);
  /// Device memory from the device's stream-ordered pool, usable on
  /// `stream` from now on (cuMemAllocAsync; cuMemAlloc where the device has
  /// no memory pools).
  comm::Status allocOnStream(size_t bytes, CUstream stream, void **ptr);
  /// Returns memory of allocOnStream to the pool once the work queued on
  /// `stream` so far is done, without waiting for it.
  comm::Status freeOnStream(void *ptr, CUstream stream);
  /// Kernel names, for error messages.
  void nameKernel(CUfunction function, const std::string &name);
  std::string kernelName(CUfunction function);
  /// The kernel most recently launched by the calling thread (diagnostics).
  void noteLaunch(CUfunction function);
  std::string lastKernel();

private:
  CudaDevice() = default;
  /// Initializes the driver and the process's context, once.
  comm::Status initContext(int ordinal);

  std::mutex mutex;
  bool initialized = false;
  int ordinal = -1;
  int defaultOrdinal = 0;
  bool prefetch = false;
  bool memoryPools = false;
  CUdevice device = 0;
  CUcontext context = nullptr;
  std::set<CUstream> rankStreams;
  std::mutex namesMutex;
  std::unordered_map<CUfunction, std::string> kernelNames;
};

} // namespace mfrt::cuda

#endif // MFRT_CUDA_CUDADEVICE_H
