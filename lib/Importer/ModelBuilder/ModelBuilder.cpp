//===- ModelBuilder.cpp - A moe model from a Hugging Face config ----------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Importer/ModelBuilder.h"
#include "meshfold/Dialect/MoE/IR/MoE.h"
#include "meshfold/Importer/HFConfig.h"
#include "meshfold/Support/Manifest.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace mlir;
using namespace meshfold;

namespace {
/// Builds the model of one config, step by step: the module and its
/// `prefill` function, the embedding and positions, each layer (attention,
/// then the MLP or the routed experts), the final norm and the LM head. The
/// ops are created in the order the printed model shows them.
class ModelBuilder {
public:
  ModelBuilder(MLIRContext &ctx, const HFConfig &config, StringRef path)
      : b(&ctx), c(config), fileLoc(FileLineColLoc::get(&ctx, path, 1, 1)),
        loc(fileLoc), f32(b.getF32Type()), i64(b.getI64Type()),
        eps(b.getF32FloatAttr(float(c.eps))) {
    hType = tensor({dyn, c.hidden}, f32);
  }

  /// The whole model: a module holding `prefill(tokens)`.
  ModuleOp build();

private:
  /// A ranked tensor type of `shape` and `elt`.
  RankedTensorType tensor(ArrayRef<int64_t> shape, Type elt) {
    return RankedTensorType::get(shape, elt);
  }
  /// The weight `name` of `shape` (f32).
  Value param(const std::string &name, ArrayRef<int64_t> shape);

  /// The positions of \p tokens and their embeddings (set `pos`).
  Value buildEmbedding(Value tokens);
  /// Layer \p index on the hidden state \p h; returns the layer's result.
  Value buildLayer(int64_t index, Value h);
  /// The final norm and the LM head's logits of the last token.
  void buildHead(Value h, Value tokens);

  /// `x2d` [T, n * d_h] split into heads, [T, n, d_h].
  Value heads(Value x2d, int64_t n);
  /// The current layer's `name`.weight applied to `x`, with `name`.bias
  /// where `bias`.
  Value linear(Value x, const std::string &name, int64_t out, int64_t in,
               bool bias = false);

  /// Standard attention of the normalised input `x`: GQA with the q/k
  /// norms, projection norms, clip_qkv and biases the config asks for,
  /// RoPE, the KV cache and the output projection.
  Value attention(Value x);
  /// OLMoE's clip_qkv on `y` where the config sets it.
  Value clip(Value y);
  /// The q, k or v projection `name` of `n` heads, normalised and clipped
  /// where the architecture does, split into heads.
  Value projection(Value x, StringRef name, int64_t n);

  /// DeepSeek-V3's multi-head latent attention of the normalised input `x`.
  Value latentAttention(Value x);
  /// MLA's query [T, H, nope + rope], through q_a_proj / q_b_proj where the
  /// config has a q_lora_rank, q_proj otherwise.
  Value latentQuery(Value x, int64_t qDim);
  /// `v`'s rows (dim 0) whole, its other dims at `offsets` of `sizes`.
  Value sliceRows(Value v, ArrayRef<int64_t> offsets, ArrayRef<int64_t> sizes);
  /// `v` [rows, n * d] as [rows, n, d] (`rows` its dynamic row count).
  Value expand3(Value v, Value rows, int64_t n, int64_t d);
  /// RoPE on `x`, interleaved and with YaRN where the config says.
  Value rotate(Value x);
  /// Rows `offset` to `offset + size` of each head's [nope + v, r] slice of
  /// the kv_b_proj weight `wkv3` [H, nope + v, r].
  Value weightSlice(Value wkv3, int64_t offset, int64_t size);

  /// A SwiGLU MLP of `ffn` on `x` at `prefix`{gate,up,down}_proj, scaled by
  /// the sigmoid of `gate` (a [1, d] weight's name) where one is named.
  Value mlp(Value x, const std::string &prefix, int64_t ffn,
            const std::string &gate);
  /// The routed experts on `x` (the router's top-k, the experts' weighted
  /// sum) and the shared expert where the config has one.
  Value routedExperts(Value x, const std::string &moePre);

