//===- PlaceExperts.cpp - place experts on EP ranks from measured routing -===//

#include "PartitionUtils.h"
#include "meshfold/Analysis/ExplainPlacement.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"
#include "meshfold/Support/ExpertPlacement.h"

#define DEBUG_TYPE "mf-place-experts"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFPLACEEXPERTSPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
struct MFPlaceExpertsPass
    : public mf::impl::MFPlaceExpertsPassBase<MFPlaceExpertsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (routing.empty()) {
      module.emitError("mf-place-experts: no routing file (option routing)");
      return signalPassFailure();
    }
    FailureOr<MeshLayout> layout = requireLayout(module, "mf-place-experts");
    if (failed(layout))
      return signalPassFailure();
    const int64_t ep = layout->hasAxis("ep") ? layout->axisSize("ep") : 1;
    if (ep == 1) {
      module.emitError("expert placement needs expert parallelism: the plan's "
                       "EP is 1 (compile with --ep N)");
      return signalPassFailure();
    }
    FailureOr<moe::ModelInfo> info = moe::getModelInfo(module);
    if (failed(info))
      return signalPassFailure();
    RoutingFile file;
    std::string error =
        readPlacementInput(module, *info, ep, redundant, routing, file);
    if (!error.empty()) {
      module.emitError(error);
      return signalPassFailure();
    }
    // The node of each EP coordinate (in the first EP group), so that the
    // replicas of an expert spread over the nodes.
    std::vector<int64_t> nodeOf(size_t(ep), 0);
    for (int64_t member : layout->group(0, {"ep"}))
      nodeOf[size_t(layout->coord(member, "ep"))] = layout->node(member);
    WalkResult walk = module.walk([&](moe::ExpertsOp op) {
      auto layer = op->getParentOfType<moe::LayerOp>();
      if (!layer) {
        op.emitError("mf-place-experts: moe.experts outside a moe.layer");
        return WalkResult::interrupt();
      }
      ExpertPlacement p =
          balanceExperts(file.rows.at(layer.getIndex()), ep, redundant, nodeOf);
      std::string bad = p.check();
      if (!bad.empty()) {
        op.emitError() << "internal: the placement of layer "
                       << layer.getIndex() << " is wrong: " << bad;
        return WalkResult::interrupt();
      }
      op->setAttr(MFDialect::getPlacementAttrName(),
                  DenseI64ArrayAttr::get(op.getContext(), p.experts));
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
