//===- MeshLayout.cpp - Group math for the folded meshes ------------------===//
//
// Pure C++17; no LLVM/MLIR dependency (the runtime links this file too).
//
//===----------------------------------------------------------------------===//

#include "meshfold/Support/MeshLayout.h"

#include <cstdint>
#include <limits>
#include <set>
#include <sstream>

using namespace meshfold;

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

/// a * b, saturating at INT64_MAX (sizes are validated to be >= 1 first).
int64_t mulSat(int64_t a, int64_t b) {
  if (a != 0 && b > kInt64Max / a)
    return kInt64Max;
  return a * b;
}

/// Sets *error (if non-null) to "plan rule '<rule>': <what>" and returns false.
bool fail(std::string *error, const char *rule, const std::string &what) {
  if (error)
    *error = std::string("plan rule '") + rule + "': " + what;
  return false;
}

std::string ruleMessage(const char *rule, const std::string &what) {
  std::string msg;
  fail(&msg, rule, what);
  return msg;
}

std::string joinNames(const std::vector<std::string> &names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i ? "," : "") + names[i];
  return out;
}

std::string trim(const std::string &s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos)
    return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

} // namespace

const char *meshfold::linkClassName(LinkClass link) {
  switch (link) {
  case LinkClass::Self:
    return "self";
  case LinkClass::NVLink:
    return "nvlink";
  case LinkClass::IB:
    return "ib";
  }
  return "unknown";
}

//===----------------------------------------------------------------------===//
// PlanSpec
//===----------------------------------------------------------------------===//

PlanSpec PlanSpec::singleDevice() {
  PlanSpec spec;
  spec.devices = 1;
  spec.gpusPerNode = 1;
  spec.attention = {{"tp", 1}, {"cp", 1}, {"dp", 1}, {"pp", 1}};
  spec.experts = {{"ep", 1, {"tp", "cp", "dp"}}, {"pp", 1, {"pp"}}};
  return spec;
}

bool PlanSpec::fromFlags(int64_t tp, int64_t cp, int64_t dp, int64_t pp,
                         int64_t ep, const std::string &order,
                         int64_t gpusPerNode, PlanSpec &out,
                         std::string *error) {
  const std::map<std::string, int64_t> sizes = {
      {"tp", tp}, {"cp", cp}, {"dp", dp}, {"pp", pp}, {"ep", ep}};
  for (const char *name : {"tp", "cp", "dp", "pp", "ep"}) {
    int64_t size = sizes.at(name);
    if (size < 1)
      return fail(error, "axis-size",
                  std::string("axis '") + name + "' has size " +
                      std::to_string(size) + ", but sizes must be >= 1");
  }

  // Parse the order: a permutation of tp,cp,dp,pp.
  std::vector<std::string> names;
  std::stringstream ss(order);
  std::string item;
  while (std::getline(ss, item, ','))
    names.push_back(trim(item));
  std::set<std::string> seen;
  for (const std::string &name : names) {
    if (name != "tp" && name != "cp" && name != "dp" && name != "pp")
      return fail(error, "fold",
                  "axis order '" + order + "' names '" + name +
                      "', which is not an attention axis (expected a "
                      "permutation of tp,cp,dp,pp)");
    if (!seen.insert(name).second)
      return fail(error, "duplicate-axis",
                  "axis order '" + order + "' names '" + name + "' twice");
  }
  for (const char *name : {"tp", "cp", "dp", "pp"})
    if (!seen.count(name))
      return fail(error, "fold",
                  "axis order '" + order + "' lacks '" + name +
                      "' (expected a permutation of tp,cp,dp,pp)");

  if (ep != tp * cp * dp)
    return fail(error, "mesh-size",
                "ep=" + std::to_string(ep) + " must equal tp*cp*dp = " +
                    std::to_string(tp) + "*" + std::to_string(cp) + "*" +
                    std::to_string(dp) + " = " + std::to_string(tp * cp * dp));

  PlanSpec spec;
  spec.devices = tp * cp * dp * pp;
  spec.gpusPerNode = gpusPerNode;
  ExpertAxis epAxis{"ep", ep, {}};
  for (const std::string &name : names) {
    spec.attention.push_back({name, sizes.at(name)});
    if (name != "pp")
      epAxis.composedOf.push_back(name);
  }
  spec.experts.push_back(epAxis);
  spec.experts.push_back({"pp", pp, {"pp"}});

  if (!MeshLayout::create(spec, error))
    return false;
  out = spec;
  return true;
}

