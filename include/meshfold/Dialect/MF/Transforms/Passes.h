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

/// What mf-verify-plan checks: the module's plan against its rules, then the
/// model against the plan. Returns "" when both hold (or there is no plan, or
/// no model), else the first rule broken as one line ("plan rule '...': ...").
/// Fails, with a diagnostic, when the model's ops disagree.
mlir::FailureOr<std::string> checkPlanAndModel(mlir::ModuleOp module);

} // namespace meshfold::mf

#endif // MESHFOLD_DIALECT_MF_TRANSFORMS_PASSES_H
