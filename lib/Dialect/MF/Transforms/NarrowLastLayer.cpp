//===- NarrowLastLayer.cpp - the last layer on the rows that survive ------===//
//
// A layer whose result reaches the program's outputs only through
// `moe.take_position` of one position (the LM head's last token) computes its
// query, attention, output projection, router, dispatch, experts and combine
// for that row alone; its K/V (and what they need) stay whole, for the cache
// and the other ranks' attention. A norm over a TP-split projection (OLMoE's)
// all-reduces the surviving row's sums of squares only. The narrowing follows
// the IR's uses: any other use of the layer's result keeps the layer whole.
//
//===----------------------------------------------------------------------===//

#include "PartitionUtils.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#include "mlir/IR/Dominance.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/TypeSwitch.h"

#define DEBUG_TYPE "mf-narrow-last-layer"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFNARROWLASTLAYERPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
/// The row layouts of a partitioned layer: SP (the residual stream's rows,
/// positions operand 1) and CP (after the TP all-gather, operand 2; the SP
/// layout when the layer has no second positions operand).
enum Layout { SP = 0, CP = 1 };

/// Builds the narrowed copy of a layer's row computation before its yield:
/// every row value maps to the rows of the surviving position that this rank
/// holds (one or none), in the same layout.
class Narrower {
public:
  Narrower(moe::LayerOp layer, Value last)
      : layer(layer), body(layer.getBody().front()), last(last),
        b(body.getTerminator()), loc(layer.getLoc()) {
    positions[SP] = body.getArgument(1);
    positions[CP] = layer.getInputs().size() >= 3 ? body.getArgument(2)
                                                  : body.getArgument(1);
  }

  /// `layout`, or SP when the layer has one layout (no TP).
  Layout canonical(Layout layout) const {
    return positions[CP] == positions[SP] ? SP : layout;
  }
  /// The narrowed `v`, or failure (with the reason) when `v` is computed by
  /// an op this narrowing does not know.
  FailureOr<Value> narrow(Value v);
  Layout layoutOf(Value narrowed) const { return layouts.lookup(narrowed); }
  /// The surviving positions of `layout` this rank holds ([0] or [1]).
  Value narrowedPositions(Layout layout);
  std::string reason;

private:
  FailureOr<Value> fail(Operation *op, StringRef why) {
    llvm::raw_string_ostream os(reason);
    os << "'" << op->getName() << "' " << why;
    return failure();
  }
  /// `v`'s row at the surviving position, if this rank holds it: [0|1, d].
  Value take(Value v, Layout layout);
  /// The first `count` rows (along dimension 0) of `source`.
  Value leadingRows(Value source, Value count, Location at);
  /// The rows this rank keeps in `layout` (0 or 1), set by its first take.
  Value rowCount(Layout layout);
  /// Clones `op` with its `rowOperands` narrowed and its positions operand
  /// `positionsOperand` (if any) replaced by the narrowed positions.
  LogicalResult cloneNarrowed(Operation *op, ArrayRef<unsigned> rowOperands,
                              std::optional<unsigned> positionsOperand);
  FailureOr<Value> narrowReduceScatter(ReduceScatterOp op);
  FailureOr<Value> narrowCombine(CombineOp op);

  moe::LayerOp layer;
  Block &body;
  Value last;
  OpBuilder b;
  Location loc;
  Value positions[2];
  Value counts[2], keptPositions[2];
  IRMapping map;
  DenseMap<Value, Layout> layouts;
};

Value Narrower::rowCount(Layout layout) {
  layout = canonical(layout);
  if (!counts[layout] && layout == SP)
    (void)narrow(body.getArgument(0));
  return counts[layout];
}

