//===- DeepSeekV3.cpp - DeepSeek-V3: MLA, YaRN and its routing ------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// DeepseekV3ForCausalLM as transformers computes it: multi-head latent
// attention (MLA) with interleaved RoPE and YaRN, dense first layers, and
// MoE layers with group-limited sigmoid routing and an ungated shared expert
// (FeedForward.cpp).
//
//===----------------------------------------------------------------------===//

#include "Reference.h"

#include <cmath>

using namespace llvm;
using namespace meshfold::reference;

//===----------------------------------------------------------------------===//
// config.json
//===----------------------------------------------------------------------===//

/// MLA's dims and the routing groups; num_key_value_heads must equal
/// num_attention_heads.
static bool readLatentDims(ConfigReader &reader, Config &config) {
  if (!reader.object().get("q_lora_rank"))
    return reader.error("missing field 'q_lora_rank' (null for a query "
                        "without LoRA)");
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
    return reader.error("field 'num_key_value_heads' must equal "
                        "num_attention_heads for MLA");
  if (config.qkRope % 2 != 0)
    return reader.error("qk_rope_head_dim must be even for RoPE");
  return true;
}

/// routed_scaling_factor, the dense first layers and the shared experts.
static bool readDeepSeekExperts(ConfigReader &reader, int64_t numHiddenLayers,
                                Config &config) {
  if (!reader.isPresent("routed_scaling_factor"))
    return reader.error("missing field 'routed_scaling_factor'");
  if (!reader.optionalNumber("routed_scaling_factor", config.routedScaling))
    return false;
  if (!(config.routedScaling > 0) || !std::isfinite(config.routedScaling))
    return reader.error("field 'routed_scaling_factor' must be a finite "
                        "positive number");
  for (const char *key : {"first_k_dense_replace", "n_shared_experts"})
    if (!reader.isPresent(key))
      return reader.error("missing field '" + std::string(key) + "'");
  std::optional<int64_t> firstDense, shared;
  if (!reader.optionalInt("first_k_dense_replace", firstDense) ||
      !reader.optionalInt("n_shared_experts", shared))
    return false;
  if (*firstDense < 0 || *shared < 0)
    return reader.error("fields 'first_k_dense_replace' and "
                        "'n_shared_experts' must not be negative");
  config.firstDense = std::min(*firstDense, numHiddenLayers);
  config.sharedFfn = *shared * config.expertFfn;
  config.sharedBlock = "shared_experts";
  config.sharedGated = false;
  return config.firstDense <= 0 ||
         reader.requiredPositive("intermediate_size", config.denseFfn);
}

/// The routing transformers implements (noaux_tc, sigmoid, every layer
/// MoE) and groups that fit the experts.
static bool checkDeepSeekRouting(ConfigReader &reader, const Config &config) {
  const json::Object &object = reader.object();
  if (std::optional<StringRef> m = object.getString("topk_method");
      m && *m != "noaux_tc")
    return reader.error("field 'topk_method' must be \"noaux_tc\"");
  if (std::optional<StringRef> f = object.getString("scoring_func");
      f && *f != "sigmoid")
    return reader.error("field 'scoring_func' must be \"sigmoid\"");
  if (std::optional<int64_t> freq = object.getInteger("moe_layer_freq");
      freq && *freq != 1)
    return reader.error("field 'moe_layer_freq' must be 1");
  if (config.numExperts % config.nGroup != 0 ||
      (config.nGroup > 1 && config.numExperts / config.nGroup < 2) ||
      config.topkGroup > config.nGroup ||
      config.topK > config.topkGroup * (config.numExperts / config.nGroup))
    return reader.error(
        "n_group " + std::to_string(config.nGroup) + ", topk_group " +
        std::to_string(config.topkGroup) + " and num_experts_per_tok " +
        std::to_string(config.topK) + " do not fit n_routed_experts " +
        std::to_string(config.numExperts));
  return true;
}

bool meshfold::reference::readDeepSeekV3Fields(ConfigReader &reader,
                                               int64_t numHiddenLayers,
                                               Config &config) {
  config.mla = true;
  if (!readLatentDims(reader, config) ||
      !readDeepSeekExperts(reader, numHiddenLayers, config) ||
      !checkDeepSeekRouting(reader, config))
    return false;
  config.ropeInterleave = true;
  if (!reader.optionalBool("rope_interleave", config.ropeInterleave))
    return false;
  config.sigmoidRouting = true;
  config.headDim = config.kvLoraRank + config.qkRope;
  config.numKVHeads = 1;
  config.useMlpNames();
  config.rmsNormEps = 1e-6;
  config.ropeTheta = 10000.0;
  return true;
}

const json::Object *meshfold::reference::findYaRN(const json::Object &object) {
  if (const json::Object *params = object.getObject("rope_parameters");
      params && params->getString("rope_type") == "yarn")
    return params;
  return object.getObject("rope_scaling");
}

/// 0.1 m ln(s) + 1 for s > 1 (YaRN's Eq. 21).
static double yarnMscale(double s, double m) {
  return s <= 1.0 ? 1.0 : 0.1 * m * std::log(s) + 1.0;
}

