//===- RuntimeCalls.h - helpers for calls into the runtime ------*- C++ -*-===//
//
// The runtime entry points generated code may call are those of
// mfrt/CodegenABI.def, the one declaration the runtime's definitions are
// checked against: the conversions name them by RuntimeFn and take their
// types from there.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_CONVERSION_RUNTIMECALLS_H
#define MESHFOLD_CONVERSION_RUNTIMECALLS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"

#include <optional>

namespace meshfold {

/// Every runtime entry point of mfrt/CodegenABI.def.
enum class RuntimeFn {
#define MFRT_CODEGEN_MEMREF(Name, Signature) Name,
#define MFRT_CODEGEN_LLVM(Name, Signature) Name,
#include "mfrt/CodegenABI.def"
};

/// The entry point's name (without the _mlir_ciface_ prefix of the C
/// interface).
llvm::StringRef getRuntimeFnName(RuntimeFn fn);

/// The entry point's signature: memref and integer types for a function of
/// the memref C interface, LLVM types (i64, !llvm.ptr) for an llvm.func.
mlir::FunctionType getRuntimeFnType(mlir::MLIRContext *ctx, RuntimeFn fn);

/// Whether generated code calls it as an llvm.func (else as a func.func with
/// the C interface).
bool isLLVMRuntimeFn(RuntimeFn fn);

/// The entry point named `name`, if CodegenABI.def declares one.
std::optional<RuntimeFn> lookupRuntimeFn(llvm::StringRef name);

/// A memref type with the given shape and a fully dynamic strided layout, so
/// that any buffer bufferization picks can be passed without a copy.
mlir::MemRefType dynamicStrided(llvm::ArrayRef<int64_t> shape, mlir::Type elt);

/// Declares entry point `fn` (a func.func with the C interface) in `module`,
/// once, with its signature from CodegenABI.def.
mlir::func::FuncOp declareRuntimeFunction(mlir::ModuleOp module, RuntimeFn fn);

/// Name of the module attribute listing the groups the program uses, by id:
/// strings "mesh:axis,axis".
inline llvm::StringRef getRuntimeGroupsAttrName() { return "mf.groups"; }

} // namespace meshfold

#endif // MESHFOLD_CONVERSION_RUNTIMECALLS_H
