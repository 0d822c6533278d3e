//===- InitAll.h - register meshfold dialects and passes --------*- C++ -*-===//

#ifndef MESHFOLD_INITALL_H
#define MESHFOLD_INITALL_H

#include "meshfold/Conversion/Passes.h"
#include "meshfold/Dialect/GPU/Transforms/Passes.h"
#include "meshfold/Dialect/Linalg/Transforms/Passes.h"
#include "meshfold/Dialect/MF/IR/MF.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"
#include "meshfold/Dialect/MoE/IR/MoE.h"
#include "meshfold/Pipelines/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"

namespace meshfold {
/// Adds the moe and mf dialects to `registry`.
inline void registerMeshfoldDialects(mlir::DialectRegistry &registry) {
  registry.insert<moe::MoEDialect, mf::MFDialect>();
}

/// Registers every meshfold pass and pipeline with the global registry.
inline void registerMeshfoldPasses() {
  mf::registerMFPasses();
  registerMeshfoldConversionPasses();
  registerMeshfoldGPUPasses();
  registerMeshfoldLinalgPasses();
  registerMeshfoldPipelines();
}
} // namespace meshfold

#endif // MESHFOLD_INITALL_H
