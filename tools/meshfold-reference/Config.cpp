//===- Config.cpp - The reference's config.json ---------------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// Reads HF config.json: the fields every architecture has here, each
// architecture's own fields in Mixtral.cpp and DeepSeekV3.cpp. The fields are
// read in a fixed order, so that a config with several faults always reports
// the same one.
//
//===----------------------------------------------------------------------===//

#include "Reference.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cmath>
#include <memory>

using namespace llvm;
using namespace meshfold::reference;

//===----------------------------------------------------------------------===//
// ConfigReader
//===----------------------------------------------------------------------===//

bool ConfigReader::optionalInt(StringRef key, std::optional<int64_t> &out) {
  const json::Value *value = fields.get(key);
  if (!value || value->getAsNull())
    return true;
  std::optional<int64_t> i = value->getAsInteger();
  if (!i)
    return error("field '" + key.str() + "' is not an integer");
  out = *i;
  return true;
}

bool ConfigReader::requiredPositive(StringRef key, int64_t &out) {
  std::optional<int64_t> value;
  if (!optionalInt(key, value))
    return false;
  if (!value)
    return error("missing field '" + key.str() + "'");
  return positive(key, *value, out);
}

bool ConfigReader::positive(StringRef key, int64_t value, int64_t &out) {
  if (value <= 0)
    return error("field '" + key.str() + "' is " + std::to_string(value) +
                 ", must be positive");
  out = value;
  return true;
}

bool ConfigReader::optionalNumber(StringRef key, double &out) {
  const json::Value *value = fields.get(key);
  if (!value || value->getAsNull())
    return true;
  std::optional<double> d = value->getAsNumber();
  if (!d)
    return error("field '" + key.str() + "' is not a number");
  out = *d;
  return true;
}

bool ConfigReader::optionalBool(StringRef key, bool &out) {
  const json::Value *value = fields.get(key);
  if (!value || value->getAsNull())
    return true;
  std::optional<bool> b = value->getAsBoolean();
  if (!b)
    return error("field '" + key.str() + "' is not a boolean");
  out = *b;
  return true;
}

bool ConfigReader::isPresent(StringRef key) const {
  const json::Value *value = fields.get(key);
  return value && !value->getAsNull();
}

//===----------------------------------------------------------------------===//
// The architecture and the fields every architecture has
//===----------------------------------------------------------------------===//

namespace {
/// An architecture family: its class in `architectures`, its `model_type`,
/// its name in errors and its flag (none: Mixtral, the default).
struct Family {
  const char *architecture, *modelType, *name;
  bool Architecture::*flag;
};
} // namespace

/// The families the reference runs: the one list of them.
static const Family families[] = {
    {"MixtralForCausalLM", "mixtral", "Mixtral", nullptr},
    {"Qwen2MoeForCausalLM", "qwen2_moe", "Qwen2-MoE", &Architecture::qwen2},
    {"Qwen3MoeForCausalLM", "qwen3_moe", "Qwen3-MoE", &Architecture::qwen3},
    {"OlmoeForCausalLM", "olmoe", "OLMoE", &Architecture::olmoe},
    {"DeepseekV3ForCausalLM", "deepseek_v3", "DeepSeek-V3",
     &Architecture::deepseek},
};

/// The family whose class (or, with \p modelType, whose model_type) is
/// \p value; null for any other.
static const Family *findFamily(StringRef value, bool modelType) {
  for (const Family &family : families)
    if (value == (modelType ? family.modelType : family.architecture))
      return &family;
  return nullptr;
}

