//===- Pipelines.h - meshfold pass pipelines --------------------*- C++ -*-===//
//
// Pipelines live in this library, as build...Pipeline functions, so that the
// compile driver stays thin and every pipeline can be run from meshfold-opt.
// The partition pipeline and the two target pipelines each have a header of
// their own; the target pipelines build on Common.h and never call each
// other.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_PIPELINES_PIPELINES_H
#define MESHFOLD_PIPELINES_PIPELINES_H

#include "meshfold/Pipelines/CPUPipeline.h"
#include "meshfold/Pipelines/CUDAPipeline.h"
#include "meshfold/Pipelines/PartitionPipeline.h"

namespace meshfold {
/// Registers every pipeline with the pass registry (for meshfold-opt).
inline void registerMeshfoldPipelines() {
  registerPartitionPipeline();
  registerLowerToCPUPipeline();
  registerLowerToCUDAPipeline();
}
} // namespace meshfold

#endif // MESHFOLD_PIPELINES_PIPELINES_H