//===----------------------------------------------------------------------===//
// MeshLayout: validation
//===----------------------------------------------------------------------===//

namespace {

/// axis-size: every axis has a size of at least 1.
bool checkAxisSizes(const PlanSpec &spec, std::string *error) {
  for (const MeshAxis &axis : spec.attention)
    if (axis.size < 1) {
      fail(error, "axis-size",
           "attention axis '" + axis.name + "' has size " +
               std::to_string(axis.size) + ", but sizes must be >= 1");
      return false;
    }
  for (const ExpertAxis &axis : spec.experts)
    if (axis.size < 1) {
      fail(error, "axis-size",
           "expert axis '" + axis.name + "' has size " +
               std::to_string(axis.size) + ", but sizes must be >= 1");
      return false;
    }
  return true;
}

/// duplicate-axis: no mesh names an axis twice.
bool checkDuplicateAxes(const PlanSpec &spec, std::string *error) {
  std::set<std::string> seen;
  for (const MeshAxis &axis : spec.attention)
    if (!seen.insert(axis.name).second) {
      fail(error, "duplicate-axis",
           "the attention mesh has two axes named '" + axis.name + "'");
      return false;
    }
  seen.clear();
  for (const ExpertAxis &axis : spec.experts)
    if (!seen.insert(axis.name).second) {
      fail(error, "duplicate-axis",
           "the expert mesh has two axes named '" + axis.name + "'");
      return false;
    }
  return true;
}

/// mesh-size: both meshes cover the devices.
bool checkMeshSizes(const PlanSpec &spec, std::string *error) {
  if (spec.devices < 1) {
    fail(error, "mesh-size",
         "the plan has " + std::to_string(spec.devices) +
             " devices, but needs at least 1");
    return false;
  }
  // Ranks are ints everywhere (MPI's, NCCL's); products saturate below, so
  // an absurd device count must not match an overflowing one.
  constexpr int64_t kMaxDevices = int64_t(1) << 20;
  if (spec.devices > kMaxDevices) {
    fail(error, "mesh-size",
         "the plan has " + std::to_string(spec.devices) +
             " devices, more than meshfold supports (2^20)");
    return false;
  }
  int64_t attentionProduct = 1;
  for (const MeshAxis &axis : spec.attention)
    attentionProduct = mulSat(attentionProduct, axis.size);
  if (attentionProduct != spec.devices) {
    fail(error, "mesh-size",
         "attention mesh axes multiply to " + std::to_string(attentionProduct) +
             ", but the plan has " + std::to_string(spec.devices) + " devices");
    return false;
  }
  int64_t expertProduct = 1;
  for (const ExpertAxis &axis : spec.experts)
    expertProduct = mulSat(expertProduct, axis.size);
  if (expertProduct != spec.devices) {
    fail(error, "mesh-size",
         "expert mesh axes multiply to " + std::to_string(expertProduct) +
             ", but the plan has " + std::to_string(spec.devices) + " devices");
    return false;
  }
  return true;
}

/// node-size: nodes of equal size hold the devices.
bool checkNodeSize(const PlanSpec &spec, std::string *error) {
  if (spec.gpusPerNode < 1) {
    fail(error, "node-size",
         "gpus per node is " + std::to_string(spec.gpusPerNode) +
             ", but must be >= 1");
    return false;
  }
  if (spec.devices > spec.gpusPerNode && spec.devices % spec.gpusPerNode) {
    fail(error, "node-size",
         std::to_string(spec.gpusPerNode) + " GPUs per node do not divide " +
             std::to_string(spec.devices) + " devices");
    return false;
  }
  return true;
}

/// fold: expert axes are composed of attention axes, each named once
/// (and mesh-size: a composite axis is as large as its components).
bool checkFold(const PlanSpec &spec, std::string *error) {
  std::map<std::string, int64_t> attentionSize;
  for (const MeshAxis &axis : spec.attention)
    attentionSize[axis.name] = axis.size;
  std::map<std::string, std::string> usedBy;
  for (const ExpertAxis &axis : spec.experts) {
    if (axis.composedOf.empty()) {
      fail(error, "fold",
           "expert axis '" + axis.name + "' is composed of no attention axes");
      return false;
    }
    int64_t product = 1;
    for (const std::string &comp : axis.composedOf) {
      auto it = attentionSize.find(comp);
      if (it == attentionSize.end()) {
        fail(error, "fold",
             "expert axis '" + axis.name + "' is composed of '" + comp +
                 "', which is not an attention axis");
        return false;
      }
      auto [used, inserted] = usedBy.emplace(comp, axis.name);
      if (!inserted) {
        fail(error, "fold",
             "attention axis '" + comp +
                 "' is named twice in the expert "
                 "mesh (by expert axes '" +
                 used->second + "' and '" + axis.name + "')");
        return false;
      }
      product = mulSat(product, it->second);
    }
    // mesh-size: a composite axis is as large as its components together.
    if (product != axis.size) {
      fail(error, "mesh-size",
           "expert axis '" + axis.name + "' has size " +
               std::to_string(axis.size) + ", but its components " +
               joinNames(axis.composedOf) + " multiply to " +
               std::to_string(product));
      return false;
    }
  }
  for (const MeshAxis &axis : spec.attention)
    if (!usedBy.count(axis.name)) {
      fail(error, "fold",
           "attention axis '" + axis.name + "' (size " +
               std::to_string(axis.size) + ") is not part of any expert axis");
      return false;
    }
  bool hasEP = false;
  for (const ExpertAxis &axis : spec.experts)
    hasEP |= axis.name == "ep";
  if (!hasEP) {
    fail(error, "fold", "the expert mesh has no axis named 'ep'");
    return false;
  }
  return true;
}

/// pp-groups: both meshes give identical pp groups.
bool checkPPGroups(const PlanSpec &spec, std::string *error) {
  const ExpertAxis *ppAxis = nullptr;
  for (const ExpertAxis &axis : spec.experts)
    if (axis.name == "pp")
      ppAxis = &axis;
  int64_t attentionPP = 1;
  bool pipelined = false;
  for (const MeshAxis &axis : spec.attention)
    if (axis.name == "pp") {
      attentionPP = axis.size;
      pipelined = axis.size > 1;
    }
  if (pipelined && !ppAxis) {
    fail(error, "pp-groups",
         "the attention mesh has pp=" + std::to_string(attentionPP) +
             ", but the expert mesh has no axis named 'pp'");
    return false;
  }
  if (ppAxis &&
      (ppAxis->composedOf.size() != 1 || ppAxis->composedOf.front() != "pp")) {
    fail(error, "pp-groups",
         "expert axis 'pp' (size " + std::to_string(ppAxis->size) +
             ") is composed of " + joinNames(ppAxis->composedOf) +
             ", but must be exactly the attention axis 'pp' so that both "
             "meshes give identical pp groups");
    return false;
  }
  return true;
}

} // namespace

