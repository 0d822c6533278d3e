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

#include "Builders.h"

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
using namespace meshfold::moe_to_linalg;

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

/// `result[i, ...] = x[rows[i], ...]` (of `type`, its elements widened from
/// x's where narrower): a gather of whole rows.
Value takeRows(OpBuilder &b, Location loc, Value x, Value rows,
               RankedTensorType type) {
  unsigned rank = unsigned(type.getRank());
  SmallVector<std::pair<Value, int64_t>> sizes = {{rows, 0}};
  SmallVector<unsigned> all;
  for (unsigned d = 0; d < rank; ++d) {
    if (d > 0)
      sizes.push_back({x, d});
    all.push_back(d);
  }
  MLIRContext *ctx = b.getContext();
  return generic(
      b, loc, {rows}, {makeEmpty(b, loc, type, sizes)},
      {pick(ctx, rank, {0}), pick(ctx, rank, all)}, SmallVector<IT>(rank, kPar),
      [&](OpBuilder &nb, Location l, ValueRange a) {
        SmallVector<Value> at = {
            arith::IndexCastOp::create(nb, l, nb.getIndexType(), a[0])};
        for (unsigned d = 1; d < rank; ++d)
          at.push_back(idx(nb, l, d));
        Value v = tensor::ExtractOp::create(nb, l, x, at);
        linalg::YieldOp::create(nb, l, widen(nb, l, v, a[1].getType()));
      })[0];
}

/// The tokens' rows of the embedding table.
struct EmbedLowering : OpConversionPattern<EmbedOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(EmbedOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(op, takeRows(rewriter, op.getLoc(), adaptor.getTable(),
                                    adaptor.getTokens(), op.getType()));
    return success();
  }
};

/// Maps over an input of rank `rank` normalised over its last dim: every
/// dim, all but the last, and the last.
struct NormMaps {
  SmallVector<unsigned> all, outer, last;
  SmallVector<utils::IteratorType> par, red;
  explicit NormMaps(int64_t rank) : last{unsigned(rank - 1)} {
    for (unsigned i = 0; i < rank; ++i)
      all.push_back(i);
    outer.assign(all.begin(), all.end() - 1);
    par.assign(rank, kPar);
    red = par;
    red.back() = kRed;
  }
};

/// sum_j x[.., j]^2 over the last dim of `x`.
Value buildSumSquares(OpBuilder &b, Location loc, Value x) {
  auto type = cast<RankedTensorType>(x.getType());
  int64_t rank = type.getRank();
  NormMaps m(rank);
  MLIRContext *ctx = b.getContext();
  return generic(
      b, loc, {x},
      {zeros(b, loc,
             tensorOf(type.getShape().drop_back(), type.getElementType()),
             {{x, 0}})},
      {pick(ctx, rank, m.all), pick(ctx, rank, m.outer)}, m.red,
      [](OpBuilder &nb, Location l, ValueRange a) {
        Value sq = arith::MulFOp::create(nb, l, a[0], a[0]);
        linalg::YieldOp::create(nb, l,
                                Value(arith::AddFOp::create(nb, l, a[1], sq)));
      })[0];
}

/// x * rsqrt(sumsq / count + eps) * w, w over the last dim.
Value buildRMSScale(OpBuilder &b, Location loc, Value x, Value sumsq, Value w,
                    double eps, int64_t count) {
  auto type = cast<RankedTensorType>(x.getType());
  Type elt = type.getElementType();
  int64_t rank = type.getRank();
  NormMaps m(rank);
  MLIRContext *ctx = b.getContext();
  return generic(
      b, loc, {x, sumsq, w}, {makeEmpty(b, loc, type, {{x, 0}})},
      {pick(ctx, rank, m.all), pick(ctx, rank, m.outer),
       pick(ctx, rank, m.last), pick(ctx, rank, m.all)},
      m.par, [&](OpBuilder &nb, Location l, ValueRange a) {
        Value mean =
            arith::DivFOp::create(nb, l, a[1], cstF(nb, l, elt, double(count)));
        Value var = arith::AddFOp::create(nb, l, mean, cstF(nb, l, elt, eps));
        Value inv = math::RsqrtOp::create(nb, l, var);
        Value y = arith::MulFOp::create(nb, l, a[0], inv);
        linalg::YieldOp::create(
            nb, l,
            Value(arith::MulFOp::create(nb, l, y, widen(nb, l, a[2], elt))));
      })[0];
}

