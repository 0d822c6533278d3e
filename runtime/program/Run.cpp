//===- Run.cpp - The inputs, the DP balancing and the per-rank run --------===//
//
// main reads the inputs once; every rank (mfrt_launch) then loads its
// weights and runs the requests the balancer gave its DP replica, as a
// stream of calls (prefills, decode steps) that every replica takes part
// in: a replica with nothing to run in a call runs a dummy batch (one
// token, outputs dropped), so that the collectives across replicas (the
// MoE dispatch) see every rank.
//
//===----------------------------------------------------------------------===//

#include "mfrt/program/Run.h"

#include "mfrt/program/DeviceBuffers.h"
#include "mfrt/program/Options.h"
#include "mfrt/program/Outputs.h"
#include "mfrt/program/PrefixCache.h"
#include "mfrt/program/Program.h"
#include "mfrt/program/Sampling.h"
#include "mfrt/program/Serving.h"
#include "mfrt/program/Trace.h"
#include "mfrt/program/Weights.h"

#include "meshfold/Support/PlanText.h"
#include "meshfold/Support/TrafficModel.h"
#include "mfrt/ProgramSymbols.h"
#include "mfrt/comm/CommRuntime.h"
#include "mfrt/io/Prompts.h"
#include "mfrt/tokenizer/Tokenizer.h"

#include "mlir/ExecutionEngine/CRunnerUtils.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <set>

#include <omp.h>
#include <unistd.h>

using namespace mfrt;
using namespace meshfold;