Value Narrower::take(Value v, Layout layout) {
  layout = canonical(layout);
  auto type = cast<RankedTensorType>(v.getType());
  Type elt = type.getElementType();
  int64_t d = type.getDimSize(1);
  auto taken = moe::TakePositionOp::create(
      b, loc, RankedTensorType::get({1, d}, elt),
      RankedTensorType::get({1}, elt), v, positions[layout], last);
  if (!counts[layout]) {
    Value zero = arith::ConstantIndexOp::create(b, loc, 0);
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    Value flag =
        tensor::ExtractOp::create(b, loc, taken.getFound(), ValueRange{zero});
    Value held = arith::CmpFOp::create(
        b, loc, arith::CmpFPredicate::OGT, flag,
        arith::ConstantOp::create(b, loc, b.getFloatAttr(elt, 0.5)));
    counts[layout] = arith::SelectOp::create(b, loc, held, one, zero);
  }
  Value rows = leadingRows(taken.getRow(), counts[layout], loc);
  layouts[rows] = layout;
  return rows;
}

Value Narrower::leadingRows(Value source, Value count, Location at) {
  auto type = cast<RankedTensorType>(source.getType());
  int64_t rank = type.getRank();
  SmallVector<OpFoldResult> offsets(rank, b.getIndexAttr(0)),
      sizes{OpFoldResult(count)}, strides(rank, b.getIndexAttr(1));
  SmallVector<int64_t> shape(type.getShape());
  shape[0] = ShapedType::kDynamic;
  for (int64_t d = 1; d < rank; ++d)
    sizes.push_back(b.getIndexAttr(shape[d]));
  return tensor::ExtractSliceOp::create(
      b, at, RankedTensorType::get(shape, type.getElementType()), source,
      offsets, sizes, strides);
}

Value Narrower::narrowedPositions(Layout layout) {
  layout = canonical(layout);
  if (keptPositions[layout])
    return keptPositions[layout];
  // No CP row was taken: nothing narrowed is in the CP layout.
  if (layout == CP && !counts[CP])
    return narrowedPositions(SP);
  Value count = rowCount(layout);
  Value lastI64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), last);
  Value one = tensor::FromElementsOp::create(b, loc, ValueRange{lastI64});
  keptPositions[layout] = leadingRows(one, count, loc);
  return keptPositions[layout];
}

LogicalResult
Narrower::cloneNarrowed(Operation *op, ArrayRef<unsigned> rowOperands,
                        std::optional<unsigned> positionsOperand) {
  // Operands are replaced by index: a value may also be an operand that
  // stays whole (the positions of a ring's first K/V block are the
  // queries').
  SmallVector<std::pair<unsigned, Value>> replaced;
  std::optional<Layout> layout;
  for (unsigned i : rowOperands) {
    FailureOr<Value> n = narrow(op->getOperand(i));
    if (failed(n))
      return failure();
    Layout l = layoutOf(*n);
    if (layout && *layout != l)
      return fail(op, "mixes rows of two layouts");
    layout = l;
    replaced.push_back({i, *n});
  }
  if (positionsOperand) {
    if (op->getOperand(*positionsOperand) != positions[canonical(*layout)])
      return fail(op, "reads positions other than its rows' layout's");
    replaced.push_back({*positionsOperand, narrowedPositions(*layout)});
  }
  Operation *copy = b.clone(*op);
  for (auto [i, v] : replaced)
    copy->setOperand(i, v);
  for (auto [old, now] : llvm::zip(op->getResults(), copy->getResults())) {
    map.map(old, now);
    layouts[now] = *layout;
  }
  return success();
}

FailureOr<Value> Narrower::narrowReduceScatter(ReduceScatterOp op) {
  // The CP rows' partial sums, summed over the TP group (each member holds
  // the same surviving row); the SP holder keeps it.
  if (op.getDim() != 0)
    return fail(op, "scatters along a dimension other than the rows");
  FailureOr<Value> in = narrow(op.getInput());
  if (failed(in))
    return failure();
  if (layoutOf(*in) != CP)
    return fail(op, "reduces rows that are not the TP group's");
  SmallVector<StringRef> axes;
  for (Attribute a : op.getAxes())
    axes.push_back(cast<StringAttr>(a).getValue());
  Value sum =
      AllReduceOp::create(b, op.getLoc(), ValueRange{*in}, op.getMesh(), axes)
          .getResult(0);
  Value mine = leadingRows(sum, rowCount(SP), op.getLoc());
  map.map(op.getResult(), mine);
  layouts[mine] = SP;
  return mine;
}

