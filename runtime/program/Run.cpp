//===- Run.cpp - The inputs, the DP balancing and the per-rank run --------===//
//
// main reads the inputs once; every rank (mfrt_launch) then loads its
// weights and runs, round by round, the requests the balancer gave its DP
// replica: a replica with fewer requests runs a dummy batch (one token,
// outputs dropped) in the rounds it has none, so that the collectives
// across replicas (the MoE dispatch) see every rank.
//
//===----------------------------------------------------------------------===//

#include "mfrt/program/DeviceBuffers.h"
#include "mfrt/program/Program.h"
#include "mfrt/program/Trace.h"

#include "meshfold/Support/PlanText.h"
#include "mfrt/comm/CommRuntime.h"
#include "mfrt/io/Prompts.h"

#include "mlir/ExecutionEngine/CRunnerUtils.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include <omp.h>

using namespace mfrt;
using namespace meshfold;

extern "C" {
/// The manifest the compiler embeds.
extern const char __mf_manifest[];
/// The compiled entry point (C interface of `func.func @prefill`), absent
/// from a program that runs prefill as a decode step with no history.
__attribute__((weak)) void
_mlir_ciface_prefill(StridedMemRefType<int64_t, 1> *tokens);
/// The decode step (`func.func @decode`), when the program has one.
__attribute__((weak)) void
_mlir_ciface_decode(StridedMemRefType<int64_t, 1> *tokens,
                    StridedMemRefType<int64_t, 1> *positions);
}

namespace {
/// A 1-D memref descriptor of `values`, in memory kernels may read (CUDA
/// mode: managed memory).
struct IdBuffer {
  explicit IdBuffer(const std::vector<int64_t> &values)
      : buffer(values.size() * sizeof(int64_t)) {
    std::memcpy(buffer.data(), values.data(), buffer.size());
    ref.basePtr = ref.data = reinterpret_cast<int64_t *>(buffer.data());
    ref.offset = 0;
    ref.sizes[0] = int64_t(values.size());
    ref.strides[0] = 1;
  }
  SharedBuffer buffer;
  StridedMemRefType<int64_t, 1> ref;
};

/// Runs the compiled program once on `tokens`: its prefill function, or
/// its decode step at positions 0 .. T-1 with no history.
void runPrefill(const std::vector<int64_t> &tokens) {
  IdBuffer in(tokens);
  if (_mlir_ciface_prefill) {
    _mlir_ciface_prefill(&in.ref);
    return;
  }
  std::vector<int64_t> positions(tokens.size());
  for (size_t i = 0; i < positions.size(); ++i)
    positions[i] = int64_t(i);
  IdBuffer pos(positions);
  _mlir_ciface_decode(&in.ref, &pos.ref);
}

/// Generates up to N tokens of request `r` after its prefill: each chosen
/// from the last recorded logits, the next step run on it at the next
/// position, its K/V appended to the request's cache (the K/V of the last
/// generated token is never needed).
void decodeRequest(const Program &prog, RequestOutput &o, int64_t r) {
  const Generation &g = prog.generation;
  const Manifest &m = prog.manifest;
  std::vector<float> prefillLogits = o.logits;
  for (int64_t step = 0; step < g.maxNewTokens; ++step) {
    if (step > 0) {
      int64_t position = o.tokens + step - 1;
      o.length = position + 1;
      o.haveLogits = false;
      IdBuffer token({int64_t(o.generated.back())}), pos({position});
      _mlir_ciface_decode(&token.ref, &pos.ref);
      if (!o.haveLogits)
        fatal("internal: decode step " + std::to_string(step) + " of request " +
              std::to_string(r) + " recorded no logits");
    }
    int64_t id = chooseToken(g, o.logits.data(), m.vocab, r, step);
    o.generated.push_back(int32_t(id));
    if (g.stepLogits)
      o.stepLogits.insert(o.stepLogits.end(), o.logits.begin(), o.logits.end());
    if (!g.ignoreEos && std::find(m.eosTokens.begin(), m.eosTokens.end(), id) !=
                            m.eosTokens.end())
      break;
  }
  // req{r}.logits stays prefill's.
  o.logits = std::move(prefillLogits);
  o.haveLogits = true;
}

/// Prompts longer than the model's max_position_embeddings (when the
/// manifest has it) fail the run, the first one named, unless
/// --allow-long-prompts: then one warning line names the longest.
void checkPromptLengths(const Options &options, const Manifest &m,
                        const std::vector<std::vector<int64_t>> &requests) {
  if (m.maxPositions <= 0)
    return;
  size_t longest = 0, over = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    if (int64_t(requests[r].size()) <= m.maxPositions)
      continue;
    // Request r is line r + 1: the prompts file has no empty lines.
    std::string what = options.prompts + ": line " + std::to_string(r + 1) +
                       ": prompt of " + std::to_string(requests[r].size()) +
                       " tokens is longer than the model's "
                       "max_position_embeddings (" +
                       std::to_string(m.maxPositions) + ")";
    if (!options.allowLongPrompts)
      die(what + " (--allow-long-prompts runs it anyway)");
    if (over++ == 0 || requests[r].size() > requests[longest].size())
      longest = r;
  }
  if (over == 0 || options.quiet)
    return;
  std::fprintf(stderr,
               "%s: warning: %s: %zu prompt%s longer than the model's "
               "max_position_embeddings (%lld), the longest line %zu of %zu "
               "tokens; run as asked (--allow-long-prompts)\n",
               programName(), options.prompts.c_str(), over,
               over == 1 ? "" : "s", (long long)m.maxPositions, longest + 1,
               requests[longest].size());
}