// The symbols the compiler emits, by their names in mfrt/ProgramSymbols.h.
extern "C" {
/// The manifest the compiler embeds (__mf_manifest).
extern const char MFRT_MANIFEST_SYMBOL[];
/// The compiled entry point (C interface of `func.func @prefill`), absent
/// from a program that runs prefill as a decode step with no history.
__attribute__((weak)) void
MFRT_PREFILL_CIFACE(StridedMemRefType<int64_t, 1> *tokens);
/// The decode step (`func.func @decode`), when the program has one.
__attribute__((weak)) void
MFRT_DECODE_CIFACE(StridedMemRefType<int64_t, 1> *tokens,
                   StridedMemRefType<int64_t, 1> *positions);
/// A program of two pools (meshfold-compile --decode-plan): the decode
/// pool's manifest and step, under kPoolSymbolPrefix.
__attribute__((weak)) extern const char MFRT_POOL_MANIFEST_SYMBOL[];
__attribute__((weak)) void
MFRT_POOL_DECODE_CIFACE(StridedMemRefType<int64_t, 1> *tokens,
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

using DecodeFn = void (*)(StridedMemRefType<int64_t, 1> *,
                          StridedMemRefType<int64_t, 1> *);

/// The decode step the calling rank runs: its pool's.
DecodeFn decodeStep() {
  return mfrt_pool() == 1 ? MFRT_POOL_DECODE_CIFACE : MFRT_DECODE_CIFACE;
}

/// Runs the compiled program once on `tokens`: its prefill function, or
/// its decode step at positions 0 .. T-1 with no history.
void runPrefill(const std::vector<int64_t> &tokens) {
  IdBuffer in(tokens);
  if (MFRT_PREFILL_CIFACE) {
    MFRT_PREFILL_CIFACE(&in.ref);
    return;
  }
  std::vector<int64_t> positions(tokens.size());
  for (size_t i = 0; i < positions.size(); ++i)
    positions[i] = int64_t(i);
  IdBuffer pos(positions);
  decodeStep()(&in.ref, &pos.ref);
}

/// The groups a decode loop agrees over: the ranks of this rank's DP
/// replica (every attention axis but dp) and its peers in the other
/// replicas (dp); -1 where the group has one member. The replica's first
/// rank (`recorder`) keeps its requests' generated ids and timings.
struct DecodeGroups {
  int64_t replica = -1, dp = -1;
  bool recorder = true;
  /// The most prefills and steps in flight at once before a step
  /// (--micro-batches; at most the pipeline's stages).
  int64_t microBatches = 1;
  /// Calls from a call to the first that may use its tokens: the pipeline
  /// stages where sends are buffered (a stage starts its next call while
  /// the later stages compute the last one), else 1.
  int64_t lag = 1;
  /// This rank joins the sharing of call c's tokens right after its own
  /// call c + joinDelay: the last stage at once, each earlier stage one
  /// call later than the stage after it.
  int64_t joinDelay = 0;
};

DecodeGroups decodeGroups(const Program &prog, const Manifest &m,
                          std::map<std::string, int64_t> &groups) {
  DecodeGroups d;
  if (prog.generation.maxNewTokens == 0 || mfrt_world_size() <= 1)
    return d;
  std::string error;
  std::optional<MeshLayout> layout = layoutFromPlanText(planText(m), &error);
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
  int64_t stages = layout->hasAxis("pp") ? layout->axisSize("pp") : 1;
  d.microBatches = prog.generation.microBatches > 0
                       ? std::min(stages, prog.generation.microBatches)
                       : stages;
  if (stages > 1 && prog.bufferedSends) {
    d.lag = stages;
    d.joinDelay = stages - 1 - mfrt_group_rank(groupOf(groups, "pp"));
  }
  return d;
}

/// Sums `n` floats over `group` in place (nothing for a one-member group).
void sumOver(int64_t group, float *x, int64_t n, const char *what) {
  if (group < 0)
    return;
  if (mfrt_all_reduce(group, x, x, n, MFRT_F32) != MFRT_OK)
    fatal(std::string(what) + ": " + mfrt_last_error());
}

/// Adds to `sum` the counters' growth since `before` (--report traffic).
void addTraffic(const Program &prog, const std::vector<uint64_t> &before,
                std::vector<uint64_t> &sum) {
  std::vector<uint64_t> after = readCounters(prog);
  sum.resize(after.size(), 0);
  for (size_t i = 0; i < after.size(); ++i)
    sum[i] += after[i] - before[i];
}

/// The K/V rows request `r` reserves when it is admitted: its prompt's
/// (its decode steps reserve their rows as they come, reserveStep).
int64_t kvRows(const Program &prog, int64_t r) {
  return int64_t(prog.requests[size_t(r)].size());
}

/// Whether the rank's K/V cache has `blocks` blocks free, retained
/// requests' included (every rank of a replica answers alike: the counts
/// are the replica's).
bool kvFits(const ProgramRank &rs, int64_t blocks) {
  return rs.kvFree < 0 || blocks <= rs.kvFree + retainedBlocks(rs);
}
bool kvAdmits(const Program &prog, const ProgramRank &rs, int64_t r) {
  return kvFits(rs, kvBlocksFor(kvRows(prog, r), prog.kv.blockTokens));
}

/// A free slot of the rank's sequences.
int64_t freeSlot(ProgramRank &rs) {
  int64_t slot = -1;
  while (++slot < int64_t(rs.sequences.size()))
    if (!rs.sequences[size_t(slot)].output)
      return slot;
  rs.sequences.emplace_back();
  return slot;
}

/// Reserves `blocks` more blocks for `s` (free: the caller checked kvFits;
/// retained requests are evicted to make them free).
void reserveBlocks(ProgramRank &rs, Sequence &s, int64_t blocks) {
  PrefixHit none;
  makeRoom(rs, blocks, none);
  s.kvReserved += blocks;
  if (rs.kvFree >= 0)
    rs.kvFree -= blocks;
}

/// Request `r` in a free slot of the rank's sequences (`slot`), its cache
/// empty with its blocks reserved, its length its prompt's.
Sequence &admit(const Program &prog, ProgramRank &rs, int64_t r,
                int64_t &slot) {
  slot = freeSlot(rs);
  Sequence &s = rs.sequences[size_t(slot)];
  s = Sequence();
  s.output = prog.outputs[size_t(r)].get();
  s.request = r;
  s.cachedPositions.assign(size_t(prog.manifest.layers), {});
  s.length = s.output->tokens;
  s.admission = rs.admissions++;
  if (!kvAdmits(prog, rs, r))
    fatal("internal: request " + std::to_string(r) +
          " admitted without free K/V blocks");
  reserveBlocks(rs, s, kvBlocksFor(kvRows(prog, r), prog.kv.blockTokens));
  return s;
}

/// The request in `s` leaves the rank: its K/V blocks go back to the pool
/// (with --prefix-cache, once a finished request is no longer retained)
/// and its slot is free.
void leave(const Program &prog, ProgramRank &rs, Sequence &s) {
  if (prog.prefixCache)
    return retain(prog, rs, s);
  releaseBlocks(rs, s);
  s = Sequence();
}

/// Runs the prefill of request `r` (a dummy batch when `r` < 0, in which
/// every replica's ranks take part) in a free slot of the rank's sequences,
/// which it returns (-1 for a dummy). The counters' growth goes to
/// `prefillTraffic`.
int64_t runRequestPrefill(const Program &prog, ProgramRank &rs, int64_t r,
                          const DecodeGroups &groups,
                          std::vector<uint64_t> &prefillTraffic) {
  int64_t slot = -1;
  if (r >= 0)
    admit(prog, rs, r, slot);
  rs.prefill = slot;
  rs.stepping = false;
  mfrt_trace_new_request();
  std::vector<uint64_t> before;
  if (prog.reportTraffic)
    before = readCounters(prog);
  double t0 = secondsNow();
  runPrefill(r >= 0 ? prog.requests[size_t(r)] : std::vector<int64_t>{0});
  double t1 = secondsNow();
  if (prog.reportTraffic)
    addTraffic(prog, before, prefillTraffic);
  rs.prefill = -1;
  if (slot < 0)
    return slot;
  Sequence &s = rs.sequences[size_t(slot)];
  s.prefillEnd = t1;
  if (groups.recorder) {
    std::lock_guard<std::mutex> lock(s.output->mutex);
    s.output->prefillSeconds = t1 - t0;
  }
  return slot;
}

/// Serving: the replica's recorder marks request output `o` ended, for
/// `reason`, and tells the server.
void markFinished(const Program &prog, RequestOutput &o, const char *reason,
                  const DecodeGroups &groups) {
  if (!prog.source || !groups.recorder)
    return;
  {
    std::lock_guard<std::mutex> lock(o.mutex);
    o.finished = true;
    o.finishReason = reason;
  }
  prog.source->progressed();
}

/// A request is done (for `reason`, as markFinished): its outputs learn its
/// length and decode time, and its slot (with this rank's cache of it) is
/// freed.
void finishSequence(const Program &prog, ProgramRank &rs, Sequence &s,
                    const DecodeGroups &groups, const char *reason) {
  RequestOutput *o = s.output;
  {
    std::lock_guard<std::mutex> lock(o->mutex);
    o->length = std::max(o->length, s.length);
    if (groups.recorder)
      o->decodeSeconds = secondsNow() - s.prefillEnd;
  }
  leave(prog, rs, s);
  markFinished(prog, *o, reason, groups);
}

/// The width of a chosen token's message (joinTokens, handOff): its id + 1,
/// whether the request is done (1: its max tokens, 2: an eos token), with
/// --step-logits the logits that chose it, and when serving the token's
/// logprob and the top ids (+ 1) with theirs (logprobAt).
size_t tokenWidth(const Program &prog) {
  return size_t(2 + (prog.generation.stepLogits ? prog.manifest.vocab : 0) +
                (prog.source ? 1 + 2 * kTopLogprobs : 0));
}
size_t logprobAt(const Program &prog) {
  return size_t(2 + (prog.generation.stepLogits ? prog.manifest.vocab : 0));
}

/// Serving: the logprob of `id` among `logits [vocab]` and the `top` most
/// likely ids (+ 1) with theirs, into `at`.
void writeLogprobs(const float *logits, int64_t vocab, int64_t id, int64_t top,
                   float *at) {
  double most = *std::max_element(logits, logits + vocab), sum = 0;
  for (int64_t v = 0; v < vocab; ++v)
    sum += std::exp(double(logits[v]) - most);
  double lse = most + std::log(sum);
  at[0] = float(double(logits[id]) - lse);
  std::vector<int64_t> ids(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v)
    ids[size_t(v)] = v;
  top = std::min(top, vocab);
  std::partial_sort(
      ids.begin(), ids.begin() + top, ids.end(),
      [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  for (int64_t i = 0; i < top; ++i) {
    at[1 + 2 * i] = float(ids[size_t(i)] + 1);
    at[2 + 2 * i] = float(double(logits[ids[size_t(i)]]) - lse);
  }
}

/// A call of the generation loop (a prefill, a decode step, or a wait for
/// the calls in later stages) whose tokens the rank has not applied yet.
struct Call {
  int64_t index = 0;
  enum Kind { Prefill, Step, Wait } kind = Wait;
  /// The sequences it ran, by slot (none: a dummy or a wait).
  std::vector<int64_t> slots;
  /// Once joined: the replica's message of their tokens (joinTokens).
  std::vector<float> tokens;
};

/// The sharing of `call`'s tokens, which every rank of the replica joins
/// (the last stage right after computing the call, each earlier stage
/// after its own later calls): the rank that recorded a sequence's logits
/// (the LM head's, on the last stage) picks its token and whether the
/// request is done (its eos, or N tokens), and one all-reduce over the
/// replica gives the picks to every rank (the loop's back edge to the first
/// stage). A prefill's first token is known to the recorder from then on.
void joinTokens(const Program &prog, ProgramRank &rs, Call &call,
                const DecodeGroups &groups) {
  if (call.slots.empty())
    return; // the replica's ranks agree: a dummy or a wait
  const Manifest &m = prog.manifest;
  size_t width = tokenWidth(prog);
  std::vector<float> &msg = call.tokens;
  msg.assign(call.slots.size() * width, 0.0f);
  for (size_t i = 0; i < call.slots.size(); ++i) {
    Sequence &s = rs.sequences[size_t(call.slots[i])];
    if (!s.recordedLogits)
      continue;
    const Generation &g = generationOf(prog, s.request);
    float *at = msg.data() + i * width;
    int64_t id = chooseToken(g, s.logits.data(), m.vocab,
                             sampleKey(prog, s.request), s.generated);
    bool eos = !g.ignoreEos && std::find(m.eosTokens.begin(), m.eosTokens.end(),
                                         id) != m.eosTokens.end();
    at[0] = float(id + 1);
    at[1] = eos ? 2.0f : s.generated + 1 == g.maxNewTokens ? 1.0f : 0.0f;
    if (prog.generation.stepLogits)
      std::copy(s.logits.begin(), s.logits.end(), at + 2);
    if (prog.source && g.logprobs >= 0)
      writeLogprobs(s.logits.data(), m.vocab, id, g.logprobs,
                    at + logprobAt(prog));
    s.recordedLogits = false;
  }
  // Every rank of the replica takes part.
  sumOver(groups.replica, msg.data(), int64_t(msg.size()),
          "decode: sharing the chosen tokens");
  // A prefill's, or a prompt's last chunk's, first token.
  for (int64_t slot : call.slots) {
    const Sequence &s = rs.sequences[size_t(slot)];
    if (s.generated > 0 || !groups.recorder)
      continue;
    std::lock_guard<std::mutex> lock(s.output->mutex);
    s.output->firstTokenSeconds = secondsNow() - rs.runStart;
  }
}

/// Serving: a generated token's logprob and its `top` alternatives, from
/// writeLogprobs' message `at`, into the request's outputs (locked).
void recordLogprobs(RequestOutput &o, const float *at, int64_t top) {
  o.tokenLogprobs.push_back(at[0]);
  std::vector<std::pair<int32_t, float>> alternatives;
  for (int64_t i = 0; i < top && at[1 + 2 * i] >= 1; ++i)
    alternatives.emplace_back(int32_t(at[1 + 2 * i]) - 1, at[2 + 2 * i]);
  o.topLogprobs.push_back(std::move(alternatives));
}

/// Applies the tokens of a joined `call` (every rank of the replica at the
/// same call of its loop, so that all decide the next calls alike): each
/// sequence's next input, its count, the recorder's ids (and --step-logits
/// rows); a finished request leaves the batch.
void applyTokens(const Program &prog, ProgramRank &rs, const Call &call,
                 const DecodeGroups &groups) {
  const Generation &g = prog.generation;
  size_t width = tokenWidth(prog);
  for (size_t i = 0; i < call.slots.size(); ++i) {
    Sequence &s = rs.sequences[size_t(call.slots[i])];
    const float *at = call.tokens.data() + i * width;
    if (at[0] < 1)
      fatal("internal: step " + std::to_string(s.generated) + " of request " +
            std::to_string(s.request) + " recorded no logits");
    s.token = int64_t(at[0]) - 1;
    ++s.generated;
    s.inFlight = false;
    if (groups.recorder) {
      std::lock_guard<std::mutex> lock(s.output->mutex);
      s.output->generated.push_back(int32_t(s.token));
      s.output->tokenSeconds.push_back(secondsNow() - rs.runStart);
      if (g.stepLogits)
        s.output->stepLogits.insert(s.output->stepLogits.end(), at + 2,
                                    at + logprobAt(prog));
      if (prog.source && generationOf(prog, s.request).logprobs >= 0)
        recordLogprobs(*s.output, at + logprobAt(prog),
                       generationOf(prog, s.request).logprobs);
    }
    if (prog.source && groups.recorder)
      prog.source->progressed();
    if (at[1] != 0.0f || s.cancelled)
      finishSequence(prog, rs, s, groups,
                     s.cancelled   ? "cancelled"
                     : at[1] > 1.5 ? "stop"
                                   : "length");
  }
}

/// The global rank that sends a request's first token to the decode pool:
/// the first rank of the prefill replica that ran it.
int tokenSender(const MeshLayout &prefill, int64_t replica) {
  return int(prefill.rankOf({{"dp", replica}}));
}

/// Prefill pool, after the prefill of `s`: the rank that recorded its
/// logits picks its first token (and whether it is done: its eos, or
/// N = 1), the prefill replica learns it, and its first rank sends it to
/// every rank of the request's decode replica (its K/V went there layer
/// by layer). The request then leaves the prefill pool.
void handOff(const Program &prog, ProgramRank &rs, Sequence &s,
             const DecodeGroups &groups) {
  const Generation &g = prog.generation;
  const Manifest &m = prog.manifest;
  std::vector<float> msg(tokenWidth(prog), 0.0f);
  if (s.recordedLogits) {
    int64_t id = chooseToken(g, s.logits.data(), m.vocab, s.request, 0);
    bool eos = !g.ignoreEos && std::find(m.eosTokens.begin(), m.eosTokens.end(),
                                         id) != m.eosTokens.end();
    msg[0] = float(id + 1);
    msg[1] = eos ? 2.0f : g.maxNewTokens == 1 ? 1.0f : 0.0f;
    if (g.stepLogits)
      std::copy(s.logits.begin(), s.logits.end(), msg.begin() + 2);
  }
  sumOver(groups.replica, msg.data(), int64_t(msg.size()),
          "handing a request to the decode pool");
  if (msg[0] < 1)
    fatal("internal: the prefill of request " + std::to_string(s.request) +
          " recorded no logits");
  const MeshLayout prefill = layoutOf(prog.manifest),
                   decode = layoutOf(prog.decodeManifest);
  int64_t p = replicaOf(prog, prefill, s.request);
  if (mfrt_rank() == tokenSender(prefill, p)) {
    for (int64_t d : replicaRanks(decode, replicaOf(prog, decode, s.request)))
      if (sendHost(int(prefill.numDevices() + d), msg.data(),
                   int64_t(msg.size()), MFRT_F32) != MFRT_OK)
        fatal(std::string("sending a first token to the decode pool: ") +
              mfrt_last_error());
    std::lock_guard<std::mutex> lock(s.output->mutex);
    s.output->firstTokenSeconds = secondsNow() - rs.runStart;
  }
  leave(prog, rs, s);
}

/// Decode pool: the K/V of block `b` received in `buf` (K then V, by head,
/// position and element) into the rank's cache of `s` (`slots`: the slot
/// of each position) and, with --out's K/V, the request's outputs.
void storeReceivedKV(const Program &prog, ProgramRank &rs, Sequence &s,
                     const KVBlock &b, const std::vector<float> &buf,
                     const std::map<int64_t, int64_t> &slots) {
  const Manifest &m = prog.manifest;
  RequestOutput *out = s.output;
  int64_t positions = b.positionEnd - b.positionBegin;
  int64_t first = rs.kv.headOffset(b.layer);
  const float *kIn = buf.data(), *vIn = kIn + buf.size() / size_t(b.kvCopies);
  for (int64_t i = 0; i < positions; ++i) {
    int64_t pos = b.positionBegin + i, slot = slots.at(pos);
    for (int64_t h = b.headBegin; h < b.headEnd; ++h) {
      const int64_t from = ((h - b.headBegin) * positions + i) * m.headDim;
      const int64_t to = (h - first) * m.headDim;
      std::copy_n(kIn + from, m.headDim,
                  rs.kv.row(s.blocks, b.layer, slot, 0) + to);
      if (b.kvCopies == 2)
        std::copy_n(vIn + from, m.headDim,
                    rs.kv.row(s.blocks, b.layer, slot, 1) + to);
      if (!prog.kvOutputs)
        continue;
      int64_t at = (pos * m.kvHeads + h) * m.headDim;
      std::lock_guard<std::mutex> lock(out->mutex);
      std::copy_n(kIn + from, m.headDim,
                  out->keys[size_t(b.layer)].begin() + at);
      if (b.kvCopies == 2)
        std::copy_n(vIn + from, m.headDim,
                    out->values[size_t(b.layer)].begin() + at);
      out->written[size_t(b.layer)][size_t(pos * m.kvHeads + h)] = 1;
    }
  }
}

/// Decode pool: admits request `r` into a free slot once its K/V blocks
/// (transferBlocks) and its first token came from the prefill pool; the
/// rank's cache of it then holds its prompt's positions in this mesh's own
/// layout, in order. A request done at its first token leaves at once.
void receiveRequest(const Program &prog, ProgramRank &rs, int64_t r,
                    const DecodeGroups &groups) {
  const Manifest &m = prog.manifest;
  int64_t slot = -1;
  Sequence &s = admit(prog, rs, r, slot);
  RequestOutput *out = s.output;
  const MeshLayout prefill = layoutOf(prog.manifest);
  const int me = mfrt_rank() - int(prefill.numDevices());
  std::vector<KVBlock> blocks = transferBlocks(prog, r);
  blocks.erase(std::remove_if(blocks.begin(), blocks.end(),
                              [&](const KVBlock &b) { return b.to != me; }),
               blocks.end());
  // The rank's cache of the request holds its positions in order (its
  // slots), each layer's heads from the first its blocks carry.
  std::vector<std::set<int64_t>> cached(size_t(m.layers));
  std::vector<std::pair<int64_t, int64_t>> heads(size_t(m.layers),
                                                 {INT64_MAX, 0});
  for (const KVBlock &b : blocks) {
    for (int64_t pos = b.positionBegin; pos < b.positionEnd; ++pos)
      cached[size_t(b.layer)].insert(pos);
    auto &[first, end] = heads[size_t(b.layer)];
    first = std::min(first, b.headBegin);
    end = std::max(end, b.headEnd);
  }
  std::vector<std::map<int64_t, int64_t>> slots(size_t(m.layers));
  for (int64_t l = 0; l < m.layers; ++l) {
    s.cachedPositions[size_t(l)].assign(cached[size_t(l)].begin(),
                                        cached[size_t(l)].end());
    for (int64_t pos : s.cachedPositions[size_t(l)])
      slots[size_t(l)].emplace(pos, int64_t(slots[size_t(l)].size()));
    if (!cached[size_t(l)].empty())
      rs.kv.useHeads(l, heads[size_t(l)].first,
                     heads[size_t(l)].second - heads[size_t(l)].first);
    rs.kv.reserve(s.blocks, int64_t(cached[size_t(l)].size()));
  }
  std::vector<float> buf;
  for (const KVBlock &b : blocks) {
    buf.resize(size_t(b.elements(m.headDim)));
    if (recvHost(int(b.from), buf.data(), int64_t(buf.size()), MFRT_F32) !=
        MFRT_OK)
      fatal(std::string("receiving K/V from the prefill pool: ") +
            mfrt_last_error());
    storeReceivedKV(prog, rs, s, b, buf, slots[size_t(b.layer)]);
  }
  std::vector<float> msg(tokenWidth(prog));
  if (recvHost(tokenSender(prefill, replicaOf(prog, prefill, r)), msg.data(),
               int64_t(msg.size()), MFRT_F32) != MFRT_OK)
    fatal(std::string("receiving a first token from the prefill pool: ") +
          mfrt_last_error());
  s.token = int64_t(msg[0]) - 1;
  s.generated = 1;
  s.prefillEnd = secondsNow();
  if (groups.recorder) {
    std::lock_guard<std::mutex> lock(out->mutex);
    out->generated.push_back(int32_t(s.token));
    if (prog.generation.stepLogits)
      out->stepLogits.insert(out->stepLogits.end(), msg.begin() + 2, msg.end());
  }
  if (msg[1] != 0.0f)
    finishSequence(prog, rs, s, groups, msg[1] > 1.5 ? "stop" : "length");
}

/// The prompt positions `s` runs in decode steps in all: its prompt's (or,
/// preempted and admitted again, its cached places').
int64_t promptEnd(const Sequence &s) {
  return s.recompute ? s.recomputeEnd : s.output->tokens;
}

/// Whether `s` is still running its prompt in chunks (--prefill-chunk):
/// some prompt positions not yet in a step
/// (or, preempted and admitted again, recomputing its cached places).
bool prefilling(const Sequence &s) { return s.length < promptEnd(s); }

/// The prompt rows of the next step of each of the replica's prefilling
/// sequences `prefills` (slots), beside `decodingRows` decoding ones': at
/// most a chunk each (--prefill-chunk, else the budget, else the whole
/// rest: the rows past a prefix hit). With --max-step-tokens the step's
/// rows stay within the budget: the decoding rows first, then prompt
/// rows, the prompts with the fewest rows left first (so that a short
/// prompt arriving during a long one's prefill is not queued behind it),
/// but at least one row for the longest-admitted prompt (so that every
/// prompt progresses). Sequences left without rows are not in the result.
/// Every rank of the replica decides alike.
std::map<int64_t, int64_t> promptRows(const Program &prog,
                                      const ProgramRank &rs,
                                      std::vector<int64_t> prefills,
                                      int64_t decodingRows) {
  const Generation &g = prog.generation;
  int64_t chunk = g.prefillChunk > 0 ? g.prefillChunk
                  : g.stepTokens > 0 ? g.stepTokens
                                     : INT64_MAX;
  auto left = [&](int64_t slot) {
    const Sequence &s = rs.sequences[size_t(slot)];
    return promptEnd(s) - s.length;
  };
  std::stable_sort(prefills.begin(), prefills.end(), [&](int64_t a, int64_t b) {
    const Sequence &x = rs.sequences[size_t(a)];
    const Sequence &y = rs.sequences[size_t(b)];
    return std::make_pair(left(a), x.admission) <
           std::make_pair(left(b), y.admission);
  });
  int64_t budget = g.stepTokens > 0
                       ? std::max<int64_t>(1, g.stepTokens - decodingRows)
                       : INT64_MAX;
  std::map<int64_t, int64_t> rows;
  if (g.stepTokens > 0 && !prefills.empty()) {
    // The longest-admitted prompt always progresses, so that shorter ones
    // arriving all the time cannot starve it.
    int64_t oldest = *std::min_element(
        prefills.begin(), prefills.end(), [&](int64_t a, int64_t b) {
          return rs.sequences[size_t(a)].admission <
                 rs.sequences[size_t(b)].admission;
        });
    rows[oldest] = 1;
    --budget;
  }
  for (int64_t slot : prefills) {
    int64_t given = rows.count(slot) ? rows[slot] : 0;
    int64_t n = std::min({chunk, left(slot), given + budget}) - given;
    if (n <= 0)
      continue;
    rows[slot] = given + n;
    if (budget != INT64_MAX)
      budget -= n;
  }
  return rows;
}

/// One decode step of the live sequences `live` (by slot) of the rank's
/// replica, at global positions `slot * 2^32 + place`: one row each (its
/// last token), or for a sequence still prefilling the next `prompt` rows
/// of its prompt positions; with none, a dummy step (one padding row:
/// nothing recorded or dispatched). Each row's K/V is appended to the
/// caches of the ranks that own its position (the K/V of the last
/// generated token is never needed).
void runStep(const Program &prog, ProgramRank &rs,
             const std::vector<int64_t> &live,
             const std::map<int64_t, int64_t> &prompt) {
  std::vector<int64_t> ids, positions;
  bool promptStep = false;
  for (int64_t slot : live) {
    Sequence &s = rs.sequences[size_t(slot)];
    s.inStep = true;
    if (prefilling(s)) {
      int64_t end = s.length + prompt.at(slot);
      promptStep = true;
      for (; s.length < end; ++s.length) {
        positions.push_back(globalPosition(slot, s.length));
        ids.push_back(tokenAt(prog, s, s.length));
      }
      continue;
    }
    positions.push_back(globalPosition(slot, s.length));
    ids.push_back(s.token);
    s.fed.push_back(s.token);
    ++s.length;
  }
  rs.promptSteps += promptStep ? 1 : 0;
  rs.mostStepRows = std::max(rs.mostStepRows, int64_t(ids.size()));
  if (live.empty()) {
    // A padding row: a place past every request's.
    ids = {0};
    positions = {int64_t(1) << 30};
  }
  rs.stepping = true;
  IdBuffer in(ids), pos(positions);
  decodeStep()(&in.ref, &pos.ref);
  rs.stepping = false;
  for (int64_t slot : live)
    rs.sequences[size_t(slot)].inStep = false;
  rs.stepBatches.push_back(int64_t(live.size()));
}

/// The sequences of the next step among the replica's `ready` ones (by
/// slot) when `live` are live: a `microBatches`-th of the live ones
/// (rounded up), those that waited longest first, in slot order.
std::vector<int64_t> stepGroup(const ProgramRank &rs,
                               std::vector<int64_t> ready, size_t live,
                               int64_t microBatches) {
  size_t size = (live + size_t(microBatches) - 1) / size_t(microBatches);
  if (ready.size() > size) {
    std::stable_sort(ready.begin(), ready.end(), [&](int64_t a, int64_t b) {
      return rs.sequences[size_t(a)].lastCall <
             rs.sequences[size_t(b)].lastCall;
    });
    ready.resize(size);
    std::sort(ready.begin(), ready.end());
  }
  return ready;
}

/// Makes room in the rank's cache for request `r` (evicting retained
/// requests, --prefix-cache) and, where its prompt runs in decode steps,
/// admits it: with --prefill-chunk, or when the prefix cache holds a prefix
/// of it, which it copies. Then none of the prompt past that prefix is
/// computed yet (its next steps' chunks run it, no call of its own), and
/// `prefillEnd` holds its admission time until its prefill ends. Returns
/// whether it admitted `r` (else its prefill call does).
bool admitPrompt(const Program &prog, ProgramRank &rs, int64_t r) {
  const std::vector<int64_t> &prompt = prog.requests[size_t(r)];
  // A live source stays where it is while `r` takes a slot.
  rs.sequences.reserve(rs.sequences.size() + 1);
  PrefixHit hit;
  if (prog.prefixCache)
    hit = findPrefix(prog, rs, prompt, prog.kv.blockTokens);
  makeRoom(rs, kvBlocksFor(kvRows(prog, r), prog.kv.blockTokens), hit);
  if (hit.rows == 0 && !prog.generation.chunkedPrompts())
    return false;
  int64_t slot = -1;
  Sequence &s = admit(prog, rs, r, slot);
  s.length = 0;
  if (hit.rows > 0)
    copyPrefix(prog, rs, s, hit);
  s.prefillEnd = secondsNow();
  RequestOutput *out = s.output;
  std::lock_guard<std::mutex> lock(out->mutex);
  out->prefixRows = hit.rows;
  return true;
}

/// Preempts the request in slot `slot` for its blocks: they go back to the
/// pool, and the request waits (first preempted, first admitted again) to
/// recompute the K/V of the places it had (or, still prefilling, to start
/// its prompt again), its tokens kept.
void preempt(ProgramRank &rs, int64_t slot) {
  Sequence &s = rs.sequences[size_t(slot)];
  if (s.recompute || !prefilling(s)) {
    s.recomputeEnd = s.recompute ? s.recomputeEnd : s.length;
    s.recompute = true;
  }
  rs.recomputedRows += s.length;
  ++rs.preemptions;
  releaseBlocks(rs, s);
  for (std::vector<int64_t> &cached : s.cachedPositions)
    cached.clear();
  s.length = 0;
  s.recordedLogits = false;
  rs.preempted.push_back(std::move(s));
  s = Sequence();
}

/// The blocks `s`'s rows of the next step need beyond its reservation: a
/// decoding request's new row may start a block (a prompt's chunks are
/// reserved at admission).
int64_t blocksToGrow(const Program &prog, const Sequence &s) {
  if (prefilling(s))
    return 0;
  return std::max<int64_t>(0, kvBlocksFor(s.length + 1, prog.kv.blockTokens) -
                                  s.kvReserved);
}

/// Reserves the blocks the step's `rows` (slots) need, oldest admission
/// first; where the pool has too few, preempts ready requests not yet
/// served, the latest admitted first (the one asking, if it is the latest).
/// Every rank of the replica decides alike. Returns the rows still in the
/// step.
std::vector<int64_t> reserveStep(const Program &prog, ProgramRank &rs,
                                 std::vector<int64_t> rows,
                                 const std::vector<int64_t> &ready) {
  if (rs.kvFree < 0)
    return rows;
  auto older = [&](int64_t a, int64_t b) {
    return rs.sequences[size_t(a)].admission <
           rs.sequences[size_t(b)].admission;
  };
  std::sort(rows.begin(), rows.end(), older);
  // The candidates to preempt, latest admitted last.
  std::vector<int64_t> victims = ready;
  std::sort(victims.begin(), victims.end(), older);
  std::vector<int64_t> kept;
  for (int64_t slot : rows) {
    if (!rs.sequences[size_t(slot)].output)
      continue; // preempted for an older one
    int64_t need = blocksToGrow(prog, rs.sequences[size_t(slot)]);
    while (!kvFits(rs, need) && victims.back() != slot) {
      preempt(rs, victims.back());
      victims.pop_back();
    }
    if (!kvFits(rs, need)) {
      preempt(rs, slot);
      victims.pop_back();
      continue;
    }
    reserveBlocks(rs, rs.sequences[size_t(slot)], need);
    kept.push_back(slot);
    victims.erase(std::find(victims.begin(), victims.end(), slot));
  }
  return kept;
}

/// Runs the next decode step of the replica's `ready` sequences (by slot;
/// `live` of them live): the decoding ones of its share (stepGroup) and
/// the next chunks of those still prefilling (promptRows). Returns
/// the sequences whose tokens the step computes: all but those whose chunk
/// leaves prompt positions for later steps. A sequence whose last chunk
/// ran has ended its prefill.
std::vector<int64_t> runStepOf(const Program &prog, ProgramRank &rs,
                               const std::vector<int64_t> &ready, size_t live,
                               const DecodeGroups &groups) {
  std::vector<int64_t> decoding, chunks;
  for (int64_t slot : ready)
    (prefilling(rs.sequences[size_t(slot)]) ? chunks : decoding)
        .push_back(slot);
  std::vector<int64_t> rows;
  if (!decoding.empty())
    rows = stepGroup(rs, decoding, live - chunks.size(), groups.microBatches);
  std::map<int64_t, int64_t> prompt =
      promptRows(prog, rs, chunks, int64_t(rows.size()));
  for (const auto &entry : prompt)
    rows.push_back(entry.first);
  rows = reserveStep(prog, rs, rows, ready);
  std::sort(rows.begin(), rows.end());
  std::vector<bool> recomputing;
  for (int64_t slot : rows)
    recomputing.push_back(rs.sequences[size_t(slot)].recompute);
  runStep(prog, rs, rows, prompt);
  std::vector<int64_t> tokens;
  double now = secondsNow();
  for (size_t i = 0; i < rows.size(); ++i) {
    int64_t slot = rows[i];
    Sequence &s = rs.sequences[size_t(slot)];
    if (prefilling(s))
      continue;
    if (recomputing[i]) {
      // Its cache is whole again; its last token is its next input.
      s.recompute = false;
      continue;
    }
    tokens.push_back(slot);
    if (s.generated > 0)
      continue;
    // The prompt's last chunk: its prefill time runs from its admission.
    if (groups.recorder) {
      std::lock_guard<std::mutex> lock(s.output->mutex);
      s.output->prefillSeconds = now - s.prefillEnd;
    }
    s.prefillEnd = now;
  }
  return tokens;
}

/// Admits the first preempted request again when its blocks (for the
/// places it recomputes) are free: its cache empty, its chunks recompute
/// them in the next steps (no call of its own). Returns whether it did.
bool readmit(const Program &prog, ProgramRank &rs) {
  if (rs.preempted.empty())
    return false;
  Sequence &waiting = rs.preempted.front();
  int64_t rows =
      waiting.recompute ? waiting.recomputeEnd : waiting.output->tokens;
  int64_t blocks = kvBlocksFor(rows, prog.kv.blockTokens);
  if (!kvFits(rs, blocks))
    return false;
  Sequence &s = rs.sequences[size_t(freeSlot(rs))];
  s = std::move(waiting);
  rs.preempted.pop_front();
  s.admission = rs.admissions++;
  s.inFlight = false;
  reserveBlocks(rs, s, blocks);
  return true;
}

/// Serving: the replica's recorder ends request `r`, cancelled before it
/// ran (queued or preempted).
void endUnadmitted(const Program &prog, int64_t r, const DecodeGroups &groups) {
  markFinished(prog, *prog.outputs[size_t(r)], "cancelled", groups);
}

/// Serving: request `r` was cancelled (its client went away, or a stop
/// string ended it). Queued or preempted, it leaves at once; running, it
/// leaves now or, when a call in flight runs it, once its tokens come back.
/// Every rank of the replica decides alike.
void cancelRequest(const Program &prog, ProgramRank &rs,
                   std::vector<int64_t> &mine, size_t next, int64_t r,
                   const DecodeGroups &groups) {
  auto queued = std::find(mine.begin() + std::ptrdiff_t(next), mine.end(), r);
  if (queued != mine.end()) {
    mine.erase(queued);
    return endUnadmitted(prog, r, groups);
  }
  for (auto it = rs.preempted.begin(); it != rs.preempted.end(); ++it) {
    if (it->request != r)
      continue;
    rs.preempted.erase(it);
    return endUnadmitted(prog, r, groups);
  }
  for (Sequence &s : rs.sequences) {
    if (!s.output || s.request != r)
      continue;
    if (s.inFlight)
      s.cancelled = true;
    else
      finishSequence(prog, rs, s, groups, "cancelled");
    return;
  }
}

/// Serving, at each call: every rank learns from rank 0 (the server's) the
/// requests that arrived, its replica's joining `mine`, and the
/// cancellations. Returns false when the server stops.
bool takeIntake(const Program &prog, ProgramRank &rs,
                std::vector<int64_t> &mine, size_t next, ServeGroups &serve,
                bool idle, const DecodeGroups &groups) {
  Intake in;
  if (mfrt_rank() == 0) {
    prog.kvBlocksInUse = rs.kv.blocksInUse();
    if (rs.stepBatches.size() > serve.stepsSeen) {
      prog.source->stepped(std::vector<int64_t>(
          rs.stepBatches.begin() + std::ptrdiff_t(serve.stepsSeen),
          rs.stepBatches.end()));
      serve.stepsSeen = rs.stepBatches.size();
    }
    in = prog.source->take(idle);
  }
  std::vector<float> msg = encodeIntake(in);
  if (serve.previous >= 0 && recvHost(serve.previous, msg.data(),
                                      int64_t(msg.size()), MFRT_F32) != MFRT_OK)
    fatal(std::string("serving: receiving the requests that arrived: ") +
          mfrt_last_error());
  if (serve.previous < 0)
    sumOver(serve.stage, msg.data(), int64_t(msg.size()),
            "serving: sharing the requests that arrived");
  if (serve.next >= 0 && sendHost(serve.next, msg.data(), int64_t(msg.size()),
                                  MFRT_F32) != MFRT_OK)
    fatal(std::string("serving: passing on the requests that arrived: ") +
          mfrt_last_error());
  in = decodeIntake(msg);
  for (auto [r, replica] : in.arrived)
    if (replica == serve.replica)
      mine.push_back(r);
  for (int64_t r : in.cancelled)
    cancelRequest(prog, rs, mine, next, r, groups);
  return !in.stop;
}

/// Generation for the replica's requests `mine`, as a stream of calls that
/// every rank of every replica runs alike: a prefill (a request admitted
/// while the batch has room, --max-batch; dummies where a replica has none
/// to admit), a decode step of the replica's ready requests (those whose
/// last token came back; up to --micro-batches steps in flight, each a
/// share of the batch; a dummy where a replica has none), or a wait for
/// the calls still in later stages. A call's tokens come back `lag` calls
/// later: with pipeline stages, the first stage computes call c + 1 (a
/// step of another micro-batch, or the next request's prefill) while the
/// later stages compute call c. Every rank applies call c's tokens at call
/// c + lag and decides from the same state, and the replicas agree on each
/// call's kind (every MoE layer is a rendezvous of all of them); they stop
/// when none has work left.
void generate(const Program &prog, ProgramRank &rs, std::vector<int64_t> mine,
              const DecodeGroups &groups, std::vector<uint64_t> &prefillTraffic,
              bool receive = false, ServeGroups *serve = nullptr) {
  size_t next = 0;
  bool idle = false;        // serving: no rank had work at the last call
  int64_t intakeIndex = -1; // serving: the call whose intake was taken
  size_t waited = SIZE_MAX; // the last request counted in kvWaits
  int64_t maxBatch = prog.generation.maxBatch;
  std::deque<Call> calls; // not applied yet, oldest first
  bool anyWaiting = true; // as the replicas last agreed
  for (int64_t index = 0;; ++index) {
    while (!calls.empty() && calls.front().index <= index - groups.lag) {
      applyTokens(prog, rs, calls.front(), groups);
      calls.pop_front();
    }
    // Once per call: an admission without a call (`--index` below) comes
    // back here for the same call, which the other replicas do not.
    if (serve && index != intakeIndex) {
      intakeIndex = index;
      if (!takeIntake(prog, rs, mine, next, *serve, idle, groups))
        break;
      idle = false;
    }
    // A request whose call in flight makes its last token (the N-th) is
    // done whatever that token is: it leaves the batch's room at once.
    std::vector<int64_t> live, ready;
    int64_t leaving = 0;
    for (size_t slot = 0; slot < rs.sequences.size(); ++slot) {
      const Sequence &s = rs.sequences[slot];
      if (!s.output)
        continue;
      live.push_back(int64_t(slot));
      if (!s.inFlight)
        ready.push_back(int64_t(slot));
      else if (s.generated + 1 == generationOf(prog, s.request).maxNewTokens)
        ++leaving;
    }
    // Prefills and steps in flight: the same on every rank (the calls'
    // kinds are agreed), dummies included.
    int64_t inFlight =
        std::count_if(calls.begin(), calls.end(),
                      [](const Call &c) { return c.kind != Call::Wait; });
    bool batchRoom = maxBatch == 0 || int64_t(live.size()) - leaving < maxBatch;
    if (batchRoom && readmit(prog, rs)) {
      --index;
      continue;
    }
    // The next request in order of arrival waits while its K/V blocks are
    // not free (the ones behind it wait too), and while preempted ones do.
    bool room = next < mine.size() && batchRoom && rs.preempted.empty();
    bool admit = room && kvAdmits(prog, rs, mine[next]);
    if (room && !admit && waited != next) {
      waited = next;
      ++rs.kvWaits;
    }
    if (receive && admit) {
      // The decode pool admits a request once its K/V and first token came
      // from the prefill pool: no call, no other replica involved.
      receiveRequest(prog, rs, mine[next++], groups);
      --index;
      continue;
    }
    if (admit && !receive && admitPrompt(prog, rs, mine[next])) {
      // Its prompt (or what a cached prefix leaves of it) runs in the next
      // steps' chunks: no call of its own.
      ++next;
      --index;
      continue;
    }
    // Whether any replica admits, has ready requests, has live ones, and
    // has requests still to admit. A call that can only be a wait needs no
    // agreement: no replica will admit again, too many steps are in flight,
    // and the replicas that ran them still have their requests.
    std::vector<float> any = {0.0f, 0.0f, 1.0f, 0.0f};
    if (anyWaiting || inFlight < groups.microBatches) {
      bool toAdmit = next < mine.size() || !rs.preempted.empty();
      any = {admit ? 1.0f : 0.0f, ready.empty() ? 0.0f : 1.0f,
             live.empty() ? 0.0f : 1.0f, toAdmit ? 1.0f : 0.0f};
      sumOver(groups.dp, any.data(), int64_t(any.size()),
              "decode: agreeing on the next call");
      anyWaiting = any[3] > 0;
    }
    Call call;
    call.index = index;
    if (any[0] > 0) {
      call.kind = Call::Prefill;
      int64_t slot = runRequestPrefill(prog, rs, admit ? mine[next++] : -1,
                                       groups, prefillTraffic);
      if (slot >= 0)
        call.slots = {slot};
      ++rs.prefillCalls;
    } else if (any[1] > 0 && inFlight < groups.microBatches) {
      call.kind = Call::Step;
      call.slots = runStepOf(prog, rs, ready, live.size(), groups);
    } else if (any[2] > 0) {
      ++rs.waitCalls;
    } else if (serve) {
      idle = true; // nothing anywhere: wait for arrivals
      continue;
    } else {
      break;
    }
    if (groups.lag > 1 && groups.joinDelay == groups.lag - 1) {
      // The first stage: the calls not applied are in later stages.
      bool stepDownstream =
          std::any_of(calls.begin(), calls.end(),
                      [](const Call &c) { return c.kind == Call::Step; });
      if (call.kind == Call::Step && inFlight > 0)
        ++rs.overlappedSteps;
      if (call.kind == Call::Prefill && inFlight > 0)
        ++(stepDownstream ? rs.prefillsBesideSteps : rs.prefillsBesidePrefills);
    }
    for (int64_t slot : call.slots) {
      rs.sequences[size_t(slot)].inFlight = true;
      rs.sequences[size_t(slot)].lastCall = index;
    }
    calls.push_back(std::move(call));
    // The call this rank's stage shares the tokens of now.
    for (Call &c : calls)
      if (c.index == index - groups.joinDelay)
        joinTokens(prog, rs, c, groups);
  }
}

/// Prompts longer than the model's max_position_embeddings (when the
/// manifest has it) fail the run, the first one named, unless
/// --allow-long-prompts: then one warning line names the longest.
void checkPromptLengths(const Options &options, const Manifest &m,
                        const Prompts &prompts) {
  const std::vector<std::vector<int64_t>> &requests = prompts.tokens;
  if (m.maxPositions <= 0)
    return;
  size_t longest = 0, over = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    if (int64_t(requests[r].size()) <= m.maxPositions)
      continue;
    std::string what = prompts.file + ": line " +
                       std::to_string(prompts.lines[r]) + ": prompt of " +
                       std::to_string(requests[r].size()) +
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
               programName(), prompts.file.c_str(), over, over == 1 ? "" : "s",
               (long long)m.maxPositions, prompts.lines[longest],
               requests[longest].size());
}

void checkLongGeneration(const Options &options, const Manifest &m,
                         const std::vector<std::vector<int64_t>> &requests);

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
    if (program().pools)
      die("this program runs prefill and decode on separate pools: give "
          "--max-new-tokens N (N >= 1)");
    return;
  }
  if (program().pools) {
    if (program().decodeManifest.decode.empty() || !MFRT_POOL_DECODE_CIFACE)
      die("internal: the decode pool of this program has no decode step");
  } else if (m.decode.empty() || !MFRT_DECODE_CIFACE) {
    die("--max-new-tokens: this program has no decode step (compile it "
        "with meshfold-compile --decode)");
  }
  // A chosen id travels to the replica's ranks as an f32 (exact below 2^24).
  if (m.vocab >= (int64_t(1) << 24))
    die("--max-new-tokens: the vocabulary of " + std::to_string(m.vocab) +
        " ids is larger than generation supports (2^24)");
  // Every request's K/V outputs get room for T + N - 1 positions up front.
  if (!options.kvOutputs)
    return checkLongGeneration(options, m, requests);
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
        " GiB of memory (--no-kv-out keeps K/V only while a request runs)");
  checkLongGeneration(options, m, requests);
}

