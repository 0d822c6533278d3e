//===- BF16Linear.cpp - linear layers with bf16 weights -------------------===//

#include "meshfold/Dialect/GPU/Transforms/BF16Linear.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace meshfold;

namespace {
/// Whether `type` is a 2-D memref with a unit inner stride.
bool unitInnerStride(MemRefType type) {
  SmallVector<int64_t> strides;
  int64_t offset;
  return type.getRank() == 2 &&
         succeeded(type.getStridesAndOffset(strides, offset)) &&
         strides[1] == 1;
}
} // namespace

std::optional<ContractionMatch>
meshfold::matchBF16Linear(linalg::GenericOp op) {
  if (op->getParentOfType<scf::ParallelOp>() ||
      op->getParentOfType<scf::ForallOp>() ||
      op->getParentOfType<gpu::LaunchOp>())
    return std::nullopt;
  std::optional<ContractionMatch> c = matchContraction(op);
  if (!c)
    return std::nullopt;
  MLIRContext *ctx = op.getContext();
  AffineExpr m, n, k;
  bindDims(ctx, m, n, k);
  auto map = [&](ArrayRef<AffineExpr> e) {
    return AffineMap::get(3, 0, e, ctx);
  };
  if (op.getNumLoops() != 3 || c->k != 2 ||
      op.getMatchingIndexingMap(c->in0) != map({m, k}) ||
      op.getMatchingIndexingMap(c->in1) != map({n, k}) ||
      op.getMatchingIndexingMap(c->out) != map({m, n}))
    return std::nullopt;
  auto a = cast<MemRefType>(c->in0->get().getType());
  auto w = cast<MemRefType>(c->in1->get().getType());
  auto out = cast<MemRefType>(c->out->get().getType());
  if (!w.getElementType().isBF16() || !unitInnerStride(w) ||
      !w.hasStaticShape() || a.getRank() != 2 ||
      ShapedType::isDynamic(a.getDimSize(1)) ||
      !(a.getElementType().isF32() || a.getElementType().isBF16()) ||
      !out.getElementType().isF32())
    return std::nullopt;
  return c;
}

std::pair<int64_t, int64_t> meshfold::weightShape(const ContractionMatch &c) {
  auto w = cast<MemRefType>(c.in1->get().getType());
  return {w.getDimSize(0), w.getDimSize(1)};
}

Value meshfold::roundActivationsToBF16(OpBuilder &b, const ContractionMatch &c,
                                       Value rows) {
  Location loc = c.op.getLoc();
  int64_t k = weightShape(c).second;
  auto type = MemRefType::get({ShapedType::kDynamic, k}, b.getBF16Type());
  Value copy = allocDeviceBuffer(b, loc, type, ValueRange{rows});
  AffineMap id = b.getMultiDimIdentityMap(2);
  SmallVector<utils::IteratorType> par(2, utils::IteratorType::parallel);
  linalg::GenericOp::create(b, loc, TypeRange{}, ValueRange{c.in0->get()},
                            ValueRange{copy}, ArrayRef<AffineMap>{id, id}, par,
                            [&](OpBuilder &nb, Location l, ValueRange args) {
                              Value v = args[0];
                              if (!v.getType().isBF16())
                                v = arith::TruncFOp::create(
                                    nb, l, nb.getBF16Type(), v);
                              linalg::YieldOp::create(nb, l, v);
                            });
  return copy;
}

Value meshfold::allocDeviceBuffer(OpBuilder &b, Location loc, MemRefType type,
                                  ValueRange dynamicSizes) {
  Type token = gpu::AsyncTokenType::get(b.getContext());
  Value stream =
      gpu::WaitOp::create(b, loc, token, ValueRange()).getAsyncToken();
  return gpu::AllocOp::create(b, loc, type, token, ValueRange{stream},
                              dynamicSizes, ValueRange(), /*hostShared=*/false)
      .getMemref();
}

void meshfold::freeDeviceBuffer(OpBuilder &b, Location loc, Value buffer) {
  Type token = gpu::AsyncTokenType::get(b.getContext());
  Value stream =
      gpu::WaitOp::create(b, loc, token, ValueRange()).getAsyncToken();
  gpu::DeallocOp::create(b, loc, token, ValueRange{stream}, buffer);
}
