//===- PartitionPipeline.h - the mf-partition pipeline ----------*- C++ -*-===//
//
// A global moe model to the per-rank SPMD program of a plan (mf-partition).
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_PIPELINES_PARTITIONPIPELINE_H
#define MESHFOLD_PIPELINES_PARTITIONPIPELINE_H

#include "meshfold/Support/MeshLayout.h"

#include "mlir/Pass/PassOptions.h"

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace meshfold {

struct PartitionPipelineOptions
    : public mlir::PassPipelineOptions<PartitionPipelineOptions> {
  // tp, cp, dp, pp, ep, order and gpus-per-node.
#define MESHFOLD_PLAN_OPTION(Type, Field, Flag, Default, Description)          \
  Option<Type> Field{*this, Flag, llvm::cl::desc(Description),                 \
                     llvm::cl::init(Default)};
#include "meshfold/Support/PlanOptions.def"
  Option<bool> promptLogprobs{
      *this, "prompt-logprobs",
      llvm::cl::desc("Also output the logits of every prompt position"),
      llvm::cl::init(false)};
  Option<bool> narrowLastLayer{
      *this, "narrow-last-layer",
      llvm::cl::desc("Compute the last layer's attention and MoE only for "
                     "the rows that reach an output (mf-narrow-last-layer)"),
      llvm::cl::init(true)};
  Option<std::string> dispatch{
      *this, "dispatch",
      llvm::cl::desc("EP dispatch: auto, flat or hierarchical"),
      llvm::cl::init("auto")};
  Option<std::string> expertPlacement{
      *this, "expert-placement",
      llvm::cl::desc("Place each layer's experts on the EP ranks from this "
                     "routing file (mf-place-experts); empty: contiguous"),
      llvm::cl::init("")};
  Option<int64_t> redundantExperts{
      *this, "redundant-experts",
      llvm::cl::desc("With expert-placement: extra replicas of the hottest "
                     "experts per layer"),
      llvm::cl::init(0)};
  Option<bool> batchInvariant{
      *this, "batch-invariant",
      llvm::cl::desc("Deal a decode step's rows over CP by their own places "
                     "(mf-decode-kv-placement by-place), so that a request's "
                     "K/V placement does not depend on its batch"),
      llvm::cl::init(false)};

  /// True when any plan option was given (the plan then replaces the
  /// module's).
  bool hasPlanOptions() const {
#define MESHFOLD_PLAN_OPTION(Type, Field, Flag, Default, Description)          \
  if (Field.hasValue())                                                        \
    return true;
#include "meshfold/Support/PlanOptions.def"
    return false;
  }
};

/// Global moe model -> per-rank SPMD IR with mf communication ops, for the
/// plan on the module or given by the options: verify the plan, then zigzag
/// CP, TP sharding, SP, ring attention, expert folding, the last-token head,
/// pipeline stages, the last layer's narrowing and collective fusion.
void buildPartitionPipeline(mlir::OpPassManager &pm,
                            const PartitionPipelineOptions &options);

/// Gives `options` the plan of `flags`: every plan option set (and so
/// given), as the pipeline's text form `tp=2 cp=2 ...` does.
void setPlanOptions(PartitionPipelineOptions &options, const PlanFlags &flags);

/// The pipeline's first step alone: mf-set-plan with the plan options, when
/// any is given (the plan then replaces the module's); nothing otherwise.
void addSetPlan(mlir::OpPassManager &pm,
                const PartitionPipelineOptions &options);

/// Registers mf-partition with the pass registry (for meshfold-opt).
void registerPartitionPipeline();

} // namespace meshfold

#endif // MESHFOLD_PIPELINES_PARTITIONPIPELINE_H