/// --max-new-tokens against the model's max_position_embeddings.
void checkLongGeneration(const Options &options, const Manifest &m,
                         const std::vector<std::vector<int64_t>> &requests) {
  const Generation &g = options.generation;
  if (m.maxPositions <= 0 || options.allowLongPrompts)
    return;
  for (size_t r = 0; r < requests.size(); ++r)
    if (int64_t(requests[r].size()) + g.maxNewTokens > m.maxPositions)
      die("--max-new-tokens " + std::to_string(g.maxNewTokens) + ": request " +
          std::to_string(r) + " (line " +
          std::to_string(program().prompts.lines[r]) + ", " +
          std::to_string(requests[r].size()) +
          " prompt tokens) would pass the model's max_position_embeddings (" +
          std::to_string(m.maxPositions) +
          ") (--allow-long-prompts runs it anyway)");
}

/// --prefill-chunk and --prefix-cache against the program and the other
/// flags: both run prompts (or their rest) in the decode step of a one-pool
/// generating program, which computes no prompt logprobs, and neither the
/// token trace nor the traffic report (which tell prefill calls apart from
/// decode steps) follows them.
void checkPromptSteps(const Options &options, const Program &prog) {
  int64_t chunk = options.generation.prefillChunk;
  if (!options.generation.chunkedPrompts() && !options.prefixCache)
    return;
  const std::string flag = chunk > 0 ? "--prefill-chunk"
                           : options.generation.stepTokens > 0
                               ? "--max-step-tokens"
                               : "--prefix-cache";
  const Manifest &m = prog.manifest;
  if (options.generation.maxNewTokens == 0)
    die(flag + " runs prompts through decode steps: give --max-new-tokens N "
               "(N >= 1)");
  if (prog.pools)
    die(flag + ": this program prefills on a pool of its own (--decode-plan), "
               "which has no decode step to run prompts in");
  if (m.maxPositions > 0 && chunk > m.maxPositions)
    die("--prefill-chunk " + std::to_string(chunk) +
        " is longer than the model's context (max_position_embeddings " +
        std::to_string(m.maxPositions) + ")");
  if (m.promptLogits)
    die(flag + ": this program records prompt logprobs (--prompt-logprobs), "
               "which decode steps do not");
  if (!options.traceToken.empty())
    die(flag + ": --trace-token follows a prompt position through the prefill "
               "call, which prompts run in decode steps do not make");
  if (options.reportTraffic)
    die(flag + ": --report traffic tells prefill calls from decode steps, "
               "and these prompts run in decode steps");
}

