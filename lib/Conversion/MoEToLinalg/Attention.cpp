//===- Attention.cpp - moe attention ops to linalg ------------------------===//

#include "Builders.h"
#include "meshfold/Dialect/MoE/IR/MoE.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/Transforms/DialectConversion.h"

#include <functional>
#include <limits>

using namespace mlir;
using namespace meshfold::moe;

namespace meshfold::moe_to_linalg {
namespace {
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

} // namespace

void populateAttentionPatterns(RewritePatternSet &patterns) {
  patterns
      .add<AttentionLowering, AttentionPartialLowering, AttentionMergeLowering>(
          patterns.getContext());
}
} // namespace meshfold::moe_to_linalg
