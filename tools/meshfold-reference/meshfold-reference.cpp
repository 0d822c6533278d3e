//===- meshfold-reference.cpp - Plain reference MoE prefill ---------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// A plain, independent reference implementation of the prefill forward pass
// of HF MixtralForCausalLM, Qwen3MoeForCausalLM (whose q and k are
// RMS-normalised per head before RoPE), OlmoeForCausalLM (whose q and k
// projections are RMS-normalised whole) and Qwen2MoeForCausalLM (biased q/k/v
// projections, a gated shared expert beside the routed ones), used as the test
// oracle for the compiler. It shares no code with the compiler: loops over
// std::vector<float> with double accumulation, one request at a time, no
// partitioning.
//
// Outputs (F32 safetensors), for each request r in prompt order:
//   req{r}.logits            [V]              logits of the last position
//   req{r}.layers.{i}.k      [T, n_kv, d_h]   keys after RoPE
//   req{r}.layers.{i}.v      [T, n_kv, d_h]   values
//
//===----------------------------------------------------------------------===//

#include "mfrt/io/Checkpoint.h"
#include "mfrt/io/Prompts.h"
#include "mfrt/io/Safetensors.h"
#include "mfrt/tokenizer/PromptSource.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace llvm;

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

/// rope_theta when config.json does not give one (HF MixtralConfig).
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

static constexpr double defaultRopeTheta = 1e6; // MixtralConfig default
/// rms_norm_eps when config.json does not give one (HF MixtralConfig).
static constexpr double defaultRmsNormEps = 1e-5;

namespace {

/// Model hyper-parameters read from config.json.
struct Config {
  int64_t hidden = 0;     ///< d
  int64_t expertFfn = 0;  ///< expert intermediate size
  int64_t numLayers = 0;  ///< layers to run (after --num-layers)
  int64_t numHeads = 0;   ///< n_h
  int64_t numKVHeads = 0; ///< n_kv
  int64_t headDim = 0;    ///< d_h
  int64_t numExperts = 0; ///< experts per layer
  int64_t topK = 0;       ///< experts per token
  int64_t vocab = 0;      ///< V
  double rmsNormEps = defaultRmsNormEps;
  double ropeTheta = defaultRopeTheta;
  bool normTopKProb = true;
  bool tieWordEmbeddings = false;
  /// Qwen3-MoE: q and k RMS-normalised per head (self_attn.q_norm/k_norm)
  /// before RoPE.
  bool qkNorm = false;
  /// OLMoE: q and k RMS-normalised over the whole projection (all heads)
  /// before the head split.
  bool qkProjectionNorm = false;
  /// OLMoE's clip_qkv: q and k (after their norms) and v clamped to
  /// [-clipQKV, clipQKV]; 0: none.
  double clipQKV = 0;
  /// Qwen2-MoE: biases on the q, k and v projections.
  bool qkvBias = false;
  /// Qwen2-MoE: the shared expert's width (0: none); it sees every token,
  /// scaled by sigmoid(shared_expert_gate . x).
  int64_t sharedFfn = 0;
  /// Qwen2-MoE and Qwen3-MoE: layer i is dense (one SwiGLU MLP of
  /// denseFfn at mlp.{gate,up,down}_proj, no router) when it is in
  /// mlp_only_layers or (i + 1) is not a multiple of decoder_sparse_step.
  std::vector<int64_t> mlpOnlyLayers;
  int64_t sparseStep = 1, denseFfn = 0;
  /// DeepSeek-V3: layers before first_k_dense_replace are dense.
  int64_t firstDense = 0;
  bool dense(int64_t layer) const {
    return layer < firstDense ||
           std::find(mlpOnlyLayers.begin(), mlpOnlyLayers.end(), layer) !=
               mlpOnlyLayers.end() ||
           (layer + 1) % sparseStep != 0;
  }
  /// DeepSeek-V3's multi-head latent attention, computed here per head as
  /// transformers writes it: q from q_a_proj / q_a_layernorm / q_b_proj (or
  /// q_proj when qLoraRank is 0), [q_nope, q_rope] per head; K and V per
  /// head from kv_b_proj of the normalised latent, the RoPE key shared.
  /// The cache outputs are the latent and the RoPE key, [T, 1, r + rope].
  bool mla = false;
  int64_t qLoraRank = 0, kvLoraRank = 0, qkNope = 0, qkRope = 0, vHead = 0;
  bool ropeInterleave = false;
  /// DeepSeek-V3's YaRN (rope_scaling type "yarn"), as transformers applies
  /// it: each frequency mixes theta^(-2j/d) and that over `yarnFactor` by a
  /// ramp over the dims from `yarnLow` to `yarnHigh`; cos and sin times
  /// `yarnCosScale`; the softmax scale times `yarnSoftmaxScale`.
  double yarnFactor = 1.0, yarnLow = 0, yarnHigh = 0, yarnCosScale = 1.0,
         yarnSoftmaxScale = 1.0;
  /// DeepSeek-V3's routing: sigmoid scores, e_score_correction_bias for
  /// the choice only, n_group groups of which topk_group are kept, the
  /// weights times routed_scaling_factor.
  bool sigmoidRouting = false;
  int64_t nGroup = 1, topkGroup = 1;
  double routedScaling = 1.0;
  /// The shared expert's block name and whether a sigmoid gate scales it
  /// (Qwen2-MoE's shared_expert is gated, DeepSeek-V3's shared_experts not).
  std::string sharedBlock = "shared_expert";
  bool sharedGated = true;
  /// Names under model.layers.N.: the MoE block and the experts' gate,
  /// down and up projections.
  std::string moeBlock = "block_sparse_moe";
  const char *expertGate = "w1", *expertDown = "w2", *expertUp = "w3";
  std::optional<int64_t> slidingWindow;
  /// End-of-sequence ids: generation_config.json's eos_token_id beside
  /// config.json when it has one, else config.json's (an id or a list).
  std::vector<int64_t> eosTokens;
};

/// The error sink: every failure is one line.
struct Failure {
  std::string message;
};

bool fail(Failure &f, const std::string &message) {
  f.message = message;
  return false;
}

//===----------------------------------------------------------------------===//
// config.json
//===----------------------------------------------------------------------===//

class ConfigReader {
public:
  ConfigReader(const std::string &path, const json::Object &object,
               Failure &failure)
      : path(path), object(object), failure(failure) {}

  /// Reads an integer field; a missing or null field leaves \p out unset.
  bool optionalInt(StringRef key, std::optional<int64_t> &out) {
    const json::Value *value = object.get(key);
    if (!value || value->getAsNull())
      return true;
    std::optional<int64_t> i = value->getAsInteger();
    if (!i)
      return fail(failure,
                  path + ": field '" + key.str() + "' is not an integer");
    out = *i;
    return true;
  }

  /// Reads a required positive integer field.
  bool requiredPositive(StringRef key, int64_t &out) {
    std::optional<int64_t> value;
    if (!optionalInt(key, value))
      return false;
    if (!value)
      return fail(failure, path + ": missing field '" + key.str() + "'");
    return positive(key, *value, out);
  }

  bool positive(StringRef key, int64_t value, int64_t &out) {
    if (value <= 0)
      return fail(failure, path + ": field '" + key.str() + "' is " +
                               std::to_string(value) + ", must be positive");
    out = value;
    return true;
  }

  bool optionalNumber(StringRef key, double &out) {
    const json::Value *value = object.get(key);
    if (!value || value->getAsNull())
      return true;
    std::optional<double> d = value->getAsNumber();
    if (!d)
      return fail(failure,
                  path + ": field '" + key.str() + "' is not a number");
    out = *d;
    return true;
  }

  bool optionalBool(StringRef key, bool &out) {
    const json::Value *value = object.get(key);
    if (!value || value->getAsNull())
      return true;
    std::optional<bool> b = value->getAsBoolean();
    if (!b)
      return fail(failure,
                  path + ": field '" + key.str() + "' is not a boolean");
    out = *b;
    return true;
  }

