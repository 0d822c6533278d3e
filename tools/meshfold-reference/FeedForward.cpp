//===- FeedForward.cpp - The reference's MoE and dense MLP layers ---------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The second half of every architecture's layer: routed SwiGLU experts
// (softmax top-k, or DeepSeek-V3's group-limited sigmoid routing), a shared
// expert beside them (gated in Qwen2-MoE, not in DeepSeek-V3), or a dense
// SwiGLU MLP in the Qwen models' and DeepSeek-V3's dense layers.
//
//===----------------------------------------------------------------------===//

#include "Reference.h"

#include <cmath>

using namespace meshfold::reference;

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

bool meshfold::reference::checkMLPOrRouterWeights(const Config &c,
                                                  Weights &weights, int64_t i) {
  int64_t d = c.hidden;
  if (c.dense(i)) {
    int64_t f = c.denseFfn;
    return weights.check(layerName(i, c.moeBlock + ".gate_proj.weight"),
                         {f, d}) &&
           weights.check(layerName(i, c.moeBlock + ".up_proj.weight"),
                         {f, d}) &&
           weights.check(layerName(i, c.moeBlock + ".down_proj.weight"),
                         {d, f});
  }
  return weights.check(layerName(i, c.moeBlock + ".gate.weight"),
                       {c.numExperts, d}) &&
         (!c.sigmoidRouting ||
          weights.check(
              layerName(i, c.moeBlock + ".gate.e_score_correction_bias"),
              {c.numExperts}));
}

bool meshfold::reference::checkExpertWeights(const Config &c, Weights &weights,
                                             int64_t i) {
  int64_t d = c.hidden, ffn = c.expertFfn;
  if (c.sharedFfn > 0 && !c.dense(i) &&
      (!weights.check(sharedName(c, i, "gate_proj"), {c.sharedFfn, d}) ||
       !weights.check(sharedName(c, i, "up_proj"), {c.sharedFfn, d}) ||
       !weights.check(sharedName(c, i, "down_proj"), {d, c.sharedFfn}) ||
       (c.sharedGated &&
        !weights.check(layerName(i, c.moeBlock + ".shared_expert_gate.weight"),
                       {1, d}))))
    return false;
  for (int64_t e = 0; e < (c.dense(i) ? 0 : c.numExperts); ++e)
    if (!weights.check(expertName(c, i, e, c.expertGate), {ffn, d}) ||
        !weights.check(expertName(c, i, e, c.expertDown), {d, ffn}) ||
        !weights.check(expertName(c, i, e, c.expertUp), {ffn, d}))
      return false;
  return true;
}

//===----------------------------------------------------------------------===//
// MoE
//===----------------------------------------------------------------------===//

namespace {
/// A token routed to an expert, with its weight.
struct Assignment {
  size_t request;
  int64_t token;
  double weight;
};

/// One MoE layer's routing of every request's tokens.
struct Routing {
  std::vector<std::vector<float>> inputs;   ///< per request, normalised [T, d]
  std::vector<std::vector<double>> outputs; ///< per request, the sum [T, d]
  std::vector<std::vector<Assignment>> perExpert; ///< each expert's tokens
};
} // namespace

/// The inputs of \p layer's experts (the post-attention RMSNorm of every
/// token of every request) and the experts each is routed to.
static bool routeTokens(const Config &c, int64_t layer, Weights &weights,
                        const std::vector<Request> &requests, Routing &routing,
                        Failure &failure) {
  int64_t d = c.hidden;
  std::vector<float> norm, gate, bias;
  if (!weights.load(layerName(layer, "post_attention_layernorm.weight"),
                    norm) ||
      !weights.load(layerName(layer, c.moeBlock + ".gate.weight"), gate) ||
      (c.sigmoidRouting &&
       !weights.load(
           layerName(layer, c.moeBlock + ".gate.e_score_correction_bias"),
           bias)))
    return false;
  GroupLimitedRouting groups{c.numExperts, c.topK,         c.nGroup,
                             c.topkGroup,  c.normTopKProb, c.routedScaling};
  routing.inputs.assign(requests.size(), {});
  routing.outputs.assign(requests.size(), {});
  routing.perExpert.assign(static_cast<size_t>(c.numExperts), {});
  std::vector<float> logits(static_cast<size_t>(c.numExperts));
  std::vector<int64_t> chosen;
  std::vector<double> routeWeights;
  for (size_t r = 0; r < requests.size(); ++r) {
    int64_t T = static_cast<int64_t>(requests[r].tokens.size());
    std::vector<float> &inputs = routing.inputs[r];
    inputs.resize(static_cast<size_t>(T * d));
    routing.outputs[r].assign(static_cast<size_t>(T * d), 0.0);
    rmsNorm(requests[r].hidden.data(), T, d, norm, c.rmsNormEps, inputs.data());
    for (int64_t t = 0; t < T; ++t) {
      linear(&inputs[t * d], 1, d, gate.data(), c.numExperts, logits.data());
      for (float l : logits)
        if (!std::isfinite(l))
          return fail(failure, "non-finite router logit in layer " +
                                   std::to_string(layer) + ", request " +
                                   std::to_string(r) + ", position " +
                                   std::to_string(t));
      if (c.sigmoidRouting)
        routeSigmoid(groups, logits.data(), bias, chosen, routeWeights);
      else
        route(logits.data(), c.numExperts, c.topK, c.normTopKProb, chosen,
              routeWeights);
      for (size_t k = 0; k < chosen.size(); ++k)
        routing.perExpert[chosen[k]].push_back({r, t, routeWeights[k]});
    }
  }
  return true;
}

