//===- Program.h - The emitted program's state and steps --------*- C++ -*-===//
//
// Every executable meshfold emits runs the same steps (Main.cpp): it parses
// the command line (Options.cpp), checks the weights file against the
// embedded manifest and reads the prompts (Run.cpp, Weights.cpp), runs the
// compiled `prefill` SPMD program on every rank of the plan (threads of the
// local backend, or MPI processes; Run.cpp), assembles the outputs
// (Outputs.cpp) and prints the reports (Reports.cpp). Each rank loads only
// its slices of the weights; requests are spread over the DP replicas by a
// load balancer, and a replica without a request runs a dummy batch so that
// the MoE rendezvous completes.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_PROGRAM_PROGRAM_H
#define MFRT_PROGRAM_PROGRAM_H

#include "meshfold/Support/Manifest.h"
#include "mfrt/io/Checkpoint.h"
#include "mfrt/mfrt.h"
#include "mfrt/program/ProgramRank.h"
#include "mfrt/tokenizer/PromptSource.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mfrt {

/// The command line, as given (checked by the steps that use it).
/// What happens after prefill: up to `maxNewTokens` tokens per request,
/// greedy when `temperature` is 0, else drawn (after top-k and top-p) with
/// the counter-based generator keyed by (seed, request, step).
struct Generation {
  int64_t maxNewTokens = 0;
  double temperature = 0.0, topP = 1.0;
  int64_t topK = 0;
  /// The most requests a DP replica decodes together (0: all of them), and
  /// the most decode steps (micro-batches) a replica has in flight through
  /// the pipeline stages (0: one per stage).
  int64_t maxBatch = 0, microBatches = 1;
  uint64_t seed = 0;
  bool seedGiven = false, ignoreEos = false, stepLogits = false;
};

/// The token chosen from `logits [vocab]` for step `step` of request
/// `request` (Sampling.cpp; the rule is the README's).
int64_t chooseToken(const Generation &g, const float *logits, int64_t vocab,
                    int64_t request, int64_t step);

struct Options {
  std::string weights, prompts, out, backend = "local", timeout;
  /// --prompts-text / --prompts-jsonl (text tokenized with --tokenizer's,
  /// else the checkpoint's tokenizer) and --out-jsonl.
  std::string promptsText, promptsJsonl, tokenizer, outJsonl;
  /// Whether --timeout was given (its value may be empty: --timeout=).
  bool timeoutGiven = false;
  std::string traceToken, forceRouting, traceSvg, nvlinkGBps, ibGBps;
  bool quiet = false;
  /// --allow-long-prompts: run prompts longer than the model's
  /// max_position_embeddings (with a warning) instead of failing.
  bool allowLongPrompts = false;
  /// --threads: OpenMP threads per rank (0: not given).
  int threads = 0;
  /// --report traffic.
  bool reportTraffic = false;
  /// --report decode: per request, the rows each decode step computed and
  /// read.
  bool reportDecode = false;
  /// --report load: per rank, the checkpoint files it read and the bytes of
  /// its slices, used in place or copied.
  bool reportLoad = false;
  /// Generation after prefill.
  Generation generation;
};

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
  std::vector<std::unique_ptr<RequestOutput>> outputs;
  Generation generation;
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

/// --report decode: one line per request, the rows its decode steps
/// computed and read (Outputs.cpp).
void printDecodeReport(const Program &prog);

/// The process's one Program.
Program &program();

/// The program's name for messages: the last component of argv[0].
void setProgramName(const char *argv0);
const char *programName();

/// Fails the program with "<program>: error: <msg>" (the first rank to fail
/// speaks for the process).
[[noreturn]] void die(const std::string &msg);

//===----------------------------------------------------------------------===//
// The command line (Options.cpp)
//===----------------------------------------------------------------------===//

/// Reads the flags into `options`; false when --help printed the usage.
/// Unknown flags, a flag without its value and missing required flags fail.
bool parseCommandLine(int argc, char **argv, Options &options);
/// The launch options of --backend and --timeout (the plan is set later).
mfrt_options launchOptions(const Options &options);
/// OpenMP threads per rank: --threads, else 1 when the local backend runs
/// several ranks in this process, else the cores this process may run on
/// (shared with the other processes of its node under mpirun).
int threadsPerRank(const Options &options, int ranksInProcess);
/// Fails, before any work, when --out or --trace-svg cannot be written.
void checkOutputPaths(const Options &options);
/// Sets traceConfig() from --trace-token, --trace-svg and --force-routing,
/// checked against the prompts and the model.
void configureTrace(const Options &options, const Program &prog);
/// `plan` with the link speeds of --nvlink-gbps / --ib-gbps, for
/// --report traffic.
std::string reportPlanText(const Options &options, const Program &prog,
                           const std::string &plan);

