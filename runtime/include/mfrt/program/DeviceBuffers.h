//===- DeviceBuffers.h - Program buffers in CUDA mode -----------*- C++ -*-===//
//
// What the emitted program's hooks (CodegenHooks.cpp) and its run need to run
// a program compiled for CUDA (mfrt/comm/Device.h): weights and the hooks'
// temporaries in memory the kernels, the collectives and the host share, and
// copies that work whatever memory the pointers name. Without a device
// (the CPU target) everything is plain host memory.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_PROGRAM_DEVICEBUFFERS_H
#define MFRT_PROGRAM_DEVICEBUFFERS_H

#include "mfrt/mfrt.h"
#include "mfrt/program/ProgramRank.h"

#include "mlir/ExecutionEngine/CRunnerUtils.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mfrt {

/// True when the program was built for a device (libmfrt_cuda.a linked).
bool programUsesDevice();
/// True when the calling rank runs on a CUDA device.
bool deviceMode();

/// CUDA mode: copies every weight slice of `rs` into managed memory on the
/// rank's device (and frees the host copy); mfrt_weight then returns these.
void uploadWeights(ProgramRank &rs);
void releaseWeights(ProgramRank &rs);
/// The data of weight `id` (device copy in CUDA mode).
void *weightData(ProgramRank &rs, int64_t id);

/// Synchronizes the rank's stream before the host reads or writes program
/// buffers (no-op on the CPU target).
void syncForHost();

/// Copies `bytes` between any two of host, managed and device memory; done
/// when it returns.
void copyAny(void *dst, const void *src, size_t bytes);

/// A temporary buffer that collectives may be given: host memory on the CPU
/// target, managed memory in CUDA mode (the nccl backend takes only device
/// pointers).
class SharedBuffer {
public:
  explicit SharedBuffer(size_t bytes = 0) { resize(bytes); }
  SharedBuffer(const SharedBuffer &) = delete;
  SharedBuffer &operator=(const SharedBuffer &) = delete;
  ~SharedBuffer();
  void resize(size_t bytes);
  char *data() { return ptr; }
  size_t size() const { return bytes; }

private:
  std::vector<char> host;
  char *ptr = nullptr;
  size_t bytes = 0;
  bool onDevice = false;
};

/// A buffer the program passes to a hook (an unranked memref): its first
/// element and element count, with a contiguous copy when the view is
/// strided (in memory the collectives accept: a SharedBuffer). Waits for the
/// rank's stream first (syncForHost).
template <typename T> struct MemRefBuffer {
  T *data = nullptr;
  int64_t count = 1;
  int64_t rows = 1;
  /// Elements per row (of dimension 0), also when there are no rows.
  int64_t rowElems = 1;
  SharedBuffer copy;

  explicit MemRefBuffer(UnrankedMemRefType<T> *m);
};
extern template struct MemRefBuffer<float>;
extern template struct MemRefBuffer<int64_t>;

/// mfrt_send / mfrt_recv of host memory (mfrt_transfer_send / recv to a
/// rank of the other pool), staged through a SharedBuffer in CUDA mode (the
/// nccl backend moves device memory only).
mfrt_status sendHost(int peer, const void *buf, int64_t count,
                     mfrt_dtype dtype);
mfrt_status recvHost(int peer, void *buf, int64_t count, mfrt_dtype dtype);

} // namespace mfrt

#endif // MFRT_PROGRAM_DEVICEBUFFERS_H
