//===- HFConfig.cpp - A Hugging Face config.json, read and checked --------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Importer/HFConfig.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

using namespace meshfold;
using llvm::StringRef;
namespace json = llvm::json;

namespace {

/// The first error of a read: later checks see it set and stop.
struct Failure {
  std::string &error;
  void fail(const llvm::Twine &message) {
    if (error.empty())
      error = message.str();
  }
  bool failed() const { return !error.empty(); }
};

/// The config's fields, with errors that name the field.
class Fields {
public:
  Fields(const json::Object &obj, StringRef file, Failure &failure)
      : obj(obj), file(file), failure(failure) {}

  /// eos_token_id: absent or null (none), an id, or a list of ids, each in
  /// the vocabulary.
  std::optional<std::vector<int64_t>> eosTokens(int64_t vocab) const {
    const json::Value *v = obj.get("eos_token_id");
    if (!v || v->kind() == json::Value::Null)
      return std::nullopt;
    std::vector<const json::Value *> items;
    if (const json::Array *list = v->getAsArray())
      for (const json::Value &item : *list)
        items.push_back(&item);
    else
      items.push_back(v);
    std::vector<int64_t> ids;
    for (const json::Value *item : items) {
      std::optional<int64_t> id = item->getAsInteger();
      if (!id)
        return die(file + ": field 'eos_token_id' must be a token id or a "
                          "list of them"),
               std::nullopt;
      if (*id < 0 || *id >= vocab)
        return die(file + ": field 'eos_token_id': " + llvm::Twine(*id) +
                   " is outside the vocabulary (" + llvm::Twine(vocab) +
                   " tokens)"),
               std::nullopt;
      ids.push_back(*id);
    }
    return ids;
  }

  /// The key is in the object, null or not.
  bool present(StringRef key) const { return obj.get(key) != nullptr; }

  int64_t nonNegativeInt(StringRef key) const {
    const json::Value *v = obj.get(key);
    if (!v || v->kind() == json::Value::Null)
      return die(file + ": missing field '" + key + "'"), 0;
    std::optional<int64_t> i = v->getAsInteger();
    if (!i || *i < 0)
      return die(file + ": field '" + key + "' must be a non-negative integer"),
             0;
    return *i;
  }

  bool has(StringRef key) const {
    const json::Value *v = obj.get(key);
    return v && v->kind() != json::Value::Null;
  }

  int64_t positiveInt(StringRef key, std::optional<int64_t> def = {}) const {
    const json::Value *v = obj.get(key);
    if (!v || v->kind() == json::Value::Null) {
      if (def)
        return *def;
      return die(file + ": missing field '" + key + "'"), 1;
    }
    std::optional<int64_t> i = v->getAsInteger();
    if (!i || *i <= 0)
      return die(file + ": field '" + key + "' must be a positive integer"), 1;
    return *i;
  }

  double positiveNumber(StringRef key, double def) const {
    const json::Value *v = obj.get(key);
    if (!v || v->kind() == json::Value::Null)
      return def;
    std::optional<double> d = v->getAsNumber();
    if (!d || !(*d > 0) || !std::isfinite(*d))
      return die(file + ": field '" + key + "' must be a positive number"), def;
    return *d;
  }

  bool boolean(StringRef key, bool def) const {
    const json::Value *v = obj.get(key);
    if (!v || v->kind() == json::Value::Null)
      return def;
    std::optional<bool> b = v->getAsBoolean();
    if (!b)
      return die(file + ": field '" + key + "' must be true or false"), def;
    return *b;
  }

  /// Rejects a field that, when set, asks for something not supported.
  void rejectIfSet(StringRef key, StringRef why) const {
    const json::Value *v = obj.get(key);
    if (!v || v->kind() == json::Value::Null)
      return;
    if (std::optional<int64_t> i = v->getAsInteger(); i && *i == 0)
      return;
    if (std::optional<bool> b = v->getAsBoolean(); b && !*b)
      return;
    if (const json::Array *a = v->getAsArray(); a && a->empty())
      return;
    if (const json::Object *o = v->getAsObject(); o && o->empty())
      return;
    die(file + ": field '" + key + "': " + why + " not supported");
  }

private:
  /// Records the first error; the field reads that follow return defaults.
  void die(const llvm::Twine &message) const { failure.fail(message); }