/// --kv-memory: each request must fit in the K/V cache of a rank of `m`'s
/// pool on its own (its prompt's rows, and where the pool `decodes` those
/// of its generated tokens but the last), else the run fails naming the
/// first that does not.
void checkKVCapacity(const Program &prog, const Manifest &m, bool decodes) {
  int64_t capacity = kvBlockCapacity(m, prog.kv);
  if (capacity < 0)
    return;
  int64_t extra =
      decodes ? std::max<int64_t>(0, prog.generation.maxNewTokens - 1) : 0;
  for (size_t r = 0; r < prog.requests.size(); ++r) {
    int64_t prompt = int64_t(prog.requests[r].size());
    int64_t need = kvBlocksFor(prompt + extra, prog.kv.blockTokens);
    if (need <= capacity)
      continue;
    die("--kv-memory " + prog.kv.memoryText + " holds " +
        std::to_string(capacity) + " blocks of " +
        std::to_string(prog.kv.blockTokens) + " rows per rank (" +
        std::to_string(kvBlockBytes(m, prog.kv.blockTokens)) +
        " bytes each); request " + std::to_string(r) + " (line " +
        std::to_string(prog.prompts.lines[r]) + ", " + std::to_string(prompt) +
        " prompt tokens" +
        (extra ? " + " + std::to_string(extra) + " generated" : "") +
        ") needs " + std::to_string(need));
  }
}

