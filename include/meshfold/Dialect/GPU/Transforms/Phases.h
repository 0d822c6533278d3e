//===- Phases.h - block loop nests written as phases of threads -*- C++ -*-===//
//
// The form in which `mf-gpu-tile-contractions` writes a kernel that stages
// operands in memory shared by a block's threads, and that
// `mf-gpu-phases-to-launch` turns into a `gpu.launch`:
//
//   scf.parallel (blocks...) {mf.gpu_phases = THREADS} {
//     %shared = memref.alloca() : memref<...>             // block memory
//     %acc = memref.alloca() {mf.gpu_private} : memref<THREADSx...>
//     scf.parallel (%t) = (0) to (THREADS) {mf.gpu_thread_phase} {...}
//     scf.for ... { <thread phases> }                     // uniform loops
//     ...
//   }
//
// (The body of an scf.parallel is an allocation scope: the buffers live for
// one block.)
//
// Each thread phase runs every thread of the block; on the device a barrier
// follows it, so the next phase sees all its writes. Row `t` of a private
// buffer belongs to thread `t` alone (registers on the device). Outside the
// phases the block body holds only side-effect-free ops (bounds, indices),
// which every thread computes alike. Run as plain loops on the CPU the
// phases follow one another, which is what the barriers guarantee.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_DIALECT_GPU_TRANSFORMS_PHASES_H
#define MESHFOLD_DIALECT_GPU_TRANSFORMS_PHASES_H

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringRef.h"

namespace meshfold {
/// On the block loop: the number of threads of a block (i64).
constexpr llvm::StringLiteral kPhasesAttrName = "mf.gpu_phases";
/// On each loop over the threads of a block (unit).
constexpr llvm::StringLiteral kThreadPhaseAttrName = "mf.gpu_thread_phase";
/// On a buffer whose first dim is the thread (unit).
constexpr llvm::StringLiteral kPrivateAttrName = "mf.gpu_private";

/// The `threads-per-block` option of the GPU loop passes: a power of two in
/// [1, 1024], or an error on `op` naming it.
mlir::LogicalResult checkThreadsPerBlock(mlir::Operation *op, int64_t threads);

/// A block loop over `lbs` to `ubs` by `steps`, marked as running blocks of
/// `threads` threads (kPhasesAttrName), and per dim the value that stands
/// for its induction variable. A dim of one iteration (constant bounds) is
/// left out of the loop and stands for its lower bound: canonicalization
/// would fold it away and build a new loop without the marker. A loop whose
/// every dim is left out keeps one dim of one iteration (canonicalization
/// then inlines the block's phases, which run one after the other as the
/// barriers order them).
std::pair<mlir::scf::ParallelOp, llvm::SmallVector<mlir::Value>>
createBlockLoop(mlir::OpBuilder &b, mlir::Location loc, mlir::ValueRange lbs,
                mlir::ValueRange ubs, mlir::ValueRange steps, int64_t threads);

/// The coordinates of the non-negative linear index `linear` in a space of
/// `sizes` (the last dim fastest), with unsigned division: fewer instructions
/// than a signed delinearization in the kernels' per-point code.
llvm::SmallVector<mlir::Value>
delinearizeIndex(mlir::OpBuilder &b, mlir::Location loc, mlir::Value linear,
                 llvm::ArrayRef<mlir::Value> sizes);
} // namespace meshfold

#endif // MESHFOLD_DIALECT_GPU_TRANSFORMS_PHASES_H
