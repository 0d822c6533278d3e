//===- ExplainOrder.h - axis orders ranked by their traffic -----*- C++ -*-===//
//
// The model side of the traffic model: its input read off a moe module, and
// the table that ranks every order of a plan's attention axes by the
// analytic per-layer traffic of the resulting plan.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_ANALYSIS_EXPLAINORDER_H
#define MESHFOLD_ANALYSIS_EXPLAINORDER_H

#include "meshfold/Dialect/MoE/IR/MoE.h"
#include "meshfold/Support/TrafficModel.h"

#include "mlir/IR/BuiltinOps.h"

#include "llvm/Support/raw_ostream.h"

namespace meshfold {

/// The traffic model's input for the model `info` describes, with
/// hierarchical or flat dispatch (the head's collectives not counted: no
/// request count).
TrafficModelInput trafficModelInput(const moe::ModelInfo &info,
                                    bool hierarchical);

/// The traffic model's input for the model of `module` (its global
/// dimensions), with hierarchical or flat dispatch. Fails when `module` holds
/// no model (no layers), or when its ops disagree (with a diagnostic).
mlir::FailureOr<TrafficModelInput> getTrafficModelInput(mlir::ModuleOp module,
                                                        bool hierarchical);

/// Prints what `meshfold-compile --explain-order` shows: every admissible
/// order of the axes of sizes `tp`, `cp`, `dp`, `pp` on nodes of
/// `gpusPerNode` GPUs, best first, with its per-GPU per-layer traffic for
/// `tokens` prompt tokens per DP replica under uniform routing (NVLink, IB
/// and EP's share of IB, in units of T*d elements) and its time in bf16,
/// without overlap.
void printOrderExplanation(llvm::raw_ostream &os, const PlanFlags &flags,
                           const TrafficModelInput &model, double tokens);

} // namespace meshfold

#endif // MESHFOLD_ANALYSIS_EXPLAINORDER_H
