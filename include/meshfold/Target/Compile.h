//===- Compile.h - from LLVM dialect to an executable -----------*- C++ -*-===//

#ifndef MESHFOLD_TARGET_COMPILE_H
#define MESHFOLD_TARGET_COMPILE_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>

namespace llvm {
class TargetMachine;
} // namespace llvm

namespace meshfold {

struct CodegenOptions {
  /// LLVM optimisation level 0-3.
  unsigned optLevel = 2;
  /// Target CPU for the host code, an LLVM CPU name (see resolveHostTarget).
  std::string cpu = "x86-64";
  /// Its features, "+avx2,+fma,..." (empty: the CPU's own).
  std::string features;
};

/// The CPU a program is compiled for.
struct HostTarget {
  std::string cpu;
  std::string features;
  /// Width of its vector registers: 512 with AVX-512, 256 with AVX, else
  /// 128.
  int64_t vectorBits = 128;
  /// Whether it has AVX-512's bf16 dot product (AVX512_BF16, vdpbf16ps).
  bool bf16Dot = false;
};

/// The LLVM target machine of the host code (the default triple, `options`'
/// CPU, features and optimisation level); null with `error` set on failure.
std::unique_ptr<llvm::TargetMachine>
createHostTargetMachine(const CodegenOptions &options, std::string &error);

/// Resolves `cpu`, "native" (this machine's CPU and every feature it has)
/// or a CPU name of the default target triple ("x86-64-v3", "znver4").
/// Fails, with `error` naming the CPU, on a name the target does not know.
mlir::FailureOr<HostTarget> resolveHostTarget(llvm::StringRef cpu,
                                              std::string &error);

/// Translates an LLVM-dialect module to LLVM IR, optimises it and writes it as
/// text to `os`. Sets `error` and fails on any problem.
mlir::LogicalResult emitLLVMIR(mlir::ModuleOp module, llvm::raw_ostream &os,
                               const CodegenOptions &options,
                               std::string &error);

/// Translates an LLVM-dialect module to a native object file at `path`.
mlir::LogicalResult emitObjectFile(mlir::ModuleOp module, llvm::StringRef path,
                                   const CodegenOptions &options,
                                   std::string &error);

/// What the executable of the CUDA target links besides libmfrt.a.
struct CUDALinkOptions {
  /// Directory of libcuda.so (the driver, or the toolkit's stub).
  std::string driverLibraryDir;
  /// Directory of libnccl.so; also the executable's run path for it.
  std::string ncclLibraryDir;
  /// --gemm-backend cublaslt: link libmfrt_cublaslt.a and libcublasLt.so
  /// from this directory (also the executable's run path for it).
  bool cublasLt = false;
  std::string cublasLtLibraryDir;
};

/// Links `object` with the runtime library found in `runtimeDir` into the
/// executable `output`. The output appears only when linking succeeded.
mlir::LogicalResult linkExecutable(llvm::StringRef object,
                                   llvm::StringRef output,
                                   llvm::StringRef runtimeDir,
                                   std::string &error);

/// As above for the CUDA target: also links the runtime's mgpu* library
/// (libmfrt_cuda.a, from `runtimeDir`), the CUDA driver and NCCL. Fails
/// naming the file when libmfrt_cuda.a is not there.
mlir::LogicalResult linkCUDAExecutable(llvm::StringRef object,
                                       llvm::StringRef output,
                                       llvm::StringRef runtimeDir,
                                       const CUDALinkOptions &cuda,
                                       std::string &error);

} // namespace meshfold

#endif // MESHFOLD_TARGET_COMPILE_H