/// Over the last dim of a [T, d] or [T, heads, d_h] input.
struct RMSNormLowering : OpConversionPattern<RMSNormOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(RMSNormOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value x = adaptor.getInput();
    auto type = op.getType();
    Value sumsq = buildSumSquares(rewriter, loc, x);
    rewriter.replaceOp(op, buildRMSScale(rewriter, loc, x, sumsq,
                                         adaptor.getWeight(),
                                         op.getEpsilon().convertToDouble(),
                                         type.getDimSize(type.getRank() - 1)));
    return success();
  }
};

struct SumSquaresLowering : OpConversionPattern<SumSquaresOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(SumSquaresOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(
        op, buildSumSquares(rewriter, op.getLoc(), adaptor.getInput()));
    return success();
  }
};

struct RMSScaleLowering : OpConversionPattern<RMSScaleOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(RMSScaleOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(
        op, buildRMSScale(rewriter, op.getLoc(), adaptor.getInput(),
                          adaptor.getSumSquares(), adaptor.getWeight(),
                          op.getEpsilon().convertToDouble(), op.getCount()));
    return success();
  }
};

struct ClipLowering : OpConversionPattern<ClipOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(ClipOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType type = op.getType();
    Type elt = type.getElementType();
    unsigned rank = type.getRank();
    double limit = op.getLimit().convertToDouble();
    SmallVector<std::pair<Value, int64_t>> dims;
    for (unsigned i = 0; i < rank; ++i)
      dims.push_back({adaptor.getInput(), i});
    AffineMap id = rewriter.getMultiDimIdentityMap(rank);
    Value y = generic(
        rewriter, loc, {adaptor.getInput()},
        {makeEmpty(rewriter, loc, type, dims)}, {id, id},
        SmallVector<IT>(rank, kPar),
        [&](OpBuilder &nb, Location l, ValueRange a) {
          Value lo =
              arith::MaximumFOp::create(nb, l, a[0], cstF(nb, l, elt, -limit));
          linalg::YieldOp::create(nb, l,
                                  Value(arith::MinimumFOp::create(
                                      nb, l, lo, cstF(nb, l, elt, limit))));
        })[0];
    rewriter.replaceOp(op, y);
    return success();
  }
};

struct LinearLowering : OpConversionPattern<LinearOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(LinearOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value y = buildLinear(rewriter, loc, adaptor.getInput(),
                          adaptor.getWeight(), op.getType());
    if (Value bias = adaptor.getBias())
      y = addBias(rewriter, loc, y, bias);
    rewriter.replaceOp(op, y);
    return success();
  }

  /// y[t, o] + bias[o] (a narrower bias widened), in place of y.
  static Value addBias(OpBuilder &b, Location loc, Value y, Value bias) {
    MLIRContext *ctx = b.getContext();
    return generic(b, loc, {bias}, {y},
                   {pick(ctx, 2, {1}), pick(ctx, 2, {0, 1})}, {kPar, kPar},
                   [&](OpBuilder &nb, Location l, ValueRange a) {
                     Value v = widen(nb, l, a[0], a[1].getType());
                     linalg::YieldOp::create(
                         nb, l, Value(arith::AddFOp::create(nb, l, a[1], v)));
                   })[0];
  }
};

/// 1 / (1 + exp(-x)).
Value sigmoid(OpBuilder &b, Location loc, Type elt, Value x) {
  Value one = cstF(b, loc, elt, 1.0);
  return arith::DivFOp::create(
      b, loc, one,
      arith::AddFOp::create(
          b, loc, one,
          math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, x))));
}

/// A linear map per head: one contraction over the head's input dim, the
/// head a parallel dim.
struct HeadLinearLowering : OpConversionPattern<HeadLinearOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(HeadLinearOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    Value x = adaptor.getInput();
    // Loop dims (t, h, o, i): o the output's last dim, i the contracted one.
    AffineMap wMap = op.getTransposeWeight() ? pick(ctx, 4, {1, 3, 2})
                                             : pick(ctx, 4, {1, 2, 3});
    Value y = generic(rewriter, loc, {x, adaptor.getWeight()},
                      {zeros(rewriter, loc, op.getType(), {{x, 0}})},
                      {pick(ctx, 4, {0, 1, 3}), wMap, pick(ctx, 4, {0, 1, 2})},
                      {kPar, kPar, kPar, kRed}, multiplyAccumulate)[0];
    rewriter.replaceOp(op, y);
    return success();
  }
};

