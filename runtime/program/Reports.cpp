//===- Reports.cpp - The traffic report and the token-trace report --------===//
//
// --report traffic prints, per GPU and layer, the elements each collective
// sent over each link class (the runtime's counters), the analytic figures
// of the plan beside them (meshfold/Support/TrafficModel.h), and the two
// side by side. --trace-token prints the traced token's travel log
// (Trace.h) and writes --trace-svg's map.
//
//===----------------------------------------------------------------------===//

#include "mfrt/program/Reports.h"

#include "mfrt/io/Json.h"
#include "mfrt/program/Program.h"
#include "mfrt/program/ProgramRank.h"
#include "mfrt/program/Trace.h"

#include "meshfold/Support/KVTransfer.h"
#include "meshfold/Support/PlanText.h"
#include "meshfold/Support/TrafficModel.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

using namespace mfrt;
using namespace meshfold;

namespace {
/// The units of the traffic report: T, the prompt tokens per DP replica, and
/// T*d.
struct TrafficUnits {
  double perReplica = 0, td = 0;
};

/// The index of a counter in a rank's row of Program::traffic.
size_t counterIndex(int64_t layer, int kind, int link) {
  return size_t(((layer + 1) * MFRT_OP_KIND_COUNT + kind) * MFRT_LINK_COUNT +
                link);
}

/// Per layer, collective and link: mean and max elements per GPU over the
/// GPUs that sent any.
void printMeasured(const Program &prog, const TrafficUnits &u) {
  const Manifest &m = prog.manifest;
  std::printf("traffic per GPU per layer, f32 elements sent (T*d: T = %.1f "
              "prompt tokens per DP replica, d = %lld)\n",
              u.perReplica, (long long)m.hidden);
  std::printf("  %-6s %-15s %-7s %14s %14s %10s\n", "layer", "collective",
              "link", "mean/GPU", "max/GPU", "mean/T*d");
  const char *links[] = {"nvlink", "ib"};
  for (int64_t l = -1; l < m.layers; ++l)
    for (int k = 0; k < MFRT_OP_KIND_COUNT; ++k)
      for (int n = 0; n < MFRT_LINK_COUNT; ++n) {
        size_t at = counterIndex(l, k, n);
        uint64_t sum = 0, max = 0;
        int64_t senders = 0;
        for (const auto &t : prog.traffic) {
          uint64_t e = t.empty() ? 0 : t[at] / sizeof(float);
          sum += e;
          max = std::max(max, e);
          senders += e > 0;
        }
        if (!senders)
          continue;
        double mean = double(sum) / double(senders);
        std::printf("  %-6s %-15s %-7s %14.1f %14llu %10.4f\n",
                    l < 0 ? "-" : std::to_string(l).c_str(),
                    mfrt_op_kind_name(mfrt_op_kind(k)), links[n], mean,
                    (unsigned long long)max, mean / u.td);
      }
}

/// The analytic figures for the plan (uniform routing), printed and
/// returned.
std::vector<TrafficRow> printAnalytic(const Program &prog,
                                      const MeshLayout &layout,
                                      const TrafficUnits &u) {
  const Manifest &m = prog.manifest;
  TrafficModelInput model{m.hidden, m.kvHeads, m.headDim, m.experts,
                          m.topK,   m.layers,  true};
  model.numMoELayers = m.moeLayers;
  model.kvCopies = m.kvCopies();
  model.projNorms = m.projNorms;
  model.vocab = m.vocab;
  // The head reads each request's last row; a narrowed last layer computes
  // those rows only.
  if (u.perReplica > 0) {
    model.headRows = double(prog.requests.size()) /
                     double(layout.axisSize("dp")) / u.perReplica;
    if (m.narrowedLast)
      model.survivingRows = model.headRows;
  }
  std::vector<TrafficRow> rows = analyticTraffic(layout, model);
  std::printf("analytic per GPU per layer (uniform routing; PP amortized over "
              "a stage%s), in T*d, and time at %g / %g GB/s, bf16, for T = "
              "%.1f:\n",
              m.narrowedLast ? "; the last layer on each request's last row"
                             : "",
              layout.bandwidthGBps(LinkClass::NVLink),
              layout.bandwidthGBps(LinkClass::IB), u.perReplica);
  for (const TrafficRow &r : rows) {
    double us = trafficSeconds(layout, {r}, u.perReplica, m.hidden, 2.0) * 1e6;
    std::printf("  %-15s nvlink %8.4f  ib %8.4f  %10.3f us\n",
                r.collective.c_str(), r.nvlink, r.ib, us);
  }
  return rows;
}

/// Side by side, in the analytic figures' units: all GPUs' elements of a
/// collective over all layers, per GPU per layer of its stage (the PP send
/// amortized the same way), in T*d. Measured bytes include what travels
/// with the rows (routing metadata, K/V positions, counts); the analytic
/// figures count the rows only.
void printComparison(const Program &prog, const MeshLayout &layout,
                     const std::vector<TrafficRow> &rows,
                     const TrafficUnits &u) {
  const Manifest &m = prog.manifest;
  const double gpuLayers = double(layout.numDevices()) * double(m.layers) /
                           double(layout.axisSize("pp"));
  auto measured = [&](mfrt_op_kind kind, int link) {
    uint64_t sum = 0;
    for (const auto &t : prog.traffic)
      for (int64_t l = -1; !t.empty() && l < m.layers; ++l)
        sum += t[counterIndex(l, kind, link)] / sizeof(float);
    return double(sum) / gpuLayers / u.td;
  };
  std::printf("measured vs analytic, per GPU per layer in T*d:\n");
  std::printf("  %-22s %-7s %10s %10s %8s %12s\n", "collective", "link",
              "measured", "analytic", "diff", "time (bf16)");
  auto line = [&](const std::string &what, const char *link, double got,
                  double want) {
    const bool ib = std::strcmp(link, "ib") == 0;
    const double us =
        got * u.perReplica * double(m.hidden) * 2.0 /
        (layout.bandwidthGBps(ib ? LinkClass::IB : LinkClass::NVLink) * 1e9) *
        1e6;
    if (got == 0 && want == 0)
      return;
    std::string diff = "-";
    if (want > 0) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%+.1f%%", (got / want - 1.0) * 100.0);
      diff = buf;
    }
    std::printf("  %-22s %-7s %10.4f %10.4f %8s %9.3f us\n", what.c_str(), link,
                got, want, diff.c_str(), us);
  };
  const std::pair<const char *, mfrt_op_kind> kinds[] = {
      {"all_gather", MFRT_OP_ALL_GATHER},
      {"kv_ring", MFRT_OP_KV_RING},
      {"q_ring", MFRT_OP_Q_RING},
      {"reduce_scatter", MFRT_OP_REDUCE_SCATTER},
      {"dispatch", MFRT_OP_DISPATCH},
      {"combine", MFRT_OP_COMBINE},
      {"pp", MFRT_OP_PP},
      {"all_reduce", MFRT_OP_ALL_REDUCE},
      {"gather", MFRT_OP_GATHER}};
  double epIB = 0, epIBWant = 0;
  for (auto [name, kind] : kinds) {
    auto row = std::find_if(rows.begin(), rows.end(), [&](const auto &r) {
      return r.collective == name;
    });
    double wantNV = row == rows.end() ? 0 : row->nvlink;
    double wantIB = row == rows.end() ? 0 : row->ib;
    line(name, "nvlink", measured(kind, MFRT_LINK_NVLINK), wantNV);
    line(name, "ib", measured(kind, MFRT_LINK_IB), wantIB);
    if (kind == MFRT_OP_DISPATCH || kind == MFRT_OP_COMBINE) {
      epIB += measured(kind, MFRT_LINK_IB);
      epIBWant += wantIB;
    }
  }
  line("ep (dispatch+combine)", "ib", epIB, epIBWant);
}
/// Prefill's expert rows per rank and layer: the load of the ranks that ran
/// the layer's experts (those of its stage), its max over its mean.
void printExpertLoad(const Program &prog) {
  const Manifest &m = prog.manifest;
  std::printf("expert rows per rank in prefill (the ranks of the layer's "
              "stage)\n");
  for (int64_t l = 0; l < m.layers; ++l) {
    uint64_t most = 0, sum = 0, ranks = 0;
    for (const auto &row : prog.compute) {
      if (row.empty())
        continue;
      const uint64_t *c = &row[size_t(l * kComputeCounters)];
      uint64_t experts = c[kExpertRows];
      if (!c[kKVRows] && !c[kMoERows] && !experts)
        continue; // another stage's rank
      most = std::max(most, experts);
      sum += experts;
      ++ranks;
    }
    if (!sum)
      continue; // a dense layer
    double mean = double(sum) / double(ranks);
    std::printf("  layer %lld: max %llu, mean %.1f over %llu ranks, max/mean "
                "%.2f\n",
                (long long)l, (unsigned long long)most, mean,
                (unsigned long long)ranks, double(most) / mean);
  }
}

