//===- TraceMap.cpp - The traced token's route as an SVG map --------------===//
//
// Nodes as boxes of GPUs, the GPUs that held the token's data filled, those
// that keep its K/V ringed, the landing GPU marked; one curve per hop (NVLink
// solid, IB dashed) labelled with the travel log's comm-op numbers.
//
//===----------------------------------------------------------------------===//

#include "mfrt/io/Json.h"
#include "mfrt/program/Trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

using namespace mfrt;
using meshfold::LinkClass;
using meshfold::MeshLayout;

namespace {

/// The map's geometry and the SVG it writes, part by part.
class TraceMap {
public:
  TraceMap(const MeshLayout &layout, const TraceLog &log, int64_t decodeBase)
      : layout(layout), log(log), decodeBase(decodeBase),
        gpn(layout.gpusPerNode()), nodes(layout.numNodes()),
        cols(std::min<int64_t>(gpn, 4)), rows((gpn + cols - 1) / cols),
        perRow(std::min<int64_t>(nodes, 2)),
        nodeW(double(cols) * pitch + 2 * pad),
        nodeH(double(rows) * pitch + 2 * pad + 18),
        width(double(perRow) * (nodeW + gap) + gap),
        height(top + double((nodes + perRow - 1) / perRow) * (nodeH + gap) +
               90) {
    svg.setf(std::ios::fixed);
    svg.precision(1);
  }

  std::string render() {
    writeHeader();
    writeNodesAndGpus();
    writeHops();
    writeLegend();
    svg << "</svg>\n";
    return svg.str();
  }

private:
  static constexpr double pitch = 84, radius = 17, pad = 26, gap = 44, top = 64;

  double nodeX(int64_t n) const {
    return gap + double(n % perRow) * (nodeW + gap);
  }
  double nodeY(int64_t n) const {
    return top + double(n / perRow) * (nodeH + gap);
  }
  double gpuX(int64_t g) const {
    return nodeX(layout.node(g)) + pad + pitch / 2 +
           double(layout.localIndex(g) % cols) * pitch;
  }
  double gpuY(int64_t g) const {
    return nodeY(layout.node(g)) + pad + 18 + pitch / 2 +
           double(layout.localIndex(g) / cols) * pitch;
  }

  /// The root element, the arrow markers and the title line.
  void writeHeader() {
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
    // Two pools' trips have more to say in the title.
    svg << "<text x=\"" << gap << "\" y=\"28\" font-size=\""
        << (decodeBase > 0 ? 15 : 18) << "\">request " << c.request
        << ", position " << c.position << ": "
        << tripTally(log, layout.numDevices()) << "</text>\n";
  }

  /// The nodes' boxes, then every GPU: filled if it held the token's data,
  /// ringed if it keeps its K/V, marked if the token landed there.
  void writeNodesAndGpus() {
    for (int64_t n = 0; n < nodes; ++n) {
      svg << "<rect class=\"node\" x=\"" << nodeX(n) << "\" y=\"" << nodeY(n)
          << "\" width=\"" << nodeW << "\" height=\"" << nodeH
          << "\" rx=\"10\" fill=\"#f3f5f7\" stroke=\"#8a96a3\"/>\n";
      svg << "<text x=\"" << nodeX(n) + pad << "\" y=\"" << nodeY(n) + 22
          << "\" font-size=\"14\" fill=\"#44505c\">node " << n;
      if (decodeBase > 0)
        svg << (n * gpn >= decodeBase ? " (decode pool)" : " (prefill pool)");
      svg << "</text>\n";
    }
    for (int64_t g = 0; g < layout.numDevices(); ++g) {
      bool held = log.held.count(int(g)) != 0;
      svg << "<circle class=\"gpu\" cx=\"" << gpuX(g) << "\" cy=\"" << gpuY(g)
          << "\" r=\"" << radius << "\" fill=\""
          << (held ? "#ffe58a" : "#ffffff")
          << "\" stroke=\"#5b6670\" stroke-width=\"1.2\"/>\n";
      if (log.kv.count(int(g)) || log.kvKept.count(int(g)))
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
  }

  /// Hops: one curve per (from, to) pair, bent to its left so that the two
  /// directions stay apart, labelled with the comm ops (travel-log numbers)
  /// that took it.
  void writeHops() {
    std::map<std::pair<int, int>, std::string> edges;
    for (const TraceStep &s : log.steps)
      for (const mfrt_trace_hop &h : s.hops) {
        std::string &label = edges[{h.from, h.to}];
        label += (label.empty() ? "" : ",") + std::to_string(s.ops);
      }
    for (const auto &[pair, label] : edges)
      writeHop(pair.first, pair.second, label);
  }

  void writeHop(int from, int to, const std::string &label) {
    double x1 = gpuX(from), y1 = gpuY(from), x2 = gpuX(to), y2 = gpuY(to);
    double dx = x2 - x1, dy = y2 - y1, len = std::hypot(dx, dy);
    if (len < 1)
      return;
    // Start and end on the circles' rims.
    double ux = dx / len, uy = dy / len;
    x1 += ux * radius;
    y1 += uy * radius;
    x2 -= ux * (radius + 2);
    y2 -= uy * (radius + 2);
    double bend = std::min(40.0, 10 + len * 0.12);
    double cx = (x1 + x2) / 2 - uy * bend, cy = (y1 + y2) / 2 + ux * bend;
    bool ib = layout.link(from, to) == LinkClass::IB;
    svg << "<path class=\"" << (ib ? "hop-ib" : "hop-nvlink") << "\" d=\"M "
        << x1 << " " << y1 << " Q " << cx << " " << cy << " " << x2 << " " << y2
        << "\" fill=\"none\" stroke=\"" << (ib ? "#d9480f" : "#1f6fb4")
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

  void writeLegend() {
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
  }

  const MeshLayout &layout;
  const TraceLog &log;
  const int64_t decodeBase;
  const int64_t gpn, nodes, cols, rows, perRow;
  const double nodeW, nodeH, width, height;
  std::ostringstream svg;
};

} // namespace

bool mfrt::writeTraceSvg(const std::string &path, const MeshLayout &layout,
                         const TraceLog &log, int64_t decodeBase,
                         std::string *error) {
  std::string detail;
  if (writeWholeFile(path, TraceMap(layout, log, decodeBase).render(), detail))
    return true;
  *error = "--trace-svg " + path + ": cannot write the file";
  return false;
}