/// The dense SwiGLU MLP as three linears and the activation between them
/// (and, where gated, the sigmoid of a fourth, one-column linear scaling each
/// row): the linears take the contraction kernels of moe.linear.
struct MLPLowering : OpConversionPattern<MLPOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(MLPOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    Value x = adaptor.getInput();
    RankedTensorType type = op.getType();
    Type elt = type.getElementType();
    int64_t ffn = op.getW1().getType().getDimSize(0);
    auto hType = tensorOf({type.getDimSize(0), ffn}, elt);
    Value g = buildLinear(rewriter, loc, x, adaptor.getW1(), hType);
    Value u = buildLinear(rewriter, loc, x, adaptor.getW3(), hType);
    // act = silu(g) * u, into g.
    Value act = generic(
        rewriter, loc, {u}, {g}, {pick(ctx, 2, {0, 1}), pick(ctx, 2, {0, 1})},
        {kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
          linalg::YieldOp::create(nb, l, buildSwiGLU(nb, l, elt, a[1], a[0]));
        })[0];
    Value y = buildLinear(rewriter, loc, act, adaptor.getW2(), type);
    if (Value gate = adaptor.getGate()) {
      // y[t] *= sigmoid(gate . x[t]) = 1 / (1 + exp(-s)).
      Value s = buildLinear(rewriter, loc, x, gate,
                            tensorOf({type.getDimSize(0), 1}, elt));
      y = generic(
          rewriter, loc, {s}, {y},
          {AffineMap::get(
               2, 0, {getAffineDimExpr(0, ctx), getAffineConstantExpr(0, ctx)},
               ctx),
           pick(ctx, 2, {0, 1})},
          {kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
            Value sig = sigmoid(nb, l, elt, a[0]);
            linalg::YieldOp::create(
                nb, l, Value(arith::MulFOp::create(nb, l, a[1], sig)));
          })[0];
    }
    rewriter.replaceOp(op, y);
    return success();
  }
};

/// RoPE's inverse frequency at `jjF`, the index (as a float) of a dim in the
/// lower half of a head: 1 / theta^(2*jj / dh), YaRN-mixed where the op
/// scales it.
Value buildInverseFrequency(OpBuilder &nb, Location l, RoPEOp op, Type elt,
                            Value jjF) {
  int64_t dh = op.getType().getDimSize(2);
  double theta = op.getTheta().convertToDouble();
  double yarnFactor = op.getYarnFactor().convertToDouble(),
         low = op.getYarnLow().convertToDouble(),
         high = op.getYarnHigh().convertToDouble();
  // inv_freq = 1 / theta^(2*jj / dh), as Hugging Face computes it.
  Value expo = arith::DivFOp::create(
      nb, l, arith::MulFOp::create(nb, l, jjF, cstF(nb, l, elt, 2.0)),
      cstF(nb, l, elt, double(dh)));
  Value p = math::PowFOp::create(nb, l, cstF(nb, l, elt, theta), expo);
  Value invFreq = arith::DivFOp::create(nb, l, cstF(nb, l, elt, 1.0), p);
  if (yarnFactor != 1.0) {
    // YaRN: interpolated (1 / (s p)) by the ramp r over the dims,
    // extrapolated (1 / p) by 1 - r, as transformers mixes them.
    Value interp = arith::DivFOp::create(
        nb, l, cstF(nb, l, elt, 1.0),
        arith::MulFOp::create(nb, l, cstF(nb, l, elt, yarnFactor), p));
    Value ramp = arith::DivFOp::create(
        nb, l, arith::SubFOp::create(nb, l, jjF, cstF(nb, l, elt, low)),
        cstF(nb, l, elt, high - low));
    ramp = arith::MinimumFOp::create(
        nb, l, arith::MaximumFOp::create(nb, l, ramp, cstF(nb, l, elt, 0.0)),
        cstF(nb, l, elt, 1.0));
    Value extra = arith::SubFOp::create(nb, l, cstF(nb, l, elt, 1.0), ramp);
    invFreq = arith::AddFOp::create(
        nb, l,
        arith::MulFOp::create(
            nb, l, interp,
            arith::SubFOp::create(nb, l, cstF(nb, l, elt, 1.0), extra)),
        arith::MulFOp::create(nb, l, invFreq, extra));
  }
  return invFreq;
}