/// Prefill's compute per layer, summed over the GPUs: the rows each part of
/// the layer ran on, as the runtime's hooks saw them (ProgramRank::compute),
/// and the FLOPs of those rows at the ranks' shapes (a multiply-add is 2):
/// K/V projections; query and output projections and attention (its two
/// products over each query's visible keys); router and experts.
void printCompute(const Program &prog, const MeshLayout &layout) {
  const Manifest &m = prog.manifest;
  const double d = double(m.hidden), dh = double(m.headDim);
  const int64_t tp = layout.axisSize("tp");
  const double heads = double(m.heads / tp),
               kvHeads = double(kvHeadsPerRank(m.kvHeads, tp));
  const double ffn = double(m.ffn / layout.axisSize("etp"));
  std::printf("compute in prefill per layer, summed over the GPUs (rows "
              "counted by the runtime; MFLOP at the ranks' shapes)\n");
  std::printf("  %-6s %9s %10s %12s %9s %11s %10s %12s %10s\n", "layer",
              "K/V rows", "query rows", "attn pairs", "MoE rows", "expert rows",
              "K/V MFLOP", "attn MFLOP", "MoE MFLOP");
  for (int64_t l = 0; l < m.layers; ++l) {
    uint64_t c[kComputeCounters] = {};
    for (const auto &row : prog.compute)
      for (int i = 0; i < kComputeCounters && !row.empty(); ++i)
        c[i] += row[size_t(l * kComputeCounters + i)];
    double kv = double(c[kKVRows]) * 2 * d * 2 * kvHeads * dh;
    double attention = double(c[kQueryRows]) * 2 * 2 * d * heads * dh +
                       double(c[kAttentionPairs]) * 2 * 2 * heads * dh;
    double moe = double(c[kMoERows]) * 2 * d * double(m.experts) +
                 double(c[kExpertRows]) * 2 * 3 * d * ffn;
    std::printf("  %-6lld %9llu %10llu %12llu %9llu %11llu %10.3f %12.3f "
                "%10.3f\n",
                (long long)l, (unsigned long long)c[kKVRows],
                (unsigned long long)c[kQueryRows],
                (unsigned long long)c[kAttentionPairs],
                (unsigned long long)c[kMoERows],
                (unsigned long long)c[kExpertRows], kv / 1e6, attention / 1e6,
                moe / 1e6);
  }
  printExpertLoad(prog);
}

