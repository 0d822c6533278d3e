//===- MemoryReport.h - per-rank memory of a program ------------*- C++ -*-===//

#ifndef MESHFOLD_ANALYSIS_MEMORYREPORT_H
#define MESHFOLD_ANALYSIS_MEMORYREPORT_H

#include "mlir/IR/BuiltinOps.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"

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

/// Prints `memory` as the table of `meshfold-compile --report memory`: a
/// heading naming `dtype` (the element type the bytes assume) and
/// `maxPrompt`, then one line per rank with its stage, weight and KV-cache
/// bytes and their total in GB.
void printMemoryReport(llvm::raw_ostream &os, llvm::ArrayRef<RankMemory> memory,
                       llvm::StringRef dtype, int64_t maxPrompt);

/// Succeeds when every rank of `memory` fits in `deviceBytes` (no limit when
/// it is not positive). Otherwise fails with `error` naming the rank that
/// needs the most (the first of them) and `deviceMemory`, the limit as the
/// user wrote it.
mlir::LogicalResult checkDeviceMemory(llvm::ArrayRef<RankMemory> memory,
                                      int64_t deviceBytes,
                                      llvm::StringRef deviceMemory,
                                      std::string &error);

/// Parses "141GB", "80GiB", "512MB" or a byte count; -1 on bad input.
int64_t parseByteSize(llvm::StringRef text);

} // namespace meshfold

#endif // MESHFOLD_ANALYSIS_MEMORYREPORT_H