  bool isPresent(StringRef key) {
    const json::Value *value = object.get(key);
    return value && !value->getAsNull();
  }

private:
  const std::string &path;
  const json::Object &object;
  Failure &failure;
};

/// eos_token_id of `object` (read from `path`): an integer, a list of them
/// or null; false (with the failure) on anything else or an id outside the
/// vocabulary.
bool readEosField(const std::string &path, const json::Object &object,
                  const Config &config, std::vector<int64_t> &out,
                  bool &present, Failure &failure) {
  const json::Value *v = object.get("eos_token_id");
  present = v && !v->getAsNull();
  if (!present)
    return true;
  std::vector<const json::Value *> items;
  if (const json::Array *list = v->getAsArray())
    for (const json::Value &item : *list)
      items.push_back(&item);
  else
    items.push_back(v);
  out.clear();
  for (const json::Value *item : items) {
    std::optional<int64_t> id = item->getAsInteger();
    if (!id)
      return fail(failure, path + ": field 'eos_token_id' must be a token id "
                                  "or a list of them");
    if (*id < 0 || *id >= config.vocab)
      return fail(failure,
                  path + ": field 'eos_token_id': " + std::to_string(*id) +
                      " is outside the vocabulary (" +
                      std::to_string(config.vocab) + " tokens)");
    out.push_back(*id);
  }
  return true;
}

bool readEosTokens(const std::string &path, const json::Object &object,
                   Config &config, Failure &failure) {
  bool present = false;
  if (!readEosField(path, object, config, config.eosTokens, present, failure))
    return false;
  std::string dir = path.substr(0, path.find_last_of('/') + 1);
  std::string genPath = dir + "generation_config.json";
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer =
      MemoryBuffer::getFile(genPath, /*IsText=*/true);
  if (!buffer)
    return true;
  Expected<json::Value> parsed = json::parse((*buffer)->getBuffer());
  if (!parsed)
    return fail(failure,
                genPath + ": invalid JSON: " + toString(parsed.takeError()));
  const json::Object *gen = parsed->getAsObject();
  if (!gen)
    return fail(failure, genPath + ": not a JSON object");
  std::vector<int64_t> ids;
  if (!readEosField(genPath, *gen, config, ids, present, failure))
    return false;
  if (present)
    config.eosTokens = std::move(ids);
  return true;
}

/// YaRN's parameters, turned into the ramp and scales as transformers'
/// _compute_yarn_parameters and yarn_apply_mscale do (read after
/// qk_rope_head_dim and rope_theta).
bool readYaRN(const json::Object &yarn, const std::string &path,
              std::optional<int64_t> maxPositions, Config &config,
              Failure &failure) {
  std::optional<StringRef> type = yarn.getString("type");
  if (!type)
    type = yarn.getString("rope_type");
  if (type != "yarn")
    return fail(failure, path + ": only YaRN RoPE scaling is supported");
  auto number = [&](StringRef key, double def) {
    std::optional<double> v = yarn.getNumber(key);
    return v ? *v : def;
  };
  double original = number("original_max_position_embeddings",
                           maxPositions ? double(*maxPositions) : 0.0);
  if (!(original > 0))
    return fail(failure, path + ": YaRN needs "
                                "original_max_position_embeddings");
  double factor = number("factor", 0.0);
  if (!(factor > 0))
    factor = (maxPositions ? double(*maxPositions) : 0.0) / original;
  double mscale = number("mscale", 0.0),
         mscaleAll = number("mscale_all_dim", 0.0);
  double betaFast = number("beta_fast", 32.0),
         betaSlow = number("beta_slow", 1.0);
  if (!(factor > 0) || !(betaFast > 0) || !(betaSlow > 0))
    return fail(failure, path + ": YaRN's factor, beta_fast and beta_slow "
                                "must be positive");
  // 0.1 m ln(s) + 1 for s > 1 (YaRN's Eq. 21).
  auto yarnMscale = [](double s, double m) {
    return s <= 1.0 ? 1.0 : 0.1 * m * std::log(s) + 1.0;
  };
  double cosScale = number("attention_factor", 0.0);
  if (!(cosScale > 0))
    cosScale = (mscale != 0 && mscaleAll != 0)
                   ? yarnMscale(factor, mscale) / yarnMscale(factor, mscaleAll)
                   : yarnMscale(factor, 1.0);
  // Dims whose wavelength fits betaFast (betaSlow) turns in the original
  // context: below the first, frequencies are kept; past the second, divided.
  double d = static_cast<double>(config.qkRope);
  auto dimFor = [&](double turns) {
    return d * std::log(original / (turns * 2.0 * M_PI)) /
           (2.0 * std::log(config.ropeTheta));
  };
  double lo = dimFor(betaFast), hi = dimFor(betaSlow);
  if (yarn.getBoolean("truncate").value_or(true)) {
    lo = std::floor(lo);
    hi = std::ceil(hi);
  }
  lo = std::max(lo, 0.0);
  hi = std::min(hi, d - 1.0);
  if (lo == hi)
    hi += 0.001;
  config.yarnFactor = factor;
  config.yarnLow = lo;
  config.yarnHigh = hi;
  config.yarnCosScale = cosScale;
  if (mscaleAll != 0)
    config.yarnSoftmaxScale =
        yarnMscale(factor, mscaleAll) * yarnMscale(factor, mscaleAll);
  return true;
}

/// DeepSeek-V3's fields: MLA's dims, its routing, shared experts and dense
/// first layers; what transformers' DeepseekV3 does not implement is refused.
bool readDeepSeek(ConfigReader &reader, const json::Object &object,
                  const std::string &path, int64_t numHiddenLayers,
                  Config &config, Failure &failure) {
  config.mla = true;
  if (!object.get("q_lora_rank"))
    return fail(failure, path + ": missing field 'q_lora_rank' (null for a "
                                "query without LoRA)");
  std::optional<int64_t> qLora;
  if (!reader.optionalInt("q_lora_rank", qLora) ||
      (qLora && !reader.positive("q_lora_rank", *qLora, config.qLoraRank)) ||
      !reader.requiredPositive("kv_lora_rank", config.kvLoraRank) ||
      !reader.requiredPositive("qk_nope_head_dim", config.qkNope) ||
      !reader.requiredPositive("qk_rope_head_dim", config.qkRope) ||
      !reader.requiredPositive("v_head_dim", config.vHead) ||
      !reader.requiredPositive("n_group", config.nGroup) ||
      !reader.requiredPositive("topk_group", config.topkGroup))
    return false;
  if (config.numKVHeads != config.numHeads)
    return fail(failure, path + ": field 'num_key_value_heads' must equal "
                                "num_attention_heads for MLA");
  if (config.qkRope % 2 != 0)
    return fail(failure, path + ": qk_rope_head_dim must be even for RoPE");
  if (!reader.isPresent("routed_scaling_factor"))
    return fail(failure, path + ": missing field 'routed_scaling_factor'");
  if (!reader.optionalNumber("routed_scaling_factor", config.routedScaling))
    return false;
  if (!(config.routedScaling > 0) || !std::isfinite(config.routedScaling))
    return fail(failure, path + ": field 'routed_scaling_factor' must be a "
                                "finite positive number");
  for (const char *key : {"first_k_dense_replace", "n_shared_experts"})
    if (!reader.isPresent(key))
      return fail(failure, path + ": missing field '" + std::string(key) + "'");
  std::optional<int64_t> firstDense, shared;
  if (!reader.optionalInt("first_k_dense_replace", firstDense) ||
      !reader.optionalInt("n_shared_experts", shared))
    return false;
  if (*firstDense < 0 || *shared < 0)
    return fail(failure, path + ": fields 'first_k_dense_replace' and "
                                "'n_shared_experts' must not be negative");
  config.firstDense = std::min(*firstDense, numHiddenLayers);
  config.sharedFfn = *shared * config.expertFfn;
  config.sharedBlock = "shared_experts";
  config.sharedGated = false;
  if (config.firstDense > 0 &&
      !reader.requiredPositive("intermediate_size", config.denseFfn))
    return false;
  if (std::optional<StringRef> m = object.getString("topk_method");
      m && *m != "noaux_tc")
    return fail(failure, path + ": field 'topk_method' must be \"noaux_tc\"");
  if (std::optional<StringRef> f = object.getString("scoring_func");
      f && *f != "sigmoid")
    return fail(failure, path + ": field 'scoring_func' must be \"sigmoid\"");
  if (std::optional<int64_t> freq = object.getInteger("moe_layer_freq");
      freq && *freq != 1)
    return fail(failure, path + ": field 'moe_layer_freq' must be 1");
  if (config.numExperts % config.nGroup != 0 ||
      (config.nGroup > 1 && config.numExperts / config.nGroup < 2) ||
      config.topkGroup > config.nGroup ||
      config.topK > config.topkGroup * (config.numExperts / config.nGroup))
    return fail(failure,
                path + ": n_group " + std::to_string(config.nGroup) +
                    ", topk_group " + std::to_string(config.topkGroup) +
                    " and num_experts_per_tok " + std::to_string(config.topK) +
                    " do not fit n_routed_experts " +
                    std::to_string(config.numExperts));
  config.ropeInterleave = true;
  if (!reader.optionalBool("rope_interleave", config.ropeInterleave))
    return false;
  config.sigmoidRouting = true;
  config.headDim = config.kvLoraRank + config.qkRope;
  config.numKVHeads = 1;
  return true;
}

bool readConfig(const std::string &path, int numLayersLimit, Config &config,
                Failure &failure) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer =
      MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return fail(failure,
                path + ": cannot read: " + buffer.getError().message());
  Expected<json::Value> parsed = json::parse((*buffer)->getBuffer());
  if (!parsed)
    return fail(failure,
                path + ": invalid JSON: " + toString(parsed.takeError()));
  const json::Object *object = parsed->getAsObject();
  if (!object)
    return fail(failure, path + ": not a JSON object");

  ConfigReader reader(path, *object, failure);
  bool qwen2 = false, qwen3 = false, olmoe = false, deepseek = false;
  if (const json::Array *archs = object->getArray("architectures"))
    for (const json::Value &a : *archs)
      if (std::optional<StringRef> name = a.getAsString()) {
        deepseek |= *name == "DeepseekV3ForCausalLM";
        if (name->starts_with("Deepseek") && !deepseek)
          return fail(failure, path + ": architecture '" + name->str() +
                                   "' is not supported");
        qwen2 |= *name == "Qwen2MoeForCausalLM";
        qwen3 |= *name == "Qwen3MoeForCausalLM";
        olmoe |= *name == "OlmoeForCausalLM";
      }
  if (std::optional<StringRef> type = object->getString("model_type")) {
    qwen2 |= *type == "qwen2_moe";
    qwen3 |= *type == "qwen3_moe";
    olmoe |= *type == "olmoe";
    deepseek |= *type == "deepseek_v3";
  }
  int64_t numHiddenLayers = 0, intermediate = 0;
  if (!reader.requiredPositive("hidden_size", config.hidden) ||
      !reader.requiredPositive("num_hidden_layers", numHiddenLayers) ||
      !reader.requiredPositive("num_attention_heads", config.numHeads) ||
      !reader.requiredPositive("num_experts_per_tok", config.topK) ||
      !reader.requiredPositive("vocab_size", config.vocab))
    return false;

  // Expert FFN width: moe_intermediate_size overrides intermediate_size.
  std::optional<int64_t> moeIntermediate;
  if (!reader.optionalInt("moe_intermediate_size", moeIntermediate))
    return false;
  if (moeIntermediate) {
    if (!reader.positive("moe_intermediate_size", *moeIntermediate,
                         config.expertFfn))
      return false;
  } else if (!reader.requiredPositive("intermediate_size", intermediate)) {
    return false;
  } else {
    config.expertFfn = intermediate;
  }

