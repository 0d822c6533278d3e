//===- MemoryReport.h - per-rank memory of a program ------------*- C++ -*-===//

#ifndef MESHFOLD_ANALYSIS_MEMORYREPORT_H
#define MESHFOLD_ANALYSIS_MEMORYREPORT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
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
  /// The elements of one cached row of the rank: its KV heads' K and V (one
  /// tensor where they are one) in every layer of its stage.
  int64_t kvRowElements = 0;
  /// The most bytes of activations alive at once for that prompt (f32, as
  /// the program computes; buffers freed after their last use), see
  /// estimateActivationPeak.
  int64_t activationBytes = 0;
  /// Shared experts and dense MLPs (moe.mlp): the bytes of their weights
  /// the rank holds (each whole, part of weightBytes), how many such layers
  /// its stage runs, and the TP group they could be split over instead. Split
  /// like the attention linears they would take 1/TP of the bytes and add,
  /// per layer, an all-gather and a reduce-scatter of the CP rank's rows
  /// over TP: `sharedSplitBytesPerLayer` sent by each rank.
  int64_t sharedBytes = 0, sharedLayers = 0, sharedTP = 1,
          sharedSplitBytesPerLayer = 0;
  /// Of weightBytes, the experts' replicas an expert placement adds
  /// (mf-place-experts: the slots over n_experts / EP on the rank).
  int64_t replicaBytes = 0;
  int64_t totalBytes() const { return weightBytes + kvBytes + activationBytes; }
};

/// The peak of the activations of `fn` (a rank's function of moe and mf ops)
/// on a prompt whose rank holds `tokens` tokens: op by op in program order,
/// the tensors defined and still to be used (a reshape shares its source's
/// buffer, weights are not activations), plus the temporaries the op's own
/// lowering allocates (the router's logits, the experts' grouped rows and
/// hidden states; attention's tiles are negligible). A dynamic dim is the
/// rank's token count, `tokens` x top-k for the rows EP dispatch delivers
/// (uniform routing).
int64_t estimateActivationPeak(mlir::func::FuncOp fn, int64_t tokens);

/// The memory of every rank of a partitioned module (one rank when it has no
/// plan): the weight slices its stage's function reads, K/V for the tokens
/// it holds of a `maxPrompt`-token prompt (padding included) and of the
/// `maxNewTokens - 1` generated tokens whose K/V decoding keeps (dealt
/// round-robin over CP), at `bytesPerElement` per element, and the
/// activation peak for that prompt.
mlir::FailureOr<std::vector<RankMemory>>
computeMemoryReport(mlir::ModuleOp module, int64_t maxPrompt,
                    int64_t bytesPerElement, llvm::StringRef entry = "prefill",
                    int64_t maxNewTokens = 0);

/// Prints `memory` as the table of `meshfold-compile --report memory`: a
/// heading naming `dtype` (the element type the bytes assume) and
/// `maxPrompt`, then one line per rank with its stage, weight, KV-cache and
/// activation bytes and their total in GB; where ranks hold shared experts
/// (or dense MLPs) and TP > 1, a line weighing the two placements of them.
/// Two pools (meshfold-compile
/// --decode-plan): the ranks from `decodeBase` on are the decode pool's,
/// and a column names each rank's pool (0: one pool, no column).
void printMemoryReport(llvm::raw_ostream &os, llvm::ArrayRef<RankMemory> memory,
                       llvm::StringRef dtype, int64_t maxPrompt,
                       int64_t maxNewTokens = 0, int64_t decodeBase = 0);

/// Prints the KV budget on a device of `deviceBytes` (`deviceMemory` as the
/// user wrote it): on the rank with the least room, the bytes left after
/// its weights and activations, and how many prompt tokens' KV cache they
/// hold at that rank's bytes per token (its KV cache for `maxPrompt`
/// tokens, per token); then what those bytes give the program's paged K/V
/// cache (f32 blocks of `kvBlock` of the rank's rows): its blocks, and the
/// --kv-memory that sets them. Nothing when no rank keeps a KV cache or one
/// does not fit.
void printKVBudget(llvm::raw_ostream &os, llvm::ArrayRef<RankMemory> memory,
                   int64_t deviceBytes, llvm::StringRef deviceMemory,
                   int64_t maxPrompt, int64_t kvBlock = 16);

/// Succeeds when every rank of `memory` fits in `deviceBytes` (no limit when
/// it is not positive). Otherwise fails with `error` naming the rank that
/// needs the most (the first of them) and `deviceMemory`, the limit as the
/// user wrote it.
mlir::LogicalResult checkDeviceMemory(llvm::ArrayRef<RankMemory> memory,
                                      int64_t deviceBytes,
                                      llvm::StringRef deviceMemory,
                                      std::string &error);

} // namespace meshfold

#endif // MESHFOLD_ANALYSIS_MEMORYREPORT_H