  const json::Object &obj;
  StringRef file;
  Failure &failure;
};

/// The deepest JSON nesting a config may have: llvm::json's parser
/// recurses once per level (deep input overflows the stack); real configs
/// nest a few levels.
constexpr int64_t kMaxNesting = 256;

/// Parses `text` (the file `path`), refusing nesting past kMaxNesting
/// before the parser sees it.
std::optional<json::Value> parseJSON(StringRef text, StringRef path,
                                     Failure &failure) {
  int64_t depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char ch = text[i];
    if (inString) {
      if (ch == '\\')
        ++i;
      else if (ch == '"')
        inString = false;
    } else if (ch == '"') {
      inString = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > kMaxNesting) {
        failure.fail(path + ": invalid JSON: nested deeper than " +
                     llvm::Twine(kMaxNesting) + " levels");
        return std::nullopt;
      }
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  llvm::Expected<json::Value> parsed = json::parse(text);
  if (!parsed) {
    failure.fail(path +
                 ": invalid JSON: " + llvm::toString(parsed.takeError()));
    return std::nullopt;
  }
  return std::move(*parsed);
}

/// Fails unless the tensor `name` of `dims` has at most kMaxTensorElements
/// elements, counted without overflow.
void checkTensorSize(StringRef path, StringRef name,
                     std::initializer_list<int64_t> dims, Failure &failure) {
  int64_t n = 1;
  bool over = false;
  std::string shape;
  for (int64_t d : dims) {
    shape += (shape.empty() ? "" : " x ") + std::to_string(d);
    over = over || llvm::MulOverflow(n, d, n) || n > kMaxTensorElements;
  }
  if (over)
    failure.fail(path + ": " + name + " = " + shape +
                 " elements is more than meshfold supports (2^40 per weight)");
}

std::optional<std::string> readText(StringRef path, Failure &failure) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buf =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buf) {
    failure.fail("cannot open input file '" + path +
                 "': " + buf.getError().message());
    return std::nullopt;
  }
  return (*buf)->getBuffer().str();
}

/// DeepSeek-V3's MLA dims: the latent's width is the attention's head dim,
/// with one (latent) KV head.
bool readMLA(const Fields &f, StringRef path, HFConfig &c, Failure &failure) {
  c.mla = true;
  // q_lora_rank null: the query from q_proj (transformers' default when the
  // field is absent is 1536, so it must be named).
  if (!f.present("q_lora_rank"))
    return failure.fail(path + ": missing field 'q_lora_rank' (null for a "
                               "query without LoRA)"),
           false;
  c.qLoraRank = f.has("q_lora_rank") ? f.positiveInt("q_lora_rank") : 0;
  c.kvLoraRank = f.positiveInt("kv_lora_rank");
  c.qkNopeDim = f.positiveInt("qk_nope_head_dim");
  c.qkRopeDim = f.positiveInt("qk_rope_head_dim");
  c.vHeadDim = f.positiveInt("v_head_dim");
  if (failure.failed())
    return false;
  // MLA's K and V come per head from the latent: transformers repeats no
  // KV head, so num_key_value_heads must name every head.
  if (c.kvHeads != c.heads)
    return failure.fail(path + ": field 'num_key_value_heads' (" +
                        llvm::Twine(c.kvHeads) +
                        ") must equal num_attention_heads (" +
                        llvm::Twine(c.heads) + ") for MLA attention"),
           false;
  if (c.qkRopeDim % 2 != 0)
    return failure.fail(path +
                        ": field 'qk_rope_head_dim' must be even for "
                        "RoPE, got " +
                        llvm::Twine(c.qkRopeDim)),
           false;
  for (auto [key, value] :
       {std::pair<StringRef, int64_t>{"kv_lora_rank", c.kvLoraRank},
        {"q_lora_rank", c.qLoraRank},
        {"qk_nope_head_dim", c.qkNopeDim},
        {"qk_rope_head_dim", c.qkRopeDim},
        {"v_head_dim", c.vHeadDim}})
    if (value > (int64_t(1) << 20))
      return failure.fail(path + ": field '" + key +
                          "' is more than meshfold supports (2^20)"),
             false;
  checkTensorSize(
      path,
      "the query's projection (num_attention_heads x "
      "(qk_nope_head_dim + qk_rope_head_dim) x q_lora_rank)",
      {c.heads, c.qkNopeDim + c.qkRopeDim, std::max(c.qLoraRank, c.hidden)},
      failure);
  checkTensorSize(path,
                  "kv_b_proj (num_attention_heads x (qk_nope_head_dim + "
                  "v_head_dim) x kv_lora_rank)",
                  {c.heads, c.qkNopeDim + c.vHeadDim, c.kvLoraRank}, failure);
  checkTensorSize(path,
                  "o_proj (hidden_size x num_attention_heads x v_head_dim)",
                  {c.hidden, c.heads, c.vHeadDim}, failure);
  c.headDim = c.kvLoraRank + c.qkRopeDim;
  c.kvHeads = 1;
  return !failure.failed();
}

