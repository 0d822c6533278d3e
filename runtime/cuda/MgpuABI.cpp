//===- MgpuABI.cpp - The upstream MLIR GPU host ABI on the driver API -----===//
//
// Semantics (see MgpuABI.h for the signatures):
//  - every call runs in the process's context on the calling rank's stream
//    (CudaDevice); mgpuStreamCreate returns that stream and mgpuStreamDestroy
//    of it does nothing, so a synchronous gpu.launch_func (create, launch,
//    synchronize, destroy) is a launch plus a synchronization of the rank's
//    stream;
//  - gpu.alloc host_shared (a buffer the host or the runtime reads) is
//    managed memory prefetched to the device: kernels, the runtime's
//    collectives and host code use the same pointers; gpu.alloc (a buffer
//    only kernels use, mf-gpu-device-memory) is device memory from the
//    device's stream-ordered pool, allocated and freed in the order of the
//    rank's stream, so a free does not wait for the kernels before it;
//  - a failed driver call ends the program through the runtime's failure
//    path (comm::failRank): the message names the call, its key arguments
//    and the CUDA error, and the other ranks stop instead of waiting. Calls
//    made outside any rank (global destructors at exit) only print a
//    warning, and not at all when the driver is already shutting down;
//  - modules: mgpuModuleLoad only records the blob (it runs in a global
//    constructor, before main, before a device is chosen); the CUDA module is
//    loaded once per process on the first mgpuModuleGetFunction, and kernels
//    are looked up once per name. Repeated loads of one blob share a handle.
//
//===----------------------------------------------------------------------===//

#include "mfrt/cuda/MgpuABI.h"
#include "mfrt/cuda/CudaDevice.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

using namespace mfrt::cuda;
using mfrt::comm::Status;

namespace {

/// Registers the device with the runtime core when this object is linked
/// (it is, as soon as a program calls any mgpu function).
struct Registrar {
  Registrar() { mfrt::comm::registerDevice(&CudaDevice::get()); }
} registrar;

CudaDevice &dev() { return CudaDevice::get(); }

/// Fails the program (see the file comment) unless the call succeeded.
void check(CUresult r, const std::string &call) {
  if (r == CUDA_SUCCESS)
    return;
  mfrt::comm::failRank(MFRT_ERR_BACKEND, cudaErrorMessage(call, r));
}

void check(const Status &s) {
  if (!s.ok())
    mfrt::comm::failRank(s.code, s.detail);
}

/// For calls that run at process exit: report, never exit.
void warn(CUresult r, const char *call) {
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_DEINITIALIZED)
    return;
  std::fprintf(stderr, "mfrt: warning: %s\n",
               cudaErrorMessage(call, r).c_str());
}

/// The calling thread is attached (a rank), or gets the default device.
void ready() { check(dev().ensureThread()); }

CUstream streamOr(CUstream s) { return s ? s : dev().currentStream(); }

/// Device copies of TMA maps of this thread's (rank's) short-lived buffers,
/// made since its last launch: the launch that reads them frees them after
/// itself, in stream order.
thread_local std::vector<void *> launchScopedMaps;

/// Returns this thread's launch-scoped maps to the pool after the work
/// queued on `stream` so far (the launch that reads them).
void releaseLaunchScopedMaps(CUstream stream) {
  for (void *map : launchScopedMaps)
    check(dev().freeOnStream(map, stream));
  launchScopedMaps.clear();
}

/// Whether `p` lies in memory of the device's stream-ordered pool (the
/// program's temporaries, such as a contraction's bf16 activation copy):
/// such a buffer lives for a launch or two, and its address is reused.
bool inStreamPool(const void *p) {
  CUmemoryPool pool = nullptr;
  return cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
                               reinterpret_cast<CUdeviceptr>(p)) ==
             CUDA_SUCCESS &&
         pool;
}

/// The device copy of `map` for one launch on `stream`: made in stream
/// order (the host copy is freed by a host function once the copy ran) and
/// freed after the next launch of this thread.
void *launchScopedMap(const CUtensorMap &map, CUstream stream) {
  void *dmap = nullptr;
  check(dev().allocOnStream(sizeof(CUtensorMap), stream, &dmap));
  auto *host = new CUtensorMap(map);
  check(cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(dmap), host,
                          sizeof(CUtensorMap), stream),
        "cuMemcpyHtoDAsync(CUtensorMap)");
  check(
      cuLaunchHostFunc(
          stream, [](void *p) { delete static_cast<CUtensorMap *>(p); }, host),
      "cuLaunchHostFunc(after copying a CUtensorMap)");
  launchScopedMaps.push_back(dmap);
  return dmap;
}