/// Each expert in turn on its tokens: y += w * W2 (silu(W1 x) * W3 x).
static bool runRoutedExperts(const Config &c, int64_t layer, Weights &weights,
                             Routing &routing) {
  int64_t d = c.hidden, ffn = c.expertFfn;
  std::vector<float> w1, w2, w3, g, u;
  std::vector<float> down(static_cast<size_t>(d));
  for (int64_t e = 0; e < c.numExperts; ++e) {
    if (routing.perExpert[e].empty())
      continue;
    if (!weights.load(expertName(c, layer, e, c.expertGate), w1) ||
        !weights.load(expertName(c, layer, e, c.expertDown), w2) ||
        !weights.load(expertName(c, layer, e, c.expertUp), w3))
      return false;
    for (const Assignment &a : routing.perExpert[e]) {
      const float *x = &routing.inputs[a.request][a.token * d];
      swiGLU(x, d, ffn, w1, w2, w3, g, u, down.data());
      double *y = &routing.outputs[a.request][a.token * d];
      for (int64_t j = 0; j < d; ++j)
        y[j] += a.weight * down[j];
    }
  }
  return true;
}

/// The shared expert on every token: y += sigmoid(g . x) * W2 (silu(W1 x)
/// * W3 x), ungated (scale 1) in DeepSeek-V3.
static bool runSharedExpert(const Config &c, int64_t layer, Weights &weights,
                            Routing &routing) {
  int64_t d = c.hidden;
  std::vector<float> w1, w2, w3, g, u, sGate;
  std::vector<float> down(static_cast<size_t>(d));
  if (!weights.load(sharedName(c, layer, "gate_proj"), w1) ||
      !weights.load(sharedName(c, layer, "down_proj"), w2) ||
      !weights.load(sharedName(c, layer, "up_proj"), w3) ||
      (c.sharedGated &&
       !weights.load(
           layerName(layer, c.moeBlock + ".shared_expert_gate.weight"), sGate)))
    return false;
  for (size_t r = 0; r < routing.inputs.size(); ++r) {
    int64_t T = static_cast<int64_t>(routing.inputs[r].size()) / d;
    for (int64_t t = 0; t < T; ++t) {
      const float *x = &routing.inputs[r][t * d];
      swiGLU(x, d, c.sharedFfn, w1, w2, w3, g, u, down.data());
      double scale = 1.0;
      if (c.sharedGated) {
        float s;
        linear(x, 1, d, sGate.data(), 1, &s);
        scale = 1.0 / (1.0 + std::exp(-static_cast<double>(s)));
      }
      double *y = &routing.outputs[r][t * d];
      for (int64_t j = 0; j < d; ++j)
        y[j] += scale * down[j];
    }
  }
  return true;
}

bool meshfold::reference::runMoE(const Config &c, int64_t layer,
                                 Weights &weights,
                                 std::vector<Request> &requests,
                                 Failure &failure) {
  Routing routing;
  if (!routeTokens(c, layer, weights, requests, routing, failure) ||
      !runRoutedExperts(c, layer, weights, routing) ||
      (c.sharedFfn > 0 && !runSharedExpert(c, layer, weights, routing)))
    return false;
  for (size_t r = 0; r < requests.size(); ++r)
    for (size_t i = 0; i < routing.outputs[r].size(); ++i)
      requests[r].hidden[i] += static_cast<float>(routing.outputs[r][i]);
  return true;
}

//===----------------------------------------------------------------------===//
// Dense MLP
//===----------------------------------------------------------------------===//

bool meshfold::reference::runDenseMLP(const Config &c, int64_t layer,
                                      Weights &weights,
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
