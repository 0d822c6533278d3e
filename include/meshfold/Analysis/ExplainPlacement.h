//===- ExplainPlacement.h - routing files and expert placements -*- C++ -*-===//
//
// The compiler's side of expert placement: a run's routing file
// (--routing-json, docs/design.md §10) read and checked against the model,
// and what `meshfold-compile --explain-placement` prints: each placed
// layer's experts per EP rank, and the modeled rows per rank (max/mean)
// before and after.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_ANALYSIS_EXPLAINPLACEMENT_H
#define MESHFOLD_ANALYSIS_EXPLAINPLACEMENT_H

#include "meshfold/Dialect/MoE/IR/MoE.h"

#include "mlir/IR/BuiltinOps.h"

#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>
#include <vector>

namespace meshfold {

/// A routing file: per layer with experts (0-based model layer), the rows
/// routed to each expert.
struct RoutingFile {
  std::map<int64_t, std::vector<double>> rows;
};

/// Reads the routing file at `path` and checks it is one of the model
/// `info` describes (format, version, layers, experts, top_k, hidden size,
/// one count per expert); on failure `error` is one sentence naming the
/// file and the field.
bool readRoutingFile(llvm::StringRef path, const moe::ModelInfo &info,
                     RoutingFile &out, std::string &error);

/// The input of a placement of `module`'s experts (of the model `info`
/// describes) on `ep` EP ranks with `redundant` replicas, from the routing
/// file at `path`: checks the rule (placementRule), reads the file
/// (readRoutingFile) into `out` and checks it has rows of every layer with
/// experts. Returns "" or the error as one sentence, as mf-place-experts and
/// meshfold-compile both report it.
std::string readPlacementInput(mlir::ModuleOp module,
                               const moe::ModelInfo &info, int64_t ep,
                               int64_t redundant, llvm::StringRef path,
                               RoutingFile &out);

/// Prints each placed layer of the partitioned `module` (its
/// mf.placements): the experts of each EP rank, and the rows per EP rank
/// that `routing` gives under the contiguous placement and under this one
/// (max, mean, max/mean), with the modeled EP time per layer as the
/// largest rank's rows over the mean; then the weight bytes the replicas
/// add per EP rank (its expert weights at `elementBytes` bytes each).
void printPlacementExplanation(llvm::raw_ostream &os, mlir::ModuleOp module,
                               const RoutingFile &routing,
                               int64_t elementBytes);

} // namespace meshfold

#endif // MESHFOLD_ANALYSIS_EXPLAINPLACEMENT_H
