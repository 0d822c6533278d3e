//===- Options.cpp - The emitted program's command line -------------------===//
//
// A flag's value is the next argument or follows '=' (--out=FILE, and
// --timeout= gives an empty one); the last of a repeated flag wins. An
// unknown flag, an argument that is not a flag and a flag without its value
// each fail with one line naming the argument as given. Every value is
// checked where its meaning is known: the required flags and the value sets
// here, the trace flags against the prompts and the model, the link speeds
// against --report traffic.
//
//===----------------------------------------------------------------------===//

#include "mfrt/program/Options.h"

#include "mfrt/program/DeviceBuffers.h"
#include "mfrt/program/Program.h"
#include "mfrt/program/Trace.h"

#include "meshfold/Config.h"
#include "meshfold/Support/PlanText.h"
#include "meshfold/Support/Text.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <tuple>

#include <sched.h>

#include <sys/stat.h>
#include <unistd.h>

using namespace mfrt;

namespace {
void usage() {
  std::printf(
      "usage: %s --weights W.safetensors|--random-weights SEED --prompts "
      "PROMPTS.txt --out OUT.safetensors [--backend local|mpi|tcp|nccl] "
      "[--timeout S] [--threads N] "
      "[--quiet]\n"
      "       %s --weights W|--random-weights SEED --serve HOST:PORT "
      "[--api-key KEY] ...\n\n"
      "Runs prefill for every prompt (one request per line: token ids "
      "separated by spaces,\nor text with --prompts-text / --prompts-jsonl) "
      "on every rank of the compiled plan\nand writes, "
      "per request r, req{r}.logits [V]\n(last prompt position) and "
      "req{r}.layers.{i}.k / .v [T, n_kv, d_h] (K after RoPE), f32.\n\n"
      "  --weights PATH   safetensors with the model's Hugging Face names "
      "(F32, "
      "BF16 or F16):\n"
      "                   one file, a model.safetensors.index.json with its "
      "shards, or\n"
      "                   a checkpoint folder holding either\n"
      "  --random-weights SEED\n"
      "                   instead of --weights: generate every weight from "
      "SEED and its\n"
      "                   name in memory (what meshfold-gen-weights --seed "
      "SEED writes,\n"
      "                   in the program's storage type): benchmarks "
      "without a checkpoint\n"
      "  --prompts FILE   prompts, one request per line\n"
      "  --prompts-text FILE\n"
      "                   text prompts, one per line (UTF-8; escapes \\n, "
      "\\t, \\r, \\\\),\n"
      "                   tokenized with the checkpoint's own tokenizer "
      "(BOS as it adds it)\n"
      "  --prompts-jsonl FILE\n"
      "                   prompts as JSON lines: {\"prompt\": \"text\"} or "
      "{\"prompt_token_ids\":\n"
      "                   [ids]} (also inside \"body\", as in OpenAI batch "
      "files)\n"
      "  --tokenizer PATH tokenizer.json, tokenizer.model or a folder "
      "holding one (default:\n"
      "                   the one beside --weights)\n"
      "  --out FILE       output safetensors (written only on success)\n"
      "  --out-jsonl FILE also write one JSON line per request: request, "
      "prompt_tokens,\n"
      "                   tokens (generated; without --max-new-tokens the "
      "next token),\n"
      "                   text (detokenized, null without a tokenizer), "
      "finish_reason\n"
      "                   (stop: end of sequence; length: the token "
      "budget)\n"
      "  --backend NAME   local (default: every rank a thread of this "
      "process), mpi\n"
      "                   (one process per rank under mpirun), tcp (one "
      "process per rank\n"
      "                   over sockets, started by srun or any launcher, "
      "no MPI) or nccl\n"
      "                   (--target cuda programs: one process per GPU "
      "under mpirun, or\n"
      "                   like tcp with --rendezvous)\n"
      "  --rendezvous HOST:PORT\n"
      "                   tcp and nccl: where the processes meet; rank 0 "
      "listens there,\n"
      "                   the others connect (default: $MFRT_RENDEZVOUS, "
      "else under srun\n"
      "                   the step's first node and a port from the job and "
      "step ids)\n"
      "  --rank R         tcp and nccl with --rendezvous: this process's "
      "rank (default:\n"
      "                   srun's SLURM_PROCID); a GPU is SLURM_LOCALID, else "
      "the rank's\n"
      "                   index among the ranks on its host\n"
      "  --timeout S      seconds a collective waits for its peers (default "
      "60)\n"
      "  --report traffic print, per GPU and layer, the elements each "
      "collective sent\n"
      "                   over NVLink and IB (the runtime's counters; "
      "under mpi\n"
      "                   rank 0 collects them), beside the analytic "
      "figures\n"
      "  --trace-token REQ:POS\n"
      "                   follow the data of prompt position POS of request "
      "REQ (0-based)\n"
      "                   through the collectives: one travel-log line per "
      "comm op it\n"
      "                   took part in (GPUs that held any of it, node "
      "crossings split\n"
      "                   into EP and PP, comm ops), recorded by the runtime "
      "from the\n"
      "                   messages that carried it; the whole trip last. "
      "With\n"
      "                   --max-new-tokens, POS may also be a generated "
      "token's\n"
      "                   (T .. T+N-2), followed through its decode step\n"
      "  --trace-svg FILE a map of the traced token's route (SVG)\n"
      "  --force-routing FILE|random[:SEED]|zipf:S[:SEED]\n"
      "                   benchmarking and test hook: FILE fixes the traced "
      "token's\n"
      "                   experts, one line per layer 'LAYER: E1 E2 ...' "
      "(layers from 1,\n"
      "                   expert ids 0..n_experts-1, top_k of them); random "
      "draws every\n"
      "                   token's experts uniformly (the same on every "
      "plan), zipf\n"
      "                   with weight 1/r^S for the expert of rank r in a "
      "per-layer order\n"
      "                   (a skewed load); the chosen experts keep the "
      "router's weights\n"
      "  --nvlink-gbps N, --ib-gbps N\n"
      "                   link speeds for the report's times (default: the "
      "plan's, 450 and 50)\n"
      "  --serve HOST:PORT\n"
      "                   instead of a batch of prompts, serve an "
      "OpenAI-compatible HTTP\n"
      "                   API there (POST /v1/completions and "
      "/v1/chat/completions, GET\n"
      "                   /v1/models, /health, /metrics): every rank of the "
      "plan runs each\n"
      "                   step, new requests join the running batch at the "
      "next one;\n"
      "                   SIGTERM finishes the running requests and exits. "
      "HOST other\n"
      "                   than 127.0.0.1/localhost needs --api-key. "
      "--max-new-tokens is the\n"
      "                   default max_tokens (16), --max-batch defaults to "
      "64\n"
      "  --api-key KEY    clients must send 'Authorization: Bearer KEY'\n"
      "  --max-queue N    requests that may wait for a place in the batch "
      "(default 256);\n"
      "                   more get HTTP 429\n"
      "  --chat-template PATH\n"
      "                   the chat template of /v1/chat/completions: a "
      "template file, a\n"
      "                   tokenizer_config.json or a folder (default: the "
      "tokenizer's folder)\n"
      "  --served-model-name NAME\n"
      "                   the model's name in the API (default: the "
      "weights' folder or file)\n"
      "  --threads N      OpenMP threads per rank for the compiled loops "
      "(default: all\n"
      "                   cores for a one-rank run, 1 per rank when the "
      "local backend\n"
      "                   runs several ranks in this process)\n"
      "  --allow-long-prompts\n"
      "                   run prompts longer than the model's "
      "max_position_embeddings\n"
      "                   (positions it was not trained for), with a "
      "warning, instead\n"
      "                   of failing\n"
      "  --max-new-tokens N\n"
      "                   after prefill, generate up to N tokens per request "
      "(default 0:\n"
      "                   prefill only; programs compiled with --decode); a "
      "request stops\n"
      "                   early at the model's eos_token_id; writes "
      "req{r}.tokens [n]\n"
      "                   (int32)\n"
      "  --max-batch B    decode at most B requests of a DP replica together "
      "(default 0:\n"
      "                   all of them); the next request's prefill runs as "
      "one leaves\n"
      "  --micro-batches M\n"
      "                   with pipeline stages, keep up to M decode steps in "
      "flight, each\n"
      "                   a share of the batch, so that the stages work at "
      "once (0: one per\n"
      "                   stage; default 1: the whole batch at once, which is "
      "faster while\n"
      "                   steps are latency-bound); prefills always overlap "
      "the calls\n"
      "                   before them\n"
      "  --prefill-chunk N\n"
      "                   run each prompt through decode steps in chunks of "
      "at most N rows,\n"
      "                   in the same steps as the running requests' "
      "tokens, so that a\n"
      "                   long prompt does not stall them (default 0: one "
      "prefill call\n"
      "                   per prompt)\n"
      "  --max-step-tokens N\n"
      "                   compute at most N rows per decode step: the running "
      "requests'\n"
      "                   tokens first, then prompt chunks, the prompts with "
      "the fewest\n"
      "                   rows left first (and a row for the oldest prompt), "
      "so that\n"
      "                   a prefill slows each step by a bounded amount; "
      "prompts run in\n"
      "                   chunks (of N rows unless --prefill-chunk) (default "
      "0: no bound;\n"
      "                   with --serve 64, or 512 in a program compiled "
      "for CUDA)\n"
      "  --temperature T  sample at temperature T > 0 (default 0: greedy)\n"
      "  --top-k K        sample among the K most likely tokens (default 0: "
      "all)\n"
      "  --top-p P        sample among the most likely tokens whose "
      "probabilities sum\n"
      "                   to P, 0 < P <= 1 (default 1)\n"
      "  --seed S         the sampler's seed (default 0); a draw depends only "
      "on\n"
      "                   (seed, request, step)\n"
      "  --ignore-eos     generate N tokens even past eos_token_id\n"
      "  --step-logits    also write req{r}.step_logits [n, V], the logits "
      "that chose\n"
      "                   each generated token\n"
      "  --kv-block N     rows per block of each rank's K/V cache "
      "(default 16)\n"
      "  --kv-memory SIZE bytes of K/V cache per rank (512MB, 2GiB, ...; "
      "default: as many\n"
      "                   blocks as the running requests need); a request "
      "is admitted once\n"
      "                   its blocks are free (in order of arrival), and "
      "frees them when\n"
      "                   done\n"
      "  --prefix-cache   a request whose prompt starts with whole blocks "
      "of tokens whose\n"
      "                   K/V its DP replica holds (a running or a recently "
      "finished\n"
      "                   request's) takes them instead of computing them; "
      "the rest of\n"
      "                   its prompt runs in decode steps. Finished requests "
      "are kept\n"
      "                   until their blocks are needed (16 without "
      "--kv-memory);\n"
      "                   on by default with --serve\n"
      "  --no-prefix-cache\n"
      "                   compute every prompt whole, also with --serve\n"
      "  --no-kv-out      leave the K/V cache out of --out "
      "(req{r}.layers.{i}.k / .v):\n"
      "                   a request's K/V is then kept only while it runs\n"
      "  --report load    print per rank the checkpoint files it read and the "
      "bytes of\n"
      "                   its weight slices, used in place (mapped) or "
      "copied, and the\n"
      "                   shards its process mapped (only those that hold "
      "its slices)\n"
      "  --report decode  print per request the K/V rows each decode step "
      "computed (the\n"
      "                   step's own) and read from the cache, counted by "
      "the runtime,\n"
      "                   its times, and the time per step while every "
      "request decodes\n"
      "  --report routing print per layer the rows routed to each expert "
      "over the run\n"
      "                   (prefill and decode, summed over the ranks, "
      "counted at the\n"
      "                   expert dispatch: programs with expert parallelism) "
      "and their\n"
      "                   max/mean\n"
      "  --routing-json FILE\n"
      "                   write those rows as JSON (the format: "
      "docs/design.md,\n"
      "                   section Formats)\n"
      "  --quiet          print nothing but errors\n"
      "  --version        meshfold's version, which built this program\n"
      "  --help           this text\n",
      programName(), programName());
}

/// --threads N: a positive count (digits only, at most 4096: a typo rather
/// than a machine beyond that).
int parseThreads(const std::string &text) {
  constexpr long maxThreads = 4096;
  char *end = nullptr;
  errno = 0;
  long n = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || !std::isdigit((unsigned char)text[0]) || *end ||
      errno == ERANGE || n < 1 || n > maxThreads)
    die("--threads must be a number of threads from 1 to " +
        std::to_string(maxThreads) + ", got '" + text + "'");
  return int(n);
}