/// DeepSeekMoE: sigmoid, bias-corrected, group-limited routing, shared
/// experts and dense first layers.
bool readDeepSeekMoE(const Fields &f, StringRef path, HFConfig &c,
                     Failure &failure) {
  c.sigmoidRouting = true;
  c.nGroup = f.positiveInt("n_group");
  c.topkGroup = f.positiveInt("topk_group");
  c.routedScaling = f.positiveNumber("routed_scaling_factor", -1);
  if (!f.has("routed_scaling_factor"))
    failure.fail(path + ": missing field 'routed_scaling_factor'");
  c.firstDense = f.nonNegativeInt("first_k_dense_replace");
  int64_t shared = f.nonNegativeInt("n_shared_experts");
  if (failure.failed())
    return false;
  if (c.experts % c.nGroup != 0)
    return failure.fail(path + ": field 'n_group' (" + llvm::Twine(c.nGroup) +
                        ") must divide n_routed_experts (" +
                        llvm::Twine(c.experts) + ")"),
           false;
  if (c.nGroup > 1 && c.experts / c.nGroup < 2)
    return failure.fail(path + ": field 'n_group' (" + llvm::Twine(c.nGroup) +
                        "): each group needs at least 2 experts (a group "
                        "scores its top two)"),
           false;
  if (c.topkGroup > c.nGroup)
    return failure.fail(path + ": field 'topk_group' (" +
                        llvm::Twine(c.topkGroup) + ") exceeds n_group (" +
                        llvm::Twine(c.nGroup) + ")"),
           false;
  if (c.topK > c.topkGroup * (c.experts / c.nGroup))
    return failure.fail(
               path + ": field 'num_experts_per_tok' (" + llvm::Twine(c.topK) +
               ") exceeds the experts of the topk_group kept "
               "groups (" +
               llvm::Twine(c.topkGroup * (c.experts / c.nGroup)) + ")"),
           false;
  if (!std::isfinite(float(c.routedScaling)))
    return failure.fail(path + ": field 'routed_scaling_factor' is not "
                               "representable as a positive f32"),
           false;
  if (c.firstDense > c.layers)
    c.firstDense = c.layers;
  if (c.firstDense > 0)
    c.denseFfn = f.positiveInt("intermediate_size");
  int64_t width = 0;
  if (llvm::MulOverflow(shared, c.ffn, width) || width > (int64_t(1) << 40))
    return failure.fail(path + ": field 'n_shared_experts' is more than "
                               "meshfold supports"),
           false;
  c.sharedFfn = width;
  c.sharedName = "shared_experts";
  c.sharedGate = false;
  return !failure.failed();
}

/// YaRN's parameters (DeepSeek-V3's rope_scaling, or transformers 5's
/// rope_parameters with rope_type "yarn"), turned into the ramp and scales
/// transformers computes from them. Needs the RoPE dims (qk_rope_head_dim)
/// and theta already read.
bool readYaRN(const json::Object &ro, StringRef path, StringRef field,
              HFConfig &c, Failure &failure) {
  std::string where = (path + ": " + field).str();
  auto bad = [&](const llvm::Twine &why) {
    failure.fail(path + ": field '" + field + "." + why);
    return false;
  };
  std::optional<StringRef> type = ro.getString("rope_type");
  if (!type)
    type = ro.getString("type");
  if (!type || *type != "yarn")
    return bad("type': RoPE scaling other than \"yarn\" is not supported");
  double factor = 0, original = 0, betaFast = 32, betaSlow = 1, mscale = 0,
         mscaleAll = 0, attention = 0;
  bool truncate = true;
  for (const auto &[key, value] : ro) {
    StringRef k = key;
    if (k == "type" || k == "rope_type" || k == "rope_theta")
      continue;
    if (k == "truncate") {
      std::optional<bool> t = value.getAsBoolean();
      if (!t)
        return bad("truncate' must be true or false");
      truncate = *t;
      continue;
    }
    double *slot = k == "factor"                             ? &factor
                   : k == "original_max_position_embeddings" ? &original
                   : k == "beta_fast"                        ? &betaFast
                   : k == "beta_slow"                        ? &betaSlow
                   : k == "mscale"                           ? &mscale
                   : k == "mscale_all_dim"                   ? &mscaleAll
                   : k == "attention_factor"                 ? &attention
                                                             : nullptr;
    if (!slot)
      return bad(k + "' is not a YaRN parameter meshfold implements");
    if (value.kind() == json::Value::Null)
      continue;
    std::optional<double> v = value.getAsNumber();
    if (!v || !std::isfinite(*v) || *v < 0)
      return bad(k + "' must be a non-negative number");
    *slot = *v;
  }
  if (original <= 0)
    original = double(c.maxPositions);
  if (original <= 0)
    return bad("original_max_position_embeddings' is needed (or "
               "max_position_embeddings)");
  if (factor <= 0)
    factor = double(c.maxPositions) / original;
  if (!(factor > 0) || betaFast <= 0 || betaSlow <= 0)
    return bad("factor', 'beta_fast' and 'beta_slow' must be positive");
  auto getMscale = [](double scale, double m) {
    return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
  };
  if (attention <= 0)
    attention = mscale > 0 && mscaleAll > 0
                    ? getMscale(factor, mscale) / getMscale(factor, mscaleAll)
                    : getMscale(factor, 1.0);
  // The ramp's ends: the dims where betaFast and betaSlow rotations fit
  // the original context.
  double dim = double(c.qkRopeDim), base = c.theta;
  auto correction = [&](double rotations) {
    return dim * std::log(original / (rotations * 2 * M_PI)) /
           (2 * std::log(base));
  };
  double low = correction(betaFast), high = correction(betaSlow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high)
    high += 0.001;
  c.yarnFactor = factor;
  c.yarnLow = low;
  c.yarnHigh = high;
  c.attentionFactor = attention;
  // MLA scales the softmax too: by the mscale of mscale_all_dim, squared.
  c.softmaxScale = mscaleAll > 0 ? getMscale(factor, mscaleAll) *
                                       getMscale(factor, mscaleAll)
                                 : 1.0;
  return true;
}

