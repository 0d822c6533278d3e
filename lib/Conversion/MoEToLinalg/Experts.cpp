//===- Experts.cpp - moe routed-expert ops to linalg ----------------------===//

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

} // namespace

void populateExpertPatterns(RewritePatternSet &patterns) {
  patterns.add<ExpertsLowering, ExpertFFNLowering>(patterns.getContext());
}
} // namespace meshfold::moe_to_linalg