  OpBuilder b;
  const HFConfig &c;
  Location fileLoc;
  /// The current layer: its location, weight prefix, index, token count
  /// and positions.
  Location loc;
  std::string pre;
  int64_t layer = 0;
  Value t, p;
  /// The positions of the tokens (the function's).
  Value pos;
  Type f32, i64;
  int64_t dyn = ShapedType::kDynamic;
  FloatAttr eps;
  /// The hidden state's type, [T, d].
  RankedTensorType hType;
};
} // namespace

Value ModelBuilder::param(const std::string &name, ArrayRef<int64_t> shape) {
  return moe::ParamOp::create(b, b.getUnknownLoc(), tensor(shape, f32),
                              b.getStringAttr(name));
}

ModuleOp ModelBuilder::build() {
  ModuleOp module = ModuleOp::create(fileLoc);
  b.setInsertionPointToEnd(module.getBody());
  if (c.maxPositions > 0)
    module->setAttr(meshfold::getMaxPositionsAttrName(),
                    b.getI64IntegerAttr(c.maxPositions));
  if (!c.eosTokens.empty())
    module->setAttr(meshfold::getEosTokensAttrName(),
                    b.getDenseI64ArrayAttr(c.eosTokens));

  auto fnType = b.getFunctionType({tensor({dyn}, i64)}, {});
  auto fn = func::FuncOp::create(b, fileLoc, "prefill", fnType);
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  Value tokens = entry->getArgument(0);

  Value h = buildEmbedding(tokens);
  for (int64_t i = 0; i < c.layers; ++i)
    h = buildLayer(i, h);
  buildHead(h, tokens);
  return module;
}

Value ModelBuilder::buildEmbedding(Value tokens) {
  pos = moe::PositionsOp::create(b, fileLoc, tensor({dyn}, i64), tokens);
  Value embedW = param("model.embed_tokens.weight", {c.vocab, c.hidden});
  return moe::EmbedOp::create(b, fileLoc, hType, embedW, tokens);
}

Value ModelBuilder::buildLayer(int64_t index, Value h) {
  layer = index;
  pre = "model.layers." + std::to_string(index) + ".";
  loc = NameLoc::get(b.getStringAttr("layer " + std::to_string(index)));
  auto layerOp =
      moe::LayerOp::create(b, loc, index, ValueRange{h, pos}, TypeRange{hType});
  OpBuilder::InsertionGuard guard(b);
  Block *body = &layerOp.getBody().front();
  b.setInsertionPointToStart(body);
  Value x0 = body->getArgument(0);
  p = body->getArgument(1);
  t = tensor::DimOp::create(b, loc, x0, 0);
  Value x = moe::RMSNormOp::create(
      b, loc, hType, x0, param(pre + "input_layernorm.weight", {c.hidden}),
      eps);
  Value h1 = arith::AddFOp::create(b, loc, x0,
                                   c.mla ? latentAttention(x) : attention(x));
  Value x2 = moe::RMSNormOp::create(
      b, loc, hType, h1,
      param(pre + "post_attention_layernorm.weight", {c.hidden}), eps);
  std::string moePre = pre + c.moeBlock + ".";
  // A dense layer: one SwiGLU MLP, no router.
  Value y = c.isDense(index) ? mlp(x2, moePre, c.denseFfn, "")
                             : routedExperts(x2, moePre);
  Value h2 = arith::AddFOp::create(b, loc, h1, y);
  moe::YieldOp::create(b, loc, ValueRange{h2});
  return layerOp.getResult(0);
}

void ModelBuilder::buildHead(Value h, Value tokens) {
  Value hn = moe::RMSNormOp::create(
      b, fileLoc, hType, h, param("model.norm.weight", {c.hidden}), eps);
  Value headW =
      param(c.tieEmbeddings ? "model.embed_tokens.weight" : "lm_head.weight",
            {c.vocab, c.hidden});
  Value tokenCount = tensor::DimOp::create(b, fileLoc, tokens, 0);
  Value last = arith::SubIOp::create(
      b, fileLoc, tokenCount, arith::ConstantIndexOp::create(b, fileLoc, 1));
  Value logits = moe::LMHeadOp::create(b, fileLoc, tensor({c.vocab}, f32), hn,
                                       headW, pos, last);
  moe::LogitsOp::create(b, fileLoc, logits, /*valid=*/Value());
  func::ReturnOp::create(b, fileLoc);
}