  std::optional<int64_t> value;
  if (!reader.optionalInt(deepseek ? "n_routed_experts" : "num_local_experts",
                          value))
    return false;
  if (deepseek && !value)
    return fail(failure, path + ": missing field 'n_routed_experts'");
  if (value) {
    if (!reader.positive("num_local_experts", *value, config.numExperts))
      return false;
  } else {
    if (!reader.optionalInt("num_experts", value))
      return false;
    if (!value)
      return fail(failure, path + ": missing field 'num_local_experts' (or "
                                  "'num_experts')");
    if (!reader.positive("num_experts", *value, config.numExperts))
      return false;
  }

  value.reset();
  if (!reader.optionalInt("num_key_value_heads", value))
    return false;
  config.numKVHeads = config.numHeads;
  if (value &&
      !reader.positive("num_key_value_heads", *value, config.numKVHeads))
    return false;

  value.reset();
  if (!reader.optionalInt("head_dim", value))
    return false;
  if (value) {
    if (!reader.positive("head_dim", *value, config.headDim))
      return false;
  } else if (!deepseek) {
    if (config.hidden % config.numHeads != 0)
      return fail(failure, path + ": hidden_size " +
                               std::to_string(config.hidden) +
                               " is not a multiple of num_attention_heads " +
                               std::to_string(config.numHeads) +
                               " and head_dim is not given");
    config.headDim = config.hidden / config.numHeads;
  }

  // Defaults that differ by architecture: Mixtral renormalises the top-k
  // weights and uses theta 1e6; Qwen2-MoE (HF Qwen2MoeConfig) uses 1e4 and
  // does not renormalise.
  // Qwen3-MoE (HF Qwen3MoeConfig) likewise, with eps 1e-6, per-head q/k
  // norms and its own weight names.
  // OLMoE (HF OlmoeConfig) too, with q/k norms over the projections.
  if (qwen2 || qwen3 || olmoe) {
    config.ropeTheta = 10000.0;
    config.normTopKProb = false;
  }
  if (qwen2) {
    std::optional<int64_t> shared;
    if (!reader.optionalInt("shared_expert_intermediate_size", shared))
      return false;
    if (!shared)
      return fail(failure, path + ": missing field "
                                  "'shared_expert_intermediate_size' "
                                  "(Qwen2-MoE's shared expert)");
    if (!reader.positive("shared_expert_intermediate_size", *shared,
                         config.sharedFfn))
      return false;
    config.qkvBias = true;
    if (!reader.optionalBool("qkv_bias", config.qkvBias))
      return false;
    if (!moeIntermediate)
      return fail(failure, path + ": missing field 'moe_intermediate_size' "
                                  "(Qwen2-MoE's experts' width)");
  } else if (reader.isPresent("shared_expert_intermediate_size") &&
             object->getInteger("shared_expert_intermediate_size") != 0) {
    return fail(failure, path + ": field 'shared_expert_intermediate_size': "
                                "shared experts are supported for "
                                "Qwen2-MoE only");
  }
  if (qwen2 || qwen3) {
    // Dense layers, as transformers' Qwen2-MoE and Qwen3-MoE pick them.
    const json::Array *only = object->getArray("mlp_only_layers");
    if (reader.isPresent("mlp_only_layers") && !only)
      return fail(failure, path + ": field 'mlp_only_layers' must list "
                                  "layer numbers below num_hidden_layers");
    if (only)
      for (const json::Value &v : *only) {
        std::optional<int64_t> i = v.getAsInteger();
        if (!i || *i < 0 || *i >= numHiddenLayers)
          return fail(failure, path + ": field 'mlp_only_layers' must list "
                                      "layer numbers below num_hidden_layers");
        config.mlpOnlyLayers.push_back(*i);
      }
    std::optional<int64_t> step;
    if (!reader.optionalInt("decoder_sparse_step", step))
      return false;
    if (step &&
        !reader.positive("decoder_sparse_step", *step, config.sparseStep))
      return false;
    bool anyDense = false;
    for (int64_t i = 0; i < numHiddenLayers; ++i)
      anyDense |= config.dense(i);
    if (anyDense &&
        !reader.requiredPositive("intermediate_size", config.denseFfn))
      return false;
  } else {
    if (std::optional<int64_t> step = object->getInteger("decoder_sparse_step");
        step && *step != 1)
      return fail(failure, path + ": field 'decoder_sparse_step' is not "
                                  "supported (dense layers)");
    if (const json::Array *only = object->getArray("mlp_only_layers");
        only && !only->empty())
      return fail(failure, path + ": field 'mlp_only_layers' is not "
                                  "supported (dense layers)");
  }
  // Latent attention and other experts' layouts.
  for (const char *key :
       {"n_shared_experts", "kv_lora_rank", "q_lora_rank", "attention_bias"})
    if (reader.isPresent(key) && object->get(key)->getAsBoolean() != false &&
        !(deepseek && StringRef(key) != "attention_bias"))
      return fail(failure, path + ": field '" + key + "' is not supported");
  if (deepseek &&
      !readDeepSeek(reader, *object, path, numHiddenLayers, config, failure))
    return false;
  if (qwen3 || olmoe || qwen2 || deepseek) {
    config.qkNorm = qwen3;
    config.qkProjectionNorm = olmoe;
    config.moeBlock = "mlp";
    config.expertGate = "gate_proj";
    config.expertDown = "down_proj";
    config.expertUp = "up_proj";
  }
  if (qwen3 || qwen2 || deepseek)
    config.rmsNormEps = 1e-6;
  if (deepseek)
    config.ropeTheta = 10000.0;
  if (reader.isPresent("clip_qkv")) {
    if (!olmoe)
      return fail(failure, path + ": field 'clip_qkv' is not supported");
    if (!reader.optionalNumber("clip_qkv", config.clipQKV))
      return false;
    if (!(config.clipQKV > 0) || !std::isfinite(config.clipQKV))
      return fail(failure, path + ": field 'clip_qkv' must be a positive "
                                  "number");
  }
  if (deepseek && !moeIntermediate)
    return fail(failure, path + ": missing field 'moe_intermediate_size' "
                                "(DeepSeek-V3's experts' width)");
  if (qwen3 && !moeIntermediate)
    return fail(failure, path + ": missing field 'moe_intermediate_size' "
                                "(Qwen3-MoE's experts' width)");

  if (!reader.optionalNumber("rms_norm_eps", config.rmsNormEps) ||
      !reader.optionalNumber("rope_theta", config.ropeTheta) ||
      !reader.optionalBool("norm_topk_prob", config.normTopKProb) ||
      !reader.optionalBool("tie_word_embeddings", config.tieWordEmbeddings))
    return false;

  value.reset();
  if (!reader.optionalInt("sliding_window", value))
    return false;
  config.slidingWindow = value;
  // Qwen3-MoE and Qwen2-MoE apply sliding_window only with
  // use_sliding_window (refused below when set).
  if (qwen3 || qwen2)
    config.slidingWindow.reset();

  if (reader.isPresent("rope_scaling") && !deepseek)
    return fail(failure, path + ": field 'rope_scaling' is not supported");
  const json::Object *yarn =
      deepseek ? object->getObject("rope_scaling") : nullptr;
  if (const json::Object *params = object->getObject("rope_parameters");
      deepseek && params && params->getString("rope_type") == "yarn")
    yarn = params;
  if (yarn) {
    if (std::optional<double> theta = yarn->getNumber("rope_theta"))
      config.ropeTheta = *theta;
    if (!readYaRN(*yarn, path, object->getInteger("max_position_embeddings"),
                  config, failure))
      return false;
  } else if (const json::Value *rope = object->get("rope_parameters");
             rope && !rope->getAsNull()) {
    // transformers 5's form: {"rope_theta": ..., "rope_type": "default"}.
    const json::Object *params = rope->getAsObject();
    if (!params)
      return fail(failure, path + ": field 'rope_parameters' is not an object");
    for (const auto &[key, value] : *params) {
      if (key == "rope_theta") {
        std::optional<double> theta = value.getAsNumber();
        if (!theta)
          return fail(failure, path + ": field 'rope_parameters.rope_theta' "
                                      "is not a number");
        config.ropeTheta = *theta;
      } else if (key != "rope_type" || value.getAsString() != "default") {
        return fail(failure, path + ": field 'rope_parameters." + key.str() +
                                 "': only default RoPE is supported");
      }
    }
  }
  if (reader.isPresent("use_sliding_window") &&
      object->getBoolean("use_sliding_window") != false)
    return fail(failure,
                path + ": field 'use_sliding_window' is not supported");
  if (const json::Value *act = object->get("hidden_act");
      act && act->kind() != json::Value::Null) {
    std::optional<StringRef> name = act->getAsString();
    if (!name || *name != "silu")
      return fail(failure, path + ": field 'hidden_act' must be \"silu\"");
  }
  // fp8 e4m3 weights in 128 x 128 blocks are a storage format (Weights
  // dequantizes them); any other quantization is refused.
  if (const json::Object *quant = object->getObject("quantization_config");
      quant && !quant->empty()) {
    const json::Array *block = quant->getArray("weight_block_size");
    bool blocks128 = block && block->size() == 2 &&
                     (*block)[0].getAsInteger() == 128 &&
                     (*block)[1].getAsInteger() == 128;
    bool fp8 = quant->getString("quant_method") == StringRef("fp8");
    for (const auto &[key, value] : *quant) {
      if (key == "fmt")
        fp8 = fp8 && value.getAsString() == StringRef("e4m3");
      else if (key == "activation_scheme")
        fp8 = fp8 && value.getAsString() == StringRef("dynamic");
      else if (key == "modules_to_not_convert")
        fp8 = fp8 && (value.getAsArray() || value.kind() == json::Value::Null);
      else if (key != "quant_method" && key != "weight_block_size")
        fp8 = false;
    }
    if (!fp8 || !blocks128)
      return fail(failure, path + ": field 'quantization_config': only fp8 "
                                  "(e4m3) weights in 128 x 128 blocks are "
                                  "supported");
  }

