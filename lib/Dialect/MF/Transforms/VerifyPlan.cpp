//===- VerifyPlan.cpp - check a plan against its rules and the model ------===//

#include "meshfold/Dialect/MF/IR/MF.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"
#include "meshfold/Dialect/MoE/IR/MoE.h"

#define DEBUG_TYPE "mf-verify-plan"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFVERIFYPLANPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
struct MFVerifyPlanPass
    : public mf::impl::MFVerifyPlanPassBase<MFVerifyPlanPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto plan = module->getAttrOfType<PlanAttr>(MFDialect::getPlanAttrName());
    if (!plan)
      return;
    std::string error;
    std::optional<MeshLayout> layout =
        MeshLayout::create(plan.toPlanSpec(), &error);
    if (!layout) {
      module.emitError() << error;
      return signalPassFailure();
    }
    numDevices = layout->numDevices();
    FailureOr<moe::ModelInfo> info = moe::getModelInfo(module);
    if (failed(info))
      return signalPassFailure();
    if (info->numLayers == 0)
      return; // No model in this module: only the plan is checked.
    std::string modelError = layout->checkModel(moe::modelDims(*info));
    if (!modelError.empty()) {
      module.emitError() << modelError;
      return signalPassFailure();
    }
  }
};
} // namespace
