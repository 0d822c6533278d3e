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

void mfrt::randomExperts(uint64_t seed, int64_t request, int64_t position,
                         int64_t layer, int64_t numExperts, int64_t k,
                         int64_t *out) {
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
    return std::make_tuple(h.layer, h.op, h.from, h.to, h.kind);
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
  for (size_t a = 0; a < hops.size();) {
    size_t b = a;
    while (b < hops.size() && hops[b].layer == hops[a].layer &&
           hops[b].op == hops[a].op)
      ++b;
    TraceStep step;
    const mfrt_op_kind kind = mfrt_op_kind(hops[a].kind);
    bool after = kind == MFRT_OP_PP || kind == MFRT_OP_GATHER ||
                 kind == MFRT_OP_ALL_REDUCE;
    step.what = std::string(after ? "after layer " : "layer ") +
                std::to_string(hops[a].layer + 1) + " " +
                mfrt_op_kind_name(kind);
    for (size_t i = a; i < b; ++i) {
      const mfrt_trace_hop &h = hops[i];
      step.hops.push_back(h);
      if (h.from == h.to)
        continue; // used where it is: no move
      if (layout.link(h.from, h.to) == LinkClass::IB) {
        ++log.crossings;
        if (h.kind == MFRT_OP_DISPATCH || h.kind == MFRT_OP_COMBINE)
          ++log.ep;
        else if (h.kind == MFRT_OP_PP)
          ++log.pp;
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

/// "7/32 GPUs (+2, 3, 13), 2 node crossings (2 EP, 0 PP), 5 comm ops".
std::string tally(int64_t gpus, int64_t devices, const std::vector<int> &added,
                  int64_t crossings, int64_t ep, int64_t pp, int64_t other,
                  int64_t ops) {
  std::string out =
      std::to_string(gpus) + "/" + std::to_string(devices) + " GPUs";
  if (!added.empty())
    out += " (+" + joinRanks(added) + ")";
  out += ", " + std::to_string(crossings) + " node crossing" +
         (crossings == 1 ? "" : "s") + " (" + std::to_string(ep) + " EP, " +
         std::to_string(pp) + " PP" +
         (other ? ", " + std::to_string(other) + " other" : "") + "), " +
         std::to_string(ops) + " comm op" + (ops == 1 ? "" : "s");
  return out;
}

/// The whole trip: "23/32 GPUs, 15 node crossings (14 EP, 1 PP), 41 comm
/// ops".
std::string tripTally(const TraceLog &log, int64_t devices) {
  return tally(log.gpus, devices, {}, log.crossings, log.ep, log.pp, log.other,
               log.ops);
}
} // namespace

void mfrt::printTraceLog(const MeshLayout &layout, const TraceLog &log,
                         int64_t replica, int64_t promptTokens) {
  const TraceConfig &c = traceConfig();
  const int64_t devices = layout.numDevices();
  std::printf("trace of request %lld, position %lld (of %lld prompt tokens), "
              "DP replica %lld\n",
              (long long)c.request, (long long)c.position,
              (long long)promptTokens, (long long)replica);
  if (log.landing < 0) {
    std::printf("trip: the token's data was not seen on any GPU\n");
    return;
  }
  std::printf("  %3d  %-26s %-30s %s\n", 0,
              ("lands on GPU " + std::to_string(log.landing) + " (node " +
               std::to_string(layout.node(log.landing)) + ")")
                  .c_str(),
              "", tally(1, devices, {log.landing}, 0, 0, 0, 0, 0).c_str());
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
    std::printf(
        "  %3lld  %-26s %-30s %s\n", (long long)s.ops, s.what.c_str(),
        route.c_str(),
        tally(s.gpus, devices, s.added, s.crossings, s.ep, s.pp, s.other, s.ops)
            .c_str());
  }
  std::printf(
      "K/V of the token kept on GPUs %s\n",
      joinRanks(std::vector<int>(log.kv.begin(), log.kv.end())).c_str());
  std::printf("trip: %s\n", tripTally(log, devices).c_str());
}

bool mfrt::writeTraceSvg(const std::string &path, const MeshLayout &layout,
                         const TraceLog &log, std::string *error) {
  const int64_t gpn = layout.gpusPerNode(), nodes = layout.numNodes();
  const int64_t cols = std::min<int64_t>(gpn, 4),
                rows = (gpn + cols - 1) / cols;
  const int64_t perRow = std::min<int64_t>(nodes, 2);
  const double pitch = 84, radius = 17, pad = 26, gap = 44, top = 64;
  const double nodeW = double(cols) * pitch + 2 * pad;
  const double nodeH = double(rows) * pitch + 2 * pad + 18;
  const int64_t nodeRows = (nodes + perRow - 1) / perRow;
  const double width = double(perRow) * (nodeW + gap) + gap;
  const double height = top + double(nodeRows) * (nodeH + gap) + 90;
  auto nodeX = [&](int64_t n) {
    return gap + double(n % perRow) * (nodeW + gap);
  };
  auto nodeY = [&](int64_t n) {
    return top + double(n / perRow) * (nodeH + gap);
  };
  auto gpuX = [&](int64_t g) {
    return nodeX(layout.node(g)) + pad + pitch / 2 +
           double(layout.localIndex(g) % cols) * pitch;
  };
  auto gpuY = [&](int64_t g) {
    return nodeY(layout.node(g)) + pad + 18 + pitch / 2 +
           double(layout.localIndex(g) / cols) * pitch;
  };

  std::ostringstream svg;
  svg.setf(std::ios::fixed);
  svg.precision(1);
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width
      << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " "
      << height << "\" font-family=\"sans-serif\">\n";
  svg << "<title>meshfold token trace</title>\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  svg << "<defs>\n";
  for (auto [id, color] :
       {std::pair<const char *, const char *>{"nvlink", "#1f6fb4"},
        {"ib", "#d9480f"}})
    svg << "<marker id=\"arrow-" << id
        << "\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"9\" "
           "markerHeight=\"9\" markerUnits=\"userSpaceOnUse\" "
           "orient=\"auto-start-reverse\"><path d=\"M 0 0 "
           "L 10 5 L 0 10 z\" fill=\""
        << color << "\"/></marker>\n";
  svg << "</defs>\n";
  const TraceConfig &c = traceConfig();
  svg << "<text x=\"" << gap << "\" y=\"28\" font-size=\"18\">request "
      << c.request << ", position " << c.position << ": "
      << tripTally(log, layout.numDevices()) << "</text>\n";

  // Nodes and GPUs.
  for (int64_t n = 0; n < nodes; ++n) {
    svg << "<rect class=\"node\" x=\"" << nodeX(n) << "\" y=\"" << nodeY(n)
        << "\" width=\"" << nodeW << "\" height=\"" << nodeH
        << "\" rx=\"10\" fill=\"#f3f5f7\" stroke=\"#8a96a3\"/>\n";
    svg << "<text x=\"" << nodeX(n) + pad << "\" y=\"" << nodeY(n) + 22
        << "\" font-size=\"14\" fill=\"#44505c\">node " << n << "</text>\n";
  }
  for (int64_t g = 0; g < layout.numDevices(); ++g) {
    bool held = log.held.count(int(g)) != 0;
    svg << "<circle class=\"gpu\" cx=\"" << gpuX(g) << "\" cy=\"" << gpuY(g)
        << "\" r=\"" << radius << "\" fill=\"" << (held ? "#ffe58a" : "#ffffff")
        << "\" stroke=\"#5b6670\" stroke-width=\"1.2\"/>\n";
    if (log.kv.count(int(g)))
      svg << "<circle class=\"kv\" cx=\"" << gpuX(g) << "\" cy=\"" << gpuY(g)
          << "\" r=\"" << radius + 4
          << "\" fill=\"none\" stroke=\"#2f9e44\" stroke-width=\"3\"/>\n";
    if (g == log.landing)
      svg << "<circle class=\"landing\" cx=\"" << gpuX(g) << "\" cy=\""
          << gpuY(g) << "\" r=\"" << radius - 4
          << "\" fill=\"none\" stroke=\"#7048e8\" stroke-width=\"2.5\"/>\n";
    svg << "<text x=\"" << gpuX(g) << "\" y=\"" << gpuY(g) + 4
        << "\" font-size=\"12\" text-anchor=\"middle\">" << g << "</text>\n";
  }

  // Hops: one curve per (from, to) pair, bent to its left so that the two
  // directions stay apart, labelled with the comm ops (travel-log numbers)
  // that took it.
  std::map<std::pair<int, int>, std::string> edges;
  for (const TraceStep &s : log.steps)
    for (const mfrt_trace_hop &h : s.hops) {
      std::string &label = edges[{h.from, h.to}];
      label += (label.empty() ? "" : ",") + std::to_string(s.ops);
    }
  for (const auto &[pair, label] : edges) {
    mfrt_trace_hop h{0, 0, 0, pair.first, pair.second};
    {
      double x1 = gpuX(h.from), y1 = gpuY(h.from), x2 = gpuX(h.to),
             y2 = gpuY(h.to);
      double dx = x2 - x1, dy = y2 - y1, len = std::hypot(dx, dy);
      if (len < 1)
        continue;
      // Start and end on the circles' rims.
      double ux = dx / len, uy = dy / len;
      x1 += ux * radius;
      y1 += uy * radius;
      x2 -= ux * (radius + 2);
      y2 -= uy * (radius + 2);
      double bend = std::min(40.0, 10 + len * 0.12);
      double cx = (x1 + x2) / 2 - uy * bend, cy = (y1 + y2) / 2 + ux * bend;
      bool ib = layout.link(h.from, h.to) == LinkClass::IB;
      svg << "<path class=\"" << (ib ? "hop-ib" : "hop-nvlink") << "\" d=\"M "
          << x1 << " " << y1 << " Q " << cx << " " << cy << " " << x2 << " "
          << y2 << "\" fill=\"none\" stroke=\"" << (ib ? "#d9480f" : "#1f6fb4")
          << "\" stroke-width=\"" << (ib ? 2.6 : 1.6) << "\""
          << (ib ? " stroke-dasharray=\"7 4\"" : "") << " marker-end=\"url(#"
          << (ib ? "arrow-ib" : "arrow-nvlink") << ")\"/>\n";
      double mx = 0.25 * x1 + 0.5 * cx + 0.25 * x2,
             my = 0.25 * y1 + 0.5 * cy + 0.25 * y2;
      svg << "<text x=\"" << mx << "\" y=\"" << my + 3
          << "\" font-size=\"10\" text-anchor=\"middle\" fill=\"#222\" "
             "stroke=\"#ffffff\" stroke-width=\"3\" paint-order=\"stroke\">"
          << label << "</text>\n";
    }
  }

  // Legend.
  double ly = height - 60;
  svg << "<line x1=\"" << gap << "\" y1=\"" << ly << "\" x2=\"" << gap + 40
      << "\" y2=\"" << ly
      << "\" stroke=\"#1f6fb4\" stroke-width=\"1.6\"/><text x=\"" << gap + 48
      << "\" y=\"" << ly + 4 << "\" font-size=\"13\">NVLink hop</text>\n";
  svg << "<line x1=\"" << gap + 160 << "\" y1=\"" << ly << "\" x2=\""
      << gap + 200 << "\" y2=\"" << ly
      << "\" stroke=\"#d9480f\" stroke-width=\"2.6\" "
         "stroke-dasharray=\"7 4\"/><text x=\""
      << gap + 208 << "\" y=\"" << ly + 4
      << "\" font-size=\"13\">IB hop (node crossing)</text>\n";
  svg << "<circle cx=\"" << gap + 400 << "\" cy=\"" << ly << "\" r=\"9\" "
      << "fill=\"#ffe58a\" stroke=\"#5b6670\"/><text x=\"" << gap + 414
      << "\" y=\"" << ly + 4 << "\" font-size=\"13\">held its data</text>\n";
  svg << "<circle cx=\"" << gap + 540 << "\" cy=\"" << ly << "\" r=\"9\" "
      << "fill=\"none\" stroke=\"#2f9e44\" stroke-width=\"3\"/><text x=\""
      << gap + 554 << "\" y=\"" << ly + 4
      << "\" font-size=\"13\">keeps its K/V</text>\n";
  svg << "<text x=\"" << gap << "\" y=\"" << ly + 30
      << "\" font-size=\"12\" fill=\"#44505c\">numbers on the hops: the comm "
         "op of the travel log</text>\n";
  svg << "</svg>\n";

  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << svg.str();
    if (!out.good()) {
      *error = "--trace-svg " + path + ": cannot write the file";
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = "--trace-svg " + path + ": cannot write the file";
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}
