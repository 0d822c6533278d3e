//===- Contraction.cpp - contractions among linalg.generic ops ------------===//

#include "meshfold/Dialect/Linalg/Transforms/Contraction.h"

#include "mlir/Dialect/Affine/Utils.h"
#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace meshfold;

namespace {
BlockArgument stripExtension(Value v) {
  if (auto ext = v.getDefiningOp<arith::ExtFOp>())
    v = ext.getIn();
  return dyn_cast<BlockArgument>(v);
}

/// Whether the body is `yield out + widen(in0) * widen(in1)` and nothing
/// else, all in the output's float type.
bool isMultiplyAccumulate(linalg::GenericOp op) {
  Block &body = op.getRegion().front();
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  if (yield.getNumOperands() != 1)
    return false;
  auto add = yield.getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!add)
    return false;
  Value acc = body.getArgument(2);
  Value prod = add.getLhs() == acc   ? add.getRhs()
               : add.getRhs() == acc ? add.getLhs()
                                     : Value();
  auto mul = prod ? prod.getDefiningOp<arith::MulFOp>() : nullptr;
  if (!mul || mul.getType() != acc.getType() || !isa<FloatType>(acc.getType()))
    return false;
  BlockArgument x = stripExtension(mul.getLhs()),
                y = stripExtension(mul.getRhs());
  if (!x || !y || x.getOwner() != &body || y.getOwner() != &body ||
      x.getArgNumber() + y.getArgNumber() != 1 ||
      x.getArgNumber() == y.getArgNumber())
    return false;
  size_t expected = 3 + (mul.getLhs() != x) + (mul.getRhs() != y);
  return body.getOperations().size() == expected;
}
} // namespace

bool ContractionMatch::uses(OpOperand *operand, unsigned d) const {
  return op.getMatchingIndexingMap(operand).isFunctionOfDim(d);
}

std::optional<unsigned> ContractionMatch::innermost(OpOperand *operand) const {
  AffineMap m = op.getMatchingIndexingMap(operand);
  if (m.getNumResults() == 0)
    return std::nullopt;
  auto dim = dyn_cast<AffineDimExpr>(m.getResults().back());
  if (!dim)
    return std::nullopt;
  return dim.getPosition();
}

std::optional<unsigned>
ContractionMatch::innermostOwnDim(OpOperand *only, OpOperand *other) const {
  std::optional<unsigned> found;
  for (AffineExpr e : op.getMatchingIndexingMap(out).getResults()) {
    unsigned d = cast<AffineDimExpr>(e).getPosition();
    if (uses(only, d) && !uses(other, d))
      found = d;
  }
  return found;
}

SmallVector<Value> ContractionMatch::indices(OpOperand *operand,
                                             ArrayRef<Value> iv,
                                             OpBuilder *b) const {
  AffineMap map = op.getMatchingIndexingMap(operand);
  if (map.isProjectedPermutation()) {
    SmallVector<Value> idx;
    for (AffineExpr e : map.getResults())
      idx.push_back(iv[cast<AffineDimExpr>(e).getPosition()]);
    return idx;
  }
  assert(b && "an index that is not a loop dim needs a builder");
  // Dims the operand does not use may be unset: any value will do.
  SmallVector<Value> dims(iv);
  Value any = *llvm::find_if(iv, [](Value v) { return bool(v); });
  for (Value &v : dims)
    v = v ? v : any;
  return llvm::to_vector(*affine::expandAffineMap(*b, op.getLoc(), map, dims));
}

std::optional<ContractionMatch> meshfold::matchContraction(linalg::GenericOp op,
                                                           bool affineInputs) {
  if (!op.hasPureBufferSemantics() || op.getNumDpsInputs() != 2 ||
      op.getNumDpsInits() != 1 || !isMultiplyAccumulate(op))
    return std::nullopt;
  SmallVector<utils::IteratorType> iters = op.getIteratorTypesArray();
  std::optional<unsigned> k;
  for (auto [d, it] : llvm::enumerate(iters)) {
    if (it != utils::IteratorType::reduction)
      continue;
    if (k)
      return std::nullopt;
    k = d;
  }
  if (!k)
    return std::nullopt;
  for (OpOperand &operand : op->getOpOperands()) {
    AffineMap map = op.getMatchingIndexingMap(&operand);
    bool input = op.isDpsInput(&operand);
    if (map.getNumSymbols() != 0 ||
        (!map.isProjectedPermutation() && !(input && affineInputs)))
      return std::nullopt;
  }

  ContractionMatch c{op, op.getDpsInputOperand(0), op.getDpsInputOperand(1),
                     op.getDpsInitOperand(0), *k};
  if (!c.uses(c.in0, *k) || !c.uses(c.in1, *k) || c.uses(c.out, *k))
    return std::nullopt;
  for (auto [d, it] : llvm::enumerate(iters))
    if (it == utils::IteratorType::parallel && !c.uses(c.out, d))
      return std::nullopt;
  return c;
}
