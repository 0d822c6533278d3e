//===- MoEToLinalg.cpp - lower moe compute ops to linalg ------------------===//
//
// Each moe op becomes a short chain of linalg.generic ops on tensors. The
// lowering works on whatever shapes the op carries, so it serves the global
// model and the per-rank local shapes that partitioning produces alike.
//
// Weights may be stored in a narrower float type than the op computes in
// (bf16 weights of an f32 model): every body that reads a weight element
// widens it with `widen` (arith.extf), so accumulators, activations and
// results stay in the compute type.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Conversion/MoEToLinalg/MoEToLinalg.h"
#include "meshfold/Conversion/Passes.h"
#include "meshfold/Dialect/MoE/IR/MoE.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/DialectConversion.h"

#include <functional>
#include <limits>

#define DEBUG_TYPE "convert-moe-to-linalg"

namespace meshfold {
#define GEN_PASS_DEF_CONVERTMOETOLINALGPASS
#include "meshfold/Conversion/Passes.h.inc"
} // namespace meshfold

using namespace mlir;
using namespace meshfold;
using namespace meshfold::moe;

namespace {
using IT = utils::IteratorType;
constexpr IT kPar = IT::parallel;
constexpr IT kRed = IT::reduction;
using BodyFn = function_ref<void(OpBuilder &, Location, ValueRange)>;

/// An affine map of `numDims` loops that picks the listed loop dims.
AffineMap pick(MLIRContext *ctx, unsigned numDims, ArrayRef<unsigned> dims) {
  SmallVector<AffineExpr> exprs;
  for (unsigned d : dims)
    exprs.push_back(getAffineDimExpr(d, ctx));
  return AffineMap::get(numDims, 0, exprs, ctx);
}

/// tensor.empty of `type`, dynamic dims taken from `sources`: (value, dim
/// index) pairs, either one per dim of `type` (entries for static dims are
/// ignored) or one per dynamic dim, in order.
Value makeEmpty(OpBuilder &b, Location loc, RankedTensorType type,
                ArrayRef<std::pair<Value, int64_t>> sources) {
  SmallVector<Value> dyn;
  bool perDim = int64_t(sources.size()) == type.getRank();
  unsigned next = 0;
  for (int64_t i = 0; i < type.getRank(); ++i) {
    if (!type.isDynamicDim(i))
      continue;
    unsigned at = perDim ? unsigned(i) : next++;
    assert(at < sources.size() && sources[at].first &&
           "missing dynamic size source");
    auto [v, d] = sources[at];
    dyn.push_back(tensor::DimOp::create(b, loc, v, d));
  }
  return tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType(),
                                 dyn);
}

/// A tensor of `type` filled with `value`.
Value makeFilled(OpBuilder &b, Location loc, RankedTensorType type,
                 ArrayRef<std::pair<Value, int64_t>> sources, TypedAttr value) {
  Value empty = makeEmpty(b, loc, type, sources);
  Value cst = arith::ConstantOp::create(b, loc, value);
  return linalg::FillOp::create(b, loc, cst, empty).getResult(0);
}

Value zeros(OpBuilder &b, Location loc, RankedTensorType type,
            ArrayRef<std::pair<Value, int64_t>> sources) {
  return makeFilled(b, loc, type, sources,
                    b.getZeroAttr(type.getElementType()));
}

RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type elt) {
  return RankedTensorType::get(shape, elt);
}

ResultRange generic(OpBuilder &b, Location loc, ValueRange ins, ValueRange outs,
                    ArrayRef<AffineMap> maps, ArrayRef<IT> iters, BodyFn body) {
  return linalg::GenericOp::create(b, loc, TypeRange(outs), ins, outs, maps,
                                   iters, body)
      .getResults();
}

Value idx(OpBuilder &b, Location loc, int64_t dim) {
  return linalg::IndexOp::create(b, loc, dim);
}

Value cstF(OpBuilder &b, Location loc, Type t, double v) {
  return arith::ConstantOp::create(b, loc, t, b.getFloatAttr(t, v));
}

Value negInf(OpBuilder &b, Location loc, Type t) {
  return cstF(b, loc, t, -std::numeric_limits<double>::infinity());
}

int64_t dimOf(Value v, unsigned i) {
  return cast<RankedTensorType>(v.getType()).getDimSize(i);
}

/// `v` in the float type `to`: a weight element stored in a narrower type is
/// extended (exactly) to the compute type; anything else is returned as is.
Value widen(OpBuilder &b, Location loc, Value v, Type to) {
  if (v.getType() == to)
    return v;
  return arith::ExtFOp::create(b, loc, to, v);
}

/// The body of a generic that accumulates in0 * in1 into its output, in the
/// output's type (a narrower weight operand is widened first).
void multiplyAccumulate(OpBuilder &nb, Location l, ValueRange a) {
  Type acc = a[2].getType();
  Value m = arith::MulFOp::create(nb, l, widen(nb, l, a[0], acc),
                                  widen(nb, l, a[1], acc));
  linalg::YieldOp::create(nb, l, Value(arith::AddFOp::create(nb, l, a[2], m)));
}

