//===- Options.h - The emitted program's command line -----------*- C++ -*-===//
//
// The flags of an emitted program (Options.cpp), and the settings of the
// run that follow from them: the launch options, the threads per rank, the
// token trace and the report's link speeds.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_PROGRAM_OPTIONS_H
#define MFRT_PROGRAM_OPTIONS_H

#include "mfrt/mfrt.h"
#include "mfrt/program/KVCache.h"
#include "mfrt/program/Sampling.h"

#include <string>

namespace mfrt {

struct Program;

/// The command line, as given (checked by the steps that use it).
struct Options {
  std::string weights, prompts, out, backend = "local", timeout;
  /// --random-weights SEED (instead of --weights), and the seed.
  std::string randomWeights;
  uint64_t randomSeed = 0;
  /// --prompts-text / --prompts-jsonl (text tokenized with --tokenizer's,
  /// else the checkpoint's tokenizer) and --out-jsonl.
  std::string promptsText, promptsJsonl, tokenizer, outJsonl;
  /// Whether --timeout was given (its value may be empty: --timeout=).
  bool timeoutGiven = false;
  /// --rendezvous HOST:PORT and --rank R (tcp, and nccl without mpirun).
  std::string rendezvous, rank;
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
  /// --report routing: rows routed to each expert per layer; --routing-json
  /// FILE writes them as JSON (and implies the report's counting).
  bool reportRouting = false;
  std::string routingJson;
  /// Generation after prefill.
  Generation generation;
  /// The K/V cache: --kv-block, --kv-memory (KVCache.h), and whether --out
  /// holds the requests' K/V (--no-kv-out: not).
  KVSettings kv;
  bool kvOutputs = true;
  /// --prefix-cache: reuse the K/V of prompt prefixes a replica holds (on
  /// by default with --serve; --no-prefix-cache: off).
  bool prefixCache = false, noPrefixCache = false;
  /// --serve HOST:PORT (an OpenAI-compatible HTTP server instead of a batch
  /// of prompts), --api-key, --max-queue (requests waiting beyond the
  /// running batches before new ones get HTTP 429) and --served-model-name.
  std::string serve, apiKey, servedModelName, chatTemplate;
  int64_t maxQueue = 256;
};

/// Reads the flags into `options`; false when --help printed the usage or
/// --version the version.
/// Unknown flags, a flag without its value and missing required flags fail.
bool parseCommandLine(int argc, char **argv, Options &options);
/// The launch options of --backend, --timeout, --rendezvous and --rank (the
/// plan is set later); they point into `options`.
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

} // namespace mfrt

#endif // MFRT_PROGRAM_OPTIONS_H
