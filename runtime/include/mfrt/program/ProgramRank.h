//===- ProgramRank.h - The program's part of a rank's state -----*- C++ -*-===//
//
// The program's runtime hooks (CodegenHooks.cpp: weights, outputs,
// collective calls) act for the calling rank. Each rank (a thread of the
// local backend, or a process) has one state, mfrt::comm::RankState, reached
// through mfrt::comm::currentRank(); its `program` member is the program's
// part, a ProgramRank, set by the rank's body (rankMain) for as long as it
// runs.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_PROGRAM_PROGRAMRANK_H
#define MFRT_PROGRAM_PROGRAMRANK_H

#include "meshfold/Support/KVTransfer.h"
#include "meshfold/Support/Manifest.h"
#include "mfrt/program/KVCache.h"

#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace mfrt {

/// The outputs of one request, filled by all the ranks that hold a part.
struct RequestOutput {
  /// The prompt's length T.
  int64_t tokens = 0;
  /// The positions whose K/V the request has once it is done: T after
  /// prefill, one more per decode step. The K/V arrays hold room for
  /// T + N - 1 rows (N = --max-new-tokens), allocated once.
  int64_t length = 0;
  /// [layer][rows * n_kv * d_h]. Where one tensor is both key and value
  /// (the manifest's kv_shared: MLA's latent), it is kept once, in `keys`,
  /// and `values` is empty: read it through value().
  std::vector<std::vector<float>> keys, values;
  std::vector<std::vector<uint8_t>> written; // [layer][rows * n_kv]
  /// Layer `layer`'s values: its own, or its keys where they are one.
  std::vector<float> &value(size_t layer) {
    return values.empty() ? keys[layer] : values[layer];
  }
  const std::vector<float> &value(size_t layer) const {
    return values.empty() ? keys[layer] : values[layer];
  }
  /// The last recorded logits (prefill's, then each step's).
  std::vector<float> logits;
  /// Decoding: the generated ids, and with --step-logits the logits that
  /// chose each ([n * V]; row 0 is prefill's).
  std::vector<int32_t> generated;
  std::vector<float> stepLogits;
  /// Per decode step (from the second generated token on), counted by the
  /// K/V history hook over the step's layers: the most rows whose K/V a layer
  /// computed, and the most cached rows a layer read (--report decode).
  std::vector<int64_t> stepRows, historyRows;
  /// Wall seconds of the request's prefill (to its logits), of its decode
  /// steps with their token choices, and from the start of the run to its
  /// first token (its wait for a place in the batch included)
  /// (--report decode).
  double prefillSeconds = 0, decodeSeconds = 0, firstTokenSeconds = 0;
  /// --prefix-cache: the prompt positions whose K/V it took from a cached
  /// prefix instead of computing them.
  int64_t prefixRows = 0;
  /// When each generated token came back to the replica (seconds from the
  /// start of the run; the decode pool's in a program of two pools: from its
  /// second token), for --report decode's inter-token times.
  std::vector<double> tokenSeconds;
  bool haveLogits = false;
  /// Serving: whether the request ended (set by its replica's recorder),
  /// and why: "stop" (an eos token), "length" (its max tokens) or
  /// "cancelled".
  bool finished = false;
  std::string finishReason;
  /// Serving, where the request asked for logprobs: per generated token its
  /// logprob and the most likely ids with theirs (kTopLogprobs at most).
  std::vector<float> tokenLogprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> topLogprobs;
  /// Prompt logprobs, when the program records them: [T * V] and a mark
  /// per position.
  std::vector<float> promptLogits;
  std::vector<uint8_t> promptWritten;
  std::mutex mutex;
};

/// This rank's slice of one weight, in the storage type the manifest names:
/// f32 or bf16. A slice that lies in the weights file as the program wants
/// it is used in place (`mapped`, read-only); any other is a copy, in
/// exactly one of the two vectors.
struct WeightSlice {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  const void *mapped = nullptr;
  size_t mappedBytes = 0;
  bool empty() const { return !mapped && f32.empty() && bf16.empty(); }
  /// The program only reads weights: the mapping's pages are read-only.
  void *data() {
    if (mapped)
      return const_cast<void *>(mapped);
    return bf16.empty() ? static_cast<void *>(f32.data()) : bf16.data();
  }
  size_t bytes() const {
    return mappedBytes + f32.size() * sizeof(float) +
           bf16.size() * sizeof(uint16_t);
  }
  void release() {
    std::vector<float>().swap(f32);
    std::vector<uint16_t>().swap(bf16);
    mapped = nullptr;
    mappedBytes = 0;
  }
};