Value ModelBuilder::heads(Value x2d, int64_t n) {
  SmallVector<ReassociationIndices> re = {{0}, {1, 2}};
  SmallVector<OpFoldResult> shape = {t, b.getIndexAttr(n),
                                     b.getIndexAttr(c.headDim)};
  return tensor::ExpandShapeOp::create(b, loc, tensor({dyn, n, c.headDim}, f32),
                                       x2d, re, shape);
}

Value ModelBuilder::linear(Value x, const std::string &name, int64_t out,
                           int64_t in, bool bias) {
  Value w = param(pre + name + ".weight", {out, in});
  Value bv = bias ? param(pre + name + ".bias", {out}) : Value();
  return moe::LinearOp::create(b, loc, tensor({dyn, out}, f32), x, w, bv);
}

//===----------------------------------------------------------------------===//
// Standard attention
//===----------------------------------------------------------------------===//

Value ModelBuilder::clip(Value y) {
  // OLMoE's clip_qkv: every element of q, k (normalised) and v clamped.
  if (c.clipQKV <= 0)
    return y;
  return moe::ClipOp::create(b, loc, y, b.getF32FloatAttr(float(c.clipQKV)));
}

Value ModelBuilder::projection(Value x, StringRef name, int64_t n) {
  // q and k, normalised over the whole projection where the
  // architecture does (OLMoE), then split into heads.
  Value y = linear(x, ("self_attn." + name + "_proj").str(), n * c.headDim,
                   c.hidden, c.qkvBias);
  if (c.qkProjectionNorm)
    y = moe::RMSNormOp::create(
        b, loc, y.getType(), y,
        param(pre + "self_attn." + name.str() + "_norm.weight",
              {n * c.headDim}),
        eps);
  return heads(clip(y), n);
}

Value ModelBuilder::attention(Value x) {
  Value q = projection(x, "q", c.heads);
  Value k = projection(x, "k", c.kvHeads);
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
                         b.getI64IntegerAttr(layer));
  Value attn = moe::AttentionOp::create(
      b, loc, q.getType(), q, k, v, p, p, /*key_tiles=*/Value(),
      b.getF32FloatAttr(float(1.0 / std::sqrt(double(c.headDim)))));
  SmallVector<ReassociationIndices> re = {{0}, {1, 2}};
  Value flat = tensor::CollapseShapeOp::create(
      b, loc, tensor({dyn, c.heads * c.headDim}, f32), attn, re);
  return linear(flat, "self_attn.o_proj", c.hidden, c.heads * c.headDim);
}

//===----------------------------------------------------------------------===//
// Multi-head latent attention (DeepSeek-V3)
//===----------------------------------------------------------------------===//

Value ModelBuilder::sliceRows(Value v, ArrayRef<int64_t> offsets,
                              ArrayRef<int64_t> sizes) {
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
      b, loc, RankedTensorType::get(shape, type.getElementType()), v, off, sz,
      st);
}

Value ModelBuilder::expand3(Value v, Value rows, int64_t n, int64_t d) {
  auto type = cast<RankedTensorType>(v.getType());
  SmallVector<ReassociationIndices> re = {{0}, {1, 2}};
  SmallVector<OpFoldResult> shape = {
      type.isDynamicDim(0) ? OpFoldResult(rows)
                           : OpFoldResult(b.getIndexAttr(type.getDimSize(0))),
      b.getIndexAttr(n), b.getIndexAttr(d)};
  return tensor::ExpandShapeOp::create(
      b, loc,
      RankedTensorType::get({type.getDimSize(0), n, d}, type.getElementType()),
      v, re, shape);
}

Value ModelBuilder::rotate(Value x) {
  // RoPE, interleaved and with YaRN where the config says.
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
}

Value ModelBuilder::weightSlice(Value wkv3, int64_t offset, int64_t size) {
  int64_t r = c.kvLoraRank;
  SmallVector<OpFoldResult> off = {b.getIndexAttr(0), b.getIndexAttr(offset),
                                   b.getIndexAttr(0)},
                            sz = {b.getIndexAttr(c.heads), b.getIndexAttr(size),
                                  b.getIndexAttr(r)},
                            st(3, b.getIndexAttr(1));
  return tensor::ExtractSliceOp::create(b, loc, tensor({c.heads, size, r}, f32),
                                        wkv3, off, sz, st);
}

