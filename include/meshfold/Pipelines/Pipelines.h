//===- Pipelines.h - meshfold pass pipelines --------------------*- C++ -*-===//
//
// Pipelines live here, as build...Pipeline functions, so that the compile
// driver stays thin and every pipeline can be run from meshfold-opt.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_PIPELINES_PIPELINES_H
#define MESHFOLD_PIPELINES_PIPELINES_H

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
};

/// moe model (one rank) -> LLVM dialect for the CPU target: verify the plan,
/// bind weights and outputs to the runtime, lower to linalg, bufferize,
/// lower to loops and to LLVM.
void buildLowerToCPUPipeline(mlir::OpPassManager &pm,
                             const CPUPipelineOptions &options);

/// Registers the pipelines with the pass registry (for meshfold-opt).
void registerMeshfoldPipelines();

} // namespace meshfold

#endif // MESHFOLD_PIPELINES_PIPELINES_H