FailureOr<Value> Narrower::narrowCombine(CombineOp op) {
  // dispatch -> expert computation -> combine, on the surviving rows.
  auto dispatch = op.getRouting().getDefiningOp<DispatchOp>();
  Operation *experts = op.getExpertOut().getDefiningOp();
  if (!dispatch || !experts || experts->getNumResults() != 1)
    return fail(op, "does not answer a dispatch through one expert op");
  if (failed(cloneNarrowed(dispatch, {0, 1, 2}, std::nullopt)))
    return failure();
  for (Value v : experts->getOperands())
    if (v.getParentBlock() == &body &&
        !isa_and_nonnull<moe::ParamOp>(v.getDefiningOp()) &&
        v.getDefiningOp() != dispatch)
      return fail(experts, "reads values other than the dispatch's and "
                           "weights");
  Value rows = map.lookup(dispatch.getInput());
  Operation *expertsCopy = b.clone(*experts, map);
  IRMapping local;
  local.map(op.getRouting(), map.lookup(op.getRouting()));
  local.map(op.getExpertOut(), expertsCopy->getResult(0));
  local.map(op.getNumTokens(), tensor::DimOp::create(b, op.getLoc(), rows, 0));
  Value out = b.clone(*op, local)->getResult(0);
  map.map(op.getResult(), out);
  layouts[out] = layoutOf(rows);
  return out;
}

/// The indices of every operand of `op`: all of them rows.
static SmallVector<unsigned> allOperands(Operation *op) {
  return llvm::to_vector(llvm::seq<unsigned>(0, op->getNumOperands()));
}

FailureOr<Value> Narrower::narrow(Value v) {
  if (Value done = map.lookupOrNull(v))
    return done;
  if (v == body.getArgument(0)) {
    Value rows = take(v, SP);
    map.map(v, rows);
    return rows;
  }
  Operation *op = v.getDefiningOp();
  if (!op || op->getBlock() != &body)
    return fail(layer, "has a row value that is not computed in the layer");
  auto done = [&](LogicalResult ok) -> FailureOr<Value> {
    if (failed(ok))
      return failure();
    return map.lookup(v);
  };
  return llvm::TypeSwitch<Operation *, FailureOr<Value>>(op)
      .Case<moe::RMSNormOp, moe::LinearOp, moe::RouterOp, moe::MLPOp,
            moe::SumSquaresOp>(
          [&](Operation *o) { return done(cloneNarrowed(o, {0}, {})); })
      // A norm over the whole projection under TP (OLMoE's q_norm): the
      // rows' sums of squares, all-reduced over the TP group (each member
      // holds the same surviving rows), then the scale.
      .Case<moe::RMSScaleOp>([&](Operation *o) {
        return done(cloneNarrowed(o, {0, 1}, {}));
      })
      .Case<AllReduceOp>([&](AllReduceOp o) -> FailureOr<Value> {
        for (Value in : o.getInputs())
          if (cast<RankedTensorType>(in.getType()).getRank() != 1)
            return fail(o, "reduces something other than per-row sums");
        return done(cloneNarrowed(o, allOperands(o), {}));
      })
      .Case<moe::RoPEOp>(
          [&](Operation *o) { return done(cloneNarrowed(o, {0}, 1u)); })
      .Case<moe::AttentionOp, moe::AttentionPartialOp>(
          [&](Operation *o) { return done(cloneNarrowed(o, {0}, 3u)); })
      .Case<moe::AttentionMergeOp>([&](Operation *o) {
        return done(cloneNarrowed(o, {0, 1, 2, 3}, {}));
      })
      .Case<tensor::CollapseShapeOp>(
          [&](Operation *o) { return done(cloneNarrowed(o, {0}, {})); })
      .Case<tensor::ExpandShapeOp>(
          [&](tensor::ExpandShapeOp o) -> FailureOr<Value> {
            // The rows stay dimension 0, now the narrowed count.
            auto reassociation = o.getReassociationIndices();
            if (reassociation.empty() || reassociation[0].size() != 1)
              return fail(o, "reshapes the rows");
            FailureOr<Value> in = narrow(o.getSrc());
            if (failed(in))
              return failure();
            SmallVector<OpFoldResult> shape = o.getMixedOutputShape();
            shape[0] =
                OpFoldResult(tensor::DimOp::create(b, o.getLoc(), *in, 0));
            Value out = tensor::ExpandShapeOp::create(
                b, o.getLoc(), o.getResultType(), *in, reassociation, shape);
            map.map(v, out);
            layouts[out] = layoutOf(*in);
            return out;
          })
      .Case<AllGatherOp>([&](AllGatherOp o) -> FailureOr<Value> {
        // The gathered rows stay whole (the K/V need them): take the
        // surviving row from them.
        if (o.getDim() != 0 || o.getType().getRank() != 2)
          return fail(o, "gathers something other than rows");
        Value rows = take(v, CP);
        map.map(v, rows);
        return rows;
      })
      .Case<ReduceScatterOp>(
          [&](ReduceScatterOp o) { return narrowReduceScatter(o); })
      .Case<CombineOp>([&](CombineOp o) { return narrowCombine(o); })
      .Default([&](Operation *o) -> FailureOr<Value> {
        // Element-wise ops (the residual adds) keep their operands' rows.
        if (o->hasTrait<OpTrait::Elementwise>() && o->getNumResults() == 1)
          return done(cloneNarrowed(o, allOperands(o), {}));
        return fail(o, "is not an op the narrowing knows");
      });
}