/// An architecture family meshfold imports: its class in `architectures`,
/// its `model_type` and its name in errors. The one list of them: the
/// architecture's recognition, model_type's meaning and the supported list
/// all come from it.
struct Family {
  enum Kind { Mixtral, Qwen3, OLMoE, Qwen2, DeepSeekV3 } kind;
  StringRef architecture, modelType, name;
};
constexpr Family kFamilies[] = {
    {Family::Mixtral, "MixtralForCausalLM", "mixtral", "Mixtral"},
    {Family::Qwen3, "Qwen3MoeForCausalLM", "qwen3_moe", "Qwen3-MoE"},
    {Family::OLMoE, "OlmoeForCausalLM", "olmoe", "OLMoE"},
    {Family::Qwen2, "Qwen2MoeForCausalLM", "qwen2_moe", "Qwen2-MoE"},
    {Family::DeepSeekV3, "DeepseekV3ForCausalLM", "deepseek_v3", "DeepSeek-V3"},
};

/// The family whose class (or, with \p modelType, whose model_type) is
/// \p value; null for any other.
const Family *findFamily(StringRef value, bool modelType) {
  for (const Family &family : kFamilies)
    if ((modelType ? family.modelType : family.architecture) == value)
      return &family;
  return nullptr;
}

/// The steps of parseHFConfig, in the order it takes them. A step that
/// returns false has recorded an error that ends the read; the checks that
/// only record one let the read go on, as the first error is the one kept.
class ConfigParser {
public:
  ConfigParser(const json::Object &obj, StringRef path, Failure &failure)
      : obj(obj), path(path), failure(failure), f(obj, path, failure) {}

  /// Reads and checks the whole config into \p out (left untouched on an
  /// error).
  bool parse(HFConfig &out);

private:
  bool readArchitecture();
  bool rejectUnsupported();
  void checkQuantization();
  bool checkFamily();
  void checkDeepSeekRouting();
  bool readAttention();
  bool readExperts();
  bool readDenseLayers();
  bool readSharedExperts();
  bool checkSizes();
  bool readRoPE();
  bool readRopeParameters(const json::Value &rp);
  bool readRopeScaling();
  bool checkF32();
  void readRemainingFields();

  const json::Object &obj;
  StringRef path;
  Failure &failure;
  Fields f;
  HFConfig c;
  /// The architecture family, set once the architecture is known.
  bool mixtral = false, qwen3 = false, olmoe = false, qwen2 = false,
       deepseek = false;
};

bool ConfigParser::parse(HFConfig &out) {
  if (!readArchitecture() || !rejectUnsupported() || !checkFamily() ||
      !readAttention() || !readExperts() || !readDenseLayers() ||
      !readSharedExperts() || !checkSizes() || !readRoPE() || !checkF32())
    return false;
  readRemainingFields();
  if (failure.failed())
    return false;
  out = std::move(c);
  return true;
}

