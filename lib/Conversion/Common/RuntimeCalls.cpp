//===- RuntimeCalls.cpp - helpers for calls into the runtime --------------===//

#include "meshfold/Conversion/RuntimeCalls.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"

using namespace mlir;

MemRefType meshfold::dynamicStrided(ArrayRef<int64_t> shape, Type elt) {
  SmallVector<int64_t> strides(shape.size(), ShapedType::kDynamic);
  return MemRefType::get(
      shape, elt,
      StridedLayoutAttr::get(elt.getContext(), ShapedType::kDynamic, strides));
}

func::FuncOp meshfold::declareRuntimeFunction(ModuleOp module, StringRef name,
                                              FunctionType type) {
  if (auto fn = module.lookupSymbol<func::FuncOp>(name))
    return fn;
  OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
  auto fn = func::FuncOp::create(b, module.getLoc(), name, type);
  fn.setPrivate();
  fn->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(), b.getUnitAttr());
  return fn;
}