/// x [T, in] times w [out, in]^T -> [T, out].
Value buildLinear(OpBuilder &b, Location loc, Value x, Value w,
                  RankedTensorType resultType) {
  MLIRContext *ctx = b.getContext();
  Value init = zeros(b, loc, resultType, {{x, 0}});
  return generic(
      b, loc, {x, w}, {init},
      {pick(ctx, 3, {0, 2}), pick(ctx, 3, {1, 2}), pick(ctx, 3, {0, 1})},
      {kPar, kPar, kRed}, multiplyAccumulate)[0];
}

/// silu(g) * u = g / (1 + exp(-g)) * u.
Value buildSwiGLU(OpBuilder &b, Location loc, Type elt, Value g, Value u) {
  Value one = cstF(b, loc, elt, 1.0);
  Value den = arith::AddFOp::create(
      b, loc, one,
      math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, g)));
  Value silu = arith::DivFOp::create(b, loc, g, den);
  return arith::MulFOp::create(b, loc, silu, u);
}

/// The row of `pos` (i64 positions) holding `target` (an index): whether
/// there is one, and its index (0 when there is none).
std::pair<Value, Value> findRow(OpBuilder &b, Location loc, Value pos,
                                Value target) {
  MLIRContext *ctx = b.getContext();
  Type i64 = cast<RankedTensorType>(pos.getType()).getElementType();
  Value t = arith::IndexCastOp::create(b, loc, i64, target);
  auto scalar = RankedTensorType::get({}, i64);
  Value none = makeFilled(b, loc, scalar, {}, b.getIntegerAttr(i64, -1));
  Value rowT = generic(
      b, loc, {pos}, {none}, {pick(ctx, 1, {0}), AffineMap::get(1, 0, {}, ctx)},
      {kRed}, [&](OpBuilder &nb, Location l, ValueRange a) {
        Value hit =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, a[0], t);
        Value i = arith::IndexCastOp::create(nb, l, i64, idx(nb, l, 0));
        linalg::YieldOp::create(
            nb, l, Value(arith::SelectOp::create(nb, l, hit, i, a[1])));
      })[0];
  Value row = tensor::ExtractOp::create(b, loc, rowT, ValueRange{});
  Value zero = arith::ConstantOp::create(b, loc, b.getIntegerAttr(i64, 0));
  Value found =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, row, zero);
  Value rowIdx = arith::IndexCastOp::create(
      b, loc, b.getIndexType(),
      arith::SelectOp::create(b, loc, found, row, zero));
  return {found, rowIdx};
}

/// The body of the generic that accumulates h1 += x * w1[e, f, d] and
/// h3 += x * w3[e, f, d], with e the routed expert (operand 1) and f, d the
/// loop dims given.
std::function<void(OpBuilder &, Location, ValueRange)>
gatedUpBody(Value w1, Value w3, unsigned fDim, unsigned dDim) {
  return [=](OpBuilder &nb, Location l, ValueRange a) {
    Value e = arith::IndexCastOp::create(nb, l, nb.getIndexType(), a[1]);
    SmallVector<Value> at = {e, idx(nb, l, fDim), idx(nb, l, dDim)};
    Type acc = a[2].getType();
    Value a1 = widen(nb, l, tensor::ExtractOp::create(nb, l, w1, at), acc);
    Value a3 = widen(nb, l, tensor::ExtractOp::create(nb, l, w3, at), acc);
    linalg::YieldOp::create(
        nb, l,
        ValueRange{arith::AddFOp::create(
                       nb, l, a[2], arith::MulFOp::create(nb, l, a[0], a1)),
                   arith::AddFOp::create(
                       nb, l, a[3], arith::MulFOp::create(nb, l, a[0], a3))});
  };
}

/// Replaces every moe.layer by its body.
void inlineLayers(Operation *root) {
  SmallVector<LayerOp> layers;
  root->walk([&](LayerOp op) { layers.push_back(op); });
  for (LayerOp op : layers) {
    Block &body = op.getBody().front();
    auto yield = cast<YieldOp>(body.getTerminator());
    SmallVector<Value> results(yield.getValues());
    yield.erase();
    IRRewriter rewriter(op.getContext());
    rewriter.inlineBlockBefore(&body, op, op.getInputs());
    rewriter.replaceOp(op, results);
  }
}

//===----------------------------------------------------------------------===//
// Patterns
//===----------------------------------------------------------------------===//

struct PositionsLowering : OpConversionPattern<PositionsOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(PositionsOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    auto type = op.getType();
    Value init = makeEmpty(rewriter, loc, type, {{adaptor.getTokens(), 0}});
    Value res = generic(rewriter, loc, {}, {init}, {pick(ctx, 1, {0})}, {kPar},
                        [&](OpBuilder &nb, Location l, ValueRange) {
                          Value i = idx(nb, l, 0);
                          Value c = arith::IndexCastOp::create(
                              nb, l, type.getElementType(), i);
                          linalg::YieldOp::create(nb, l, c);
                        })[0];
    rewriter.replaceOp(op, res);
    return success();
  }
};