/// YaRN's ramp over RoPE's dims, as transformers' _compute_yarn_parameters
/// computes it: dims whose wavelength fits betaFast (betaSlow) turns in the
/// original context; below the first, frequencies are kept; past the
/// second, divided.
static void yarnRamp(const json::Object &yarn, const Config &config,
                     double original, double betaFast, double betaSlow,
                     YaRN &out) {
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
  out.low = lo;
  out.high = hi;
}

bool meshfold::reference::readYaRN(ConfigReader &reader,
                                   const json::Object &yarn, Config &config) {
  if (std::optional<double> theta = yarn.getNumber("rope_theta"))
    config.ropeTheta = *theta;
  std::optional<int64_t> maxPositions =
      reader.object().getInteger("max_position_embeddings");
  std::optional<StringRef> type = yarn.getString("type");
  if (!type)
    type = yarn.getString("rope_type");
  if (type != "yarn")
    return reader.error("only YaRN RoPE scaling is supported");
  auto number = [&](StringRef key, double def) {
    std::optional<double> v = yarn.getNumber(key);
    return v ? *v : def;
  };
  double original = number("original_max_position_embeddings",
                           maxPositions ? double(*maxPositions) : 0.0);
  if (!(original > 0))
    return reader.error("YaRN needs original_max_position_embeddings");
  double factor = number("factor", 0.0);
  if (!(factor > 0))
    factor = (maxPositions ? double(*maxPositions) : 0.0) / original;
  double mscale = number("mscale", 0.0),
         mscaleAll = number("mscale_all_dim", 0.0);
  double betaFast = number("beta_fast", 32.0),
         betaSlow = number("beta_slow", 1.0);
  if (!(factor > 0) || !(betaFast > 0) || !(betaSlow > 0))
    return reader.error("YaRN's factor, beta_fast and beta_slow must be "
                        "positive");
  double cosScale = number("attention_factor", 0.0);
  if (!(cosScale > 0))
    cosScale = (mscale != 0 && mscaleAll != 0)
                   ? yarnMscale(factor, mscale) / yarnMscale(factor, mscaleAll)
                   : yarnMscale(factor, 1.0);
  yarnRamp(yarn, config, original, betaFast, betaSlow, config.yarn);
  config.yarn.factor = factor;
  config.yarn.cosScale = cosScale;
  if (mscaleAll != 0)
    config.yarn.softmaxScale =
        yarnMscale(factor, mscaleAll) * yarnMscale(factor, mscaleAll);
  return true;
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

bool meshfold::reference::checkLatentAttentionWeights(const Config &c,
                                                      Weights &weights,
                                                      int64_t i) {
  int64_t d = c.hidden, qkDim = c.qkNope + c.qkRope, r = c.kvLoraRank;
  // MLA's projections in place of q/k/v/o.
  return (c.qLoraRank > 0
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
}

//===----------------------------------------------------------------------===//
// Latent attention
//===----------------------------------------------------------------------===//

namespace {
/// One layer's MLA weights, loaded once for every request.
struct LatentWeights {
  std::vector<float> norm, qa, qaNorm, qb, kva, kvaNorm, kvb, wo;
};

/// One request's MLA operands: per head Q = [q_nope, q_rope] and
/// K = [k_nope, k_rope] ([T, H, nope + rope]), V ([T, H, v_head_dim]); the
/// normalised latent ([T, r]) and the roped key ([T, rope]) for the cache.
struct LatentOperands {
  std::vector<float> Q, K, V, latent, kRope;
};
} // namespace

static bool loadLatent(const Config &c, int64_t layer, Weights &weights,
                       LatentWeights &w) {
  return weights.load(layerName(layer, "input_layernorm.weight"), w.norm) &&
         (c.qLoraRank > 0
              ? weights.load(attnName(layer, "q_a_proj"), w.qa) &&
                    weights.load(attnName(layer, "q_a_layernorm"), w.qaNorm) &&
                    weights.load(attnName(layer, "q_b_proj"), w.qb)
              : weights.load(attnName(layer, "q_proj"), w.qb)) &&
         weights.load(attnName(layer, "kv_a_proj_with_mqa"), w.kva) &&
         weights.load(attnName(layer, "kv_a_layernorm"), w.kvaNorm) &&
         weights.load(attnName(layer, "kv_b_proj"), w.kvb) &&
         weights.load(attnName(layer, "o_proj"), w.wo);
}

/// q = q_b(norm(q_a(x))), or q_proj(x) without LoRA: [T, H, nope + rope].
static void latentQuery(const Config &c, const LatentWeights &w,
                        const std::vector<float> &x, int64_t T,
                        std::vector<float> &q) {
  int64_t d = c.hidden, qk = c.qkNope + c.qkRope;
  q.assign(static_cast<size_t>(T * c.numHeads * qk), 0.0f);
  if (c.qLoraRank > 0) {
    std::vector<float> a(static_cast<size_t>(T * c.qLoraRank));
    linear(x.data(), T, d, w.qa.data(), c.qLoraRank, a.data());
    rmsNorm(a.data(), T, c.qLoraRank, w.qaNorm, c.rmsNormEps, a.data());
    linear(a.data(), T, c.qLoraRank, w.qb.data(), c.numHeads * qk, q.data());
  } else {
    linear(x.data(), T, d, w.qb.data(), c.numHeads * qk, q.data());
  }
}

/// The MLA operands of one request's normalised hidden states \p x: the
/// latent c = norm(kv_a(x)[:r]) and the RoPE key kv_a(x)[r:]; [k_nope, v]
/// per head from kv_b(c); both roped parts rotated.
static void latentOperands(const Config &c, const LatentWeights &w,
                           const std::vector<float> &x, int64_t T,
                           LatentOperands &out) {
  int64_t d = c.hidden, H = c.numHeads, nope = c.qkNope, rope = c.qkRope,
          vd = c.vHead, r = c.kvLoraRank, qk = nope + rope;
  std::vector<float> q;
  latentQuery(c, w, x, T, q);
  std::vector<float> kvA(static_cast<size_t>(T * (r + rope)));
  linear(x.data(), T, d, w.kva.data(), r + rope, kvA.data());
  std::vector<float> &latent = out.latent, &kRope = out.kRope;
  latent.assign(static_cast<size_t>(T * r), 0.0f);
  kRope.assign(static_cast<size_t>(T * rope), 0.0f);
  std::vector<float> qRope(static_cast<size_t>(T * H * rope));
  for (int64_t t = 0; t < T; ++t) {
    std::copy_n(&kvA[t * (r + rope)], r, &latent[t * r]);
    std::copy_n(&kvA[t * (r + rope) + r], rope, &kRope[t * rope]);
    for (int64_t h = 0; h < H; ++h)
      std::copy_n(&q[(t * H + h) * qk + nope], rope,
                  &qRope[(t * H + h) * rope]);
  }
  rmsNorm(latent.data(), T, r, w.kvaNorm, c.rmsNormEps, latent.data());
  std::vector<float> kv(static_cast<size_t>(T * H * (nope + vd)));
  linear(latent.data(), T, r, w.kvb.data(), H * (nope + vd), kv.data());
  if (c.ropeInterleave) {
    deinterleave(qRope, rope);
    deinterleave(kRope, rope);
  }
  applyRope(qRope, T, H, rope, c.ropeTheta, &c.yarn);
  applyRope(kRope, T, 1, rope, c.ropeTheta, &c.yarn);
  // Per head: Q = [q_nope, q_rope], K = [k_nope, k_rope], V.
  out.Q.assign(static_cast<size_t>(T * H * qk), 0.0f);
  out.K.assign(out.Q.size(), 0.0f);
  out.V.assign(static_cast<size_t>(T * H * vd), 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float *kvRow = &kv[(t * H + h) * (nope + vd)];
      float *qRow = &out.Q[(t * H + h) * qk], *kRow = &out.K[(t * H + h) * qk];
      std::copy_n(&q[(t * H + h) * qk], nope, qRow);
      std::copy_n(&qRope[(t * H + h) * rope], rope, qRow + nope);
      std::copy_n(kvRow, nope, kRow);
      std::copy_n(&kRope[t * rope], rope, kRow + nope);
      std::copy_n(kvRow + nope, vd, &out.V[(t * H + h) * vd]);
    }
}

bool meshfold::reference::runLatentAttention(const Config &c, int64_t layer,
                                             Weights &weights,
                                             std::vector<Request> &requests) {
  int64_t d = c.hidden, H = c.numHeads, rope = c.qkRope, vd = c.vHead,
          r = c.kvLoraRank, qk = c.qkNope + rope;
  LatentWeights w;
  if (!loadLatent(c, layer, weights, w))
    return false;
  for (Request &req : requests) {
    int64_t T = static_cast<int64_t>(req.tokens.size());
    std::vector<float> x(static_cast<size_t>(T * d));
    rmsNorm(req.hidden.data(), T, d, w.norm, c.rmsNormEps, x.data());
    LatentOperands ops;
    latentOperands(c, w, x, T, ops);
    std::vector<float> attn;
    attention(ops.Q, ops.K, ops.V, T, H, H, qk, vd, attn, c.yarn.softmaxScale);
    std::vector<float> o(static_cast<size_t>(T * d));
    linear(attn.data(), T, H * vd, w.wo.data(), d, o.data());
    for (size_t i = 0; i < o.size(); ++i)
      req.hidden[i] += o[i];
    // The cache as the program holds it: [c, roped key], [T, 1, r + rope].
    std::vector<float> cache(static_cast<size_t>(T * (r + rope)));
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(&ops.latent[t * r], r, &cache[t * (r + rope)]);
      std::copy_n(&ops.kRope[t * rope], rope, &cache[t * (r + rope) + r]);
    }
    req.keys.push_back(cache);
    req.values.push_back(std::move(cache));
  }
  return true;
}
