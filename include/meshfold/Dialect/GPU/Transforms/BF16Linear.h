//===- BF16Linear.h - linear layers with bf16 weights -----------*- C++ -*-===//
//
// The contractions that the CUDA target hands to tensor cores
// (`mf-gpu-wgmma-contractions`) or to cuBLASLt
// (`mf-gpu-library-contractions`): a linear layer
// `out[m, n] += a[m, k] * widen(w[n, k])` on buffers, with both operands
// made bf16 and K-major first.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_DIALECT_GPU_TRANSFORMS_BF16LINEAR_H
#define MESHFOLD_DIALECT_GPU_TRANSFORMS_BF16LINEAR_H

#include "meshfold/Dialect/Linalg/Transforms/Contraction.h"

#include "mlir/IR/Builders.h"

#include <optional>

namespace meshfold {

/// `op` as a linear layer with bf16 weights, or nothing: loop dims (m, n, k)
/// with maps (m, k), (n, k) -> (m, n); `a` f32 or bf16 of static K (any
/// layout); `w` bf16 of static N x K with a unit inner stride; `out` f32.
/// Only ops at the top level of their function (not inside a loop nest of
/// a lowering, nor a kernel) are taken.
std::optional<ContractionMatch> matchBF16Linear(mlir::linalg::GenericOp op);

/// The weight's N and K of a match.
std::pair<int64_t, int64_t> weightShape(const ContractionMatch &c);

/// A contiguous bf16 copy of the match's `a` (rows x K; f32 values rounded
/// to nearest even, bf16 ones kept) in device memory, written by a
/// `linalg.generic` at `b`'s insertion point; the caller frees it with
/// freeDeviceBuffer.
mlir::Value roundActivationsToBF16(mlir::OpBuilder &b,
                                   const ContractionMatch &c, mlir::Value rows);

/// A buffer of `type` in device memory (only kernels, TMA and the runtime's
/// device calls touch it): `gpu.alloc` on the rank's stream, the form
/// `mf-gpu-device-memory` makes.
mlir::Value allocDeviceBuffer(mlir::OpBuilder &b, mlir::Location loc,
                              mlir::MemRefType type,
                              mlir::ValueRange dynamicSizes);
/// Frees a buffer of allocDeviceBuffer in stream order.
void freeDeviceBuffer(mlir::OpBuilder &b, mlir::Location loc,
                      mlir::Value buffer);

} // namespace meshfold

#endif // MESHFOLD_DIALECT_GPU_TRANSFORMS_BF16LINEAR_H