/// A number of the whole text (strtod), or a one-line error naming `flag`.
double parseNumber(const std::string &flag, const std::string &text) {
  char *end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end || errno == ERANGE || !std::isfinite(v))
    die(flag + " must be a number, got '" + text + "'");
  return v;
}

/// A non-negative integer of the whole text (digits only).
int64_t parseCount(const std::string &flag, const std::string &text) {
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || !std::isdigit((unsigned char)text[0]) || *end ||
      errno == ERANGE)
    die(flag + " must be a whole number of at least 0, got '" + text + "'");
  return int64_t(v);
}

/// --kv-block N (at least 1) or --kv-memory SIZE into `kv`.
void parseKVFlag(const std::string &name, const std::string &text,
                 KVSettings &kv) {
  if (name == "--kv-block") {
    if (!meshfold::parseUnsignedInt(text, kv.blockTokens) ||
        kv.blockTokens < 1 || kv.blockTokens > (int64_t(1) << 20))
      die("--kv-block must be a number of rows from 1 to 1048576, got '" +
          text + "'");
    return;
  }
  kv.memoryBytes = meshfold::parseByteSize(text);
  kv.memoryText = text;
  if (kv.memoryBytes <= 0)
    die("--kv-memory must be a size such as 512MB or 2GiB, got '" + text + "'");
}

