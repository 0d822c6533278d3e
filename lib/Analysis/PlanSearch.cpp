//===- PlanSearch.cpp - the fastest plans that fit ------------------------===//

#include "meshfold/Analysis/PlanSearch.h"
#include "meshfold/Analysis/ExplainOrder.h"

#include "llvm/Support/Format.h"

#include <algorithm>
#include <map>
#include <tuple>

using namespace mlir;
using namespace meshfold;

double meshfold::layerFlops(const moe::ModelInfo &m, const PlanFlags &f,
                            double tokens) {
  const double tp = double(f.tp), cp = double(f.cp);
  const double d = double(m.hidden), dh = double(m.headDim);
  const double heads = double(m.numHeads) / tp;
  const double kvLocal = double(kvHeadsPerRank(m.numKVHeads, f.tp));
  // Attention rows per rank (CP splits the prompt, TP the heads); MoE rows
  // per rank (SP splits them over TP too).
  const double rows = tokens / cp, moeRows = tokens / (cp * tp);
  const double linear = 2 * rows * d * dh * (2 * heads + 2 * kvLocal);
  // Scores and their product with V, over half the keys (causal).
  const double core = 2 * 2 * rows * (tokens / 2) * heads * dh;
  const double router = 2 * moeRows * d * double(m.numExperts);
  // Uniform routing: each GPU computes its rows' k experts' worth.
  const double experts = 2 * 3 * d * double(m.ffn) * double(m.topK) * moeRows;
  return linear + core + router + experts;
}

namespace {

/// Every way to write `n` as an ordered product of `parts` factors.
void factorizations(int64_t n, int parts, std::vector<int64_t> &prefix,
                    std::vector<std::vector<int64_t>> &out) {
  if (parts == 1) {
    prefix.push_back(n);
    out.push_back(prefix);
    prefix.pop_back();
    return;
  }
  for (int64_t f = 1; f <= n; ++f)
    if (n % f == 0) {
      prefix.push_back(f);
      factorizations(n / f, parts - 1, prefix, out);
      prefix.pop_back();
    }
}

std::vector<std::vector<int64_t>> factorizations(int64_t n, int parts) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> prefix;
  factorizations(n, parts, prefix, out);
  return out;
}

/// A lower bound of a rank's bytes under `f`: its layers' weights and K/V
/// (embeddings, padding and activations left out), to drop plans that
/// cannot fit before they are partitioned.
double lowerBoundBytes(const moe::ModelInfo &m, const PlanFlags &f,
                       double tokens, double bytes) {
  const double d = double(m.hidden), dh = double(m.headDim);
  const double kvLocal = double(kvHeadsPerRank(m.numKVHeads, f.tp));
  const double attention =
      2 * d * dh * (double(m.numHeads) / double(f.tp) + kvLocal);
  const double experts =
      double(m.numExperts / f.ep) * 3 * d * double(m.ffn / f.etp);
  const double kv =
      double(m.kvCopies()) * (tokens / double(f.cp)) * kvLocal * dh;
  return (attention + experts + kv) * double(m.numLayers / f.pp) * bytes;
}

/// Traffic rows summed over every collective on one link class.
double linkTotal(const std::vector<TrafficRow> &rows, bool ib) {
  double total = 0;
  for (const TrafficRow &r : rows)
    total += ib ? r.ib : r.nvlink;
  return total;
}

/// Traffic rows summed over the collectives `names` on one link class.
double sumRows(const std::vector<TrafficRow> &rows,
               std::initializer_list<const char *> names, bool ib) {
  double total = 0;
  for (const TrafficRow &r : rows)
    for (const char *n : names)
      if (r.collective == n)
        total += ib ? r.ib : r.nvlink;
  return total;
}

std::string sizes(const PlanFlags &f) {
  std::string s = "TP" + std::to_string(f.tp) + " CP" + std::to_string(f.cp) +
                  " DP" + std::to_string(f.dp) + " PP" + std::to_string(f.pp);
  return s;
}

