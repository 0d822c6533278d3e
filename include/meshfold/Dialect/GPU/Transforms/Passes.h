//===- Passes.h - meshfold's GPU passes -------------------------*- C++ -*-===//

#ifndef MESHFOLD_DIALECT_GPU_TRANSFORMS_PASSES_H
#define MESHFOLD_DIALECT_GPU_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace meshfold {

#define GEN_PASS_DECL
#include "meshfold/Dialect/GPU/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "meshfold/Dialect/GPU/Transforms/Passes.h.inc"

} // namespace meshfold

#endif // MESHFOLD_DIALECT_GPU_TRANSFORMS_PASSES_H