  if (config.rmsNormEps < 0 || !std::isfinite(config.rmsNormEps))
    return fail(failure, path + ": field 'rms_norm_eps' must be a finite "
                                "non-negative number");
  if (!(config.ropeTheta > 0) || !std::isfinite(config.ropeTheta))
    return fail(failure,
                path + ": field 'rope_theta' must be a finite positive number");
  if (config.headDim % 2 != 0 && !config.mla)
    return fail(failure, path + ": head_dim " + std::to_string(config.headDim) +
                             " must be even for rotate-half RoPE");
  if (config.numHeads % config.numKVHeads != 0)
    return fail(failure, path + ": num_attention_heads " +
                             std::to_string(config.numHeads) +
                             " is not a multiple of num_key_value_heads " +
                             std::to_string(config.numKVHeads));
  if (config.topK > config.numExperts)
    return fail(failure, path + ": num_experts_per_tok " +
                             std::to_string(config.topK) +
                             " exceeds the number of experts " +
                             std::to_string(config.numExperts));

  config.numLayers = numHiddenLayers;
  if (numLayersLimit >= 0) {
    if (numLayersLimit > numHiddenLayers)
      return fail(failure, "--num-layers " + std::to_string(numLayersLimit) +
                               " exceeds num_hidden_layers " +
                               std::to_string(numHiddenLayers) + " in " + path);
    config.numLayers = numLayersLimit;
  } else if (numLayersLimit != -1) {
    return fail(failure, "--num-layers must not be negative");
  }
  return readEosTokens(path, *object, config, failure);
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

/// fp8 e4m3 ("e4m3fn") by its definition: (-1)^s 2^(e-7) (1 + m/8), or
/// m 2^-9 when e = 0; S.1111.111 is NaN.
float decodeE4M3(uint8_t code) {
  int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7)
    return std::numeric_limits<float>::quiet_NaN();
  double magnitude =
      e == 0 ? std::ldexp(double(m), -9) : std::ldexp(8.0 + m, e - 10);
  return static_cast<float>((code & 0x80) ? -magnitude : magnitude);
}

/// Checks and loads weights by name, converting to f32. An fp8 (F8_E4M3)
/// matrix is dequantized with its `<name>_scale_inv`: one scale per
/// 128 x 128 block, which multiplies the block's values.
class Weights {
public:
  Weights(const mfrt::Checkpoint &file, Failure &failure)
      : file(file), failure(failure) {}

  /// Checks that \p name exists, is a float tensor (or an fp8 matrix with
  /// its scales) and has \p shape.
  bool check(const std::string &name, const std::vector<int64_t> &shape) {
    const mfrt::TensorInfo *tensor = file.find(name);
    if (!tensor)
      return fail(failure,
                  file.fileOf(name) + ": tensor '" + name + "' is missing");
    if (tensor->dtype != mfrt::DType::F32 &&
        tensor->dtype != mfrt::DType::BF16 &&
        tensor->dtype != mfrt::DType::F16 &&
        tensor->dtype != mfrt::DType::F8_E4M3)
      return fail(failure, file.fileOf(name) + ": tensor '" + name +
                               "' has dtype " + mfrt::dtypeName(tensor->dtype) +
                               ", expected F32, BF16, F16 or F8_E4M3");
    if (tensor->shape != shape)
      return fail(failure,
                  file.fileOf(name) + ": tensor '" + name + "' has shape " +
                      mfrt::formatShape(tensor->shape) + ", expected " +
                      mfrt::formatShape(shape) + " from the config");
    if (tensor->dtype != mfrt::DType::F8_E4M3)
      return true;
    if (shape.size() != 2)
      return fail(failure, file.fileOf(name) + ": tensor '" + name +
                               "' is F8_E4M3 but not a matrix");
    const std::string scaleName = name + "_scale_inv";
    const mfrt::TensorInfo *scales = file.find(scaleName);
    std::vector<int64_t> scaleShape = {(shape[0] + 127) / 128,
                                       (shape[1] + 127) / 128};
    if (!scales)
      return fail(failure, file.fileOf(name) + ": tensor '" + name +
                               "' is F8_E4M3 but '" + scaleName +
                               "' is missing");
    if (scales->dtype != mfrt::DType::F32 &&
        scales->dtype != mfrt::DType::BF16 && scales->dtype != mfrt::DType::F16)
      return fail(failure, file.fileOf(scaleName) + ": tensor '" + scaleName +
                               "' has dtype " + mfrt::dtypeName(scales->dtype) +
                               ", expected F32, BF16 or F16");
    if (scales->shape != scaleShape)
      return fail(failure, file.fileOf(scaleName) + ": tensor '" + scaleName +
                               "' has shape " +
                               mfrt::formatShape(scales->shape) +
                               ", expected " + mfrt::formatShape(scaleShape) +
                               " (128 x 128 blocks)");
    return true;
  }

  /// Loads the whole tensor (already checked) as f32.
  bool load(const std::string &name, std::vector<float> &out) {
    const mfrt::TensorInfo *tensor = file.find(name);
    if (!tensor)
      return fail(failure,
                  file.fileOf(name) + ": tensor '" + name + "' is missing");
    out.assign(static_cast<size_t>(tensor->numElements()), 0.0f);
    if (tensor->dtype == mfrt::DType::F8_E4M3)
      return loadF8(*tensor, 0, tensor->shape[0], out.data());
    std::string error;
    if (!mfrt::readAsF32(*tensor, out.data(), out.size(), &error))
      return fail(failure, file.fileOf(name) + ": " + error);
    return true;
  }

