//===- Program.h - The emitted program's state ------------------*- C++ -*-===//
//
// Every executable meshfold emits runs the same steps (Main.cpp): it parses
// the command line (Options.h), checks the weights file against the
// embedded manifest and reads the prompts (Run.h, Weights.h), runs the
// compiled `prefill` SPMD program on every rank of the plan (threads of the
// local backend, or MPI processes; Run.h), assembles the outputs
// (Outputs.h) and prints the reports (Reports.h). Each rank loads only its
// slices of the weights; requests are spread over the DP replicas by a load
// balancer, and a replica without a request runs a dummy batch so that the
// MoE rendezvous completes.
//
// This header holds what the steps share (Program.cpp): the Program, its
// error exit, and the plan and replica of the requests.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_PROGRAM_PROGRAM_H
#define MFRT_PROGRAM_PROGRAM_H

#include "meshfold/Support/KVTransfer.h"
#include "meshfold/Support/Manifest.h"
#include "meshfold/Support/MeshLayout.h"
#include "mfrt/io/Checkpoint.h"
#include "mfrt/mfrt.h"
#include "mfrt/program/KVCache.h"
#include "mfrt/program/ProgramRank.h"
#include "mfrt/program/Sampling.h"
#include "mfrt/tokenizer/PromptSource.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mfrt {

/// Seconds on the steady clock (the program's request and token times).
double secondsNow();

/// What rank 0 of a serving program (--serve) tells every rank at each call
/// of the generation loop: the requests that arrived since the last call
/// (their slots in the program's request tables, written before, and the DP
/// replica that runs each), those cancelled (their slots), and whether to
/// stop (no request left and no more coming).
struct Intake {
  std::vector<std::pair<int64_t, int64_t>> arrived;
  std::vector<int64_t> cancelled;
  bool stop = false;
};

/// Where a serving program's requests come from (the server, mfrt/serve):
/// rank 0's generation loop asks it for an Intake at each call, and the
/// replicas' recorders tell it when a request has new tokens or ended.
class RequestSource {
public:
  virtual ~RequestSource();
  /// Rank 0: the next Intake (at most kIntakeRequests of each kind). With
  /// `idle` (no rank has work) it may wait a little for arrivals.
  virtual Intake take(bool idle) = 0;
  /// A recorder appended tokens to a request's outputs, or ended it.
  virtual void progressed() = 0;
  /// Rank 0 ran decode steps of these batch sizes (requests) since the
  /// last take().
  virtual void stepped(const std::vector<int64_t> &batches) = 0;
};

/// The most arrivals, and the most cancellations, one Intake carries.
constexpr int64_t kIntakeRequests = 64;
/// The most top logprobs a served request may ask for per token.
constexpr int64_t kTopLogprobs = 20;

