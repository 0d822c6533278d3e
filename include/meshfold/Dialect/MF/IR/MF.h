//===- MF.h - mf dialect ----------------------------------------*- C++ -*-===//

#ifndef MESHFOLD_DIALECT_MF_IR_MF_H
#define MESHFOLD_DIALECT_MF_IR_MF_H

#include "meshfold/Support/MeshLayout.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "mlir/Interfaces/InferTypeOpInterface.h"

#include "meshfold/Dialect/MF/IR/MFOpsDialect.h.inc"

#include "meshfold/Dialect/MF/IR/MFEnums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "meshfold/Dialect/MF/IR/MFOpsTypes.h.inc"

#define GET_ATTRDEF_CLASSES
#include "meshfold/Dialect/MF/IR/MFAttrs.h.inc"

#define GET_OP_CLASSES
#include "meshfold/Dialect/MF/IR/MFOps.h.inc"

#endif // MESHFOLD_DIALECT_MF_IR_MF_H
