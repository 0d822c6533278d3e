//===- CUDAPipeline.h - the CUDA target pipeline ----------------*- C++ -*-===//
//
// A moe model to GPU kernels and host code for the CUDA target
// (mf-lower-to-cuda).
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_PIPELINES_CUDAPIPELINE_H
#define MESHFOLD_PIPELINES_CUDAPIPELINE_H

#include "mlir/Pass/PassOptions.h"

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace meshfold {

struct CUDAPipelineOptions
    : public mlir::PassPipelineOptions<CUDAPipelineOptions> {
  Option<std::string> entry{*this, "entry",
                            llvm::cl::desc("Name of the entry function"),
                            llvm::cl::init("prefill")};
  Option<std::string> weightDType{
      *this, "weight-dtype",
      llvm::cl::desc("Storage type of the weights: bf16 (default) or f32; "
                     "computation stays f32"),
      llvm::cl::init("bf16")};
  Option<std::string> chip{*this, "chip",
                           llvm::cl::desc("GPU architecture of the kernels"),
                           llvm::cl::init("sm_90a")};
  Option<std::string> features{*this, "features",
                               llvm::cl::desc("PTX features (ISA version)"),
                               llvm::cl::init("+ptx80")};
  Option<unsigned> optLevel{*this, "opt-level",
                            llvm::cl::desc("Kernel optimisation level 0-3"),
                            llvm::cl::init(2)};
  Option<std::string> format{
      *this, "format",
      llvm::cl::desc("Kernel binaries: isa (PTX), bin (cubin, needs "
                     "ptxas) or fatbin (cubin and PTX, needs fatbinary)"),
      llvm::cl::init("isa")};
  Option<std::string> toolkit{
      *this, "toolkit",
      llvm::cl::desc("CUDA toolkit root (libdevice, ptxas); default: the "
                     "one found when meshfold was configured"),
      llvm::cl::init("")};
  Option<int64_t> threadsPerBlock{
      *this, "threads-per-block",
      llvm::cl::desc("Threads per block of the elementwise and reduction "
                     "kernels"),
      llvm::cl::init(256)};
  Option<std::string> gemmBackend{
      *this, "gemm-backend",
      llvm::cl::desc("The linear layers with bf16 weights: generated "
                     "(kernels of this pipeline) or cublaslt (calls of the "
                     "runtime's cuBLASLt products)"),
      llvm::cl::init("generated")};
  Option<bool> wgmma{
      *this, "wgmma",
      llvm::cl::desc("Linear layers with bf16 weights on Hopper tensor cores "
                     "(mf-gpu-wgmma-contractions: TMA, mbarriers, "
                     "wgmma.mma_async; bf16 operands, f32 accumulation); "
                     "needs sm_90a"),
      llvm::cl::init(false)};
};

/// moe model (one rank or partitioned) -> LLVM dialect for the CUDA target:
/// the front of the CPU pipeline (plan check, runtime binding, linalg,
/// bufferization), then every linalg op becomes a GPU kernel (parallel dims
/// over blocks and threads, reduction dims sequential in each thread), host
/// buffers become managed memory, kernels are compiled for `chip` through
/// NVVM into `gpu.binary` objects and the host code calls the mgpu* runtime
/// ABI.
void buildLowerToCUDAPipeline(mlir::OpPassManager &pm,
                              const CUDAPipelineOptions &options);

/// The CUDA toolkit root that the build found ("" when none).
llvm::StringRef getConfiguredCUDAToolkitPath();

/// Registers mf-lower-to-cuda with the pass registry (for meshfold-opt).
void registerLowerToCUDAPipeline();

} // namespace meshfold

#endif // MESHFOLD_PIPELINES_CUDAPIPELINE_H