/// A dispatch that left padding rows home: the rows it sent (their indices
/// among the layer's `tokens` rows of `hidden` floats).
struct PackedDispatch {
  std::vector<int64_t> real;
  int64_t tokens = 0, hidden = 0;
};

/// A request as one rank runs it.
struct Sequence {
  /// The request (null: a free slot, or a dummy batch whose outputs are
  /// dropped) and its index.
  RequestOutput *output = nullptr;
  int64_t request = -1;
  /// This rank's own K/V cache of the request, per layer: the places whose
  /// K/V it recorded (its heads, its share of the positions), in the order
  /// recorded (place i is slot i of the rank's KVPool). Decode steps read
  /// it back (their K/V history).
  std::vector<std::vector<int64_t>> cachedPositions;
  /// The request's blocks in the rank's KVPool (its block table), and the
  /// blocks the scheduler reserved for it (kvBlocksFor its rows).
  std::vector<int32_t> blocks;
  int64_t kvReserved = 0;
  /// The generated tokens its decode steps ran, in order (places T, T+1,
  /// ...): with the prompt, the tokens of its cached K/V (--prefix-cache,
  /// and the recomputation of a preempted request).
  std::vector<int64_t> fed;
  /// A request preempted for its blocks and admitted again recomputes the
  /// K/V of its places before `recomputeEnd` in chunks (no token chosen),
  /// then decodes on from its last token.
  bool recompute = false;
  int64_t recomputeEnd = 0;
  /// Serving: the client cancelled the request while a call ran it; it
  /// leaves when that call's tokens come back.
  bool cancelled = false;
  /// Serving, once retained (--prefix-cache): its prompt, kept with it
  /// (its request slot is reused by later requests).
  std::vector<int64_t> prompt;
  /// The order of its admission on the rank (later ones are preempted
  /// first).
  int64_t admission = 0;
  /// The request's positions so far: its prompt's, then one more per decode
  /// step. K/V at or past it is padding.
  int64_t length = 0;
  /// Whether this rank recorded the logits of the last step (prefill's or a
  /// decode step's): then it picks the next token from `logits`.
  bool recordedLogits = false;
  std::vector<float> logits;
  /// Whether the decode step running has the request's row (the steps in
  /// flight each hold some of the live requests).
  bool inStep = false;
  /// Whether a call whose token the rank has not applied yet ran the
  /// request (it is in a later pipeline stage, or its token is on its way
  /// back), and the last call that ran it.
  bool inFlight = false;
  int64_t lastCall = -1;
  /// Prefill pool of a two-pool program: the blocks of the request's K/V
  /// this rank sends the decode pool (from planKVTransfer), each sent when
  /// its layer's K/V is recorded.
  std::vector<meshfold::KVBlock> sends;
  bool sendsPlanned = false;
  /// Generation: the tokens chosen so far (a decode step computes the
  /// logits of generated token `generated`), the last one (the next step's
  /// input), and when its prefill ended.
  int64_t generated = 0, token = 0;
  double prefillEnd = 0;
};

/// The global position of place `place` of the request in batch slot `slot`
/// of a decode step (moe.attention: the sequence in the high 32 bits).
inline int64_t globalPosition(int64_t slot, int64_t place) {
  return (slot << 32) | place;
}

/// A decode step's key tiles of one layer (mfrt_kv_key_tiles), between the
/// call that counts them and the one that hands them to the program.
struct KeyTiles {
  struct Tile {
    /// The tile's first row in the rank's KVPool, its row count, and the
    /// index of its first row's position in `positions`.
    int64_t row = 0, rows = 0, first = 0;
  };
  int64_t layer = -1, capacity = 0;
  std::vector<Tile> tiles;
  /// Every tile row's global position and request, tile after tile.
  std::vector<int64_t> positions;
  std::vector<Sequence *> sequences;
  /// The request of each of the step's rows (null: a padding row).
  std::vector<Sequence *> stepSequences;
};

