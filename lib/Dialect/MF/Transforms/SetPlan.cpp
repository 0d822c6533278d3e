//===- SetPlan.cpp - attach a plan given by options -----------------------===//

#include "PartitionUtils.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#define DEBUG_TYPE "mf-set-plan"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFSETPLANPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
struct MFSetPlanPass : public mf::impl::MFSetPlanPassBase<MFSetPlanPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    PlanSpec spec;
    std::string error;
    PlanFlags flags;
#define MESHFOLD_PLAN_OPTION(Type, Field, Flag, Default, Description)          \
  flags.Field = Field;
#include "meshfold/Support/PlanOptions.def"
    if (!PlanSpec::fromFlags(flags, spec, &error)) {
      module.emitError() << error;
      return signalPassFailure();
    }
    module->setAttr(MFDialect::getPlanAttrName(),
                    PlanAttr::fromPlanSpec(&getContext(), spec));
  }
};
} // namespace