std::optional<MeshLayout> MeshLayout::create(const PlanSpec &spec,
                                             std::string *error) {
  // The rules, in the order their errors are reported.
  if (!checkAxisSizes(spec, error) || !checkDuplicateAxes(spec, error) ||
      !checkMeshSizes(spec, error) || !checkNodeSize(spec, error) ||
      !checkFold(spec, error) || !checkPPGroups(spec, error))
    return std::nullopt;

  MeshLayout layout;
  layout.plan = spec;
  layout.nodeCount =
      spec.devices <= spec.gpusPerNode ? 1 : spec.devices / spec.gpusPerNode;
  int64_t stride = 1;
  for (const MeshAxis &axis : spec.attention) {
    layout.strides.push_back(stride);
    stride *= axis.size;
  }
  if (error)
    error->clear();
  return layout;
}

std::string MeshLayout::checkModel(const ModelDims &m) const {
  const int64_t tp = axisSize("tp"), ep = axisSize("ep"), pp = axisSize("pp");
  const std::string tpStr = std::to_string(tp);
  const std::string nh = std::to_string(m.numHeads);
  const std::string nkv = std::to_string(m.numKVHeads);

  if (m.numHeads < 1 || m.numHeads % tp)
    return ruleMessage("tp-heads", "TP=" + tpStr + " must divide n_heads=" +
                                       nh + " (and n_heads must be >= 1)");

  bool gqaOk =
      m.numKVHeads >= 1 &&
      (m.numKVHeads % tp == 0 || (m.numKVHeads < tp && tp % m.numKVHeads == 0));
  if (!gqaOk)
    return ruleMessage("gqa",
                       "TP=" + tpStr + " must divide n_kv=" + nkv +
                           ", or n_kv must be < TP with TP a multiple of "
                           "n_kv (and n_kv must be >= 1)");

  if (m.numExperts < 1 || m.numExperts % ep)
    return ruleMessage("ep-experts", "EP=" + std::to_string(ep) +
                                         " must divide n_experts=" +
                                         std::to_string(m.numExperts) +
                                         " (and n_experts must be >= 1)");

  if (m.numLayers < 1 || m.numLayers % pp)
    return ruleMessage("pp-layers", "PP=" + std::to_string(pp) +
                                        " must divide n_layers=" +
                                        std::to_string(m.numLayers) +
                                        " (and n_layers must be >= 1)");

  if (m.vocab > 0 && m.vocab % tp)
    return ruleMessage("tp-vocab", "TP=" + tpStr + " must divide the vocab (" +
                                       std::to_string(m.vocab) +
                                       ") to split the LM head");
  return "";
}

