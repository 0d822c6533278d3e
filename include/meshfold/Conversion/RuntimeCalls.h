//===- RuntimeCalls.h - helpers for calls into the runtime ------*- C++ -*-===//

#ifndef MESHFOLD_CONVERSION_RUNTIMECALLS_H
#define MESHFOLD_CONVERSION_RUNTIMECALLS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"

namespace meshfold {

/// A memref type with the given shape and a fully dynamic strided layout, so
/// that any buffer bufferization picks can be passed without a copy.
mlir::MemRefType dynamicStrided(llvm::ArrayRef<int64_t> shape, mlir::Type elt);

/// Declares `name` as an external function with the C interface, once.
mlir::func::FuncOp declareRuntimeFunction(mlir::ModuleOp module,
                                          llvm::StringRef name,
                                          mlir::FunctionType type);

/// Name of the module attribute listing the groups the program uses, by id:
/// strings "mesh:axis,axis".
inline llvm::StringRef getRuntimeGroupsAttrName() { return "mf.groups"; }

} // namespace meshfold

#endif // MESHFOLD_CONVERSION_RUNTIMECALLS_H
