//===- Pools.h - two pools in one executable --------------------*- C++ -*-===//
//
// A program of two pools (meshfold-compile --decode-plan): the prefill pool's
// module and the decode pool's, each partitioned for its own plan and
// lowered, become one module before the object is emitted.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_TARGET_POOLS_H
#define MESHFOLD_TARGET_POOLS_H

#include "mlir/IR/BuiltinOps.h"

namespace meshfold {

/// Moves the lowered decode pool's module `pool` into `module` (the prefill
/// pool's, lowered too): each of its definitions renamed with
/// kPoolSymbolPrefix (the runtime finds the pool's manifest and step by
/// these names), each declaration kept once. `pool` is left empty.
void mergePool(mlir::ModuleOp module, mlir::ModuleOp pool);

} // namespace meshfold

#endif // MESHFOLD_TARGET_POOLS_H
