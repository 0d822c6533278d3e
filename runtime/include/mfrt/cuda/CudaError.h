//===- CudaError.h - CUDA driver errors as mfrt messages --------*- C++ -*-===//
//
// Pure formatting (no driver calls), so that it is testable without a GPU:
// "cuMemAllocManaged(4096 bytes) failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of
// memory".
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_CUDA_CUDAERROR_H
#define MFRT_CUDA_CUDAERROR_H

#include <string>

namespace mfrt::cuda {

/// The message of a failed driver call. `call` names the call (with its key
/// arguments), `code` is the CUresult, `name` and `text` what
/// cuGetErrorName / cuGetErrorString gave (either may be null: the stub
/// driver, or a code the driver does not know; then a built-in table of the
/// common codes is used).
std::string formatCudaError(const std::string &call, int code, const char *name,
                            const char *text);

/// Built-in name of a CUresult ("CUDA_ERROR_NO_DEVICE"), or nullptr.
const char *knownCudaErrorName(int code);

} // namespace mfrt::cuda

#endif // MFRT_CUDA_CUDAERROR_H
