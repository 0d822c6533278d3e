//===- MgpuLinkTest.cpp - A program that links every mgpu* function -------===//
//
// Linked against libmfrt_cuda.a, the runtime core and the CUDA driver (the
// stub is enough), the way an executable compiled with --target cuda is;
// CheckMgpuSymbols.cmake then inspects it with nm. MgpuABI.h declares the
// functions with upstream's signatures and MgpuABI.cpp includes it, so a
// definition with another signature does not compile.
//
//===----------------------------------------------------------------------===//

#include "mfrt/cuda/MgpuABI.h"

#include <cstdio>

int main(int argc, char **) {
  void *const functions[] = {
      reinterpret_cast<void *>(&mgpuModuleLoad),
      reinterpret_cast<void *>(&mgpuModuleLoadJIT),
      reinterpret_cast<void *>(&mgpuModuleUnload),
      reinterpret_cast<void *>(&mgpuModuleGetFunction),
      reinterpret_cast<void *>(&mgpuLaunchKernel),
      reinterpret_cast<void *>(&mgpuLaunchClusterKernel),
      reinterpret_cast<void *>(&mgpuStreamCreate),
      reinterpret_cast<void *>(&mgpuStreamDestroy),
      reinterpret_cast<void *>(&mgpuStreamSynchronize),
      reinterpret_cast<void *>(&mgpuStreamWaitEvent),
      reinterpret_cast<void *>(&mgpuEventCreate),
      reinterpret_cast<void *>(&mgpuEventDestroy),
      reinterpret_cast<void *>(&mgpuEventSynchronize),
      reinterpret_cast<void *>(&mgpuEventRecord),
      reinterpret_cast<void *>(&mgpuMemAlloc),
      reinterpret_cast<void *>(&mgpuMemFree),
      reinterpret_cast<void *>(&mgpuMemcpy),
      reinterpret_cast<void *>(&mgpuMemset32),
      reinterpret_cast<void *>(&mgpuMemset16),
      reinterpret_cast<void *>(&mgpuMemHostRegister),
      reinterpret_cast<void *>(&mgpuMemHostRegisterMemRef),
      reinterpret_cast<void *>(&mgpuMemHostUnregister),
      reinterpret_cast<void *>(&mgpuMemHostUnregisterMemRef),
      reinterpret_cast<void *>(&mgpuSetDefaultDevice),
      reinterpret_cast<void *>(&mgpuTensorMapEncodeTiledMemref),
  };
  int n = 0;
  for (void *f : functions)
    n += f != nullptr;
  if (argc > 1)
    std::printf("%d mgpu functions linked\n", n);
  return n == int(sizeof(functions) / sizeof(functions[0])) ? 0 : 1;
}