/// The architecture, from `architectures` or else `model_type`; where both
/// name a family, it must be the same one.
bool ConfigParser::readArchitecture() {
  std::optional<StringRef> type = obj.getString("model_type");
  const Family *byType = type ? findFamily(*type, /*modelType=*/true) : nullptr;
  if (const json::Array *archs = obj.getArray("architectures");
      archs && !archs->empty() && (*archs)[0].getAsString())
    c.arch = (*archs)[0].getAsString()->str();
  else if (type)
    c.arch = byType ? byType->architecture.str() : type->str();
  else
    return failure.fail(path +
                        ": missing field 'architectures' (or 'model_type')"),
           false;
  // transformers' AutoModel builds the model model_type names, while
  // architectures names the class that wrote the checkpoint: two families
  // are two models, and which one the weights are is not known.
  const Family *byArch = findFamily(c.arch, /*modelType=*/false);
  if (byArch && byType && byArch != byType)
    return failure.fail(path + ": architectures '" + c.arch + "' is " +
                        byArch->name + " but model_type '" + *type + "' is " +
                        byType->name),
           false;

  // Another DeepSeek (V2's MLA and routing differ from V3's): the
  // architecture is the reason.
  if (!byArch && StringRef(c.arch).starts_with("Deepseek"))
    return failure.fail(path + ": unsupported architecture '" + c.arch +
                        "' (of DeepSeek's, DeepseekV3ForCausalLM is "
                        "supported)"),
           false;
  auto is = [&](Family::Kind kind) { return byArch && byArch->kind == kind; };
  mixtral = is(Family::Mixtral);
  qwen3 = is(Family::Qwen3);
  olmoe = is(Family::OLMoE);
  qwen2 = is(Family::Qwen2);
  deepseek = is(Family::DeepSeekV3);
  return true;
}

/// Unsupported features first, so that the message names the real reason.
bool ConfigParser::rejectUnsupported() {
  if (!deepseek) {
    f.rejectIfSet("kv_lora_rank", "MLA (latent) attention is");
    f.rejectIfSet("q_lora_rank", "MLA (latent) attention is");
    f.rejectIfSet("n_shared_experts", "shared experts are");
  }
  if (!qwen2)
    f.rejectIfSet("shared_expert_intermediate_size", "shared experts are");
  f.rejectIfSet("attention_bias", "attention biases are");
  if (!deepseek)
    f.rejectIfSet("rope_scaling", "RoPE scaling is");
  // Qwen3-MoE's and Qwen2-MoE's sliding_window applies only with
  // use_sliding_window (their published configs name a window they do not
  // use).
  if (qwen3 || qwen2)
    f.rejectIfSet("use_sliding_window", "sliding-window attention is");
  else
    f.rejectIfSet("sliding_window", "sliding-window attention is");
  if (!qwen2 && !qwen3)
    f.rejectIfSet("mlp_only_layers", "dense (non-MoE) layers are");
  checkQuantization();
  if (!olmoe)
    f.rejectIfSet("clip_qkv", "clipping q/k/v is");
  return !failure.failed();
}

/// fp8 weights in 128 x 128 blocks, each block with its inverse scale
/// (DeepSeek-V3's checkpoints, and the "-FP8" releases of other models):
/// a storage format of the same model, dequantized to the program's
/// storage type as it loads, which the importer accepts for every
/// architecture. `modules_to_not_convert` only names the weights kept in
/// higher precision (the loader goes by each tensor's dtype). Other
/// quantizations change the math and are refused.
void ConfigParser::checkQuantization() {
  const json::Value *q = obj.get("quantization_config");
  if (!q || !q->getAsObject() || q->getAsObject()->empty()) {
    f.rejectIfSet("quantization_config", "quantized checkpoints are");
    return;
  }
  const json::Object &qo = *q->getAsObject();
  const json::Array *block = qo.getArray("weight_block_size");
  bool fp8 = qo.getString("quant_method") == std::optional<StringRef>("fp8") &&
             block && block->size() == 2 &&
             (*block)[0].getAsInteger() == std::optional<int64_t>(128) &&
             (*block)[1].getAsInteger() == std::optional<int64_t>(128);
  for (const auto &[key, value] : qo) {
    StringRef k = key;
    if (k == "fmt" && value.getAsString() != std::optional<StringRef>("e4m3"))
      fp8 = false;
    else if (k == "activation_scheme" &&
             value.getAsString() != std::optional<StringRef>("dynamic"))
      fp8 = false;
    else if (k == "modules_to_not_convert" && !value.getAsArray() &&
             value.kind() != json::Value::Null)
      fp8 = false;
    else if (k != "quant_method" && k != "weight_block_size" && k != "fmt" &&
             k != "activation_scheme" && k != "modules_to_not_convert")
      fp8 = false;
  }
  if (!fp8)
    failure.fail(path + ": field 'quantization_config': only fp8 (e4m3) "
                        "weights in 128 x 128 blocks are supported");
}