/// The family named by `architectures` and `model_type` (none: Mixtral);
/// refuses two families, which are two models, and DeepSeek's other than
/// V3.
static bool readArchitecture(ConfigReader &reader, Architecture &arch) {
  const json::Object &object = reader.object();
  const Family *family = nullptr;
  std::string namedBy; // the field and value that named `family`
  auto name = [&](StringRef field, StringRef value, bool modelType) {
    const Family *named = findFamily(value, modelType);
    std::string by = field.str() + " '" + value.str() + "'";
    if (named && family && named != family)
      return reader.error(namedBy + " is " + family->name + " but " + by +
                          " is " + named->name);
    if (named && !family) {
      family = named;
      namedBy = by;
    }
    return true;
  };
  if (const json::Array *archs = object.getArray("architectures"))
    for (const json::Value &a : *archs)
      if (std::optional<StringRef> value = a.getAsString()) {
        if (!name("architectures", *value, /*modelType=*/false))
          return false;
        if (value->starts_with("Deepseek") &&
            !(family && family->flag == &Architecture::deepseek))
          return reader.error("architecture '" + value->str() +
                              "' is not supported");
      }
  if (std::optional<StringRef> type = object.getString("model_type"))
    if (!name("model_type", *type, /*modelType=*/true))
      return false;
  if (family && family->flag)
    arch.*family->flag = true;
  return true;
}

/// Expert FFN width: moe_intermediate_size overrides intermediate_size.
/// \p moeIntermediate is set when moe_intermediate_size is given.
static bool readExpertWidth(ConfigReader &reader,
                            std::optional<int64_t> &moeIntermediate,
                            Config &config) {
  if (!reader.optionalInt("moe_intermediate_size", moeIntermediate))
    return false;
  if (moeIntermediate)
    return reader.positive("moe_intermediate_size", *moeIntermediate,
                           config.expertFfn);
  return reader.requiredPositive("intermediate_size", config.expertFfn);
}

/// The number of routed experts: DeepSeek-V3's n_routed_experts, or
/// num_local_experts (Mixtral), or num_experts.
static bool readExpertCount(ConfigReader &reader, const Architecture &arch,
                            Config &config) {
  std::optional<int64_t> value;
  if (!reader.optionalInt(
          arch.deepseek ? "n_routed_experts" : "num_local_experts", value))
    return false;
  if (arch.deepseek && !value)
    return reader.error("missing field 'n_routed_experts'");
  if (value)
    return reader.positive("num_local_experts", *value, config.numExperts);
  if (!reader.optionalInt("num_experts", value))
    return false;
  if (!value)
    return reader.error("missing field 'num_local_experts' (or "
                        "'num_experts')");
  return reader.positive("num_experts", *value, config.numExperts);
}

/// num_key_value_heads (default: num_attention_heads) and head_dim (default:
/// hidden_size / num_attention_heads, but for DeepSeek-V3's MLA).
static bool readHeads(ConfigReader &reader, const Architecture &arch,
                      Config &config) {
  std::optional<int64_t> kvHeads;
  if (!reader.optionalInt("num_key_value_heads", kvHeads))
    return false;
  config.numKVHeads = config.numHeads;
  if (kvHeads &&
      !reader.positive("num_key_value_heads", *kvHeads, config.numKVHeads))
    return false;

  std::optional<int64_t> headDim;
  if (!reader.optionalInt("head_dim", headDim))
    return false;
  if (headDim)
    return reader.positive("head_dim", *headDim, config.headDim);
  if (arch.deepseek)
    return true;
  if (config.hidden % config.numHeads != 0)
    return reader.error("hidden_size " + std::to_string(config.hidden) +
                        " is not a multiple of num_attention_heads " +
                        std::to_string(config.numHeads) +
                        " and head_dim is not given");
  config.headDim = config.hidden / config.numHeads;
  return true;
}

/// The sizes every architecture has: d, layers, heads, experts, V.
static bool readCommonFields(ConfigReader &reader, const Architecture &arch,
                             int64_t &numHiddenLayers,
                             std::optional<int64_t> &moeIntermediate,
                             Config &config) {
  return reader.requiredPositive("hidden_size", config.hidden) &&
         reader.requiredPositive("num_hidden_layers", numHiddenLayers) &&
         reader.requiredPositive("num_attention_heads", config.numHeads) &&
         reader.requiredPositive("num_experts_per_tok", config.topK) &&
         reader.requiredPositive("vocab_size", config.vocab) &&
         readExpertWidth(reader, moeIntermediate, config) &&
         readExpertCount(reader, arch, config) &&
         readHeads(reader, arch, config);
}