  /// Loads row \p row of the 2-D tensor \p name (already checked) as f32.
  bool loadRow(const std::string &name, int64_t row, float *out) {
    const mfrt::TensorInfo *tensor = file.find(name);
    if (!tensor || tensor->shape.size() != 2)
      return fail(failure, file.fileOf(name) + ": tensor '" + name +
                               "' is missing or not 2-D");
    if (tensor->dtype == mfrt::DType::F8_E4M3)
      return loadF8(*tensor, row, 1, out);
    int64_t cols = tensor->shape[1];
    mfrt::TensorInfo rowInfo = *tensor;
    rowInfo.shape = {cols};
    rowInfo.data = tensor->data + static_cast<size_t>(row) *
                                      static_cast<size_t>(cols) *
                                      mfrt::dtypeSize(tensor->dtype);
    rowInfo.byteSize =
        static_cast<size_t>(cols) * mfrt::dtypeSize(tensor->dtype);
    std::string error;
    if (!mfrt::readAsF32(rowInfo, out, static_cast<size_t>(cols), &error))
      return fail(failure, file.fileOf(name) + ": " + error);
    return true;
  }

private:
  /// Dequantizes rows [first, first + rows) of the fp8 matrix \p tensor
  /// (already checked) into \p out: each value times its block's scale.
  bool loadF8(const mfrt::TensorInfo &tensor, int64_t first, int64_t rows,
              float *out) {
    std::vector<float> scales;
    if (!load(tensor.name + "_scale_inv", scales))
      return false;
    int64_t cols = tensor.shape[1], scaleCols = (cols + 127) / 128;
    for (int64_t r = first; r < first + rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        *out++ = decodeE4M3(tensor.data[r * cols + c]) *
                 scales[static_cast<size_t>((r / 128) * scaleCols + c / 128)];
    return true;
  }

  const mfrt::Checkpoint &file;
  Failure &failure;
};

std::string layerName(int64_t layer, const std::string &suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

std::string expertName(const Config &c, int64_t layer, int64_t expert,
                       const char *which) {
  return layerName(layer, c.moeBlock + ".experts." + std::to_string(expert) +
                              "." + which + ".weight");
}

std::string sharedName(const Config &c, int64_t layer, const char *which) {
  return layerName(layer,
                   c.moeBlock + "." + c.sharedBlock + "." + which + ".weight");
}

std::string attnName(int64_t layer, const char *which) {
  return layerName(layer, std::string("self_attn.") + which + ".weight");
}

const char *embedName = "model.embed_tokens.weight";
const char *normName = "model.norm.weight";
const char *lmHeadName = "lm_head.weight";

/// Checks presence, dtype and shape of every weight the forward pass reads.
bool checkWeights(const Config &c, Weights &weights) {
  int64_t d = c.hidden, qDim = c.numHeads * c.headDim,
          kvDim = c.numKVHeads * c.headDim, ffn = c.expertFfn;
  if (!weights.check(embedName, {c.vocab, d}))
    return false;
  int64_t qkDim = c.qkNope + c.qkRope, r = c.kvLoraRank;
  for (int64_t i = 0; i < c.numLayers; ++i) {
    if (c.mla) {
      // MLA's projections in place of q/k/v/o.
      bool ok =
          (c.qLoraRank > 0
               ? weights.check(attnName(i, "q_a_proj"), {c.qLoraRank, d}) &&
                     weights.check(attnName(i, "q_a_layernorm"),
                                   {c.qLoraRank}) &&
                     weights.check(attnName(i, "q_b_proj"),
                                   {c.numHeads * qkDim, c.qLoraRank})
               : weights.check(attnName(i, "q_proj"),
                               {c.numHeads * qkDim, d})) &&
          weights.check(attnName(i, "kv_a_proj_with_mqa"), {r + c.qkRope, d}) &&
          weights.check(attnName(i, "kv_a_layernorm"), {r}) &&
          weights.check(attnName(i, "kv_b_proj"),
                        {c.numHeads * (c.qkNope + c.vHead), r}) &&
          weights.check(attnName(i, "o_proj"), {d, c.numHeads * c.vHead});
      if (!ok)
        return false;
    }
    if (!weights.check(layerName(i, "input_layernorm.weight"), {d}) ||
        (!c.mla &&
         (!weights.check(layerName(i, "self_attn.q_proj.weight"), {qDim, d}) ||
          !weights.check(layerName(i, "self_attn.k_proj.weight"), {kvDim, d}) ||
          !weights.check(layerName(i, "self_attn.v_proj.weight"), {kvDim, d}) ||
          !weights.check(layerName(i, "self_attn.o_proj.weight"),
                         {d, qDim}))) ||
        !weights.check(layerName(i, "post_attention_layernorm.weight"), {d}))
      return false;
    if (c.dense(i)) {
      int64_t f = c.denseFfn;
      if (!weights.check(layerName(i, c.moeBlock + ".gate_proj.weight"),
                         {f, d}) ||
          !weights.check(layerName(i, c.moeBlock + ".up_proj.weight"),
                         {f, d}) ||
          !weights.check(layerName(i, c.moeBlock + ".down_proj.weight"),
                         {d, f}))
        return false;
    } else if (!weights.check(layerName(i, c.moeBlock + ".gate.weight"),
                              {c.numExperts, d}) ||
               (c.sigmoidRouting &&
                !weights.check(
                    layerName(i, c.moeBlock + ".gate.e_score_correction_bias"),
                    {c.numExperts}))) {
      return false;
    }
    // q/k norms: per head ([d_h]) or over the whole projection.
    if ((c.qkNorm || c.qkProjectionNorm) &&
        (!weights.check(layerName(i, "self_attn.q_norm.weight"),
                        {c.qkNorm ? c.headDim : qDim}) ||
         !weights.check(layerName(i, "self_attn.k_norm.weight"),
                        {c.qkNorm ? c.headDim : kvDim})))
      return false;
    if (c.qkvBias &&
        (!weights.check(layerName(i, "self_attn.q_proj.bias"), {qDim}) ||
         !weights.check(layerName(i, "self_attn.k_proj.bias"), {kvDim}) ||
         !weights.check(layerName(i, "self_attn.v_proj.bias"), {kvDim})))
      return false;
    if (c.sharedFfn > 0 && !c.dense(i) &&
        (!weights.check(sharedName(c, i, "gate_proj"), {c.sharedFfn, d}) ||
         !weights.check(sharedName(c, i, "up_proj"), {c.sharedFfn, d}) ||
         !weights.check(sharedName(c, i, "down_proj"), {d, c.sharedFfn}) ||
         (c.sharedGated &&
          !weights.check(
              layerName(i, c.moeBlock + ".shared_expert_gate.weight"),
              {1, d}))))
      return false;
    for (int64_t e = 0; e < (c.dense(i) ? 0 : c.numExperts); ++e)
      if (!weights.check(expertName(c, i, e, c.expertGate), {ffn, d}) ||
          !weights.check(expertName(c, i, e, c.expertDown), {d, ffn}) ||
          !weights.check(expertName(c, i, e, c.expertUp), {ffn, d}))
        return false;
  }
  return weights.check(normName, {d});
}

//===----------------------------------------------------------------------===//
// Math
//===----------------------------------------------------------------------===//

/// y[t, o] = sum_i x[t, i] * w[o, i] for t < rows (w is [out, in], the HF
/// linear layout), accumulated in double.
void linear(const float *x, int64_t rows, int64_t in, const float *w,
            int64_t out, float *y) {
  for (int64_t t = 0; t < rows; ++t) {
    const float *xRow = x + t * in;
    for (int64_t o = 0; o < out; ++o) {
      const float *wRow = w + o * in;
      double sum = 0.0;
      for (int64_t i = 0; i < in; ++i)
        sum += static_cast<double>(xRow[i]) * static_cast<double>(wRow[i]);
      y[t * out + o] = static_cast<float>(sum);
    }
  }
}

/// RMSNorm of each of \p rows rows of width \p d:
/// x / sqrt(mean(x^2) + eps) * weight.
void rmsNorm(const float *x, int64_t rows, int64_t d,
             const std::vector<float> &weight, double eps, float *y) {
  for (int64_t t = 0; t < rows; ++t) {
    const float *row = x + t * d;
    double sumSquares = 0.0;
    for (int64_t j = 0; j < d; ++j)
      sumSquares += static_cast<double>(row[j]) * row[j];
    double scale = 1.0 / std::sqrt(sumSquares / static_cast<double>(d) + eps);
    for (int64_t j = 0; j < d; ++j)
      y[t * d + j] = static_cast<float>(row[j] * scale * weight[j]);
  }
}

/// Rotate-half RoPE, in place, on x laid out [T, heads, headDim]; token t has
/// position t. As HF computes it, inv_freq and the angle position * inv_freq
/// are rounded to f32 (this matters at large positions); cos and sin are then
/// taken in double.
void applyRope(std::vector<float> &x, int64_t tokens, int64_t heads,
               int64_t headDim, double theta, const Config *yarn = nullptr) {
  int64_t half = headDim / 2;
  std::vector<float> invFreq(static_cast<size_t>(half));
  for (int64_t j = 0; j < half; ++j) {
    float exponent = static_cast<float>(2 * j) / static_cast<float>(headDim);
    float base =
        static_cast<float>(std::pow(theta, static_cast<double>(exponent)));
    invFreq[j] = 1.0f / base;
    if (yarn && yarn->yarnFactor != 1.0) {
      // YaRN: 1/base (kept) and 1/(s base) (divided), mixed by a ramp over
      // the dims, in f32 as transformers computes them.
      float divided = 1.0f / (static_cast<float>(yarn->yarnFactor) * base);
      float ramp = (static_cast<float>(j) - static_cast<float>(yarn->yarnLow)) /
                   static_cast<float>(yarn->yarnHigh - yarn->yarnLow);
      ramp = std::min(std::max(ramp, 0.0f), 1.0f);
      float kept = 1.0f - ramp;
      invFreq[j] = divided * (1.0f - kept) + invFreq[j] * kept;
    }
  }
  double cosScale = yarn ? yarn->yarnCosScale : 1.0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < half; ++j) {
      float angle = static_cast<float>(t) * invFreq[j];
      double c = std::cos(static_cast<double>(angle)) * cosScale;
      double s = std::sin(static_cast<double>(angle)) * cosScale;
      for (int64_t h = 0; h < heads; ++h) {
        float *v = &x[(t * heads + h) * headDim];
        double a = v[j], b = v[j + half];
        v[j] = static_cast<float>(a * c - b * s);
        v[j + half] = static_cast<float>(b * c + a * s);
      }
    }
  }
}

/// Causal GQA attention. q, k: [T, n_h | n_kv, d_qk]; v: [T, n_kv, d_v];
/// out: [T, n_h, d_v]; scores scaled by scaleFactor/sqrt(d_qk). Query head h
/// reads KV head h / (n_h / n_kv).
void attention(const std::vector<float> &q, const std::vector<float> &k,
               const std::vector<float> &v, int64_t tokens, int64_t numHeads,
               int64_t numKVHeads, int64_t headDim, int64_t valueDim,
               std::vector<float> &out, double scaleFactor = 1.0) {
  int64_t group = numHeads / numKVHeads;
  double scale = scaleFactor / std::sqrt(static_cast<double>(headDim));
  out.assign(static_cast<size_t>(tokens * numHeads * valueDim), 0.0f);
  std::vector<double> scores(static_cast<size_t>(tokens));
  std::vector<double> acc(static_cast<size_t>(valueDim));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < numHeads; ++h) {
      int64_t kvh = h / group;
      const float *qRow = &q[(t * numHeads + h) * headDim];
      double maxScore = -INFINITY;
      for (int64_t s = 0; s <= t; ++s) {
        const float *kRow = &k[(s * numKVHeads + kvh) * headDim];
        double dot = 0.0;
        for (int64_t j = 0; j < headDim; ++j)
          dot += static_cast<double>(qRow[j]) * kRow[j];
        scores[s] = dot * scale;
        maxScore = std::max(maxScore, scores[s]);
      }
      double denominator = 0.0;
      for (int64_t s = 0; s <= t; ++s) {
        scores[s] = std::exp(scores[s] - maxScore);
        denominator += scores[s];
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t s = 0; s <= t; ++s) {
        const float *vRow = &v[(s * numKVHeads + kvh) * valueDim];
        double p = scores[s] / denominator;
        for (int64_t j = 0; j < valueDim; ++j)
          acc[j] += p * vRow[j];
      }
      float *outRow = &out[(t * numHeads + h) * valueDim];
      for (int64_t j = 0; j < valueDim; ++j)
        outRow[j] = static_cast<float>(acc[j]);
    }
  }
}

/// Router: picks the top-k experts by logit (ties: lower index first) and
/// their weights. With norm_topk_prob the weights are the softmax over the
/// chosen k logits; without, the softmax over all experts at the chosen k.
void route(const float *logits, int64_t numExperts, int64_t topK,
           bool normTopKProb, std::vector<int64_t> &experts,
           std::vector<double> &weights) {
  std::vector<int64_t> order(static_cast<size_t>(numExperts));
  for (int64_t e = 0; e < numExperts; ++e)
    order[e] = e;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  experts.assign(order.begin(), order.begin() + topK);
  double maxLogit = logits[experts[0]];
  double denominator = 0.0;
  if (normTopKProb) {
    for (int64_t e : experts)
      denominator += std::exp(logits[e] - maxLogit);
  } else {
    for (int64_t e = 0; e < numExperts; ++e)
      denominator += std::exp(logits[e] - maxLogit);
  }
  weights.clear();
  for (int64_t e : experts)
    weights.push_back(std::exp(logits[e] - maxLogit) / denominator);
}