/// The rows of a served step unless --max-step-tokens says otherwise: on
/// the CPU a step's cost grows with its rows from a few, so a small budget
/// keeps a prompt's prefill from stalling the running streams
/// (bench/serve.sh: at 32 clients the inter-token p99 fell from 2.1 s to
/// 0.17 s at 64 rows, output tokens/s 1.72x -> 1.44x llama-server's); a
/// GPU's step is bound by its weights' bytes up to hundreds of rows (vLLM's
/// first chunked-prefill default).
constexpr int64_t kServeStepTokens = 64, kServeStepTokensGPU = 512;

/// --serve: the checks of the flags, the default generation settings
/// (--max-new-tokens, else 16 tokens: OpenAI's default max_tokens; batches
/// of at most --max-batch, else 64, requests per replica; steps of at most
/// --max-step-tokens, else kServeStepTokens, rows; the prefix cache unless
/// --no-prefix-cache) and the tokenizer of text prompts (none: prompts must
/// be token ids). Requests' K/V lives only in the ranks' caches.
void loadServingSettings(const Options &options, const PromptFiles &files,
                         Program &prog) {
  checkServing(options, prog);
  Options served = options;
  if (served.generation.maxNewTokens == 0)
    served.generation.maxNewTokens = 16;
  if (served.generation.maxBatch == 0)
    served.generation.maxBatch = 64;
  if (!served.generation.stepTokensGiven)
    served.generation.stepTokens =
        programUsesDevice() ? kServeStepTokensGPU : kServeStepTokens;
  served.prefixCache = !options.noPrefixCache;
  checkGeneration(served, prog.manifest, {});
  prog.generation = served.generation;
  prog.prefixCache = served.prefixCache;
  checkPromptSteps(served, prog);
  prog.kvOutputs = false;
  std::string path = tokenizerPathFor(files), error;
  if (path.empty())
    return;
  prog.prompts.tokenizer = Tokenizer::load(path, &error);
  if (!prog.prompts.tokenizer)
    die(error);
}

