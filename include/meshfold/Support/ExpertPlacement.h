//===- ExpertPlacement.h - which experts each EP rank holds -----*- C++ -*-===//
//
// A layer's expert placement over an EP group: each of the EP ranks holds
// `slots` experts, slot s of EP coordinate c holding expert
// experts[c * slots + s]. An expert may sit in several slots (on different
// ranks): its replicas, among which the dispatch splits its rows. The
// default placement is the contiguous one (expert e on coordinate
// e / (E / EP), no replicas); `balanceExperts` places a layer from its
// measured rows per expert (docs/design.md §10). Plain C++, shared by the
// compiler (which chooses a placement) and the runtime (which loads the
// slots' weights and routes rows by it); MeshLayout maps EP coordinates to
// ranks.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_SUPPORT_EXPERTPLACEMENT_H
#define MESHFOLD_SUPPORT_EXPERTPLACEMENT_H

#include <cstdint>
#include <string>
#include <vector>

namespace meshfold {

struct ExpertPlacement {
  /// EP ranks, experts of the model, slots per rank.
  int64_t ep = 0, numExperts = 0, slots = 0;
  /// ep * slots expert ids: slot s of EP coordinate c is experts[c * slots +
  /// s].
  std::vector<int64_t> experts;

  /// The placement without replicas, expert e on EP coordinate e / (E / EP)
  /// (slot e % (E / EP)): the one the compiler uses without routing figures.
  static ExpertPlacement contiguous(int64_t numExperts, int64_t ep);
  /// The placement of `numExperts` experts on `ep` ranks that `experts`
  /// lists (ep * slots ids); not checked (see check()).
  static ExpertPlacement fromTable(int64_t numExperts, int64_t ep,
                                   std::vector<int64_t> experts);

  /// The global slots (c * slots + s) that hold `expert`, ascending.
  std::vector<int64_t> replicasOf(int64_t expert) const;
  /// The EP coordinate of global slot `slot`.
  int64_t coordOf(int64_t slot) const { return slot / slots; }
  /// Extra slots over one per expert.
  int64_t redundant() const { return ep * slots - numExperts; }

  /// "" if the placement is well formed: ep, slots positive, every id in
  /// [0, numExperts), every expert in some slot, no expert twice on one
  /// rank; else the rule broken, in a few words.
  std::string check() const;

  /// Rows each EP coordinate computes when expert e receives rows[e] and its
  /// replicas share them evenly.
  std::vector<double> rankRows(const std::vector<double> &rows) const;
};

/// The largest of `rows` over their mean (1 when balanced or all zero).
double maxOverMean(const std::vector<double> &rows);

/// A placement of `rows.size()` experts with `redundant` extra replicas on
/// `ep` ranks that keeps the largest per-rank row count low: the replicas
/// go one at a time to the expert with the most rows per replica, then the
/// experts' replicas, heaviest first, each to the rank with the fewest rows
/// among those with a free slot and without that expert (greedy
/// longest-processing-time). Requires ep | rows.size() + redundant and
/// redundant <= rows.size() * (ep - 1) (an expert at most once per rank):
/// the caller checks (`placementRule`).
///
/// With `nodeOf` (the node of each EP coordinate; empty: one node), each
/// replica goes first to a node with the fewest replicas of its expert, so
/// that an expert's replicas spread evenly over the nodes: where every
/// node holds as many, the dispatch keeps a row on its own node
/// (localReplicas) and the row crosses no IB link.
ExpertPlacement balanceExperts(const std::vector<double> &rows, int64_t ep,
                               int64_t redundant,
                               const std::vector<int64_t> &nodeOf = {});

/// The slots among `slots` (one expert's replicas) that a row from node
/// `node` goes to: those on its node where the expert has the same number
/// of replicas on every node of `nodeOfSlot`'s range (the node of each
/// slot); else all of them. The rows of the expert then still split evenly
/// over its replicas when every node sends an even share.
std::vector<int64_t> localReplicas(const std::vector<int64_t> &slots,
                                   const std::vector<int64_t> &nodeOfSlot,
                                   int64_t node);

/// "" if `numExperts` experts with `redundant` replicas can be placed on
/// `ep` ranks; else the rule broken, as one sentence.
std::string placementRule(int64_t numExperts, int64_t ep, int64_t redundant);

} // namespace meshfold

#endif // MESHFOLD_SUPPORT_EXPERTPLACEMENT_H
