//===- Experts.cpp - moe routed-expert ops to linalg ----------------------===//
//
// moe.experts (one rank, every token to its top-k experts) and
// moe.expert_ffn (expert parallelism: the rows a dispatch brought, each with
// a local expert id) both apply the SwiGLU expert of each row. The grouped
// lowering sorts the rows by expert first (counting sort in scalar loops over
// small index tensors), so that each expert's weights are multiplied against
// all of its rows at once: three contractions per expert of the same form as
// moe.linear (rows [n_e, d] times a rank-reduced slice of the stacked weight),
// which the code generator tiles like any other linear layer. Results are
// written at the expert's offset into a [rows, d] tensor in expert order and
// read back in row order (moe.experts also applies the routing weights).
//
// The per-row lowering (group-experts=false) gathers every weight element
// through tensor.extract by the row's expert id instead: no weight element is
// reused across rows, but it is a plain chain of generics without loops.
//
//===----------------------------------------------------------------------===//

#include "Builders.h"
#include "meshfold/Dialect/MoE/IR/MoE.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/Transforms/DialectConversion.h"

#include <functional>
#include <limits>

using namespace mlir;
using namespace meshfold::moe;

namespace meshfold::moe_to_linalg {
namespace {
//===----------------------------------------------------------------------===//
// Grouped lowering
//===----------------------------------------------------------------------===//

/// The rows of a routed-expert op grouped by expert. `counts[e]` rows go to
/// expert e, `ends[e]` is one past the last slot of expert e in expert order,
/// `slot[n]` is the slot of row n and `order[s]` the row at slot s. Within an
/// expert, rows keep their order (the sort is stable). The group after the
/// last expert (e = E) collects the rows whose id is outside [0, E): no
/// expert computes them, so their results stay zero rather than reading past
/// the stacked weights.
struct ExpertGroups {
  Value counts, ends, slot, order;
};

/// The group of an i64 expert id: the id itself when in [0, numExperts),
/// numExperts otherwise (one unsigned compare covers negative ids).
Value groupOf(OpBuilder &b, Location loc, Value id, int64_t numExperts) {
  Value num = arith::ConstantOp::create(
      b, loc, b.getIntegerAttr(id.getType(), numExperts));
  Value inRange =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, id, num);
  Value group = arith::SelectOp::create(b, loc, inRange, id, num);
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), group);
}

