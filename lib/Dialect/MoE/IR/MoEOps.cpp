//===- MoEOps.cpp - MoE dialect ops and their verifiers -------------------===//

#include "meshfold/Dialect/MoE/IR/MoE.h"

#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;
using namespace meshfold::moe;

namespace {
/// Two dimensions agree when equal or when either is dynamic.
bool dimsAgree(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

std::string dimStr(int64_t d) {
  return ShapedType::isDynamic(d) ? std::string("?") : std::to_string(d);
}

/// Checks `v`'s rank; names the operand in the diagnostic.
LogicalResult checkRank(Operation *op, StringRef what, Type t, int64_t rank) {
  auto rt = cast<RankedTensorType>(t);
  if (rt.getRank() != rank)
    return op->emitOpError()
           << what << " must have rank " << rank << ", got " << rt;
  return success();
}

/// Checks that dimension `da` of `a` agrees with dimension `db` of `b`.
LogicalResult checkDim(Operation *op, StringRef what, Type a, int64_t da,
                       StringRef whatB, Type b, int64_t db) {
  int64_t x = cast<RankedTensorType>(a).getDimSize(da);
  int64_t y = cast<RankedTensorType>(b).getDimSize(db);
  if (!dimsAgree(x, y))
    return op->emitOpError()
           << what << " dim " << da << " (" << dimStr(x) << ") must equal "
           << whatB << " dim " << db << " (" << dimStr(y) << ")";
  return success();
}

/// An RMSNorm's epsilon: positive.
LogicalResult checkEpsilon(Operation *op, const APFloat &epsilon) {
  if (!(epsilon.convertToDouble() > 0.0))
    return op->emitOpError()
           << "epsilon must be positive, got " << epsilon.convertToDouble();
  return success();
}

/// An elementwise op's result: of the input's type.
LogicalResult checkResultIsInput(Operation *op, Type in, Type res) {
  if (in != res)
    return op->emitOpError()
           << "result type " << res << " must equal the input type " << in;
  return success();
}

LogicalResult checkSameElementType(Operation *op, ArrayRef<Type> types) {
  Type first = cast<RankedTensorType>(types.front()).getElementType();
  for (Type t : types.drop_front())
    if (cast<RankedTensorType>(t).getElementType() != first)
      return op->emitOpError()
             << "float operands and results must share one element type, got "
             << first << " and " << cast<RankedTensorType>(t).getElementType();
  return success();
}

/// Weights may be stored in a narrower float type than the one the op
/// computes in (bf16 weights of an f32 model): their readers widen each
/// element when they read it. A weight wider than the compute type is an
/// error.
LogicalResult checkWeightElementType(Operation *op, Type compute,
                                     ArrayRef<Type> weights) {
  auto computeElt =
      cast<FloatType>(cast<RankedTensorType>(compute).getElementType());
  for (Type t : weights) {
    auto elt = cast<FloatType>(cast<RankedTensorType>(t).getElementType());
    if (elt.getWidth() > computeElt.getWidth() ||
        (elt != computeElt && elt.getWidth() == computeElt.getWidth()))
      return op->emitOpError()
             << "weights must be stored in the compute element type "
             << computeElt << " or a narrower float type, got " << elt;
  }
  return success();
}

LogicalResult checkStatic(Operation *op, StringRef what, Type t,
                          int64_t fromDim = 0) {
  auto rt = cast<RankedTensorType>(t);
  for (int64_t i = fromDim; i < rt.getRank(); ++i)
    if (rt.isDynamicDim(i))
      return op->emitOpError()
             << what << " dim " << i << " must be static, got " << rt;
  return success();
}
} // namespace

LogicalResult ParamOp::verify() {
  auto type = getResult().getType();
  if (getName().empty())
    return emitOpError("name must not be empty");
  if (!type.hasStaticShape())
    return emitOpError() << "weight '" << getName()
                         << "' must have a static shape, got " << type;
  if (isStackedExperts()) {
    if (type.getRank() < 2)
      return emitOpError() << "stacked expert weight '" << getName()
                           << "' needs a leading expert dimension and a "
                              "weight shape, got "
                           << type;
    if (getName().find("{e}") != getName().rfind("{e}"))
      return emitOpError() << "weight name '" << getName()
                           << "' has more than one {e} placeholder";
  }
  return success();
}

LogicalResult PositionsOp::verify() {
  if (failed(checkRank(*this, "tokens", getTokens().getType(), 1)) ||
      failed(checkRank(*this, "result", getType(), 1)) ||
      failed(checkDim(*this, "result", getType(), 0, "tokens",
                      getTokens().getType(), 0)))
    return failure();
  return success();
}

LogicalResult EmbedOp::verify() {
  Type table = getTable().getType(), tokens = getTokens().getType(),
       res = getType();
  if (failed(checkRank(*this, "table", table, 2)) ||
      failed(checkStatic(*this, "table", table)) ||
      failed(checkRank(*this, "tokens", tokens, 1)) ||
      failed(checkRank(*this, "result", res, 2)) ||
      failed(checkDim(*this, "result", res, 0, "tokens", tokens, 0)) ||
      failed(checkDim(*this, "result", res, 1, "table", table, 1)) ||
      failed(checkStatic(*this, "result", res, 1)) ||
      failed(checkWeightElementType(*this, res, {table})))
    return failure();
  return success();
}

LogicalResult RMSNormOp::verify() {
  Type in = getInput().getType(), w = getWeight().getType(), res = getType();
  if (failed(checkEpsilon(*this, getEpsilon())))
    return failure();
  int64_t rank = cast<RankedTensorType>(in).getRank();
  if (rank != 2 && rank != 3)
    return emitOpError() << "input must have rank 2 ([T, d]) or 3 ([T, "
                            "heads, d_h]), got "
                         << in;
  if (failed(checkRank(*this, "weight", w, 1)) ||
      failed(checkDim(*this, "weight", w, 0, "input", in, rank - 1)) ||
      failed(checkSameElementType(*this, {in, res})) ||
      failed(checkWeightElementType(*this, in, {w})))
    return failure();
  return checkResultIsInput(*this, in, res);
}

LogicalResult SumSquaresOp::verify() {
  Type in = getInput().getType(), res = getType();
  if (failed(checkRank(*this, "input", in, 2)) ||
      failed(checkRank(*this, "result", res, 1)) ||
      failed(checkDim(*this, "result", res, 0, "input", in, 0)) ||
      failed(checkSameElementType(*this, {in, res})))
    return failure();
  return success();
}

LogicalResult RMSScaleOp::verify() {
  Type in = getInput().getType(), ss = getSumSquares().getType(),
       w = getWeight().getType(), res = getType();
  if (failed(checkEpsilon(*this, getEpsilon())))
    return failure();
  if (getCount() <= 0)
    return emitOpError() << "count must be positive, got " << getCount();
  if (failed(checkRank(*this, "input", in, 2)) ||
      failed(checkRank(*this, "sum_squares", ss, 1)) ||
      failed(checkRank(*this, "weight", w, 1)) ||
      failed(checkDim(*this, "sum_squares", ss, 0, "input", in, 0)) ||
      failed(checkDim(*this, "weight", w, 0, "input", in, 1)) ||
      failed(checkSameElementType(*this, {in, ss, res})) ||
      failed(checkWeightElementType(*this, in, {w})))
    return failure();
  return checkResultIsInput(*this, in, res);
}

LogicalResult ClipOp::verify() {
  double limit = getLimit().convertToDouble();
  if (!(limit > 0.0) || !std::isfinite(limit))
    return emitOpError() << "limit must be positive and finite, got " << limit;
  return success();
}

LogicalResult LinearOp::verify() {
  Type in = getInput().getType(), w = getWeight().getType(), res = getType();
  if (failed(checkRank(*this, "input", in, 2)) ||
      failed(checkRank(*this, "weight", w, 2)) ||
      failed(checkStatic(*this, "weight", w)) ||
      failed(checkRank(*this, "result", res, 2)) ||
      failed(checkDim(*this, "weight", w, 1, "input", in, 1)) ||
      failed(checkDim(*this, "result", res, 0, "input", in, 0)) ||
      failed(checkDim(*this, "result", res, 1, "weight", w, 0)) ||
      failed(checkStatic(*this, "result", res, 1)) ||
      failed(checkSameElementType(*this, {in, res})) ||
      failed(checkWeightElementType(*this, in, {w})))
    return failure();
  if (Value bias = getBias()) {
    Type bt = bias.getType();
    if (failed(checkRank(*this, "bias", bt, 1)) ||
        failed(checkDim(*this, "bias", bt, 0, "weight", w, 0)) ||
        failed(checkWeightElementType(*this, in, {bt})))
      return failure();
  }
  return success();
}

LogicalResult MLPOp::verify() {
  Type in = getInput().getType(), w1 = getW1().getType(),
       w2 = getW2().getType(), w3 = getW3().getType(), res = getType();
  if (failed(checkRank(*this, "input", in, 2)) ||
      failed(checkStatic(*this, "input", in, 1)) ||
      failed(checkRank(*this, "w1", w1, 2)) ||
      failed(checkRank(*this, "w2", w2, 2)) ||
      failed(checkStatic(*this, "w1", w1)) ||
      failed(checkStatic(*this, "w2", w2)) ||
      failed(checkDim(*this, "w1", w1, 1, "input", in, 1)) ||
      failed(checkDim(*this, "w2", w2, 0, "input", in, 1)) ||
      failed(checkDim(*this, "w2", w2, 1, "w1", w1, 0)) ||
      failed(checkSameElementType(*this, {in, res})) ||
      failed(checkWeightElementType(*this, in, {w1, w2, w3})))
    return failure();
  if (w3 != w1)
    return emitOpError() << "w3 type " << w3 << " must equal the w1 type "
                         << w1;
  if (Value gate = getGate()) {
    Type g = gate.getType();
    if (failed(checkRank(*this, "gate", g, 2)) ||
        failed(checkDim(*this, "gate", g, 1, "input", in, 1)) ||
        failed(checkWeightElementType(*this, in, {g})))
      return failure();
    if (cast<RankedTensorType>(g).getDimSize(0) != 1)
      return emitOpError() << "gate must be one row ([1, d]), got " << g;
  }
  return checkResultIsInput(*this, in, res);
}

LogicalResult RoPEOp::verify() {
  Type in = getInput().getType(), pos = getPositions().getType(),
       res = getType();
  if (!(getTheta().convertToDouble() > 0.0))
    return emitOpError() << "theta must be positive, got "
                         << getTheta().convertToDouble();
  if (failed(checkRank(*this, "input", in, 3)) ||
      failed(checkStatic(*this, "input", in, 1)) ||
      failed(checkRank(*this, "positions", pos, 1)) ||
      failed(checkDim(*this, "positions", pos, 0, "input", in, 0)))
    return failure();
  double factor = getYarnFactor().convertToDouble(),
         attention = getAttentionFactor().convertToDouble();
  if (!std::isfinite(factor) || !(factor > 0.0) || !std::isfinite(attention) ||
      !(attention > 0.0))
    return emitOpError() << "yarn_factor and attention_factor must be "
                            "positive and finite";
  if (factor != 1.0 &&
      !(getYarnHigh().convertToDouble() > getYarnLow().convertToDouble()))
    return emitOpError() << "YaRN needs yarn_high > yarn_low";
  if (cast<RankedTensorType>(in).getDimSize(2) % 2 != 0)
    return emitOpError() << "head dim must be even for rotate-half, got "
                         << cast<RankedTensorType>(in).getDimSize(2);
  if (in != res)
    return emitOpError() << "result type " << res
                         << " must equal the input type " << in;
  return success();
}

namespace {
/// The rules moe.attention and moe.attention_partial share: ranks, static
/// head dims, positions per row, one element type, K and V alike, GQA, and
/// an output shaped like the query.
LogicalResult verifyAttention(Operation *op, Value query, Value key,
                              Value value, Value qPos, Value kvPos,
                              Value keyTiles, Type result, APFloat scale) {
  Type q = query.getType(), k = key.getType(), v = value.getType(),
       qp = qPos.getType(), kp = kvPos.getType();
  if (failed(checkRank(op, "query", q, 3)) ||
      failed(checkRank(op, "key", k, 3)) ||
      failed(checkRank(op, "value", v, 3)) ||
      failed(checkStatic(op, "query", q, 1)) ||
      failed(checkStatic(op, "key", k, 1)) ||
      failed(checkRank(op, "q_positions", qp, 1)) ||
      failed(checkDim(op, "q_positions", qp, 0, "query", q, 0)) ||
      failed(checkSameElementType(op, {q, k, v, result})))
    return failure();
  if (keyTiles) {
    // A table of key tiles: [n, 2] (first row, rows) and [n, C] positions.
    Type t = keyTiles.getType();
    if (failed(checkRank(op, "key_tiles", t, 2)) ||
        failed(checkRank(op, "kv_positions", kp, 2)) ||
        failed(checkStatic(op, "kv_positions", kp, 1)) ||
        failed(checkDim(op, "kv_positions", kp, 0, "key_tiles", t, 0)))
      return failure();
    if (cast<RankedTensorType>(t).getDimSize(1) != 2)
      return op->emitOpError() << "key_tiles must be [n, 2] (first row, "
                                  "rows), got "
                               << t;
  } else if (failed(checkRank(op, "kv_positions", kp, 1)) ||
             failed(checkDim(op, "kv_positions", kp, 0, "key", k, 0))) {
    return failure();
  }
  if (!(scale.convertToDouble() > 0.0))
    return op->emitOpError()
           << "scale must be positive, got " << scale.convertToDouble();
  if (k != v)
    return op->emitOpError()
           << "key type " << k << " and value type " << v << " must be equal";
  if (failed(checkDim(op, "key", k, 2, "query", q, 2)))
    return failure();
  int64_t nh = cast<RankedTensorType>(q).getDimSize(1);
  int64_t nkv = cast<RankedTensorType>(k).getDimSize(1);
  if (nkv <= 0 || nh % nkv != 0)
    return op->emitOpError()
           << "GQA: query heads (" << nh << ") must be a multiple of KV heads ("
           << nkv << ")";
  if (q != result)
    return op->emitOpError()
           << "result type " << result << " must equal the query type " << q;
  return success();
}
} // namespace

LogicalResult AttentionOp::verify() {
  return verifyAttention(*this, getQuery(), getKey(), getValue(),
                         getQPositions(), getKvPositions(), getKeyTiles(),
                         getType(), getScale());
}

LogicalResult RouterOp::verify() {
  Type in = getInput().getType(), gate = getGate().getType(),
       w = getWeights().getType(), idx = getIndices().getType();
  if (failed(checkRank(*this, "input", in, 2)) ||
      failed(checkRank(*this, "gate", gate, 2)) ||
      failed(checkStatic(*this, "gate", gate)) ||
      failed(checkRank(*this, "weights", w, 2)) ||
      failed(checkRank(*this, "indices", idx, 2)) ||
      failed(checkDim(*this, "gate", gate, 1, "input", in, 1)) ||
      failed(checkDim(*this, "weights", w, 0, "input", in, 0)) ||
      failed(checkDim(*this, "indices", idx, 0, "input", in, 0)) ||
      failed(checkSameElementType(*this, {in, w})) ||
      failed(checkWeightElementType(*this, in, {gate})))
    return failure();
  int64_t experts = cast<RankedTensorType>(gate).getDimSize(0);
  int64_t k = getTopK();
  if (k > experts)
    return emitOpError() << "top_k (" << k << ") must not exceed the number "
                         << "of experts (" << experts << ")";
  for (Type t : {w, idx})
    if (cast<RankedTensorType>(t).getDimSize(1) != k)
      return emitOpError() << "weights and indices must be [T, top_k = " << k
                           << "], got " << t;
  if (Value bias = getBias()) {
    if (!getSigmoid())
      return emitOpError() << "a bias (e_score_correction_bias) needs sigmoid "
                              "scoring";
    if (failed(checkRank(*this, "bias", bias.getType(), 1)) ||
        failed(checkDim(*this, "bias", bias.getType(), 0, "gate", gate, 0)) ||
        failed(checkWeightElementType(*this, in, {bias.getType()})))
      return failure();
  }
  int64_t groups = getNGroup(), keep = getTopkGroup();
  if ((groups > 1 || keep > 1 || getScaling().convertToDouble() != 1.0) &&
      !getSigmoid())
    return emitOpError() << "n_group, topk_group and scaling need sigmoid "
                            "scoring";
  if (experts % groups != 0)
    return emitOpError() << "n_group (" << groups << ") must divide the "
                         << "number of experts (" << experts << ")";
  if (groups > 1 && experts / groups < 2)
    return emitOpError() << "each of the n_group (" << groups
                         << ") groups needs at least 2 experts (a group "
                            "scores its top two), got "
                         << experts / groups;
  if (keep > groups)
    return emitOpError() << "topk_group (" << keep << ") must not exceed "
                         << "n_group (" << groups << ")";
  if (k > keep * (experts / groups))
    return emitOpError() << "top_k (" << k << ") exceeds the experts of the "
                         << "topk_group (" << keep << ") kept groups ("
                         << keep * (experts / groups) << ")";
  if (!std::isfinite(getScaling().convertToDouble()) ||
      !(getScaling().convertToDouble() > 0.0))
    return emitOpError() << "scaling must be positive and finite";
  return success();
}

LogicalResult HeadLinearOp::verify() {
  Type in = getInput().getType(), w = getWeight().getType(), res = getType();
  if (failed(checkRank(*this, "input", in, 3)) ||
      failed(checkRank(*this, "weight", w, 3)) ||
      failed(checkStatic(*this, "weight", w)) ||
      failed(checkRank(*this, "result", res, 3)) ||
      failed(checkDim(*this, "weight", w, 0, "input", in, 1)) ||
      failed(checkDim(*this, "result", res, 0, "input", in, 0)) ||
      failed(checkDim(*this, "result", res, 1, "input", in, 1)) ||
      failed(checkSameElementType(*this, {in, res})) ||
      failed(checkWeightElementType(*this, in, {w})))
    return failure();
  bool t = getTransposeWeight();
  if (failed(checkDim(*this, "weight", w, t ? 1 : 2, "input", in, 2)) ||
      failed(checkDim(*this, "result", res, 2, "weight", w, t ? 2 : 1)))
    return failure();
  return success();
}

LogicalResult ExpertsOp::verify() {
  Type in = getInput().getType(), w = getWeights().getType(),
       idx = getIndices().getType(), w1 = getW1().getType(),
       w2 = getW2().getType(), w3 = getW3().getType(), res = getType();
  if (failed(checkRank(*this, "input", in, 2)) ||
      failed(checkRank(*this, "weights", w, 2)) ||
      failed(checkRank(*this, "indices", idx, 2)) ||
      failed(checkRank(*this, "w1", w1, 3)) ||
      failed(checkRank(*this, "w2", w2, 3)) ||
      failed(checkRank(*this, "w3", w3, 3)) ||
      failed(checkStatic(*this, "w1", w1)) ||
      failed(checkStatic(*this, "w2", w2)) ||
      failed(checkSameElementType(*this, {in, w, res})) ||
      failed(checkWeightElementType(*this, in, {w1, w2, w3})))
    return failure();
  if (w1 != w3)
    return emitOpError() << "w1 " << w1 << " and w3 " << w3
                         << " must have the same type";
  if (failed(checkDim(*this, "weights", w, 0, "input", in, 0)) ||
      failed(checkDim(*this, "indices", idx, 0, "input", in, 0)) ||
      failed(checkDim(*this, "indices", idx, 1, "weights", w, 1)) ||
      failed(checkDim(*this, "w1", w1, 2, "input", in, 1)) ||
      failed(checkDim(*this, "w2", w2, 0, "w1", w1, 0)) ||
      failed(checkDim(*this, "w2", w2, 1, "input", in, 1)) ||
      failed(checkDim(*this, "w2", w2, 2, "w1", w1, 1)))
    return failure();
  if (in != res)
    return emitOpError() << "result type " << res
                         << " must equal the input type " << in;
  return success();
}

LogicalResult LMHeadOp::verify() {
  Type in = getInput().getType(), w = getWeight().getType(), res = getType(),
       pos = getPositions().getType();
  if (failed(checkRank(*this, "input", in, 2)) ||
      failed(checkRank(*this, "positions", pos, 1)) ||
      failed(checkDim(*this, "positions", pos, 0, "input", in, 0)) ||
      failed(checkRank(*this, "result", res, 1)) ||
      failed(checkStatic(*this, "result", res)))
    return failure();
  if (failed(checkRank(*this, "input", in, 2)) ||
      failed(checkRank(*this, "weight", w, 2)) ||
      failed(checkStatic(*this, "weight", w)) ||
      failed(checkRank(*this, "result", res, 1)) ||
      failed(checkDim(*this, "weight", w, 1, "input", in, 1)) ||
      failed(checkDim(*this, "result", res, 0, "weight", w, 0)) ||
      failed(checkSameElementType(*this, {in, res})) ||
      failed(checkWeightElementType(*this, in, {w})))
    return failure();
  return success();
}

LogicalResult AttentionPartialOp::verify() {
  Type q = getQuery().getType(), lse = getLse().getType();
  if (failed(verifyAttention(*this, getQuery(), getKey(), getValue(),
                             getQPositions(), getKvPositions(), getKeyTiles(),
                             getResult().getType(), getScale())) ||
      failed(checkRank(*this, "lse", lse, 2)) ||
      failed(checkDim(*this, "lse", lse, 0, "query", q, 0)) ||
      failed(checkDim(*this, "lse", lse, 1, "query", q, 1)) ||
      failed(checkSameElementType(*this, {q, lse})))
    return failure();
  return success();
}

LogicalResult AttentionMergeOp::verify() {
  Type o1 = getOut1().getType(), o2 = getOut2().getType(),
       l1 = getLse1().getType(), l2 = getLse2().getType(),
       res = getResult().getType(), lse = getLse().getType();
  if (o1 != o2 || o1 != res)
    return emitOpError() << "partial outputs and result must have one type, "
                         << "got " << o1 << ", " << o2 << ", " << res;
  if (l1 != l2 || l1 != lse)
    return emitOpError() << "log-sum-exps must have one type, got " << l1
                         << ", " << l2 << ", " << lse;
  if (failed(checkRank(*this, "out1", o1, 3)) ||
      failed(checkRank(*this, "lse1", l1, 2)) ||
      failed(checkDim(*this, "lse1", l1, 0, "out1", o1, 0)) ||
      failed(checkDim(*this, "lse1", l1, 1, "out1", o1, 1)) ||
      failed(checkSameElementType(*this, {o1, l1})))
    return failure();
  return success();
}

LogicalResult ExpertFFNOp::verify() {
  Type in = getInput().getType(), ex = getExperts().getType(),
       w1 = getW1().getType(), w2 = getW2().getType(), w3 = getW3().getType(),
       res = getType();
  if (failed(checkRank(*this, "input", in, 2)) ||
      failed(checkRank(*this, "experts", ex, 1)) ||
      failed(checkRank(*this, "w1", w1, 3)) ||
      failed(checkRank(*this, "w2", w2, 3)) ||
      failed(checkStatic(*this, "w1", w1)) ||
      failed(checkStatic(*this, "w2", w2)) ||
      failed(checkDim(*this, "experts", ex, 0, "input", in, 0)) ||
      failed(checkDim(*this, "w1", w1, 2, "input", in, 1)) ||
      failed(checkDim(*this, "w2", w2, 0, "w1", w1, 0)) ||
      failed(checkDim(*this, "w2", w2, 1, "input", in, 1)) ||
      failed(checkDim(*this, "w2", w2, 2, "w1", w1, 1)) ||
      failed(checkSameElementType(*this, {in, res})) ||
      failed(checkWeightElementType(*this, in, {w1, w2, w3})))
    return failure();
  if (w1 != w3)
    return emitOpError() << "w1 " << w1 << " and w3 " << w3
                         << " must have the same type";
  if (in != res)
    return emitOpError() << "result type " << res
                         << " must equal the input type " << in;
  return success();
}

void LayerOp::build(OpBuilder &b, OperationState &state, int64_t index,
                    ValueRange inputs, TypeRange resultTypes) {
  state.addAttribute(getIndexAttrName(state.name), b.getI64IntegerAttr(index));
  state.addOperands(inputs);
  state.addTypes(resultTypes);
  Region *body = state.addRegion();
  Block *block = new Block();
  body->push_back(block);
  for (Value v : inputs)
    block->addArgument(v.getType(), v.getLoc());
}

LogicalResult LayerOp::verify() {
  Block &block = getBody().front();
  if (block.getArgumentTypes() != getInputs().getTypes())
    return emitOpError("block arguments must have the types of the operands");
  auto yield = cast<YieldOp>(block.getTerminator());
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("yielded values must have the types of the results");
  return success();
}

LogicalResult TakePositionOp::verify() {
  Type in = getInput().getType(), pos = getPositions().getType(),
       row = getRow().getType(), found = getFound().getType();
  if (failed(checkRank(*this, "input", in, 2)) ||
      failed(checkRank(*this, "positions", pos, 1)) ||
      failed(checkRank(*this, "row", row, 2)) ||
      failed(checkRank(*this, "found", found, 1)) ||
      failed(checkDim(*this, "positions", pos, 0, "input", in, 0)) ||
      failed(checkDim(*this, "row", row, 1, "input", in, 1)) ||
      failed(checkSameElementType(*this, {in, row, found})))
    return failure();
  if (cast<RankedTensorType>(row).getDimSize(0) != 1 ||
      cast<RankedTensorType>(found).getDimSize(0) != 1)
    return emitOpError("row must be [1, d] and found [1]");
  return success();
}

/// Logits of rows `[n, V]` (static V) at positions `[n]`.
static LogicalResult verifyRowLogits(Operation *op, Type l, Type pos) {
  if (failed(checkRank(op, "logits", l, 2)) ||
      failed(checkRank(op, "positions", pos, 1)) ||
      failed(checkStatic(op, "logits", l, 1)) ||
      failed(checkDim(op, "positions", pos, 0, "logits", l, 0)))
    return failure();
  return success();
}

LogicalResult PromptLogitsOp::verify() {
  return verifyRowLogits(*this, getLogits().getType(),
                         getPositions().getType());
}

LogicalResult StepLogitsOp::verify() {
  return verifyRowLogits(*this, getLogits().getType(),
                         getPositions().getType());
}

LogicalResult StepHeadRowsOp::verify() {
  return failure(
      failed(checkRank(*this, "positions", getPositions().getType(), 1)) ||
      failed(checkRank(*this, "rows", getRows().getType(), 1)));
}

LogicalResult TakeRowsOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto res = cast<RankedTensorType>(getResult().getType());
  if (failed(checkRank(*this, "rows", getRows().getType(), 1)) ||
      failed(checkDim(*this, "result", res, 0, "rows", getRows().getType(), 0)))
    return failure();
  if (in.getRank() < 1 || res.getRank() != in.getRank() ||
      in.getElementType() != res.getElementType() ||
      in.getShape().drop_front() != res.getShape().drop_front())
    return emitOpError() << "result " << res << " must be rows of input " << in;
  return success();
}

