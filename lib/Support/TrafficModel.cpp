//===- TrafficModel.cpp - analytic per-layer traffic of a plan ------------===//

#include "meshfold/Support/TrafficModel.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

using namespace meshfold;

namespace {
/// log C(n, k).
double logChoose(int64_t n, int64_t k) {
  if (k < 0 || k > n)
    return -INFINITY;
  return std::lgamma(double(n + 1)) - std::lgamma(double(k + 1)) -
         std::lgamma(double(n - k + 1));
}

/// P(none of k distinct experts drawn from E falls among `held` of them).
double pNone(int64_t numExperts, int64_t held, int64_t k) {
  return std::exp(logChoose(numExperts - held, k) - logChoose(numExperts, k));
}

void add(TrafficRow &row, LinkClass link, double v) {
  if (link == LinkClass::NVLink)
    row.nvlink += v;
  else if (link == LinkClass::IB)
    row.ib += v;
}

/// What each GPU all-reduces on TP per layer, in T*d, averaged over the
/// GPU-layers (the narrowed last layer and the head are 1/L of them), with
/// `a` the CP rows (over T) and `d` the hidden size:
/// - the projection norms' sums: one element per row for the query and one
///   for the key, on the A rows of a whole layer; in the narrowed layer the
///   query's on the surviving rows only;
/// - the narrowed layer's output projection: the surviving rows, whole;
/// - the head: each request's last row and its flag, on every rank of the
///   last stage.
double tpAllReduced(const TrafficModelInput &m, double a, double d) {
  const double last =
      m.survivingRows >= 0 && m.numLayers > 0 ? 1.0 / double(m.numLayers) : 0.0;
  const double rowsLast = std::max(m.survivingRows, 0.0) * a;
  double reduced = 0;
  if (m.projNorms)
    reduced += (1.0 - last) * 2.0 * a / d + last * (rowsLast + a) / d;
  reduced += last * rowsLast;
  if (m.headRows >= 0 && m.numLayers > 0)
    reduced += m.headRows * (d + 1.0) / d / double(m.numLayers);
  return reduced;
}

/// The sums of analyticTraffic: each rank's traffic added per collective,
/// then averaged over the layers and the GPUs.
class TrafficSum {
public:
  TrafficSum(const MeshLayout &layout, const TrafficModelInput &m)
      : layout(layout), m(m), n(layout.numDevices()), tp(layout.axisSize("tp")),
        cp(layout.axisSize("cp")), pp(layout.axisSize("pp")),
        ep(layout.axisSize("ep")), d(double(m.hidden)),
        s(1.0 / double(cp * tp)), a(1.0 / double(cp)),
        kvLocal(double(kvHeadsPerRank(m.numKVHeads, tp))),
        reduced(tpAllReduced(m, a, d)),
        perRank(ep > 0 ? m.numExperts / ep : m.numExperts),
        dispatchAxes(layout.axisSize("etp") > 1
                         ? std::vector<std::string>{"etp", "ep"}
                         : std::vector<std::string>{"ep"}) {}

  /// Adds the traffic rank `r` sends.
  void addRank(int64_t r) {
    addTensorParallel(r);
    addContextRing(r);
    addExperts(r);
    addPipeline(r);
  }

  /// The rows, averaged over the layers and the GPUs.
  std::vector<TrafficRow> finish();

private:
  void addTensorParallel(int64_t r);
  void addContextRing(int64_t r);
  void addExperts(int64_t r);
  void addPipeline(int64_t r);
  void averageOverLayers();

