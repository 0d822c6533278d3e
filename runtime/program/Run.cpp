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
#include <unistd.h>

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

/// This rank's byte counters so far, by layer (-1 first), kind and link.
std::vector<uint64_t> readCounters(const Program &prog) {
  std::vector<uint64_t> t(
      size_t((prog.manifest.layers + 1) * MFRT_OP_KIND_COUNT * MFRT_LINK_COUNT),
      0);
  size_t at = 0;
  for (int64_t l = -1; l < prog.manifest.layers; ++l)
    for (int k = 0; k < MFRT_OP_KIND_COUNT; ++k)
      for (int n = 0; n < MFRT_LINK_COUNT; ++n)
        t[at++] = mfrt_bytes_sent(mfrt_op_kind(k), mfrt_link(n), l);
  return t;
}

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

/// The groups a decode loop agrees over: the ranks of this rank's DP
/// replica (every attention axis but dp) and its peers in the other
/// replicas (dp); -1 where the group has one member. The replica's first
/// rank (`recorder`) keeps its requests' generated ids and timings.
struct DecodeGroups {
  int64_t replica = -1, dp = -1;
  bool recorder = true;
};

DecodeGroups decodeGroups(const Program &prog,
                          std::map<std::string, int64_t> &groups) {
  DecodeGroups d;
  if (prog.generation.maxNewTokens == 0 || mfrt_world_size() <= 1)
    return d;
  std::string error;
  std::optional<MeshLayout> layout =
      layoutFromPlanText(planText(prog.manifest), &error);
  if (!layout)
    fatal(error);
  std::string axes;
  for (const MeshAxis &a : layout->spec().attention)
    if (a.name != "dp" && a.size > 1)
      axes += (axes.empty() ? "" : ",") + a.name;
  if (!axes.empty())
    d.replica = groupOf(groups, axes);
  if (layout->hasAxis("dp") && layout->axisSize("dp") > 1)
    d.dp = groupOf(groups, "dp");
  d.recorder = d.replica < 0 || mfrt_group_rank(d.replica) == 0;
  return d;
}

/// Sums `n` floats over `group` in place (nothing for a one-member group).
void sumOver(int64_t group, float *x, int64_t n, const char *what) {
  if (group < 0)
    return;
  if (mfrt_all_reduce(group, x, x, n, MFRT_F32) != MFRT_OK)
    fatal(std::string(what) + ": " + mfrt_last_error());
}

