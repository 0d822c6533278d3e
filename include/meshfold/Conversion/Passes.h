//===- Passes.h - meshfold conversion passes --------------------*- C++ -*-===//

#ifndef MESHFOLD_CONVERSION_PASSES_H
#define MESHFOLD_CONVERSION_PASSES_H

#include "meshfold/Conversion/MFToLLVM/MFToLLVM.h"
#include "meshfold/Conversion/MFToRuntime/MFToRuntime.h"
#include "meshfold/Conversion/MoEToLinalg/MoEToLinalg.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Pass/Pass.h"

namespace meshfold::mf {
class MFDialect;
} // namespace meshfold::mf

namespace meshfold {

#define GEN_PASS_DECL
#include "meshfold/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "meshfold/Conversion/Passes.h.inc"

} // namespace meshfold

#endif // MESHFOLD_CONVERSION_PASSES_H