struct MFNarrowLastLayerPass
    : public mf::impl::MFNarrowLastLayerPassBase<MFNarrowLastLayerPass> {
  using Base::Base;

  /// The position whose row of `layer`'s result is the only one used: every
  /// use is a moe.take_position of it at the layer's SP positions, all at
  /// one target. Null otherwise (the layer stays whole).
  static Value survivingPosition(moe::LayerOp layer) {
    if (layer.getNumResults() != 1 || layer.getInputs().size() < 2 ||
        layer.getResult(0).use_empty())
      return {};
    Value target;
    for (OpOperand &use : layer.getResult(0).getUses()) {
      auto take = dyn_cast<moe::TakePositionOp>(use.getOwner());
      if (!take || take.getInput() != layer.getResult(0) ||
          take.getPositions() != layer.getInputs()[1] ||
          (target && take.getTarget() != target))
        return {};
      target = take.getTarget();
    }
    return target;
  }

  /// Makes `v` available to `at`: moves the pure ops of its block that
  /// compute it after `at` ahead of it.
  static bool hoistBefore(Value v, Operation *at, DominanceInfo &dom) {
    if (dom.properlyDominates(v, at))
      return true;
    Operation *def = v.getDefiningOp();
    if (!def || def->getBlock() != at->getBlock() || !isPure(def) ||
        def->getNumRegions())
      return false;
    for (Value operand : def->getOperands())
      if (!hoistBefore(operand, at, dom))
        return false;
    def->moveBefore(at);
    return true;
  }

  /// Narrows `layer` to the row of position `last`, rebuilt with `last` as
  /// an extra operand and its surviving rows' positions as an extra result;
  /// the takes of its result read those. Keeps the layer whole (with a
  /// remark when asked) when some op on the way is not one it knows.
  void narrowLayer(moe::LayerOp layer, Value last, DominanceInfo &dom) {
    auto keep = [&](const Twine &why) {
      if (remarks)
        layer.emitRemark() << "layer " << layer.getIndex()
                           << " kept whole: " << why;
    };
    if (!hoistBefore(last, layer, dom))
      return keep("the surviving position is computed after it");
    Block &body = layer.getBody().front();
    auto yield = cast<moe::YieldOp>(body.getTerminator());
    Operation *lastOld = yield->getPrevNode();
    BlockArgument lastArg = body.addArgument(last.getType(), last.getLoc());
    Narrower narrower(layer, lastArg);
    // The surviving SP positions first: the runtime hooks name them before
    // the first collective on the narrowed rows.
    Value positions = narrower.narrowedPositions(SP);
    FailureOr<Value> out = narrower.narrow(yield.getValues()[0]);
    if (failed(out) || narrower.layoutOf(*out) != SP) {
      while (yield->getPrevNode() != lastOld)
        yield->getPrevNode()->erase();
      body.eraseArgument(lastArg.getArgNumber());
      return keep(failed(out) ? narrower.reason
                              : "its result is not in the SP layout");
    }
    Value cpPositions = narrower.narrowedPositions(CP);
    // The runtime's hooks (tracing, routing, the dispatch's padding rows)
    // follow the surviving rows from the first collective on them.
    Operation *firstCollective = nullptr;
    for (Operation *op = lastOld ? lastOld->getNextNode() : &body.front();
         op != yield && !firstCollective; op = op->getNextNode())
      if (isa<AllReduceOp, DispatchOp>(op))
        firstCollective = op;
    Operation *at = firstCollective ? firstCollective : yield.getOperation();
    OpBuilder b(at);
    for (Value p : {positions, cpPositions})
      if (!hoistBefore(p, at, dom))
        if (Operation *def = p.getDefiningOp(); !def->isBeforeInBlock(at))
          b.setInsertionPointAfter(def);
    LayerRowsOp::create(b, layer.getLoc(), positions, cpPositions);
    yield->setOperands(ValueRange{*out, positions});

    // The layer with the position as an operand and the positions as a
    // result.
    SmallVector<Value> inputs(layer.getInputs());
    inputs.push_back(last);
    b.setInsertionPoint(layer);
    auto narrowed = moe::LayerOp::create(
        b, layer.getLoc(), layer.getIndex(), inputs,
        TypeRange{layer.getResult(0).getType(), positions.getType()});
    narrowed->setDiscardableAttrs(layer->getDiscardableAttrDictionary());
    narrowed->setAttr(MFDialect::getNarrowedAttrName(), b.getUnitAttr());
    narrowed.getBody().front().erase();
    narrowed.getBody().takeBody(layer.getBody());
    for (OpOperand &use :
         llvm::make_early_inc_range(layer.getResult(0).getUses())) {
      auto take = cast<moe::TakePositionOp>(use.getOwner());
      take.getInputMutable().assign(narrowed.getResult(0));
      take.getPositionsMutable().assign(narrowed.getResult(1));
    }
    layer.erase();
    eraseDead(narrowed.getBody().front());
    ++numNarrowed;
  }

  /// Erases the whole layer's ops that no longer reach anything: the pure
  /// ones, and the dispatches and combines whose results are unused.
  static void eraseDead(Block &body) {
    bool changed = true;
    while (changed) {
      changed = false;
      SmallVector<Operation *> ops;
      for (Operation &op : body.without_terminator())
        ops.push_back(&op);
      for (Operation *op : llvm::reverse(ops))
        if (op->getNumResults() && op->use_empty() &&
            (isPure(op) || isa<DispatchOp, CombineOp>(op))) {
          op->erase();
          changed = true;
        }
    }
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<std::pair<moe::LayerOp, Value>> candidates;
    module.walk([&](moe::LayerOp layer) {
      if (Value last = survivingPosition(layer))
        candidates.push_back({layer, last});
    });
    DominanceInfo &dom = getAnalysis<DominanceInfo>();
    for (auto [layer, last] : candidates)
      narrowLayer(layer, last, dom);
  }
};
} // namespace