/// --max-new-tokens and the sampling flags against the program and the
/// prompts.
void checkGeneration(const Options &options, const Manifest &m,
                     const std::vector<std::vector<int64_t>> &requests) {
  const Generation &g = options.generation;
  bool sampling = g.temperature > 0;
  if (!options.quiet && !sampling && (g.seedGiven || g.topK > 0 || g.topP < 1))
    std::fprintf(stderr,
                 "%s: warning: --seed, --top-k and --top-p shape sampling; "
                 "with --temperature 0 (the default) decoding is greedy\n",
                 programName());
  if (g.maxNewTokens == 0) {
    if (g.stepLogits || g.ignoreEos || options.reportDecode)
      die("--step-logits, --ignore-eos and --report decode need "
          "--max-new-tokens N (N >= 1)");
    return;
  }
  if (m.decode.empty() || !_mlir_ciface_decode)
    die("--max-new-tokens: this program has no decode step (compile it "
        "with meshfold-compile --decode, one-device plans only so far)");
  if (m.maxPositions <= 0 || options.allowLongPrompts)
    return;
  for (size_t r = 0; r < requests.size(); ++r)
    if (int64_t(requests[r].size()) + g.maxNewTokens > m.maxPositions)
      die("--max-new-tokens " + std::to_string(g.maxNewTokens) + ": request " +
          std::to_string(r) + " (line " + std::to_string(r + 1) + ", " +
          std::to_string(requests[r].size()) +
          " prompt tokens) would pass the model's max_position_embeddings (" +
          std::to_string(m.maxPositions) +
          ") (--allow-long-prompts runs it anyway)");
}

/// Runs this rank's share of the requests: its DP replica's, in rounds that
/// every replica takes part in.
void runRequests(const Program &prog, ProgramRank &rs,
                 std::map<std::string, int64_t> &groups) {
  int64_t replicas = 1, replica = 0;
  if (prog.manifest.plan.find("dp:") != std::string::npos) {
    int64_t dp = groupOf(groups, "dp");
    replicas = mfrt_group_size(dp);
    replica = mfrt_group_rank(dp);
  }
  std::vector<std::vector<int64_t>> assigned = balance(prog.requests, replicas);
  size_t rounds = 0;
  for (const auto &list : assigned)
    rounds = std::max(rounds, list.size());
  std::vector<int64_t> dummy = {0};
  for (size_t round = 0; round < rounds; ++round) {
    const std::vector<int64_t> &mine = assigned[replica];
    bool real = round < mine.size();
    rs.output = real ? prog.outputs[mine[round]].get() : nullptr;
    rs.request = real ? mine[round] : -1;
    mfrt_trace_new_request();
    auto t0 = std::chrono::steady_clock::now();
    runPrefill(real ? prog.requests[mine[round]] : dummy);
    auto t1 = std::chrono::steady_clock::now();
    if (real && prog.generation.maxNewTokens > 0)
      decodeRequest(prog, *rs.output, mine[round]);
    if (real) {
      rs.output->prefillSeconds =
          std::chrono::duration<double>(t1 - t0).count();
      rs.output->decodeSeconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t1)
              .count();
    }
  }
  rs.output = nullptr;
  rs.request = -1;
}