/// A gpu.binary: PTX (JIT) or cubin / fatbin.
struct LoadedBinary {
  const void *data = nullptr;
  size_t size = 0; // 0 for PTX (null-terminated)
  bool jit = false;
  int optLevel = 0;
  int refs = 0;
  std::mutex mutex;
  CUmodule module = nullptr;
  std::unordered_map<std::string, CUfunction> functions;
};

/// The loaded binaries. The program's module constructors call
/// mgpuModuleLoad before this file's globals would be constructed, and its
/// destructors call mgpuModuleUnload after they would be destroyed: the
/// cache is made on first use and never destroyed.
struct BinaryCache {
  std::mutex mutex;
  std::map<std::pair<const void *, size_t>, std::unique_ptr<LoadedBinary>>
      binaries;
};
BinaryCache &binaryCache() {
  static BinaryCache *cache = new BinaryCache;
  return *cache;
}

CUmodule handleFor(const void *data, size_t size, bool jit, int optLevel) {
  BinaryCache &cache = binaryCache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto key = std::make_pair(data, jit ? size_t(-1) : size);
  std::unique_ptr<LoadedBinary> &slot = cache.binaries[key];
  if (!slot) {
    slot = std::make_unique<LoadedBinary>();
    slot->data = data;
    slot->size = jit ? 0 : size;
    slot->jit = jit;
    slot->optLevel = optLevel;
  }
  ++slot->refs;
  return reinterpret_cast<CUmodule>(slot.get());
}

/// Loads the binary's module in the process's context (once).
void loadModule(LoadedBinary &b) {
  if (b.module)
    return;
  if (!b.jit) {
    check(cuModuleLoadData(&b.module, b.data),
          "cuModuleLoadData(" + std::to_string(b.size) + "-byte cubin)");
    return;
  }
  // PTX: keep the JIT's error log for the message.
  std::vector<char> log(8192, 0);
  CUjit_option options[] = {CU_JIT_OPTIMIZATION_LEVEL, CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {reinterpret_cast<void *>(intptr_t(b.optLevel)), log.data(),
                    reinterpret_cast<void *>(intptr_t(log.size() - 1))};
  CUresult r = cuModuleLoadDataEx(&b.module, b.data, 3, options, values);
  if (r != CUDA_SUCCESS) {
    std::string msg = cudaErrorMessage(
        "cuModuleLoadDataEx(PTX, -O" + std::to_string(b.optLevel) + ")", r);
    if (log[0])
      msg += "; JIT log: " + std::string(log.data());
    mfrt::comm::failRank(MFRT_ERR_BACKEND, msg);
  }
}

std::string kernelName(CUfunction f) { return dev().kernelName(f); }

std::string dims(intptr_t x, intptr_t y, intptr_t z) {
  return "(" + std::to_string(x) + "," + std::to_string(y) + "," +
         std::to_string(z) + ")";
}

/// MFRT_PROFILE_KERNELS=1 (a benchmarking aid): every launch is timed with
/// a pair of events on its stream, and at exit a table of the kernels by
/// total time goes to stderr. Launches wait for their kernel then, and ranks
/// sharing a GPU overlap theirs: profile one-rank programs for clean times.
struct KernelProfile {
  std::mutex mutex;
  struct Entry {
    int64_t launches = 0;
    double ms = 0;
  };
  std::map<std::string, Entry> byName;
};

bool profiling() {
  static const bool on = [] {
    const char *v = std::getenv("MFRT_PROFILE_KERNELS");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

KernelProfile &kernelProfile() {
  static KernelProfile *profile = [] {
    auto *p = new KernelProfile;
    std::atexit([] {
      KernelProfile &kp = kernelProfile();
      std::lock_guard<std::mutex> lock(kp.mutex);
      std::vector<std::pair<std::string, KernelProfile::Entry>> rows(
          kp.byName.begin(), kp.byName.end());
      std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) {
        return a.second.ms > b.second.ms;
      });
      double total = 0;
      for (const auto &r : rows)
        total += r.second.ms;
      std::fprintf(stderr,
                   "kernel profile (MFRT_PROFILE_KERNELS): %zu kernels, "
                   "%.3f ms in all\n  %-36s %9s %12s %12s %7s\n",
                   rows.size(), total, "kernel", "launches", "total ms",
                   "mean us", "share");
      for (const auto &[name, e] : rows)
        std::fprintf(stderr, "  %-36s %9lld %12.3f %12.2f %6.1f%%\n",
                     name.c_str(), (long long)e.launches, e.ms,
                     e.ms * 1e3 / double(e.launches),
                     total > 0 ? 100.0 * e.ms / total : 0.0);
    });
    return p;
  }();
  return *profile;
}

/// Kernels asking for more than the default 48 KiB of dynamic shared memory
/// must opt in.
void allowSharedMemory(CUfunction f, int32_t smem) {
  if (smem <= 48 * 1024)
    return;
  check(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                           smem),
        "cuFuncSetAttribute(" + kernelName(f) +
            ", MAX_DYNAMIC_SHARED_SIZE_BYTES, " + std::to_string(smem) + ")");
}

} // namespace