/// Runs this rank's share of the requests: its DP replica's, in rounds that
/// every replica takes part in (prefill only), or generating.
void runRequests(const Program &prog, ProgramRank &rs,
                 std::map<std::string, int64_t> &groups) {
  int64_t replicas = 1, replica = 0;
  if (rs.manifest->plan.find("dp:") != std::string::npos) {
    int64_t dp = groupOf(groups, "dp");
    replicas = mfrt_group_size(dp);
    replica = mfrt_group_rank(dp);
  }
  std::vector<std::vector<int64_t>> assigned = balance(prog.requests, replicas);
  const std::vector<int64_t> &mine = assigned[size_t(replica)];
  DecodeGroups decode = decodeGroups(prog, *rs.manifest, groups);
  std::vector<uint64_t> prefillTraffic;
  if (prog.source) {
    ServeGroups serve = servingGroups(prog, groups, replica);
    generate(prog, rs, {}, decode, prefillTraffic, false, &serve);
  } else if (prog.pools && mfrt_pool() == 1) {
    generate(prog, rs, mine, decode, prefillTraffic, /*receive=*/true);
  } else if (!prog.pools && prog.generation.maxNewTokens > 0) {
    generate(prog, rs, mine, decode, prefillTraffic);
  } else {
    // Prefill only, in rounds; a two-pool program's prefill pool then
    // hands each request (its first token; its K/V went layer by layer as
    // it was recorded) to the decode pool.
    size_t rounds = 0;
    for (const auto &list : assigned)
      rounds = std::max(rounds, list.size());
    if (prog.pools && prog.reportTraffic)
      rs.transferTraffic.assign(MFRT_LINK_COUNT * prog.requests.size(), 0);
    // The bytes of transfers to the decode pool this rank sent so far, by
    // link class.
    auto transferred = [] {
      std::array<uint64_t, MFRT_LINK_COUNT> sent{};
      for (int link = 0; link < MFRT_LINK_COUNT; ++link)
        sent[size_t(link)] =
            mfrt_bytes_sent_total(MFRT_OP_KV_TRANSFER, mfrt_link(link));
      return sent;
    };
    for (size_t round = 0; round < rounds; ++round) {
      std::array<uint64_t, MFRT_LINK_COUNT> before = transferred();
      int64_t slot =
          runRequestPrefill(prog, rs, round < mine.size() ? mine[round] : -1,
                            decode, prefillTraffic);
      if (slot < 0)
        continue;
      Sequence &s = rs.sequences[size_t(slot)];
      if (!prog.pools) {
        finishSequence(prog, rs, s, decode, "length");
        continue;
      }
      int64_t request = s.request;
      handOff(prog, rs, s, decode);
      // A rank of the prefill pool runs one request at a time: what its
      // transfers sent since the prefill began is that request's.
      if (!rs.transferTraffic.empty()) {
        std::array<uint64_t, MFRT_LINK_COUNT> after = transferred();
        for (int link = 0; link < MFRT_LINK_COUNT; ++link)
          rs.transferTraffic[size_t(MFRT_LINK_COUNT * request + link)] +=
              after[size_t(link)] - before[size_t(link)];
      }
    }
  }
  if (prog.reportTraffic) {
    // --report traffic tells decode's bytes (all but prefill's) apart.
    std::vector<uint64_t> total = readCounters(prog);
    prefillTraffic.resize(total.size(), 0);
    rs.decodeTraffic.assign(total.size(), 0);
    for (size_t i = 0; i < total.size(); ++i)
      rs.decodeTraffic[i] = total[i] - prefillTraffic[i];
  }
}

