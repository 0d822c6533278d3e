//===- CodegenABI.h - The runtime's side of CodegenABI.def ------*- C++ -*-===//
//
// Declares, from CodegenABI.def, every function generated code calls, with C
// linkage and the C types of the memref calling convention. The files that
// define them include this header, so a definition whose signature differs
// from the declaration is a compile error.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_CODEGENABI_H
#define MFRT_CODEGENABI_H

#include "mlir/ExecutionEngine/CRunnerUtils.h"

#include <cstdint>

namespace mfrt::abi {
using Void = void;
using I64 = int64_t;
using Ptr = void *;
using UnrankedF32 = UnrankedMemRefType<float> *;
using UnrankedI64 = UnrankedMemRefType<int64_t> *;
using UnrankedBF16 = UnrankedMemRefType<uint16_t> *;
using StridedF32R1 = StridedMemRefType<float, 1> *;
using StridedF32R2 = StridedMemRefType<float, 2> *;
using StridedF32R3 = StridedMemRefType<float, 3> *;
using StridedI64R1 = StridedMemRefType<int64_t, 1> *;
using StridedI64R2 = StridedMemRefType<int64_t, 2> *;

#define MFRT_CODEGEN_MEMREF(Name, Signature) using Name##_type = Signature;
#define MFRT_CODEGEN_LLVM(Name, Signature) using Name##_type = Signature;
#include "mfrt/CodegenABI.def"
} // namespace mfrt::abi

extern "C" {
#define MFRT_CODEGEN_MEMREF(Name, Signature)                                   \
  mfrt::abi::Name##_type _mlir_ciface_##Name;
#define MFRT_CODEGEN_LLVM(Name, Signature) mfrt::abi::Name##_type Name;
#include "mfrt/CodegenABI.def"
}

#endif // MFRT_CODEGENABI_H