Value ModelBuilder::latentQuery(Value x, int64_t qDim) {
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
  return expand3(qf, t, c.heads, qDim);
}

Value ModelBuilder::latentAttention(Value x) {
  // DeepSeek-V3's MLA, run in the latent space: each token's keys and
  // values are one latent [kv_lora_rank] (normalised) and one RoPE key
  // [qk_rope_head_dim] that all heads share; a query head's no-RoPE part
  // is absorbed into the latent through its slice W_UK of kv_b_proj, so
  // attention is multi-query over the latent (one KV head of
  // kv_lora_rank + qk_rope_head_dim, that latent its key and value), and
  // each head's output is brought back to v_head_dim through W_UV. The
  // KV cache holds the latent, not per-head K and V.
  int64_t nope = c.qkNopeDim, rope = c.qkRopeDim, r = c.kvLoraRank,
          qDim = nope + rope;
  Value q3 = latentQuery(x, qDim);
  Value qNope = sliceRows(q3, {0, 0}, {c.heads, nope});
  Value qRope = sliceRows(q3, {0, nope}, {c.heads, rope});
  // The latent [T, r] (normalised) and the shared RoPE key [T, rope].
  Value kva = linear(x, "self_attn.kv_a_proj_with_mqa", r + rope, c.hidden);
  // (The norm's weight is created before the latent's slice: the order of
  // the printed model.)
  Value latentNormW = param(pre + "self_attn.kv_a_layernorm.weight", {r});
  Value latent =
      moe::RMSNormOp::create(b, loc, tensor({dyn, r}, f32),
                             sliceRows(kva, {0}, {r}), latentNormW, eps);
  Value kRope = expand3(sliceRows(kva, {r}, {rope}), t, 1, rope);
  qRope = rotate(qRope);
  kRope = rotate(kRope);
  // kv_b_proj per head: W_UK [H, nope, r] and W_UV [H, v, r].
  Value wkv = param(pre + "self_attn.kv_b_proj.weight",
                    {c.heads * (nope + c.vHeadDim), r});
  Value wkv3 = tensor::ExpandShapeOp::create(
      b, loc, tensor({c.heads, nope + c.vHeadDim, r}, f32), wkv,
      SmallVector<ReassociationIndices>{{0, 1}, {2}});
  Value wUK = weightSlice(wkv3, 0, nope),
        wUV = weightSlice(wkv3, nope, c.vHeadDim);
  // q in the latent space: [q_nope W_UK, q_rope], [T, H, r + rope].
  Value qLatent = moe::HeadLinearOp::create(
      b, loc, tensor({dyn, c.heads, r}, f32), qNope, wUK,
      /*transpose_weight=*/b.getUnitAttr());
  Value q = tensor::ConcatOp::create(b, loc, 2, ValueRange{qLatent, qRope});
  // The cached key and value: [latent, RoPE key], [T, 1, r + rope].
  Value kv = tensor::ConcatOp::create(
      b, loc, 2, ValueRange{expand3(latent, t, 1, r), kRope});
  moe::KVCacheOp::create(b, loc, kv, kv, p, /*head_offset=*/Value(),
                         b.getI64IntegerAttr(layer));
  // Scores scaled as the per-head form's: by 1/sqrt(nope + rope), and
  // YaRN's mscale squared.
  Value attn = moe::AttentionOp::create(
      b, loc, q.getType(), q, kv, kv, p, p, /*key_tiles=*/Value(),
      b.getF32FloatAttr(float(c.softmaxScale / std::sqrt(double(qDim)))));
  Value values = moe::HeadLinearOp::create(
      b, loc, tensor({dyn, c.heads, c.vHeadDim}, f32),
      sliceRows(attn, {0, 0}, {c.heads, r}), wUV, UnitAttr());
  Value flat = tensor::CollapseShapeOp::create(
      b, loc, tensor({dyn, c.heads * c.vHeadDim}, f32), values,
      SmallVector<ReassociationIndices>{{0}, {1, 2}});
  return linear(flat, "self_attn.o_proj", c.hidden, c.heads * c.vHeadDim);
}

//===----------------------------------------------------------------------===//
// MLP and experts
//===----------------------------------------------------------------------===//