/// --report traffic: this rank's counters of prefill, then of its decode
/// steps, then the number of those steps and the bytes per layer the
/// analytic model gives pass-Q attention in them (Program::traffic).
void readTrafficCounters(Program &prog, const ProgramRank &rs, int rank) {
  std::vector<uint64_t> t = readCounters(prog);
  std::vector<uint64_t> decode = rs.decodeTraffic;
  decode.resize(t.size(), 0);
  for (size_t i = 0; i < t.size(); ++i)
    t[i] -= decode[i];
  t.insert(t.end(), decode.begin(), decode.end());
  t.push_back(uint64_t(rs.stepBatches.size()));
  std::string error;
  std::optional<MeshLayout> layout =
      layoutFromPlanText(planText(*rs.manifest), &error);
  if (!layout)
    fatal(error);
  double passQ = 0;
  for (int64_t batch : rs.stepBatches)
    passQ += passQBytes(*layout, prog.manifest.heads, prog.manifest.headDim,
                        decodeStepRows(*layout, batch));
  t.push_back(uint64_t(passQ));
  if (prog.pools) {
    std::vector<uint64_t> transfer = rs.transferTraffic;
    transfer.resize(MFRT_LINK_COUNT * prog.requests.size(), 0);
    t.insert(t.end(), transfer.begin(), transfer.end());
  }
  prog.traffic[size_t(rank)] = std::move(t);
  std::vector<uint64_t> compute = rs.compute;
  compute.resize(size_t(prog.manifest.layers * kComputeCounters), 0);
  prog.compute[size_t(rank)] = std::move(compute);
}
} // namespace

