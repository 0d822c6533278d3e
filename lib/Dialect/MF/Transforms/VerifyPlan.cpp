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

FailureOr<std::string> mf::checkPlanAndModel(ModuleOp module) {
  auto plan = module->getAttrOfType<PlanAttr>(MFDialect::getPlanAttrName());
  if (!plan)
    return std::string();
  std::string error;
  std::optional<MeshLayout> layout =
      MeshLayout::create(plan.toPlanSpec(), &error);
  if (!layout)
    return error;
  FailureOr<moe::ModelInfo> info = moe::getModelInfo(module);
  if (failed(info))
    return failure();
  if (info->numLayers == 0)
    return std::string(); // No model in this module: only the plan.
  return layout->checkModel(moe::modelDims(*info));
}

namespace {
struct MFVerifyPlanPass
    : public mf::impl::MFVerifyPlanPassBase<MFVerifyPlanPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<std::string> error = checkPlanAndModel(module);
    if (failed(error))
      return signalPassFailure();
    if (!error->empty()) {
      module.emitError() << *error;
      return signalPassFailure();
    }
    if (auto plan =
            module->getAttrOfType<PlanAttr>(MFDialect::getPlanAttrName()))
      numDevices = plan.getDevices();
  }
};
} // namespace
