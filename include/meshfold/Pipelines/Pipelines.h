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

struct PartitionPipelineOptions
    : public mlir::PassPipelineOptions<PartitionPipelineOptions> {
  Option<int64_t> tp{*this, "tp", llvm::cl::desc("Tensor parallel size"),
                     llvm::cl::init(1)};
  Option<int64_t> cp{*this, "cp", llvm::cl::desc("Context parallel size"),
                     llvm::cl::init(1)};
  Option<int64_t> dp{*this, "dp", llvm::cl::desc("Data parallel size"),
                     llvm::cl::init(1)};
  Option<int64_t> pp{*this, "pp", llvm::cl::desc("Pipeline parallel size"),
                     llvm::cl::init(1)};
  Option<int64_t> ep{*this, "ep",
                     llvm::cl::desc("Expert parallel size (0: tp*cp*dp)"),
                     llvm::cl::init(0)};
  Option<std::string> order{
      *this, "order",
      llvm::cl::desc("Attention mesh axis order, fastest first"),
      llvm::cl::init("tp,cp,dp,pp")};
  Option<int64_t> gpusPerNode{*this, "gpus-per-node",
                              llvm::cl::desc("GPUs per node"),
                              llvm::cl::init(8)};
  Option<bool> promptLogprobs{
      *this, "prompt-logprobs",
      llvm::cl::desc("Also output the logits of every prompt position"),
      llvm::cl::init(false)};
  Option<std::string> dispatch{
      *this, "dispatch",
      llvm::cl::desc("EP dispatch: auto, flat or hierarchical"),
      llvm::cl::init("auto")};

  /// True when any plan option was given (the plan then replaces the
  /// module's).
  bool hasPlanOptions() const {
    return tp.hasValue() || cp.hasValue() || dp.hasValue() || pp.hasValue() ||
           ep.hasValue() || order.hasValue() || gpusPerNode.hasValue();
  }
};

/// Global moe model -> per-rank SPMD IR with mf communication ops, for the
/// plan on the module or given by the options: verify the plan, then zigzag
/// CP, TP sharding, SP, ring attention, expert folding, the last-token head,
/// pipeline stages and collective fusion.
void buildPartitionPipeline(mlir::OpPassManager &pm,
                            const PartitionPipelineOptions &options);

/// moe model (one rank) -> LLVM dialect for the CPU target: verify the plan,
/// bind weights and outputs to the runtime, lower to linalg, bufferize,
/// lower to loops and to LLVM.
void buildLowerToCPUPipeline(mlir::OpPassManager &pm,
                             const CPUPipelineOptions &options);

/// Registers the pipelines with the pass registry (for meshfold-opt).
void registerMeshfoldPipelines();

} // namespace meshfold

#endif // MESHFOLD_PIPELINES_PIPELINES_H
