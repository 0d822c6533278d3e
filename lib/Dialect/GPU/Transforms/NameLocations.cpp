//===- NameLocations.cpp - tag moe/mf op locations with the op name -------===//

#include "meshfold/Dialect/GPU/Transforms/Passes.h"
#include "meshfold/Dialect/MF/IR/MF.h"
#include "meshfold/Dialect/MoE/IR/MoE.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"

#define DEBUG_TYPE "mf-gpu-name-locations"

namespace meshfold {
#define GEN_PASS_DEF_MFGPUNAMELOCATIONSPASS
#include "meshfold/Dialect/GPU/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;

namespace {
struct MFGPUNameLocationsPass
    : public meshfold::impl::MFGPUNameLocationsPassBase<
          MFGPUNameLocationsPass> {
  void runOnOperation() override {
    getOperation().walk([](Operation *op) {
      Dialect *dialect = op->getDialect();
      bool named =
          isa_and_nonnull<meshfold::moe::MoEDialect, meshfold::mf::MFDialect>(
              dialect) ||
          llvm::any_of(op->getResultTypes(),
                       [](Type t) { return isa<RankedTensorType>(t); });
      if (!named)
        return;
      if (isa<NameLoc>(op->getLoc()))
        return;
      op->setLoc(NameLoc::get(
          StringAttr::get(op->getContext(), op->getName().getStringRef()),
          op->getLoc()));
    });
  }
};
} // namespace
