//===- MoEDialect.cpp - MoE dialect ---------------------------------------===//

#include "meshfold/Dialect/MoE/IR/MoE.h"

using namespace mlir;
using namespace meshfold::moe;

#include "meshfold/Dialect/MoE/IR/MoEOpsDialect.cpp.inc"

void MoEDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "meshfold/Dialect/MoE/IR/MoEOps.cpp.inc"
      >();
}
