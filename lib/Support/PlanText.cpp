//===- PlanText.cpp - The plan as text ------------------------------------===//

#include "meshfold/Support/PlanText.h"
#include "meshfold/Support/Text.h"

#include <cstdio>
#include <sstream>

using namespace meshfold;

namespace {

bool fail(std::string *error, const std::string &msg) {
  if (error)
    *error = "plan: " + msg;
  return false;
}

/// An axis name: a lowercase letter, then lowercase letters, digits or '_'
/// (so that the plan's text reads back as it was written).
bool isAxisName(const std::string &name) {
  if (name.empty() || name.size() > 32 || name[0] < 'a' || name[0] > 'z')
    return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
      return false;
  return true;
}

bool badName(std::string *error, const std::string &name) {
  return fail(error, "axis name '" + name +
                         "' is not a name (a lowercase letter, then "
                         "lowercase letters, digits or _)");
}

} // namespace

/// A link rate in "%e" form (4.500000e+02), which parsePlanText reads back.
static std::string formatRate(double gbps) {
  char text[32];
  std::snprintf(text, sizeof(text), "%e", gbps);
  return text;
}

std::string meshfold::formatPlanText(const PlanSpec &spec) {
  std::ostringstream os;
  os << "devices=" << spec.devices << " gpus_per_node=" << spec.gpusPerNode
     << " nvlink_gbps=" << formatRate(spec.nvlinkGBps)
     << " ib_gbps=" << formatRate(spec.ibGBps) << " attention=";
  for (size_t i = 0; i < spec.attention.size(); ++i)
    os << (i ? "," : "") << spec.attention[i].name << ":"
       << spec.attention[i].size;
  os << " experts=";
  for (size_t i = 0; i < spec.experts.size(); ++i) {
    const ExpertAxis &a = spec.experts[i];
    os << (i ? "," : "") << a.name << ":" << a.size << ":";
    for (size_t j = 0; j < a.composedOf.size(); ++j)
      os << (j ? "+" : "") << a.composedOf[j];
  }
  return os.str();
}

bool meshfold::parsePlanText(const std::string &text, PlanSpec &out,
                             std::string *error) {
  PlanSpec spec;
  bool haveDevices = false, haveAttention = false, haveExperts = false;
  std::stringstream ss(text);
  std::string field;
  while (ss >> field) {
    size_t eq = field.find('=');
    if (eq == std::string::npos)
      return fail(error, "field '" + field + "' is not key=value");
    std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    if (key == "devices") {
      if (!parseInt(value, spec.devices))
        return fail(error, "devices='" + value + "' is not an integer");
      haveDevices = true;
    } else if (key == "gpus_per_node") {
      if (!parseInt(value, spec.gpusPerNode))
        return fail(error, "gpus_per_node='" + value + "' is not an integer");
    } else if (key == "nvlink_gbps") {
      if (!parseDouble(value, spec.nvlinkGBps) || spec.nvlinkGBps <= 0)
        return fail(error,
                    "nvlink_gbps='" + value + "' is not a positive number");
    } else if (key == "ib_gbps") {
      if (!parseDouble(value, spec.ibGBps) || spec.ibGBps <= 0)
        return fail(error, "ib_gbps='" + value + "' is not a positive number");
    } else if (key == "attention") {
      haveAttention = true;
      for (const std::string &axis : split(value, ',')) {
        std::vector<std::string> parts = split(axis, ':');
        MeshAxis a;
        if (parts.size() != 2 || parts[0].empty() ||
            !parseInt(parts[1], a.size))
          return fail(error, "attention axis '" + axis +
                                 "' is not name:size (e.g. tp:2)");
        a.name = parts[0];
        if (!isAxisName(a.name))
          return badName(error, a.name);
        spec.attention.push_back(a);
      }
    } else if (key == "experts") {
      haveExperts = true;
      for (const std::string &axis : split(value, ',')) {
        std::vector<std::string> parts = split(axis, ':');
        ExpertAxis a;
        if (parts.size() != 3 || parts[0].empty() ||
            !parseInt(parts[1], a.size) || parts[2].empty())
          return fail(error, "expert axis '" + axis +
                                 "' is not name:size:part+part (e.g. "
                                 "ep:16:tp+cp+dp)");
        a.name = parts[0];
        if (!isAxisName(a.name))
          return badName(error, a.name);
        for (const std::string &comp : split(parts[2], '+')) {
          if (comp.empty())
            return fail(error,
                        "expert axis '" + axis + "' has an empty component");
          if (!isAxisName(comp))
            return badName(error, comp);
          a.composedOf.push_back(comp);
        }
        spec.experts.push_back(a);
      }
    } else {
      return fail(error, "unknown field '" + key +
                             "' (expected devices, gpus_per_node, attention, "
                             "experts, nvlink_gbps, ib_gbps)");
    }
  }
  if (!haveAttention)
    return fail(error, "no attention=... field (e.g. "
                       "attention=tp:2,cp:2,dp:4,pp:2)");
  if (!haveDevices) {
    // The attention mesh's size; past int64 it is no plan (the mesh-size
    // rule names the axes that do not multiply to the devices).
    spec.devices = 1;
    for (const MeshAxis &a : spec.attention)
      if (__builtin_mul_overflow(spec.devices, a.size, &spec.devices))
        return fail(error, "the attention axes multiply past 2^63 devices");
  }
  if (!haveExperts) {
    ExpertAxis ep{"ep", 1, {}};
    bool hasPP = false;
    for (const MeshAxis &a : spec.attention) {
      if (a.name == "pp") {
        hasPP = true;
        continue;
      }
      if (__builtin_mul_overflow(ep.size, a.size, &ep.size))
        return fail(error, "the attention axes multiply past 2^63 devices");
      ep.composedOf.push_back(a.name);
    }
    if (!ep.composedOf.empty())
      spec.experts.push_back(ep);
    if (hasPP)
      for (const MeshAxis &a : spec.attention)
        if (a.name == "pp")
          spec.experts.push_back({"pp", a.size, {"pp"}});
  }
  out = spec;
  if (error)
    error->clear();
  return true;
}

std::optional<MeshLayout> meshfold::layoutFromPlanText(const std::string &text,
                                                       std::string *error) {
  PlanSpec spec;
  if (!parsePlanText(text, spec, error))
    return std::nullopt;
  return MeshLayout::create(spec, error);
}
