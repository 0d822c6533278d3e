//===- Device.h - The accelerator a CUDA program runs on --------*- C++ -*-===//
//
// A program compiled with `--target cuda` runs its kernels through the
// upstream `mgpu*` host ABI, which libmfrt_cuda.a implements on the CUDA
// driver API. That library also registers a Device with the runtime core
// (registerDevice, from a static initializer of the object file that defines
// the mgpu* functions, so linking it is what turns CUDA mode on). The core
// then:
//
//  - binds every rank to the device before it runs (attach): one context per
//    process (the primary context of the rank's device) and one stream per
//    rank, the stream that mgpuStreamCreate returns, so kernels, copies and
//    NCCL are ordered on it;
//  - synchronizes the rank's stream before every collective and every host
//    access to program buffers (synchronize);
//  - moves the local backend's messages with copies on the rank's stream
//    (copyAsync, then synchronize before the receiver may read);
//  - places weights in device memory (allocDevice: only kernels read them)
//    and staging buffers in memory that kernels, collectives and the host
//    share (allocShared: CUDA managed memory).
//
// Without a registered Device (the CPU target) none of this happens.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_COMM_DEVICE_H
#define MFRT_COMM_DEVICE_H

#include "mfrt/comm/Comm.h"

namespace mfrt::comm {

class Device {
public:
  virtual ~Device() = default;
  /// "cuda".
  virtual const char *name() const = 0;
  /// Number of devices the driver sees (an error if there is no driver or
  /// no device).
  virtual Status deviceCount(int &count) = 0;
  /// Binds the calling thread to global rank `rank` on device `ordinal`: the
  /// process's context becomes current and the rank's stream is created.
  /// Every thread of a process must use the same ordinal.
  virtual Status attach(int rank, int ordinal) = 0;
  /// True once the calling thread is attached.
  virtual bool attached() const = 0;
  /// Destroys the calling thread's stream (after synchronizing it).
  virtual void detach() = 0;
  /// The calling rank's stream (a CUstream), nullptr if not attached.
  virtual void *stream() = 0;
  /// Waits for everything queued on the calling rank's stream.
  virtual Status synchronize() = 0;
  /// Queues a copy of `bytes` on the calling rank's stream. Either side may
  /// be device, managed or host memory (unified addressing).
  virtual Status copyAsync(void *dst, const void *src, size_t bytes) = 0;
  /// Memory that kernels, collectives and the host share (managed memory,
  /// prefetched to the rank's device).
  virtual Status allocShared(size_t bytes, void **ptr) = 0;
  /// Memory only the device reads and writes (kernels, device-to-device
  /// copies); the host must not touch it. Defaults to shared memory.
  virtual Status allocDevice(size_t bytes, void **ptr) {
    return allocShared(bytes, ptr);
  }
  /// Frees memory of allocShared or allocDevice.
  virtual void release(void *ptr) = 0;
};

/// The registered device, or nullptr (host program).
Device *activeDevice();
/// Called once, by the device library's static initializer.
void registerDevice(Device *device);

/// The rank's index among the processes of its node, from the launcher's
/// environment (Open MPI, MPICH / Hydra, MVAPICH, Slurm), or `fallback`.
int localRankFromEnvironment(int fallback);

/// Synchronizes the calling rank's device stream before the host touches
/// program buffers; a failure ends the program with a message naming the
/// driver call (after telling the other ranks). No-op without a device.
void hostAccess();

/// Fails the calling rank from inside a call that cannot return an error
/// (generated code does not check): records `detail` as this rank's failure,
/// tells every other rank (so that they stop instead of waiting), prints
/// "<program>: error: mfrt: rank R: <detail>" and exits the process with
/// status 1.
[[noreturn]] void failRank(mfrt_status status, const std::string &detail);

} // namespace mfrt::comm

#endif // MFRT_COMM_DEVICE_H
