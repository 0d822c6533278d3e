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
    std::string rule = placementRule(info->numExperts, ep, redundant);
    if (!rule.empty()) {
      module.emitError() << "plan rule 'ep-experts': " << rule;
      return signalPassFailure();
    }
    RoutingFile file;
    std::string error;
    if (!readRoutingFile(routing, *info, file, error)) {
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
      auto rows = file.rows.find(layer.getIndex());
      if (rows == file.rows.end()) {
        op.emitError() << routing << ": the routing file has no rows of layer "
                       << layer.getIndex()
                       << ", which has experts (run the model's every "
                          "layer)";
        return WalkResult::interrupt();
      }
      ExpertPlacement p = balanceExperts(rows->second, ep, redundant, nodeOf);
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