/// The angles' cosines and (signed) sines per position and dim, once:
/// every head of the op (and, by CSE, every op on the same positions)
/// reads this [T, d_h] table instead of computing powf/sin/cos per
/// element. tab[t, j] for jj = j mod d_h/2: cos(pos * inv_freq[jj]) and
/// -+sin(...) (minus on the lower half, whose partner is x[j + d_h/2]).
ResultRange buildRoPETable(OpBuilder &b, Location loc, RoPEOp op, Value x,
                           Value pos) {
  MLIRContext *ctx = b.getContext();
  auto type = op.getType();
  Type elt = type.getElementType();
  int64_t dh = type.getDimSize(2), half = dh / 2;
  double attentionFactor = op.getAttentionFactor().convertToDouble();
  auto tabType = RankedTensorType::get({type.getDimSize(0), dh}, elt);
  return generic(
      b, loc, {pos},
      {makeEmpty(b, loc, tabType, {{x, 0}}),
       makeEmpty(b, loc, tabType, {{x, 0}})},
      {pick(ctx, 2, {0}), pick(ctx, 2, {0, 1}), pick(ctx, 2, {0, 1})},
      {kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
        Value j = idx(nb, l, 1);
        Value cHalf = arith::ConstantIndexOp::create(nb, l, half);
        Value lower =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ult, j, cHalf);
        Value jj = arith::RemUIOp::create(nb, l, j, cHalf);
        Value jjI = arith::IndexCastOp::create(nb, l, nb.getI64Type(), jj);
        Value jjF = arith::SIToFPOp::create(nb, l, elt, jjI);
        Value invFreq = buildInverseFrequency(nb, l, op, elt, jjF);
        // The place in its sequence: the position's low 32 bits.
        Value place = arith::AndIOp::create(
            nb, l, a[0],
            arith::ConstantOp::create(nb, l,
                                      nb.getI64IntegerAttr(0xffffffffLL)));
        Value posF = arith::SIToFPOp::create(nb, l, elt, place);
        Value angle = arith::MulFOp::create(nb, l, posF, invFreq);
        Value sign = arith::SelectOp::create(
            nb, l, lower, cstF(nb, l, elt, -1.0), cstF(nb, l, elt, 1.0));
        Value c = math::CosOp::create(nb, l, angle);
        Value sn = math::SinOp::create(nb, l, angle);
        if (attentionFactor != 1.0) {
          c = arith::MulFOp::create(nb, l, c,
                                    cstF(nb, l, elt, attentionFactor));
          sn = arith::MulFOp::create(nb, l, sn,
                                     cstF(nb, l, elt, attentionFactor));
        }
        sn = arith::MulFOp::create(nb, l, sn, sign);
        linalg::YieldOp::create(nb, l, ValueRange{c, sn});
      });
}