std::string expertSizes(const PlanFlags &f) {
  std::string s;
  for (const std::string name : {"etp", "ep", "edp"}) {
    int64_t size = name == "etp" ? f.etp : name == "ep" ? f.ep : f.edp;
    if (size > 1 || name == "ep") {
      std::string upper = name;
      for (char &c : upper)
        c = char(std::toupper(c));
      s += (s.empty() ? "" : " x ") + upper + std::to_string(size);
    }
  }
  return s;
}

/// The sizes a search keeps fixed allow `size` (0: any).
bool fixedOk(int64_t fixed, int64_t size) {
  return fixed == 0 || fixed == size;
}

/// The candidates of a search, before their memory is known: each plan's
/// sizes that pass the rules and may fit, once per axis order, with the
/// counts its errors report.
class PlanEnumerator {
public:
  PlanEnumerator(const moe::ModelInfo &model, const PlanSearchOptions &o)
      : model(model), o(o), tokens(double(o.maxPrompt)),
        bytes(double(o.bytesPerElement)),
        traffic(trafficModelInput(model, o.hierarchical)),
        scale(tokens * double(model.hidden) * bytes / 1e9) {}

  /// Every split of the GPUs into attention and expert sizes that the
  /// fixed sizes allow.
  void enumerate();

  std::vector<PlanCandidate> all;
  /// Sizes that make a mesh, and of those the ones that pass the model's
  /// rules; the first rule broken.
  int64_t sized = 0, passRules = 0;
  std::string firstRule;

private:
  void considerSizes(const PlanFlags &f);
  void addOrders(const PlanFlags &f);

  const moe::ModelInfo &model;
  const PlanSearchOptions &o;
  const double tokens, bytes;
  TrafficModelInput traffic;
  const double scale;
};

void PlanEnumerator::enumerate() {
  for (const std::vector<int64_t> &a : factorizations(o.gpus, 4)) {
    PlanFlags f;
    f.tp = a[0];
    f.cp = a[1];
    f.dp = a[2];
    f.pp = a[3];
    f.gpusPerNode = o.gpusPerNode;
    if (!fixedOk(o.fixed.tp, f.tp) || !fixedOk(o.fixed.cp, f.cp) ||
        !fixedOk(o.fixed.dp, f.dp) || !fixedOk(o.fixed.pp, f.pp))
      continue;
    for (const std::vector<int64_t> &e :
         factorizations(f.tp * f.cp * f.dp, 3)) {
      f.etp = e[0];
      f.ep = e[1];
      f.edp = e[2];
      if (!fixedOk(o.fixed.etp, f.etp) || !fixedOk(o.fixed.ep, f.ep) ||
          !fixedOk(o.fixed.edp, f.edp))
        continue;
      considerSizes(f);
    }
  }
}

/// Counts the sizes `f` where they make a mesh and pass the rules, and adds
/// their orders unless their weights and K/V alone cannot fit.
void PlanEnumerator::considerSizes(const PlanFlags &f) {
  PlanSpec spec;
  std::string why;
  if (!PlanSpec::fromFlags(f, spec, &why))
    return;
  std::optional<MeshLayout> layout = MeshLayout::create(spec, &why);
  if (!layout)
    return;
  ++sized;
  why = layout->checkModel(moe::modelDims(model));
  if (!why.empty()) {
    if (firstRule.empty())
      firstRule = why;
    return;
  }
  ++passRules;
  if (o.deviceBytes > 0 &&
      lowerBoundBytes(model, f, tokens, bytes) > double(o.deviceBytes))
    return;
  addOrders(f);
}

