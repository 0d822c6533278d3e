//===- CudaDevice.cpp - The runtime's CUDA device (driver API) ------------===//

#include "mfrt/cuda/CudaDevice.h"
#include "mfrt/cuda/CudaError.h"

#include <algorithm>

using namespace mfrt::cuda;
using mfrt::comm::Status;

namespace {
struct ThreadState {
  bool attached = false;
  int rank = -1;
  CUstream stream = nullptr;
  CUfunction lastKernel = nullptr;
};
thread_local ThreadState tState;

Status failure(const std::string &call, CUresult r) {
  return Status::error(MFRT_ERR_BACKEND, cudaErrorMessage(call, r));
}

#define CU_TRY(call, what)                                                     \
  do {                                                                         \
    CUresult _r = (call);                                                      \
    if (_r != CUDA_SUCCESS)                                                    \
      return failure(what, _r);                                                \
  } while (0)
} // namespace

std::string mfrt::cuda::cudaErrorMessage(const std::string &call,
                                         CUresult result) {
  const char *name = nullptr, *text = nullptr;
  if (cuGetErrorName(result, &name) != CUDA_SUCCESS)
    name = nullptr;
  if (cuGetErrorString(result, &text) != CUDA_SUCCESS)
    text = nullptr;
  return formatCudaError(call, int(result), name, text);
}

CudaDevice &CudaDevice::get() {
  static CudaDevice instance;
  return instance;
}

Status CudaDevice::deviceCount(int &count) {
  count = 0;
  CU_TRY(cuInit(0), "cuInit");
  CU_TRY(cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (count < 1)
    return Status::error(MFRT_ERR_BACKEND, "no CUDA device is visible");
  return Status::success();
}

Status CudaDevice::initContext(int wanted) {
  std::lock_guard<std::mutex> lock(mutex);
  if (initialized) {
    if (wanted != ordinal)
      return Status::error(MFRT_ERR_BACKEND,
                           "this process already uses CUDA device " +
                               std::to_string(ordinal) + ", not device " +
                               std::to_string(wanted) +
                               " (one context per process)");
    return Status::success();
  }
  int count = 0;
  CU_TRY(cuInit(0), "cuInit");
  CU_TRY(cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (count < 1)
    return Status::error(MFRT_ERR_BACKEND, "no CUDA device is visible");
  if (wanted < 0 || wanted >= count)
    return Status::error(MFRT_ERR_BACKEND,
                         "CUDA device " + std::to_string(wanted) +
                             " does not exist (" + std::to_string(count) +
                             " visible)");
  CU_TRY(cuDeviceGet(&device, wanted), "cuDeviceGet");
  CU_TRY(cuDevicePrimaryCtxRetain(&context, device),
         "cuDevicePrimaryCtxRetain");
  int concurrent = 0;
  CU_TRY(cuDeviceGetAttribute(&concurrent,
                              CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
                              device),
         "cuDeviceGetAttribute(CONCURRENT_MANAGED_ACCESS)");
  prefetch = concurrent != 0;
  int pools = 0;
  CU_TRY(cuDeviceGetAttribute(
             &pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device),
         "cuDeviceGetAttribute(MEMORY_POOLS_SUPPORTED)");
  memoryPools = pools != 0;
  if (memoryPools) {
    // Freed buffers stay in the pool for the next allocation instead of
    // going back to the driver at every synchronization: a forward pass
    // allocates the same sizes layer after layer.
    CUmemoryPool pool = nullptr;
    CU_TRY(cuDeviceGetDefaultMemPool(&pool, device),
           "cuDeviceGetDefaultMemPool");
    cuuint64_t keep = ~cuuint64_t(0);
    CU_TRY(
        cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep),
        "cuMemPoolSetAttribute(RELEASE_THRESHOLD)");
  }
  ordinal = wanted;
  initialized = true;
  // The primary context is kept for the life of the process: modules,
  // weights and the plugin's memory live in it.
  return Status::success();
}

Status CudaDevice::attach(int rank, int wanted) {
  if (tState.attached) {
    if (tState.rank == rank)
      return Status::success();
    return Status::error(MFRT_ERR_BACKEND,
                         "this thread is already attached to rank " +
                             std::to_string(tState.rank));
  }
  Status s = initContext(wanted);
  if (!s.ok())
    return s;
  CU_TRY(cuCtxSetCurrent(context), "cuCtxSetCurrent");
  CUstream stream = nullptr;
  CU_TRY(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  {
    std::lock_guard<std::mutex> lock(mutex);
    rankStreams.insert(stream);
  }
  tState.attached = true;
  tState.rank = rank;
  tState.stream = stream;
  tState.lastKernel = nullptr;
  return Status::success();
}

bool CudaDevice::attached() const { return tState.attached; }

void CudaDevice::detach() {
  if (!tState.attached)
    return;
  (void)cuStreamSynchronize(tState.stream);
  {
    std::lock_guard<std::mutex> lock(mutex);
    rankStreams.erase(tState.stream);
  }
  (void)cuStreamDestroy(tState.stream);
  tState = ThreadState();
}

void *CudaDevice::stream() {
  return tState.attached ? static_cast<void *>(tState.stream) : nullptr;
}

CUstream CudaDevice::currentStream() const { return tState.stream; }

bool CudaDevice::isRankStream(CUstream stream) {
  std::lock_guard<std::mutex> lock(mutex);
  return rankStreams.count(stream) != 0;
}

Status CudaDevice::ensureThread() {
  if (tState.attached)
    return Status::success();
  int wanted = defaultOrdinal;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (initialized)
      wanted = ordinal;
  }
  return attach(-1, wanted);
}

Status CudaDevice::synchronize() {
  if (!tState.attached)
    return Status::success();
  CUresult r = cuStreamSynchronize(tState.stream);
  if (r == CUDA_SUCCESS)
    return Status::success();
  std::string msg = cudaErrorMessage("cuStreamSynchronize", r);
  if (tState.lastKernel)
    msg += " (last kernel launched by this rank: " +
           kernelName(tState.lastKernel) + ")";
  return Status::error(MFRT_ERR_BACKEND, msg);
}

Status CudaDevice::copyAsync(void *dst, const void *src, size_t bytes) {
  if (!bytes || dst == src)
    return Status::success();
  Status s = ensureThread();
  if (!s.ok())
    return s;
  CU_TRY(cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst),
                       reinterpret_cast<CUdeviceptr>(src), bytes,
                       tState.stream),
         "cuMemcpyAsync(" + std::to_string(bytes) + " bytes)");
  return Status::success();
}