/// x [T, H, d_h] rotated by the table: x[j] * cos + x[partner] * (signed)
/// sin, the partner half a head away (on the de-interleaved row where the
/// op's pairs are interleaved).
Value buildRoPERotation(OpBuilder &b, Location loc, RoPEOp op, Value x,
                        Value cos, Value sin) {
  MLIRContext *ctx = b.getContext();
  auto type = op.getType();
  int64_t half = type.getDimSize(2) / 2;
  bool interleaved = op.getInterleaved();
  return generic(
      b, loc, {x, cos, sin}, {makeEmpty(b, loc, type, {{x, 0}})},
      {pick(ctx, 3, {0, 1, 2}), pick(ctx, 3, {0, 2}), pick(ctx, 3, {0, 2}),
       pick(ctx, 3, {0, 1, 2})},
      {kPar, kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
        Value j = idx(nb, l, 2);
        Value cHalf = arith::ConstantIndexOp::create(nb, l, half);
        Value lower =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ult, j, cHalf);
        Value partnerIdx = arith::SelectOp::create(
            nb, l, lower, arith::AddIOp::create(nb, l, j, cHalf),
            arith::SubIOp::create(nb, l, j, cHalf));
        Value self = a[0];
        if (interleaved) {
          // Element j of the de-interleaved row: x[2j] in the lower half,
          // x[2(j - half) + 1] in the upper.
          auto source = [&](Value jj) -> Value {
            Value low = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ult,
                                              jj, cHalf);
            Value two = arith::ConstantIndexOp::create(nb, l, 2);
            Value even = arith::MulIOp::create(nb, l, jj, two);
            Value odd = arith::AddIOp::create(
                nb, l,
                arith::MulIOp::create(
                    nb, l, arith::SubIOp::create(nb, l, jj, cHalf), two),
                arith::ConstantIndexOp::create(nb, l, 1));
            return arith::SelectOp::create(nb, l, low, even, odd);
          };
          self = tensor::ExtractOp::create(
              nb, l, x, ValueRange{idx(nb, l, 0), idx(nb, l, 1), source(j)});
          partnerIdx = source(partnerIdx);
        }
        Value partner = tensor::ExtractOp::create(
            nb, l, x, ValueRange{idx(nb, l, 0), idx(nb, l, 1), partnerIdx});
        Value xc = arith::MulFOp::create(nb, l, self, a[1]);
        Value ps = arith::MulFOp::create(nb, l, partner, a[2]);
        linalg::YieldOp::create(nb, l,
                                Value(arith::AddFOp::create(nb, l, xc, ps)));
      })[0];
}

struct RoPELowering : OpConversionPattern<RoPEOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(RoPEOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value x = adaptor.getInput(), pos = adaptor.getPositions();
    ResultRange tab = buildRoPETable(rewriter, loc, op, x, pos);
    Value res = buildRoPERotation(rewriter, loc, op, x, tab[0], tab[1]);
    rewriter.replaceOp(op, res);
    return success();
  }
};

/// The top `k` columns of each row of `values` [R, N] by k rounds of
/// arg-max, each excluding the columns already chosen; ties go to the lower
/// column. Returns the chosen values and columns, each [R], in descending
/// order.
std::pair<SmallVector<Value>, SmallVector<Value>>
buildTopK(OpBuilder &b, Location loc, Value values, int64_t k, Type idxElt) {
  MLIRContext *ctx = b.getContext();
  Type elt = cast<RankedTensorType>(values.getType()).getElementType();
  int64_t rows = dimOf(values, 0);
  SmallVector<Value> vals, ids;
  auto colF = tensorOf({rows}, elt);
  auto colI = tensorOf({rows}, idxElt);
  for (int64_t r = 0; r < k; ++r) {
    SmallVector<Value> ins = {values};
    llvm::append_range(ins, ids);
    SmallVector<AffineMap> maps = {pick(ctx, 2, {0, 1})};
    for (size_t p = 0; p < ids.size(); ++p)
      maps.push_back(pick(ctx, 2, {0}));
    maps.push_back(pick(ctx, 2, {0}));
    maps.push_back(pick(ctx, 2, {0}));
    Value initV = makeFilled(
        b, loc, colF, {{values, 0}},
        b.getFloatAttr(elt, -std::numeric_limits<double>::infinity()));
    Value initI =
        makeFilled(b, loc, colI, {{values, 0}}, b.getIntegerAttr(idxElt, -1));
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
          Value greater =
              arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OGT, v, curV);
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
  return {vals, ids};
}

/// DeepSeek-V3's sigmoid scores s of the router's `logits` [T, E] and the
/// choice scores c = s + bias (c = s without a bias).
std::pair<Value, Value> buildSigmoidScores(OpBuilder &b, Location loc, Type elt,
                                           Value x, Value bias, Value logits) {
  MLIRContext *ctx = b.getContext();
  auto scoresType = cast<RankedTensorType>(logits.getType());
  // s and the choice scores c = s + bias.
  SmallVector<Value> ins = {logits};
  SmallVector<AffineMap> maps = {pick(ctx, 2, {0, 1})};
  if (bias) {
    ins.push_back(bias);
    maps.push_back(pick(ctx, 2, {1}));
  }
  maps.append(2, pick(ctx, 2, {0, 1}));
  ResultRange sc = generic(
      b, loc, ins,
      {makeEmpty(b, loc, scoresType, {{x, 0}}),
       makeEmpty(b, loc, scoresType, {{x, 0}})},
      maps, {kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
        Value s = sigmoid(nb, l, elt, a[0]);
        Value c =
            bias ? arith::AddFOp::create(nb, l, s, widen(nb, l, a[1], elt)) : s;
        linalg::YieldOp::create(nb, l, ValueRange{s, c});
      });
  return {sc[0], sc[1]};
}

