//===- TrafficModel.h - analytic per-layer traffic of a plan ----*- C++ -*-===//
//
// For any plan (docs/design.md §5 works the reference plan by hand): the
// elements each GPU sends per layer, by collective and link class (NVLink
// within a node, IB between nodes), for T prompt tokens per DP
// replica and uniform top-k routing, and the time that takes at given link
// speeds. Pure C++ on MeshLayout, like the runtime that measures the same.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_SUPPORT_TRAFFICMODEL_H
#define MESHFOLD_SUPPORT_TRAFFICMODEL_H

#include "meshfold/Support/MeshLayout.h"

#include <string>
#include <vector>

namespace meshfold {

struct TrafficModelInput {
  int64_t hidden = 0, numKVHeads = 0, headDim = 0, numExperts = 0, topK = 0;
  int64_t numLayers = 0;
  /// Hierarchical dispatch (through the relay) or flat.
  bool hierarchical = true;
  /// The last layer narrowed to the rows that reach an output
  /// (mf-narrow-last-layer): `survivingRows` of the T rows per replica (its
  /// requests' last positions, over T). Its reduce-scatter becomes an
  /// all-reduce of those rows (not a reduce-scatter row), and its dispatch
  /// and combine carry them only. Negative: not narrowed.
  double survivingRows = -1;
  /// The layers with routed experts (the others are dense: no dispatch or
  /// combine); 0: every layer. The last layer is taken to be one of them.
  int64_t numMoELayers = 0;
  /// Tensors per cached row that CP's ring passes: K and V (2), or the one
  /// that is both (1: MLA's latent).
  int64_t kvCopies = 2;
  /// Whether the query and key are normalised over their whole projection
  /// (OLMoE): TP all-reduces each of their rows' sum of squares, one
  /// element per row each.
  bool projNorms = false;
  /// The rows reaching the last-token LM head, over T: the requests per
  /// replica. Each TP group of the last stage all-reduces each request's
  /// last row (d + 1 elements: the row and its holder flag) and gathers the
  /// V / TP logits of each TP rank on TP rank 0. Negative: the head's
  /// collectives are not counted (they are once per request, not per
  /// layer: the figures amortize them over a stage's layers).
  double headRows = -1;
  int64_t vocab = 0;
};

/// One collective's traffic, averaged over the GPUs, per layer, in units of
/// T*d elements (T = prompt tokens per DP replica, d = hidden size).
struct TrafficRow {
  std::string collective; // all_gather, kv_ring, reduce_scatter, dispatch,
                          // combine, pp, all_reduce, gather
  double nvlink = 0, ib = 0;
};

/// The analytic per-layer traffic of `layout` (the PP send amortized over
/// the layers of a stage). Dispatch/combine count expert rows only (not the
/// routing metadata); the positions travelling with K/V count as two
/// f32-sized elements each (i64), as the runtime's counters count them. An
/// all-reduce of c elements on a group of n sends 2 c (n-1) / n per member
/// on average (a reduce-scatter and an all-gather of its blocks). The rows
/// all_reduce (projection norms' sums, a narrowed layer's output, the
/// head's row) and gather (the head's logits) are present when non-zero.
std::vector<TrafficRow> analyticTraffic(const MeshLayout &layout,
                                        const TrafficModelInput &model);

/// Seconds per layer for T tokens per replica at the layout's link
/// bandwidths, `bytes` per element, no overlap (the slowest link class of
/// each GPU's traffic added up).
double trafficSeconds(const MeshLayout &layout,
                      const std::vector<TrafficRow> &rows, double tokens,
                      int64_t hidden, double bytes);

/// One admissible pair of axis orders of given sizes and its traffic.
struct OrderCost {
  /// The attention and the expert mesh's orders (PlanFlags'), and the
  /// expert axes that order places (those larger than 1, and ep).
  std::string order, expertOrder, expertAxes;
  std::vector<TrafficRow> rows;
  double seconds = 0;
};

/// Every distinct plan of the sizes and node size of `flags` (its orders are
/// not used): each order of the attention axes tp, cp, dp, pp with each
/// order of the expert axes etp, ep, edp, where orders that differ only in
/// where axes of size 1 go count once (the one nearest the default orders
/// tp,cp,dp,pp and etp,ep,edp);
/// with its analytic per-layer traffic and time for `tokens` per replica at
/// `bytes` per element; fastest first (ties keep the enumeration order).
std::vector<OrderCost> rankOrders(const PlanFlags &flags,
                                  const TrafficModelInput &model, double tokens,
                                  double bytes);

//===----------------------------------------------------------------------===//
// Decode steps with pass-Q attention (docs/design.md §6)
//===----------------------------------------------------------------------===//

/// The rows each CP rank computes in a decode step of `batch` requests (one
/// row each; a dummy step has one padding row): ceil(batch / CP), rounded up
/// to a multiple of TP (`mf.step_rows`).
int64_t decodeStepRows(const MeshLayout &layout, int64_t batch);

/// Bytes one GPU sends per layer in a step with `rows` rows per CP rank:
/// CP-1 ring steps of the rows' queries, partial outputs and log-sum-exp
/// (its numHeads/TP heads, f32) with the rows' positions (i64), then one of
/// the merged outputs and positions back. 0 without CP.
double passQBytes(const MeshLayout &layout, int64_t numHeads, int64_t headDim,
                  int64_t rows);

/// Bytes one GPU would send per layer moving the cache instead (pass-KV)
/// when its replica's caches hold `cached` positions: CP-1 ring steps of
/// its rank's share, `cached / CP` positions of K and V (`copies` 2; 1
/// where one tensor is both, MLA's latent; its KV heads: n_kv / TP, one
/// when TP exceeds n_kv) with their positions. 0 without CP.
double passKVBytes(const MeshLayout &layout, int64_t numKVHeads,
                   int64_t headDim, double cached, int64_t copies);

} // namespace meshfold

#endif // MESHFOLD_SUPPORT_TRAFFICMODEL_H