struct EmbedLowering : OpConversionPattern<EmbedOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(EmbedOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    Value table = adaptor.getTable(), tokens = adaptor.getTokens();
    Value init = makeEmpty(rewriter, loc, op.getType(), {{tokens, 0}});
    Value res = generic(
        rewriter, loc, {tokens}, {init},
        {pick(ctx, 2, {0}), pick(ctx, 2, {0, 1})}, {kPar, kPar},
        [&](OpBuilder &nb, Location l, ValueRange a) {
          Value row =
              arith::IndexCastOp::create(nb, l, nb.getIndexType(), a[0]);
          Value v = tensor::ExtractOp::create(nb, l, table,
                                              ValueRange{row, idx(nb, l, 1)});
          linalg::YieldOp::create(nb, l, widen(nb, l, v, a[1].getType()));
        })[0];
    rewriter.replaceOp(op, res);
    return success();
  }
};

struct RMSNormLowering : OpConversionPattern<RMSNormOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(RMSNormOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    Value x = adaptor.getInput(), w = adaptor.getWeight();
    auto type = op.getType();
    Type elt = type.getElementType();
    int64_t d = type.getDimSize(1);
    Value sumsq = generic(
        rewriter, loc, {x},
        {zeros(rewriter, loc, tensorOf({type.getDimSize(0)}, elt), {{x, 0}})},
        {pick(ctx, 2, {0, 1}), pick(ctx, 2, {0})}, {kPar, kRed},
        [](OpBuilder &nb, Location l, ValueRange a) {
          Value sq = arith::MulFOp::create(nb, l, a[0], a[0]);
          linalg::YieldOp::create(
              nb, l, Value(arith::AddFOp::create(nb, l, a[1], sq)));
        })[0];
    double eps = op.getEpsilon().convertToDouble();
    Value res = generic(
        rewriter, loc, {x, sumsq, w},
        {makeEmpty(rewriter, loc, type, {{x, 0}})},
        {pick(ctx, 2, {0, 1}), pick(ctx, 2, {0}), pick(ctx, 2, {1}),
         pick(ctx, 2, {0, 1})},
        {kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
          Value mean =
              arith::DivFOp::create(nb, l, a[1], cstF(nb, l, elt, double(d)));
          Value var = arith::AddFOp::create(nb, l, mean, cstF(nb, l, elt, eps));
          Value inv = math::RsqrtOp::create(nb, l, var);
          Value y = arith::MulFOp::create(nb, l, a[0], inv);
          linalg::YieldOp::create(
              nb, l,
              Value(arith::MulFOp::create(nb, l, y, widen(nb, l, a[2], elt))));
        })[0];
    rewriter.replaceOp(op, res);
    return success();
  }
};

struct LinearLowering : OpConversionPattern<LinearOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(LinearOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(op,
                       buildLinear(rewriter, op.getLoc(), adaptor.getInput(),
                                   adaptor.getWeight(), op.getType()));
    return success();
  }
};

struct RoPELowering : OpConversionPattern<RoPEOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(RoPEOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    Value x = adaptor.getInput(), pos = adaptor.getPositions();
    auto type = op.getType();
    Type elt = type.getElementType();
    int64_t dh = type.getDimSize(2), half = dh / 2;
    double theta = op.getTheta().convertToDouble();
    Value res = generic(
        rewriter, loc, {x, pos}, {makeEmpty(rewriter, loc, type, {{x, 0}})},
        {pick(ctx, 3, {0, 1, 2}), pick(ctx, 3, {0}), pick(ctx, 3, {0, 1, 2})},
        {kPar, kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
          Value j = idx(nb, l, 2);
          Value cHalf = arith::ConstantIndexOp::create(nb, l, half);
          Value lower =
              arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ult, j, cHalf);
          Value jj = arith::RemUIOp::create(nb, l, j, cHalf);
          Value partnerIdx = arith::SelectOp::create(
              nb, l, lower, arith::AddIOp::create(nb, l, j, cHalf),
              arith::SubIOp::create(nb, l, j, cHalf));
          Value partner = tensor::ExtractOp::create(
              nb, l, x, ValueRange{idx(nb, l, 0), idx(nb, l, 1), partnerIdx});
          // inv_freq = 1 / theta^(2*jj / dh), as Hugging Face computes it.
          Value jjI = arith::IndexCastOp::create(nb, l, nb.getI64Type(), jj);
          Value jjF = arith::SIToFPOp::create(nb, l, elt, jjI);
          Value expo = arith::DivFOp::create(
              nb, l, arith::MulFOp::create(nb, l, jjF, cstF(nb, l, elt, 2.0)),
              cstF(nb, l, elt, double(dh)));
          Value p = math::PowFOp::create(nb, l, cstF(nb, l, elt, theta), expo);
          Value invFreq =
              arith::DivFOp::create(nb, l, cstF(nb, l, elt, 1.0), p);
          Value posF = arith::SIToFPOp::create(nb, l, elt, a[1]);
          Value angle = arith::MulFOp::create(nb, l, posF, invFreq);
          Value c = math::CosOp::create(nb, l, angle);
          Value s = math::SinOp::create(nb, l, angle);
          Value sign = arith::SelectOp::create(
              nb, l, lower, cstF(nb, l, elt, -1.0), cstF(nb, l, elt, 1.0));
          Value xc = arith::MulFOp::create(nb, l, a[0], c);
          Value ps = arith::MulFOp::create(
              nb, l, arith::MulFOp::create(nb, l, partner, s), sign);
          linalg::YieldOp::create(nb, l,
                                  Value(arith::AddFOp::create(nb, l, xc, ps)));
        })[0];
    rewriter.replaceOp(op, res);
    return success();
  }
};