/// DeepSeek-V3's group-limited choice: the experts of the groups not among
/// the op's topk_group best (each group scored by the sum of its two best
/// choice scores) score -inf in `choice` [T, E].
Value limitToGroups(OpBuilder &b, Location loc, RouterOp op, Value x,
                    Value choice) {
  MLIRContext *ctx = b.getContext();
  Type elt = op.getWeights().getType().getElementType();
  Type idxElt = op.getIndices().getType().getElementType();
  auto scoresType = cast<RankedTensorType>(choice.getType());
  int64_t t = scoresType.getDimSize(0), numExperts = scoresType.getDimSize(1);
  int64_t groups = op.getNGroup(), keep = op.getTopkGroup(),
          size = numExperts / groups;
  // Each group's score, the sum of its two best choice scores: the
  // [T, E] scores as [T * groups, size] rows.
  Value rows = tensor::CollapseShapeOp::create(
      b, loc,
      tensor::ExpandShapeOp::create(
          b, loc, tensorOf({t, groups, size}, elt), choice,
          SmallVector<ReassociationIndices>{{0}, {1, 2}}),
      SmallVector<ReassociationIndices>{{0, 1}, {2}});
  auto [best, unused] = buildTopK(b, loc, rows, 2, idxElt);
  int64_t tg = t == ShapedType::kDynamic ? t : t * groups;
  Value groupSum =
      generic(b, loc, {best[0], best[1]},
              {makeEmpty(b, loc, tensorOf({tg}, elt), {{rows, 0}})},
              SmallVector<AffineMap>(3, pick(ctx, 1, {0})), {kPar},
              [&](OpBuilder &nb, Location l, ValueRange a) {
                linalg::YieldOp::create(
                    nb, l, Value(arith::AddFOp::create(nb, l, a[0], a[1])));
              })[0];
  Value groupScores = tensor::ExpandShapeOp::create(
      b, loc, tensorOf({t, groups}, elt), groupSum,
      SmallVector<ReassociationIndices>{{0, 1}});
  auto [unusedV, kept] = buildTopK(b, loc, groupScores, keep, idxElt);
  // Experts of the groups not kept score -inf: never chosen while a kept
  // group has an expert left (topk_group groups hold at least top_k).
  SmallVector<Value> mIns = {choice};
  llvm::append_range(mIns, kept);
  SmallVector<AffineMap> mMaps = {pick(ctx, 2, {0, 1})};
  mMaps.append(kept.size(), pick(ctx, 2, {0}));
  mMaps.push_back(pick(ctx, 2, {0, 1}));
  return generic(
      b, loc, mIns, {makeEmpty(b, loc, scoresType, {{x, 0}})}, mMaps,
      {kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange a) {
        Value g = arith::IndexCastOp::create(
            nb, l, idxElt,
            arith::DivUIOp::create(
                nb, l, idx(nb, l, 1),
                arith::ConstantIndexOp::create(nb, l, size)));
        Value in = arith::ConstantOp::create(nb, l, nb.getBoolAttr(false));
        for (int64_t r = 0; r < keep; ++r)
          in = arith::OrIOp::create(
              nb, l, in,
              arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, g,
                                    a[1 + r]));
        linalg::YieldOp::create(
            nb, l,
            Value(arith::SelectOp::create(
                nb, l, in, a[0],
                cstF(nb, l, elt, -std::numeric_limits<double>::infinity()))));
      })[0];
}

/// The router's [T, k] indices from the k chosen columns `ids`, each [T].
Value assembleIndices(OpBuilder &b, Location loc, RouterOp op, Value x,
                      ArrayRef<Value> ids) {
  MLIRContext *ctx = b.getContext();
  auto iType = op.getIndices().getType();
  int64_t k = op.getTopK();
  SmallVector<Value> iIns(ids);
  SmallVector<AffineMap> iMaps(k, pick(ctx, 2, {0}));
  iMaps.push_back(pick(ctx, 2, {0, 1}));
  return generic(
      b, loc, iIns, {makeEmpty(b, loc, iType, {{x, 0}})}, iMaps, {kPar, kPar},
      [&](OpBuilder &nb, Location l, ValueRange a) {
        Value col = idx(nb, l, 1), e = a[0];
        for (int64_t r = 1; r < k; ++r)
          e = arith::SelectOp::create(
              nb, l,
              arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, col,
                                    arith::ConstantIndexOp::create(nb, l, r)),
              a[r], e);
        linalg::YieldOp::create(nb, l, e);
      })[0];
}

