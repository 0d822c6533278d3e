//===- FuseCollectives.cpp - fewer runtime calls --------------------------===//

#include "PartitionUtils.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#define DEBUG_TYPE "mf-fuse-collectives"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFFUSECOLLECTIVESPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
/// Ops that become one runtime call each.
bool isCollective(Operation *op) {
  return isa<AllGatherOp, ReduceScatterOp, AllReduceOp, RingStepOp, DispatchOp,
             CombineOp, SendOp, RecvOp, GatherOp>(op);
}

int64_t countCollectives(Operation *root) {
  int64_t n = 0;
  root->walk([&](Operation *op) { n += isCollective(op); });
  return n;
}

/// Merges runs of adjacent ops of type OpTy on one group into one op. Only
/// ops between them with no effects and no use of the run's results may
/// separate them.
/// Whether collectives `a` and `b` may travel as one message: the same
/// group, and for ring steps the same kind (pass-Q's queries, or K/V, which
/// the runtime counts apart).
template <typename OpTy> bool sameKind(OpTy a, OpTy b) {
  bool same = a.getMesh() == b.getMesh() && a.getAxes() == b.getAxes();
  if constexpr (std::is_same_v<OpTy, RingStepOp>)
    same = same && a.getQueries() == b.getQueries();
  return same;
}

template <typename OpTy> void mergeAdjacent(Block &block) {
  SmallVector<SmallVector<OpTy>> runs;
  SmallVector<OpTy> run;
  auto flush = [&] {
    if (run.size() > 1)
      runs.push_back(run);
    run.clear();
  };
  for (Operation &op : block) {
    if (auto c = dyn_cast<OpTy>(op)) {
      bool sameGroup = !run.empty() && sameKind(run.front(), c);
      bool independent = llvm::none_of(c->getOperands(), [&](Value v) {
        return llvm::any_of(
            run, [&](OpTy r) { return v.getDefiningOp() == r.getOperation(); });
      });
      if (!run.empty() && !(sameGroup && independent))
        flush();
      run.push_back(c);
      continue;
    }
    if (run.empty())
      continue;
    // Uses inside regions count: a later collective may depend on the run
    // through this op.
    bool usesRun = false;
    op.walk([&](Operation *nested) {
      for (Value v : nested->getOperands())
        if (llvm::any_of(run, [&](OpTy r) {
              return v.getDefiningOp() == r.getOperation();
            }))
          usesRun = true;
    });
    if (usesRun || !isPure(&op))
      flush();
  }
  flush();
  for (SmallVector<OpTy> &group : runs) {
    SmallVector<Value> inputs;
    for (OpTy op : group)
      llvm::append_range(inputs, op.getInputs());
    OpBuilder b(group.back());
    auto fused = OpTy::create(b, group.front().getLoc(), ValueRange(inputs),
                              group.front().getMesh(),
                              llvm::to_vector(llvm::map_range(
                                  group.front().getAxes(), [](Attribute a) {
                                    return cast<StringAttr>(a).getValue();
                                  })));
    if constexpr (std::is_same_v<OpTy, RingStepOp>)
      fused.setQueries(group.front().getQueries());
    unsigned next = 0;
    for (OpTy op : group) {
      for (Value r : op->getResults())
        r.replaceAllUsesWith(fused->getResult(next++));
      op.erase();
    }
  }
}

/// Element-wise ops on rows that commute with slicing the rows.
bool isPerToken(Operation *op) {
  return isa<arith::AddFOp, arith::SubFOp, arith::MulFOp>(op) &&
         op->getNumResults() == 1 &&
         isa<RankedTensorType>(op->getResult(0).getType());
}

/// all_reduce -> [per-token ops] -> slice  ==>  reduce_scatter -> [ops on
/// sliced operands]. Returns true if it rewrote.
bool rewriteAllReduceSlice(AllReduceOp ar) {
  if (ar.getInputs().size() != 1 || !ar->hasOneUse())
    return false;
  // Follow the single-use chain of per-token ops to a slice on the group.
  SmallVector<Operation *> chain;
  Value cur = ar.getResult(0);
  while (cur.hasOneUse() && isPerToken(*cur.user_begin())) {
    chain.push_back(*cur.user_begin());
    cur = chain.back()->getResult(0);
  }
  if (!cur.hasOneUse())
    return false;
  auto slice = dyn_cast<SliceOp>(*cur.user_begin());
  if (!slice || slice.getMesh() != ar.getMesh() ||
      slice.getAxes() != ar.getAxes())
    return false;
  // Everything after the rewrite has the slice's (local) type.
  Type sliced = slice.getType();
  OpBuilder b(ar);
  Value x = ReduceScatterOp::create(b, ar.getLoc(), sliced, ar.getInputs()[0],
                                    ar.getMeshAttr(), ar.getAxesAttr(),
                                    slice.getDimAttr());
  Value prev = ar.getResult(0);
  for (Operation *op : chain) {
    b.setInsertionPoint(op);
    SmallVector<Value> operands;
    for (Value v : op->getOperands()) {
      if (v == prev) {
        operands.push_back(x);
        continue;
      }
      operands.push_back(
          SliceOp::create(b, op->getLoc(), sliced, v, slice.getMeshAttr(),
                          slice.getAxesAttr(), slice.getDimAttr()));
    }
    Operation *clone = b.clone(*op);
    clone->setOperands(operands);
    clone->getResult(0).setType(sliced);
    prev = op->getResult(0);
    x = clone->getResult(0);
  }
  slice.replaceAllUsesWith(x);
  slice.erase();
  for (Operation *op : llvm::reverse(chain))
    op->erase();
  ar.erase();
  return true;
}

struct MFFuseCollectivesPass
    : public mf::impl::MFFuseCollectivesPassBase<MFFuseCollectivesPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<std::pair<Operation *, int64_t>> before;
    module.walk([&](moe::LayerOp layer) {
      before.push_back({layer, countCollectives(layer)});
    });
    numBefore = countCollectives(module);

    SmallVector<AllReduceOp> reduces;
    module.walk([&](AllReduceOp op) { reduces.push_back(op); });
    for (AllReduceOp op : reduces)
      rewriteAllReduceSlice(op);
    module.walk([&](Block *block) {
      mergeAdjacent<RingStepOp>(*block);
      mergeAdjacent<AllReduceOp>(*block);
    });

    numAfter = countCollectives(module);
    if (remarks)
      for (auto [layer, n] : before)
        layer->emitRemark() << "layer " << cast<moe::LayerOp>(layer).getIndex()
                            << ": " << n << " collective calls before fusion, "
                            << countCollectives(layer) << " after";
  }
};
} // namespace