/// Decode steps (from Program::traffic's second block): per GPU, layer and
/// step, the bytes each collective sent over each link class, and pass-Q
/// attention's beside the analytic figure and beside what moving the K/V
/// cache instead (pass-KV) would have sent at the steps' mean cache length.
void printDecodeTraffic(const Program &prog, const MeshLayout &layout) {
  const Manifest &m = prog.manifest;
  const size_t block = counterIndex(m.layers, 0, 0);
  // Each rank's row: prefill's counters, decode's, the decode steps and the
  // model's pass-Q bytes per layer summed over them.
  auto ranDecode = [&](const std::vector<uint64_t> &t) {
    return t.size() == 2 * block + 2;
  };
  int64_t steps = 0;
  for (const auto &t : prog.traffic)
    if (ranDecode(t))
      steps = std::max(steps, int64_t(t[2 * block]));
  if (steps == 0)
    return;
  const double gpus = double(layout.numDevices());
  const double stageLayers = double(m.layers) / double(layout.axisSize("pp"));
  auto measured = [&](int kind, int link, bool inLayers) {
    uint64_t sum = 0;
    for (const auto &t : prog.traffic)
      for (int64_t l = inLayers ? 0 : -1;
           ranDecode(t) && l < (inLayers ? m.layers : 0); ++l)
        sum += t[block + counterIndex(l, kind, link)];
    return double(sum) / gpus / double(steps) / (inLayers ? stageLayers : 1);
  };
  std::printf("decode: %lld steps per GPU (every micro-batch's, and dummy "
              "steps of idle replicas, included); bytes sent per GPU "
              "per step, in each layer and outside the layers\n",
              (long long)steps);
  std::printf("  %-15s %-7s %14s %14s\n", "collective", "link", "per layer",
              "outside");
  const char *links[] = {"nvlink", "ib"};
  for (int k = 0; k < MFRT_OP_KIND_COUNT; ++k)
    for (int n = 0; n < MFRT_LINK_COUNT; ++n) {
      double in = measured(k, n, true), out = measured(k, n, false);
      if (in > 0 || out > 0)
        std::printf("  %-15s %-7s %14.1f %14.1f\n",
                    mfrt_op_kind_name(mfrt_op_kind(k)), links[n], in, out);
    }
  int64_t cp = layout.axisSize("cp"), tp = layout.axisSize("tp");
  if (cp == 1)
    return;
  // The model of each step's batch (TrafficModel), averaged like the
  // counters.
  double passQ = 0;
  for (const auto &t : prog.traffic)
    if (ranDecode(t))
      passQ += double(t[2 * block + 1]);
  passQ /= gpus * double(steps);
  // Pass-KV would move, each step, the caches of the replica's live
  // requests: their mean total length per step.
  double cached = 0;
  for (const auto &o : prog.outputs)
    for (int64_t s = 1; s < int64_t(o->generated.size()); ++s)
      cached += double(o->tokens + s - 1);
  double mean = cached / double(layout.axisSize("dp") * steps);
  double passKV = passKVBytes(layout, m.kvHeads, m.headDim, mean, m.kvCopies());
  double got = 0;
  for (int n = 0; n < MFRT_LINK_COUNT; ++n)
    got += measured(MFRT_OP_Q_RING, n, true);
  std::printf("pass-Q attention per GPU per layer per step: %.1f bytes sent, "
              "%.1f analytic (each step's batch dealt over CP = %lld, padded "
              "to a multiple of TP = %lld rows per rank; CP-1 ring step%s of "
              "the rows' %lld "
              "heads x (2 x %lld + 1) floats and their positions, one of the "
              "outputs back)\n",
              got, passQ, (long long)cp, (long long)tp, cp > 2 ? "s" : "",
              (long long)(m.heads / tp), (long long)m.headDim);
  std::printf("pass-KV (moving the caches instead) would send %.1f bytes at "
              "the mean cache length of %.1f positions per step (the "
              "batch's), and more as it grows\n",
              passKV, mean);
}
/// A program of two pools: the K/V transfer from the prefill pool to the
/// decode pool, by link class (the counters of every rank, all layers),
/// beside the analytic minimum: every K/V element once per decode rank that
/// holds it (kvTransferMinimumElements, in f32), and each request's first
/// token once to every rank of its decode replica; then the same per
/// request (each prefill rank's counters while it ran the request).
void printPoolTransfer(const Program &prog) {
  const MeshLayout decode = layoutOf(prog.decodeManifest);
  const Manifest &m = prog.manifest;
  const size_t requests = prog.requests.size();
  // A rank's row: its prefill counters, then the rest, the decode steps,
  // pass-Q's model, and its transfer bytes per request (Program::traffic).
  const size_t block = counterIndex(m.layers, 0, 0);
  double measured[MFRT_LINK_COUNT] = {0, 0};
  std::vector<double> perRequest(MFRT_LINK_COUNT * requests, 0);
  for (const auto &t : prog.traffic) {
    for (int64_t l = -1; l < m.layers && t.size() >= 2 * block; ++l)
      for (int n = 0; n < MFRT_LINK_COUNT; ++n) {
        size_t at = counterIndex(l, MFRT_OP_KV_TRANSFER, n);
        measured[n] += double(t[at] + t[block + at]);
      }
    if (t.size() == 2 * block + 2 + perRequest.size())
      for (size_t i = 0; i < perRequest.size(); ++i)
        perRequest[i] += double(t[2 * block + 2 + i]);
  }
  const double replicaRanks =
      double(decode.numDevices()) / double(decode.axisSize("dp"));
  const double width = double(2 + (prog.generation.stepLogits ? m.vocab : 0));
  const double token = 4.0 * width * replicaRanks;
  std::vector<double> kv(requests, 0);
  double kvTotal = 0;
  for (size_t r = 0; r < requests; ++r) {
    KVTransferInput in;
    in.numLayers = m.layers;
    in.numKVHeads = m.kvHeads;
    in.headDim = m.headDim;
    in.kvCopies = m.kvCopies();
    in.promptLength = int64_t(prog.requests[r].size());
    kv[r] = 4.0 * double(kvTransferMinimumElements(decode, in));
    kvTotal += kv[r];
  }
  double tokens = token * double(requests);
  std::printf("kv transfer, prefill pool -> decode pool (%zu requests): "
              "%.0f bytes over nvlink, %.0f over ib; analytic: %.0f bytes of "
              "K/V (each element once per decode rank that holds it) + %.0f "
              "of first tokens = %.0f, all over ib (the pools are on nodes of "
              "their own)\n",
              requests, measured[MFRT_LINK_NVLINK], measured[MFRT_LINK_IB],
              kvTotal, tokens, kvTotal + tokens);
  std::printf("  %7s %7s %14s %14s %14s %14s %14s\n", "request", "prompt",
              "nvlink bytes", "ib bytes", "analytic", "K/V", "first token");
  for (size_t r = 0; r < requests; ++r)
    std::printf("  %7zu %7zu %14.0f %14.0f %14.0f %14.0f %14.0f\n", r,
                prog.requests[r].size(),
                perRequest[MFRT_LINK_COUNT * r + MFRT_LINK_NVLINK],
                perRequest[MFRT_LINK_COUNT * r + MFRT_LINK_IB], kv[r] + token,
                kv[r], token);
}
} // namespace