extern "C" {

void mfrt_cuda_register(void) {
  mfrt::comm::registerDevice(&CudaDevice::get());
}

CUmodule mgpuModuleLoad(void *data, size_t gpuBlobSize) {
  return handleFor(data, gpuBlobSize, /*jit=*/false, 0);
}

CUmodule mgpuModuleLoadJIT(void *data, int optLevel) {
  return handleFor(data, 0, /*jit=*/true, optLevel);
}

void mgpuModuleUnload(CUmodule module) {
  auto *b = reinterpret_cast<LoadedBinary *>(module);
  if (!b)
    return;
  BinaryCache &cache = binaryCache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  if (--b->refs > 0)
    return;
  if (b->module)
    warn(cuModuleUnload(b->module), "cuModuleUnload");
  cache.binaries.erase(std::make_pair(b->data, b->jit ? size_t(-1) : b->size));
}

CUfunction mgpuModuleGetFunction(CUmodule module, const char *name) {
  ready();
  auto *b = reinterpret_cast<LoadedBinary *>(module);
  if (!b)
    mfrt::comm::failRank(MFRT_ERR_BACKEND,
                         std::string("mgpuModuleGetFunction(") + name +
                             "): no module");
  std::lock_guard<std::mutex> lock(b->mutex);
  auto it = b->functions.find(name);
  if (it != b->functions.end())
    return it->second;
  loadModule(*b);
  CUfunction f = nullptr;
  check(cuModuleGetFunction(&f, b->module, name),
        std::string("cuModuleGetFunction(") + name + ")");
  b->functions.emplace(name, f);
  dev().nameKernel(f, name);
  return f;
}

void mgpuLaunchKernel(CUfunction function, intptr_t gridX, intptr_t gridY,
                      intptr_t gridZ, intptr_t blockX, intptr_t blockY,
                      intptr_t blockZ, int32_t smem, CUstream stream,
                      void **params, void **extra, size_t /*paramsCount*/) {
  ready();
  allowSharedMemory(function, smem);
  CUstream s = streamOr(stream);
  CUevent begin = nullptr, end = nullptr;
  if (profiling()) {
    check(cuEventCreate(&begin, CU_EVENT_DEFAULT), "cuEventCreate");
    check(cuEventCreate(&end, CU_EVENT_DEFAULT), "cuEventCreate");
    check(cuEventRecord(begin, s), "cuEventRecord");
  }
  CUresult r =
      cuLaunchKernel(function, unsigned(gridX), unsigned(gridY),
                     unsigned(gridZ), unsigned(blockX), unsigned(blockY),
                     unsigned(blockZ), unsigned(smem), s, params, extra);
  if (r != CUDA_SUCCESS)
    check(r, "cuLaunchKernel(" + kernelName(function) + ", grid " +
                 dims(gridX, gridY, gridZ) + ", block " +
                 dims(blockX, blockY, blockZ) + ", " + std::to_string(smem) +
                 " B shared)");
  dev().noteLaunch(function);
  releaseLaunchScopedMaps(s);
  if (begin) {
    check(cuEventRecord(end, s), "cuEventRecord");
    check(cuEventSynchronize(end),
          "cuEventSynchronize(after " + kernelName(function) + ")");
    float ms = 0;
    check(cuEventElapsedTime(&ms, begin, end), "cuEventElapsedTime");
    warn(cuEventDestroy(begin), "cuEventDestroy");
    warn(cuEventDestroy(end), "cuEventDestroy");
    KernelProfile &kp = kernelProfile();
    std::lock_guard<std::mutex> lock(kp.mutex);
    KernelProfile::Entry &e = kp.byName[kernelName(function)];
    ++e.launches;
    e.ms += ms;
  }
}

void mgpuLaunchClusterKernel(CUfunction function, intptr_t clusterX,
                             intptr_t clusterY, intptr_t clusterZ,
                             intptr_t gridX, intptr_t gridY, intptr_t gridZ,
                             intptr_t blockX, intptr_t blockY, intptr_t blockZ,
                             int32_t smem, CUstream stream, void **params,
                             void **extra) {
  ready();
  allowSharedMemory(function, smem);
  // Clusters above the portable size (8) must be allowed explicitly.
  if (clusterX * clusterY * clusterZ > 8)
    check(cuFuncSetAttribute(
              function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
          "cuFuncSetAttribute(" + kernelName(function) +
              ", NON_PORTABLE_CLUSTER_SIZE_ALLOWED)");
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = unsigned(clusterX);
  attr.value.clusterDim.y = unsigned(clusterY);
  attr.value.clusterDim.z = unsigned(clusterZ);
  CUlaunchConfig config{};
  config.gridDimX = unsigned(gridX);
  config.gridDimY = unsigned(gridY);
  config.gridDimZ = unsigned(gridZ);
  config.blockDimX = unsigned(blockX);
  config.blockDimY = unsigned(blockY);
  config.blockDimZ = unsigned(blockZ);
  config.sharedMemBytes = unsigned(smem);
  config.hStream = streamOr(stream);
  config.attrs = &attr;
  config.numAttrs = 1;
  CUresult r = cuLaunchKernelEx(&config, function, params, extra);
  if (r != CUDA_SUCCESS)
    check(r, "cuLaunchKernelEx(" + kernelName(function) + ", cluster " +
                 dims(clusterX, clusterY, clusterZ) + ", grid " +
                 dims(gridX, gridY, gridZ) + ", block " +
                 dims(blockX, blockY, blockZ) + ", " + std::to_string(smem) +
                 " B shared)");
  dev().noteLaunch(function);
  releaseLaunchScopedMaps(config.hStream);
}

CUstream mgpuStreamCreate(void) {
  ready();
  return dev().currentStream();
}

void mgpuStreamDestroy(CUstream stream) {
  // The rank's stream lives as long as the rank.
  if (!stream || dev().isRankStream(stream))
    return;
  warn(cuStreamDestroy(stream), "cuStreamDestroy");
}

void mgpuStreamSynchronize(CUstream stream) {
  CUresult r = cuStreamSynchronize(streamOr(stream));
  if (r == CUDA_SUCCESS)
    return;
  std::string last = dev().lastKernel();
  mfrt::comm::failRank(
      MFRT_ERR_BACKEND,
      cudaErrorMessage("cuStreamSynchronize", r) +
          (last.empty()
               ? ""
               : " (last kernel launched by this rank: " + last + ")"));
}

void mgpuStreamWaitEvent(CUstream stream, CUevent event) {
  check(cuStreamWaitEvent(streamOr(stream), event, 0), "cuStreamWaitEvent");
}

CUevent mgpuEventCreate(void) {
  ready();
  CUevent event = nullptr;
  check(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  return event;
}

void mgpuEventDestroy(CUevent event) {
  warn(cuEventDestroy(event), "cuEventDestroy");
}

void mgpuEventSynchronize(CUevent event) {
  check(cuEventSynchronize(event), "cuEventSynchronize");
}

void mgpuEventRecord(CUevent event, CUstream stream) {
  check(cuEventRecord(event, streamOr(stream)), "cuEventRecord");
}

void *mgpuMemAlloc(uint64_t sizeBytes, CUstream stream, bool isHostShared) {
  ready();
  void *ptr = nullptr;
  if (isHostShared)
    check(dev().allocManaged(size_t(sizeBytes), stream, &ptr));
  else
    check(dev().allocOnStream(size_t(sizeBytes), streamOr(stream), &ptr));
  return ptr;
}

void mgpuMemFree(void *ptr, CUstream stream) {
  if (!ptr)
    return;
  CUdeviceptr p = reinterpret_cast<CUdeviceptr>(ptr);
  unsigned managed = 0;
  check(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p),
        "cuPointerGetAttribute(IS_MANAGED)");
  if (!managed) {
    // Device memory: only kernels on this stream use it, so it goes back to
    // the pool in stream order, without waiting.
    check(dev().freeOnStream(ptr, streamOr(stream)));
    return;
  }
  // Work queued on the stream, or the host, may still use the buffer.
  check(cuStreamSynchronize(streamOr(stream)),
        "cuStreamSynchronize (before cuMemFree)");
  check(cuMemFree(p), "cuMemFree");
}

void mgpuMemcpy(void *dst, void *src, size_t sizeBytes, CUstream stream) {
  if (!sizeBytes)
    return;
  check(cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst),
                      reinterpret_cast<CUdeviceptr>(src), sizeBytes,
                      streamOr(stream)),
        "cuMemcpyAsync(" + std::to_string(sizeBytes) + " bytes)");
}