  const MeshLayout &layout;
  const TrafficModelInput &m;
  int64_t n, tp, cp, pp, ep;
  /// Per GPU, in units of T (tokens per replica): SP rows S, CP rows A.
  double d, s, a;
  double kvLocal, reduced;
  int64_t perRank;
  std::vector<std::string> dispatchAxes;
  TrafficRow ag{"all_gather"}, ring{"kv_ring"}, rs{"reduce_scatter"},
      disp{"dispatch"}, comb{"combine"}, send{"pp"}, allReduce{"all_reduce"},
      gather{"gather"};
};

void TrafficSum::addTensorParallel(int64_t r) {
  // TP: all-gather and reduce-scatter each send S*d to every partner;
  // all-reduces 2/TP of their elements to each.
  std::vector<int64_t> tpg = layout.group(r, {"tp"});
  for (int64_t q : tpg)
    if (q != r) {
      add(ag, layout.link(r, q), s);
      add(rs, layout.link(r, q), s);
      add(allReduce, layout.link(r, q), 2.0 * reduced / double(tp));
    }
  // The head's logits: V/TP per request from each TP rank to TP rank 0.
  if (m.headRows >= 0 && m.numLayers > 0 && tpg.front() != r)
    add(gather, layout.link(r, tpg.front()),
        m.headRows * double(m.vocab) / double(tp) / d / double(m.numLayers));
}

void TrafficSum::addContextRing(int64_t r) {
  // CP ring: CP-1 steps of K and V (or the one tensor that is both) for A
  // tokens to the next member, with their positions (i64: two f32-sized
  // elements each).
  std::vector<int64_t> cpg = layout.group(r, {"cp"});
  int64_t me = layout.groupRank(r, {"cp"});
  int64_t next = cpg[size_t((me + 1) % cp)];
  if (cp > 1)
    add(ring, layout.link(r, next),
        double(cp - 1) * a *
            (double(m.kvCopies) * kvLocal * double(m.headDim) + 2.0) / d);
}

void TrafficSum::addExperts(int64_t r) {
  // EP: each of S tokens goes to the holders of its k experts in its
  // etp x ep group (every etp slice of each).
  std::vector<int64_t> epg = layout.group(r, dispatchAxes);
  std::map<int64_t, std::set<int64_t>> blocksOnNode; // ep coords per node
  for (int64_t q : epg)
    blocksOnNode[layout.node(q)].insert(layout.coord(q, "ep"));
  for (int64_t q : epg) {
    if (q == r)
      continue;
    // Rows go per routed slot: the expected number of the token's k
    // distinct experts that q holds.
    double pq = double(m.topK) * double(perRank) / double(m.numExperts);
    bool remote = layout.node(q) != layout.node(r);
    if (!remote || !m.hierarchical) {
      add(disp, layout.link(r, q), s * pq);
      add(comb, layout.link(r, q), s * pq);
      continue;
    }
    // Hierarchical: the relay on q's node forwards to q over NVLink
    // unless q is the relay itself.
    if (layout.relay(r, layout.node(q)) != q) {
      disp.nvlink += s * pq;
      comb.nvlink += s * pq;
    }
  }
  if (m.hierarchical)
    for (const auto &[node, blocks] : blocksOnNode)
      if (node != layout.node(r)) {
        double pn =
            1.0 - pNone(m.numExperts, perRank * int64_t(blocks.size()), m.topK);
        disp.ib += s * pn;
        comb.ib += s * pn;
      }
}

void TrafficSum::addPipeline(int64_t r) {
  // PP: the S*d slice once per stage boundary, amortized over the stage.
  int64_t stage = layout.coord(r, "pp");
  if (pp > 1 && stage + 1 < pp) {
    std::map<std::string, int64_t> c = layout.coords(r);
    c["pp"] = stage + 1;
    int64_t peer = layout.rankOf(c);
    add(send, layout.link(r, peer), s * double(pp) / double(m.numLayers));
  }
}

void TrafficSum::averageOverLayers() {
  // Dense layers dispatch nothing: dispatch and combine average over the
  // layers with experts.
  double moe = m.numMoELayers > 0 && m.numLayers > 0
                   ? double(m.numMoELayers) / double(m.numLayers)
                   : 1.0;
  if (m.survivingRows >= 0 && m.numLayers > 0) {
    // A stage's layers average: the last layer (1/L of the GPU-layers) has
    // no reduce-scatter, and its dispatch and combine carry a share of the
    // rows.
    double last = 1.0 / double(m.numLayers);
    for (TrafficRow *row : {&rs, &disp, &comb}) {
      double keep =
          row == &rs ? 1.0 - last : moe - last + last * m.survivingRows;
      row->nvlink *= keep;
      row->ib *= keep;
    }
  } else {
    for (TrafficRow *row : {&disp, &comb}) {
      row->nvlink *= moe;
      row->ib *= moe;
    }
  }
}

std::vector<TrafficRow> TrafficSum::finish() {
  averageOverLayers();
  std::vector<TrafficRow> rows = {ag, ring, rs, disp, comb, send};
  for (const TrafficRow &row : {allReduce, gather})
    if (row.nvlink > 0 || row.ib > 0)
      rows.push_back(row);
  for (TrafficRow &row : rows) {
    row.nvlink /= double(n);
    row.ib /= double(n);
  }
  return rows;
}
} // namespace

std::vector<TrafficRow> meshfold::analyticTraffic(const MeshLayout &layout,
                                                  const TrafficModelInput &m) {
  TrafficSum sum(layout, m);
  for (int64_t r = 0; r < layout.numDevices(); ++r)
    sum.addRank(r);
  return sum.finish();
}