/// What every rank shares: the manifest, the mapped weights file, the
/// requests and their outputs.
struct Program {
  /// --report traffic: the bytes each rank sent, [rank][layer + 1][kind]
  /// [link] (layer -1 first), in prefill, then the same in decode steps,
  /// then the number of decode steps the rank ran, the bytes the analytic
  /// model gives their pass-Q attention and, in a program of two pools,
  /// the rank's transfer bytes per request (ProgramRank::transferTraffic).
  bool reportTraffic = false;
  std::vector<std::vector<uint64_t>> traffic;
  /// --report traffic: each rank's compute counters of prefill
  /// (ProgramRank::compute, [layer][ComputeCounter]).
  std::vector<std::vector<uint64_t>> compute;
  /// --report load: per rank, {checkpoint files read, bytes of its slices in
  /// the checkpoint, bytes used in place where they are mapped, bytes
  /// copied}.
  bool reportLoad = false;
  std::vector<std::vector<uint64_t>> loads;
  /// --report routing / --routing-json: each rank's ProgramRank::routedRows
  /// (rank 0 sums them).
  bool reportRouting = false;
  std::vector<std::vector<uint64_t>> routing;
  /// Rank 0's run of its requests (--report decode's throughput): wall
  /// seconds (prefills and decode steps), decode steps and the most
  /// requests a step ran.
  double runSeconds = 0;
  int64_t runSteps = 0, runBatch = 0;
  /// The rank these figures are of (the decode pool's first in a program
  /// of two pools).
  int runRank = 0;
  /// Rank 0's prefill calls and waits, and its overlapped steps, prefills
  /// beside prefills and prefills beside steps (ProgramRank).
  int64_t runPrefills = 0, runWaits = 0;
  /// Rank 0's decode steps that ran prompt rows, and the most rows a step
  /// ran (ProgramRank).
  int64_t runPromptSteps = 0, runMostStepRows = 0;
  std::array<int64_t, 3> runOverlapped = {0, 0, 0};
  meshfold::Manifest manifest;
  /// A program of two pools (meshfold-compile --decode-plan): `manifest` is
  /// the prefill pool's, `decodeManifest` the decode pool's.
  bool pools = false;
  meshfold::Manifest decodeManifest;
  std::unique_ptr<Checkpoint> weights;
  /// OpenMP threads of each rank's parallel loops (set by every rank for
  /// itself: the thread count is per thread).
  int threadsPerRank = 1;
  std::vector<std::vector<int64_t>> requests;
  /// The prompts as read: their file and lines, their texts, the tokenizer.
  Prompts prompts;
  std::vector<std::shared_ptr<RequestOutput>> outputs;
  Generation generation;
  /// A serving program (--serve): the source of its requests, and each
  /// request slot's own generation settings (from its HTTP request; the
  /// slots of `requests` and `outputs` are reused once a request ended).
  RequestSource *source = nullptr;
  std::vector<Generation> served;
  /// Serving: the K/V blocks rank 0 holds (for /metrics).
  mutable std::atomic<int64_t> kvBlocksInUse{0};
  /// --kv-block and --kv-memory; whether --out holds the requests' K/V
  /// (not with --no-kv-out: then only the ranks' caches keep it, for as
  /// long as a request runs).
  KVSettings kv;
  bool kvOutputs = true;
  /// --prefix-cache (PrefixCache.h).
  bool prefixCache = false;
  /// The K/V cache of the rank of the run figures (runRank): {blocks it may
  /// hold (-1: no limit), the most it held at once, bytes of its block
  /// storage, requests whose admission waited for blocks, preemptions, the
  /// rows they recomputed}.
  std::array<int64_t, 6> runKV = {-1, 0, 0, 0, 0, 0};
  /// Processes of a multi-process run each hold the outputs their ranks
  /// wrote: rank 0 collects them (and the traffic counters and trace).
  bool collectOutputs = false;
  /// Whether mfrt_send returns before the peer receives (local, mpi): then
  /// a pipeline stage goes on to its next call while the later stages
  /// compute the last one (nccl: a stage's send waits for its receiver).
  bool bufferedSends = true;
  /// Hops of the traced token that rank 0 received from the other
  /// processes.
  std::vector<mfrt_trace_hop> traceHops;
};

/// The generation settings of request `r`: its own when served, else the
/// command line's.
const Generation &generationOf(const Program &prog, int64_t r);
/// The request number that keys `r`'s sampling draws: its index in a batch
/// (so that requests differ), 0 when served (the HTTP request's own seed
/// then repeats its draws).
int64_t sampleKey(const Program &prog, int64_t r);

/// The process's one Program.
Program &program();

/// The program's name for messages: the last component of argv[0].
void setProgramName(const char *argv0);
const char *programName();

/// Fails the program with "<program>: error: <msg>" (the first rank to fail
/// speaks for the process).
[[noreturn]] void die(const std::string &msg);

/// The plan the program was compiled for (one device when the manifest has
/// none).
std::string planText(const meshfold::Manifest &manifest);
/// The layout of a manifest's plan (planText).
meshfold::MeshLayout layoutOf(const meshfold::Manifest &m);

/// Requests per DP replica: longest first, each to the replica with the
/// least work so far (token counts), so that replicas finish together.
std::vector<std::vector<int64_t>>
balance(const std::vector<std::vector<int64_t>> &requests, int64_t replicas);
/// The DP replica of `layout` that `balance` gives request `r`.
int64_t replicaOf(const Program &prog, const meshfold::MeshLayout &layout,
                  int64_t r);

/// A program of two pools: the blocks of request `request`'s K/V that go
/// from its prefill replica to its decode replica (planKVTransfer on the
/// two manifests' plans; each pool's replica from `balance`).
std::vector<meshfold::KVBlock> transferBlocks(const Program &prog,
                                              int64_t request);

} // namespace mfrt

#endif // MFRT_PROGRAM_PROGRAM_H
