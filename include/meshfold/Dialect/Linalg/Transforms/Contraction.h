//===- Contraction.h - contractions among linalg.generic ops ----*- C++ -*-===//
//
// The matcher both targets' contraction code generators share: the CPU's
// register-tiled vector kernels (`mf-linalg-contraction-kernels`) and the
// CUDA target's block tiles (`mf-gpu-tile-contractions`).
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_DIALECT_LINALG_TRANSFORMS_CONTRACTION_H
#define MESHFOLD_DIALECT_LINALG_TRANSFORMS_CONTRACTION_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"

#include <optional>

namespace meshfold {

/// A `linalg.generic` on buffers whose body is
/// `yield out + widen(in0) * widen(in1)` (each input possibly widened by
/// `arith.extf`, all arithmetic in the output's float type), with one
/// reduction dim `k` that both inputs use and the output does not, every
/// parallel dim used by the output, and projected-permutation maps.
struct ContractionMatch {
  mutable mlir::linalg::GenericOp op;
  mlir::OpOperand *in0, *in1, *out;
  unsigned k;

  /// Whether `operand`'s map uses loop dim `d`.
  bool uses(mlir::OpOperand *operand, unsigned d) const;
  /// The loop dim of `operand`'s innermost (last) index, if it has one.
  std::optional<unsigned> innermost(mlir::OpOperand *operand) const;
  /// Among the output's dims, the last one that `only` uses and `other`
  /// does not (the row dim of `a`, the column dim of `b`).
  std::optional<unsigned> innermostOwnDim(mlir::OpOperand *only,
                                          mlir::OpOperand *other) const;
  /// The indices of `operand` at the loop point `iv` (one value per dim).
  llvm::SmallVector<mlir::Value> indices(mlir::OpOperand *operand,
                                         llvm::ArrayRef<mlir::Value> iv) const;
};

/// The contraction `op` is, or nothing.
std::optional<ContractionMatch> matchContraction(mlir::linalg::GenericOp op);

} // namespace meshfold

#endif // MESHFOLD_DIALECT_LINALG_TRANSFORMS_CONTRACTION_H
