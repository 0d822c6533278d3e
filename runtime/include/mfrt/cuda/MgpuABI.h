//===- MgpuABI.h - The upstream MLIR GPU host ABI (CUDA) ---------*- C++
//-*-===//
//
// The functions that upstream MLIR 22's `gpu-to-llvm` conversion and the
// `#gpu.select_object` offloading handler emit calls to, with their exact
// signatures (index is intptr_t, the LLVM types are in the comments). Debian
// ships no libmlir_cuda_runtime; libmfrt_cuda.a implements them on the CUDA
// driver API (MgpuABI.cpp). The cuSPARSE / cuSPARSELt wrappers (sparse_tensor
// on GPU) are not provided: meshfold never emits them.
//
// Module loading: the select_object handler loads every gpu.binary in a
// global constructor (mgpuModuleLoad / mgpuModuleLoadJIT, before main) and
// unloads it in a global destructor. Loading is therefore lazy here: the
// handle names the blob, and the CUDA module is created in the process's
// context on the first mgpuModuleGetFunction (a rank's first launch).
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_CUDA_MGPUABI_H
#define MFRT_CUDA_MGPUABI_H

#include "mlir/ExecutionEngine/CRunnerUtils.h"

#include <cuda.h>

#include <cstddef>
#include <cstdint>

extern "C" {
// ptr (ptr, i64)
CUmodule mgpuModuleLoad(void *data, size_t gpuBlobSize);
// ptr (ptr, i32): PTX, JIT-compiled by the driver at `optLevel`.
CUmodule mgpuModuleLoadJIT(void *data, int optLevel);
// void (ptr)
void mgpuModuleUnload(CUmodule module);
// ptr (ptr, ptr)
CUfunction mgpuModuleGetFunction(CUmodule module, const char *name);
// void (ptr, i64 x6, i32, ptr, ptr, ptr, i64)
void mgpuLaunchKernel(CUfunction function, intptr_t gridX, intptr_t gridY,
                      intptr_t gridZ, intptr_t blockX, intptr_t blockY,
                      intptr_t blockZ, int32_t smem, CUstream stream,
                      void **params, void **extra, size_t paramsCount);
// void (ptr, i64 x9, i32, ptr, ptr, ptr)
void mgpuLaunchClusterKernel(CUfunction function, intptr_t clusterX,
                             intptr_t clusterY, intptr_t clusterZ,
                             intptr_t gridX, intptr_t gridY, intptr_t gridZ,
                             intptr_t blockX, intptr_t blockY, intptr_t blockZ,
                             int32_t smem, CUstream stream, void **params,
                             void **extra);
// ptr ()
CUstream mgpuStreamCreate(void);
// void (ptr)
void mgpuStreamDestroy(CUstream stream);
void mgpuStreamSynchronize(CUstream stream);
// void (ptr, ptr)
void mgpuStreamWaitEvent(CUstream stream, CUevent event);
// ptr ()
CUevent mgpuEventCreate(void);
// void (ptr)
void mgpuEventDestroy(CUevent event);
void mgpuEventSynchronize(CUevent event);
// void (ptr, ptr)
void mgpuEventRecord(CUevent event, CUstream stream);
// ptr (i64, ptr, i8)
void *mgpuMemAlloc(uint64_t sizeBytes, CUstream stream, bool isHostShared);
// void (ptr, ptr)
void mgpuMemFree(void *ptr, CUstream stream);
// void (ptr, ptr, i64, ptr)
void mgpuMemcpy(void *dst, void *src, size_t sizeBytes, CUstream stream);
// void (ptr, i32, i64, ptr)
void mgpuMemset32(void *dst, unsigned int value, size_t count, CUstream stream);
// void (ptr, i16, i64, ptr)
void mgpuMemset16(void *dst, unsigned short value, size_t count,
                  CUstream stream);
// void (ptr, i64)
void mgpuMemHostRegister(void *ptr, uint64_t sizeBytes);
// void (i64, ptr, i64)
void mgpuMemHostRegisterMemRef(int64_t rank,
                               StridedMemRefType<char, 1> *descriptor,
                               int64_t elementSizeBytes);
// void (ptr)
void mgpuMemHostUnregister(void *ptr);
// void (i64, ptr, i64)
void mgpuMemHostUnregisterMemRef(int64_t rank,
                                 StridedMemRefType<char, 1> *descriptor,
                                 int64_t elementSizeBytes);
// void (i32)
void mgpuSetDefaultDevice(int32_t device);
// ptr (i64, ptr, i64, i64, i64, i64, i64, ptr): nvgpu.tma.create.descriptor.
void *mgpuTensorMapEncodeTiledMemref(
    int64_t tensorRank, StridedMemRefType<char, 1> *descriptor,
    CUtensorMapDataType tensorDataType, CUtensorMapInterleave interleave,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
    CUtensorMapFloatOOBfill oobFill, int64_t *inputBoxDims);

/// Registers the CUDA device with the runtime core. Linking the object that
/// defines the functions above already does it (a static initializer); this
/// is for programs that use the runtime without any mgpu call.
void mfrt_cuda_register(void);
} // extern "C"

#endif // MFRT_CUDA_MGPUABI_H