double meshfold::trafficSeconds(const MeshLayout &layout,
                                const std::vector<TrafficRow> &rows,
                                double tokens, int64_t hidden, double bytes) {
  double nv = 0, ib = 0;
  for (const TrafficRow &r : rows) {
    nv += r.nvlink;
    ib += r.ib;
  }
  double scale = tokens * double(hidden) * bytes / 1e9;
  return nv * scale / layout.bandwidthGBps(LinkClass::NVLink) +
         ib * scale / layout.bandwidthGBps(LinkClass::IB);
}

/// Every permutation of `names`, joined by commas, in lexicographic order of
/// the names' positions in `names` (so `names` in its own order first).
static std::vector<std::string>
permutations(const std::vector<std::string> &names) {
  std::vector<size_t> index(names.size());
  for (size_t i = 0; i < index.size(); ++i)
    index[i] = i;
  std::vector<std::string> out;
  do {
    std::string joined;
    for (size_t i : index)
      joined += (joined.empty() ? "" : ",") + names[i];
    out.push_back(joined);
  } while (std::next_permutation(index.begin(), index.end()));
  return out;
}

std::vector<OrderCost> meshfold::rankOrders(const PlanFlags &flags,
                                            const TrafficModelInput &model,
                                            double tokens, double bytes) {
  // Expert orders differ only in the axes larger than 1.
  int expertAxes = (flags.etp > 1) + (flags.edp > 1) + 1;
  std::vector<std::string> expertOrders = {"etp,ep,edp"};
  if (expertAxes > 1)
    expertOrders = permutations({"etp", "ep", "edp"});
  std::vector<OrderCost> out;
  std::vector<std::string> seenPlans;
  for (const std::string &order : permutations({"tp", "cp", "dp", "pp"}))
    for (const std::string &expertOrder : expertOrders) {
      PlanFlags f = flags;
      f.order = order;
      f.expertOrder = expertOrder;
      PlanSpec spec;
      std::string error;
      if (!PlanSpec::fromFlags(f, spec, &error))
        continue;
      std::optional<MeshLayout> layout = MeshLayout::create(spec, &error);
      if (!layout)
        continue;
      // Orders that differ only in where size-1 axes go give the same plan.
      std::string folded, key;
      for (const ExpertAxis &a : spec.experts)
        if (a.name != "pp") {
          folded += (folded.empty() ? "" : ",") + a.name;
          if (a.size > 1)
            key += a.name + ",";
        }
      key += ";";
      for (const MeshAxis &a : spec.attention)
        if (a.size > 1)
          key += a.name + ",";
      if (std::find(seenPlans.begin(), seenPlans.end(), key) != seenPlans.end())
        continue;
      seenPlans.push_back(key);
      OrderCost c;
      c.order = order;
      c.expertOrder = expertOrder;
      c.expertAxes = folded;
      c.rows = analyticTraffic(*layout, model);
      c.seconds = trafficSeconds(*layout, c.rows, tokens, model.hidden, bytes);
      out.push_back(std::move(c));
    }
  std::stable_sort(out.begin(), out.end(),
                   [](const OrderCost &a, const OrderCost &b) {
                     return a.seconds < b.seconds - 1e-15;
                   });
  return out;
}

int64_t meshfold::decodeStepRows(const MeshLayout &layout, int64_t batch) {
  int64_t cp = layout.axisSize("cp"), tp = layout.axisSize("tp");
  int64_t perRank = (std::max<int64_t>(batch, 1) + cp - 1) / cp;
  return (perRank + tp - 1) / tp * tp;
}

double meshfold::passQBytes(const MeshLayout &layout, int64_t numHeads,
                            int64_t headDim, int64_t rows) {
  int64_t cp = layout.axisSize("cp"), tp = layout.axisSize("tp");
  if (cp == 1)
    return 0;
  double r = double(rows), heads = double(numHeads / tp), d = double(headDim);
  return double(cp - 1) * (r * heads * (2 * d + 1) * 4 + r * 8) +
         r * heads * d * 4 + r * 8;
}

double meshfold::passKVBytes(const MeshLayout &layout, int64_t numKVHeads,
                             int64_t headDim, double cached, int64_t copies) {
  int64_t cp = layout.axisSize("cp"), tp = layout.axisSize("tp");
  if (cp == 1)
    return 0;
  double share = cached / double(cp);
  double kvHeads = double(kvHeadsPerRank(numKVHeads, tp));
  return double(cp - 1) *
         (share * kvHeads * double(copies) * double(headDim) * 4 + share * 8);
}