Value ModelBuilder::mlp(Value x, const std::string &prefix, int64_t ffn,
                        const std::string &gate) {
  Value w1 = param(prefix + "gate_proj.weight", {ffn, c.hidden});
  Value w2 = param(prefix + "down_proj.weight", {c.hidden, ffn});
  Value w3 = param(prefix + "up_proj.weight", {ffn, c.hidden});
  Value g = gate.empty() ? Value() : param(gate, {1, c.hidden});
  return moe::MLPOp::create(b, loc, hType, x, w1, w2, w3, g);
}

Value ModelBuilder::routedExperts(Value x, const std::string &moePre) {
  Value gateW = param(moePre + "gate.weight", {c.experts, c.hidden});
  Value bias = c.sigmoidRouting
                   ? param(moePre + "gate.e_score_correction_bias", {c.experts})
                   : Value();
  // Group-limited sigmoid routing (DeepSeek-V3) where the config asks for
  // it; the attributes at their defaults otherwise.
  auto router = moe::RouterOp::create(
      b, loc, tensor({dyn, c.topK}, f32), tensor({dyn, c.topK}, i64), x, gateW,
      bias, b.getI64IntegerAttr(c.topK),
      c.renormalize ? b.getUnitAttr() : UnitAttr(),
      c.sigmoidRouting ? b.getUnitAttr() : UnitAttr(),
      c.nGroup > 1 ? b.getI64IntegerAttr(c.nGroup) : IntegerAttr(),
      c.topkGroup > 1 ? b.getI64IntegerAttr(c.topkGroup) : IntegerAttr(),
      c.routedScaling != 1.0 ? b.getF32FloatAttr(float(c.routedScaling))
                             : FloatAttr());
  // The experts' weights, created up, down, gate: the order of the printed
  // model.
  std::string ex = moePre + "experts.{e}.";
  Value up = param(ex + c.expertUp + ".weight", {c.experts, c.ffn, c.hidden});
  Value down =
      param(ex + c.expertDown + ".weight", {c.experts, c.hidden, c.ffn});
  Value gate =
      param(ex + c.expertGate + ".weight", {c.experts, c.ffn, c.hidden});
  Value y = moe::ExpertsOp::create(b, loc, hType, x, router.getWeights(),
                                   router.getIndices(), gate, down, up);
  if (c.sharedFfn > 0) {
    // The shared expert sees every token, scaled by its sigmoid gate
    // where it has one.
    Value shared = mlp(x, moePre + c.sharedName + ".", c.sharedFfn,
                       c.sharedGate ? moePre + "shared_expert_gate.weight"
                                    : std::string());
    y = arith::AddFOp::create(b, loc, y, shared);
  }
  return y;
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

OwningOpRef<ModuleOp> meshfold::buildMoEModel(MLIRContext &ctx,
                                              const HFConfig &config,
                                              StringRef path) {
  ctx.loadDialect<moe::MoEDialect, func::FuncDialect, arith::ArithDialect,
                  tensor::TensorDialect>();
  OwningOpRef<ModuleOp> module = ModelBuilder(ctx, config, path).build();
  if (failed(verify(*module)))
    return nullptr;
  return module;
}

std::string meshfold::describeModel(const HFConfig &c) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << c.arch << ": " << c.layers << " layers, d " << c.hidden << ", "
     << c.heads << " heads (";
  if (c.mla)
    os << "MLA: latent " << c.kvLoraRank << " + RoPE key " << c.qkRopeDim
       << ", q_lora " << c.qLoraRank << ", nope " << c.qkNopeDim << ", v "
       << c.vHeadDim;
  else
    os << c.kvHeads << " KV, d_h " << c.headDim;
  os << "), " << c.experts << " experts top-" << c.topK;
  if (c.nGroup > 1)
    os << " (" << c.topkGroup << " of " << c.nGroup << " groups)";
  os << ", ffn " << c.ffn;
  if (c.yarnFactor != 1.0)
    os << ", YaRN x" << llvm::format("%g", c.yarnFactor);
  if (c.sharedFfn > 0)
    os << ", shared expert ffn " << c.sharedFfn;
  int64_t dense = 0;
  for (int64_t i = 0; i < c.layers; ++i)
    dense += c.isDense(i);
  if (dense > 0)
    os << ", " << dense << " dense layers (ffn " << c.denseFfn << ")";
  os << ", vocab " << c.vocab;
  return text;
}