/// What the program keeps per rank (the rank's number and its groups'
/// state are the comm layer's).
struct ProgramRank {
  const meshfold::Manifest *manifest = nullptr;
  /// Weights by manifest id: this rank's slice of each, in its storage type.
  std::vector<WeightSlice> params;
  /// CUDA mode: the same slices in managed memory on the rank's device
  /// (DeviceBuffers.h; the host copies are then freed).
  std::vector<void *> deviceParams;
  /// Runtime group handles by manifest group id.
  std::vector<int64_t> groups;
  /// The requests this rank runs: the one prefill runs (`prefill`, -1 for
  /// a dummy batch) and those a decode step batches, one row each, by slot:
  /// a step's global positions are `slot * 2^32 + place` (moe.attention).
  std::vector<Sequence> sequences;
  int64_t prefill = -1;
  /// The rank's K/V cache (KVCache.h), the blocks not reserved by a
  /// request (-1: no limit, --kv-memory not given), and the requests whose
  /// admission waited for blocks.
  KVPool kv;
  KeyTiles keyTiles;
  int64_t kvFree = -1;
  int64_t kvWaits = 0;
  /// --prefix-cache: finished requests whose K/V (blocks, reserved as
  /// before) the rank keeps for later prompts, least recently used first.
  std::list<Sequence> retained;
  /// Requests preempted for their blocks (their cache freed, their tokens
  /// kept), first preempted first, admitted again before new ones; the
  /// preemptions and the rows they recomputed; admissions so far.
  std::deque<Sequence> preempted;
  int64_t preemptions = 0, recomputedRows = 0, admissions = 0;
  /// Whether a decode step runs (else prefill: positions are places).
  bool stepping = false;
  /// The live sequence and place (`*place`) of the row at global position
  /// `position` of the function running; null for padding (no request, a
  /// request not in the decode step running, a place at or past its
  /// length).
  Sequence *sequenceOf(int64_t position, int64_t *place);
  /// --report traffic: the bytes this rank sent in decode steps (counters
  /// as Program::traffic's).
  std::vector<uint64_t> decodeTraffic;
  /// --report traffic, the prefill pool of a program of two pools: the
  /// bytes this rank's transfers to the decode pool took per request, over
  /// NVLink and over IB ([2 * request + link]).
  std::vector<uint64_t> transferTraffic;
  /// The requests of each decode step this rank ran (0 for a dummy step):
  /// their count is the steps it ran.
  std::vector<int64_t> stepBatches;
  /// The decode steps that ran prompt rows (chunks, or the rows past a
  /// prefix hit) and the most rows a step ran (--report decode).
  int64_t promptSteps = 0, mostStepRows = 0;
  /// The generation loop's calls (--report decode): prefills (dummies
  /// included) and waits for calls in later stages; on the first stage, the
  /// steps started while an earlier prefill or step was still in a later
  /// stage, and the prefills started while only prefills were, or a step.
  int64_t prefillCalls = 0, waitCalls = 0;
  int64_t overlappedSteps = 0, prefillsBesidePrefills = 0,
          prefillsBesideSteps = 0;
  /// When the rank started its requests (steady clock, seconds).
  double runStart = 0;
  /// The layer last entered (for the routing hooks).
  int64_t layer = -1;
  /// Whether the rank is inside a layer (between layers: the LM head).
  bool inLayer = false;
  /// Positions of the rows of the current layer (the last named: a narrowed
  /// layer names its surviving rows): in the SP layout (the hidden state's
  /// rows) and in the CP layout (after the TP all-gather).
  std::vector<int64_t> spRows, cpRows;
  /// The rows of the decode step running whose logits its LM head computes
  /// (moe.step_head_rows: their indices among the step's rows, and their
  /// positions, the layout of the head's logits).
  std::vector<int64_t> headRows, headPositions;
  /// --report traffic's compute counters of prefill, per layer
  /// (ComputeCounter): the rows the layer's parts ran on, as the hooks saw
  /// them.
  std::vector<uint64_t> compute;
  /// --report routing: the rows this rank dispatched to each expert, by
  /// [layer][expert] (prefill and decode steps; padding rows not counted).
  std::vector<uint64_t> routedRows;
  /// Dispatches in flight that left padding rows home, by handle.
  std::map<int64_t, PackedDispatch> packedDispatches;
};

/// The compute counters of a layer in ProgramRank::compute: rows whose K/V
/// were computed, query rows (CP layout), (query, visible key) pairs of
/// their attention, rows through the router and dispatch (SP layout), and
/// the expert rows the rank received.
enum ComputeCounter {
  kKVRows,
  kQueryRows,
  kAttentionPairs,
  kMoERows,
  kExpertRows,
  kComputeCounters
};

/// Whether the rank counts compute now: prefill, with --report traffic.
bool countsCompute(const ProgramRank &rs);

/// Adds `n` to counter `c` of `layer` when the rank counts compute.
void countCompute(ProgramRank &rs, int64_t layer, ComputeCounter c, uint64_t n);
/// --report routing: counts the `n` expert choices (global expert ids) a
/// dispatch of the rank's current layer sends.
void countRouting(ProgramRank &rs, const int64_t *choices, int64_t n,
                  int64_t experts);

/// The program's part of the calling rank's state. Only inside the rank's
/// body (mfrt_launch), where the program's hooks run.
ProgramRank &programRank();

/// Fails the program with a one-line message, naming the rank when a
/// multi-device rank calls it.
[[noreturn]] void fatal(const std::string &msg);

} // namespace mfrt

#endif // MFRT_PROGRAM_PROGRAMRANK_H
