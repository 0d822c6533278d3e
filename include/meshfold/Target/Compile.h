//===- Compile.h - from LLVM dialect to an executable -----------*- C++ -*-===//

#ifndef MESHFOLD_TARGET_COMPILE_H
#define MESHFOLD_TARGET_COMPILE_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace meshfold {

struct CodegenOptions {
  /// LLVM optimisation level 0-3.
  unsigned optLevel = 2;
  /// Target CPU for the host code ("native" for this machine's).
  std::string cpu = "x86-64";
};

/// Translates an LLVM-dialect module to LLVM IR, optimises it and writes it as
/// text to `os`. Sets `error` and fails on any problem.
mlir::LogicalResult emitLLVMIR(mlir::ModuleOp module, llvm::raw_ostream &os,
                               const CodegenOptions &options,
                               std::string &error);

/// Translates an LLVM-dialect module to a native object file at `path`.
mlir::LogicalResult emitObjectFile(mlir::ModuleOp module, llvm::StringRef path,
                                   const CodegenOptions &options,
                                   std::string &error);

/// Links `object` with the runtime library found in `runtimeDir` into the
/// executable `output`. The output appears only when linking succeeded.
mlir::LogicalResult linkExecutable(llvm::StringRef object,
                                   llvm::StringRef output,
                                   llvm::StringRef runtimeDir,
                                   std::string &error);

} // namespace meshfold

#endif // MESHFOLD_TARGET_COMPILE_H
