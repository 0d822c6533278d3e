//===- CPUPipeline.h - the CPU target pipeline ------------------*- C++ -*-===//
//
// A one-rank moe model to the LLVM dialect for the CPU (mf-lower-to-cpu).
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_PIPELINES_CPUPIPELINE_H
#define MESHFOLD_PIPELINES_CPUPIPELINE_H

#include "mlir/Pass/PassOptions.h"

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace meshfold {

struct CPUPipelineOptions
    : public mlir::PassPipelineOptions<CPUPipelineOptions> {
  Option<std::string> entry{*this, "entry",
                            llvm::cl::desc("Name of the entry function"),
                            llvm::cl::init("prefill")};
  Option<std::string> weightDType{
      *this, "weight-dtype",
      llvm::cl::desc("Storage type of the weights: f32 (default) or bf16; "
                     "computation stays f32"),
      llvm::cl::init("f32")};
  Option<int64_t> gpuLoops{
      *this, "gpu-loops",
      llvm::cl::desc(
          "A check of the CUDA target's loop decomposition: lower linalg "
          "through the CUDA pipeline's parallel loops and block x thread "
          "tiling with this many threads per block, and run those loop "
          "nests sequentially on the CPU (0: plain loops, the default)"),
      llvm::cl::init(0)};
  Option<int64_t> vectorBits{
      *this, "vector-bits",
      llvm::cl::desc("Width of the host's vector registers in bits (128, 256 "
                     "or 512) the contraction kernels are tiled for"),
      llvm::cl::init(256)};
  Option<bool> bf16Dot{
      *this, "bf16-dot",
      llvm::cl::desc("With vector-bits=512 on a CPU with AVX512_BF16: "
                     "contractions of bf16 weights round the activations to "
                     "bf16 and multiply with the bf16 dot product, "
                     "accumulating f32"),
      llvm::cl::init(false)};
  Option<bool> batchInvariant{
      *this, "batch-invariant",
      llvm::cl::desc("Contractions sum in one order whatever the row count: "
                     "a row's result does not depend on the rows it comes "
                     "with"),
      llvm::cl::init(false)};
};

/// moe model (one rank) -> LLVM dialect for the CPU target: verify the plan,
/// bind weights and outputs to the runtime, lower to linalg, bufferize,
/// lower to loops and to LLVM.
void buildLowerToCPUPipeline(mlir::OpPassManager &pm,
                             const CPUPipelineOptions &options);

/// Registers mf-lower-to-cpu with the pass registry (for meshfold-opt).
void registerLowerToCPUPipeline();

} // namespace meshfold

#endif // MESHFOLD_PIPELINES_CPUPIPELINE_H
