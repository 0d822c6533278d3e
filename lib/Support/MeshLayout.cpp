//===- MeshLayout.cpp - Group math for the folded meshes ------------------===//
//
// Pure C++17; no LLVM/MLIR dependency (the runtime links this file too).
//
//===----------------------------------------------------------------------===//

#include "meshfold/Support/MeshLayout.h"

#include <algorithm>
#include <cassert>
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

PlanFlags PlanFlags::singleDevice() {
  PlanFlags flags;
  flags.ep = 1;
  flags.gpusPerNode = 1;
  return flags;
}

PlanSpec PlanSpec::singleDevice() {
  PlanSpec spec;
  [[maybe_unused]] bool valid = fromFlags(PlanFlags::singleDevice(), spec,
                                          /*error=*/nullptr);
  assert(valid && "the one-device plan passes the plan rules");
  return spec;
}

bool PlanSpec::fromFlags(int64_t tp, int64_t cp, int64_t dp, int64_t pp,
                         int64_t ep, const std::string &order,
                         int64_t gpusPerNode, PlanSpec &out,
                         std::string *error) {
  PlanFlags flags;
  flags.tp = tp;
  flags.cp = cp;
  flags.dp = dp;
  flags.pp = pp;
  flags.ep = ep;
  flags.order = order;
  flags.gpusPerNode = gpusPerNode;
  return fromFlags(flags, out, error);
}

namespace {

/// Parses `order`, which must be a permutation of `names` (comma separated,
/// blanks around names allowed); `what` names it in errors ("axis order",
/// "expert order"), `kind` the axes ("attention axis").
bool parseOrder(const std::string &order, const std::vector<std::string> &names,
                const char *what, const char *kind,
                std::vector<std::string> &out, std::string *error) {
  std::vector<std::string> listed;
  std::stringstream ss(order);
  std::string item;
  while (std::getline(ss, item, ','))
    listed.push_back(trim(item));
  const std::string expected =
      "(expected a permutation of " + joinNames(names) + ")";
  std::set<std::string> seen;
  for (const std::string &name : listed) {
    if (std::find(names.begin(), names.end(), name) == names.end())
      return fail(error, "fold",
                  std::string(what) + " '" + order + "' names '" + name +
                      "', which is not an " + kind + " " + expected);
    if (!seen.insert(name).second)
      return fail(error, "duplicate-axis",
                  std::string(what) + " '" + order + "' names '" + name +
                      "' twice");
  }
  for (const std::string &name : names)
    if (!seen.count(name))
      return fail(error, "fold",
                  std::string(what) + " '" + order + "' lacks '" + name + "' " +
                      expected);
  out = listed;
  return true;
}

/// "etp*ep*edp = 1*8*1 = 8".
std::string expertProduct(int64_t etp, int64_t ep, int64_t edp) {
  return "etp*ep*edp = " + std::to_string(etp) + "*" + std::to_string(ep) +
         "*" + std::to_string(edp) + " = " + std::to_string(etp * ep * edp);
}

} // namespace

