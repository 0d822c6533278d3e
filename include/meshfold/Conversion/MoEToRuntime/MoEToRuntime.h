//===- MoEToRuntime.h - moe weights/outputs to mfrt calls -------*- C++ -*-===//

#ifndef MESHFOLD_CONVERSION_MOETORUNTIME_MOETORUNTIME_H
#define MESHFOLD_CONVERSION_MOETORUNTIME_MOETORUNTIME_H

#include <string>

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace meshfold {
/// The manifest's symbol name in the emitted program; the runtime reads it.
inline constexpr const char *kManifestSymbol = "__mf_manifest";
} // namespace meshfold

#endif // MESHFOLD_CONVERSION_MOETORUNTIME_MOETORUNTIME_H
