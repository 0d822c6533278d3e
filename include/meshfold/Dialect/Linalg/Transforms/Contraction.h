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
/// parallel dim used by the output, and projected-permutation maps (for the
/// inputs, with `affineInputs`, any symbol-free affine maps, such as GQA's
/// `h floordiv g` for the KV head of a query head).
struct ContractionMatch {
  mutable mlir::linalg::GenericOp op;
  mlir::OpOperand *in0, *in1, *out;
  unsigned k;

  /// Whether `operand`'s map uses loop dim `d`.
  bool uses(mlir::OpOperand *operand, unsigned d) const;
  /// The loop dim of `operand`'s innermost (last) index, if that index is
  /// a plain loop dim.
  std::optional<unsigned> innermost(mlir::OpOperand *operand) const;
  /// Among the output's dims, the last one that `only` uses and `other`
  /// does not (the row dim of `a`, the column dim of `b`).
  std::optional<unsigned> innermostOwnDim(mlir::OpOperand *only,
                                          mlir::OpOperand *other) const;
  /// The indices of `operand` at the loop point `iv` (one value per dim; a
  /// dim the operand does not use may be null). An index that is not a plain
  /// loop dim is computed with arith ops at `b`'s insertion point.
  llvm::SmallVector<mlir::Value> indices(mlir::OpOperand *operand,
                                         llvm::ArrayRef<mlir::Value> iv,
                                         mlir::OpBuilder *b = nullptr) const;
};

/// The contraction `op` is, or nothing.
std::optional<ContractionMatch> matchContraction(mlir::linalg::GenericOp op,
                                                 bool affineInputs = false);

} // namespace meshfold

#endif // MESHFOLD_DIALECT_LINALG_TRANSFORMS_CONTRACTION_H
