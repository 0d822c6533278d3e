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

namespace meshfold::mf {
/// The splits of a weight: its `mf.shard`, one #mf.shard or an array of them
/// along distinct dims (empty when it has none).
llvm::SmallVector<ShardAttr> getShards(mlir::Operation *op);
/// Adds a split to `op`'s `mf.shard`.
void addShard(mlir::Operation *op, ShardAttr shard);
} // namespace meshfold::mf

#endif // MESHFOLD_DIALECT_MF_IR_MF_H
