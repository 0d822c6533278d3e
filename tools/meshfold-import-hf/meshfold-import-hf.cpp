//===- meshfold-import-hf.cpp - HF config.json to a moe model -------------===//
//
// meshfold-import-hf CONFIG.json -o model.mlir [--num-layers N]
//
// Reads a Mixtral-style Hugging Face config (the Qwen2-MoE / OLMoE field names
// num_experts, moe_intermediate_size and norm_topk_prob are read where they
// mean the same thing) and writes the model as `moe` ops on global shapes,
// weights named as in a Mixtral checkpoint.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/MoE/IR/MoE.h"
#include "meshfold/Support/Manifest.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Support/FileUtilities.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <cmath>
#include <cstdio>

using namespace mlir;
using namespace meshfold;
namespace cl = llvm::cl;
namespace json = llvm::json;

static cl::OptionCategory cat("meshfold-import-hf options");
static cl::opt<std::string> inputFile(cl::Positional,
                                      cl::desc("<config.json or checkpoint "
                                               "folder>"),
                                      cl::Required, cl::cat(cat));
static cl::opt<std::string> outputFile("o", cl::desc("Output model (.mlir)"),
                                       cl::value_desc("file"), cl::init("-"),
                                       cl::cat(cat));
static cl::opt<int64_t>
    numLayersOpt("num-layers",
                 cl::desc("Keep only the first N layers (default: all)"),
                 cl::value_desc("N"), cl::init(-1), cl::cat(cat));

namespace {
[[noreturn]] void die(const llvm::Twine &msg) {
  llvm::WithColor::error(llvm::errs(), "meshfold-import-hf") << msg << "\n";
  std::exit(1);
}

struct Config {
  std::string arch;
  int64_t hidden, ffn, layers, heads, kvHeads, headDim, experts, topK, vocab;
  /// max_position_embeddings (0: not in the config).
  int64_t maxPositions;
  double eps, theta;
  bool renormalize, tieEmbeddings;
  /// End-of-sequence ids (generation stops at them); empty: none named.
  std::vector<int64_t> eosTokens;
};

/// The config's fields, with errors that name the field.
class Fields {
public:
  Fields(const json::Object &obj, StringRef file) : obj(obj), file(file) {}

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
        die(file + ": field 'eos_token_id' must be a token id or a list of "
                   "them");
      if (*id < 0 || *id >= vocab)
        die(file + ": field 'eos_token_id': " + llvm::Twine(*id) +
            " is outside the vocabulary (" + llvm::Twine(vocab) + " tokens)");
      ids.push_back(*id);
    }
    return ids;
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
      die(file + ": missing field '" + key + "'");
    }
    std::optional<int64_t> i = v->getAsInteger();
    if (!i || *i <= 0)
      die(file + ": field '" + key + "' must be a positive integer");
    return *i;
  }

  double positiveNumber(StringRef key, double def) const {
    const json::Value *v = obj.get(key);
    if (!v || v->kind() == json::Value::Null)
      return def;
    std::optional<double> d = v->getAsNumber();
    if (!d || !(*d > 0) || !std::isfinite(*d))
      die(file + ": field '" + key + "' must be a positive number");
    return *d;
  }

  bool boolean(StringRef key, bool def) const {
    const json::Value *v = obj.get(key);
    if (!v || v->kind() == json::Value::Null)
      return def;
    std::optional<bool> b = v->getAsBoolean();
    if (!b)
      die(file + ": field '" + key + "' must be true or false");
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
  const json::Object &obj;
  StringRef file;
};

/// The deepest JSON nesting a config may have: llvm::json's parser
/// recurses once per level (deep input overflows the stack); real configs
/// nest a few levels.
constexpr int64_t kMaxNesting = 256;

/// Parses `text` (the file `path`), refusing nesting past kMaxNesting
/// before the parser sees it.
json::Value parseJSON(StringRef text, const llvm::Twine &path) {
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
      if (++depth > kMaxNesting)
        die(path + ": invalid JSON: nested deeper than " +
            llvm::Twine(kMaxNesting) + " levels");
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  llvm::Expected<json::Value> parsed = json::parse(text);
  if (!parsed)
    die(path + ": invalid JSON: " + llvm::toString(parsed.takeError()));
  return std::move(*parsed);
}