Status CudaDevice::allocManaged(size_t bytes, CUstream stream, void **ptr) {
  *ptr = nullptr;
  Status s = ensureThread();
  if (!s.ok())
    return s;
  CUdeviceptr p = 0;
  bytes = std::max<size_t>(bytes, 1);
  CU_TRY(cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL),
         "cuMemAllocManaged(" + std::to_string(bytes) + " bytes)");
  if (prefetch) {
#if CUDA_VERSION >= 12020
    CUmemLocation where{};
    where.type = CU_MEM_LOCATION_TYPE_DEVICE;
    where.id = ordinal;
    CUresult r =
        cuMemPrefetchAsync(p, bytes, where, 0, stream ? stream : tState.stream);
#else
    CUresult r =
        cuMemPrefetchAsync(p, bytes, device, stream ? stream : tState.stream);
#endif
    if (r != CUDA_SUCCESS) {
      (void)cuMemFree(p);
      return failure("cuMemPrefetchAsync(" + std::to_string(bytes) +
                         " bytes to device " + std::to_string(ordinal) + ")",
                     r);
    }
  }
  *ptr = reinterpret_cast<void *>(p);
  return Status::success();
}

Status CudaDevice::allocShared(size_t bytes, void **ptr) {
  return allocManaged(bytes, nullptr, ptr);
}

Status CudaDevice::allocDevice(size_t bytes, void **ptr) {
  *ptr = nullptr;
  Status s = ensureThread();
  if (!s.ok())
    return s;
  CUdeviceptr p = 0;
  bytes = std::max<size_t>(bytes, 1);
  CU_TRY(cuMemAlloc(&p, bytes),
         "cuMemAlloc(" + std::to_string(bytes) + " bytes)");
  *ptr = reinterpret_cast<void *>(p);
  return Status::success();
}

Status CudaDevice::allocOnStream(size_t bytes, CUstream stream, void **ptr) {
  if (!memoryPools)
    return allocDevice(bytes, ptr);
  *ptr = nullptr;
  Status s = ensureThread();
  if (!s.ok())
    return s;
  CUdeviceptr p = 0;
  bytes = std::max<size_t>(bytes, 1);
  CU_TRY(cuMemAllocAsync(&p, bytes, stream ? stream : tState.stream),
         "cuMemAllocAsync(" + std::to_string(bytes) + " bytes)");
  *ptr = reinterpret_cast<void *>(p);
  return Status::success();
}

Status CudaDevice::freeOnStream(void *ptr, CUstream stream) {
  if (!ptr)
    return Status::success();
  CUstream on = stream ? stream : tState.stream;
  if (!memoryPools) {
    CU_TRY(cuStreamSynchronize(on), "cuStreamSynchronize (before cuMemFree)");
    CU_TRY(cuMemFree(reinterpret_cast<CUdeviceptr>(ptr)), "cuMemFree");
    return Status::success();
  }
  CU_TRY(cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(ptr), on),
         "cuMemFreeAsync");
  return Status::success();
}

void CudaDevice::release(void *ptr) {
  if (ptr)
    (void)cuMemFree(reinterpret_cast<CUdeviceptr>(ptr));
}

void CudaDevice::nameKernel(CUfunction function, const std::string &name) {
  std::lock_guard<std::mutex> lock(namesMutex);
  kernelNames.emplace(function, name);
}

std::string CudaDevice::kernelName(CUfunction function) {
  std::lock_guard<std::mutex> lock(namesMutex);
  auto it = kernelNames.find(function);
  return it == kernelNames.end() ? std::string("<unknown kernel>") : it->second;
}

void CudaDevice::noteLaunch(CUfunction function) {
  tState.lastKernel = function;
}

std::string CudaDevice::lastKernel() {
  return tState.lastKernel ? kernelName(tState.lastKernel) : std::string();
}