void mgpuMemset32(void *dst, unsigned int value, size_t count,
                  CUstream stream) {
  if (!count)
    return;
  check(cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(dst), value, count,
                         streamOr(stream)),
        "cuMemsetD32Async(" + std::to_string(count) + " words)");
}

void mgpuMemset16(void *dst, unsigned short value, size_t count,
                  CUstream stream) {
  if (!count)
    return;
  check(cuMemsetD16Async(reinterpret_cast<CUdeviceptr>(dst), value, count,
                         streamOr(stream)),
        "cuMemsetD16Async(" + std::to_string(count) + " half-words)");
}

void mgpuMemHostRegister(void *ptr, uint64_t sizeBytes) {
  ready();
  if (!ptr || !sizeBytes)
    return;
  CUresult r = cuMemHostRegister(ptr, sizeBytes, 0);
  if (r == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
    return;
  check(r, "cuMemHostRegister(" + std::to_string(sizeBytes) + " bytes)");
}

/// The dense size of a memref (host register needs one contiguous range).
static uint64_t denseBytes(int64_t rank, StridedMemRefType<char, 1> *desc,
                           int64_t elementSizeBytes) {
  const int64_t *sizes = desc->sizes;
  const int64_t *strides = sizes + rank;
  int64_t expect = 1;
  for (int64_t i = rank - 1; i >= 0; --i) {
    if (sizes[i] != 1 && strides[i] != expect)
      mfrt::comm::failRank(MFRT_ERR_BACKEND,
                           "mgpuMemHostRegisterMemRef: the memref is not "
                           "densely packed");
    expect *= sizes[i];
  }
  return uint64_t(expect) * uint64_t(elementSizeBytes);
}

void mgpuMemHostRegisterMemRef(int64_t rank,
                               StridedMemRefType<char, 1> *descriptor,
                               int64_t elementSizeBytes) {
  char *ptr = descriptor->data + descriptor->offset * elementSizeBytes;
  mgpuMemHostRegister(ptr, denseBytes(rank, descriptor, elementSizeBytes));
}

void mgpuMemHostUnregister(void *ptr) {
  if (!ptr)
    return;
  CUresult r = cuMemHostUnregister(ptr);
  if (r == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
    return;
  check(r, "cuMemHostUnregister");
}

void mgpuMemHostUnregisterMemRef(int64_t /*rank*/,
                                 StridedMemRefType<char, 1> *descriptor,
                                 int64_t elementSizeBytes) {
  mgpuMemHostUnregister(descriptor->data +
                        descriptor->offset * elementSizeBytes);
}

void mgpuSetDefaultDevice(int32_t device) { dev().setDefaultOrdinal(device); }

void *mgpuTensorMapEncodeTiledMemref(
    int64_t tensorRank, StridedMemRefType<char, 1> *descriptor,
    CUtensorMapDataType tensorDataType, CUtensorMapInterleave interleave,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
    CUtensorMapFloatOOBfill oobFill, int64_t *inputBoxDims) {
  ready();
  if (tensorRank < 1 || tensorRank > 5)
    mfrt::comm::failRank(MFRT_ERR_BACKEND,
                         "mgpuTensorMapEncodeTiledMemref: rank " +
                             std::to_string(tensorRank) +
                             " (TMA supports 1 to 5)");
  // Bytes per element of each CUtensorMapDataType (UINT8 .. TFLOAT32_FTZ).
  static constexpr int kElementBytes[] = {1, 2, 4, 4, 8, 8, 2,
                                          4, 8, 2, 4, 4, 4};
  int elementBytes =
      unsigned(tensorDataType) < sizeof(kElementBytes) / sizeof(int)
          ? kElementBytes[tensorDataType]
          : 1;
  // The view's first element (its aligned pointer plus its offset: a
  // subview, such as one expert of a stacked weight, starts there),
  // innermost dimension first.
  char *start = descriptor->data + descriptor->offset * elementBytes;
  const int64_t *sizes = descriptor->sizes;
  const int64_t *strides = sizes + tensorRank;
  cuuint64_t globalDim[5] = {1, 1, 1, 1, 1}, globalStrides[5] = {0};
  cuuint32_t boxDim[5] = {1, 1, 1, 1, 1}, elementStrides[5] = {1, 1, 1, 1, 1};
  for (int64_t i = 0; i < tensorRank; ++i) {
    globalDim[i] = cuuint64_t(sizes[tensorRank - i - 1]);
    boxDim[i] = cuuint32_t(inputBoxDims[tensorRank - i - 1]);
  }
  for (int64_t i = 0; i + 1 < tensorRank; ++i)
    globalStrides[i] =
        cuuint64_t(strides[tensorRank - i - 2] * int64_t(elementBytes));
  CUtensorMap map;
  auto encode = [&] {
    check(cuTensorMapEncodeTiled(&map, tensorDataType, cuuint32_t(tensorRank),
                                 start, globalDim, globalStrides, boxDim,
                                 elementStrides, interleave, swizzle,
                                 l2Promotion, oobFill),
          "cuTensorMapEncodeTiled(rank " + std::to_string(tensorRank) + ")");
  };
  // A temporary's map serves the launch it is made for (caching maps by
  // address would grow without bound as temporaries come and go).
  if (inStreamPool(start)) {
    encode();
    return launchScopedMap(map, streamOr(nullptr));
  }
  // A map depends only on these fields: one device copy per distinct map
  // (a weight's is made at its first launch and reused by every later one;
  // upstream's wrapper allocates and copies one per call).
  std::vector<uint64_t> key = {uint64_t(reinterpret_cast<uintptr_t>(start)),
                               uint64_t(tensorRank),
                               uint64_t(tensorDataType),
                               uint64_t(interleave),
                               uint64_t(swizzle),
                               uint64_t(l2Promotion),
                               uint64_t(oobFill)};
  for (int64_t i = 0; i < tensorRank; ++i)
    key.insert(key.end(), {globalDim[i], globalStrides[i], boxDim[i]});
  static std::mutex mutex;
  static std::map<std::vector<uint64_t>, CUdeviceptr> maps;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = maps.find(key); it != maps.end())
    return reinterpret_cast<void *>(it->second);
  encode();
  // The kernel reads the map from device memory. It lives as long as the
  // process.
  // The copy is complete before the map is cached: another rank's stream
  // may launch with it next, and a copy from pageable memory may still be
  // in flight when the call returns (once per map).
  CUdeviceptr dmap = 0;
  CUstream stream = streamOr(nullptr);
  check(cuMemAlloc(&dmap, sizeof(CUtensorMap)), "cuMemAlloc(CUtensorMap)");
  check(cuMemcpyHtoDAsync(dmap, &map, sizeof(CUtensorMap), stream),
        "cuMemcpyHtoDAsync(CUtensorMap)");
  check(cuStreamSynchronize(stream),
        "cuStreamSynchronize(after copying a CUtensorMap)");
  maps.emplace(std::move(key), dmap);
  return reinterpret_cast<void *>(dmap);
}

} // extern "C"
