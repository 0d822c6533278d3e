//===- Passes.h - mf dialect passes -----------------------------*- C++ -*-===//

#ifndef MESHFOLD_DIALECT_MF_TRANSFORMS_PASSES_H
#define MESHFOLD_DIALECT_MF_TRANSFORMS_PASSES_H

#include "meshfold/Dialect/MF/IR/MF.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace meshfold::mf {

#define GEN_PASS_DECL
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"

} // namespace meshfold::mf

#endif // MESHFOLD_DIALECT_MF_TRANSFORMS_PASSES_H