/// Counting sort of `numRows` rows by expert; `idOf(n)` is the i64 expert id
/// of row n. O(rows + experts) scalar work in sequential loops whose tensors
/// are loop-carried, so that they bufferize in place.
ExpertGroups
groupByExpert(OpBuilder &b, Location loc, Value numRows, int64_t numExperts,
              function_ref<Value(OpBuilder &, Location, Value)> idOf) {
  Type index = b.getIndexType();
  auto groupsType = RankedTensorType::get({numExperts + 1}, index);
  auto rowsType = RankedTensorType::get({ShapedType::kDynamic}, index);
  Value zero = cstIndex(b, loc, 0), one = cstIndex(b, loc, 1);
  auto groupAt = [&](OpBuilder &nb, Location l, Value n) {
    return groupOf(nb, l, idOf(nb, l, n), numExperts);
  };

  // counts[e] = number of rows of expert e.
  Value counts0 = makeFilled(b, loc, groupsType, {}, b.getIndexAttr(0));
  Value counts =
      scf::ForOp::create(
          b, loc, zero, numRows, one, {counts0},
          [&](OpBuilder &nb, Location l, Value n, ValueRange it) {
            Value e = groupAt(nb, l, n);
            Value c = tensor::ExtractOp::create(nb, l, it[0], e);
            Value next = arith::AddIOp::create(nb, l, c, one);
            scf::YieldOp::create(
                nb, l, Value(tensor::InsertOp::create(nb, l, next, it[0], e)));
          })
          .getResult(0);

  // cursor[e] = first slot of expert e (exclusive prefix sum of counts).
  Value cursor0 = tensor::EmptyOp::create(b, loc, groupsType, ValueRange{});
  Value cursor =
      scf::ForOp::create(
          b, loc, zero, cstIndex(b, loc, numExperts + 1), one, {cursor0, zero},
          [&](OpBuilder &nb, Location l, Value e, ValueRange it) {
            Value filled = tensor::InsertOp::create(nb, l, it[1], it[0], e);
            Value c = tensor::ExtractOp::create(nb, l, counts, e);
            Value next = arith::AddIOp::create(nb, l, it[1], c);
            scf::YieldOp::create(nb, l, ValueRange{filled, next});
          })
          .getResult(0);

  // Each row takes the next slot of its expert, in row order. The cursors end
  // one past each expert's last slot.
  Value slot0 = tensor::EmptyOp::create(b, loc, rowsType, ValueRange{numRows});
  Value order0 = tensor::EmptyOp::create(b, loc, rowsType, ValueRange{numRows});
  auto scatter = scf::ForOp::create(
      b, loc, zero, numRows, one, {cursor, slot0, order0},
      [&](OpBuilder &nb, Location l, Value n, ValueRange it) {
        Value e = groupAt(nb, l, n);
        Value s = tensor::ExtractOp::create(nb, l, it[0], e);
        Value next = arith::AddIOp::create(nb, l, s, one);
        Value cur = tensor::InsertOp::create(nb, l, next, it[0], e);
        Value slot = tensor::InsertOp::create(nb, l, s, it[1], n);
        Value order = tensor::InsertOp::create(nb, l, n, it[2], s);
        scf::YieldOp::create(nb, l, ValueRange{cur, slot, order});
      });
  return {counts, scatter.getResult(0), scatter.getResult(1),
          scatter.getResult(2)};
}

/// Expert `e`'s weight [a, b]: a rank-reduced slice of the stacked [E, a, b].
Value expertWeight(OpBuilder &b, Location loc, Value stacked, Value e) {
  auto type = cast<RankedTensorType>(stacked.getType());
  auto sliceType = RankedTensorType::get(type.getShape().drop_front(),
                                         type.getElementType());
  SmallVector<OpFoldResult> offsets = {e, b.getIndexAttr(0), b.getIndexAttr(0)};
  SmallVector<OpFoldResult> sizes = {b.getIndexAttr(1),
                                     b.getIndexAttr(type.getDimSize(1)),
                                     b.getIndexAttr(type.getDimSize(2))};
  SmallVector<OpFoldResult> strides(3, b.getIndexAttr(1));
  return tensor::ExtractSliceOp::create(b, loc, sliceType, stacked, offsets,
                                        sizes, strides);
}