/// The activation, the architecture's support, and the family's weight
/// names.
bool ConfigParser::checkFamily() {
  // The experts' activation: SiLU (SwiGLU) is the one implemented.
  if (const json::Value *act = obj.get("hidden_act");
      act && act->kind() != json::Value::Null) {
    std::optional<StringRef> name = act->getAsString();
    if (!name || *name != "silu")
      return failure.fail(path + ": field 'hidden_act' must be \"silu\" (the "
                                 "activation meshfold implements)"),
             false;
  }
  if (!qwen2 && !qwen3 && f.has("decoder_sparse_step") &&
      f.positiveInt("decoder_sparse_step") != 1)
    failure.fail(path + ": field 'decoder_sparse_step': dense (non-MoE) "
                        "layers are not supported");
  if (!mixtral && !qwen3 && !olmoe && !qwen2 && !deepseek) {
    std::string supported;
    for (const Family &family : kFamilies)
      supported += (supported.empty() ? "" : ", ") + family.architecture.str();
    failure.fail(path + ": unsupported architecture '" + c.arch +
                 "' (supported: " + supported + ")");
  }
  if (deepseek)
    checkDeepSeekRouting();
  if (qwen3 || olmoe || qwen2 || deepseek) {
    c.qkNorm = qwen3;
    c.qkProjectionNorm = olmoe;
    c.moeBlock = "mlp";
    c.expertGate = "gate_proj";
    c.expertDown = "down_proj";
    c.expertUp = "up_proj";
  }
  return !failure.failed();
}

/// transformers' DeepseekV3 implements one routing (sigmoid scores,
/// bias-corrected choice: "noaux_tc") and MoE in every layer from
/// first_k_dense_replace on; a config asking for another is refused.
void ConfigParser::checkDeepSeekRouting() {
  if (const json::Value *v = obj.get("topk_method");
      v && v->kind() != json::Value::Null &&
      v->getAsString() != std::optional<StringRef>("noaux_tc"))
    failure.fail(path + ": field 'topk_method' must be \"noaux_tc\" (the "
                        "DeepSeek-V3 routing meshfold implements)");
  if (const json::Value *v = obj.get("scoring_func");
      v && v->kind() != json::Value::Null &&
      v->getAsString() != std::optional<StringRef>("sigmoid"))
    failure.fail(path + ": field 'scoring_func' must be \"sigmoid\" (the "
                        "DeepSeek-V3 routing meshfold implements)");
  if (f.has("moe_layer_freq") && f.positiveInt("moe_layer_freq") != 1)
    failure.fail(path + ": field 'moe_layer_freq': MoE layers other than "
                        "every layer from first_k_dense_replace on are not "
                        "supported");
}

/// The common dims, the attention's heads and head dim (MLA's for
/// DeepSeek-V3).
bool ConfigParser::readAttention() {
  c.hidden = f.positiveInt("hidden_size");
  c.layers = f.positiveInt("num_hidden_layers");
  c.heads = f.positiveInt("num_attention_heads");
  c.kvHeads = f.positiveInt("num_key_value_heads", c.heads);
  if (failure.failed())
    return false;
  if (deepseek && !readMLA(f, path, c, failure))
    return false;
  if (!deepseek && c.hidden % c.heads != 0 && !f.has("head_dim"))
    return failure.fail(path + ": field 'head_dim' is needed: hidden_size (" +
                        llvm::Twine(c.hidden) +
                        ") is not a multiple of num_attention_heads (" +
                        llvm::Twine(c.heads) + ")"),
           false;
  if (!deepseek)
    c.headDim = f.positiveInt("head_dim", c.hidden / c.heads);
  if (failure.failed())
    return false;
  if (!deepseek && c.headDim % 2 != 0)
    return failure.fail(path + ": field 'head_dim' must be even for RoPE, " +
                        "got " + llvm::Twine(c.headDim)),
           false;
  if (c.heads % c.kvHeads != 0)
    return failure.fail(path + ": field 'num_key_value_heads' (" +
                        llvm::Twine(c.kvHeads) +
                        ") must divide num_attention_heads (" +
                        llvm::Twine(c.heads) + ")"),
           false;
  return true;
}

/// The routed experts, their width, and the vocabulary.
bool ConfigParser::readExperts() {
  if (deepseek)
    c.experts = f.positiveInt("n_routed_experts");
  else if (f.has("num_local_experts"))
    c.experts = f.positiveInt("num_local_experts");
  else if (f.has("num_experts"))
    c.experts = f.positiveInt("num_experts");
  else
    return failure.fail(path + ": missing field 'num_local_experts' (or "
                               "'num_experts')"),
           false;
  c.topK = f.positiveInt("num_experts_per_tok");
  if (failure.failed())
    return false;
  if (c.topK > c.experts)
    return failure.fail(path + ": field 'num_experts_per_tok' (" +
                        llvm::Twine(c.topK) +
                        ") exceeds the number of experts (" +
                        llvm::Twine(c.experts) + ")"),
           false;
  // Qwen3-MoE's intermediate_size is its dense MLPs' width, not the
  // experts': there moe_intermediate_size is required.
  c.ffn = f.has("moe_intermediate_size") || qwen3 || qwen2 || deepseek
              ? f.positiveInt("moe_intermediate_size")
              : f.positiveInt("intermediate_size");
  c.vocab = f.positiveInt("vocab_size");
  return true;
}