/// --force-routing random[:SEED] or FILE.
void configureRouting(const std::string &text, const Program &prog,
                      TraceConfig &trace) {
  const meshfold::Manifest &m = prog.manifest;
  std::string rest = text;
  if (text.rfind("zipf:", 0) == 0) {
    // zipf:S[:SEED]
    rest = text.substr(5);
    std::string skew = rest.substr(0, rest.find(':'));
    char *end = nullptr;
    trace.zipf = std::strtod(skew.c_str(), &end);
    if (skew.empty() || *end || !(trace.zipf > 0) || trace.zipf > 100)
      die("--force-routing zipf:S[:SEED] needs a skew S in (0, 100], got '" +
          skew + "'");
    rest = rest.find(':') == std::string::npos
               ? "random"
               : "random" + rest.substr(rest.find(':'));
  }
  if (rest == "random" || rest.rfind("random:", 0) == 0) {
    trace.randomRouting = true;
    if (rest == "random")
      return;
    std::string seed = rest.substr(7);
    char *end = nullptr;
    errno = 0;
    trace.seed = std::strtoull(seed.c_str(), &end, 10);
    if (seed.empty() || !std::isdigit((unsigned char)seed[0]) || *end ||
        errno == ERANGE)
      die("--force-routing " +
          std::string(trace.zipf > 0 ? "zipf:S:SEED" : "random:SEED") +
          " needs a number, got '" + seed + "'");
    return;
  }
  if (!trace.traceToken)
    die("--force-routing FILE fixes the traced token's experts: it needs "
        "--trace-token REQUEST:POSITION");
  std::string error;
  if (!parseRoutingFile(text, m.layers, m.experts, m.topK, trace.forced,
                        &error))
    die(error);
}
} // namespace

