//===- meshfold-reference.cpp - Plain reference MoE prefill ---------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// A plain, independent reference implementation of the prefill forward pass
// of HF MixtralForCausalLM, Qwen3MoeForCausalLM (whose q and k are
// RMS-normalised per head before RoPE), OlmoeForCausalLM (whose q and k
// projections are RMS-normalised whole), Qwen2MoeForCausalLM (biased q/k/v
// projections, a gated shared expert beside the routed ones) and
// DeepseekV3ForCausalLM (multi-head latent attention, YaRN, group-limited
// sigmoid routing), used as the test oracle for the compiler. It shares no
// code with the compiler: loops over std::vector<float> with double
// accumulation, one request at a time, no partitioning.
//
// This file holds the options and the driving; the model is in the files
// Reference.h lists.
//
// Outputs (F32 safetensors), for each request r in prompt order:
//   req{r}.logits            [V]              logits of the last position
//   req{r}.layers.{i}.k      [T, n_kv, d_h]   keys after RoPE
//   req{r}.layers.{i}.v      [T, n_kv, d_h]   values
//
//===----------------------------------------------------------------------===//

#include "Reference.h"

#include "meshfold/Version.h"
#include "mfrt/io/Checkpoint.h"
#include "mfrt/io/Prompts.h"
#include "mfrt/io/Safetensors.h"
#include "mfrt/tokenizer/PromptSource.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

using namespace llvm;
using namespace meshfold::reference;

static cl::OptionCategory category("meshfold-reference options");

static cl::opt<std::string> configPath("config", cl::Required,
                                       cl::desc("HF config.json of the model"),
                                       cl::value_desc("path"),
                                       cl::cat(category));
static cl::opt<std::string> weightsPath(
    "weights", cl::Required,
    cl::desc("Weights: a safetensors file, a model.safetensors.index.json "
             "with its shards, or a checkpoint folder (the architecture's HF "
             "names, "
             "F32, BF16 or F16)"),
    cl::value_desc("path"), cl::cat(category));
static cl::opt<std::string>
    promptsPath("prompts", cl::desc("Prompts: token ids, one request per line"),
                cl::value_desc("path"), cl::cat(category));
static cl::opt<std::string> promptsTextPath(
    "prompts-text",
    cl::desc("Prompts as text, one per line (escapes \\n \\t \\r "
             "\\\\), tokenized with the checkpoint's tokenizer"),
    cl::value_desc("path"), cl::cat(category));
static cl::opt<std::string>
    promptsJsonlPath("prompts-jsonl",
                     cl::desc("Prompts as JSON lines: {\"prompt\": text} or "
                              "{\"prompt_token_ids\": [ids]}"),
                     cl::value_desc("path"), cl::cat(category));
static cl::opt<std::string> tokenizerPath(
    "tokenizer",
    cl::desc("tokenizer.json, tokenizer.model or a folder holding one "
             "(default: the one beside --weights)"),
    cl::value_desc("path"), cl::cat(category));
static cl::opt<std::string>
    outPath("out", cl::Required,
            cl::desc("Output safetensors: req{r}.logits [V], "
                     "req{r}.layers.{i}.k / .v [T, n_kv, d_h] (F32)"),
            cl::value_desc("path"), cl::cat(category));
static cl::opt<int>
    numLayersOpt("num-layers",
                 cl::desc("Run only the first N layers (default: all)"),
                 cl::value_desc("N"), cl::init(-1), cl::cat(category));

static cl::opt<bool> promptLogprobsOpt(
    "prompt-logprobs",
    cl::desc("Also write req{r}.prompt_logits [T, V]: the logits of every "
             "prompt position"),
    cl::cat(category));

static cl::opt<int64_t> maxNewTokensOpt(
    "max-new-tokens",
    cl::desc("After prefill, generate up to N tokens per request by dense "
             "recomputation (the whole sequence each step); writes "
             "req{r}.tokens [n] (I32)"),
    cl::value_desc("N"), cl::init(0), cl::cat(category));
static cl::opt<double>
    temperatureOpt("temperature",
                   cl::desc("Sampling temperature (default 0: greedy)"),
                   cl::init(0.0), cl::cat(category));
static cl::opt<int64_t>
    topKOpt("top-k", cl::desc("Sample among the K most likely (0: all)"),
            cl::init(0), cl::cat(category));
static cl::opt<double>
    topPOpt("top-p",
            cl::desc("Sample among the most likely tokens whose probabilities "
                     "sum to P (0 < P <= 1)"),
            cl::init(1.0), cl::cat(category));
static cl::opt<uint64_t> seedOpt("seed", cl::desc("Sampling seed"), cl::init(0),
                                 cl::cat(category));
static cl::opt<bool>
    ignoreEosOpt("ignore-eos",
                 cl::desc("Generate N tokens even past eos_token_id"),
                 cl::cat(category));
static cl::opt<bool> stepLogitsOpt(
    "step-logits",
    cl::desc("Also write req{r}.step_logits [n, V]: the logits that chose "
             "each generated token"),
    cl::cat(category));

/// The generation options, checked.
static bool readSampling(Sampling &sampling, Failure &failure) {
  if (maxNewTokensOpt < 0)
    return fail(failure, "--max-new-tokens must be at least 0, got " +
                             std::to_string(maxNewTokensOpt));
  if (!(temperatureOpt >= 0) || !std::isfinite(temperatureOpt))
    return fail(failure, "--temperature must be at least 0");
  if (topKOpt < 0)
    return fail(failure, "--top-k must be at least 0");
  if (!(topPOpt > 0 && topPOpt <= 1))
    return fail(failure, "--top-p must be in (0, 1]");
  sampling.maxNewTokens = maxNewTokensOpt;
  sampling.temperature = temperatureOpt;
  sampling.topK = topKOpt;
  sampling.topP = topPOpt;
  sampling.seed = seedOpt;
  sampling.ignoreEos = ignoreEosOpt;
  sampling.stepLogits = stepLogitsOpt;
  return true;
}

