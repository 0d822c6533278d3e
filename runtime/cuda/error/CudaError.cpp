//===- CudaError.cpp - CUDA driver errors as mfrt messages ----------------===//

#include "mfrt/cuda/CudaError.h"

namespace {
struct KnownError {
  int code;
  const char *name;
  const char *text;
};

/// The CUresult codes a run is most likely to meet, for drivers that cannot
/// name them (the toolkit's stub libcuda.so names nothing).
constexpr KnownError kKnown[] = {
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {34, "CUDA_ERROR_STUB_LIBRARY",
     "CUDA driver is a stub library (no NVIDIA driver is installed)"},
    {35, "CUDA_ERROR_INSUFFICIENT_DRIVER",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
     "the provided PTX was compiled with an unsupported toolchain"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT",
     "the launch timed out and was terminated"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const KnownError *findKnown(int code) {
  for (const KnownError &k : kKnown)
    if (k.code == code)
      return &k;
  return nullptr;
}
} // namespace

const char *mfrt::cuda::knownCudaErrorName(int code) {
  const KnownError *k = findKnown(code);
  return k ? k->name : nullptr;
}

std::string mfrt::cuda::formatCudaError(const std::string &call, int code,
                                        const char *name, const char *text) {
  const KnownError *known = findKnown(code);
  if (!name || !*name)
    name = known ? known->name : nullptr;
  if (!text || !*text)
    text = known ? known->text : nullptr;
  std::string out = call + " failed: ";
  out += name ? name : "CUresult";
  out += " (" + std::to_string(code) + ")";
  if (text)
    out += std::string(": ") + text;
  return out;
}
