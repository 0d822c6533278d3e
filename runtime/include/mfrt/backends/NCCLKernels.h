//===- NCCLKernels.h - Device kernels of the nccl backend -------*- C++ -*-===//
//
// The collectives' local arithmetic on device memory (Compute for nccl):
// row gathers, f32-accumulated weighted sums, and dtype <-> f32 conversion
// for reductions with f32 accumulation. Launched on the backend's stream.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_BACKENDS_NCCLKERNELS_H
#define MFRT_BACKENDS_NCCLKERNELS_H

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace mfrt::comm::cuda {

/// Same layout as mfrt::comm::Term.
struct DeviceTerm {
  int32_t buf;
  int64_t row;
  float weight;
};

/// dtype: 0 f32, 1 bf16, 2 f16 (mfrt_dtype).
cudaError_t gatherRows(void *dst, const void *src, const int64_t *rows,
                       int64_t numRows, size_t rowBytes, cudaStream_t stream);
cudaError_t weightedSum(void *dst, int64_t numRows, const int64_t *termBegin,
                        const DeviceTerm *terms, const void *const *bufs,
                        int64_t width, int dtype, cudaStream_t stream);
cudaError_t toF32(float *dst, const void *src, int64_t n, int dtype,
                  cudaStream_t stream);
cudaError_t fromF32(void *dst, const float *src, int64_t n, int dtype,
                    cudaStream_t stream);

} // namespace mfrt::comm::cuda

#endif // MFRT_BACKENDS_NCCLKERNELS_H
