//===- Passes.h - meshfold's linalg passes ----------------------*- C++ -*-===//

#ifndef MESHFOLD_DIALECT_LINALG_TRANSFORMS_PASSES_H
#define MESHFOLD_DIALECT_LINALG_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"
#include "mlir/Pass/Pass.h"

namespace meshfold {

#define GEN_PASS_DECL
#include "meshfold/Dialect/Linalg/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "meshfold/Dialect/Linalg/Transforms/Passes.h.inc"

} // namespace meshfold

#endif // MESHFOLD_DIALECT_LINALG_TRANSFORMS_PASSES_H