/// --report traffic: this rank's byte counters, by layer, kind and link.
void readTrafficCounters(Program &prog, int rank) {
  std::vector<uint64_t> &t = prog.traffic[size_t(rank)];
  t.assign(
      size_t((prog.manifest.layers + 1) * MFRT_OP_KIND_COUNT * MFRT_LINK_COUNT),
      0);
  size_t at = 0;
  for (int64_t l = -1; l < prog.manifest.layers; ++l)
    for (int k = 0; k < MFRT_OP_KIND_COUNT; ++k)
      for (int n = 0; n < MFRT_LINK_COUNT; ++n)
        t[at++] = mfrt_bytes_sent(mfrt_op_kind(k), mfrt_link(n), l);
}
} // namespace

void mfrt::loadProgram(const Options &options, Program &prog) {
  std::string error;
  if (!parseManifest(__mf_manifest, prog.manifest, error))
    die(error);
  const Manifest &m = prog.manifest;
  if (!parsePrompts(options.prompts, m.vocab, prog.requests, &error))
    die(error);
  checkPromptLengths(options, m, prog.requests);
  checkGeneration(options, m, prog.requests);
  prog.generation = options.generation;
  prog.weights = SafetensorsFile::open(options.weights, &error);
  if (!prog.weights)
    die(error);
  checkWeights(m, *prog.weights);
  allocateOutputs(prog);
}

std::string mfrt::planText(const Manifest &manifest) {
  return manifest.plan.empty() ? "devices=1 gpus_per_node=1 "
                                 "attention=tp:1,cp:1,dp:1,pp:1 "
                                 "experts=ep:1:tp+cp+dp,pp:1:pp"
                               : manifest.plan;
}

int mfrt::ranksOfPlan(const std::string &plan) {
  std::string error;
  std::optional<MeshLayout> layout = layoutFromPlanText(plan, &error);
  if (!layout)
    die(error);
  return int(layout->numDevices());
}

void mfrt::prepareTraffic(Program &prog, const std::string &plan) {
  if (!prog.reportTraffic)
    return;
  std::string error;
  std::optional<MeshLayout> layout = layoutFromPlanText(plan, &error);
  if (!layout)
    die(error);
  prog.traffic.resize(size_t(layout->numDevices()));
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

int mfrt::rankMain(void *) {
  Program &prog = program();
  // The program's part of this rank's state, for as long as the rank runs.
  ProgramRank rs;
  comm::RankState &rank = *comm::currentRank();
  rank.program = &rs;
  rs.manifest = &prog.manifest;
  std::map<std::string, int64_t> groups;
  for (const ManifestGroup &g : prog.manifest.groups)
    rs.groups.push_back(groupOf(groups, g.axes));
  // The OpenMP thread count is a per-thread setting: each rank's thread sets
  // its own before the program's first parallel loop.
  omp_set_num_threads(prog.threadsPerRank);
  loadWeights(rs, groups);
  uploadWeights(rs); // CUDA mode: to the rank's device
  runRequests(prog, rs, groups);
  if (prog.reportTraffic)
    readTrafficCounters(prog, rank.rank);
  if (prog.collectOutputs && prog.reportTraffic)
    collectTraffic(prog);
  if (prog.collectOutputs && traceConfig().traceToken)
    collectTrace(prog);
  if (prog.collectOutputs)
    collectOutputs(prog);
  releaseWeights(rs);
  rank.program = nullptr;
  return 0;
}
