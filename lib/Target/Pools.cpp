//===- Pools.cpp - two pools in one executable ----------------------------===//

#include "meshfold/Target/Pools.h"
#include "meshfold/Conversion/MoEToRuntime/MoEToRuntime.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/SymbolTable.h"

using namespace mlir;

void meshfold::mergePool(ModuleOp module, ModuleOp pool) {
  SymbolTable symbols(module);
  SmallVector<Operation *> ops;
  for (Operation &op : *pool.getBody())
    ops.push_back(&op);
  MLIRContext *ctx = module.getContext();
  // A symbol the program defines elsewhere (the runtime's entry points).
  auto isDeclaration = [](Operation *op) {
    if (auto fn = dyn_cast<LLVM::LLVMFuncOp>(op))
      return fn.isExternal();
    if (auto global = dyn_cast<LLVM::GlobalOp>(op))
      return global.getInitializerRegion().empty() && !global.getValue();
    auto symbol = dyn_cast<SymbolOpInterface>(op);
    return symbol && symbol.isDeclaration();
  };
  for (Operation *op : ops) {
    auto symbol = dyn_cast<SymbolOpInterface>(op);
    if (!symbol || isDeclaration(op))
      continue;
    auto name = StringAttr::get(
        ctx, (Twine(kPoolSymbolPrefix) + symbol.getName()).str());
    (void)SymbolTable::replaceAllSymbolUses(op, name, pool);
    SymbolTable::setSymbolName(op, name);
  }
  for (Operation *op : ops) {
    auto symbol = dyn_cast<SymbolOpInterface>(op);
    if (symbol && isDeclaration(op) && symbols.lookup(symbol.getName())) {
      op->erase();
      continue;
    }
    op->moveBefore(module.getBody(), module.getBody()->end());
  }
}