/// Qwen3-MoE's and Qwen2-MoE's dense layers: those in mlp_only_layers, and
/// those whose number is not a multiple of decoder_sparse_step.
bool ConfigParser::readDenseLayers() {
  if (!qwen2 && !qwen3)
    return true;
  c.sparseStep = f.positiveInt("decoder_sparse_step", 1);
  if (const json::Value *v = obj.get("mlp_only_layers");
      v && v->kind() != json::Value::Null) {
    const json::Array *list = v->getAsArray();
    if (!list)
      return failure.fail(path + ": field 'mlp_only_layers' must be a list "
                                 "of layer numbers"),
             false;
    for (const json::Value &item : *list) {
      std::optional<int64_t> i = item.getAsInteger();
      if (!i || *i < 0 || *i >= c.layers)
        return failure.fail(path +
                            ": field 'mlp_only_layers': each entry "
                            "must be a layer number below "
                            "num_hidden_layers (" +
                            llvm::Twine(c.layers) + ")"),
               false;
      c.mlpOnlyLayers.push_back(*i);
    }
  }
  // Too many layers is checkSizes' error, before any scan over them.
  if (c.layers > kMaxLayers)
    return true;
  bool anyDense = false;
  for (int64_t i = 0; i < c.layers; ++i)
    anyDense |= c.isDense(i);
  if (anyDense)
    c.denseFfn = f.positiveInt("intermediate_size");
  return true;
}

/// DeepSeek-V3's routing and shared experts, Qwen2-MoE's biases and gated
/// shared expert.
bool ConfigParser::readSharedExperts() {
  if (deepseek && !readDeepSeekMoE(f, path, c, failure))
    return false;
  if (qwen2) {
    // Qwen2-MoE: biased q/k/v projections (transformers' qkv_bias, on
    // unless a config turns it off) and a gated shared expert.
    c.qkvBias = f.boolean("qkv_bias", true);
    c.sharedFfn = f.positiveInt("shared_expert_intermediate_size");
  }
  return !failure.failed();
}

/// The layer count bounded, and every weight's size counted without
/// overflow (a size error is recorded; the read goes on).
bool ConfigParser::checkSizes() {
  if (c.layers > kMaxLayers)
    return failure.fail(path + ": field 'num_hidden_layers' (" +
                        llvm::Twine(c.layers) + ") is more than the " +
                        llvm::Twine(kMaxLayers) + " layers meshfold supports"),
           false;
  checkTensorSize(path,
                  "the shared expert's projection "
                  "(shared_expert_intermediate_size x hidden_size)",
                  {c.sharedFfn, c.hidden}, failure);
  checkTensorSize(path,
                  "a dense layer's projection (intermediate_size x "
                  "hidden_size)",
                  {c.denseFfn, c.hidden}, failure);
  checkTensorSize(path, "the embedding (vocab_size x hidden_size)",
                  {c.vocab, c.hidden}, failure);
  checkTensorSize(path,
                  "the query projection (num_attention_heads x head_dim x "
                  "hidden_size)",
                  {c.heads, c.headDim, c.hidden}, failure);
  checkTensorSize(path,
                  "an expert projection (experts x intermediate_size x "
                  "hidden_size)",
                  {c.experts, c.ffn, c.hidden}, failure);
  return true;
}

/// The norm's epsilon, RoPE's theta and positions, and its scaling.
bool ConfigParser::readRoPE() {
  c.eps = f.positiveNumber("rms_norm_eps",
                           qwen3 || qwen2 || deepseek ? 1e-6 : 1e-5);
  c.theta = f.positiveNumber("rope_theta", mixtral ? 1e6 : 10000.0);
  c.maxPositions = f.has("max_position_embeddings")
                       ? f.positiveInt("max_position_embeddings")
                       : 0;
  if (const json::Value *rp = obj.get("rope_parameters");
      rp && rp->kind() != json::Value::Null && !readRopeParameters(*rp))
    return false;
  if (!readRopeScaling())
    return false;
  return !failure.failed();
}