namespace {
/// What the output file holds besides the requests' final state: the
/// logits of prefill (generation re-runs the requests on longer sequences)
/// and the generated tokens.
struct Results {
  std::vector<std::vector<float>> prefillLogits, promptLogits;
  std::vector<Generated> generated;
};
} // namespace

/// Writes \p requests' outputs to --out.
static bool writeOutputs(const Config &config,
                         const std::vector<std::vector<int64_t>> &prompts,
                         const std::vector<Request> &requests,
                         const Results &results, Failure &failure) {
  mfrt::SafetensorsWriter writer;
  writer.setMetadata("producer", "meshfold-reference");
  writer.setMetadata("num_layers", std::to_string(config.numLayers));
  for (size_t r = 0; r < requests.size(); ++r) {
    std::string prefix = "req" + std::to_string(r) + ".";
    const Request &req = requests[r];
    for (float l : req.logits)
      if (!std::isfinite(l))
        return fail(failure,
                    "request " + std::to_string(r) + " has non-finite logits");
    writer.addF32(prefix + "logits", {config.vocab}, results.prefillLogits[r]);
    if (maxNewTokensOpt > 0) {
      const Generated &g = results.generated[r];
      int64_t n = static_cast<int64_t>(g.ids.size());
      writer.add(prefix + "tokens", mfrt::DType::I32, {n}, g.ids.data());
      if (stepLogitsOpt)
        writer.addF32(prefix + "step_logits", {n, config.vocab}, g.stepLogits);
    }
    if (promptLogprobsOpt)
      writer.addF32(prefix + "prompt_logits",
                    {static_cast<int64_t>(prompts[r].size()), config.vocab},
                    results.promptLogits[r]);
    std::vector<int64_t> kvShape = {static_cast<int64_t>(req.tokens.size()),
                                    config.numKVHeads, config.headDim};
    for (int64_t i = 0; i < config.numLayers; ++i) {
      std::string layer = prefix + "layers." + std::to_string(i) + ".";
      writer.addF32(layer + "k", kvShape, req.keys[i]);
      writer.addF32(layer + "v", kvShape, req.values[i]);
    }
  }
  std::string error;
  if (!writer.write(outPath, &error))
    return fail(failure, error);
  return true;
}

/// The prompts of --prompts, --prompts-text or --prompts-jsonl.
static bool readPromptFiles(const Config &config,
                            std::vector<std::vector<int64_t>> &prompts,
                            Failure &failure) {
  mfrt::PromptFiles files;
  files.ids = promptsPath;
  files.text = promptsTextPath;
  files.jsonl = promptsJsonlPath;
  files.tokenizer = tokenizerPath;
  files.weights = weightsPath;
  mfrt::Prompts read;
  std::string error;
  if (!mfrt::readPrompts(files, config.vocab, read, &error))
    return fail(failure, error);
  prompts = std::move(read.tokens);
  return true;
}

static bool run(Failure &failure) {
  Config config;
  if (!readConfig(configPath, numLayersOpt, config, failure))
    return false;
  std::string error;
  std::unique_ptr<mfrt::Checkpoint> file =
      mfrt::Checkpoint::open(weightsPath, &error);
  if (!file)
    return fail(failure, error);
  std::vector<std::vector<int64_t>> prompts;
  Sampling sampling;
  if (!readPromptFiles(config, prompts, failure) ||
      !readSampling(sampling, failure))
    return false;

  std::vector<Request> requests(prompts.size());
  for (size_t r = 0; r < prompts.size(); ++r)
    requests[r].tokens = prompts[r];
  if (!runModel(config, *file, requests, promptLogprobsOpt, failure))
    return false;
  Results results;
  for (const Request &r : requests) {
    results.prefillLogits.push_back(r.logits);
    results.promptLogits.push_back(r.promptLogits);
  }
  if (sampling.maxNewTokens > 0 &&
      !generate(config, *file, prompts, sampling, requests, results.generated,
                failure))
    return false;
  return writeOutputs(config, prompts, requests, results, failure);
}

int main(int argc, char **argv) {
  InitLLVM initLLVM(argc, argv);
  meshfold::setVersionPrinter();
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "meshfold reference MoE prefill\n\n"
      "  A plain CPU implementation of HF MixtralForCausalLM,\n"
      "  Qwen3MoeForCausalLM, OlmoeForCausalLM and Qwen2MoeForCausalLM\n"
      "  prefill (f32\n"
      "  weights or BF16 converted to f32, double accumulation), used as the\n"
      "  oracle for compiled programs. Writes, for each request r:\n"
      "  req{r}.logits [V] (last position) and req{r}.layers.{i}.k / .v\n"
      "  [T, n_kv, d_h] (K after RoPE), all F32. With --max-new-tokens N,\n"
      "  also req{r}.tokens [n] (I32, n <= N, greedy or sampled by the\n"
      "  program's rule) and K/V of [T + n - 1] positions.\n");
  Failure failure;
  if (!run(failure)) {
    errs() << "meshfold-reference: error: " << failure.message << "\n";
    return 1;
  }
  return 0;
}