bool PlanSpec::fromFlags(const PlanFlags &f, PlanSpec &out,
                         std::string *error) {
  const std::map<std::string, int64_t> sizes = {
      {"tp", f.tp},   {"cp", f.cp}, {"dp", f.dp},  {"pp", f.pp},
      {"etp", f.etp}, {"ep", f.ep}, {"edp", f.edp}};
  for (const char *name : {"tp", "cp", "dp", "pp", "etp", "ep", "edp"}) {
    int64_t size = sizes.at(name);
    // ep 0: derived from the others.
    if (size < 1 && !(size == 0 && std::string(name) == "ep"))
      return fail(error, "axis-size",
                  std::string("axis '") + name + "' has size " +
                      std::to_string(size) + ", but sizes must be >= 1");
  }
  std::vector<std::string> names, expertNames;
  if (!parseOrder(f.order, {"tp", "cp", "dp", "pp"}, "axis order",
                  "attention axis", names, error) ||
      !parseOrder(f.expertOrder, {"etp", "ep", "edp"}, "expert order",
                  "expert axis", expertNames, error))
    return false;

  // The expert mesh folds over the attention axes of a stage. Sizes are
  // bounded before they multiply (mesh-size also bounds devices).
  constexpr int64_t kMaxDevices = int64_t(1) << 20;
  for (const auto &[name, size] : sizes)
    if (size > kMaxDevices)
      return fail(error, "mesh-size",
                  "axis '" + name + "' has size " + std::to_string(size) +
                      ", more than meshfold supports (2^20)");
  const int64_t stage = f.tp * f.cp * f.dp;
  const std::string stageText =
      "tp*cp*dp = " + std::to_string(f.tp) + "*" + std::to_string(f.cp) + "*" +
      std::to_string(f.dp) + " = " + std::to_string(stage);
  int64_t ep = f.ep;
  if (ep == 0) {
    if (stage % (f.etp * f.edp))
      return fail(error, "mesh-size",
                  "etp*edp = " + std::to_string(f.etp) + "*" +
                      std::to_string(f.edp) + " must divide " + stageText);
    ep = stage / (f.etp * f.edp);
  }
  if (f.etp * ep * f.edp != stage) {
    std::string msg =
        expertProduct(f.etp, ep, f.edp) + " must equal " + stageText;
    // The fix: ep as given, the rest of tp*cp*dp as etp or as edp.
    std::vector<std::string> fixes;
    if (stage % ep == 0 && stage / ep > 1) {
      const std::string rest = std::to_string(stage / ep);
      fixes.push_back("--ep " + std::to_string(ep) + " --etp " + rest +
                      (f.edp != 1 ? " --edp 1" : ""));
      fixes.push_back("--ep " + std::to_string(ep) +
                      (f.etp != 1 ? " --etp 1" : "") + " --edp " + rest);
    }
    if (!fixes.empty()) {
      msg += ": try " + fixes[0];
      for (size_t i = 1; i < fixes.size(); ++i)
        msg += " or " + fixes[i];
    }
    return fail(error, "mesh-size", msg);
  }

  PlanSpec spec;
  spec.devices = stage * f.pp;
  spec.gpusPerNode = f.gpusPerNode;
  std::vector<std::string> components;
  for (const std::string &name : names) {
    spec.attention.push_back({name, sizes.at(name)});
    if (name != "pp")
      components.push_back(name);
  }
  for (const std::string &name : expertNames) {
    int64_t size = name == "ep" ? ep : sizes.at(name);
    if (size > 1 || name == "ep")
      spec.experts.push_back({name, size, components});
  }
  spec.experts.push_back({"pp", f.pp, {"pp"}});

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

/// fold: expert axes are composed of attention axes; axes that share an
/// attention axis are folded over exactly the same ones (and mesh-size: the
/// axes folded over some components are as large as the components
/// together).
bool checkFold(const PlanSpec &spec, std::string *error) {
  std::map<std::string, int64_t> attentionSize;
  for (const MeshAxis &axis : spec.attention)
    attentionSize[axis.name] = axis.size;
  // The first expert axis that names each attention axis.
  std::map<std::string, const ExpertAxis *> usedBy;
  // The expert axes folded over each list of components, in mesh order.
  std::map<std::vector<std::string>, std::vector<const ExpertAxis *>> folds;
  std::vector<std::vector<std::string>> foldOrder;
  for (const ExpertAxis &axis : spec.experts) {
    if (axis.composedOf.empty()) {
      fail(error, "fold",
           "expert axis '" + axis.name + "' is composed of no attention axes");
      return false;
    }
    std::set<std::string> own;
    for (const std::string &comp : axis.composedOf) {
      if (!attentionSize.count(comp)) {
        fail(error, "fold",
             "expert axis '" + axis.name + "' is composed of '" + comp +
                 "', which is not an attention axis");
        return false;
      }
      if (!own.insert(comp).second) {
        fail(error, "fold",
             "expert axis '" + axis.name + "' names attention axis '" + comp +
                 "' twice");
        return false;
      }
      auto [used, inserted] = usedBy.emplace(comp, &axis);
      if (!inserted && used->second->composedOf != axis.composedOf) {
        fail(error, "fold",
             "attention axis '" + comp +
                 "' is named twice in the expert mesh (by expert axes '" +
                 used->second->name + "' of " +
                 joinNames(used->second->composedOf) + " and '" + axis.name +
                 "' of " + joinNames(axis.composedOf) +
                 "); only axes folded over the same attention axes share one");
        return false;
      }
    }
    if (!folds.count(axis.composedOf))
      foldOrder.push_back(axis.composedOf);
    folds[axis.composedOf].push_back(&axis);
  }
  for (const std::vector<std::string> &comps : foldOrder) {
    const std::vector<const ExpertAxis *> &axes = folds[comps];
    int64_t product = 1, folded = 1;
    for (const std::string &comp : comps)
      product = mulSat(product, attentionSize.at(comp));
    for (const ExpertAxis *axis : axes)
      folded = mulSat(folded, axis->size);
    if (folded == product)
      continue;
    // mesh-size: the folded axes are as large as their components together.
    if (axes.size() == 1) {
      fail(error, "mesh-size",
           "expert axis '" + axes[0]->name + "' has size " +
               std::to_string(axes[0]->size) + ", but its components " +
               joinNames(comps) + " multiply to " + std::to_string(product));
      return false;
    }
    std::vector<std::string> names;
    for (const ExpertAxis *axis : axes)
      names.push_back(axis->name);
    fail(error, "mesh-size",
         "expert axes " + joinNames(names) + ", folded over " +
             joinNames(comps) + ", multiply to " + std::to_string(folded) +
             ", but " + joinNames(comps) + " multiply to " +
             std::to_string(product));
    return false;
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
  for (const ExpertAxis &axis : spec.experts)
    if (ppAxis && &axis != ppAxis && axis.composedOf == ppAxis->composedOf) {
      fail(error, "pp-groups",
           "expert axis '" + axis.name +
               "' is folded with 'pp', which must stay the stages alone");
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
  // Folded expert axes: their strides in their components' linear index.
  for (size_t e = 0; e < spec.experts.size(); ++e) {
    int64_t foldStride = 1;
    bool folded = false;
    for (size_t o = 0; o < spec.experts.size(); ++o) {
      if (o == e || spec.experts[o].composedOf != spec.experts[e].composedOf)
        continue;
      folded = true;
      if (o < e)
        foldStride *= spec.experts[o].size;
    }
    layout.folded.push_back(folded);
    layout.foldStride.push_back(foldStride);
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

  if (m.numExperts < 1)
    return ruleMessage("ep-experts", "EP=" + std::to_string(ep) +
                                         " must divide n_experts=" +
                                         std::to_string(m.numExperts) +
                                         " (and n_experts must be >= 1)");
  if (m.numExperts % ep) {
    // The fix: the largest EP that divides both the experts and the stage's
    // GPUs, the rest as ETP (when it divides the FFN) or as EDP.
    const int64_t stage = axisSize("etp") * ep * axisSize("edp");
    std::string fix;
    for (int64_t d = std::min(stage, m.numExperts); d > 1 && fix.empty(); --d) {
      if (stage % d || m.numExperts % d)
        continue;
      const std::string rest = std::to_string(stage / d), e = std::to_string(d);
      if (m.expertFFN == 0 || m.expertFFN % (stage / d) == 0)
        fix = "--ep " + e + " --etp " + rest + " or ";
      fix = ": try " + fix + "--ep " + e + " --edp " + rest;
    }
    return ruleMessage("ep-experts", "EP=" + std::to_string(ep) +
                                         " must divide n_experts=" +
                                         std::to_string(m.numExperts) + fix);
  }

  const int64_t etp = axisSize("etp");
  if (m.expertFFN > 0 && m.expertFFN % etp)
    return ruleMessage("etp-ffn", "ETP=" + std::to_string(etp) +
                                      " must divide the expert FFN width (" +
                                      std::to_string(m.expertFFN) +
                                      ") to split each expert");

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

std::vector<MeshLayout::Digit>
MeshLayout::digits(const std::vector<std::string> &axes) const {
  std::vector<Digit> result;
  auto add = [&](Digit d) {
    if (std::find(result.begin(), result.end(), d) == result.end())
      result.push_back(d);
  };
  for (const std::string &name : axes) {
    if (int i = attentionIndex(name); i >= 0) {
      add(Digit{i, -1});
    } else if (int e = expertIndex(name); e >= 0) {
      if (folded[size_t(e)]) {
        add(Digit{-1, e});
        continue;
      }
      // Validated by create(): every component is an attention axis.
      for (const std::string &comp : plan.experts[size_t(e)].composedOf)
        add(Digit{attentionIndex(comp), -1});
    }
  }
  return result;
}

int64_t MeshLayout::digitSize(Digit d) const {
  return d.attention >= 0 ? plan.attention[size_t(d.attention)].size
                          : plan.experts[size_t(d.expert)].size;
}

int64_t MeshLayout::foldIndex(int64_t rank, int e) const {
  int64_t index = 0, scale = 1;
  for (const std::string &comp : plan.experts[size_t(e)].composedOf) {
    int i = attentionIndex(comp);
    index +=
        ((rank / strides[size_t(i)]) % plan.attention[size_t(i)].size) * scale;
    scale *= plan.attention[size_t(i)].size;
  }
  return index;
}

int64_t MeshLayout::digitValue(int64_t rank, Digit d) const {
  if (d.attention >= 0)
    return (rank / strides[size_t(d.attention)]) %
           plan.attention[size_t(d.attention)].size;
  return (foldIndex(rank, d.expert) / foldStride[size_t(d.expert)]) %
         plan.experts[size_t(d.expert)].size;
}

int64_t MeshLayout::withDigits(
    int64_t rank, const std::vector<std::pair<Digit, int64_t>> &set) const {
  for (const auto &[d, value] : set)
    if (d.attention >= 0)
      rank += (value - digitValue(rank, d)) * strides[size_t(d.attention)];
  for (const auto &[d, value] : set) {
    if (d.expert < 0)
      continue;
    // Change the digit in the linear index of the components, then write the
    // index back into them.
    int64_t index =
        foldIndex(rank, d.expert) +
        (value - digitValue(rank, d)) * foldStride[size_t(d.expert)];
    for (const std::string &comp : plan.experts[size_t(d.expert)].composedOf) {
      int i = attentionIndex(comp);
      int64_t size = plan.attention[size_t(i)].size;
      rank += (index % size - (rank / strides[size_t(i)]) % size) *
              strides[size_t(i)];
      index /= size;
    }
  }
  return rank;
}

int64_t MeshLayout::coord(int64_t rank, const std::string &axis) const {
  if (rank < 0 || rank >= plan.devices)
    return -1;
  return groupRank(rank, {axis});
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
  std::vector<std::pair<Digit, int64_t>> set;
  for (const auto &[name, value] : coords) {
    if (value < 0 || value >= axisSize(name))
      return -1;
    int64_t rest = value;
    for (Digit d : digits({name})) {
      set.push_back({d, rest % digitSize(d)});
      rest /= digitSize(d);
    }
  }
  return withDigits(0, set);
}

int64_t MeshLayout::groupSize(const std::vector<std::string> &axes) const {
  int64_t size = 1;
  for (Digit d : digits(axes))
    size *= digitSize(d);
  return size;
}

std::vector<int64_t>
MeshLayout::group(int64_t rank, const std::vector<std::string> &axes) const {
  if (rank < 0 || rank >= plan.devices)
    return {};
  std::vector<Digit> ds = digits(axes);
  const int64_t size = groupSize(axes);
  std::vector<int64_t> members;
  members.reserve(size_t(size));
  std::vector<std::pair<Digit, int64_t>> set;
  for (int64_t g = 0; g < size; ++g) {
    set.clear();
    int64_t rest = g;
    for (Digit d : ds) {
      set.push_back({d, rest % digitSize(d)});
      rest /= digitSize(d);
    }
    members.push_back(withDigits(rank, set));
  }
  return members;
}

int64_t MeshLayout::groupRank(int64_t rank,
                              const std::vector<std::string> &axes) const {
  if (rank < 0 || rank >= plan.devices)
    return -1;
  int64_t result = 0, scale = 1;
  for (Digit d : digits(axes)) {
    result += digitValue(rank, d) * scale;
    scale *= digitSize(d);
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

std::vector<int64_t> MeshLayout::expertHolders(int64_t rank, int64_t expert,
                                               int64_t numExperts) const {
  const int64_t ep = axisSize("ep");
  if (numExperts < 1 || numExperts % ep || expert < 0 || expert >= numExperts ||
      rank < 0 || rank >= plan.devices)
    return {};
  return epHolders(rank, expert / (numExperts / ep));
}

std::vector<int64_t> MeshLayout::epHolders(int64_t rank, int64_t c) const {
  if (c < 0 || c >= axisSize("ep") || rank < 0 || rank >= plan.devices)
    return {};
  std::vector<int64_t> holders;
  for (int64_t member : group(rank, {"etp", "ep"}))
    if (coord(member, "ep") == c)
      holders.push_back(member);
  return holders;
}

std::pair<int64_t, int64_t> MeshLayout::localExperts(int64_t rank,
                                                     int64_t numExperts) const {
  const int64_t ep = axisSize("ep");
  if (numExperts < 1 || numExperts % ep || rank < 0 || rank >= plan.devices)
    return {-1, 0};
  const int64_t perRank = numExperts / ep;
  return {coord(rank, "ep") * perRank, perRank};
}

std::pair<int64_t, int64_t> MeshLayout::kvHeadRange(int64_t rank,
                                                    int64_t numKVHeads) const {
  const int64_t tp = axisSize("tp"), t = coord(rank, "tp");
  if (t < 0 || numKVHeads < 1 ||
      (numKVHeads % tp != 0 && !(numKVHeads < tp && tp % numKVHeads == 0)))
    return {-1, 0};
  // The heads come in min(n_kv, TP) parts of kvHeadsPerRank each.
  const int64_t parts = std::min(numKVHeads, tp);
  const int64_t count = kvHeadsPerRank(numKVHeads, tp);
  return {t * parts / tp * count, count};
}

std::vector<std::pair<int64_t, int64_t>>
MeshLayout::promptPositions(int64_t rank, int64_t promptLength) const {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  const int64_t cp = axisSize("cp"), tp = axisSize("tp"), r = coord(rank, "cp");
  if (r < 0 || promptLength < 1)
    return ranges;
  const int64_t pad = 2 * cp * tp;
  const int64_t chunk = (promptLength + pad - 1) / pad * pad / (2 * cp);
  for (int64_t c : {r, 2 * cp - 1 - r}) {
    int64_t begin = c * chunk, end = std::min(begin + chunk, promptLength);
    if (begin >= end)
      continue;
    if (!ranges.empty() && ranges.back().second == begin)
      ranges.back().second = end; // CP = 1: one range
    else
      ranges.push_back({begin, end});
  }
  return ranges;
}

int64_t MeshLayout::stageOfLayer(int64_t layer, int64_t numLayers) const {
  const int64_t pp = axisSize("pp");
  if (numLayers < 1 || numLayers % pp || layer < 0 || layer >= numLayers)
    return -1;
  return layer / (numLayers / pp);
}