/// One candidate per axis order of the sizes `f`, timed.
void PlanEnumerator::addOrders(const PlanFlags &f) {
  const double compute = layerFlops(model, f, tokens) / o.flops;
  for (const OrderCost &c : rankOrders(f, traffic, tokens, bytes)) {
    PlanCandidate p;
    p.flags = f;
    p.flags.order = c.order;
    p.flags.expertOrder = c.expertOrder;
    p.expertAxes = c.expertAxes;
    p.rows = c.rows;
    p.computeSeconds = compute;
    p.nvlinkSeconds = linkTotal(c.rows, false) * scale / o.nvlinkGBps;
    p.ibSeconds = linkTotal(c.rows, true) * scale / o.ibGBps;
    p.perPrompt =
        (p.computeSeconds + p.nvlinkSeconds + p.ibSeconds) / double(f.dp);
    all.push_back(std::move(p));
  }
}

/// The first `o.top` of the ranked candidates `all` whose worst rank fits,
/// each with that rank's exact memory (asked once per plan's sizes).
FailureOr<std::vector<PlanCandidate>> pickFitting(
    std::vector<PlanCandidate> &all, const PlanSearchOptions &o,
    const std::function<FailureOr<RankMemory>(const PlanFlags &)> &exactMemory,
    std::string &error) {
  // The exact memory of each plan's sizes, largest rank first.
  std::map<
      std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>,
      std::optional<RankMemory>>
      memory;
  std::vector<PlanCandidate> best;
  for (PlanCandidate &p : all) {
    if (int64_t(best.size()) == o.top)
      break;
    const PlanFlags &f = p.flags;
    auto key = std::make_tuple(f.tp, f.cp, f.dp, f.pp, f.etp, f.ep, f.edp);
    auto it = memory.find(key);
    if (it == memory.end()) {
      PlanSpec spec;
      std::string why;
      if (!PlanSpec::fromFlags(f, spec, &why)) {
        error = why;
        return failure();
      }
      FailureOr<RankMemory> m = exactMemory(f);
      if (failed(m)) {
        error = "cannot partition " + sizes(f) + " (" + expertSizes(f) +
                ") to size its memory";
        return failure();
      }
      std::optional<RankMemory> fits;
      if (o.deviceBytes <= 0 || m->totalBytes() <= o.deviceBytes)
        fits = *m;
      it = memory.emplace(key, fits).first;
    }
    if (!it->second)
      continue;
    p.memory = *it->second;
    best.push_back(p);
  }
  return best;
}

} // namespace

FailureOr<std::vector<PlanCandidate>> meshfold::searchPlans(
    const moe::ModelInfo &model, const PlanSearchOptions &o,
    const std::function<FailureOr<RankMemory>(const PlanFlags &)> &exactMemory,
    std::string &error) {
  PlanEnumerator plans(model, o);
  plans.enumerate();
  if (plans.sized == 0) {
    error = "no plan of " + std::to_string(o.gpus) + " GPUs on nodes of " +
            std::to_string(o.gpusPerNode) +
            " with the sizes given passes the plan rules";
    return failure();
  }
  if (plans.passRules == 0) {
    error = "no plan passes the rules for this model; the first broken: " +
            plans.firstRule;
    return failure();
  }
  std::vector<PlanCandidate> &all = plans.all;
  std::stable_sort(all.begin(), all.end(),
                   [](const PlanCandidate &a, const PlanCandidate &b) {
                     return a.perPrompt < b.perPrompt * (1 - 1e-12);
                   });
  FailureOr<std::vector<PlanCandidate>> best =
      pickFitting(all, o, exactMemory, error);
  if (failed(best))
    return failure();
  if (best->empty()) {
    error = std::to_string(plans.passRules) +
            " plans pass the plan rules, but none fits in " + o.deviceMemory;
    return failure();
  }
  return best;
}