void mfrt::printTraffic(const Program &prog, const std::string &plan) {
  if (prog.pools)
    return printPoolTransfer(prog);
  std::string error;
  std::optional<MeshLayout> layout = layoutFromPlanText(plan, &error);
  if (!layout)
    return;
  int64_t replicas = layout->axisSize("dp");
  int64_t tokens = 0;
  for (const auto &r : prog.requests)
    tokens += int64_t(r.size());
  TrafficUnits u;
  u.perReplica = double(tokens) / double(replicas);
  u.td = double(tokens) / double(replicas) * double(prog.manifest.hidden);
  printMeasured(prog, u);
  std::vector<TrafficRow> rows = printAnalytic(prog, *layout, u);
  printComparison(prog, *layout, rows, u);
  printCompute(prog, *layout);
  printDecodeTraffic(prog, *layout);
}

void mfrt::reportTrace(const Program &prog, const std::string &plan) {
  std::string error;
  std::optional<MeshLayout> layout = layoutFromPlanText(plan, &error);
  if (!layout)
    die(error);
  // A program of two pools: the hops' global ranks on the machine of both
  // pools; the replica of the pool the token landed in.
  std::optional<MeshLayout> decode;
  if (prog.pools)
    decode = layoutOf(prog.decodeManifest);
  const MeshLayout machine = decode ? poolsMachine(*layout, *decode) : *layout;
  const TraceConfig &c = traceConfig();
  std::vector<mfrt_trace_hop> hops(
      static_cast<size_t>(mfrt_trace_hops(nullptr, 0)));
  mfrt_trace_hops(hops.data(), int64_t(hops.size()));
  hops.insert(hops.end(), prog.traceHops.begin(), prog.traceHops.end());
  TraceSightings &seen = traceSightings();
  TraceLog log = buildTraceLog(machine, hops, seen.landing, seen.kv);
  int64_t replica = 0;
  if (seen.landing >= layout->numDevices())
    replica = decode->coord(seen.landing - layout->numDevices(), "dp");
  else if (seen.landing >= 0)
    replica = layout->coord(seen.landing, "dp");
  // The first decode rank's global rank (0: one pool).
  const int64_t decodeBase = decode ? layout->numDevices() : 0;
  printTraceLog(machine, log, replica,
                int64_t(prog.requests[size_t(c.request)].size()), decodeBase,
                prog.manifest.narrowedLast ? prog.manifest.layers - 1 : -1,
                layout->axisSize("tp") > 1 ? "reduce_scatter, dispatch, combine"
                                           : "dispatch, combine");
  if (!c.svgPath.empty() &&
      !writeTraceSvg(c.svgPath, machine, log, decodeBase, &error))
    die(error);
}