/// The most layers a model may have (the importer builds each one), and
/// the most elements of one weight tensor (2^40: sizes stay far from
/// int64's limits in bytes and in every product the tools form).
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxTensorElements = int64_t(1) << 40;

/// Fails unless the tensor `name` of `dims` has at most kMaxTensorElements
/// elements, counted without overflow.
void checkTensorSize(StringRef path, StringRef name,
                     std::initializer_list<int64_t> dims) {
  int64_t n = 1;
  bool over = false;
  std::string shape;
  for (int64_t d : dims) {
    shape += (shape.empty() ? "" : " x ") + std::to_string(d);
    over = over || llvm::MulOverflow(n, d, n) || n > kMaxTensorElements;
  }
  if (over)
    die(path + ": " + name + " = " + shape +
        " elements is more than meshfold supports (2^40 per weight)");
}

Config readConfig(StringRef path) {
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> buf = openInputFile(path, &error);
  if (!buf)
    die(error);
  std::optional<json::Value> parsed = parseJSON(buf->getBuffer(), path);
  const json::Object *obj = parsed->getAsObject();
  if (!obj)
    die(path + ": the config must be a JSON object");
  Fields f(*obj, path);

  Config c;
  if (const json::Array *archs = obj->getArray("architectures");
      archs && !archs->empty() && (*archs)[0].getAsString())
    c.arch = (*archs)[0].getAsString()->str();
  else if (std::optional<StringRef> type = obj->getString("model_type"))
    c.arch = *type == "mixtral"     ? "MixtralForCausalLM"
             : *type == "qwen2_moe" ? "Qwen2MoeForCausalLM"
             : *type == "olmoe"     ? "OlmoeForCausalLM"
                                    : type->str();
  else
    die(path + ": missing field 'architectures' (or 'model_type')");

  // Unsupported features first, so that the message names the real reason.
  f.rejectIfSet("kv_lora_rank", "MLA (latent) attention is");
  f.rejectIfSet("q_lora_rank", "MLA (latent) attention is");
  f.rejectIfSet("shared_expert_intermediate_size", "shared experts are");
  f.rejectIfSet("n_shared_experts", "shared experts are");
  f.rejectIfSet("attention_bias", "attention biases are");
  f.rejectIfSet("rope_scaling", "RoPE scaling is");
  f.rejectIfSet("sliding_window", "sliding-window attention is");
  f.rejectIfSet("mlp_only_layers", "dense (non-MoE) layers are");
  f.rejectIfSet("quantization_config", "quantized checkpoints are");
  // The experts' activation: SiLU (SwiGLU) is the one implemented.
  if (const json::Value *act = obj->get("hidden_act");
      act && act->kind() != json::Value::Null) {
    std::optional<StringRef> name = act->getAsString();
    if (!name || *name != "silu")
      die(path + ": field 'hidden_act' must be \"silu\" (the activation "
                 "meshfold implements)");
  }
  if (f.has("decoder_sparse_step") && f.positiveInt("decoder_sparse_step") != 1)
    die(path + ": field 'decoder_sparse_step': dense (non-MoE) layers are not "
               "supported");
  bool mixtral = c.arch == "MixtralForCausalLM";
  if (c.arch == "OlmoeForCausalLM")
    die(path + ": architecture 'OlmoeForCausalLM': OLMoE's QK-norm "
               "(q_norm/k_norm) is not supported");
  if (c.arch.rfind("Deepseek", 0) == 0)
    die(path + ": architecture '" + c.arch +
        "': MLA attention and shared experts are not supported");
  if (c.arch == "Qwen2MoeForCausalLM")
    die(path + ": architecture 'Qwen2MoeForCausalLM': Qwen2-MoE's q/k/v "
               "biases and shared experts are not supported");
  if (!mixtral)
    die(path + ": unsupported architecture '" + c.arch +
        "' (supported: MixtralForCausalLM)");

  c.hidden = f.positiveInt("hidden_size");
  c.layers = f.positiveInt("num_hidden_layers");
  c.heads = f.positiveInt("num_attention_heads");
  c.kvHeads = f.positiveInt("num_key_value_heads", c.heads);
  if (c.hidden % c.heads != 0 && !f.has("head_dim"))
    die(path + ": field 'head_dim' is needed: hidden_size (" +
        llvm::Twine(c.hidden) + ") is not a multiple of num_attention_heads (" +
        llvm::Twine(c.heads) + ")");
  c.headDim = f.positiveInt("head_dim", c.hidden / c.heads);
  if (c.headDim % 2 != 0)
    die(path + ": field 'head_dim' must be even for RoPE, got " +
        llvm::Twine(c.headDim));
  if (c.heads % c.kvHeads != 0)
    die(path + ": field 'num_key_value_heads' (" + llvm::Twine(c.kvHeads) +
        ") must divide num_attention_heads (" + llvm::Twine(c.heads) + ")");
  if (f.has("num_local_experts"))
    c.experts = f.positiveInt("num_local_experts");
  else if (f.has("num_experts"))
    c.experts = f.positiveInt("num_experts");
  else
    die(path + ": missing field 'num_local_experts' (or 'num_experts')");
  c.topK = f.positiveInt("num_experts_per_tok");
  if (c.topK > c.experts)
    die(path + ": field 'num_experts_per_tok' (" + llvm::Twine(c.topK) +
        ") exceeds the number of experts (" + llvm::Twine(c.experts) + ")");
  c.ffn = f.has("moe_intermediate_size")
              ? f.positiveInt("moe_intermediate_size")
              : f.positiveInt("intermediate_size");
  c.vocab = f.positiveInt("vocab_size");
  if (c.layers > kMaxLayers)
    die(path + ": field 'num_hidden_layers' (" + llvm::Twine(c.layers) +
        ") is more than the " + llvm::Twine(kMaxLayers) +
        " layers meshfold supports");
  // Every weight's size, counted without overflow.
  checkTensorSize(path, "the embedding (vocab_size x hidden_size)",
                  {c.vocab, c.hidden});
  checkTensorSize(path,
                  "the query projection (num_attention_heads x head_dim x "
                  "hidden_size)",
                  {c.heads, c.headDim, c.hidden});
  checkTensorSize(path,
                  "an expert projection (experts x intermediate_size x "
                  "hidden_size)",
                  {c.experts, c.ffn, c.hidden});
  c.eps = f.positiveNumber("rms_norm_eps", 1e-5);
  c.theta = f.positiveNumber("rope_theta", mixtral ? 1e6 : 10000.0);
  // The program computes in f32: both must survive the conversion.
  for (auto [key, value] : {std::pair<StringRef, double>{"rms_norm_eps", c.eps},
                            {"rope_theta", c.theta}})
    if (!std::isfinite(float(value)) || float(value) <= 0.0f) {
      char text[32];
      std::snprintf(text, sizeof(text), "%g", value);
      die(path + ": field '" + key + "' (" + text +
          ") is not representable as a positive f32");
    }
  c.renormalize = f.boolean("norm_topk_prob", mixtral);
  c.tieEmbeddings = f.boolean("tie_word_embeddings", false);
  c.maxPositions = f.has("max_position_embeddings")
                       ? f.positiveInt("max_position_embeddings")
                       : 0;
  if (std::optional<std::vector<int64_t>> ids = f.eosTokens(c.vocab))
    c.eosTokens = std::move(*ids);
  // generation_config.json beside config.json, as transformers' generate()
  // reads it: its eos_token_id wins.
  SmallString<256> genPath(llvm::sys::path::parent_path(path));
  llvm::sys::path::append(genPath, "generation_config.json");
  if (llvm::sys::fs::exists(genPath)) {
    std::unique_ptr<llvm::MemoryBuffer> gen = openInputFile(genPath, &error);
    if (!gen)
      die(error);
    std::optional<json::Value> genParsed = parseJSON(gen->getBuffer(), genPath);
    const json::Object *genObj = genParsed->getAsObject();
    if (!genObj)
      die(genPath + ": the generation config must be a JSON object");
    if (std::optional<std::vector<int64_t>> ids =
            Fields(*genObj, genPath).eosTokens(c.vocab))
      c.eosTokens = std::move(*ids);
  }
  return c;
}

