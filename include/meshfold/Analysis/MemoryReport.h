//===- MemoryReport.h - per-rank memory of a program ------------*- C++ -*-===//

#ifndef MESHFOLD_ANALYSIS_MEMORYREPORT_H
#define MESHFOLD_ANALYSIS_MEMORYREPORT_H

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace meshfold {

struct RankMemory {
  int64_t rank = 0, stage = 0;
  /// Bytes of the weights the rank holds (its slices) and of its KV cache
  /// for one prompt of the given length.
  int64_t weightBytes = 0, kvBytes = 0;
};

/// The memory of every rank of a partitioned module (one rank when it has no
/// plan): the weight slices its stage's function reads, and K/V for the
/// tokens it holds of a `maxPrompt`-token prompt (padding included), at
/// `bytesPerElement` per element.
mlir::FailureOr<std::vector<RankMemory>>
computeMemoryReport(mlir::ModuleOp module, int64_t maxPrompt,
                    int64_t bytesPerElement, llvm::StringRef entry = "prefill");

/// Parses "141GB", "80GiB", "512MB" or a byte count; -1 on bad input.
int64_t parseByteSize(llvm::StringRef text);

} // namespace meshfold

#endif // MESHFOLD_ANALYSIS_MEMORYREPORT_H
