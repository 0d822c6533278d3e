//===- Trace.cpp - one token's journey, and the routing hooks -------------===//

#include "mfrt/program/Trace.h"
#include "meshfold/Support/Text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

using namespace mfrt;
using meshfold::LinkClass;
using meshfold::MeshLayout;
using meshfold::parseUnsignedInt;

TraceConfig &mfrt::traceConfig() {
  static TraceConfig config;
  return config;
}

TraceSightings &mfrt::traceSightings() {
  static TraceSightings sightings;
  return sightings;
}

namespace {
uint64_t splitmix(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
} // namespace

bool mfrt::parseTraceToken(const std::string &text, int64_t &request,
                           int64_t &position, std::string *error) {
  size_t colon = text.find(':');
  if (colon == std::string::npos ||
      !parseUnsignedInt(text.substr(0, colon), request) ||
      !parseUnsignedInt(text.substr(colon + 1), position)) {
    *error = "--trace-token must be REQUEST:POSITION (0-based numbers, e.g. "
             "2:40), got '" +
             text + "'";
    return false;
  }
  return true;
}

bool mfrt::parseRoutingFile(const std::string &path, int64_t numLayers,
                            int64_t numExperts, int64_t topK,
                            std::map<int64_t, std::vector<int64_t>> &forced,
                            std::string *error) {
  std::ifstream in(path);
  if (!in) {
    *error = "--force-routing " + path + ": cannot read the file";
    return false;
  }
  std::string line;
  for (int64_t lineNo = 1; std::getline(in, line); ++lineNo) {
    std::string where = path + ":" + std::to_string(lineNo) + ": ";
    if (size_t hash = line.find('#'); hash != std::string::npos)
      line.resize(hash);
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    size_t colon = line.find(':');
    std::istringstream head(colon == std::string::npos ? ""
                                                       : line.substr(0, colon));
    std::string layerText, extra;
    head >> layerText >> extra;
    int64_t layer = 0;
    if (colon == std::string::npos || !extra.empty() ||
        !parseUnsignedInt(layerText, layer)) {
      *error = where + "expected 'LAYER: E1 .. E" + std::to_string(topK) +
               "' (layers from 1), got '" + line + "'";
      return false;
    }
    if (layer < 1 || layer > numLayers) {
      *error = where + "layer " + std::to_string(layer) +
               " is outside the model's layers 1.." + std::to_string(numLayers);
      return false;
    }
    if (forced.count(layer - 1)) {
      *error = where + "layer " + std::to_string(layer) + " is given twice";
      return false;
    }
    std::istringstream rest(line.substr(colon + 1));
    std::vector<int64_t> experts;
    for (std::string word; rest >> word;) {
      int64_t e = 0;
      if (!parseUnsignedInt(word, e) || e >= numExperts) {
        *error = where + "expert '" + word + "' is not an expert id 0.." +
                 std::to_string(numExperts - 1);
        return false;
      }
      if (std::find(experts.begin(), experts.end(), e) != experts.end()) {
        *error = where + "expert " + word + " is chosen twice";
        return false;
      }
      experts.push_back(e);
    }
    if (int64_t(experts.size()) != topK) {
      *error = where + "layer " + std::to_string(layer) + " lists " +
               std::to_string(experts.size()) +
               " experts, but the model routes each token to top_k = " +
               std::to_string(topK);
      return false;
    }
    forced[layer - 1] = std::move(experts);
  }
  return true;
}

namespace {
/// k distinct experts drawn without replacement, expert order[r] with
/// weight 1 / (r + 1)^s, from `state`.
void zipfExperts(uint64_t &state, const std::vector<int64_t> &order, double s,
                 int64_t k, int64_t *out) {
  std::vector<double> weight(order.size());
  double total = 0;
  for (size_t r = 0; r < order.size(); ++r)
    total += weight[r] = 1.0 / std::pow(double(r + 1), s);
  for (int64_t j = 0; j < k && j < int64_t(order.size()); ++j) {
    double u = double(splitmix(state) >> 11) * 0x1.0p-53 * total;
    size_t pick = 0;
    while (pick + 1 < order.size() && (weight[pick] == 0 || u >= weight[pick]))
      u -= weight[pick++];
    while (weight[pick] == 0) // rounding at the end: the last one left
      --pick;
    out[j] = order[pick];
    total -= weight[pick];
    weight[pick] = 0;
  }
}
} // namespace

void mfrt::randomExperts(uint64_t seed, int64_t request, int64_t position,
                         int64_t layer, int64_t numExperts, int64_t k,
                         int64_t *out, double zipf) {
  if (zipf > 0) {
    // The layer's order of the experts (which ones are hot), then the
    // token's draw.
    uint64_t layerState = seed ^ (uint64_t(layer) * 0x9e3779b97f4a7c15ULL);
    std::vector<int64_t> order(static_cast<size_t>(numExperts));
    for (int64_t e = 0; e < numExperts; ++e)
      order[size_t(e)] = e;
    for (int64_t e = numExperts - 1; e > 0; --e)
      std::swap(order[size_t(e)],
                order[size_t(splitmix(layerState) % uint64_t(e + 1))]);
    uint64_t state = seed;
    for (int64_t v : {request, position, layer}) {
      state ^= uint64_t(v) + 0x632be59bd9b4e019ULL;
      (void)splitmix(state);
    }
    zipfExperts(state, order, zipf, k, out);
    return;
  }
  uint64_t state = seed;
  for (int64_t v : {request, position, layer}) {
    state ^= uint64_t(v) + 0x632be59bd9b4e019ULL;
    (void)splitmix(state);
  }
  // A partial Fisher-Yates shuffle: k distinct experts, uniformly.
  std::vector<int64_t> pool(static_cast<size_t>(numExperts));
  for (int64_t e = 0; e < numExperts; ++e)
    pool[size_t(e)] = e;
  for (int64_t j = 0; j < k && j < numExperts; ++j) {
    int64_t pick = j + int64_t(splitmix(state) % uint64_t(numExperts - j));
    std::swap(pool[size_t(j)], pool[size_t(pick)]);
    out[j] = pool[size_t(j)];
  }
}

TraceLog mfrt::buildTraceLog(const MeshLayout &layout,
                             std::vector<mfrt_trace_hop> hops, int landing,
                             const std::set<int> &kv) {
  auto key = [](const mfrt_trace_hop &h) {
    // A program of two pools: the K/V transfer's hops after the trip's.
    return std::make_tuple(h.kind == MFRT_OP_KV_TRANSFER, h.layer, h.op, h.from,
                           h.to, h.kind);
  };
  std::sort(hops.begin(), hops.end(),
            [&](const auto &a, const auto &b) { return key(a) < key(b); });
  hops.erase(std::unique(hops.begin(), hops.end(),
                         [&](const auto &a, const auto &b) {
                           return key(a) == key(b);
                         }),
             hops.end());
  TraceLog log;
  log.landing = landing;
  log.kv = kv;
  if (landing >= 0)
    log.held.insert(landing);
  auto sameStep = [](const mfrt_trace_hop &a, const mfrt_trace_hop &b) {
    return a.layer == b.layer && a.op == b.op && a.kind == b.kind;
  };
  // The last layer whose combine the token went through: an all-reduce
  // after it is the LM head's; one before it a narrowed layer's own.
  int64_t combined = -1;
  for (size_t a = 0; a < hops.size();) {
    size_t b = a;
    while (b < hops.size() && sameStep(hops[b], hops[a]))
      ++b;
    TraceStep step;
    const mfrt_op_kind kind = mfrt_op_kind(hops[a].kind);
    if (kind == MFRT_OP_COMBINE)
      combined = hops[a].layer;
    bool after = kind == MFRT_OP_PP || kind == MFRT_OP_GATHER ||
                 (kind == MFRT_OP_ALL_REDUCE && hops[a].layer == combined);
    step.what = std::string(after ? "after layer " : "layer ") +
                std::to_string(hops[a].layer + 1) + " " +
                mfrt_op_kind_name(kind);
    for (size_t i = a; i < b; ++i) {
      const mfrt_trace_hop &h = hops[i];
      step.hops.push_back(h);
      if (h.kind == MFRT_OP_KV_TRANSFER)
        log.kvKept.insert(h.to);
      if (h.from == h.to)
        continue; // used where it is: no move
      if (layout.link(h.from, h.to) == LinkClass::IB) {
        ++log.crossings;
        if (h.kind == MFRT_OP_DISPATCH || h.kind == MFRT_OP_COMBINE)
          ++log.ep;
        else if (h.kind == MFRT_OP_PP)
          ++log.pp;
        else if (h.kind == MFRT_OP_KV_TRANSFER)
          ++log.transfer;
        else
          ++log.other;
      }
      if (log.held.insert(h.to).second)
        step.added.push_back(h.to);
    }
    std::sort(step.added.begin(), step.added.end());
    // In the order the data went: a hop out of a GPU that another hop of
    // this op reached comes after it (11=>3 before 3->2).
    std::vector<int> level(step.hops.size(), 0);
    for (size_t round = 0; round < step.hops.size(); ++round)
      for (size_t i = 0; i < step.hops.size(); ++i)
        for (size_t j = 0; j < step.hops.size(); ++j)
          if (step.hops[j].to == step.hops[i].from && i != j)
            level[i] = std::max(level[i], level[j] + 1);
    std::vector<size_t> order(step.hops.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t x, size_t y) { return level[x] < level[y]; });
    std::vector<mfrt_trace_hop> ordered;
    for (size_t i : order)
      ordered.push_back(step.hops[i]);
    step.hops = std::move(ordered);
    ++log.ops;
    step.gpus = int64_t(log.held.size());
    step.crossings = log.crossings;
    step.ep = log.ep;
    step.pp = log.pp;
    step.other = log.other;
    step.transfer = log.transfer;
    step.ops = log.ops;
    log.steps.push_back(std::move(step));
    a = b;
  }
  log.gpus = int64_t(log.held.size());
  return log;
}