/// Causal GQA attention by global positions. Returns the normalised output
/// and, when `withLse`, the log-sum-exp of each query/head's masked scores.
std::pair<Value, Value> buildAttention(OpBuilder &b, Location loc, Value q,
                                       Value k, Value v, Value qpos, Value kpos,
                                       double scale, RankedTensorType qType,
                                       bool withLse) {
  MLIRContext *ctx = b.getContext();
  Type elt = qType.getElementType();
  int64_t tq = dimOf(q, 0), tk = dimOf(k, 0), nh = dimOf(q, 1),
          nkv = dimOf(k, 1), group = nh / nkv;

  // Loop dims (h, i, j, d); KV head = h floordiv group.
  AffineExpr h = getAffineDimExpr(0, ctx), i = getAffineDimExpr(1, ctx),
             j = getAffineDimExpr(2, ctx), d = getAffineDimExpr(3, ctx);
  auto scoresType = tensorOf({nh, tq, tk}, elt);
  // Sizes by dim of [h, i, j]: h is static, i from q, j from k.
  SmallVector<std::pair<Value, int64_t>> hij = {{Value(), 0}, {q, 0}, {k, 0}};
  Value scores = generic(b, loc, {q, k}, {zeros(b, loc, scoresType, hij)},
                         {AffineMap::get(4, 0, {i, h, d}, ctx),
                          AffineMap::get(4, 0, {j, h.floorDiv(group), d}, ctx),
                          AffineMap::get(4, 0, {h, i, j}, ctx)},
                         {kPar, kPar, kPar, kRed}, multiplyAccumulate)[0];
  // Scale and apply the causal mask by global positions.
  Value masked = generic(
      b, loc, {scores, qpos, kpos}, {makeEmpty(b, loc, scoresType, hij)},
      {pick(ctx, 3, {0, 1, 2}), pick(ctx, 3, {1}), pick(ctx, 3, {2}),
       pick(ctx, 3, {0, 1, 2})},
      {kPar, kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
        Value ok =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sle, a[2], a[1]);
        Value s = arith::MulFOp::create(nb, l, a[0], cstF(nb, l, elt, scale));
        linalg::YieldOp::create(
            nb, l,
            Value(arith::SelectOp::create(nb, l, ok, s, negInf(nb, l, elt))));
      })[0];
  // Row max and the sum of exponentials (a fully masked row gives 0).
  auto rowType = tensorOf({nh, tq}, elt);
  Value rowMax =
      generic(b, loc, {masked},
              {makeFilled(b, loc, rowType, {{q, 0}},
                          b.getFloatAttr(
                              elt, -std::numeric_limits<double>::infinity()))},
              {pick(ctx, 3, {0, 1, 2}), pick(ctx, 3, {0, 1})},
              {kPar, kPar, kRed}, [](OpBuilder &nb, Location l, ValueRange a) {
                linalg::YieldOp::create(
                    nb, l, Value(arith::MaximumFOp::create(nb, l, a[0], a[1])));
              })[0];
  auto expBody = [&](OpBuilder &nb, Location l, Value s, Value m) -> Value {
    Value isInf = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, m,
                                        negInf(nb, l, elt));
    Value e = math::ExpOp::create(nb, l, arith::SubFOp::create(nb, l, s, m));
    return arith::SelectOp::create(nb, l, isInf, cstF(nb, l, elt, 0.0), e);
  };
  Value probs = generic(
      b, loc, {masked, rowMax}, {makeEmpty(b, loc, scoresType, hij)},
      {pick(ctx, 3, {0, 1, 2}), pick(ctx, 3, {0, 1}), pick(ctx, 3, {0, 1, 2})},
      {kPar, kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
        linalg::YieldOp::create(nb, l, expBody(nb, l, a[0], a[1]));
      })[0];
  Value rowSum =
      generic(b, loc, {probs}, {zeros(b, loc, rowType, {{q, 0}})},
              {pick(ctx, 3, {0, 1, 2}), pick(ctx, 3, {0, 1})},
              {kPar, kPar, kRed}, [](OpBuilder &nb, Location l, ValueRange a) {
                linalg::YieldOp::create(
                    nb, l, Value(arith::AddFOp::create(nb, l, a[0], a[1])));
              })[0];
  // out[i, h, d] = sum_j p[h, i, j] * v[j, h / group, d] / sum[h, i].
  // Loop dims (i, h, d, j).
  AffineExpr oi = getAffineDimExpr(0, ctx), oh = getAffineDimExpr(1, ctx),
             od = getAffineDimExpr(2, ctx), oj = getAffineDimExpr(3, ctx);
  Value acc = generic(b, loc, {probs, v}, {zeros(b, loc, qType, {{q, 0}})},
                      {AffineMap::get(4, 0, {oh, oi, oj}, ctx),
                       AffineMap::get(4, 0, {oj, oh.floorDiv(group), od}, ctx),
                       AffineMap::get(4, 0, {oi, oh, od}, ctx)},
                      {kPar, kPar, kPar, kRed}, multiplyAccumulate)[0];
  Value out = generic(
      b, loc, {acc, rowSum}, {makeEmpty(b, loc, qType, {{q, 0}})},
      {pick(ctx, 3, {0, 1, 2}), pick(ctx, 3, {1, 0}), pick(ctx, 3, {0, 1, 2})},
      {kPar, kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
        Value zero = cstF(nb, l, elt, 0.0);
        Value empty =
            arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, a[1], zero);
        Value div = arith::DivFOp::create(nb, l, a[0], a[1]);
        linalg::YieldOp::create(
            nb, l, Value(arith::SelectOp::create(nb, l, empty, zero, div)));
      })[0];
  if (!withLse)
    return {out, Value()};
  // lse[i, h] = max + log(sum), -inf for a row with no visible key.
  auto lseType = tensorOf({tq, nh}, elt);
  Value lse = generic(
      b, loc, {rowMax, rowSum}, {makeEmpty(b, loc, lseType, {{q, 0}})},
      {pick(ctx, 2, {1, 0}), pick(ctx, 2, {1, 0}), pick(ctx, 2, {0, 1})},
      {kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
        Value isInf = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ,
                                            a[0], negInf(nb, l, elt));
        Value v = arith::AddFOp::create(nb, l, a[0],
                                        math::LogOp::create(nb, l, a[1]));
        linalg::YieldOp::create(nb, l,
                                Value(arith::SelectOp::create(
                                    nb, l, isInf, negInf(nb, l, elt), v)));
      })[0];
  return {out, lse};
}