/// DeepSeek-V3's router, as transformers' DeepseekV3MoE: s = sigmoid(logit);
/// experts are chosen by s + bias within the topk_group groups with the best
/// sum of their two best choice scores (other groups' experts count -inf,
/// as in transformers 5 and DeepSeek's inference code);
/// the weights are s at the chosen, over their sum (norm_topk_prob), times
/// routed_scaling_factor. Ties go to the lower index.
void routeSigmoid(const Config &c, const float *logits,
                  const std::vector<float> &bias, std::vector<int64_t> &experts,
                  std::vector<double> &weights) {
  int64_t n = c.numExperts, size = n / c.nGroup;
  std::vector<float> s(static_cast<size_t>(n)), choice(s.size());
  for (int64_t e = 0; e < n; ++e) {
    s[e] = static_cast<float>(1.0 / (1.0 + std::exp(-double(logits[e]))));
    choice[e] = s[e] + bias[e];
  }
  auto byScore = [](const std::vector<float> &v) {
    std::vector<int64_t> order(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      order[i] = static_cast<int64_t>(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return v[a] > v[b]; });
    return order;
  };
  if (c.nGroup > 1) {
    std::vector<float> groupScore(static_cast<size_t>(c.nGroup));
    for (int64_t g = 0; g < c.nGroup; ++g) {
      std::vector<float> members(choice.begin() + g * size,
                                 choice.begin() + (g + 1) * size);
      std::vector<int64_t> order = byScore(members);
      groupScore[g] = members[order[0]] + members[order[1]];
    }
    std::vector<int64_t> groups = byScore(groupScore);
    std::vector<bool> kept(static_cast<size_t>(c.nGroup), false);
    for (int64_t i = 0; i < c.topkGroup; ++i)
      kept[groups[i]] = true;
    for (int64_t e = 0; e < n; ++e)
      if (!kept[e / size])
        choice[e] = -std::numeric_limits<float>::infinity();
  }
  std::vector<int64_t> order = byScore(choice);
  experts.assign(order.begin(), order.begin() + c.topK);
  double sum = 0.0;
  for (int64_t e : experts)
    sum += s[e];
  weights.clear();
  for (int64_t e : experts)
    weights.push_back((c.normTopKProb ? s[e] / (sum + 1e-20) : s[e]) *
                      c.routedScaling);
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

/// One row through a SwiGLU MLP: out [d] = W2 (silu(W1 x) * W3 x), with W1
/// and W3 [ffn, d] and W2 [d, ffn]; `g` and `u` are scratch.
void swiGLU(const float *x, int64_t d, int64_t ffn,
            const std::vector<float> &w1, const std::vector<float> &w2,
            const std::vector<float> &w3, std::vector<float> &g,
            std::vector<float> &u, float *out) {
  g.resize(static_cast<size_t>(ffn));
  u.resize(static_cast<size_t>(ffn));
  linear(x, 1, d, w1.data(), ffn, g.data());
  linear(x, 1, d, w3.data(), ffn, u.data());
  for (int64_t j = 0; j < ffn; ++j)
    g[j] = static_cast<float>(silu(g[j]) * u[j]);
  linear(g.data(), 1, ffn, w2.data(), d, out);
}

/// y[t, o] += bias[o] for every row t of y ([rows, out]).
void addBias(std::vector<float> &y, const std::vector<float> &bias) {
  size_t out = bias.size();
  for (size_t i = 0; i < y.size(); ++i)
    y[i] += bias[i % out];
}

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

/// Per-request state and outputs.
struct Request {
  std::vector<int64_t> tokens;
  std::vector<float> hidden;                    ///< [T, d]
  std::vector<std::vector<float>> keys, values; ///< per layer, [T, n_kv, d_h]
  std::vector<float> logits;                    ///< [V]
  std::vector<float> promptLogits;              ///< [T, V] (optional)
};

/// The pairs (x[2j], x[2j + 1]) of each [dim] vector moved to (j, j + dim/2),
/// as transformers' apply_rotary_pos_emb_interleave does before rotate-half.
void deinterleave(std::vector<float> &x, int64_t dim) {
  std::vector<float> tmp(static_cast<size_t>(dim));
  for (size_t at = 0; at < x.size(); at += static_cast<size_t>(dim)) {
    for (int64_t j = 0; j < dim / 2; ++j) {
      tmp[j] = x[at + 2 * j];
      tmp[j + dim / 2] = x[at + 2 * j + 1];
    }
    std::copy(tmp.begin(), tmp.end(), x.begin() + at);
  }
}

/// DeepSeek-V3's MLA as transformers' DeepseekV3Attention computes it, per
/// head: q = q_b(norm(q_a(x))) split [q_nope, q_rope]; the latent
/// c = norm(kv_a(x)[:r]) and the RoPE key kv_a(x)[r:]; [k_nope, v] per head
/// from kv_b(c); K = [k_nope, rope key], Q = [q_nope, q_rope], both roped
/// parts rotated; attention over d_qk = nope + rope, values of v_head_dim.
/// Records the cache as the program holds it: [c, roped key], [T, 1, r +
/// rope].
bool runLatentAttention(const Config &c, int64_t layer, Weights &weights,
                        std::vector<Request> &requests) {
  int64_t d = c.hidden, H = c.numHeads, nope = c.qkNope, rope = c.qkRope,
          vd = c.vHead, r = c.kvLoraRank, qk = nope + rope;
  std::vector<float> norm, qa, qaNorm, qb, kva, kvaNorm, kvb, wo;
  bool ok = weights.load(layerName(layer, "input_layernorm.weight"), norm) &&
            (c.qLoraRank > 0
                 ? weights.load(attnName(layer, "q_a_proj"), qa) &&
                       weights.load(attnName(layer, "q_a_layernorm"), qaNorm) &&
                       weights.load(attnName(layer, "q_b_proj"), qb)
                 : weights.load(attnName(layer, "q_proj"), qb)) &&
            weights.load(attnName(layer, "kv_a_proj_with_mqa"), kva) &&
            weights.load(attnName(layer, "kv_a_layernorm"), kvaNorm) &&
            weights.load(attnName(layer, "kv_b_proj"), kvb) &&
            weights.load(attnName(layer, "o_proj"), wo);
  if (!ok)
    return false;
  for (Request &req : requests) {
    int64_t T = static_cast<int64_t>(req.tokens.size());
    std::vector<float> x(static_cast<size_t>(T * d));
    rmsNorm(req.hidden.data(), T, d, norm, c.rmsNormEps, x.data());
    std::vector<float> q(static_cast<size_t>(T * H * qk));
    if (c.qLoraRank > 0) {
      std::vector<float> a(static_cast<size_t>(T * c.qLoraRank));
      linear(x.data(), T, d, qa.data(), c.qLoraRank, a.data());
      rmsNorm(a.data(), T, c.qLoraRank, qaNorm, c.rmsNormEps, a.data());
      linear(a.data(), T, c.qLoraRank, qb.data(), H * qk, q.data());
    } else {
      linear(x.data(), T, d, qb.data(), H * qk, q.data());
    }
    std::vector<float> kvA(static_cast<size_t>(T * (r + rope)));
    linear(x.data(), T, d, kva.data(), r + rope, kvA.data());
    std::vector<float> latent(static_cast<size_t>(T * r)),
        kRope(static_cast<size_t>(T * rope)),
        qRope(static_cast<size_t>(T * H * rope));
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(&kvA[t * (r + rope)], r, &latent[t * r]);
      std::copy_n(&kvA[t * (r + rope) + r], rope, &kRope[t * rope]);
      for (int64_t h = 0; h < H; ++h)
        std::copy_n(&q[(t * H + h) * qk + nope], rope,
                    &qRope[(t * H + h) * rope]);
    }
    rmsNorm(latent.data(), T, r, kvaNorm, c.rmsNormEps, latent.data());
    std::vector<float> kv(static_cast<size_t>(T * H * (nope + vd)));
    linear(latent.data(), T, r, kvb.data(), H * (nope + vd), kv.data());
    if (c.ropeInterleave) {
      deinterleave(qRope, rope);
      deinterleave(kRope, rope);
    }
    applyRope(qRope, T, H, rope, c.ropeTheta, &c);
    applyRope(kRope, T, 1, rope, c.ropeTheta, &c);
    // Per head: Q = [q_nope, q_rope], K = [k_nope, k_rope], V.
    std::vector<float> Q(static_cast<size_t>(T * H * qk)), K(Q.size()),
        V(static_cast<size_t>(T * H * vd));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const float *kvRow = &kv[(t * H + h) * (nope + vd)];
        float *qRow = &Q[(t * H + h) * qk], *kRow = &K[(t * H + h) * qk];
        std::copy_n(&q[(t * H + h) * qk], nope, qRow);
        std::copy_n(&qRope[(t * H + h) * rope], rope, qRow + nope);
        std::copy_n(kvRow, nope, kRow);
        std::copy_n(&kRope[t * rope], rope, kRow + nope);
        std::copy_n(kvRow + nope, vd, &V[(t * H + h) * vd]);
      }
    std::vector<float> attn;
    attention(Q, K, V, T, H, H, qk, vd, attn, c.yarnSoftmaxScale);
    std::vector<float> o(static_cast<size_t>(T * d));
    linear(attn.data(), T, H * vd, wo.data(), d, o.data());
    for (size_t i = 0; i < o.size(); ++i)
      req.hidden[i] += o[i];
    std::vector<float> cache(static_cast<size_t>(T * (r + rope)));
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(&latent[t * r], r, &cache[t * (r + rope)]);
      std::copy_n(&kRope[t * rope], rope, &cache[t * (r + rope) + r]);
    }
    req.keys.push_back(cache);
    req.values.push_back(std::move(cache));
  }
  return true;
}

