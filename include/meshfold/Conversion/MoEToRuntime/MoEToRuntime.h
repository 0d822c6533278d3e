//===- MoEToRuntime.h - moe weights/outputs to mfrt calls -------*- C++ -*-===//

#ifndef MESHFOLD_CONVERSION_MOETORUNTIME_MOETORUNTIME_H
#define MESHFOLD_CONVERSION_MOETORUNTIME_MOETORUNTIME_H

// The program's symbol names, meshfold::kManifestSymbol (the manifest the
// runtime reads) and meshfold::kPoolSymbolPrefix (the decode pool's symbols
// in a program of two pools), are the runtime's.
#include "mfrt/ProgramSymbols.h"

#include <string>

namespace mlir {
class ModuleOp;
} // namespace mlir

#endif // MESHFOLD_CONVERSION_MOETORUNTIME_MOETORUNTIME_H