struct AttentionLowering : OpConversionPattern<AttentionOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(AttentionOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto [out, lse] = buildAttention(
        rewriter, op.getLoc(), adaptor.getQuery(), adaptor.getKey(),
        adaptor.getValue(), adaptor.getQPositions(), adaptor.getKvPositions(),
        op.getScale().convertToDouble(), op.getType(), /*withLse=*/false);
    rewriter.replaceOp(op, out);
    return success();
  }
};

struct AttentionPartialLowering : OpConversionPattern<AttentionPartialOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(AttentionPartialOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto [out, lse] = buildAttention(
        rewriter, op.getLoc(), adaptor.getQuery(), adaptor.getKey(),
        adaptor.getValue(), adaptor.getQPositions(), adaptor.getKvPositions(),
        op.getScale().convertToDouble(), op.getResult().getType(),
        /*withLse=*/true);
    rewriter.replaceOp(op, {out, lse});
    return success();
  }
};

struct AttentionMergeLowering : OpConversionPattern<AttentionMergeOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(AttentionMergeOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    auto &b = rewriter;
    Value o1 = adaptor.getOut1(), l1 = adaptor.getLse1(),
          o2 = adaptor.getOut2(), l2 = adaptor.getLse2();
    auto oType = op.getResult().getType();
    auto lType = op.getLse().getType();
    Type elt = oType.getElementType();
    // The weights of both sides relative to their max; a side at -inf has 0.
    auto weights = [&](OpBuilder &nb, Location l, Value a1, Value a2) {
      Value m = arith::MaximumFOp::create(nb, l, a1, a2);
      Value none = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, m,
                                         negInf(nb, l, elt));
      Value zero = cstF(nb, l, elt, 0.0);
      Value w1 = arith::SelectOp::create(
          nb, l, none, zero,
          math::ExpOp::create(nb, l, arith::SubFOp::create(nb, l, a1, m)));
      Value w2 = arith::SelectOp::create(
          nb, l, none, zero,
          math::ExpOp::create(nb, l, arith::SubFOp::create(nb, l, a2, m)));
      return std::make_tuple(m, none, w1, w2);
    };
    Value out = generic(
        b, loc, {o1, l1, o2, l2}, {makeEmpty(b, loc, oType, {{o1, 0}})},
        {pick(ctx, 3, {0, 1, 2}), pick(ctx, 3, {0, 1}), pick(ctx, 3, {0, 1, 2}),
         pick(ctx, 3, {0, 1}), pick(ctx, 3, {0, 1, 2})},
        {kPar, kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
          auto [m, none, w1, w2] = weights(nb, l, a[1], a[3]);
          Value num = arith::AddFOp::create(
              nb, l, arith::MulFOp::create(nb, l, w1, a[0]),
              arith::MulFOp::create(nb, l, w2, a[2]));
          Value den = arith::AddFOp::create(nb, l, w1, w2);
          Value res =
              arith::SelectOp::create(nb, l, none, cstF(nb, l, elt, 0.0),
                                      arith::DivFOp::create(nb, l, num, den));
          linalg::YieldOp::create(nb, l, res);
        })[0];
    Value lse = generic(
        b, loc, {l1, l2}, {makeEmpty(b, loc, lType, {{l1, 0}})},
        {pick(ctx, 2, {0, 1}), pick(ctx, 2, {0, 1}), pick(ctx, 2, {0, 1})},
        {kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
          auto [m, none, w1, w2] = weights(nb, l, a[0], a[1]);
          Value v = arith::AddFOp::create(
              nb, l, m,
              math::LogOp::create(nb, l, arith::AddFOp::create(nb, l, w1, w2)));
          linalg::YieldOp::create(nb, l,
                                  Value(arith::SelectOp::create(
                                      nb, l, none, negInf(nb, l, elt), v)));
        })[0];
    rewriter.replaceOp(op, {out, lse});
    return success();
  }
};

