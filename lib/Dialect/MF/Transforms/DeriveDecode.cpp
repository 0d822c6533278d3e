//===- DeriveDecode.cpp - a decode step function beside prefill -----------===//
//
// Prefill computes every prompt position at once; a decode step computes the
// next position(s) of a request whose earlier K/V the runtime keeps. The step
// is the prefill function with three changes: the positions are an argument
// (not 0 .. T-1), each attention reads the layer's cached history
// (`moe.kv_history`) ahead of the step's own K/V, and the LM head computes
// every row's logits (`moe.step_logits`): the rows of a step are the newest
// tokens of the requests it batches, one row each.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/MF/Transforms/Passes.h"
#include "meshfold/Dialect/MoE/IR/MoE.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#define DEBUG_TYPE "mf-derive-decode"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFDERIVEDECODEPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;

namespace {
struct MFDeriveDecodePass
    : public mf::impl::MFDeriveDecodePassBase<MFDeriveDecodePass> {
  using Base::Base;

  LogicalResult fail(Operation *op, const Twine &message) {
    op->emitError() << "mf-derive-decode: " << message;
    return failure();
  }

  /// The layer index of `attention`: the moe.kv_cache of its key.
  std::optional<int64_t> layerOf(moe::AttentionOp attention) {
    for (Operation *user : attention.getKey().getUsers())
      if (auto cache = dyn_cast<moe::KVCacheOp>(user))
        if (cache.getValue() == attention.getValue())
          return cache.getLayer();
    return std::nullopt;
  }

  LogicalResult derive(ModuleOp module) {
    auto prefill = module.lookupSymbol<func::FuncOp>(entry);
    if (!prefill)
      return fail(module, "no entry function @" + entry);
    if (module.lookupSymbol(decode))
      return fail(module, "the module already has a symbol @" + decode);
    // The partitioning passes rewrite both functions, each its own way.
    bool partitioned = false;
    module.walk([&](Operation *op) {
      if (isa_and_nonnull<mf::MFDialect>(op->getDialect()))
        partitioned = true;
    });
    if (partitioned)
      return fail(module, "the module is partitioned already; derive the "
                          "step from the global model, then partition both");
    auto tokensType =
        dyn_cast<RankedTensorType>(prefill.getFunctionType().getNumInputs() == 1
                                       ? prefill.getFunctionType().getInput(0)
                                       : Type());
    if (!tokensType || prefill.getFunctionType().getNumResults() != 0)
      return fail(prefill,
                  "@" + entry + " must take the token ids and return nothing");

    OpBuilder b(module.getContext());
    b.setInsertionPointAfter(prefill);
    auto step = cast<func::FuncOp>(b.clone(*prefill));
    step.setName(decode);
    step->setAttr(moe::getDecodeStepAttrName(), b.getUnitAttr());
    Location loc = step.getLoc();
    if (failed(step.insertArgument(1, tokensType, {}, loc)))
      return fail(step, "could not add the positions argument");
    Value positions = step.getArgument(1);

    // The positions: the argument, not 0 .. T-1.
    SmallVector<moe::PositionsOp> counted;
    step.walk([&](moe::PositionsOp op) { counted.push_back(op); });
    if (counted.size() != 1)
      return fail(step, "expected one moe.positions of the tokens, found " +
                            Twine(counted.size()));
    counted[0].replaceAllUsesWith(positions);
    counted[0].erase();

    // Attention over the history and the step's own K/V.
    SmallVector<moe::AttentionOp> attentions;
    step.walk([&](moe::AttentionOp op) { attentions.push_back(op); });
    if (attentions.empty())
      return fail(step, "no moe.attention to give a K/V history");
    for (moe::AttentionOp op : attentions) {
      std::optional<int64_t> layer = layerOf(op);
      if (!layer)
        return fail(op, "the attention's K/V are not recorded by a "
                        "moe.kv_cache: no cache to decode from");
      if (op.getQPositions() != op.getKvPositions())
        return fail(op, "the attention's query and key positions differ: "
                        "expected unpartitioned self-attention");
      b.setInsertionPoint(op);
      Location at = op.getLoc();
      auto kType = cast<RankedTensorType>(op.getKey().getType());
      SmallVector<int64_t> shape(kType.getShape());
      shape[0] = ShapedType::kDynamic;
      auto historyType = kType.clone(shape);
      auto posType = cast<RankedTensorType>(op.getKvPositions().getType());
      auto history = moe::KVHistoryOp::create(
          b, at, historyType, historyType,
          posType.clone({ShapedType::kDynamic}), op.getKey(), op.getValue(),
          op.getKvPositions(), /*head_offset=*/Value(), *layer);
      op.getKeyMutable().assign(history.getKey());
      op.getValueMutable().assign(history.getValue());
      op.getKvPositionsMutable().assign(history.getPositions());
    }

    // The logits of every row: a step's rows are the newest tokens of the
    // requests it batches.
    SmallVector<moe::LMHeadOp> heads;
    step.walk([&](moe::LMHeadOp op) { heads.push_back(op); });
    if (heads.size() != 1)
      return fail(step,
                  "expected one moe.lm_head, found " + Twine(heads.size()));
    moe::LMHeadOp head = heads[0];
    if (head.getPositions() != positions)
      return fail(head, "the LM head must take the tokens' positions");
    SmallVector<moe::LogitsOp> outputs;
    for (Operation *user : head->getUsers())
      if (auto logits = dyn_cast<moe::LogitsOp>(user))
        outputs.push_back(logits);
    if (outputs.size() != 1 || !head->hasOneUse())
      return fail(head, "the LM head must feed one moe.logits");
    b.setInsertionPoint(head);
    auto inType = cast<RankedTensorType>(head.getInput().getType());
    auto allType = RankedTensorType::get(
        {inType.getDimSize(0), head.getType().getDimSize(0)},
        head.getType().getElementType());
    Value all = moe::LinearOp::create(b, head.getLoc(), allType,
                                      head.getInput(), head.getWeight());
    moe::StepLogitsOp::create(b, outputs[0].getLoc(), all, positions,
                              /*valid=*/Value());
    outputs[0].erase();
    head.erase();
    if (!keepEntry)
      prefill.erase();
    return success();
  }

  void runOnOperation() override {
    if (failed(derive(getOperation())))
      signalPassFailure();
  }
};
} // namespace
