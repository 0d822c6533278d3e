//===- Builders.cpp - linalg building blocks of the moe lowering ----------===//

#include "Builders.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"

#include <limits>

using namespace mlir;

namespace meshfold::moe_to_linalg {
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

Value cstIndex(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
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
  return buildLinearInto(b, loc, x, w, makeEmpty(b, loc, resultType, {{x, 0}}));
}

/// x [T, in] times w [out, in]^T into `dest` [T, out], zero-filled first.
Value buildLinearInto(OpBuilder &b, Location loc, Value x, Value w,
                      Value dest) {
  MLIRContext *ctx = b.getContext();
  Type elt = cast<RankedTensorType>(dest.getType()).getElementType();
  Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(elt));
  Value init = linalg::FillOp::create(b, loc, zero, dest).getResult(0);
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
} // namespace meshfold::moe_to_linalg
