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
/// The prefix of the decode pool's symbols in a program of two pools
/// (meshfold-compile --decode-plan): its manifest is
/// `__mf_pool1___mf_manifest`, its step `__mf_pool1__mlir_ciface_decode`.
inline constexpr const char *kPoolSymbolPrefix = "__mf_pool1_";
} // namespace meshfold

#endif // MESHFOLD_CONVERSION_MOETORUNTIME_MOETORUNTIME_H