struct RouterLowering : OpConversionPattern<RouterOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(RouterOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    auto &b = rewriter;
    Value x = adaptor.getInput(), gate = adaptor.getGate();
    auto wType = op.getWeights().getType();
    auto iType = op.getIndices().getType();
    Type elt = wType.getElementType();
    Type idxElt = iType.getElementType();
    int64_t t = dimOf(x, 0), numExperts = dimOf(gate, 0), k = op.getTopK();
    Value logits = buildLinear(b, loc, x, gate, tensorOf({t, numExperts}, elt));

    // k rounds of arg-max, each excluding the experts already chosen; ties go
    // to the lower expert index.
    SmallVector<Value> vals, ids;
    auto colF = tensorOf({t}, elt);
    auto colI = tensorOf({t}, idxElt);
    for (int64_t r = 0; r < k; ++r) {
      SmallVector<Value> ins = {logits};
      llvm::append_range(ins, ids);
      SmallVector<AffineMap> maps = {pick(ctx, 2, {0, 1})};
      for (size_t p = 0; p < ids.size(); ++p)
        maps.push_back(pick(ctx, 2, {0}));
      maps.push_back(pick(ctx, 2, {0}));
      maps.push_back(pick(ctx, 2, {0}));
      Value initV = makeFilled(
          b, loc, colF, {{x, 0}},
          b.getFloatAttr(elt, -std::numeric_limits<double>::infinity()));
      Value initI =
          makeFilled(b, loc, colI, {{x, 0}}, b.getIntegerAttr(idxElt, -1));
      size_t numPrev = ids.size();
      ResultRange res = generic(
          b, loc, ins, {initV, initI}, maps, {kPar, kRed},
          [&](OpBuilder &nb, Location l, ValueRange a) {
            Value v = a[0];
            Value e = arith::IndexCastOp::create(nb, l, idxElt, idx(nb, l, 1));
            Value curV = a[1 + numPrev], curI = a[2 + numPrev];
            Value excluded =
                arith::ConstantOp::create(nb, l, nb.getBoolAttr(false));
            for (size_t p = 0; p < numPrev; ++p)
              excluded = arith::OrIOp::create(
                  nb, l, excluded,
                  arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, e,
                                        a[1 + p]));
            Value none = arith::CmpIOp::create(
                nb, l, arith::CmpIPredicate::slt, curI,
                arith::ConstantOp::create(nb, l, nb.getIntegerAttr(idxElt, 0)));
            Value greater = arith::CmpFOp::create(
                nb, l, arith::CmpFPredicate::OGT, v, curV);
            Value better = arith::AndIOp::create(
                nb, l, arith::OrIOp::create(nb, l, none, greater),
                arith::XOrIOp::create(
                    nb, l, excluded,
                    arith::ConstantOp::create(nb, l, nb.getBoolAttr(true))));
            linalg::YieldOp::create(
                nb, l,
                ValueRange{arith::SelectOp::create(nb, l, better, v, curV),
                           arith::SelectOp::create(nb, l, better, e, curI)});
          });
      vals.push_back(res[0]);
      ids.push_back(res[1]);
    }

    // Softmax denominator: over the chosen k (renormalize) or over all experts.
    Value top = vals.front();
    Value denom;
    if (op.getRenormalize()) {
      SmallVector<AffineMap> maps(k + 2, pick(ctx, 1, {0}));
      SmallVector<Value> ins(vals);
      ins.push_back(top);
      denom =
          generic(b, loc, ins, {makeEmpty(b, loc, colF, {{x, 0}})}, maps,
                  {kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
                    Value s = cstF(nb, l, elt, 0.0);
                    for (int64_t r = 0; r < k; ++r)
                      s = arith::AddFOp::create(
                          nb, l, s,
                          math::ExpOp::create(
                              nb, l, arith::SubFOp::create(nb, l, a[r], a[k])));
                    linalg::YieldOp::create(nb, l, s);
                  })[0];
    } else {
      denom =
          generic(b, loc, {logits, top}, {zeros(b, loc, colF, {{x, 0}})},
                  {pick(ctx, 2, {0, 1}), pick(ctx, 2, {0}), pick(ctx, 2, {0})},
                  {kPar, kRed}, [&](OpBuilder &nb, Location l, ValueRange a) {
                    Value e = math::ExpOp::create(
                        nb, l, arith::SubFOp::create(nb, l, a[0], a[1]));
                    linalg::YieldOp::create(
                        nb, l, Value(arith::AddFOp::create(nb, l, a[2], e)));
                  })[0];
    }

    // Assemble [T, k] weights and indices.
    SmallVector<Value> ins(vals);
    llvm::append_range(ins, ids);
    ins.push_back(denom);
    ins.push_back(top);
    SmallVector<AffineMap> maps(ins.size(), pick(ctx, 2, {0}));
    maps.push_back(pick(ctx, 2, {0, 1}));
    maps.push_back(pick(ctx, 2, {0, 1}));
    ResultRange out = generic(
        b, loc, ins,
        {makeEmpty(b, loc, wType, {{x, 0}}),
         makeEmpty(b, loc, iType, {{x, 0}})},
        maps, {kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
          Value col = idx(nb, l, 1);
          Value v = a[0], e = a[k];
          for (int64_t r = 1; r < k; ++r) {
            Value is =
                arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, col,
                                      arith::ConstantIndexOp::create(nb, l, r));
            v = arith::SelectOp::create(nb, l, is, a[r], v);
            e = arith::SelectOp::create(nb, l, is, a[k + r], e);
          }
          Value w = arith::DivFOp::create(
              nb, l,
              math::ExpOp::create(
                  nb, l, arith::SubFOp::create(nb, l, v, a[2 * k + 1])),
              a[2 * k]);
          linalg::YieldOp::create(nb, l, ValueRange{w, e});
        });
    rewriter.replaceOp(op, out);
    return success();
  }
};

