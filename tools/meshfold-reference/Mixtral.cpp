//===- Mixtral.cpp - Mixtral, Qwen2-MoE, Qwen3-MoE and OLMoE --------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The architectures with Mixtral's layer: GQA attention with rotate-half
// RoPE, then the MoE (FeedForward.cpp). Their variants: Qwen3-MoE's q and k
// RMS-normalised per head before RoPE, OLMoE's q and k projections
// RMS-normalised whole (and clip_qkv), Qwen2-MoE's biased q/k/v projections
// and gated shared expert, and the Qwen models' dense layers.
//
//===----------------------------------------------------------------------===//

#include "Reference.h"

#include <cmath>

using namespace llvm;
using namespace meshfold::reference;

//===----------------------------------------------------------------------===//
// config.json
//===----------------------------------------------------------------------===//

/// Qwen2-MoE's shared expert (required) and qkv_bias; a shared expert is
/// refused for other architectures but DeepSeek-V3 (its own fields).
static bool readSharedExpert(ConfigReader &reader, const Architecture &arch,
                             bool moeIntermediate, Config &config) {
  if (!arch.qwen2) {
    if (reader.isPresent("shared_expert_intermediate_size") &&
        reader.object().getInteger("shared_expert_intermediate_size") != 0)
      return reader.error("field 'shared_expert_intermediate_size': shared "
                          "experts are supported for Qwen2-MoE only");
    return true;
  }
  std::optional<int64_t> shared;
  if (!reader.optionalInt("shared_expert_intermediate_size", shared))
    return false;
  if (!shared)
    return reader.error("missing field 'shared_expert_intermediate_size' "
                        "(Qwen2-MoE's shared expert)");
  if (!reader.positive("shared_expert_intermediate_size", *shared,
                       config.sharedFfn))
    return false;
  config.qkvBias = true;
  if (!reader.optionalBool("qkv_bias", config.qkvBias))
    return false;
  if (!moeIntermediate)
    return reader.error("missing field 'moe_intermediate_size' "
                        "(Qwen2-MoE's experts' width)");
  return true;
}

/// Dense layers, as transformers' Qwen2-MoE and Qwen3-MoE pick them
/// (mlp_only_layers, decoder_sparse_step); refused for other architectures.
static bool readDenseLayers(ConfigReader &reader, const Architecture &arch,
                            int64_t numHiddenLayers, Config &config) {
  const json::Object &object = reader.object();
  if (!arch.qwen2 && !arch.qwen3) {
    if (std::optional<int64_t> step = object.getInteger("decoder_sparse_step");
        step && *step != 1)
      return reader.error("field 'decoder_sparse_step' is not supported "
                          "(dense layers)");
    if (const json::Array *only = object.getArray("mlp_only_layers");
        only && !only->empty())
      return reader.error("field 'mlp_only_layers' is not supported (dense "
                          "layers)");
    return true;
  }
  const json::Array *only = object.getArray("mlp_only_layers");
  if (reader.isPresent("mlp_only_layers") && !only)
    return reader.error("field 'mlp_only_layers' must list layer numbers "
                        "below num_hidden_layers");
  if (only)
    for (const json::Value &v : *only) {
      std::optional<int64_t> i = v.getAsInteger();
      if (!i || *i < 0 || *i >= numHiddenLayers)
        return reader.error("field 'mlp_only_layers' must list layer numbers "
                            "below num_hidden_layers");
      config.mlpOnlyLayers.push_back(*i);
    }
  std::optional<int64_t> step;
  if (!reader.optionalInt("decoder_sparse_step", step))
    return false;
  if (step && !reader.positive("decoder_sparse_step", *step, config.sparseStep))
    return false;
  bool anyDense = false;
  for (int64_t i = 0; i < numHiddenLayers; ++i)
    anyDense |= config.dense(i);
  return !anyDense ||
         reader.requiredPositive("intermediate_size", config.denseFfn);
}