/// Generates up to N tokens of this replica's request `r` (none for a dummy
/// round: `o` null) after its prefill. Each step the rank that recorded the
/// logits (the LM head's, on the last stage) picks the token; the replica
/// learns it (the loop's back edge to the first stage), and the replicas
/// agree to go on while any of them generates: a replica done early runs
/// dummy steps, so that every MoE rendezvous sees all of them. The next
/// step then runs the token at the next position, its K/V appended to the
/// caches of the ranks that own that position (the K/V of the last
/// generated token is never needed). Returns the number of steps run.
int64_t decodeRequest(const Program &prog, ProgramRank &rs, RequestOutput *o,
                      int64_t r, const DecodeGroups &groups) {
  const Generation &g = prog.generation;
  const Manifest &m = prog.manifest;
  bool live = o != nullptr;
  int64_t token = 0, reached = rs.length;
  std::vector<float> prefillLogits;
  if (live && rs.recordedLogits)
    prefillLogits = o->logits;
  bool prefillHolder = live && rs.recordedLogits;
  std::vector<float> msg(size_t(2 + (g.stepLogits ? m.vocab : 0)));
  for (int64_t step = 0;; ++step) {
    std::fill(msg.begin(), msg.end(), 0.0f);
    if (live && rs.recordedLogits) {
      std::lock_guard<std::mutex> lock(o->mutex);
      int64_t id = chooseToken(g, o->logits.data(), m.vocab, r, step);
      bool eos = !g.ignoreEos &&
                 std::find(m.eosTokens.begin(), m.eosTokens.end(), id) !=
                     m.eosTokens.end();
      msg[0] = float(id + 1);
      msg[1] = eos || step + 1 == g.maxNewTokens ? 1.0f : 0.0f;
      if (g.stepLogits)
        std::copy(o->logits.begin(), o->logits.end(), msg.begin() + 2);
      o->haveLogits = false;
      rs.recordedLogits = false;
    }
    // Every rank of the replica takes part, live or not.
    sumOver(groups.replica, msg.data(), int64_t(msg.size()),
            "decode: sharing the chosen token");
    if (live) {
      if (msg[0] < 1)
        fatal("internal: decode step " + std::to_string(step) + " of request " +
              std::to_string(r) + " recorded no logits");
      token = int64_t(msg[0]) - 1;
      if (groups.recorder) {
        std::lock_guard<std::mutex> lock(o->mutex);
        o->generated.push_back(int32_t(token));
        if (g.stepLogits)
          o->stepLogits.insert(o->stepLogits.end(), msg.begin() + 2, msg.end());
      }
      live = msg[1] == 0.0f;
    }
    float any = live ? 1.0f : 0.0f;
    sumOver(groups.dp, &any, 1, "decode: agreeing on the next step");
    if (any == 0.0f)
      break;
    rs.step = step + 1;
    if (live) {
      int64_t position = o->tokens + step;
      rs.length = reached = position + 1;
      rs.output = o;
      IdBuffer ids({token}), pos({position});
      _mlir_ciface_decode(&ids.ref, &pos.ref);
    } else {
      // A dummy step: its one row is padding (nothing recorded, nothing
      // dispatched).
      rs.length = 0;
      rs.output = nullptr;
      IdBuffer ids({0}), pos({0});
      _mlir_ciface_decode(&ids.ref, &pos.ref);
    }
  }
  int64_t steps = rs.step;
  rs.output = o;
  rs.length = reached;
  rs.step = 0;
  if (!o)
    return steps;
  std::lock_guard<std::mutex> lock(o->mutex);
  o->length = std::max(o->length, reached);
  // req{r}.logits stays prefill's.
  if (prefillHolder) {
    o->logits = std::move(prefillLogits);
    o->haveLogits = true;
  }
  return steps;
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
        "with meshfold-compile --decode)");
  // A chosen id travels to the replica's ranks as an f32 (exact below 2^24).
  if (m.vocab >= (int64_t(1) << 24))
    die("--max-new-tokens: the vocabulary of " + std::to_string(m.vocab) +
        " ids is larger than generation supports (2^24)");
  // Every request's K/V outputs get room for T + N - 1 positions up front.
  double bytes = 0;
  for (const std::vector<int64_t> &r : requests)
    bytes += double(r.size() + size_t(g.maxNewTokens) - 1) *
             double(m.layers * m.kvHeads) * (2.0 * double(m.headDim) * 4 + 1);
  double memory =
      double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  if (memory > 0 && bytes > memory)
    die("--max-new-tokens " + std::to_string(g.maxNewTokens) +
        ": the requests' K/V outputs would take " +
        std::to_string(int64_t(bytes / double(1ull << 30))) +
        " GiB, more than this machine's " +
        std::to_string(int64_t(memory / double(1ull << 30))) +
        " GiB of memory");
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
  DecodeGroups decode = decodeGroups(prog, groups);
  std::vector<int64_t> dummy = {0};
  for (size_t round = 0; round < rounds; ++round) {
    const std::vector<int64_t> &mine = assigned[replica];
    bool real = round < mine.size();
    RequestOutput *o = real ? prog.outputs[mine[round]].get() : nullptr;
    rs.output = o;
    rs.request = real ? mine[round] : -1;
    // The rank's cache of this request starts empty.
    rs.cachedPositions.assign(size_t(prog.manifest.layers), {});
    rs.length = real ? o->tokens : 0;
    rs.step = 0;
    rs.recordedLogits = false;
    mfrt_trace_new_request();
    auto t0 = std::chrono::steady_clock::now();
    runPrefill(real ? prog.requests[mine[round]] : dummy);
    auto t1 = std::chrono::steady_clock::now();
    if (prog.generation.maxNewTokens > 0) {
      // --report traffic tells decode's bytes from prefill's.
      std::vector<uint64_t> before;
      if (prog.reportTraffic)
        before = readCounters(prog);
      rs.decodeSteps += decodeRequest(prog, rs, o, rs.request, decode);
      if (prog.reportTraffic) {
        std::vector<uint64_t> after = readCounters(prog);
        rs.decodeTraffic.resize(after.size(), 0);
        for (size_t i = 0; i < after.size(); ++i)
          rs.decodeTraffic[i] += after[i] - before[i];
      }
    }
    if (real && decode.recorder) {
      std::lock_guard<std::mutex> lock(o->mutex);
      o->prefillSeconds = std::chrono::duration<double>(t1 - t0).count();
      o->decodeSeconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t1)
              .count();
    }
  }
  rs.output = nullptr;
  rs.request = -1;
}

/// --report traffic: this rank's counters of prefill, then of its decode
/// steps, then the number of those steps (Program::traffic).
void readTrafficCounters(Program &prog, const ProgramRank &rs, int rank) {
  std::vector<uint64_t> t = readCounters(prog);
  std::vector<uint64_t> decode = rs.decodeTraffic;
  decode.resize(t.size(), 0);
  for (size_t i = 0; i < t.size(); ++i)
    t[i] -= decode[i];
  t.insert(t.end(), decode.begin(), decode.end());
  t.push_back(uint64_t(rs.decodeSteps));
  prog.traffic[size_t(rank)] = std::move(t);
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
    readTrafficCounters(prog, rs, rank.rank);
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