bool runAttention(const Config &c, int64_t layer, Weights &weights,
                  std::vector<Request> &requests) {
  if (c.mla)
    return runLatentAttention(c, layer, weights, requests);
  int64_t d = c.hidden, qDim = c.numHeads * c.headDim,
          kvDim = c.numKVHeads * c.headDim;
  std::vector<float> norm, wq, wk, wv, wo;
  if (!weights.load(layerName(layer, "input_layernorm.weight"), norm) ||
      !weights.load(layerName(layer, "self_attn.q_proj.weight"), wq) ||
      !weights.load(layerName(layer, "self_attn.k_proj.weight"), wk) ||
      !weights.load(layerName(layer, "self_attn.v_proj.weight"), wv) ||
      !weights.load(layerName(layer, "self_attn.o_proj.weight"), wo))
    return false;
  std::vector<float> qBias, kBias, vBias;
  if (c.qkvBias &&
      (!weights.load(layerName(layer, "self_attn.q_proj.bias"), qBias) ||
       !weights.load(layerName(layer, "self_attn.k_proj.bias"), kBias) ||
       !weights.load(layerName(layer, "self_attn.v_proj.bias"), vBias)))
    return false;
  std::vector<float> qNorm, kNorm;
  if ((c.qkNorm || c.qkProjectionNorm) &&
      (!weights.load(layerName(layer, "self_attn.q_norm.weight"), qNorm) ||
       !weights.load(layerName(layer, "self_attn.k_norm.weight"), kNorm)))
    return false;
  for (Request &r : requests) {
    int64_t T = static_cast<int64_t>(r.tokens.size());
    std::vector<float> x(static_cast<size_t>(T * d));
    rmsNorm(r.hidden.data(), T, d, norm, c.rmsNormEps, x.data());
    std::vector<float> q(static_cast<size_t>(T * qDim));
    std::vector<float> k(static_cast<size_t>(T * kvDim));
    std::vector<float> v(static_cast<size_t>(T * kvDim));
    linear(x.data(), T, d, wq.data(), qDim, q.data());
    linear(x.data(), T, d, wk.data(), kvDim, k.data());
    linear(x.data(), T, d, wv.data(), kvDim, v.data());
    if (c.qkvBias) {
      addBias(q, qBias);
      addBias(k, kBias);
      addBias(v, vBias);
    }
    if (c.qkProjectionNorm) {
      // Each token's whole projection, in place.
      rmsNorm(q.data(), T, qDim, qNorm, c.rmsNormEps, q.data());
      rmsNorm(k.data(), T, kvDim, kNorm, c.rmsNormEps, k.data());
    }
    if (c.qkNorm) {
      // Each head's vector on its own, in place.
      rmsNorm(q.data(), T * c.numHeads, c.headDim, qNorm, c.rmsNormEps,
              q.data());
      rmsNorm(k.data(), T * c.numKVHeads, c.headDim, kNorm, c.rmsNormEps,
              k.data());
    }
    if (c.clipQKV > 0)
      for (std::vector<float> *p : {&q, &k, &v})
        for (float &e : *p)
          e = static_cast<float>(
              std::clamp(static_cast<double>(e), -c.clipQKV, c.clipQKV));
    applyRope(q, T, c.numHeads, c.headDim, c.ropeTheta);
    applyRope(k, T, c.numKVHeads, c.headDim, c.ropeTheta);
    std::vector<float> attn;
    attention(q, k, v, T, c.numHeads, c.numKVHeads, c.headDim, c.headDim, attn);
    std::vector<float> o(static_cast<size_t>(T * d));
    linear(attn.data(), T, qDim, wo.data(), d, o.data());
    for (size_t i = 0; i < o.size(); ++i)
      r.hidden[i] += o[i];
    r.keys.push_back(std::move(k));
    r.values.push_back(std::move(v));
  }
  return true;
}

bool runMoE(const Config &c, int64_t layer, Weights &weights,
            std::vector<Request> &requests, Failure &failure) {
  int64_t d = c.hidden, ffn = c.expertFfn;
  std::vector<float> norm, gate, bias;
  if (!weights.load(layerName(layer, "post_attention_layernorm.weight"),
                    norm) ||
      !weights.load(layerName(layer, c.moeBlock + ".gate.weight"), gate) ||
      (c.sigmoidRouting &&
       !weights.load(
           layerName(layer, c.moeBlock + ".gate.e_score_correction_bias"),
           bias)))
    return false;

  // Normalised inputs of every token of every request, and the routing.
  struct Assignment {
    size_t request;
    int64_t token;
    double weight;
  };
  std::vector<std::vector<float>> inputs(requests.size());
  std::vector<std::vector<double>> outputs(requests.size());
  std::vector<std::vector<Assignment>> perExpert(
      static_cast<size_t>(c.numExperts));
  std::vector<float> logits(static_cast<size_t>(c.numExperts));
  std::vector<int64_t> chosen;
  std::vector<double> routeWeights;
  for (size_t r = 0; r < requests.size(); ++r) {
    int64_t T = static_cast<int64_t>(requests[r].tokens.size());
    inputs[r].resize(static_cast<size_t>(T * d));
    outputs[r].assign(static_cast<size_t>(T * d), 0.0);
    rmsNorm(requests[r].hidden.data(), T, d, norm, c.rmsNormEps,
            inputs[r].data());
    for (int64_t t = 0; t < T; ++t) {
      linear(&inputs[r][t * d], 1, d, gate.data(), c.numExperts, logits.data());
      for (float l : logits)
        if (!std::isfinite(l))
          return fail(failure, "non-finite router logit in layer " +
                                   std::to_string(layer) + ", request " +
                                   std::to_string(r) + ", position " +
                                   std::to_string(t));
      if (c.sigmoidRouting)
        routeSigmoid(c, logits.data(), bias, chosen, routeWeights);
      else
        route(logits.data(), c.numExperts, c.topK, c.normTopKProb, chosen,
              routeWeights);
      for (size_t k = 0; k < chosen.size(); ++k)
        perExpert[chosen[k]].push_back({r, t, routeWeights[k]});
    }
  }

  // Each expert in turn: y += w * W2 (silu(W1 x) * W3 x).
  std::vector<float> w1, w2, w3, g, u;
  std::vector<float> down(static_cast<size_t>(d));
  for (int64_t e = 0; e < c.numExperts; ++e) {
    if (perExpert[e].empty())
      continue;
    if (!weights.load(expertName(c, layer, e, c.expertGate), w1) ||
        !weights.load(expertName(c, layer, e, c.expertDown), w2) ||
        !weights.load(expertName(c, layer, e, c.expertUp), w3))
      return false;
    for (const Assignment &a : perExpert[e]) {
      const float *x = &inputs[a.request][a.token * d];
      swiGLU(x, d, ffn, w1, w2, w3, g, u, down.data());
      double *y = &outputs[a.request][a.token * d];
      for (int64_t j = 0; j < d; ++j)
        y[j] += a.weight * down[j];
    }
  }
  if (c.sharedFfn > 0) {
    // The shared expert on every token: y += sigmoid(g . x) * W2 (silu(W1 x)
    // * W3 x).
    std::vector<float> sGate;
    if (!weights.load(sharedName(c, layer, "gate_proj"), w1) ||
        !weights.load(sharedName(c, layer, "down_proj"), w2) ||
        !weights.load(sharedName(c, layer, "up_proj"), w3) ||
        (c.sharedGated &&
         !weights.load(
             layerName(layer, c.moeBlock + ".shared_expert_gate.weight"),
             sGate)))
      return false;
    for (size_t r = 0; r < requests.size(); ++r) {
      int64_t T = static_cast<int64_t>(requests[r].tokens.size());
      for (int64_t t = 0; t < T; ++t) {
        const float *x = &inputs[r][t * d];
        swiGLU(x, d, c.sharedFfn, w1, w2, w3, g, u, down.data());
        double scale = 1.0;
        if (c.sharedGated) {
          float s;
          linear(x, 1, d, sGate.data(), 1, &s);
          scale = 1.0 / (1.0 + std::exp(-static_cast<double>(s)));
        }
        double *y = &outputs[r][t * d];
        for (int64_t j = 0; j < d; ++j)
          y[j] += scale * down[j];
      }
    }
  }
  for (size_t r = 0; r < requests.size(); ++r)
    for (size_t i = 0; i < outputs[r].size(); ++i)
      requests[r].hidden[i] += static_cast<float>(outputs[r][i]);
  return true;
}

/// A dense layer's MLP (no experts): h += W2 (silu(W1 x) * W3 x) with x the
/// post-attention RMSNorm of h.
bool runDenseMLP(const Config &c, int64_t layer, Weights &weights,
                 std::vector<Request> &requests) {
  int64_t d = c.hidden, f = c.denseFfn;
  std::vector<float> norm, w1, w2, w3;
  if (!weights.load(layerName(layer, "post_attention_layernorm.weight"),
                    norm) ||
      !weights.load(layerName(layer, c.moeBlock + ".gate_proj.weight"), w1) ||
      !weights.load(layerName(layer, c.moeBlock + ".down_proj.weight"), w2) ||
      !weights.load(layerName(layer, c.moeBlock + ".up_proj.weight"), w3))
    return false;
  std::vector<float> x(static_cast<size_t>(d)), y(x.size()), g, u;
  for (Request &r : requests) {
    int64_t T = static_cast<int64_t>(r.tokens.size());
    for (int64_t t = 0; t < T; ++t) {
      rmsNorm(&r.hidden[t * d], 1, d, norm, c.rmsNormEps, x.data());
      swiGLU(x.data(), d, f, w1, w2, w3, g, u, y.data());
      for (int64_t j = 0; j < d; ++j)
        r.hidden[t * d + j] += y[j];
    }
  }
  return true;
}