bool mfrt::parseCommandLine(int argc, char **argv, Options &options) {
  const std::map<std::string, std::string *> valued = {
      {"--weights", &options.weights},
      {"--random-weights", &options.randomWeights},
      {"--prompts", &options.prompts},
      {"--prompts-text", &options.promptsText},
      {"--prompts-jsonl", &options.promptsJsonl},
      {"--tokenizer", &options.tokenizer},
      {"--out", &options.out},
      {"--out-jsonl", &options.outJsonl},
      {"--backend", &options.backend},
      {"--timeout", &options.timeout},
      {"--rendezvous", &options.rendezvous},
      {"--rank", &options.rank},
      {"--trace-token", &options.traceToken},
      {"--force-routing", &options.forceRouting},
      {"--trace-svg", &options.traceSvg},
      {"--routing-json", &options.routingJson},
      {"--nvlink-gbps", &options.nvlinkGBps},
      {"--ib-gbps", &options.ibGBps},
      {"--serve", &options.serve},
      {"--api-key", &options.apiKey},
      {"--served-model-name", &options.servedModelName},
      {"--chat-template", &options.chatTemplate}};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string &dst) {
      size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        dst = arg.substr(eq + 1);
        return;
      }
      if (i + 1 >= argc)
        die("option '" + arg + "' needs a value");
      dst = argv[++i];
    };
    std::string name = arg.substr(0, arg.find('='));
    if (name == "--help" || name == "-h") {
      usage();
      return false;
    }
    if (name == "--version") {
      std::fputs(MESHFOLD_VERSION_TEXT, stdout);
      return false;
    }
    if (auto it = valued.find(name); it != valued.end()) {
      value(*it->second);
      options.timeoutGiven |= name == "--timeout";
    } else if (name == "--quiet")
      options.quiet = true;
    else if (name == "--allow-long-prompts")
      options.allowLongPrompts = true;
    else if (name == "--no-kv-out")
      options.kvOutputs = false;
    else if (name == "--prefix-cache")
      options.prefixCache = true;
    else if (name == "--no-prefix-cache")
      options.noPrefixCache = true;
    else if (name == "--kv-block" || name == "--kv-memory") {
      std::string text;
      value(text);
      parseKVFlag(name, text, options.kv);
    } else if (name == "--threads") {
      std::string text;
      value(text);
      options.threads = parseThreads(text);
    } else if (name == "--max-new-tokens" || name == "--top-k" ||
               name == "--seed" || name == "--max-batch" ||
               name == "--micro-batches" || name == "--prefill-chunk" ||
               name == "--max-step-tokens" || name == "--max-queue") {
      std::string text;
      value(text);
      Generation &g = options.generation;
      if (name == "--seed") {
        g.seed = uint64_t(parseCount(name, text));
        g.seedGiven = true;
      } else {
        g.stepTokensGiven |= name == "--max-step-tokens";
        (name == "--top-k"             ? g.topK
         : name == "--max-batch"       ? g.maxBatch
         : name == "--micro-batches"   ? g.microBatches
         : name == "--prefill-chunk"   ? g.prefillChunk
         : name == "--max-step-tokens" ? g.stepTokens
         : name == "--max-queue" ? options.maxQueue
                                 : g.maxNewTokens) = parseCount(name, text);
      }
    } else if (name == "--temperature" || name == "--top-p") {
      std::string text;
      value(text);
      double v = parseNumber(name, text);
      if (name == "--temperature" && v < 0)
        die("--temperature must be at least 0 (0: greedy), got '" + text + "'");
      if (name == "--top-p" && !(v > 0 && v <= 1))
        die("--top-p must be in (0, 1], got '" + text + "'");
      (name == "--temperature" ? options.generation.temperature
                               : options.generation.topP) = v;
    } else if (name == "--ignore-eos")
      options.generation.ignoreEos = true;
    else if (name == "--step-logits")
      options.generation.stepLogits = true;
    else if (name == "--report") {
      std::string what;
      value(what);
      if (what != "traffic" && what != "decode" && what != "load" &&
          what != "routing")
        die("--report must be traffic, decode, load or routing, got '" + what +
            "'");
      (what == "traffic"   ? options.reportTraffic
       : what == "decode"  ? options.reportDecode
       : what == "routing" ? options.reportRouting
                           : options.reportLoad) = true;
    } else
      die("unknown option '" + arg + "' (see --help)");
  }
  if (options.weights.empty() == options.randomWeights.empty())
    die(options.weights.empty()
            ? "missing --weights or --random-weights (see --help)"
            : "give one of --weights and --random-weights");
  if (!options.randomWeights.empty())
    options.randomSeed =
        uint64_t(parseCount("--random-weights", options.randomWeights));
  if (!options.serve.empty())
    return true; // checked by checkServing, once the program is known
  if (!options.apiKey.empty() || !options.servedModelName.empty() ||
      !options.chatTemplate.empty())
    die("--api-key, --served-model-name and --chat-template are for --serve");
  if (options.out.empty())
    die("missing --out (see --help)");
  int prompts = !options.prompts.empty() + !options.promptsText.empty() +
                !options.promptsJsonl.empty();
  if (prompts != 1)
    die(prompts == 0 ? "missing --prompts, --prompts-text or --prompts-jsonl "
                       "(see --help)"
                     : "give one of --prompts, --prompts-text and "
                       "--prompts-jsonl");
  return true;
}