/// transformers 5 writes RoPE as rope_parameters {rope_theta, rope_type}.
bool ConfigParser::readRopeParameters(const json::Value &rp) {
  const json::Object *ro = rp.getAsObject();
  if (!ro)
    return failure.fail(path + ": field 'rope_parameters' must be an "
                               "object"),
           false;
  std::string where = (path + ": rope_parameters").str();
  Fields rf(*ro, where, failure);
  if (deepseek && ro->get("rope_type") &&
      ro->get("rope_type")->getAsString() == std::optional<StringRef>("yarn")) {
    c.theta = rf.positiveNumber("rope_theta", c.theta);
    return !failure.failed() &&
           readYaRN(*ro, path, "rope_parameters", c, failure);
  }
  if (const json::Value *type = ro->get("rope_type");
      type && type->kind() != json::Value::Null &&
      type->getAsString() != std::optional<StringRef>("default"))
    return failure.fail(path + ": field 'rope_parameters.rope_type': RoPE "
                               "scaling is not supported (only "
                               "\"default\")"),
           false;
  for (const auto &[key, value] : *ro)
    if (key != "rope_theta" && key != "rope_type")
      return failure.fail(path + ": field 'rope_parameters." + key.str() +
                          "': RoPE scaling is not supported"),
             false;
  c.theta = rf.positiveNumber("rope_theta", c.theta);
  return true;
}

/// DeepSeek-V3's rope_scaling (transformers 4's form of the same).
bool ConfigParser::readRopeScaling() {
  const json::Value *rs = obj.get("rope_scaling");
  if (!deepseek || !rs || rs->kind() == json::Value::Null)
    return true;
  const json::Object *ro = rs->getAsObject();
  if (!ro)
    return failure.fail(path + ": field 'rope_scaling' must be an object"),
           false;
  return ro->empty() || readYaRN(*ro, path, "rope_scaling", c, failure);
}

/// The program computes in f32: the norm's epsilon, RoPE's theta and
/// OLMoE's clip_qkv must survive the conversion.
bool ConfigParser::checkF32() {
  for (auto [key, value] : {std::pair<StringRef, double>{"rms_norm_eps", c.eps},
                            {"rope_theta", c.theta}})
    if (!std::isfinite(float(value)) || float(value) <= 0.0f) {
      char text[32];
      std::snprintf(text, sizeof(text), "%g", value);
      return failure.fail(path + ": field '" + key + "' (" + text +
                          ") is not representable as a positive f32"),
             false;
    }
  if (olmoe) {
    c.clipQKV = f.positiveNumber("clip_qkv", 0);
    if (c.clipQKV > 0 && !std::isfinite(float(c.clipQKV)))
      return failure.fail(path + ": field 'clip_qkv' is not representable as "
                                 "a positive f32"),
             false;
  }
  return true;
}

/// The routing's renormalization, RoPE's pairing, tied embeddings and the
/// end-of-sequence ids.
void ConfigParser::readRemainingFields() {
  c.renormalize = f.boolean("norm_topk_prob", mixtral || deepseek);
  if (deepseek)
    c.ropeInterleave = f.boolean("rope_interleave", true);
  c.tieEmbeddings = f.boolean("tie_word_embeddings", false);
  if (std::optional<std::vector<int64_t>> ids = f.eosTokens(c.vocab))
    c.eosTokens = std::move(*ids);
}

} // namespace

bool meshfold::parseHFConfig(StringRef text, StringRef path, HFConfig &out,
                             std::string &error) {
  error.clear();
  Failure failure{error};
  std::optional<json::Value> parsed = parseJSON(text, path, failure);
  if (!parsed)
    return false;
  const json::Object *obj = parsed->getAsObject();
  if (!obj)
    return failure.fail(path + ": the config must be a JSON object"), false;
  return ConfigParser(*obj, path, failure).parse(out);
}

bool meshfold::applyGenerationConfig(StringRef text, StringRef path,
                                     HFConfig &config, std::string &error) {
  error.clear();
  Failure failure{error};
  std::optional<json::Value> parsed = parseJSON(text, path, failure);
  if (!parsed)
    return false;
  const json::Object *obj = parsed->getAsObject();
  if (!obj)
    return failure.fail(path + ": the generation config must be a JSON "
                               "object"),
           false;
  std::optional<std::vector<int64_t>> ids =
      Fields(*obj, path, failure).eosTokens(config.vocab);
  if (failure.failed())
    return false;
  if (ids)
    config.eosTokens = std::move(*ids);
  return true;
}

bool meshfold::readHFConfig(StringRef path, HFConfig &out, std::string &error) {
  error.clear();
  Failure failure{error};
  std::optional<std::string> text = readText(path, failure);
  if (!text || !parseHFConfig(*text, path, out, error))
    return false;
  // generation_config.json beside config.json, as transformers' generate()
  // reads it: its eos_token_id wins.
  llvm::SmallString<256> genPath(llvm::sys::path::parent_path(path));
  llvm::sys::path::append(genPath, "generation_config.json");
  if (!llvm::sys::fs::exists(genPath))
    return true;
  std::optional<std::string> gen = readText(genPath, failure);
  return gen && applyGenerationConfig(*gen, genPath, out, error);
}