//===----------------------------------------------------------------------===//
// MeshLayout: coordinates and groups
//===----------------------------------------------------------------------===//

int MeshLayout::attentionIndex(const std::string &name) const {
  for (size_t i = 0; i < plan.attention.size(); ++i)
    if (plan.attention[i].name == name)
      return static_cast<int>(i);
  return -1;
}

int MeshLayout::expertIndex(const std::string &name) const {
  for (size_t i = 0; i < plan.experts.size(); ++i)
    if (plan.experts[i].name == name)
      return static_cast<int>(i);
  return -1;
}

bool MeshLayout::hasAxis(const std::string &name) const {
  return attentionIndex(name) >= 0 || expertIndex(name) >= 0;
}

int64_t MeshLayout::axisSize(const std::string &name) const {
  if (int i = attentionIndex(name); i >= 0)
    return plan.attention[i].size;
  if (int i = expertIndex(name); i >= 0)
    return plan.experts[i].size;
  return 1;
}

std::vector<int>
MeshLayout::components(const std::vector<std::string> &axes) const {
  std::vector<int> result;
  auto add = [&](int index) {
    for (int r : result)
      if (r == index)
        return;
    result.push_back(index);
  };
  for (const std::string &name : axes) {
    if (int i = attentionIndex(name); i >= 0) {
      add(i);
    } else if (int e = expertIndex(name); e >= 0) {
      // Validated by create(): every component is an attention axis.
      for (const std::string &comp : plan.experts[e].composedOf)
        add(attentionIndex(comp));
    }
  }
  return result;
}

int64_t MeshLayout::coord(int64_t rank, const std::string &axis) const {
  if (rank < 0 || rank >= plan.devices)
    return -1;
  int64_t result = 0, scale = 1;
  for (int i : components({axis})) {
    result += ((rank / strides[i]) % plan.attention[i].size) * scale;
    scale *= plan.attention[i].size;
  }
  return result;
}

std::map<std::string, int64_t> MeshLayout::coords(int64_t rank) const {
  std::map<std::string, int64_t> result;
  for (const MeshAxis &axis : plan.attention)
    result[axis.name] = coord(rank, axis.name);
  return result;
}

std::string MeshLayout::describe(int64_t rank) const {
  std::string out;
  for (const MeshAxis &axis : plan.attention) {
    if (!out.empty())
      out += ", ";
    out += axis.name + " " + std::to_string(coord(rank, axis.name));
  }
  return out;
}