mfrt_options mfrt::launchOptions(const Options &options) {
  mfrt_options launch{};
  const std::string &backend = options.backend;
  if (backend == "local")
    launch.backend = MFRT_BACKEND_LOCAL;
  else if (backend == "mpi")
    launch.backend = MFRT_BACKEND_MPI;
  else if (backend == "tcp")
    launch.backend = MFRT_BACKEND_TCP;
  else if (backend == "nccl" && programUsesDevice())
    launch.backend = MFRT_BACKEND_NCCL;
  else if (backend == "nccl")
    die("--backend nccl needs a program compiled with --target cuda");
  else
    die("--backend must be local, mpi, tcp or nccl, got '" + backend + "'");
  bool joins = backend == "tcp" || backend == "nccl";
  if (!options.rendezvous.empty() && !joins)
    die("--rendezvous is for the tcp and nccl backends (--backend " + backend +
        " does not meet over sockets)");
  if (!options.rank.empty() && !joins)
    die("--rank is for the tcp and nccl backends (--backend " + backend +
        " numbers its ranks itself)");
  if (!options.rendezvous.empty())
    launch.rendezvous = options.rendezvous.c_str();
  if (!options.rank.empty()) {
    launch.has_rank = 1;
    launch.rank =
        int(std::min<int64_t>(parseCount("--rank", options.rank), INT32_MAX));
  }
  if (options.timeoutGiven) {
    const std::string &timeout = options.timeout;
    char *end = nullptr;
    bool digits =
        !timeout.empty() &&
        (std::isdigit((unsigned char)timeout[0]) || timeout[0] == '.');
    launch.timeout_s = digits ? std::strtod(timeout.c_str(), &end) : 0;
    if (!digits || !end || *end || !(launch.timeout_s >= 0.001))
      die("--timeout must be a number of seconds of at least 0.001, got '" +
          timeout + "'");
  }
  return launch;
}

