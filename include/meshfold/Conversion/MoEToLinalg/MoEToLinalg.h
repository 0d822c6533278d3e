//===- MoEToLinalg.h - moe to linalg patterns -------------------*- C++ -*-===//

#ifndef MESHFOLD_CONVERSION_MOETOLINALG_MOETOLINALG_H
#define MESHFOLD_CONVERSION_MOETOLINALG_MOETOLINALG_H

#include <cstdint>

namespace mlir {
class RewritePatternSet;
} // namespace mlir

namespace meshfold {
/// Patterns lowering the moe compute ops to linalg/tensor/arith/math (and
/// scf loops over experts with `groupExperts`, the tile loops of the fused
/// attention with `fuseAttention`, `attentionTile` query rows and keys per
/// tile; false keeps the materialised attention).
void populateMoEToLinalgConversionPatterns(mlir::RewritePatternSet &patterns,
                                           bool groupExperts = true,
                                           bool fuseAttention = true,
                                           int64_t attentionTile = 64);
} // namespace meshfold

#endif // MESHFOLD_CONVERSION_MOETOLINALG_MOETOLINALG_H