//===----------------------------------------------------------------------===//
// Each architecture's fields
//===----------------------------------------------------------------------===//

/// Latent attention's and other expert layouts' fields, refused but for
/// DeepSeek-V3 (attention_bias for every architecture).
static bool refuseLatentFields(ConfigReader &reader, const Architecture &arch) {
  for (const char *key :
       {"n_shared_experts", "kv_lora_rank", "q_lora_rank", "attention_bias"})
    if (reader.isPresent(key) &&
        reader.object().get(key)->getAsBoolean() != false &&
        !(arch.deepseek && StringRef(key) != "attention_bias"))
      return reader.error("field '" + std::string(key) + "' is not supported");
  return true;
}

/// Each architecture's own fields, the Mixtral family's and DeepSeek-V3's
/// (in this order, which is the order of their errors).
static bool readArchitectureFields(ConfigReader &reader,
                                   const Architecture &arch,
                                   int64_t numHiddenLayers,
                                   bool moeIntermediate, Config &config) {
  if (!readMixtralFamilyFields(reader, arch, numHiddenLayers, moeIntermediate,
                               config) ||
      !refuseLatentFields(reader, arch) ||
      (arch.deepseek &&
       !readDeepSeekV3Fields(reader, numHiddenLayers, config)) ||
      !readMixtralFamilyAttention(reader, arch, config))
    return false;
  if (arch.deepseek && !moeIntermediate)
    return reader.error("missing field 'moe_intermediate_size' "
                        "(DeepSeek-V3's experts' width)");
  if (arch.qwen3 && !moeIntermediate)
    return reader.error("missing field 'moe_intermediate_size' "
                        "(Qwen3-MoE's experts' width)");
  return true;
}

//===----------------------------------------------------------------------===//
// Optional fields every architecture reads
//===----------------------------------------------------------------------===//

/// rope_parameters in transformers 5's form: {"rope_theta": ...,
/// "rope_type": "default"}; anything else is refused.
static bool readRopeParameters(ConfigReader &reader, Config &config) {
  const json::Value *rope = reader.object().get("rope_parameters");
  if (!rope || rope->getAsNull())
    return true;
  const json::Object *params = rope->getAsObject();
  if (!params)
    return reader.error("field 'rope_parameters' is not an object");
  for (const auto &[key, value] : *params) {
    if (key == "rope_theta") {
      std::optional<double> theta = value.getAsNumber();
      if (!theta)
        return reader.error("field 'rope_parameters.rope_theta' is not a "
                            "number");
      config.ropeTheta = *theta;
    } else if (key != "rope_type" || value.getAsString() != "default") {
      return reader.error("field 'rope_parameters." + key.str() +
                          "': only default RoPE is supported");
    }
  }
  return true;
}

/// RoPE's scaling: DeepSeek-V3's YaRN, else default RoPE.
static bool readRope(ConfigReader &reader, const Architecture &arch,
                     Config &config) {
  if (reader.isPresent("rope_scaling") && !arch.deepseek)
    return reader.error("field 'rope_scaling' is not supported");
  if (const json::Object *yarn =
          arch.deepseek ? findYaRN(reader.object()) : nullptr)
    return readYaRN(reader, *yarn, config);
  return readRopeParameters(reader, config);
}

/// fp8 e4m3 weights in 128 x 128 blocks are a storage format (Weights
/// dequantizes them); any other quantization is refused.
static bool checkQuantization(ConfigReader &reader) {
  const json::Object *quant = reader.object().getObject("quantization_config");
  if (!quant || quant->empty())
    return true;
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
    return reader.error("field 'quantization_config': only fp8 (e4m3) "
                        "weights in 128 x 128 blocks are supported");
  return true;
}

