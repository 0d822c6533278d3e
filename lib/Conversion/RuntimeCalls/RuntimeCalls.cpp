//===- RuntimeCalls.cpp - helpers for calls into the runtime --------------===//

#include "meshfold/Conversion/RuntimeCalls.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"

#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
using namespace meshfold;

namespace {
/// The type tags of CodegenABI.def, each appending its MLIR type.
namespace tags {
using Types = SmallVectorImpl<Type>;
MemRefType strided(MLIRContext *ctx, Type elt, int64_t rank) {
  return dynamicStrided(SmallVector<int64_t>(rank, ShapedType::kDynamic), elt);
}
struct Void {
  static void add(MLIRContext *, Types &) {}
};
struct I64 {
  static void add(MLIRContext *ctx, Types &t) {
    t.push_back(IntegerType::get(ctx, 64));
  }
};
struct Ptr {
  static void add(MLIRContext *ctx, Types &t) {
    t.push_back(LLVM::LLVMPointerType::get(ctx));
  }
};
struct UnrankedF32 {
  static void add(MLIRContext *ctx, Types &t) {
    t.push_back(UnrankedMemRefType::get(Float32Type::get(ctx), 0));
  }
};
struct UnrankedI64 {
  static void add(MLIRContext *ctx, Types &t) {
    t.push_back(UnrankedMemRefType::get(IntegerType::get(ctx, 64), 0));
  }
};
struct UnrankedBF16 {
  static void add(MLIRContext *ctx, Types &t) {
    t.push_back(UnrankedMemRefType::get(BFloat16Type::get(ctx), 0));
  }
};
template <int Rank> struct StridedF32 {
  static void add(MLIRContext *ctx, Types &t) {
    t.push_back(strided(ctx, Float32Type::get(ctx), Rank));
  }
};
using StridedF32R1 = StridedF32<1>;
using StridedF32R2 = StridedF32<2>;
using StridedF32R3 = StridedF32<3>;
template <int Rank> struct StridedI64 {
  static void add(MLIRContext *ctx, Types &t) {
    t.push_back(strided(ctx, IntegerType::get(ctx, 64), Rank));
  }
};
using StridedI64R1 = StridedI64<1>;
using StridedI64R2 = StridedI64<2>;

/// A signature of CodegenABI.def (a function type over the tags) as an MLIR
/// function type.
template <typename Sig> struct Signature;
template <typename R, typename... A> struct Signature<R(A...)> {
  static FunctionType get(MLIRContext *ctx) {
    SmallVector<Type> args, results;
    (A::add(ctx, args), ...);
    R::add(ctx, results);
    return FunctionType::get(ctx, args, results);
  }
};
} // namespace tags
} // namespace

/// One row per entry point of CodegenABI.def, in RuntimeFn order.
struct RuntimeFnInfo {
  const char *name;
  bool llvm;
  FunctionType (*type)(MLIRContext *);
};

static const RuntimeFnInfo &info(RuntimeFn fn) {
  using namespace tags;
  static const RuntimeFnInfo table[] = {
#define MFRT_CODEGEN_MEMREF(Name, Sig) {#Name, false, &Signature<Sig>::get},
#define MFRT_CODEGEN_LLVM(Name, Sig) {#Name, true, &Signature<Sig>::get},
#include "mfrt/CodegenABI.def"
  };
  return table[static_cast<size_t>(fn)];
}

StringRef meshfold::getRuntimeFnName(RuntimeFn fn) { return info(fn).name; }

FunctionType meshfold::getRuntimeFnType(MLIRContext *ctx, RuntimeFn fn) {
  return info(fn).type(ctx);
}

bool meshfold::isLLVMRuntimeFn(RuntimeFn fn) { return info(fn).llvm; }

std::optional<RuntimeFn> meshfold::lookupRuntimeFn(StringRef name) {
  return llvm::StringSwitch<std::optional<RuntimeFn>>(name)
#define MFRT_CODEGEN_MEMREF(Name, Signature) .Case(#Name, RuntimeFn::Name)
#define MFRT_CODEGEN_LLVM(Name, Signature) .Case(#Name, RuntimeFn::Name)
#include "mfrt/CodegenABI.def"
      .Default(std::nullopt);
}

MemRefType meshfold::dynamicStrided(ArrayRef<int64_t> shape, Type elt) {
  SmallVector<int64_t> strides(shape.size(), ShapedType::kDynamic);
  return MemRefType::get(
      shape, elt,
      StridedLayoutAttr::get(elt.getContext(), ShapedType::kDynamic, strides));
}

func::FuncOp meshfold::declareRuntimeFunction(ModuleOp module, RuntimeFn fn) {
  assert(!isLLVMRuntimeFn(fn) && "an llvm.func entry point");
  StringRef name = getRuntimeFnName(fn);
  if (auto existing = module.lookupSymbol<func::FuncOp>(name))
    return existing;
  OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
  auto decl = func::FuncOp::create(b, module.getLoc(), name,
                                   getRuntimeFnType(module.getContext(), fn));
  decl.setPrivate();
  decl->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(), b.getUnitAttr());
  return decl;
}
