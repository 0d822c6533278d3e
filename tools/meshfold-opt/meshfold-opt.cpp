//===- meshfold-opt.cpp - mlir-opt with meshfold's dialects and passes ----===//

#include "meshfold/InitAll.h"
#include "meshfold/Version.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  meshfold::setVersionPrinter();
  mlir::registerAllPasses();
  meshfold::registerMeshfoldPasses();

  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  // gpu-module-to-binary translates the kernels to LLVM IR.
  mlir::registerAllToLLVMIRTranslations(registry);
  meshfold::registerMeshfoldDialects(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "meshfold optimizer driver\n", registry));
}