/// DeepSeek-V3's [T, k] weights: the sigmoid `scores` at the chosen
/// `indices`, over their sum where the op renormalizes, times the scaling.
Value buildSigmoidWeights(OpBuilder &b, Location loc, RouterOp op, Value x,
                          Value scores, Value indices) {
  MLIRContext *ctx = b.getContext();
  auto wType = op.getWeights().getType();
  Type elt = wType.getElementType();
  int64_t t = cast<RankedTensorType>(scores.getType()).getDimSize(0);
  double scaling = op.getScaling().convertToDouble();
  auto gathered = [&](OpBuilder &nb, Location l, Value row, Value e) {
    Value col = arith::IndexCastOp::create(nb, l, nb.getIndexType(), e);
    return Value(
        tensor::ExtractOp::create(nb, l, scores, ValueRange{row, col}));
  };
  Value denom;
  auto colF = tensorOf({t}, elt);
  if (op.getRenormalize())
    denom = generic(b, loc, {indices}, {zeros(b, loc, colF, {{x, 0}})},
                    {pick(ctx, 2, {0, 1}), pick(ctx, 2, {0})}, {kPar, kRed},
                    [&](OpBuilder &nb, Location l, ValueRange a) {
                      Value s = gathered(nb, l, idx(nb, l, 0), a[0]);
                      linalg::YieldOp::create(
                          nb, l, Value(arith::AddFOp::create(nb, l, a[1], s)));
                    })[0];
  SmallVector<Value> wIns = {indices};
  SmallVector<AffineMap> wMaps = {pick(ctx, 2, {0, 1})};
  if (denom) {
    wIns.push_back(denom);
    wMaps.push_back(pick(ctx, 2, {0}));
  }
  wMaps.push_back(pick(ctx, 2, {0, 1}));
  return generic(
      b, loc, wIns, {makeEmpty(b, loc, wType, {{x, 0}})}, wMaps, {kPar, kPar},
      [&](OpBuilder &nb, Location l, ValueRange a) {
        Value w = gathered(nb, l, idx(nb, l, 0), a[0]);
        if (denom)
          w = arith::DivFOp::create(
              nb, l, w,
              arith::AddFOp::create(nb, l, a[1], cstF(nb, l, elt, 1e-20)));
        w = arith::MulFOp::create(nb, l, w, cstF(nb, l, elt, scaling));
        linalg::YieldOp::create(nb, l, w);
      })[0];
}

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
    if (op.getSigmoid()) {
      rewriter.replaceOp(op, lowerSigmoid(b, loc, op, adaptor, logits));
      return success();
    }

    auto [vals, ids] = buildTopK(b, loc, logits, k, idxElt);
    auto colF = tensorOf({t}, elt);

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

  /// DeepSeek-V3's scoring: sigmoid scores s, choice scores s + bias,
  /// group-limited, weights s at the chosen experts (renormalised) times
  /// the scaling.
  static SmallVector<Value> lowerSigmoid(OpBuilder &b, Location loc,
                                         RouterOp op, OpAdaptor adaptor,
                                         Value logits) {
    Value x = adaptor.getInput();
    Type elt = op.getWeights().getType().getElementType();
    Type idxElt = op.getIndices().getType().getElementType();
    auto [scores, choice] =
        buildSigmoidScores(b, loc, elt, x, adaptor.getBias(), logits);
    if (op.getNGroup() > 1)
      choice = limitToGroups(b, loc, op, x, choice);
    auto [unusedC, ids] = buildTopK(b, loc, choice, op.getTopK(), idxElt);
    // [T, k] indices, then the weights: s at each, over their sum.
    Value indices = assembleIndices(b, loc, op, x, ids);
    Value weights = buildSigmoidWeights(b, loc, op, x, scores, indices);
    return {weights, indices};
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
    // The last position's row (zeros when this rank does not hold it), then
    // logits[v] = sum_d row[d] * w[v, d]: a contraction on two contiguous
    // operands, which the CPU target's kernels tile.
    auto rowType = tensorOf({dimOf(w, 1)}, elt);
    Value row = generic(b, loc, {}, {makeEmpty(b, loc, rowType, {})},
                        {pick(ctx, 1, {0})}, {kPar},
                        [&](OpBuilder &nb, Location l, ValueRange) {
                          Value xv = tensor::ExtractOp::create(
                              nb, l, x, ValueRange{rowIdx, idx(nb, l, 0)});
                          linalg::YieldOp::create(
                              nb, l,
                              Value(arith::SelectOp::create(
                                  nb, l, found, xv, cstF(nb, l, elt, 0.0))));
                        })[0];
    Value res =
        generic(b, loc, {row, w}, {zeros(b, loc, op.getType(), {})},
                {pick(ctx, 2, {1}), pick(ctx, 2, {0, 1}), pick(ctx, 2, {0})},
                {kPar, kRed}, multiplyAccumulate)[0];
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

/// `result[i, ...] = input[rows[i], ...]`.
struct TakeRowsLowering : OpConversionPattern<TakeRowsOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(TakeRowsOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(op, takeRows(rewriter, op.getLoc(), adaptor.getInput(),
                                    adaptor.getRows(),
                                    cast<RankedTensorType>(op.getType())));
    return success();
  }
};

