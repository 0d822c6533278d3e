//===- Groups.cpp - mfrt_group*, the calling rank and the current layer ---===//
//
// A group is made once per axes list on every rank, from MeshLayout: its
// members, the calling rank's index among them and, under a backend with
// native collectives, the backend's communicator.
//
//===----------------------------------------------------------------------===//

#include "mfrt/api/Launch.h"
#include "mfrt/comm/OpScaffold.h"

#include <sstream>

using namespace mfrt::comm;
using meshfold::MeshLayout;

namespace {

std::vector<std::string> splitAxes(const std::string &text) {
  std::vector<std::string> out;
  std::string item;
  std::stringstream ss(text);
  while (std::getline(ss, item, ',')) {
    std::string trimmed;
    for (char c : item)
      if (c != ' ' && c != '\t')
        trimmed += c;
    out.push_back(trimmed);
  }
  return out;
}

std::string axisNames(const MeshLayout &layout) {
  std::string out;
  for (const meshfold::MeshAxis &a : layout.spec().attention)
    out += (out.empty() ? "" : ", ") + a.name;
  for (const meshfold::ExpertAxis &a : layout.spec().experts)
    if (out.find(a.name) == std::string::npos)
      out += ", " + a.name;
  return out;
}

} // namespace

extern "C" int mfrt_pool(void) {
  RankState *st = currentRank();
  return st ? st->place.pool : -1;
}

extern "C" int mfrt_pool_size(int pool) {
  RankState *st = currentRank();
  if (!st || pool < 0 || pool > 1)
    return 0;
  return st->place.sizes[size_t(pool)];
}

extern "C" int mfrt_rank(void) {
  RankState *st = currentRank();
  return st ? st->rank : mfrt::api::processRank();
}

extern "C" int mfrt_world_size(void) {
  RankState *st = currentRank();
  return st ? st->size : mfrt::api::processWorldSize();
}

extern "C" int64_t mfrt_group(const char *axesText) {
  RankState *st = currentRank();
  if (!st) {
    outsideLaunch("mfrt_group");
    return -1;
  }
  auto fail = [&](mfrt_status code, const std::string &what) -> int64_t {
    setError(code, "mfrt: rank " + std::to_string(st->rank) +
                       ": mfrt_group(\"" + (axesText ? axesText : "") +
                       "\"): " + what);
    return -1;
  };
  if (!axesText)
    return fail(MFRT_ERR_ARGUMENT, "axes is NULL");
  std::vector<std::string> axes = splitAxes(axesText);
  std::string key;
  for (const std::string &a : axes) {
    if (a.empty())
      return fail(MFRT_ERR_ARGUMENT, "empty axis name");
    if (!st->layout.hasAxis(a))
      return fail(MFRT_ERR_ARGUMENT, "the plan has no axis '" + a +
                                         "' (axes: " + axisNames(st->layout) +
                                         ")");
    key += (key.empty() ? "" : ",") + a;
  }
  if (key.empty())
    return fail(MFRT_ERR_ARGUMENT, "no axes");
  auto found = st->groupByAxes.find(key);
  if (found != st->groupByAxes.end())
    return found->second;
  if (st->groups.size() >= kMaxGroups)
    return fail(MFRT_ERR_ARGUMENT,
                "too many groups (at most " + std::to_string(kMaxGroups) + ")");
  auto g = std::make_unique<Group>();
  g->handle = int64_t(st->groups.size());
  g->axes = key;
  for (int64_t m : st->layout.group(st->local(st->rank), axes))
    g->members.push_back(st->global(m));
  g->index = int(st->layout.groupRank(st->local(st->rank), axes));
  g->name = key + "{";
  for (size_t i = 0; i < g->members.size(); ++i) {
    g->name += (i ? "," : "") + std::to_string(g->members[i]);
    g->indexOf[g->members[i]] = int(i);
  }
  g->name += "}";
  if (st->native) {
    Status s = st->native->createGroup(g->handle, g->members, g->index);
    if (!s.ok()) {
      Op op(*st, "mfrt_group", MFRT_OP_BARRIER);
      finishOp(op, s);
      return -1;
    }
  }
  st->groupByAxes[key] = g->handle;
  st->groups.push_back(std::move(g));
  return st->groups.back()->handle;
}

extern "C" int mfrt_group_size(int64_t group) {
  RankState *st = currentRank();
  Group *g = st ? st->group(group) : nullptr;
  return g ? g->size() : -1;
}

extern "C" int mfrt_group_rank(int64_t group) {
  RankState *st = currentRank();
  Group *g = st ? st->group(group) : nullptr;
  return g ? g->index : -1;
}

extern "C" int mfrt_group_member(int64_t group, int i) {
  RankState *st = currentRank();
  Group *g = st ? st->group(group) : nullptr;
  if (!g || i < 0 || i >= g->size())
    return -1;
  return g->members[size_t(i)];
}

extern "C" void mfrt_set_layer(int64_t layer) {
  RankState *st = currentRank();
  if (!st)
    return;
  st->layer = layer;
  if (layer >= 0) {
    st->traceLayer = layer;
    st->traceOp = 0;
  }
}
