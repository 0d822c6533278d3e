//===- PartitionPipeline.cpp - the mf-partition pipeline ------------------===//

#include "meshfold/Pipelines/PartitionPipeline.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace meshfold;

void meshfold::setPlanOptions(PartitionPipelineOptions &options,
                              const PlanFlags &flags) {
#define MESHFOLD_PLAN_OPTION(Type, Field, Flag, Default, Description)          \
  options.Field = flags.Field;
#include "meshfold/Support/PlanOptions.def"
}

void meshfold::addSetPlan(OpPassManager &pm,
                          const PartitionPipelineOptions &options) {
  if (!options.hasPlanOptions())
    return;
  mf::MFSetPlanPassOptions plan;
#define MESHFOLD_PLAN_OPTION(Type, Field, Flag, Default, Description)          \
  plan.Field = options.Field;
#include "meshfold/Support/PlanOptions.def"
  pm.addPass(mf::createMFSetPlanPass(plan));
}

void meshfold::buildPartitionPipeline(OpPassManager &pm,
                                      const PartitionPipelineOptions &options) {
  addSetPlan(pm, options);
  pm.addPass(mf::createMFVerifyPlanPass());
  pm.addPass(mf::createMFZigzagCPPass());
  mf::MFDecodeKVPlacementPassOptions placement;
  placement.byPlace = options.batchInvariant;
  pm.addPass(mf::createMFDecodeKVPlacementPass(placement));
  pm.addPass(mf::createMFShardTPPass());
  pm.addPass(mf::createMFInsertSPPass());
  pm.addPass(mf::createMFRingAttentionPass());
  pm.addPass(mf::createMFPassQAttentionPass());
  if (!options.expertPlacement.empty()) {
    mf::MFPlaceExpertsPassOptions place;
    place.routing = options.expertPlacement;
    place.redundant = options.redundantExperts;
    pm.addPass(mf::createMFPlaceExpertsPass(place));
  }
  mf::MFFoldExpertsPassOptions fold;
  fold.mode = options.dispatch;
  pm.addPass(mf::createMFFoldExpertsPass(fold));
  mf::MFLastTokenHeadPassOptions head;
  head.promptLogprobs = options.promptLogprobs;
  pm.addPass(mf::createMFLastTokenHeadPass(head));
  pm.addPass(mf::createMFSplitPipelinePass());
  if (options.narrowLastLayer)
    pm.addPass(mf::createMFNarrowLastLayerPass());
  pm.addPass(mf::createMFFuseCollectivesPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void meshfold::registerPartitionPipeline() {
  PassPipelineRegistration<PartitionPipelineOptions>(
      "mf-partition",
      "Partition a global moe model into the per-rank SPMD program of a plan",
      buildPartitionPipeline);
}
