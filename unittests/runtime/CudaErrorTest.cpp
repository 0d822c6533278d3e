//===- CudaErrorTest.cpp - CUDA driver error messages (no GPU needed) -----===//

#include "mfrt/cuda/CudaError.h"

#include <gtest/gtest.h>

using mfrt::cuda::formatCudaError;

// The message names the failing call, the error's name and code, and its text.
TEST(CudaError, NamesCallErrorAndText) {
  EXPECT_EQ(formatCudaError("cuMemAllocManaged(4096 bytes)", 2,
                            "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"),
            "cuMemAllocManaged(4096 bytes) failed: CUDA_ERROR_OUT_OF_MEMORY "
            "(2): out of memory");
}

// A driver that names nothing (the stub library) still gives a readable text.
TEST(CudaError, FallsBackToBuiltInNames) {
  EXPECT_EQ(formatCudaError("cuInit", 34, nullptr, nullptr),
            "cuInit failed: CUDA_ERROR_STUB_LIBRARY (34): CUDA driver is a "
            "stub library (no NVIDIA driver is installed)");
  EXPECT_EQ(formatCudaError("cuLaunchKernel(k)", 700, "", nullptr),
            "cuLaunchKernel(k) failed: CUDA_ERROR_ILLEGAL_ADDRESS (700): an "
            "illegal memory access was encountered");
}

// An unknown code keeps its number.
TEST(CudaError, UnknownCode) {
  EXPECT_EQ(formatCudaError("cuFoo", 12345, nullptr, nullptr),
            "cuFoo failed: CUresult (12345)");
  EXPECT_EQ(mfrt::cuda::knownCudaErrorName(100),
            std::string("CUDA_ERROR_NO_DEVICE"));
  EXPECT_EQ(mfrt::cuda::knownCudaErrorName(12345), nullptr);
}