namespace {
std::string joinRanks(const std::vector<int> &ranks) {
  std::string out;
  for (int r : ranks)
    out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

/// "7/32 GPUs (+2, 3, 13), 2 node crossings (2 EP, 0 PP), 5 comm ops" for
/// the figures of `t` (a step, or the whole log).
template <typename Tally>
std::string tally(const Tally &t, int64_t gpus, int64_t devices,
                  const std::vector<int> &added) {
  std::string out =
      std::to_string(gpus) + "/" + std::to_string(devices) + " GPUs";
  if (!added.empty())
    out += " (+" + joinRanks(added) + ")";
  out +=
      ", " + std::to_string(t.crossings) + " node crossing" +
      (t.crossings == 1 ? "" : "s") + " (" + std::to_string(t.ep) + " EP, " +
      std::to_string(t.pp) + " PP" +
      (t.other ? ", " + std::to_string(t.other) + " other" : "") +
      (t.transfer ? ", " + std::to_string(t.transfer) + " K/V transfer" : "") +
      "), " + std::to_string(t.ops) + " comm op" + (t.ops == 1 ? "" : "s");
  return out;
}

} // namespace

std::string mfrt::tripTally(const TraceLog &log, int64_t devices) {
  return tally(log, log.gpus, devices, {});
}

void mfrt::printTraceLog(const MeshLayout &layout, const TraceLog &log,
                         int64_t replica, int64_t promptTokens,
                         int64_t decodeBase, int64_t narrowedLayer,
                         const std::string &removed) {
  const TraceConfig &c = traceConfig();
  const int64_t devices = layout.numDevices();
  std::string pool;
  if (decodeBase > 0)
    pool = log.landing >= decodeBase ? " of the decode pool"
                                     : " of the prefill pool";
  if (c.position < promptTokens)
    std::printf("trace of request %lld, position %lld (of %lld prompt "
                "tokens), DP replica %lld%s\n",
                (long long)c.request, (long long)c.position,
                (long long)promptTokens, (long long)replica, pool.c_str());
  else
    std::printf("trace of request %lld, position %lld (generated token %lld, "
                "after %lld prompt tokens), DP replica %lld%s\n",
                (long long)c.request, (long long)c.position,
                (long long)(c.position - promptTokens + 1),
                (long long)promptTokens, (long long)replica, pool.c_str());
  if (log.landing < 0) {
    std::printf("trip: the token's data was not seen on any GPU\n");
    return;
  }
  std::printf("  %3d  %-26s %-30s %s\n", 0,
              ("lands on GPU " + std::to_string(log.landing) + " (node " +
               std::to_string(layout.node(log.landing)) + ")")
                  .c_str(),
              "", tally(TraceStep(), 1, devices, {log.landing}).c_str());
  for (const TraceStep &s : log.steps) {
    // NVLink hops as a->b, IB hops as a=>b.
    std::string route;
    for (const mfrt_trace_hop &h : s.hops)
      route +=
          (route.empty() ? "" : " ") + std::to_string(h.from) +
          (h.from == h.to
               ? std::string(" (local)")
               : (layout.link(h.from, h.to) == LinkClass::IB ? "=>" : "->") +
                     std::to_string(h.to));
    std::printf("  %3lld  %-26s %-30s %s\n", (long long)s.ops, s.what.c_str(),
                route.c_str(), tally(s, s.gpus, devices, s.added).c_str());
  }
  if (narrowedLayer >= 0 && c.position < promptTokens - 1)
    std::printf("layer %lld computes position %lld only: no query, attention "
                "or MoE for this position there (removed: %s)\n",
                (long long)narrowedLayer + 1, (long long)promptTokens - 1,
                removed.c_str());
  std::string kv = joinRanks(std::vector<int>(log.kv.begin(), log.kv.end()));
  if (log.kvKept.empty())
    std::printf("K/V of the token kept on GPUs %s\n", kv.c_str());
  else
    std::printf(
        "K/V of the token recorded on GPUs %s, sent layer by layer to "
        "the decode pool, kept there on GPUs %s\n",
        kv.c_str(),
        joinRanks(std::vector<int>(log.kvKept.begin(), log.kvKept.end()))
            .c_str());
  std::printf("trip: %s\n", tripTally(log, devices).c_str());
}