/// Prefill of `requests`: their K/V, last-position logits and, with
/// `allLogits`, every position's (prompt logprobs).
bool runModel(const Config &c, const mfrt::Checkpoint &file,
              std::vector<Request> &requests, bool allLogits,
              Failure &failure) {
  Weights weights(file, failure);
  if (!checkWeights(c, weights))
    return false;
  std::string headName = lmHeadName;
  // Tied: the LM head is the embedding table (HF ties them after loading,
  // so a stored lm_head.weight is ignored).
  if (c.tieWordEmbeddings)
    headName = embedName;
  if (!weights.check(headName, {c.vocab, c.hidden}))
    return false;

  int64_t d = c.hidden;
  for (Request &r : requests) {
    int64_t T = static_cast<int64_t>(r.tokens.size());
    if (c.slidingWindow && T > *c.slidingWindow)
      return fail(failure, "a prompt of " + std::to_string(T) +
                               " tokens exceeds sliding_window " +
                               std::to_string(*c.slidingWindow) +
                               ", which is not supported");
    r.hidden.resize(static_cast<size_t>(T * d));
    for (int64_t t = 0; t < T; ++t)
      if (!weights.loadRow(embedName, r.tokens[t], &r.hidden[t * d]))
        return false;
  }

  for (int64_t layer = 0; layer < c.numLayers; ++layer)
    if (!runAttention(c, layer, weights, requests) ||
        !(c.dense(layer) ? runDenseMLP(c, layer, weights, requests)
                         : runMoE(c, layer, weights, requests, failure)))
      return false;

  std::vector<float> norm;
  if (!weights.load(normName, norm))
    return false;
  std::vector<std::vector<float>> last(requests.size()), all(requests.size());
  for (size_t r = 0; r < requests.size(); ++r) {
    int64_t T = static_cast<int64_t>(requests[r].tokens.size());
    last[r].resize(static_cast<size_t>(d));
    rmsNorm(&requests[r].hidden[(T - 1) * d], 1, d, norm, c.rmsNormEps,
            last[r].data());
    requests[r].logits.resize(static_cast<size_t>(c.vocab));
    if (allLogits) {
      all[r].resize(static_cast<size_t>(T * d));
      rmsNorm(requests[r].hidden.data(), T, d, norm, c.rmsNormEps,
              all[r].data());
      requests[r].promptLogits.resize(static_cast<size_t>(T * c.vocab));
    }
  }
  // The LM head one row at a time, so that it is never held whole in f32.
  std::vector<float> row(static_cast<size_t>(d));
  for (int64_t v = 0; v < c.vocab; ++v) {
    if (!weights.loadRow(headName, v, row.data()))
      return false;
    for (size_t r = 0; r < requests.size(); ++r) {
      float logit;
      linear(last[r].data(), 1, d, row.data(), 1, &logit);
      requests[r].logits[v] = logit;
      int64_t T = static_cast<int64_t>(all[r].size()) / d;
      for (int64_t t = 0; t < T; ++t) {
        linear(&all[r][t * d], 1, d, row.data(), 1, &logit);
        requests[r].promptLogits[t * c.vocab + v] = logit;
      }
    }
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Generation (dense recomputation)
//===----------------------------------------------------------------------===//

/// SplitMix64's output function of z + golden gamma.
uint64_t splitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// The generated token of `step` of `request` from its logits: the highest
/// logit (lowest id on ties) at temperature 0; else weights
/// exp((l - max) / temperature), the top-k then the top-p prefix of the ids
/// by weight (ties: lower id first), and the first id whose running weight
/// passes u * the prefix's weight, u = (hash(seed, request, step) >> 11) *
/// 2^-53.
int64_t nextToken(const std::vector<float> &logits, int64_t request,
                  int64_t step) {
  int64_t vocab = static_cast<int64_t>(logits.size());
  if (temperatureOpt == 0.0)
    return std::max_element(logits.begin(), logits.end()) - logits.begin();
  float top = *std::max_element(logits.begin(), logits.end());
  std::vector<std::pair<double, int64_t>> ranked;
  for (int64_t i = 0; i < vocab; ++i)
    ranked.push_back(
        {std::exp((double(logits[i]) - double(top)) / temperatureOpt), i});
  std::sort(ranked.begin(), ranked.end(), [](const auto &a, const auto &b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  if (topKOpt > 0 && topKOpt < vocab)
    ranked.resize(static_cast<size_t>(topKOpt));
  double all = 0;
  for (const auto &r : ranked)
    all += r.first;
  double prefix = 0;
  size_t n = 0;
  while (n < ranked.size()) {
    prefix += ranked[n++].first;
    if (prefix >= topPOpt * all)
      break;
  }
  uint64_t h = splitMix64(splitMix64(splitMix64(seedOpt) ^ uint64_t(request)) ^
                          uint64_t(step));
  double u = double(h >> 11) * 0x1.0p-53;
  double running = 0;
  for (size_t i = 0; i < n; ++i) {
    running += ranked[i].first;
    if (running > u * prefix)
      return ranked[i].second;
  }
  return ranked[n - 1].second;
}

struct Generated {
  std::vector<int32_t> ids;
  std::vector<float> stepLogits; ///< [n, V] with --step-logits
};

/// Generates after the prefill run of `requests` (their logits): each step
/// re-runs the whole model on prompt + the tokens so far of every request
/// still going. Each request ends with the K/V of its last run: prompt + all
/// generated tokens but the last.
bool generate(const Config &c, const mfrt::Checkpoint &file,
              const std::vector<std::vector<int64_t>> &prompts,
              std::vector<Request> &requests, std::vector<Generated> &out,
              Failure &failure) {
  out.assign(requests.size(), Generated());
  std::vector<size_t> active(requests.size());
  for (size_t r = 0; r < active.size(); ++r)
    active[r] = r;
  for (int64_t step = 0; step < maxNewTokensOpt && !active.empty(); ++step) {
    std::vector<size_t> going;
    for (size_t r : active) {
      int64_t id = nextToken(requests[r].logits, int64_t(r), step);
      out[r].ids.push_back(static_cast<int32_t>(id));
      if (stepLogitsOpt)
        out[r].stepLogits.insert(out[r].stepLogits.end(),
                                 requests[r].logits.begin(),
                                 requests[r].logits.end());
      bool eos = std::find(c.eosTokens.begin(), c.eosTokens.end(), id) !=
                 c.eosTokens.end();
      if ((ignoreEosOpt || !eos) && step + 1 < maxNewTokensOpt)
        going.push_back(r);
    }
    if (going.empty())
      break;
    std::vector<Request> batch(going.size());
    for (size_t i = 0; i < going.size(); ++i) {
      batch[i].tokens = prompts[going[i]];
      for (int32_t id : out[going[i]].ids)
        batch[i].tokens.push_back(id);
    }
    if (!runModel(c, file, batch, /*allLogits=*/false, failure))
      return false;
    for (size_t i = 0; i < going.size(); ++i)
      requests[going[i]] = std::move(batch[i]);
    active = std::move(going);
  }
  return true;
}

bool run(Failure &failure) {
  Config config;
  if (!readConfig(configPath, numLayersOpt, config, failure))
    return false;

  std::string error;
  std::unique_ptr<mfrt::Checkpoint> file =
      mfrt::Checkpoint::open(weightsPath, &error);
  if (!file)
    return fail(failure, error);

  mfrt::PromptFiles files;
  files.ids = promptsPath;
  files.text = promptsTextPath;
  files.jsonl = promptsJsonlPath;
  files.tokenizer = tokenizerPath;
  files.weights = weightsPath;
  mfrt::Prompts read;
  if (!mfrt::readPrompts(files, config.vocab, read, &error))
    return fail(failure, error);
  std::vector<std::vector<int64_t>> prompts = std::move(read.tokens);

  if (maxNewTokensOpt < 0)
    return fail(failure, "--max-new-tokens must be at least 0, got " +
                             std::to_string(maxNewTokensOpt));
  if (!(temperatureOpt >= 0) || !std::isfinite(temperatureOpt))
    return fail(failure, "--temperature must be at least 0");
  if (topKOpt < 0)
    return fail(failure, "--top-k must be at least 0");
  if (!(topPOpt > 0 && topPOpt <= 1))
    return fail(failure, "--top-p must be in (0, 1]");

  std::vector<Request> requests(prompts.size());
  for (size_t r = 0; r < prompts.size(); ++r)
    requests[r].tokens = prompts[r];
  if (!runModel(config, *file, requests, promptLogprobsOpt, failure))
    return false;
  // Generation re-runs the requests on longer sequences: prefill's logits
  // (and prompt logits) are kept first.
  std::vector<std::vector<float>> prefillLogits, promptLogits;
  for (const Request &r : requests) {
    prefillLogits.push_back(r.logits);
    promptLogits.push_back(r.promptLogits);
  }
  std::vector<Generated> generated;
  if (maxNewTokensOpt > 0 &&
      !generate(config, *file, prompts, requests, generated, failure))
    return false;

  mfrt::SafetensorsWriter writer;
  writer.setMetadata("producer", "meshfold-reference");
  writer.setMetadata("num_layers", std::to_string(config.numLayers));
  for (size_t r = 0; r < requests.size(); ++r) {
    std::string prefix = "req" + std::to_string(r) + ".";
    Request &req = requests[r];
    for (float l : req.logits)
      if (!std::isfinite(l))
        return fail(failure,
                    "request " + std::to_string(r) + " has non-finite logits");
    writer.addF32(prefix + "logits", {config.vocab}, prefillLogits[r]);
    if (maxNewTokensOpt > 0) {
      const Generated &g = generated[r];
      int64_t n = static_cast<int64_t>(g.ids.size());
      writer.add(prefix + "tokens", mfrt::DType::I32, {n}, g.ids.data());
      if (stepLogitsOpt)
        writer.addF32(prefix + "step_logits", {n, config.vocab}, g.stepLogits);
    }
    if (promptLogprobsOpt)
      writer.addF32(prefix + "prompt_logits",
                    {static_cast<int64_t>(prompts[r].size()), config.vocab},
                    promptLogits[r]);
    std::vector<int64_t> kvShape = {static_cast<int64_t>(req.tokens.size()),
                                    config.numKVHeads, config.headDim};
    for (int64_t i = 0; i < config.numLayers; ++i) {
      std::string layer = prefix + "layers." + std::to_string(i) + ".";
      writer.addF32(layer + "k", kvShape, req.keys[i]);
      writer.addF32(layer + "v", kvShape, req.values[i]);
    }
  }
  if (!writer.write(outPath, &error))
    return fail(failure, error);
  return true;
}

} // namespace

int main(int argc, char **argv) {
  InitLLVM initLLVM(argc, argv);
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
