//===- KVTransfer.cpp - a K/V cache from one mesh to another --------------===//

#include "meshfold/Support/KVTransfer.h"

#include <algorithm>
#include <cassert>

using namespace meshfold;

std::vector<int64_t> meshfold::replicaRanks(const MeshLayout &mesh,
                                            int64_t replica) {
  std::vector<int64_t> ranks;
  for (int64_t rank = 0; rank < mesh.numDevices(); ++rank)
    if (mesh.coord(rank, "dp") == replica)
      ranks.push_back(rank);
  return ranks;
}

namespace {

/// "" when `mesh` can hold the cache of `in`'s model, else the rule broken.
std::string checkMesh(const MeshLayout &mesh, const char *name,
                      const KVTransferInput &in) {
  std::string prefix = std::string("kv transfer: the ") + name + " mesh: ";
  if (mesh.stageOfLayer(0, in.numLayers) < 0)
    return prefix +
           "plan rule 'pp-layers': PP=" + std::to_string(mesh.axisSize("pp")) +
           " must divide the " + std::to_string(in.numLayers) + " layers";
  if (mesh.kvHeadRange(0, in.numKVHeads).first < 0)
    return prefix +
           "plan rule 'gqa': TP=" + std::to_string(mesh.axisSize("tp")) +
           " must divide n_kv=" + std::to_string(in.numKVHeads) +
           ", or be a multiple of it (KV-head replication)";
  return "";
}
} // namespace

std::string meshfold::checkPools(const MeshLayout &first,
                                 const MeshLayout &second) {
  const int64_t gpn = first.gpusPerNode();
  if (second.gpusPerNode() != gpn)
    return "plan rule 'pools': the pools' plans give " + std::to_string(gpn) +
           " and " + std::to_string(second.gpusPerNode()) +
           " GPUs per node; they must agree";
  if (first.numDevices() % gpn != 0 || second.numDevices() % gpn != 0)
    return "plan rule 'pools': pools of " + std::to_string(first.numDevices()) +
           " and " + std::to_string(second.numDevices()) +
           " devices do not fill whole nodes of " + std::to_string(gpn) +
           " GPUs (a node never holds both pools)";
  return "";
}

MeshLayout meshfold::poolsMachine(const MeshLayout &first,
                                  const MeshLayout &second) {
  PlanSpec spec;
  spec.devices = first.numDevices() + second.numDevices();
  spec.gpusPerNode = first.gpusPerNode();
  spec.nvlinkGBps = first.spec().nvlinkGBps;
  spec.ibGBps = first.spec().ibGBps;
  spec.attention = {{"tp", 1}, {"cp", 1}, {"dp", spec.devices}, {"pp", 1}};
  spec.experts = {{"ep", spec.devices, {"tp", "cp", "dp"}}, {"pp", 1, {"pp"}}};
  std::string error;
  std::optional<MeshLayout> machine = MeshLayout::create(spec, &error);
  assert(machine && "two pools' devices make a valid machine");
  return *machine;
}

bool meshfold::planKVTransfer(const MeshLayout &prefill,
                              const MeshLayout &decode,
                              const KVTransferInput &in,
                              std::vector<KVBlock> &blocks,
                              std::string *error) {
  auto fail = [&](const std::string &msg) {
    if (error)
      *error = msg;
    return false;
  };
  blocks.clear();
  if (in.numLayers < 1 || in.numKVHeads < 1 || in.headDim < 1 ||
      in.promptLength < 1 || in.kvCopies < 1 || in.kvCopies > 2)
    return fail("kv transfer: the layers, KV heads, head size and prompt "
                "length must be at least 1");
  for (std::string msg :
       {checkMesh(prefill, "prefill", in), checkMesh(decode, "decode", in)})
    if (!msg.empty())
      return fail(msg);
  if (in.prefillReplica < 0 || in.prefillReplica >= prefill.axisSize("dp") ||
      in.decodeReplica < 0 || in.decodeReplica >= decode.axisSize("dp"))
    return fail("kv transfer: replica " + std::to_string(in.prefillReplica) +
                " -> " + std::to_string(in.decodeReplica) +
                " is out of range (the meshes have " +
                std::to_string(prefill.axisSize("dp")) + " and " +
                std::to_string(decode.axisSize("dp")) + " DP replicas)");
  const std::vector<int64_t> from = replicaRanks(prefill, in.prefillReplica);
  const std::vector<int64_t> to = replicaRanks(decode, in.decodeReplica);
  // A head the prefill mesh replicates (TP > n_kv) has `copies` holders, TP
  // coordinates h * copies .. (h + 1) * copies - 1: a decode rank takes it
  // from the one whose TP coordinate matches its own modulo `copies`.
  const int64_t tp = prefill.axisSize("tp");
  const int64_t copies = in.numKVHeads < tp ? tp / in.numKVHeads : 1;
  for (int64_t layer = 0; layer < in.numLayers; ++layer)
    for (int64_t d : to) {
      if (decode.stageOfLayer(layer, in.numLayers) != decode.stageOf(d))
        continue;
      auto [dHead, dHeads] = decode.kvHeadRange(d, in.numKVHeads);
      auto dPositions = decode.promptPositions(d, in.promptLength);
      const int64_t turn = decode.coord(d, "tp") % copies;
      for (int64_t s : from) {
        if (prefill.stageOfLayer(layer, in.numLayers) != prefill.stageOf(s) ||
            prefill.coord(s, "tp") % copies != turn)
          continue;
        auto [sHead, sHeads] = prefill.kvHeadRange(s, in.numKVHeads);
        int64_t headBegin = std::max(dHead, sHead);
        int64_t headEnd = std::min(dHead + dHeads, sHead + sHeads);
        if (headBegin >= headEnd)
          continue;
        for (auto [sBegin, sEnd] : prefill.promptPositions(s, in.promptLength))
          for (auto [dBegin, dEnd] : dPositions) {
            KVBlock b{s,
                      d,
                      layer,
                      headBegin,
                      headEnd,
                      std::max(sBegin, dBegin),
                      std::min(sEnd, dEnd),
                      in.kvCopies};
            if (b.positionBegin < b.positionEnd)
              blocks.push_back(b);
          }
      }
    }
  return true;
}

int64_t meshfold::kvTransferMinimumElements(const MeshLayout &decode,
                                            const KVTransferInput &in) {
  const int64_t tp = decode.axisSize("tp");
  const int64_t copies = in.numKVHeads < tp ? tp / in.numKVHeads : 1;
  return in.kvCopies * in.promptLength * in.numKVHeads * in.headDim *
         in.numLayers * copies;
}