struct ExpertsLowering : OpConversionPattern<ExpertsOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(ExpertsOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    auto &b = rewriter;
    Value x = adaptor.getInput(), wts = adaptor.getWeights(),
          ids = adaptor.getIndices(), w1 = adaptor.getW1(),
          w2 = adaptor.getW2(), w3 = adaptor.getW3();
    auto type = op.getType();
    Type elt = type.getElementType();
    int64_t t = dimOf(x, 0), k = dimOf(wts, 1), ffn = dimOf(w1, 1);
    auto hType = tensorOf({t, k, ffn}, elt);
    // h1[t,k,f] = sum_d x[t,d] w1[e,f,d], h3 likewise; e = indices[t,k].
    // Loop dims (t, k, f, d).
    ResultRange h = generic(
        b, loc, {x, ids},
        {zeros(b, loc, hType, {{x, 0}}), zeros(b, loc, hType, {{x, 0}})},
        {pick(ctx, 4, {0, 3}), pick(ctx, 4, {0, 1}), pick(ctx, 4, {0, 1, 2}),
         pick(ctx, 4, {0, 1, 2})},
        {kPar, kPar, kPar, kRed}, gatedUpBody(w1, w3, /*fDim=*/2, /*dDim=*/3));
    // act = silu(h1) * h3.
    Value act = generic(
        b, loc, {h[0], h[1]}, {makeEmpty(b, loc, hType, {{x, 0}})},
        {pick(ctx, 3, {0, 1, 2}), pick(ctx, 3, {0, 1, 2}),
         pick(ctx, 3, {0, 1, 2})},
        {kPar, kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
          linalg::YieldOp::create(nb, l, buildSwiGLU(nb, l, elt, a[0], a[1]));
        })[0];
    // y[t,o] = sum_{k,f} w[t,k] * act[t,k,f] * w2[e,o,f]. Loop dims (t,o,k,f).
    Value y = generic(
        b, loc, {wts, act, ids}, {zeros(b, loc, type, {{x, 0}})},
        {pick(ctx, 4, {0, 2}), pick(ctx, 4, {0, 2, 3}), pick(ctx, 4, {0, 2}),
         pick(ctx, 4, {0, 1})},
        {kPar, kPar, kRed, kRed}, [&](OpBuilder &nb, Location l, ValueRange a) {
          Value e = arith::IndexCastOp::create(nb, l, nb.getIndexType(), a[2]);
          Value w =
              widen(nb, l,
                    tensor::ExtractOp::create(
                        nb, l, w2, ValueRange{e, idx(nb, l, 1), idx(nb, l, 3)}),
                    elt);
          Value p = arith::MulFOp::create(
              nb, l, a[0], arith::MulFOp::create(nb, l, a[1], w));
          linalg::YieldOp::create(nb, l,
                                  Value(arith::AddFOp::create(nb, l, a[3], p)));
        })[0];
    rewriter.replaceOp(op, y);
    return success();
  }
};

