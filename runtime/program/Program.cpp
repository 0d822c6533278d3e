//===- Program.cpp - The emitted program's state and error exits ----------===//

#include "mfrt/program/Program.h"

#include "mfrt/comm/CommRuntime.h"
#include "mfrt/program/Weights.h"

#include "meshfold/Support/PlanText.h"

#include <algorithm>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

using namespace mfrt;
using namespace meshfold;

namespace {
const char *gProgram = "prefill";
} // namespace

Program &mfrt::program() {
  static Program prog;
  return prog;
}

void mfrt::setProgramName(const char *argv0) {
  if (!argv0)
    return;
  const char *slash = std::strrchr(argv0, '/');
  gProgram = slash ? slash + 1 : argv0;
}

const char *mfrt::programName() { return gProgram; }

RequestSource::~RequestSource() = default;

const Generation &mfrt::generationOf(const Program &prog, int64_t r) {
  return prog.source ? prog.served[size_t(r)] : prog.generation;
}

int64_t mfrt::sampleKey(const Program &prog, int64_t r) {
  return prog.source ? 0 : r;
}

void mfrt::die(const std::string &msg) {
  // Ranks are threads: the first one to fail speaks for the process.
  static std::mutex once;
  once.lock();
  if (progressLineOpen())
    std::fputc('\n', stderr);
  std::fprintf(stderr, "%s: error: %s\n", gProgram, msg.c_str());
  std::fflush(stderr);
  // The peers of a process backend learn why before the sockets close.
  if (comm::RankState *rank = comm::currentRank()) {
    comm::FailureRecord seen;
    if (!rank->failure.failed() && !rank->transport.failureSeen(seen))
      rank->transport.raiseFailure({rank->rank, MFRT_ERR_BACKEND, msg});
    rank->transport.beforeExit();
  }
  std::_Exit(1);
}

ProgramRank &mfrt::programRank() {
  comm::RankState *rank = comm::currentRank();
  if (!rank || !rank->program)
    die("internal: a program hook called outside the ranks' run");
  return *rank->program;
}

bool mfrt::countsCompute(const ProgramRank &rs) {
  return program().reportTraffic && !rs.stepping;
}

void mfrt::countCompute(ProgramRank &rs, int64_t layer, ComputeCounter c,
                        uint64_t n) {
  if (!countsCompute(rs) || layer < 0 || layer >= rs.manifest->layers)
    return;
  rs.compute.resize(size_t(rs.manifest->layers * kComputeCounters), 0);
  rs.compute[size_t(layer * kComputeCounters + c)] += n;
}

void mfrt::countRouting(ProgramRank &rs, const int64_t *choices, int64_t n,
                        int64_t experts) {
  const int64_t layers = rs.manifest->layers;
  if (rs.layer < 0 || rs.layer >= layers)
    return;
  rs.routedRows.resize(size_t(layers * experts), 0);
  uint64_t *row = &rs.routedRows[size_t(rs.layer * experts)];
  for (int64_t i = 0; i < n; ++i)
    if (choices[i] >= 0 && choices[i] < experts)
      ++row[choices[i]];
}

void mfrt::fatal(const std::string &msg) {
  comm::RankState *rank = comm::currentRank();
  const ProgramRank *rs = rank ? rank->program : nullptr;
  if (rs && rs->manifest && !rs->manifest->plan.empty())
    die("rank " + std::to_string(rank->rank) + ": " + msg);
  die(msg);
}

Sequence *ProgramRank::sequenceOf(int64_t position, int64_t *place) {
  int64_t slot = stepping ? position >> 32 : prefill;
  int64_t p = stepping ? position & 0xffffffffLL : position;
  if (position < 0 || slot < 0 || slot >= int64_t(sequences.size()))
    return nullptr;
  Sequence &s = sequences[size_t(slot)];
  if (!s.output || p >= s.length || (stepping && !s.inStep))
    return nullptr;
  *place = p;
  return &s;
}

std::string mfrt::planText(const Manifest &manifest) {
  return manifest.plan.empty() ? formatPlanText(PlanSpec::singleDevice())
                               : manifest.plan;
}

MeshLayout mfrt::layoutOf(const Manifest &m) {
  std::string error;
  std::optional<MeshLayout> layout = layoutFromPlanText(planText(m), &error);
  if (!layout)
    fatal(error);
  return *layout;
}

int64_t mfrt::replicaOf(const Program &prog, const MeshLayout &layout,
                        int64_t r) {
  std::vector<std::vector<int64_t>> assigned =
      balance(prog.requests, layout.axisSize("dp"));
  for (size_t q = 0; q < assigned.size(); ++q)
    if (std::find(assigned[q].begin(), assigned[q].end(), r) !=
        assigned[q].end())
      return int64_t(q);
  fatal("internal: request " + std::to_string(r) + " has no replica");
}

std::vector<KVBlock> mfrt::transferBlocks(const Program &prog,
                                          int64_t request) {
  const MeshLayout prefill = layoutOf(prog.manifest),
                   decode = layoutOf(prog.decodeManifest);
  KVTransferInput in;
  in.numLayers = prog.manifest.layers;
  in.numKVHeads = prog.manifest.kvHeads;
  in.headDim = prog.manifest.headDim;
  in.kvCopies = prog.manifest.kvCopies();
  in.promptLength = int64_t(prog.requests[size_t(request)].size());
  in.prefillReplica = replicaOf(prog, prefill, request);
  in.decodeReplica = replicaOf(prog, decode, request);
  std::vector<KVBlock> blocks;
  std::string error;
  if (!planKVTransfer(prefill, decode, in, blocks, &error))
    fatal(error);
  return blocks;
}

std::vector<std::vector<int64_t>>
mfrt::balance(const std::vector<std::vector<int64_t>> &requests,
              int64_t replicas) {
  std::vector<int64_t> order(requests.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = int64_t(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return requests[a].size() > requests[b].size();
  });
  std::vector<std::vector<int64_t>> assigned(static_cast<size_t>(replicas));
  std::vector<int64_t> load(static_cast<size_t>(replicas), 0);
  for (int64_t r : order) {
    size_t best =
        size_t(std::min_element(load.begin(), load.end()) - load.begin());
    assigned[best].push_back(r);
    load[best] += int64_t(requests[r].size());
  }
  // Each replica runs its requests in prompt order.
  for (auto &list : assigned)
    std::sort(list.begin(), list.end());
  return assigned;
}