//===----------------------------------------------------------------------===//
// --report routing, --routing-json
//===----------------------------------------------------------------------===//

void mfrt::checkRoutingReport(const Program &prog) {
  const Manifest &m = prog.manifest;
  if (m.experts < 1)
    die("--report routing / --routing-json: the model has no experts");
  for (const Manifest *pool : {&m, prog.pools ? &prog.decodeManifest : &m})
    if (layoutOf(*pool).axisSize("ep") < 2)
      die("--report routing / --routing-json count the rows each expert "
          "dispatch sends, and this program has no expert parallelism " +
          std::string(pool == &m ? "" : "in its decode pool ") +
          "(compile it with --ep N; the local backend runs such a plan on "
          "one machine)");
}

namespace {
/// Rows per expert of each layer, summed over the ranks.
std::vector<std::vector<uint64_t>> routedPerLayer(const Program &prog) {
  const Manifest &m = prog.manifest;
  std::vector<std::vector<uint64_t>> layers(
      size_t(m.layers), std::vector<uint64_t>(size_t(m.experts), 0));
  for (const std::vector<uint64_t> &rank : prog.routing)
    for (size_t i = 0; i < rank.size() && i < size_t(m.layers * m.experts); ++i)
      layers[i / size_t(m.experts)][i % size_t(m.experts)] += rank[i];
  return layers;
}

uint64_t total(const std::vector<uint64_t> &rows) {
  uint64_t n = 0;
  for (uint64_t r : rows)
    n += r;
  return n;
}

/// The hottest expert's rows over the mean (1 for no rows).
double maxOverMean(const std::vector<uint64_t> &rows) {
  uint64_t n = total(rows);
  if (!n)
    return 1;
  return double(*std::max_element(rows.begin(), rows.end())) *
         double(rows.size()) / double(n);
}
} // namespace