struct ExpertFFNLowering : OpConversionPattern<ExpertFFNOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(ExpertFFNOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    auto &b = rewriter;
    Value x = adaptor.getInput(), ids = adaptor.getExperts(),
          w1 = adaptor.getW1(), w2 = adaptor.getW2(), w3 = adaptor.getW3();
    auto type = op.getType();
    Type elt = type.getElementType();
    int64_t rows = dimOf(x, 0), ffn = dimOf(w1, 1);
    auto hType = tensorOf({rows, ffn}, elt);
    // h1[r,f] = sum_d x[r,d] w1[e_r,f,d], h3 likewise. Loop dims (r, f, d).
    ResultRange h = generic(
        b, loc, {x, ids},
        {zeros(b, loc, hType, {{x, 0}}), zeros(b, loc, hType, {{x, 0}})},
        {pick(ctx, 3, {0, 2}), pick(ctx, 3, {0}), pick(ctx, 3, {0, 1}),
         pick(ctx, 3, {0, 1})},
        {kPar, kPar, kRed}, gatedUpBody(w1, w3, /*fDim=*/1, /*dDim=*/2));
    Value act = generic(
        b, loc, {h[0], h[1]}, {makeEmpty(b, loc, hType, {{x, 0}})},
        {pick(ctx, 2, {0, 1}), pick(ctx, 2, {0, 1}), pick(ctx, 2, {0, 1})},
        {kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
          linalg::YieldOp::create(nb, l, buildSwiGLU(nb, l, elt, a[0], a[1]));
        })[0];
    // y[r,o] = sum_f act[r,f] * w2[e_r,o,f]. Loop dims (r, o, f).
    Value y = generic(
        b, loc, {act, ids}, {zeros(b, loc, type, {{x, 0}})},
        {pick(ctx, 3, {0, 2}), pick(ctx, 3, {0}), pick(ctx, 3, {0, 1})},
        {kPar, kPar, kRed}, [&](OpBuilder &nb, Location l, ValueRange a) {
          Value e = arith::IndexCastOp::create(nb, l, nb.getIndexType(), a[1]);
          Value w =
              widen(nb, l,
                    tensor::ExtractOp::create(
                        nb, l, w2, ValueRange{e, idx(nb, l, 1), idx(nb, l, 2)}),
                    elt);
          Value p = arith::MulFOp::create(nb, l, a[0], w);
          linalg::YieldOp::create(nb, l,
                                  Value(arith::AddFOp::create(nb, l, a[2], p)));
        })[0];
    rewriter.replaceOp(op, y);
    return success();
  }
};

struct LMHeadLowering : OpConversionPattern<LMHeadOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(LMHeadOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    auto &b = rewriter;
    Value x = adaptor.getInput(), w = adaptor.getWeight(),
          pos = adaptor.getPositions();
    Type elt = op.getType().getElementType();
    auto [found, rowIdx] = findRow(b, loc, pos, adaptor.getLast());
    Value res = generic(
        b, loc, {w}, {zeros(b, loc, op.getType(), {})},
        {pick(ctx, 2, {0, 1}), pick(ctx, 2, {0})}, {kPar, kRed},
        [&](OpBuilder &nb, Location l, ValueRange a) {
          Value xv = tensor::ExtractOp::create(
              nb, l, x, ValueRange{rowIdx, idx(nb, l, 1)});
          xv = arith::SelectOp::create(nb, l, found, xv, cstF(nb, l, elt, 0.0));
          Value m = arith::MulFOp::create(nb, l, xv, widen(nb, l, a[0], elt));
          linalg::YieldOp::create(nb, l,
                                  Value(arith::AddFOp::create(nb, l, a[1], m)));
        })[0];
    rewriter.replaceOp(op, res);
    return success();
  }
};

struct TakePositionLowering : OpConversionPattern<TakePositionOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(TakePositionOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    auto &b = rewriter;
    Value x = adaptor.getInput(), pos = adaptor.getPositions();
    auto rowType = op.getRow().getType();
    Type elt = rowType.getElementType();
    auto [found, rowIdx] = findRow(b, loc, pos, adaptor.getTarget());
    Value picked = generic(
        b, loc, {}, {makeEmpty(b, loc, rowType, {})}, {pick(ctx, 2, {0, 1})},
        {kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange) {
          Value v = tensor::ExtractOp::create(
              nb, l, x, ValueRange{rowIdx, idx(nb, l, 1)});
          linalg::YieldOp::create(nb, l,
                                  Value(arith::SelectOp::create(
                                      nb, l, found, v, cstF(nb, l, elt, 0.0))));
        })[0];
    Value flag = arith::SelectOp::create(b, loc, found, cstF(b, loc, elt, 1.0),
                                         cstF(b, loc, elt, 0.0));
    Value flagT = tensor::FromElementsOp::create(b, loc, ValueRange{flag});
    rewriter.replaceOp(op, {picked, flagT});
    return success();
  }
};

struct ConvertMoEToLinalgPass
    : public meshfold::impl::ConvertMoEToLinalgPassBase<
          ConvertMoEToLinalgPass> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    ConversionTarget target(*ctx);
    target.addLegalDialect<linalg::LinalgDialect, tensor::TensorDialect,
                           arith::ArithDialect, math::MathDialect>();
    target.addIllegalOp<PositionsOp, EmbedOp, RMSNormOp, LinearOp, RoPEOp,
                        AttentionOp, AttentionPartialOp, AttentionMergeOp,
                        RouterOp, ExpertsOp, ExpertFFNOp, LMHeadOp, LayerOp,
                        TakePositionOp>();
    inlineLayers(getOperation());
    target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
    RewritePatternSet patterns(ctx);
    populateMoEToLinalgConversionPatterns(patterns);
    if (failed(applyPartialConversion(getOperation(), target,
                                      std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace

void meshfold::populateMoEToLinalgConversionPatterns(
    RewritePatternSet &patterns) {
  patterns
      .add<PositionsLowering, EmbedLowering, RMSNormLowering, LinearLowering,
           RoPELowering, AttentionLowering, AttentionPartialLowering,
           AttentionMergeLowering, RouterLowering, ExpertsLowering,
           ExpertFFNLowering, LMHeadLowering, TakePositionLowering>(
          patterns.getContext());
}
