//===- MFToRuntime.h - mf queries and collectives to mfrt calls -*- C++ -*-===//

#ifndef MESHFOLD_CONVERSION_MFTORUNTIME_MFTORUNTIME_H
#define MESHFOLD_CONVERSION_MFTORUNTIME_MFTORUNTIME_H

#include "mlir/Support/LogicalResult.h"

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace meshfold {
class MeshLayout;

/// Lowers every mf query and collective of `module` to calls of the
/// runtime's entry points (mfrt/CodegenABI.def) for the ranks of `layout`:
/// each collective names its group by an id, one per mesh and axes list,
/// listed in order in the module's `mf.groups` attribute for the runtime.
/// Fails, with a diagnostic at the op, on an op it cannot lower.
mlir::LogicalResult convertMFToRuntime(mlir::ModuleOp module,
                                       const MeshLayout &layout);
} // namespace meshfold

#endif // MESHFOLD_CONVERSION_MFTORUNTIME_MFTORUNTIME_H