bool meshfold::reference::readMixtralFamilyFields(ConfigReader &reader,
                                                  const Architecture &arch,
                                                  int64_t numHiddenLayers,
                                                  bool moeIntermediate,
                                                  Config &config) {
  // Defaults that differ by architecture: Mixtral renormalises the top-k
  // weights and uses theta 1e6; Qwen2-MoE (HF Qwen2MoeConfig) uses 1e4 and
  // does not renormalise.
  // Qwen3-MoE (HF Qwen3MoeConfig) likewise, with eps 1e-6, per-head q/k
  // norms and its own weight names.
  // OLMoE (HF OlmoeConfig) too, with q/k norms over the projections.
  if (arch.mixtralFamily()) {
    config.ropeTheta = 10000.0;
    config.normTopKProb = false;
  }
  return readSharedExpert(reader, arch, moeIntermediate, config) &&
         readDenseLayers(reader, arch, numHiddenLayers, config);
}

bool meshfold::reference::readMixtralFamilyAttention(ConfigReader &reader,
                                                     const Architecture &arch,
                                                     Config &config) {
  if (arch.mixtralFamily()) {
    config.qkNorm = arch.qwen3;
    config.qkProjectionNorm = arch.olmoe;
    config.useMlpNames();
  }
  if (arch.qwen3 || arch.qwen2)
    config.rmsNormEps = 1e-6;
  if (!reader.isPresent("clip_qkv"))
    return true;
  if (!arch.olmoe)
    return reader.error("field 'clip_qkv' is not supported");
  if (!reader.optionalNumber("clip_qkv", config.clipQKV))
    return false;
  if (!(config.clipQKV > 0) || !std::isfinite(config.clipQKV))
    return reader.error("field 'clip_qkv' must be a positive number");
  return true;
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

bool meshfold::reference::checkAttentionWeights(const Config &c,
                                                Weights &weights,
                                                int64_t layer) {
  int64_t d = c.hidden, qDim = c.numHeads * c.headDim,
          kvDim = c.numKVHeads * c.headDim;
  return weights.check(layerName(layer, "self_attn.q_proj.weight"),
                       {qDim, d}) &&
         weights.check(layerName(layer, "self_attn.k_proj.weight"),
                       {kvDim, d}) &&
         weights.check(layerName(layer, "self_attn.v_proj.weight"),
                       {kvDim, d}) &&
         weights.check(layerName(layer, "self_attn.o_proj.weight"), {d, qDim});
}

bool meshfold::reference::checkQKNormsAndBiases(const Config &c,
                                                Weights &weights,
                                                int64_t layer) {
  int64_t qDim = c.numHeads * c.headDim, kvDim = c.numKVHeads * c.headDim;
  // q/k norms: per head ([d_h]) or over the whole projection.
  if ((c.qkNorm || c.qkProjectionNorm) &&
      (!weights.check(layerName(layer, "self_attn.q_norm.weight"),
                      {c.qkNorm ? c.headDim : qDim}) ||
       !weights.check(layerName(layer, "self_attn.k_norm.weight"),
                      {c.qkNorm ? c.headDim : kvDim})))
    return false;
  return !c.qkvBias ||
         (weights.check(layerName(layer, "self_attn.q_proj.bias"), {qDim}) &&
          weights.check(layerName(layer, "self_attn.k_proj.bias"), {kvDim}) &&
          weights.check(layerName(layer, "self_attn.v_proj.bias"), {kvDim}));
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

namespace {
/// One layer's attention weights, loaded once for every request.
struct AttentionWeights {
  std::vector<float> norm, wq, wk, wv, wo;
  std::vector<float> qBias, kBias, vBias; ///< Qwen2-MoE
  std::vector<float> qNorm, kNorm;        ///< Qwen3-MoE, OLMoE
};
} // namespace

static bool loadAttention(const Config &c, int64_t layer, Weights &weights,
                          AttentionWeights &w) {
  if (!weights.load(layerName(layer, "input_layernorm.weight"), w.norm) ||
      !weights.load(layerName(layer, "self_attn.q_proj.weight"), w.wq) ||
      !weights.load(layerName(layer, "self_attn.k_proj.weight"), w.wk) ||
      !weights.load(layerName(layer, "self_attn.v_proj.weight"), w.wv) ||
      !weights.load(layerName(layer, "self_attn.o_proj.weight"), w.wo))
    return false;
  if (c.qkvBias &&
      (!weights.load(layerName(layer, "self_attn.q_proj.bias"), w.qBias) ||
       !weights.load(layerName(layer, "self_attn.k_proj.bias"), w.kBias) ||
       !weights.load(layerName(layer, "self_attn.v_proj.bias"), w.vBias)))
    return false;
  return !(c.qkNorm || c.qkProjectionNorm) ||
         (weights.load(layerName(layer, "self_attn.q_norm.weight"), w.qNorm) &&
          weights.load(layerName(layer, "self_attn.k_norm.weight"), w.kNorm));
}

/// q, k and v of one request's normalised hidden states \p x ([T, d]): the
/// projections, their biases, q/k norms and clipping, before RoPE.
static void projectQKV(const Config &c, const AttentionWeights &w,
                       const std::vector<float> &x, int64_t T,
                       std::vector<float> &q, std::vector<float> &k,
                       std::vector<float> &v) {
  int64_t d = c.hidden, qDim = c.numHeads * c.headDim,
          kvDim = c.numKVHeads * c.headDim;
  q.resize(static_cast<size_t>(T * qDim));
  k.resize(static_cast<size_t>(T * kvDim));
  v.resize(static_cast<size_t>(T * kvDim));
  linear(x.data(), T, d, w.wq.data(), qDim, q.data());
  linear(x.data(), T, d, w.wk.data(), kvDim, k.data());
  linear(x.data(), T, d, w.wv.data(), kvDim, v.data());
  if (c.qkvBias) {
    addBias(q, w.qBias);
    addBias(k, w.kBias);
    addBias(v, w.vBias);
  }
  if (c.qkProjectionNorm) {
    // Each token's whole projection, in place.
    rmsNorm(q.data(), T, qDim, w.qNorm, c.rmsNormEps, q.data());
    rmsNorm(k.data(), T, kvDim, w.kNorm, c.rmsNormEps, k.data());
  }
  if (c.qkNorm) {
    // Each head's vector on its own, in place.
    rmsNorm(q.data(), T * c.numHeads, c.headDim, w.qNorm, c.rmsNormEps,
            q.data());
    rmsNorm(k.data(), T * c.numKVHeads, c.headDim, w.kNorm, c.rmsNormEps,
            k.data());
  }
  if (c.clipQKV > 0)
    for (std::vector<float> *p : {&q, &k, &v})
      for (float &e : *p)
        e = static_cast<float>(
            std::clamp(static_cast<double>(e), -c.clipQKV, c.clipQKV));
}

bool meshfold::reference::runAttention(const Config &c, int64_t layer,
                                       Weights &weights,
                                       std::vector<Request> &requests) {
  int64_t d = c.hidden, qDim = c.numHeads * c.headDim;
  AttentionWeights w;
  if (!loadAttention(c, layer, weights, w))
    return false;
  for (Request &r : requests) {
    int64_t T = static_cast<int64_t>(r.tokens.size());
    std::vector<float> x(static_cast<size_t>(T * d));
    rmsNorm(r.hidden.data(), T, d, w.norm, c.rmsNormEps, x.data());
    std::vector<float> q, k, v;
    projectQKV(c, w, x, T, q, k, v);
    applyRope(q, T, c.numHeads, c.headDim, c.ropeTheta);
    applyRope(k, T, c.numKVHeads, c.headDim, c.ropeTheta);
    std::vector<float> attn;
    attention(q, k, v, T, c.numHeads, c.numKVHeads, c.headDim, c.headDim, attn);
    std::vector<float> o(static_cast<size_t>(T * d));
    linear(attn.data(), T, qDim, w.wo.data(), d, o.data());
    for (size_t i = 0; i < o.size(); ++i)
      r.hidden[i] += o[i];
    r.keys.push_back(std::move(k));
    r.values.push_back(std::move(v));
  }
  return true;
}