void mfrt::printRoutingReport(const Program &prog) {
  std::vector<std::vector<uint64_t>> layers = routedPerLayer(prog);
  std::printf("rows routed to each expert (prefill and decode, all ranks):\n");
  for (size_t l = 0; l < layers.size(); ++l) {
    if (!total(layers[l]))
      continue; // a dense layer
    std::printf("  layer %zu: max/mean %.2f, rows", l, maxOverMean(layers[l]));
    for (uint64_t r : layers[l])
      std::printf(" %llu", (unsigned long long)r);
    std::printf("\n");
  }
}

bool mfrt::writeRoutingJson(const Program &prog, const std::string &path,
                            std::string *error) {
  const Manifest &m = prog.manifest;
  std::vector<std::vector<uint64_t>> layers = routedPerLayer(prog);
  nlohmann::ordered_json out = {{"format", "meshfold-routing"}, {"version", 1}};
  out["model"] = {{"layers", m.layers},
                  {"experts", m.experts},
                  {"top_k", m.topK},
                  {"hidden_size", m.hidden}};
  out["requests"] = prog.requests.size();
  uint64_t routed = 0;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (size_t l = 0; l < layers.size(); ++l) {
    if (!total(layers[l]))
      continue;
    routed += total(layers[l]);
    list.push_back({{"layer", l},
                    {"rows", layers[l]},
                    {"max_over_mean", maxOverMean(layers[l])}});
  }
  out["routed_rows"] = routed;
  out["layers"] = std::move(list);
  return writeWholeFile(path, out.dump() + "\n", *error);
}