void meshfold::printPlanSuggestions(raw_ostream &os,
                                    const std::vector<PlanCandidate> &plans,
                                    const PlanSearchOptions &o) {
  os << llvm::format("plans for %lld GPUs (%lld per node, NVLink %.0f / IB "
                     "%.0f GB/s, %.0f TFLOP/s each), T = %lld prompt tokens "
                     "per DP replica, %s",
                     (long long)o.gpus, (long long)o.gpusPerNode, o.nvlinkGBps,
                     o.ibGBps, o.flops / 1e12, (long long)o.maxPrompt,
                     o.bytesPerElement == 2 ? "bf16" : "f32");
  if (o.deviceBytes > 0)
    os << llvm::format(", %.1f GB per GPU", double(o.deviceBytes) / 1e9);
  os << "; fastest first by modeled time per layer per prompt (compute + "
        "NVLink + IB, no overlap, over the DP replicas working at once; "
        "traffic in T*d elements per GPU per layer)\n";
  for (size_t i = 0; i < plans.size(); ++i) {
    const PlanCandidate &p = plans[i];
    const PlanFlags &f = p.flags;
    const double nv = linkTotal(p.rows, false);
    const double ib = linkTotal(p.rows, true);
    os << llvm::format(
        "%2zu. %s (order %s), experts %s (order %s): %.3f us/layer/prompt = "
        "(compute %.3f + NVLink %.3f + IB %.3f us) / DP%lld\n",
        i + 1, sizes(f).c_str(), f.order.c_str(), expertSizes(f).c_str(),
        p.expertAxes.c_str(), p.perPrompt * 1e6, p.computeSeconds * 1e6,
        p.nvlinkSeconds * 1e6, p.ibSeconds * 1e6, (long long)f.dp);
    os << llvm::format(
        "    traffic NVLink %.4f, IB %.4f (EP %.4f); memory %.2f GB on rank "
        "%lld (weights %.2f, KV %.2f, activations %.2f)\n",
        nv, ib, sumRows(p.rows, {"dispatch", "combine"}, true),
        double(p.memory.totalBytes()) / 1e9, (long long)p.memory.rank,
        double(p.memory.weightBytes) / 1e9, double(p.memory.kvBytes) / 1e9,
        double(p.memory.activationBytes) / 1e9);
    if (i + 1 == plans.size())
      break;
    // Why it beats the next: the largest of the three savings.
    const PlanCandidate &n = plans[i + 1];
    const double dp = double(f.dp), ndp = double(n.flags.dp);
    const double dc = n.computeSeconds / ndp - p.computeSeconds / dp;
    const double dn = n.nvlinkSeconds / ndp - p.nvlinkSeconds / dp;
    const double di = n.ibSeconds / ndp - p.ibSeconds / dp;
    if (n.perPrompt - p.perPrompt <= 1e-12 * p.perPrompt) {
      os << "    ties with " << i + 2 << ": the same modeled time per prompt\n";
      continue;
    }
    if (di >= dn && di >= dc) {
      const double ep = sumRows(p.rows, {"dispatch", "combine"}, true),
                   nep = sumRows(n.rows, {"dispatch", "combine"}, true);
      os << llvm::format("    beats %zu by %.3f us less over IB per prompt",
                         i + 2, di * 1e6);
      if (std::abs(ep - nep) > 1e-9)
        os << llvm::format(": EP dispatch+combine %.4f T*d per GPU over DP%lld "
                           "vs %.4f over DP%lld",
                           ep, (long long)f.dp, nep, (long long)n.flags.dp);
      else
        os << llvm::format(": %.4f T*d per GPU over DP%lld vs %.4f over DP%lld",
                           ib, (long long)f.dp, linkTotal(n.rows, true),
                           (long long)n.flags.dp);
      os << "\n";
    } else if (dn >= dc) {
      os << llvm::format("    beats %zu by %.3f us less over NVLink per "
                         "prompt: %.4f T*d per GPU over DP%lld vs %.4f over "
                         "DP%lld\n",
                         i + 2, dn * 1e6, nv, (long long)f.dp,
                         linkTotal(n.rows, false), (long long)n.flags.dp);
    } else {
      os << llvm::format(
          "    beats %zu by %.3f us less compute per prompt (a layer shared "
          "by %lld GPUs vs %lld)\n",
          i + 2, dc * 1e6, (long long)(f.tp * f.cp * f.dp),
          (long long)(n.flags.tp * n.flags.cp * n.flags.dp));
    }
  }
}
