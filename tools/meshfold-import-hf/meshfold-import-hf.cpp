//===- meshfold-import-hf.cpp - HF config.json to a moe model -------------===//
//
// meshfold-import-hf CONFIG.json -o model.mlir [--num-layers N]
//
// Reads a Hugging Face config of a supported MoE architecture (Mixtral,
// Qwen3-MoE, OLMoE, Qwen2-MoE, DeepSeek-V3; MeshfoldImporter's HFConfig) and
// writes the model as `moe` ops on global shapes, weights named as in that
// architecture's checkpoint.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/MoE/IR/MoE.h"
#include "meshfold/Importer/HFConfig.h"
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
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <cmath>
#include <cstdio>

using namespace mlir;
using namespace meshfold;
namespace cl = llvm::cl;

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

ModuleOp buildModel(MLIRContext &ctx, const HFConfig &c, StringRef path) {
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
    // `name`.weight, and `name`.bias where `bias`.
    auto linear = [&](Value x, const std::string &name, int64_t out, int64_t in,
                      bool bias = false) -> Value {
      Value w = param(pre + name + ".weight", {out, in});
      Value bv = bias ? param(pre + name + ".bias", {out}) : Value();
      return moe::LinearOp::create(b, loc, tensor({dyn, out}, f32), x, w, bv);
    };
    Value x = moe::RMSNormOp::create(
        b, loc, hType, x0, param(pre + "input_layernorm.weight", {c.hidden}),
        eps);
    auto attention = [&]() -> Value {
      // OLMoE's clip_qkv: every element of q, k (normalised) and v clamped.
      auto clip = [&](Value y) -> Value {
        if (c.clipQKV <= 0)
          return y;
        return moe::ClipOp::create(b, loc, y,
                                   b.getF32FloatAttr(float(c.clipQKV)));
      };
      // q and k, normalised over the whole projection where the
      // architecture does (OLMoE), then split into heads.
      auto projection = [&](StringRef name, int64_t n) -> Value {
        Value y = linear(x, ("self_attn." + name + "_proj").str(),
                         n * c.headDim, c.hidden, c.qkvBias);
        if (c.qkProjectionNorm)
          y = moe::RMSNormOp::create(
              b, loc, y.getType(), y,
              param(pre + "self_attn." + name.str() + "_norm.weight",
                    {n * c.headDim}),
              eps);
        return heads(clip(y), n);
      };
      Value q = projection("q", c.heads);
      Value k = projection("k", c.kvHeads);
      Value v = heads(clip(linear(x, "self_attn.v_proj", c.kvHeads * c.headDim,
                                  c.hidden, c.qkvBias)),
                      c.kvHeads);
      if (c.qkNorm) {
        // Each head's q and k normalised on its own (one [d_h] weight each).
        q = moe::RMSNormOp::create(
            b, loc, q.getType(), q,
            param(pre + "self_attn.q_norm.weight", {c.headDim}), eps);
        k = moe::RMSNormOp::create(
            b, loc, k.getType(), k,
            param(pre + "self_attn.k_norm.weight", {c.headDim}), eps);
      }
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
      Value o = linear(flat, "self_attn.o_proj", c.hidden, c.heads * c.headDim);
      return o;
    };
    // DeepSeek-V3's MLA, run in the latent space: each token's keys and
    // values are one latent [kv_lora_rank] (normalised) and one RoPE key
    // [qk_rope_head_dim] that all heads share; a query head's no-RoPE part
    // is absorbed into the latent through its slice W_UK of kv_b_proj, so
    // attention is multi-query over the latent (one KV head of
    // kv_lora_rank + qk_rope_head_dim, that latent its key and value), and
    // each head's output is brought back to v_head_dim through W_UV. The
    // KV cache holds the latent, not per-head K and V.
    auto latentAttention = [&]() -> Value {
      int64_t nope = c.qkNopeDim, rope = c.qkRopeDim, r = c.kvLoraRank,
              qDim = nope + rope;
      auto slice = [&](Value v, ArrayRef<int64_t> offsets,
                       ArrayRef<int64_t> sizes) -> Value {
        // Rows (dim 0) whole; the other dims as given.
        auto type = cast<RankedTensorType>(v.getType());
        SmallVector<OpFoldResult> off = {b.getIndexAttr(0)}, sz, st;
        SmallVector<int64_t> shape = {type.getDimSize(0)};
        sz.push_back(type.isDynamicDim(0)
                         ? OpFoldResult(tensor::DimOp::create(b, loc, v, 0))
                         : OpFoldResult(b.getIndexAttr(type.getDimSize(0))));
        for (auto [o, n] : llvm::zip(offsets, sizes)) {
          off.push_back(b.getIndexAttr(o));
          sz.push_back(b.getIndexAttr(n));
          shape.push_back(n);
        }
        st.assign(off.size(), b.getIndexAttr(1));
        return tensor::ExtractSliceOp::create(
            b, loc, RankedTensorType::get(shape, type.getElementType()), v, off,
            sz, st);
      };
      auto expand3 = [&](Value v, Value rows, int64_t n, int64_t d) -> Value {
        auto type = cast<RankedTensorType>(v.getType());
        SmallVector<ReassociationIndices> re = {{0}, {1, 2}};
        SmallVector<OpFoldResult> shape = {
            type.isDynamicDim(0)
                ? OpFoldResult(rows)
                : OpFoldResult(b.getIndexAttr(type.getDimSize(0))),
            b.getIndexAttr(n), b.getIndexAttr(d)};
        return tensor::ExpandShapeOp::create(
            b, loc,
            RankedTensorType::get({type.getDimSize(0), n, d},
                                  type.getElementType()),
            v, re, shape);
      };
      // The query [T, H, nope + rope].
      Value qf;
      if (c.qLoraRank > 0) {
        Value qa = linear(x, "self_attn.q_a_proj", c.qLoraRank, c.hidden);
        qa = moe::RMSNormOp::create(
            b, loc, qa.getType(), qa,
            param(pre + "self_attn.q_a_layernorm.weight", {c.qLoraRank}), eps);
        qf = linear(qa, "self_attn.q_b_proj", c.heads * qDim, c.qLoraRank);
      } else {
        qf = linear(x, "self_attn.q_proj", c.heads * qDim, c.hidden);
      }
      Value q3 = expand3(qf, t, c.heads, qDim);
      Value qNope = slice(q3, {0, 0}, {c.heads, nope});
      Value qRope = slice(q3, {0, nope}, {c.heads, rope});
      // The latent [T, r] (normalised) and the shared RoPE key [T, rope].
      Value kva = linear(x, "self_attn.kv_a_proj_with_mqa", r + rope, c.hidden);
      Value latent = moe::RMSNormOp::create(
          b, loc, tensor({dyn, r}, f32), slice(kva, {0}, {r}),
          param(pre + "self_attn.kv_a_layernorm.weight", {r}), eps);
      Value kRope = expand3(slice(kva, {r}, {rope}), t, 1, rope);
      // RoPE, interleaved and with YaRN where the config says.
      auto rotate = [&](Value x) -> Value {
        bool yarn = c.yarnFactor != 1.0;
        auto f32Attr = [&](bool set, double v) {
          return set ? b.getF32FloatAttr(float(v)) : FloatAttr();
        };
        return moe::RoPEOp::create(
            b, loc, x.getType(), x, p, b.getF32FloatAttr(float(c.theta)),
            c.ropeInterleave ? b.getUnitAttr() : UnitAttr(),
            f32Attr(yarn, c.yarnFactor), f32Attr(yarn, c.yarnLow),
            f32Attr(yarn, c.yarnHigh),
            f32Attr(c.attentionFactor != 1.0, c.attentionFactor));
      };
      qRope = rotate(qRope);
      kRope = rotate(kRope);
      // kv_b_proj per head: W_UK [H, nope, r] and W_UV [H, v, r].
      Value wkv = param(pre + "self_attn.kv_b_proj.weight",
                        {c.heads * (nope + c.vHeadDim), r});
      Value wkv3 = tensor::ExpandShapeOp::create(
          b, loc, tensor({c.heads, nope + c.vHeadDim, r}, f32), wkv,
          SmallVector<ReassociationIndices>{{0, 1}, {2}});
      auto weightSlice = [&](int64_t offset, int64_t size) -> Value {
        SmallVector<OpFoldResult> off = {b.getIndexAttr(0),
                                         b.getIndexAttr(offset),
                                         b.getIndexAttr(0)},
                                  sz = {b.getIndexAttr(c.heads),
                                        b.getIndexAttr(size),
                                        b.getIndexAttr(r)},
                                  st(3, b.getIndexAttr(1));
        return tensor::ExtractSliceOp::create(
            b, loc, tensor({c.heads, size, r}, f32), wkv3, off, sz, st);
      };
      Value wUK = weightSlice(0, nope), wUV = weightSlice(nope, c.vHeadDim);
      // q in the latent space: [q_nope W_UK, q_rope], [T, H, r + rope].
      Value qLatent = moe::HeadLinearOp::create(
          b, loc, tensor({dyn, c.heads, r}, f32), qNope, wUK,
          /*transpose_weight=*/b.getUnitAttr());
      Value q = tensor::ConcatOp::create(b, loc, 2, ValueRange{qLatent, qRope});
      // The cached key and value: [latent, RoPE key], [T, 1, r + rope].
      Value kv = tensor::ConcatOp::create(
          b, loc, 2, ValueRange{expand3(latent, t, 1, r), kRope});
      moe::KVCacheOp::create(b, loc, kv, kv, p, /*head_offset=*/Value(),
                             b.getI64IntegerAttr(i));
      // Scores scaled as the per-head form's: by 1/sqrt(nope + rope), and
      // YaRN's mscale squared.
      Value attn = moe::AttentionOp::create(
          b, loc, q.getType(), q, kv, kv, p, p,
          b.getF32FloatAttr(float(c.softmaxScale / std::sqrt(double(qDim)))));
      Value values = moe::HeadLinearOp::create(
          b, loc, tensor({dyn, c.heads, c.vHeadDim}, f32),
          slice(attn, {0, 0}, {c.heads, r}), wUV, UnitAttr());
      Value flat = tensor::CollapseShapeOp::create(
          b, loc, tensor({dyn, c.heads * c.vHeadDim}, f32), values,
          SmallVector<ReassociationIndices>{{0}, {1, 2}});
      return linear(flat, "self_attn.o_proj", c.hidden, c.heads * c.vHeadDim);
    };
    Value h1 = arith::AddFOp::create(b, loc, x0,
                                     c.mla ? latentAttention() : attention());
    Value x2 = moe::RMSNormOp::create(
        b, loc, hType, h1,
        param(pre + "post_attention_layernorm.weight", {c.hidden}), eps);
    std::string moePre = pre + c.moeBlock + ".";
    // A SwiGLU MLP of `ffn` at `prefix`{gate,up,down}_proj, scaled by the
    // sigmoid of `gate` (a [1, d] weight's name) where one is named.
    auto mlp = [&](const std::string &prefix, int64_t ffn,
                   const std::string &gate) -> Value {
      Value w1 = param(prefix + "gate_proj.weight", {ffn, c.hidden});
      Value w2 = param(prefix + "down_proj.weight", {c.hidden, ffn});
      Value w3 = param(prefix + "up_proj.weight", {ffn, c.hidden});
      Value g = gate.empty() ? Value() : param(gate, {1, c.hidden});
      return moe::MLPOp::create(b, loc, hType, x2, w1, w2, w3, g);
    };
    if (c.isDense(i)) {
      // A dense layer: one SwiGLU MLP, no router.
      Value y = mlp(moePre, c.denseFfn, "");
      moe::YieldOp::create(b, loc,
                           ValueRange{arith::AddFOp::create(b, loc, h1, y)});
      h = layer.getResult(0);
      continue;
    }
    Value gateW = param(moePre + "gate.weight", {c.experts, c.hidden});
    Value bias =
        c.sigmoidRouting
            ? param(moePre + "gate.e_score_correction_bias", {c.experts})
            : Value();
    // Group-limited sigmoid routing (DeepSeek-V3) where the config asks for
    // it; the attributes at their defaults otherwise.
    auto router = moe::RouterOp::create(
        b, loc, tensor({dyn, c.topK}, f32), tensor({dyn, c.topK}, i64), x2,
        gateW, bias, b.getI64IntegerAttr(c.topK),
        c.renormalize ? b.getUnitAttr() : UnitAttr(),
        c.sigmoidRouting ? b.getUnitAttr() : UnitAttr(),
        c.nGroup > 1 ? b.getI64IntegerAttr(c.nGroup) : IntegerAttr(),
        c.topkGroup > 1 ? b.getI64IntegerAttr(c.topkGroup) : IntegerAttr(),
        c.routedScaling != 1.0 ? b.getF32FloatAttr(float(c.routedScaling))
                               : FloatAttr());
    std::string ex = moePre + "experts.{e}.";
    Value y = moe::ExpertsOp::create(
        b, loc, hType, x2, router.getWeights(), router.getIndices(),
        param(ex + c.expertGate + ".weight", {c.experts, c.ffn, c.hidden}),
        param(ex + c.expertDown + ".weight", {c.experts, c.hidden, c.ffn}),
        param(ex + c.expertUp + ".weight", {c.experts, c.ffn, c.hidden}));
    if (c.sharedFfn > 0) {
      // The shared expert sees every token, scaled by its sigmoid gate
      // where it has one.
      Value shared = mlp(moePre + c.sharedName + ".", c.sharedFfn,
                         c.sharedGate ? moePre + "shared_expert_gate.weight"
                                      : std::string());
      y = arith::AddFOp::create(b, loc, y, shared);
    }
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
  HFConfig c;
  std::string error;
  if (!readHFConfig(inputFile, c, error))
    die(error);
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

  std::unique_ptr<llvm::ToolOutputFile> out =
      openOutputFile(outputFile, &error);
  if (!out)
    die(error);
  out->os() << "// " << c.arch << ": " << c.layers << " layers, d " << c.hidden
            << ", " << c.heads << " heads (";
  if (c.mla)
    out->os() << "MLA: latent " << c.kvLoraRank << " + RoPE key " << c.qkRopeDim
              << ", q_lora " << c.qLoraRank << ", nope " << c.qkNopeDim
              << ", v " << c.vHeadDim;
  else
    out->os() << c.kvHeads << " KV, d_h " << c.headDim;
  out->os() << "), " << c.experts << " experts top-" << c.topK;
  if (c.nGroup > 1)
    out->os() << " (" << c.topkGroup << " of " << c.nGroup << " groups)";
  out->os() << ", ffn " << c.ffn;
  if (c.yarnFactor != 1.0)
    out->os() << ", YaRN x" << llvm::format("%g", c.yarnFactor);
  if (c.sharedFfn > 0)
    out->os() << ", shared expert ffn " << c.sharedFfn;
  int64_t dense = 0;
  for (int64_t i = 0; i < c.layers; ++i)
    dense += c.isDense(i);
  if (dense > 0)
    out->os() << ", " << dense << " dense layers (ffn " << c.denseFfn << ")";
  out->os() << ", vocab " << c.vocab << "\n";
  module->print(out->os());
  out->keep();
  return 0;
}