struct ConvertMoEToLinalgPass
    : public meshfold::impl::ConvertMoEToLinalgPassBase<
          ConvertMoEToLinalgPass> {
  using Base::Base;

  /// The materialised attention reads k's rows in order: keys through a
  /// table of key tiles need the fused one.
  static LogicalResult checkNoKeyTiles(Operation *root) {
    WalkResult walk = root->walk([](Operation *op) {
      Value tiles;
      if (auto att = dyn_cast<AttentionOp>(op))
        tiles = att.getKeyTiles();
      else if (auto att = dyn_cast<AttentionPartialOp>(op))
        tiles = att.getKeyTiles();
      if (!tiles)
        return WalkResult::advance();
      op->emitError() << "keys through a table of key tiles need the fused "
                         "attention (fuse-attention=true)";
      return WalkResult::interrupt();
    });
    return failure(walk.wasInterrupted());
  }

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    ConversionTarget target(*ctx);
    target.addLegalDialect<linalg::LinalgDialect, tensor::TensorDialect,
                           arith::ArithDialect, math::MathDialect>();
    target.addIllegalOp<PositionsOp, EmbedOp, RMSNormOp, SumSquaresOp,
                        RMSScaleOp, ClipOp, LinearOp, HeadLinearOp, MLPOp,
                        RoPEOp, AttentionOp, AttentionPartialOp,
                        AttentionMergeOp, RouterOp, ExpertsOp, ExpertFFNOp,
                        LMHeadOp, LayerOp, TakePositionOp, TakeRowsOp>();
    inlineLayers(getOperation());
    target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
    RewritePatternSet patterns(ctx);
    if (attentionTile < 1) {
      getOperation()->emitError() << "attention-tile must be positive, got "
                                  << static_cast<int64_t>(attentionTile);
      return signalPassFailure();
    }
    if (!fuseAttention && failed(checkNoKeyTiles(getOperation())))
      return signalPassFailure();
    populateMoEToLinalgConversionPatterns(patterns, groupExperts, fuseAttention,
                                          attentionTile);
    if (failed(applyPartialConversion(getOperation(), target,
                                      std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace

void meshfold::populateMoEToLinalgConversionPatterns(
    RewritePatternSet &patterns, bool groupExperts, bool fuseAttention,
    int64_t attentionTile) {
  patterns
      .add<PositionsLowering, EmbedLowering, RMSNormLowering,
           SumSquaresLowering, RMSScaleLowering, ClipLowering, LinearLowering,
           HeadLinearLowering, MLPLowering, RoPELowering, RouterLowering,
           LMHeadLowering, TakePositionLowering, TakeRowsLowering>(
          patterns.getContext());
  moe_to_linalg::populateAttentionPatterns(patterns, fuseAttention,
                                           attentionTile);
  moe_to_linalg::populateExpertPatterns(patterns, groupExperts);
}