LogicalResult LogitsOp::verify() {
  return checkRank(*this, "logits", getLogits().getType(), 1);
}

/// K and V `[T, n_kv, d_h]` of one type and their positions `[T]`.
static LogicalResult verifyKV(Operation *op, Type k, Type v, Type pos) {
  if (failed(checkRank(op, "key", k, 3)) ||
      failed(checkStatic(op, "key", k, 1)) ||
      failed(checkRank(op, "positions", pos, 1)) ||
      failed(checkDim(op, "positions", pos, 0, "key", k, 0)))
    return failure();
  if (k != v)
    return op->emitOpError()
           << "key type " << k << " and value type " << v << " must be equal";
  return success();
}

LogicalResult KVCacheOp::verify() {
  return verifyKV(*this, getKey().getType(), getValue().getType(),
                  getPositions().getType());
}

LogicalResult KVHistoryOp::verify() {
  Type k = getKey().getType(), v = getValue().getType(),
       pos = getPositions().getType();
  if (getStepKey().getType() != getStepValue().getType())
    return emitOpError() << "step key type " << getStepKey().getType()
                         << " and step value type " << getStepValue().getType()
                         << " must be equal";
  auto stepKey = cast<RankedTensorType>(getStepKey().getType());
  auto key = dyn_cast<RankedTensorType>(k);
  if (!key || stepKey.getRank() != 3 ||
      stepKey.getShape().drop_front() != key.getShape().drop_front() ||
      stepKey.getElementType() != key.getElementType())
    return emitOpError() << "step key " << stepKey
                         << " must have the key's head and element dims, " << k;
  if (failed(checkRank(*this, "step_positions", getStepPositions().getType(),
                       1)) ||
      failed(checkDim(*this, "step_positions", getStepPositions().getType(), 0,
                      "step_key", stepKey, 0)))
    return failure();
  return verifyKV(*this, k, v, pos);
}

#define GET_OP_CLASSES
#include "meshfold/Dialect/MoE/IR/MoEOps.cpp.inc"