int mfrt::threadsPerRank(const Options &options, int ranksInProcess) {
  if (options.threads > 0)
    return options.threads;
  if (ranksInProcess > 1)
    return 1;
  // The cores this process may run on (taskset, mpirun's binding), not all
  // of the machine's.
  int cores = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    cores = CPU_COUNT(&set);
  if (cores < 1)
    cores = int(std::max(1u, std::thread::hardware_concurrency()));
  // Processes of one node under mpirun (Open MPI's count of them): an
  // oversubscribed run binds no process, and each would take every core.
  if (const char *local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) {
    int peers = std::atoi(local);
    if (peers > 1)
      cores = std::max(1, cores / peers);
  }
  return cores;
}

void mfrt::checkOutputPaths(const Options &options) {
  for (auto [flag, file] :
       {std::pair<const char *, const std::string *>{"--out", &options.out},
        {"--out-jsonl", &options.outJsonl},
        {"--trace-svg", &options.traceSvg},
        {"--routing-json", &options.routingJson}}) {
    if (file->empty())
      continue;
    std::string dir = file->find('/') == std::string::npos
                          ? std::string(".")
                          : file->substr(0, file->rfind('/') + 1);
    if (access(dir.c_str(), W_OK) != 0)
      die(std::string(flag) + " " + *file + ": directory '" + dir +
          "' is not writable (" + std::strerror(errno) + ")");
    struct stat info;
    if (stat(file->c_str(), &info) == 0 && S_ISDIR(info.st_mode))
      die(std::string(flag) + " " + *file + ": is a directory");
  }
}

