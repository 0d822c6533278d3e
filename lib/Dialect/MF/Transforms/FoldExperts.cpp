//===- FoldExperts.cpp - expert parallelism on the folded expert mesh -----===//

#include "PartitionUtils.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#include <set>

#define DEBUG_TYPE "mf-fold-experts"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFFOLDEXPERTSPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
struct MFFoldExpertsPass
    : public mf::impl::MFFoldExpertsPassBase<MFFoldExpertsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<MeshLayout> layout = requireLayout(module, "mf-fold-experts");
    if (failed(layout))
      return signalPassFailure();
    if (!layout->hasAxis("ep")) {
      module.emitError("plan rule 'fold': the expert mesh has no ep axis");
      return signalPassFailure();
    }
    int64_t ep = layout->axisSize("ep");
    if (ep == 1)
      return;
    // Hierarchical routing pays when an EP group spans nodes (any group:
    // stages may sit differently on the nodes).
    bool spansNodes = false;
    for (int64_t rank = 0; rank < layout->numDevices(); ++rank) {
      std::set<int64_t> nodes;
      for (int64_t r : layout->group(rank, {"ep"}))
        nodes.insert(layout->node(r));
      spansNodes |= nodes.size() > 1;
    }
    DispatchMode dispatchMode;
    if (mode == "auto")
      dispatchMode =
          spansNodes ? DispatchMode::hierarchical : DispatchMode::flat;
    else if (mode == "flat")
      dispatchMode = DispatchMode::flat;
    else if (mode == "hierarchical")
      dispatchMode = DispatchMode::hierarchical;
    else {
      module.emitError() << "mf-fold-experts: mode must be auto, flat or "
                            "hierarchical, got '"
                         << mode << "'";
      return signalPassFailure();
    }

    SmallVector<moe::ExpertsOp> experts;
    module.walk([&](moe::ExpertsOp op) { experts.push_back(op); });
    for (moe::ExpertsOp op : experts) {
      int64_t numExperts = op.getW1().getType().getDimSize(0);
      if (numExperts % ep != 0) {
        op.emitError() << "plan rule 'ep-experts': EP=" << ep
                       << " must divide n_experts=" << numExperts;
        return signalPassFailure();
      }
      OpBuilder b(op);
      Location loc = op.getLoc();
      Value x = op.getInput();
      auto xType = cast<RankedTensorType>(x.getType());
      auto rowsType = RankedTensorType::get(
          {ShapedType::kDynamic, xType.getDimSize(1)}, xType.getElementType());
      auto localType =
          RankedTensorType::get({ShapedType::kDynamic}, b.getI64Type());
      auto dispatch = DispatchOp::create(
          b, loc, rowsType, localType, DispatchType::get(b.getContext()), x,
          op.getIndices(), op.getWeights(), "experts",
          b.getStrArrayAttr({"ep"}), numExperts, dispatchMode);
      // This rank's contiguous block of experts.
      SmallVector<Value> weights;
      for (Value w : {op.getW1(), op.getW2(), op.getW3()}) {
        moe::ParamOp param = paramOf(w);
        if (!param) {
          op.emitError("mf-fold-experts: expert weights must be moe.param");
          return signalPassFailure();
        }
        SmallVector<int64_t> shape(param.getType().getShape());
        shape[0] = numExperts / ep;
        b.setInsertionPoint(op);
        weights.push_back(shardParam(
            b, param,
            RankedTensorType::get(shape, param.getType().getElementType()), 0,
            "experts", "ep", ep));
      }
      Value out = moe::ExpertFFNOp::create(b, loc, rowsType, dispatch.getRows(),
                                           dispatch.getLocalExperts(),
                                           weights[0], weights[1], weights[2]);
      Value tokens = tensor::DimOp::create(b, loc, x, 0);
      Value y = CombineOp::create(b, loc, op.getType(), dispatch.getRouting(),
                                  out, tokens);
      op.replaceAllUsesWith(y);
      eraseAndClean({op});
    }
  }
};
} // namespace