int64_t MeshLayout::rankOf(const std::map<std::string, int64_t> &coords) const {
  std::vector<int64_t> attentionCoord(plan.attention.size(), 0);
  for (const auto &[name, value] : coords) {
    if (value < 0 || value >= axisSize(name))
      return -1;
    if (int i = attentionIndex(name); i >= 0) {
      attentionCoord[i] = value;
      continue;
    }
    int64_t rest = value;
    for (int i : components({name})) {
      attentionCoord[i] = rest % plan.attention[i].size;
      rest /= plan.attention[i].size;
    }
  }
  int64_t rank = 0;
  for (size_t i = 0; i < plan.attention.size(); ++i)
    rank += attentionCoord[i] * strides[i];
  return rank;
}

int64_t MeshLayout::groupSize(const std::vector<std::string> &axes) const {
  int64_t size = 1;
  for (int i : components(axes))
    size *= plan.attention[i].size;
  return size;
}

std::vector<int64_t>
MeshLayout::group(int64_t rank, const std::vector<std::string> &axes) const {
  if (rank < 0 || rank >= plan.devices)
    return {};
  std::vector<int> comps = components(axes);
  // Base: `rank` with every varied coordinate set to 0.
  int64_t base = rank;
  int64_t size = 1;
  for (int i : comps) {
    base -= ((rank / strides[i]) % plan.attention[i].size) * strides[i];
    size *= plan.attention[i].size;
  }
  std::vector<int64_t> members;
  members.reserve(size);
  for (int64_t g = 0; g < size; ++g) {
    int64_t member = base, rest = g;
    for (int i : comps) {
      member += (rest % plan.attention[i].size) * strides[i];
      rest /= plan.attention[i].size;
    }
    members.push_back(member);
  }
  return members;
}

int64_t MeshLayout::groupRank(int64_t rank,
                              const std::vector<std::string> &axes) const {
  if (rank < 0 || rank >= plan.devices)
    return -1;
  int64_t result = 0, scale = 1;
  for (int i : components(axes)) {
    result += ((rank / strides[i]) % plan.attention[i].size) * scale;
    scale *= plan.attention[i].size;
  }
  return result;
}

//===----------------------------------------------------------------------===//
// MeshLayout: topology
//===----------------------------------------------------------------------===//

int64_t MeshLayout::relay(int64_t rank, int64_t node) const {
  return node * plan.gpusPerNode + localIndex(rank);
}

LinkClass MeshLayout::link(int64_t from, int64_t to) const {
  if (from == to)
    return LinkClass::Self;
  return node(from) == node(to) ? LinkClass::NVLink : LinkClass::IB;
}

double MeshLayout::bandwidthGBps(LinkClass link) const {
  switch (link) {
  case LinkClass::Self:
    return 0;
  case LinkClass::NVLink:
    return plan.nvlinkGBps;
  case LinkClass::IB:
    return plan.ibGBps;
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// MeshLayout: experts and stages
//===----------------------------------------------------------------------===//

int64_t MeshLayout::expertOwner(int64_t expert, int64_t numExperts,
                                int64_t stage) const {
  const int64_t ep = axisSize("ep");
  if (numExperts < 1 || numExperts % ep || expert < 0 || expert >= numExperts ||
      stage < 0 || stage >= axisSize("pp"))
    return -1;
  return rankOf({{"ep", expert / (numExperts / ep)}, {"pp", stage}});
}

std::pair<int64_t, int64_t> MeshLayout::localExperts(int64_t rank,
                                                     int64_t numExperts) const {
  const int64_t ep = axisSize("ep");
  if (numExperts < 1 || numExperts % ep || rank < 0 || rank >= plan.devices)
    return {-1, 0};
  const int64_t perRank = numExperts / ep;
  return {coord(rank, "ep") * perRank, perRank};
}

int64_t MeshLayout::stageOfLayer(int64_t layer, int64_t numLayers) const {
  const int64_t pp = axisSize("pp");
  if (numLayers < 1 || numLayers % pp || layer < 0 || layer >= numLayers)
    return -1;
  return layer / (numLayers / pp);
}