void mfrt::loadProgram(const Options &options, Program &prog) {
  std::string error;
  if (!parseManifest(MFRT_MANIFEST_SYMBOL, prog.manifest, error))
    die(error);
  if (MFRT_POOL_MANIFEST_SYMBOL) {
    prog.pools = true;
    if (!parseManifest(MFRT_POOL_MANIFEST_SYMBOL, prog.decodeManifest, error))
      die(error);
  }
  const Manifest &m = prog.manifest;
  PromptFiles files;
  files.ids = options.prompts;
  files.text = options.promptsText;
  files.jsonl = options.promptsJsonl;
  files.tokenizer = options.tokenizer;
  files.weights = options.weights;
  files.wantTokenizer = !options.outJsonl.empty();
  bool serving = !options.serve.empty();
  if (options.prefixCache && options.noPrefixCache)
    die("--prefix-cache and --no-prefix-cache: give one");
  if (serving) {
    loadServingSettings(options, files, prog);
  } else {
    if (!readPrompts(files, m.vocab, prog.prompts, &error))
      die(error);
    prog.requests = prog.prompts.tokens;
    checkPromptLengths(options, m, prog.prompts);
    checkGeneration(options, m, prog.requests);
    prog.generation = options.generation;
    prog.prefixCache = options.prefixCache;
    checkPromptSteps(options, prog);
    prog.kvOutputs = options.kvOutputs;
  }
  prog.kv = options.kv;
  checkKVCapacity(prog, prog.manifest, /*decodes=*/!prog.pools);
  if (prog.pools)
    checkKVCapacity(prog, prog.decodeManifest, /*decodes=*/true);
  if (options.randomWeights.empty()) {
    prog.weights = Checkpoint::open(options.weights, &error);
    if (!prog.weights)
      die(error);
  } else {
    std::vector<const Manifest *> manifests = {&m};
    if (prog.pools)
      manifests.push_back(&prog.decodeManifest);
    prog.weights = generateWeights(manifests, options.randomSeed);
  }
  checkWeights(m, *prog.weights);
  if (prog.pools)
    checkWeights(prog.decodeManifest, *prog.weights);
  if (!serving)
    allocateOutputs(prog);
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
  // A program of two pools: both pools' ranks.
  prog.traffic.resize(
      size_t(layout->numDevices() +
             (prog.pools ? layoutOf(prog.decodeManifest).numDevices() : 0)));
  prog.compute.resize(prog.traffic.size());
}

int mfrt::rankMain(void *) {
  Program &prog = program();
  // The program's part of this rank's state, for as long as the rank runs.
  ProgramRank rs;
  comm::RankState &rank = *comm::currentRank();
  rank.program = &rs;
  // A two-pool program's decode pool runs its own manifest.
  rs.manifest = mfrt_pool() == 1 ? &prog.decodeManifest : &prog.manifest;
  std::map<std::string, int64_t> groups;
  for (const ManifestGroup &g : rs.manifest->groups)
    rs.groups.push_back(groupOf(groups, g.axes));
  // The OpenMP thread count is a per-thread setting: each rank's thread sets
  // its own before the program's first parallel loop.
  omp_set_num_threads(prog.threadsPerRank);
  rs.kv.configure(prog.kv.blockTokens, rs.manifest->layers,
                  rs.manifest->headDim, rs.manifest->kvCopies(),
                  kvArraysPerRank(*rs.manifest));
  rs.kvFree = kvBlockCapacity(*rs.manifest, prog.kv);
  int64_t kvCapacity = rs.kvFree;
  loadWeights(rs, groups);
  uploadWeights(rs); // CUDA mode: to the rank's device
  rs.runStart = secondsNow();
  runRequests(prog, rs, groups);
  // The decode figures are the decode pool's first rank's in a two-pool
  // program.
  if (rank.rank == (prog.pools ? mfrt_pool_size(0) : 0)) {
    prog.runRank = rank.rank;
    prog.runSeconds = secondsNow() - rs.runStart;
    prog.runSteps = int64_t(rs.stepBatches.size());
    prog.runPrefills = rs.prefillCalls;
    prog.runWaits = rs.waitCalls;
    prog.runPromptSteps = rs.promptSteps;
    prog.runMostStepRows = rs.mostStepRows;
    prog.runOverlapped = {rs.overlappedSteps, rs.prefillsBesidePrefills,
                          rs.prefillsBesideSteps};
    for (int64_t batch : rs.stepBatches)
      prog.runBatch = std::max(prog.runBatch, batch);
    prog.runKV = {kvCapacity, rs.kv.peakBlocks(), rs.kv.allocatedBytes(),
                  rs.kvWaits, rs.preemptions,     rs.recomputedRows};
  }
  if (prog.reportTraffic)
    readTrafficCounters(prog, rs, rank.rank);
  if (prog.collectOutputs && prog.reportTraffic)
    collectTraffic(prog);
  if (prog.collectOutputs && prog.reportLoad)
    collectLoads(prog);
  if (prog.reportRouting) {
    std::vector<uint64_t> routed = rs.routedRows;
    routed.resize(size_t(prog.manifest.layers * prog.manifest.experts), 0);
    prog.routing[size_t(rank.rank)] = std::move(routed);
    if (prog.collectOutputs)
      collectRouting(prog);
  }
  if (prog.collectOutputs && traceConfig().traceToken)
    collectTrace(prog);
  if (prog.collectOutputs)
    collectOutputs(prog);
  releaseWeights(rs);
  rank.program = nullptr;
  return 0;
}

double mfrt::secondsNow() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