void mfrt::configureTrace(const Options &options, const Program &prog) {
  TraceConfig &trace = traceConfig();
  const std::string &token = options.traceToken;
  std::string error;
  if (!token.empty()) {
    if (!parseTraceToken(token, trace.request, trace.position, &error))
      die(error);
    if (trace.request >= int64_t(prog.requests.size()))
      die("--trace-token " + token + ": there are " +
          std::to_string(prog.requests.size()) + " requests (0.." +
          std::to_string(prog.requests.size() - 1) + ")");
    int64_t len = int64_t(prog.requests[size_t(trace.request)].size());
    // With --max-new-tokens N, the decode steps compute positions T ..
    // T+N-2 (the last generated token's K/V is never needed).
    int64_t steps = std::max<int64_t>(0, prog.generation.maxNewTokens - 1);
    if (trace.position >= len + steps)
      die("--trace-token " + token + ": request " +
          std::to_string(trace.request) + " has " + std::to_string(len) +
          " tokens (positions 0.." + std::to_string(len - 1) + ")" +
          (steps > 0 ? " and decode steps at positions " + std::to_string(len) +
                           ".." + std::to_string(len + steps - 1)
                     : std::string()));
    trace.traceToken = true;
    trace.svgPath = options.traceSvg;
    mfrt_trace_enable(1);
  } else if (!options.traceSvg.empty()) {
    die("--trace-svg needs --trace-token REQUEST:POSITION");
  }
  if (!options.forceRouting.empty())
    configureRouting(options.forceRouting, prog, trace);
}

std::string mfrt::reportPlanText(const Options &options, const Program &prog,
                                 const std::string &plan) {
  // The report's link speeds: the plan's, or --nvlink-gbps / --ib-gbps.
  std::string reportPlan = plan;
  for (auto [flag, key, text] :
       {std::tuple<const char *, const char *, const std::string *>{
            "--nvlink-gbps", "nvlink_gbps", &options.nvlinkGBps},
        {"--ib-gbps", "ib_gbps", &options.ibGBps}}) {
    if (text->empty())
      continue;
    char *end = nullptr;
    double v = std::strtod(text->c_str(), &end);
    if (!end || *end || !(v > 0) || !std::isfinite(v))
      die(std::string(flag) + " must be a positive number of GB/s, got '" +
          *text + "'");
    if (!prog.reportTraffic)
      die(std::string(flag) + " sets the link speed of --report traffic");
    reportPlan += std::string(" ") + key + "=" + *text;
  }
  std::string error;
  if (reportPlan != plan && !meshfold::layoutFromPlanText(reportPlan, &error))
    die("--nvlink-gbps / --ib-gbps: " + error);
  return reportPlan;
}