ModuleOp buildModel(MLIRContext &ctx, const Config &c, StringRef path) {
  OpBuilder b(&ctx);
  Location fileLoc = FileLineColLoc::get(&ctx, path, 1, 1);
  ModuleOp module = ModuleOp::create(fileLoc);
  b.setInsertionPointToEnd(module.getBody());
  if (c.maxPositions > 0)
    module->setAttr(meshfold::getMaxPositionsAttrName(),
                    b.getI64IntegerAttr(c.maxPositions));
  if (!c.eosTokens.empty())
    module->setAttr(meshfold::getEosTokensAttrName(),
                    b.getDenseI64ArrayAttr(c.eosTokens));

  Type f32 = b.getF32Type(), i64 = b.getI64Type();
  int64_t dyn = ShapedType::kDynamic;
  auto tensor = [&](ArrayRef<int64_t> shape, Type elt) {
    return RankedTensorType::get(shape, elt);
  };
  auto fnType = b.getFunctionType({tensor({dyn}, i64)}, {});
  auto fn = func::FuncOp::create(b, fileLoc, "prefill", fnType);
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  Value tokens = entry->getArgument(0);

  auto param = [&](const std::string &name, ArrayRef<int64_t> shape) -> Value {
    return moe::ParamOp::create(b, b.getUnknownLoc(), tensor(shape, f32),
                                b.getStringAttr(name));
  };
  FloatAttr eps = b.getF32FloatAttr(float(c.eps));
  Value pos = moe::PositionsOp::create(b, fileLoc, tensor({dyn}, i64), tokens);
  Value embedW = param("model.embed_tokens.weight", {c.vocab, c.hidden});
  auto hType = tensor({dyn, c.hidden}, f32);
  Value h = moe::EmbedOp::create(b, fileLoc, hType, embedW, tokens);

  for (int64_t i = 0; i < c.layers; ++i) {
    std::string pre = "model.layers." + std::to_string(i) + ".";
    Location loc = NameLoc::get(b.getStringAttr("layer " + std::to_string(i)));
    auto layer =
        moe::LayerOp::create(b, loc, i, ValueRange{h, pos}, TypeRange{hType});
    OpBuilder::InsertionGuard guard(b);
    Block *body = &layer.getBody().front();
    b.setInsertionPointToStart(body);
    Value x0 = body->getArgument(0), p = body->getArgument(1);
    Value t = tensor::DimOp::create(b, loc, x0, 0);
    auto heads = [&](Value x2d, int64_t n) -> Value {
      SmallVector<ReassociationIndices> re = {{0}, {1, 2}};
      SmallVector<OpFoldResult> shape = {t, b.getIndexAttr(n),
                                         b.getIndexAttr(c.headDim)};
      return tensor::ExpandShapeOp::create(
          b, loc, tensor({dyn, n, c.headDim}, f32), x2d, re, shape);
    };
    auto linear = [&](Value x, const std::string &name, int64_t out,
                      int64_t in) -> Value {
      return moe::LinearOp::create(b, loc, tensor({dyn, out}, f32), x,
                                   param(pre + name, {out, in}));
    };
    Value x = moe::RMSNormOp::create(
        b, loc, hType, x0, param(pre + "input_layernorm.weight", {c.hidden}),
        eps);
    Value q = heads(
        linear(x, "self_attn.q_proj.weight", c.heads * c.headDim, c.hidden),
        c.heads);
    Value k = heads(
        linear(x, "self_attn.k_proj.weight", c.kvHeads * c.headDim, c.hidden),
        c.kvHeads);
    Value v = heads(
        linear(x, "self_attn.v_proj.weight", c.kvHeads * c.headDim, c.hidden),
        c.kvHeads);
    FloatAttr theta = b.getF32FloatAttr(float(c.theta));
    q = moe::RoPEOp::create(b, loc, q.getType(), q, p, theta);
    k = moe::RoPEOp::create(b, loc, k.getType(), k, p, theta);
    moe::KVCacheOp::create(b, loc, k, v, p, /*head_offset=*/Value(),
                           b.getI64IntegerAttr(i));
    Value attn = moe::AttentionOp::create(
        b, loc, q.getType(), q, k, v, p, p,
        b.getF32FloatAttr(float(1.0 / std::sqrt(double(c.headDim)))));
    SmallVector<ReassociationIndices> re = {{0}, {1, 2}};
    Value flat = tensor::CollapseShapeOp::create(
        b, loc, tensor({dyn, c.heads * c.headDim}, f32), attn, re);
    Value o =
        linear(flat, "self_attn.o_proj.weight", c.hidden, c.heads * c.headDim);
    Value h1 = arith::AddFOp::create(b, loc, x0, o);
    Value x2 = moe::RMSNormOp::create(
        b, loc, hType, h1,
        param(pre + "post_attention_layernorm.weight", {c.hidden}), eps);
    std::string moePre = pre + "block_sparse_moe.";
    auto router = moe::RouterOp::create(
        b, loc, tensor({dyn, c.topK}, f32), tensor({dyn, c.topK}, i64), x2,
        param(moePre + "gate.weight", {c.experts, c.hidden}),
        b.getI64IntegerAttr(c.topK),
        c.renormalize ? b.getUnitAttr() : UnitAttr());
    std::string ex = moePre + "experts.{e}.";
    Value y = moe::ExpertsOp::create(
        b, loc, hType, x2, router.getWeights(), router.getIndices(),
        param(ex + "w1.weight", {c.experts, c.ffn, c.hidden}),
        param(ex + "w2.weight", {c.experts, c.hidden, c.ffn}),
        param(ex + "w3.weight", {c.experts, c.ffn, c.hidden}));
    Value h2 = arith::AddFOp::create(b, loc, h1, y);
    moe::YieldOp::create(b, loc, ValueRange{h2});
    h = layer.getResult(0);
  }
  Value hn = moe::RMSNormOp::create(
      b, fileLoc, hType, h, param("model.norm.weight", {c.hidden}), eps);
  Value headW =
      param(c.tieEmbeddings ? "model.embed_tokens.weight" : "lm_head.weight",
            {c.vocab, c.hidden});
  Value t = tensor::DimOp::create(b, fileLoc, tokens, 0);
  Value last = arith::SubIOp::create(
      b, fileLoc, t, arith::ConstantIndexOp::create(b, fileLoc, 1));
  Value logits = moe::LMHeadOp::create(b, fileLoc, tensor({c.vocab}, f32), hn,
                                       headW, pos, last);
  moe::LogitsOp::create(b, fileLoc, logits, /*valid=*/Value());
  func::ReturnOp::create(b, fileLoc);
  return module;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(
      argc, argv,
      "meshfold-import-hf: a Hugging Face MoE config.json to a moe model\n\n"
      "  meshfold-import-hf config.json -o model.mlir [--num-layers N]\n"
      "  meshfold-import-hf CHECKPOINT_DIR -o model.mlir  (its config.json)\n");
  // A checkpoint folder: its config.json (and generation_config.json beside
  // it).
  if (llvm::sys::fs::is_directory(inputFile)) {
    SmallString<256> config(inputFile.getValue());
    llvm::sys::path::append(config, "config.json");
    if (!llvm::sys::fs::exists(config))
      die(inputFile + ": a checkpoint folder must hold config.json");
    inputFile = std::string(config);
  }
  Config c = readConfig(inputFile);
  if (numLayersOpt.getNumOccurrences() &&
      (numLayersOpt < 1 || numLayersOpt > c.layers))
    die("--num-layers must be between 1 and num_hidden_layers (" +
        llvm::Twine(c.layers) + "), got " + llvm::Twine(numLayersOpt));
  if (numLayersOpt.getNumOccurrences())
    c.layers = numLayersOpt;

  DialectRegistry registry;
  registry.insert<moe::MoEDialect, func::FuncDialect, arith::ArithDialect,
                  tensor::TensorDialect>();
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  OwningOpRef<ModuleOp> module = buildModel(ctx, c, inputFile);
  if (failed(verify(*module)))
    die("internal: the imported model does not verify");

  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> out =
      openOutputFile(outputFile, &error);
  if (!out)
    die(error);
  out->os() << "// " << c.arch << ": " << c.layers << " layers, d " << c.hidden
            << ", " << c.heads << " heads (" << c.kvHeads << " KV, d_h "
            << c.headDim << "), " << c.experts << " experts top-" << c.topK
            << ", ffn " << c.ffn << ", vocab " << c.vocab << "\n";
  module->print(out->os());
  out->keep();
  return 0;
}