/// The SwiGLU experts applied to the grouped rows: ySorted [numRows, d] in
/// expert order (slot s holds row order[s]'s result; the out-of-range group
/// stays zero). Row n reads x[n / rowsPerToken].
Value runExperts(OpBuilder &b, Location loc, const ExpertGroups &g,
                 Value numRows, Value x, int64_t rowsPerToken, Value w1,
                 Value w2, Value w3, Type elt) {
  MLIRContext *ctx = b.getContext();
  int64_t numExperts = dimOf(w1, 0), ffn = dimOf(w1, 1), d = dimOf(x, 1);
  auto sortedType = tensorOf({ShapedType::kDynamic, d}, elt);
  auto hType = tensorOf({ShapedType::kDynamic, ffn}, elt);
  Value zero = cstIndex(b, loc, 0), one = cstIndex(b, loc, 1);
  Value sorted0 =
      linalg::FillOp::create(
          b, loc,
          ValueRange{arith::ConstantOp::create(b, loc, b.getZeroAttr(elt))},
          ValueRange{
              tensor::EmptyOp::create(b, loc, sortedType, ValueRange{numRows})})
          .getResult(0);

  auto body = [&](OpBuilder &nb, Location l, Value e, ValueRange it) {
    Value n = tensor::ExtractOp::create(nb, l, g.counts, e);
    Value end = tensor::ExtractOp::create(nb, l, g.ends, e);
    Value offset = arith::SubIOp::create(nb, l, end, n);
    Value any = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ne, n, zero);
    auto ifOp = scf::IfOp::create(nb, l, TypeRange{sortedType}, any,
                                  /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(nb);
      nb.setInsertionPointToStart(ifOp.thenBlock());
      // The expert's rows, contiguous: rows[i] = x[token of order[offset+i]].
      Value rows0 = tensor::EmptyOp::create(nb, l, sortedType, ValueRange{n});
      Value rows = generic(
          nb, l, {}, {rows0}, {pick(ctx, 2, {0, 1})}, {kPar, kPar},
          [&](OpBuilder &bb, Location bl, ValueRange) {
            Value s = arith::AddIOp::create(bb, bl, offset, idx(bb, bl, 0));
            Value row = tensor::ExtractOp::create(bb, bl, g.order, s);
            if (rowsPerToken != 1)
              row = arith::DivUIOp::create(bb, bl, row,
                                           cstIndex(bb, bl, rowsPerToken));
            linalg::YieldOp::create(
                bb, bl,
                Value(tensor::ExtractOp::create(
                    bb, bl, x, ValueRange{row, idx(bb, bl, 1)})));
          })[0];
      // h1 = rows w1[e]^T, h3 = rows w3[e]^T, act = silu(h1) * h3 (in h1).
      // h3 gets its own allocation: two tensor.empty + fill of the same shape
      // would be merged by CSE, and bufferization would then copy the shared
      // init for one of the two contractions.
      Value h1 = buildLinear(nb, l, rows, expertWeight(nb, l, w1, e), hType);
      Value h3Init =
          bufferization::AllocTensorOp::create(nb, l, hType, ValueRange{n});
      Value h3 =
          buildLinearInto(nb, l, rows, expertWeight(nb, l, w3, e), h3Init);
      Value act = generic(
          nb, l, {h3}, {h1}, {pick(ctx, 2, {0, 1}), pick(ctx, 2, {0, 1})},
          {kPar, kPar}, [&](OpBuilder &bb, Location bl, ValueRange a) {
            linalg::YieldOp::create(bb, bl,
                                    buildSwiGLU(bb, bl, elt, a[1], a[0]));
          })[0];
      // y_e = act w2[e]^T, computed in place in the expert's rows of the
      // sorted result.
      SmallVector<OpFoldResult> offsets = {offset, nb.getIndexAttr(0)};
      SmallVector<OpFoldResult> sizes = {n, nb.getIndexAttr(d)};
      SmallVector<OpFoldResult> strides(2, nb.getIndexAttr(1));
      Value dest = tensor::ExtractSliceOp::create(nb, l, sortedType, it[0],
                                                  offsets, sizes, strides);
      Value y = buildLinearInto(nb, l, act, expertWeight(nb, l, w2, e), dest);
      scf::YieldOp::create(nb, l,
                           Value(tensor::InsertSliceOp::create(
                               nb, l, y, it[0], offsets, sizes, strides)));
      nb.setInsertionPointToStart(ifOp.elseBlock());
      scf::YieldOp::create(nb, l, it[0]);
    }
    scf::YieldOp::create(nb, l, ifOp.getResults());
  };
  return scf::ForOp::create(b, loc, zero, cstIndex(b, loc, numExperts), one,
                            {sorted0}, body)
      .getResult(0);
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
          ids = adaptor.getIndices();
    auto type = op.getType();
    Type elt = type.getElementType();
    int64_t k = dimOf(wts, 1);
    if (ShapedType::isDynamic(k))
      return rewriter.notifyMatchFailure(op, "top-k must be static");
    // Row n = t * k + j is token t's j-th choice.
    Value cK = cstIndex(b, loc, k);
    Value tokens = tensor::DimOp::create(b, loc, x, 0);
    Value numRows = arith::MulIOp::create(b, loc, tokens, cK);
    ExpertGroups g = groupByExpert(
        b, loc, numRows, dimOf(adaptor.getW1(), 0),
        [&](OpBuilder &nb, Location l, Value n) -> Value {
          Value t = arith::DivUIOp::create(nb, l, n, cK);
          Value j = arith::RemUIOp::create(nb, l, n, cK);
          return tensor::ExtractOp::create(nb, l, ids, ValueRange{t, j});
        });
    Value sorted = runExperts(b, loc, g, numRows, x, k, adaptor.getW1(),
                              adaptor.getW2(), adaptor.getW3(), elt);
    // y[t, :] = sum_j weights[t, j] * sorted[slot[t * k + j], :], j ascending
    // from zero (k is small: unrolled in the body).
    Value y = generic(
        b, loc, {}, {makeEmpty(b, loc, type, {{x, 0}})}, {pick(ctx, 2, {0, 1})},
        {kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange) {
          Value t = idx(nb, l, 0), col = idx(nb, l, 1);
          Value base = arith::MulIOp::create(nb, l, t, cstIndex(nb, l, k));
          Value acc = cstF(nb, l, elt, 0.0);
          for (int64_t j = 0; j < k; ++j) {
            Value cj = cstIndex(nb, l, j);
            Value n = arith::AddIOp::create(nb, l, base, cj);
            Value s = tensor::ExtractOp::create(nb, l, g.slot, n);
            Value v =
                tensor::ExtractOp::create(nb, l, sorted, ValueRange{s, col});
            Value w = tensor::ExtractOp::create(nb, l, wts, ValueRange{t, cj});
            acc = arith::AddFOp::create(nb, l, acc,
                                        arith::MulFOp::create(nb, l, w, v));
          }
          linalg::YieldOp::create(nb, l, acc);
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
    Value x = adaptor.getInput(), ids = adaptor.getExperts();
    auto type = op.getType();
    Value numRows = tensor::DimOp::create(b, loc, x, 0);
    ExpertGroups g =
        groupByExpert(b, loc, numRows, dimOf(adaptor.getW1(), 0),
                      [&](OpBuilder &nb, Location l, Value n) -> Value {
                        return tensor::ExtractOp::create(nb, l, ids, n);
                      });
    Value sorted =
        runExperts(b, loc, g, numRows, x, /*rowsPerToken=*/1, adaptor.getW1(),
                   adaptor.getW2(), adaptor.getW3(), type.getElementType());
    // y[r, :] = sorted[slot[r], :].
    Value y = generic(
        b, loc, {}, {makeEmpty(b, loc, type, {{x, 0}})}, {pick(ctx, 2, {0, 1})},
        {kPar, kPar}, [&](OpBuilder &nb, Location l, ValueRange) {
          Value s = tensor::ExtractOp::create(nb, l, g.slot, idx(nb, l, 0));
          linalg::YieldOp::create(
              nb, l,
              Value(tensor::ExtractOp::create(nb, l, sorted,
                                              ValueRange{s, idx(nb, l, 1)})));
        })[0];
    rewriter.replaceOp(op, y);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Per-row lowering
//===----------------------------------------------------------------------===//

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

struct PerRowExpertsLowering : OpConversionPattern<ExpertsOp> {
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

struct PerRowExpertFFNLowering : OpConversionPattern<ExpertFFNOp> {
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

void populateExpertPatterns(RewritePatternSet &patterns, bool groupExperts) {
  if (groupExperts)
    patterns.add<ExpertsLowering, ExpertFFNLowering>(patterns.getContext());
  else
    patterns.add<PerRowExpertsLowering, PerRowExpertFFNLowering>(
        patterns.getContext());
}
} // namespace meshfold::moe_to_linalg