/// use_sliding_window and any activation but SiLU are refused.
static bool refuseUnsupported(ConfigReader &reader) {
  const json::Object &object = reader.object();
  if (reader.isPresent("use_sliding_window") &&
      object.getBoolean("use_sliding_window") != false)
    return reader.error("field 'use_sliding_window' is not supported");
  if (const json::Value *act = object.get("hidden_act");
      act && act->kind() != json::Value::Null) {
    std::optional<StringRef> name = act->getAsString();
    if (!name || *name != "silu")
      return reader.error("field 'hidden_act' must be \"silu\"");
  }
  return true;
}

/// The optional fields (over the architecture's defaults), RoPE and what
/// is refused.
static bool readOptionalFields(ConfigReader &reader, const Architecture &arch,
                               Config &config) {
  if (!reader.optionalNumber("rms_norm_eps", config.rmsNormEps) ||
      !reader.optionalNumber("rope_theta", config.ropeTheta) ||
      !reader.optionalBool("norm_topk_prob", config.normTopKProb) ||
      !reader.optionalBool("tie_word_embeddings", config.tieWordEmbeddings))
    return false;
  std::optional<int64_t> window;
  if (!reader.optionalInt("sliding_window", window))
    return false;
  config.slidingWindow = window;
  // Qwen3-MoE and Qwen2-MoE apply sliding_window only with
  // use_sliding_window (refused below when set).
  if (arch.qwen3 || arch.qwen2)
    config.slidingWindow.reset();
  return readRope(reader, arch, config) && refuseUnsupported(reader) &&
         checkQuantization(reader);
}

/// The checks across fields, once all are read.
static bool checkConfig(ConfigReader &reader, const Config &config) {
  if (config.rmsNormEps < 0 || !std::isfinite(config.rmsNormEps))
    return reader.error("field 'rms_norm_eps' must be a finite "
                        "non-negative number");
  if (!(config.ropeTheta > 0) || !std::isfinite(config.ropeTheta))
    return reader.error("field 'rope_theta' must be a finite positive number");
  if (config.headDim % 2 != 0 && !config.mla)
    return reader.error("head_dim " + std::to_string(config.headDim) +
                        " must be even for rotate-half RoPE");
  if (config.numHeads % config.numKVHeads != 0)
    return reader.error("num_attention_heads " +
                        std::to_string(config.numHeads) +
                        " is not a multiple of num_key_value_heads " +
                        std::to_string(config.numKVHeads));
  if (config.topK > config.numExperts)
    return reader.error("num_experts_per_tok " + std::to_string(config.topK) +
                        " exceeds the number of experts " +
                        std::to_string(config.numExperts));
  return true;
}

/// The layers to run: \p numLayersLimit (-1: all \p numHiddenLayers).
static bool limitLayers(const std::string &path, int64_t numHiddenLayers,
                        int numLayersLimit, Config &config, Failure &failure) {
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
  return true;
}

//===----------------------------------------------------------------------===//
// End-of-sequence tokens
//===----------------------------------------------------------------------===//

/// eos_token_id of `object` (read from `path`): an integer, a list of them
/// or null; false (with the failure) on anything else or an id outside the
/// vocabulary.
static bool readEosField(const std::string &path, const json::Object &object,
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

/// config.eosTokens: config.json's eos_token_id, replaced by that of
/// generation_config.json beside it when it has one.
static bool readEosTokens(const std::string &path, const json::Object &object,
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

//===----------------------------------------------------------------------===//
// readConfig
//===----------------------------------------------------------------------===//

bool meshfold::reference::readConfig(const std::string &path,
                                     int numLayersLimit, Config &config,
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
  Architecture arch;
  int64_t numHiddenLayers = 0;
  std::optional<int64_t> moeIntermediate;
  return readArchitecture(reader, arch) &&
         readCommonFields(reader, arch, numHiddenLayers, moeIntermediate,
                          config) &&
         readArchitectureFields(reader, arch, numHiddenLayers,
                                moeIntermediate.has_value(), config) &&
         readOptionalFields(reader, arch, config) &&
         checkConfig(reader, config) &&
         limitLayers(path, numHiddenLayers, numLayersLimit, config, failure) &&
         readEosTokens(path, *object, config, failure);
}
