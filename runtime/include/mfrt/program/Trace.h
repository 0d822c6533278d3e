//===- Trace.h - one token's journey, and the routing hooks -----*- C++ -*-===//
//
// The emitted program's --trace-token REQ:POS follows the data of one prompt
// token (request REQ, position POS) through the collectives: the program's
// hooks mark the rows that hold it (by the positions the program computed),
// the runtime records every message that carries a marked row (mfrt.h,
// mfrt_trace_*), and this file turns the hops into the travel log of
// docs/design.md §4 and an SVG map of the route.
//
// --force-routing is a benchmarking and test hook: FILE fixes the traced
// token's experts per layer ("LAYER: E1 E2 ...", layers from 1); "random"
// or "random:SEED" draws every token's experts uniformly at random (k
// distinct ones, a function of the seed, request, position and layer, so
// that every plan routes alike); "zipf:S[:SEED]" draws them the same way
// with a skew: the expert of rank r in a per-layer order has weight
// 1 / r^S (a hot few, as measured routing often has). The experts replaced keep
// the router's weights (the choice moves the data; the weights only scale it).
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_PROGRAM_TRACE_H
#define MFRT_PROGRAM_TRACE_H

#include "meshfold/Support/Manifest.h"
#include "mfrt/mfrt.h"

#include "meshfold/Support/MeshLayout.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace mfrt {

struct TraceConfig {
  /// --trace-token REQ:POS.
  bool traceToken = false;
  int64_t request = -1, position = -1;
  /// --force-routing FILE: layer (from 0) -> the traced token's experts.
  std::map<int64_t, std::vector<int64_t>> forced;
  /// --force-routing random[:SEED] or zipf:S[:SEED] (zipf > 0: the skew).
  bool randomRouting = false;
  uint64_t seed = 1;
  double zipf = 0;
  /// --trace-svg FILE.
  std::string svgPath;

  /// Whether the program's hooks must keep the rows' positions.
  bool needsPositions() const {
    return traceToken || randomRouting || !forced.empty();
  }
};

/// The process's configuration (set by main before the launch).
TraceConfig &traceConfig();

/// "REQ:POS" -> request and position (not yet checked against the prompts).
bool parseTraceToken(const std::string &text, int64_t &request,
                     int64_t &position, std::string *error);
/// Reads a --force-routing file: one line per layer "LAYER: E1 .. Ek",
/// layers 1..numLayers, k = topK experts in 0..numExperts-1; blank lines and
/// '#' comments are skipped. Errors name the file, line and rule.
bool parseRoutingFile(const std::string &path, int64_t numLayers,
                      int64_t numExperts, int64_t topK,
                      std::map<int64_t, std::vector<int64_t>> &forced,
                      std::string *error);
/// k distinct experts of numExperts for (seed, request, position, layer):
/// uniformly, or with `zipf` > 0 each drawn (without replacement) with
/// weight 1 / r^zipf, r the expert's rank (from 1) in an order drawn per
/// (seed, layer).
void randomExperts(uint64_t seed, int64_t request, int64_t position,
                   int64_t layer, int64_t numExperts, int64_t k, int64_t *out,
                   double zipf = 0);

/// What the program's hooks saw of the traced token (besides the hops):
/// the rank it landed on and the ranks that wrote its K/V.
struct TraceSightings {
  std::mutex mutex;
  int landing = -1;
  std::set<int> kv;
};
TraceSightings &traceSightings();

/// The travel log, computed from the recorded hops.
struct TraceStep {
  std::string what; // "layer 1 all_gather"
  std::vector<mfrt_trace_hop> hops;
  std::vector<int> added; // GPUs that held none of it before
  /// The figures so far: GPUs, node crossings (by what crossed) and ops.
  int64_t gpus = 0, crossings = 0, ep = 0, pp = 0, other = 0, transfer = 0,
          ops = 0;
};
/// A program of two pools: the steps end with the traced token's K/V
/// transfer (kind kv_transfer, layer by layer), and `kvKept` holds the
/// decode pool's GPUs it went to.
struct TraceLog {
  int landing = -1;
  std::vector<TraceStep> steps;
  std::set<int> held, kv, kvKept;
  int64_t gpus = 0, crossings = 0, ep = 0, pp = 0, other = 0, transfer = 0,
          ops = 0;
};
TraceLog buildTraceLog(const meshfold::MeshLayout &layout,
                       std::vector<mfrt_trace_hop> hops, int landing,
                       const std::set<int> &kv);
/// Prints the log: one line per comm op the token took part in, the K/V
/// line and, last, "trip: G/N GPUs, C node crossings (E EP, P PP), O comm
/// ops". A program of two pools passes the machine of both
/// (poolsMachine) and its first decode rank `decodeBase` (0: one pool).
/// `narrowedLayer` (>= 0) is a last layer narrowed to each request's last
/// prompt position: for another prompt position the log lists the hops
/// (`removed`) that layer no longer has.
void printTraceLog(const meshfold::MeshLayout &layout, const TraceLog &log,
                   int64_t replica, int64_t promptTokens,
                   int64_t decodeBase = 0, int64_t narrowedLayer = -1,
                   const std::string &removed = "");
/// The whole trip: "23/32 GPUs, 15 node crossings (14 EP, 1 PP), 41 comm
/// ops".
std::string tripTally(const TraceLog &log, int64_t devices);
/// Writes the route as SVG (TraceMap.cpp): nodes and GPUs, NVLink hops
/// solid, IB hops dashed, op numbers on the hops, the GPUs that keep its K/V
/// ringed; the decode pool's nodes (from global rank `decodeBase`; 0: one
/// pool) named so.
bool writeTraceSvg(const std::string &path, const meshfold::MeshLayout &layout,
                   const TraceLog &log, int64_t decodeBase, std::string *error);

} // namespace mfrt

#endif // MFRT_PROGRAM_TRACE_H
