//===- FoldExperts.cpp - expert parallelism on the folded expert mesh -----===//

#include "PartitionUtils.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"
#include "meshfold/Support/ExpertPlacement.h"

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
/// Records layer `layer`'s placement in the module's mf.placements, where
/// the runtime finds it (through the manifest).
void recordPlacement(ModuleOp module, int64_t layer,
                     DenseI64ArrayAttr placement) {
  NamedAttrList entries;
  if (auto old = module->getAttrOfType<DictionaryAttr>(
          MFDialect::getPlacementsAttrName()))
    entries.append(old.getValue());
  entries.set(std::to_string(layer), placement);
  module->setAttr(MFDialect::getPlacementsAttrName(),
                  entries.getDictionary(module.getContext()));
}

struct MFFoldExpertsPass
    : public mf::impl::MFFoldExpertsPassBase<MFFoldExpertsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // The option is checked whatever the plan, even one with nothing to fold.
    if (mode != "auto" && mode != "flat" && mode != "hierarchical") {
      module.emitError() << "mf-fold-experts: mode must be auto, flat or "
                            "hierarchical, got '"
                         << mode << "'";
      return signalPassFailure();
    }
    FailureOr<MeshLayout> layout = requireLayout(module, "mf-fold-experts");
    if (failed(layout))
      return signalPassFailure();
    if (!layout->hasAxis("ep")) {
      module.emitError("plan rule 'fold': the expert mesh has no ep axis");
      return signalPassFailure();
    }
    const int64_t ep = layout->axisSize("ep"), etp = layout->axisSize("etp");
    if (ep * etp == 1)
      return;
    // Tokens travel within their etp x ep group: to every etp slice of each
    // chosen expert (EDP replicas keep their tokens). Sending each slice its
    // copy keeps the dispatch one collective; with hierarchical routing a
    // token still crosses to another node once, and the relay fans it out
    // over NVLink as an all-gather over etp would.
    std::vector<std::string> axes = {"ep"};
    if (etp > 1)
      axes = {"etp", "ep"};
    // Hierarchical routing pays when a dispatch group spans nodes (any
    // group: stages may sit differently on the nodes).
    bool spansNodes = false;
    for (int64_t rank = 0; rank < layout->numDevices(); ++rank) {
      std::set<int64_t> nodes;
      for (int64_t r : layout->group(rank, axes))
        nodes.insert(layout->node(r));
      spansNodes |= nodes.size() > 1;
    }
    DispatchMode dispatchMode = DispatchMode::hierarchical;
    if (mode == "flat" || (mode == "auto" && !spansNodes))
      dispatchMode = DispatchMode::flat;

    SmallVector<moe::ExpertsOp> experts;
    module.walk([&](moe::ExpertsOp op) { experts.push_back(op); });
    for (moe::ExpertsOp op : experts) {
      int64_t numExperts = op.getW1().getType().getDimSize(0);
      int64_t ffn = op.getW1().getType().getDimSize(1);
      if (numExperts % ep != 0) {
        op.emitError() << "plan rule 'ep-experts': EP=" << ep
                       << " must divide n_experts=" << numExperts;
        return signalPassFailure();
      }
      if (ffn % etp != 0) {
        op.emitError() << "plan rule 'etp-ffn': ETP=" << etp
                       << " must divide the expert FFN width (" << ffn
                       << ") to split each expert";
        return signalPassFailure();
      }
      // A placement (mf-place-experts) gives each EP rank `slots` experts,
      // replicas included; without one, the contiguous block of E / EP.
      auto placement = op->getAttrOfType<DenseI64ArrayAttr>(
          MFDialect::getPlacementAttrName());
      auto layer = op->getParentOfType<moe::LayerOp>();
      int64_t slots = numExperts / ep;
      if (placement) {
        ExpertPlacement p = ExpertPlacement::fromTable(
            numExperts, ep, std::vector<int64_t>(placement.asArrayRef()));
        std::string bad = p.check();
        if (!layer || !bad.empty()) {
          op.emitError() << "'" << MFDialect::getPlacementAttrName()
                         << "' does not place the experts of a layer on EP="
                         << ep << ": " << (layer ? bad : "no moe.layer");
          return signalPassFailure();
        }
        slots = p.slots;
        recordPlacement(module, layer.getIndex(), placement);
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
          b.getStrArrayAttr(SmallVector<StringRef>(axes.begin(), axes.end())),
          numExperts, dispatchMode);
      // This rank's contiguous block of experts, each split over etp: w1
      // and w3 ([E, ffn, d]) by rows of the FFN, w2 ([E, d, ffn]) by its
      // columns, so that the slices' outputs sum to the expert's.
      SmallVector<Value> weights;
      for (auto [w, ffnDim] : {std::pair<Value, int64_t>{op.getW1(), 1},
                               {op.getW2(), 2},
                               {op.getW3(), 1}}) {
        moe::ParamOp param = paramOf(w);
        if (!param) {
          op.emitError("mf-fold-experts: expert weights must be moe.param");
          return signalPassFailure();
        }
        SmallVector<int64_t> shape(param.getType().getShape());
        shape[0] = slots;
        shape[ffnDim] /= etp;
        b.setInsertionPoint(op);
        auto type =
            RankedTensorType::get(shape, param.getType().getElementType());
        moe::ParamOp local;
        if (placement) {
          local =
              moe::ParamOp::create(b, param.getLoc(), type, param.getName());
          local->setAttr(MFDialect::getPlacedAttrName(),
                         b.getI64IntegerAttr(layer.getIndex()));
        } else {
          local = shardParam(b, param, type, 0, "experts", "ep", ep);
        }
        if (etp > 1)
          addShard(local, ShardAttr::get(b.getContext(), ffnDim,
                                         b.getStringAttr("experts"),
                                         b.getStringAttr("etp"), etp));
        weights.push_back(local);
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
