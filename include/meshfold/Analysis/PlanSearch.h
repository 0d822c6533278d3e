//===- PlanSearch.h - the fastest plans that fit ----------------*- C++ -*-===//
//
// `meshfold-compile --suggest-plan`: every plan of a number of GPUs (axis
// sizes of both meshes and both axis orders) that passes the plan rules for
// a model and fits the device memory, ranked by a model of its time per
// layer: compute at a stated FLOP/s plus the analytic traffic of each link
// class at its bandwidth (TrafficModel), with no overlap.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_ANALYSIS_PLANSEARCH_H
#define MESHFOLD_ANALYSIS_PLANSEARCH_H

#include "meshfold/Analysis/MemoryReport.h"
#include "meshfold/Support/TrafficModel.h"

#include "meshfold/Dialect/MoE/IR/MoE.h"

#include <functional>

namespace meshfold {

struct PlanSearchOptions {
  int64_t gpus = 32, gpusPerNode = 8;
  double nvlinkGBps = 450, ibGBps = 50;
  /// Prompt tokens per DP replica.
  int64_t maxPrompt = 4096;
  /// Device memory (<= 0: no limit), as the user wrote it, and the size of
  /// an element.
  int64_t deviceBytes = -1, bytesPerElement = 2;
  std::string deviceMemory;
  /// Dense FLOP/s of one GPU.
  double flops = 989e12;
  /// Sizes the search keeps fixed (0: any), e.g. the seed's TP2 x CP2 x DP4
  /// x PP2 to rank only its orders and expert folds.
  PlanFlags fixed{0, 0, 0, 0, 0, 0, 0, "", "", 8};
  bool hierarchical = true;
  /// How many plans to return.
  int64_t top = 5;
};

/// A ranked plan.
struct PlanCandidate {
  PlanFlags flags;
  /// The expert axes in the order the plan places them.
  std::string expertAxes;
  std::vector<TrafficRow> rows;
  /// Per GPU per layer for a prompt of maxPrompt tokens in every replica.
  double computeSeconds = 0, nvlinkSeconds = 0, ibSeconds = 0;
  /// The layer's time (compute + traffic) over the DP replicas that work in
  /// parallel: the cluster's seconds per layer per prompt, the ranking key.
  double perPrompt = 0;
  /// The rank that needs the most memory.
  RankMemory memory;
};

/// FLOPs per GPU per layer of `flags` for `tokens` prompt tokens per DP
/// replica (causal attention, uniform routing).
double layerFlops(const moe::ModelInfo &model, const PlanFlags &flags,
                  double tokens);

/// Searches the plans of `options.gpus` GPUs for `model`: returns the best
/// `options.top` that fit, fastest first. `exactMemory` gives the memory
/// of a plan's worst rank, given its flags (the partitioned program's memory
/// report); plans whose weights and KV cache alone cannot fit are dropped
/// before it is asked. Fails (with `error`) when no plan fits.
mlir::FailureOr<std::vector<PlanCandidate>>
searchPlans(const moe::ModelInfo &model, const PlanSearchOptions &options,
            const std::function<mlir::FailureOr<RankMemory>(const PlanFlags &)>
                &exactMemory,
            std::string &error);

/// Prints the table of `--suggest-plan`, with the reason each plan beats
/// the next.
void printPlanSuggestions(llvm::raw_ostream &os,
                          const std::vector<PlanCandidate> &plans,
                          const PlanSearchOptions &options);

} // namespace meshfold

#endif // MESHFOLD_ANALYSIS_PLANSEARCH_H