//===----------------------------------------------------------------------===//
// The run (Run.cpp, Weights.cpp)
//===----------------------------------------------------------------------===//

/// Reads the embedded manifest, the prompts and the weights file (checked
/// against the manifest) into `prog`, and makes room for the outputs.
void loadProgram(const Options &options, Program &prog);
/// The plan the program was compiled for (one device when the manifest has
/// none).
std::string planText(const meshfold::Manifest &manifest);
/// The number of ranks (devices) of `plan`.
int ranksOfPlan(const std::string &plan);
/// --report traffic: a row of counters per device of `plan`.
void prepareTraffic(Program &prog, const std::string &plan);
/// Requests per DP replica: longest first, each to the replica with the
/// least work so far (token counts), so that replicas finish together.
std::vector<std::vector<int64_t>>
balance(const std::vector<std::vector<int64_t>> &requests, int64_t replicas);

/// The layout of a manifest's plan (planText).
meshfold::MeshLayout layoutOf(const meshfold::Manifest &m);

/// The DP replica of `layout` that `balance` gives request `r`.
int64_t replicaOf(const Program &prog, const meshfold::MeshLayout &layout,
                  int64_t r);

/// A program of two pools: the blocks of request `request`'s K/V that go
/// from its prefill replica to its decode replica (planKVTransfer on the
/// two manifests' plans; each pool's replica from `balance`).
std::vector<meshfold::KVBlock> transferBlocks(const Program &prog,
                                              int64_t request);
/// The body of every rank (mfrt_launch): loads its weights, runs its
/// requests and hands its outputs to rank 0.
int rankMain(void *);

/// Checks the dtype and shape of every tensor the model reads that the
/// checkpoint holds (see Weights.cpp).
void checkWeights(const meshfold::Manifest &m, const Checkpoint &file);

/// --report load: rank 0 gathers every rank's load figures (under MPI), and
/// prints them.
void collectLoads(Program &prog);
void printLoadReport(const Program &prog);
/// The runtime group of `axes` for this rank, made once per rank.
int64_t groupOf(std::map<std::string, int64_t> &cache, const std::string &axes);
/// Loads this rank's slice of every weight, in the storage type the
/// manifest names for it.
void loadWeights(ProgramRank &rs, std::map<std::string, int64_t> &groups);
/// On a terminal: once the ranks' loading has taken a second, a line
/// "loading weights: 42% (600 MB of 1.4 GB)" updated in place until it is
/// done or `stop` is set.
void showLoadProgress(std::atomic<bool> &stop);
/// Whether the progress line is on the terminal, unfinished (an error then
/// starts a new line).
bool progressLineOpen();

//===----------------------------------------------------------------------===//
// The outputs (Outputs.cpp)
//===----------------------------------------------------------------------===//

/// One empty RequestOutput per request.
void allocateOutputs(Program &prog);
/// Multi-process runs: rank 0 collects the other processes' outputs, token
/// trace and traffic counters; the other ranks send theirs.
void collectOutputs(Program &prog);
/// --out-jsonl: one line per request, written whole or not at all.
void writeJsonlResults(const Options &options, const Program &prog);
void collectTrace(Program &prog);
void collectTraffic(Program &prog);
/// Checks that every output was written and adds it to `writer`; prints
/// each request's next token unless `quiet`.
void addOutputs(const Program &prog, SafetensorsWriter &writer, bool quiet);

//===----------------------------------------------------------------------===//
// The reports (Reports.cpp)
//===----------------------------------------------------------------------===//

/// --report traffic: measured bytes per GPU and layer beside the analytic
/// figures of `plan`.
void printTraffic(const Program &prog, const std::string &plan);
/// --trace-token: the travel log (and --trace-svg's map).
void reportTrace(const Program &prog, const std::string &plan);

} // namespace mfrt

#endif // MFRT_PROGRAM_PROGRAM_H
