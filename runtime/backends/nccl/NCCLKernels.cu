//===- NCCLKernels.cu - Device kernels of the nccl backend ----------------===//

#include "mfrt/backends/NCCLKernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace mfrt::comm::cuda {
namespace {

__device__ float load(const void *p, int64_t i, int dtype) {
  switch (dtype) {
  case 1:
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
  case 2:
    return __half2float(static_cast<const __half *>(p)[i]);
  default:
    return static_cast<const float *>(p)[i];
  }
}

__device__ void store(void *p, int64_t i, float v, int dtype) {
  switch (dtype) {
  case 1:
    static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v);
    return;
  case 2:
    static_cast<__half *>(p)[i] = __float2half_rn(v);
    return;
  default:
    static_cast<float *>(p)[i] = v;
  }
}

/// One block per row.
__global__ void gatherRowsKernel(char *dst, const char *src,
                                 const int64_t *rows, size_t rowBytes) {
  const int64_t i = blockIdx.x;
  const char *s = src + size_t(rows[i]) * rowBytes;
  char *d = dst + size_t(i) * rowBytes;
  if (rowBytes % 16 == 0 && (reinterpret_cast<uintptr_t>(s) % 16) == 0 &&
      (reinterpret_cast<uintptr_t>(d) % 16) == 0) {
    const uint4 *s4 = reinterpret_cast<const uint4 *>(s);
    uint4 *d4 = reinterpret_cast<uint4 *>(d);
    for (size_t c = threadIdx.x; c < rowBytes / 16; c += blockDim.x)
      d4[c] = s4[c];
    return;
  }
  for (size_t c = threadIdx.x; c < rowBytes; c += blockDim.x)
    d[c] = s[c];
}

/// One block per output row; terms in order, f32 accumulation (the same
/// order as the host implementation).
__global__ void weightedSumKernel(void *dst, const int64_t *termBegin,
                                  const DeviceTerm *terms,
                                  const void *const *bufs, int64_t width,
                                  int dtype) {
  const int64_t i = blockIdx.x;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t t = termBegin[i]; t < termBegin[i + 1]; ++t) {
      const DeviceTerm term = terms[t];
      acc = __fadd_rn(
          acc, __fmul_rn(term.weight,
                         load(bufs[term.buf], term.row * width + c, dtype)));
    }
    store(dst, i * width + c, acc, dtype);
  }
}

__global__ void toF32Kernel(float *dst, const void *src, int64_t n, int dtype) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = load(src, i, dtype);
}

__global__ void fromF32Kernel(void *dst, const float *src, int64_t n,
                              int dtype) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store(dst, i, src[i], dtype);
}

unsigned gridFor(int64_t n) {
  int64_t blocks = (n + 255) / 256;
  return unsigned(blocks < 1 ? 1 : blocks > 65535 ? 65535 : blocks);
}

} // namespace

cudaError_t gatherRows(void *dst, const void *src, const int64_t *rows,
                       int64_t numRows, size_t rowBytes, cudaStream_t stream) {
  // Grid x may be 2^31-1 blocks.
  if (numRows > 0)
    gatherRowsKernel<<<unsigned(numRows), 128, 0, stream>>>(
        static_cast<char *>(dst), static_cast<const char *>(src), rows,
        rowBytes);
  return cudaGetLastError();
}

cudaError_t weightedSum(void *dst, int64_t numRows, const int64_t *termBegin,
                        const DeviceTerm *terms, const void *const *bufs,
                        int64_t width, int dtype, cudaStream_t stream) {
  if (numRows > 0)
    weightedSumKernel<<<unsigned(numRows), 256, 0, stream>>>(
        dst, termBegin, terms, bufs, width, dtype);
  return cudaGetLastError();
}

cudaError_t toF32(float *dst, const void *src, int64_t n, int dtype,
                  cudaStream_t stream) {
  if (n > 0)
    toF32Kernel<<<gridFor(n), 256, 0, stream>>>(dst, src, n, dtype);
  return cudaGetLastError();
}

cudaError_t fromF32(void *dst, const float *src, int64_t n, int dtype,
                    cudaStream_t stream) {
  if (n > 0)
    fromF32Kernel<<<gridFor(n), 256, 0, stream>>>(dst, src, n, dtype);
  return cudaGetLastError();
}

} // namespace mfrt::comm::cuda
