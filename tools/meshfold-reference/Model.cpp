//===- Model.cpp - The reference's prefill forward pass -------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The whole model on a batch of requests, one request at a time: the
// embedding, each layer's attention (Mixtral.cpp or DeepSeekV3.cpp) and MoE
// or dense MLP (FeedForward.cpp), the final norm and the LM head.
//
//===----------------------------------------------------------------------===//

#include "Reference.h"

using namespace meshfold::reference;

/// Checks presence, dtype and shape of every weight layer \p i reads, in the
/// order their errors are reported.
static bool checkLayerWeights(const Config &c, Weights &weights, int64_t i) {
  int64_t d = c.hidden;
  return (!c.mla || checkLatentAttentionWeights(c, weights, i)) &&
         weights.check(layerName(i, "input_layernorm.weight"), {d}) &&
         (c.mla || checkAttentionWeights(c, weights, i)) &&
         weights.check(layerName(i, "post_attention_layernorm.weight"), {d}) &&
         checkMLPOrRouterWeights(c, weights, i) &&
         checkQKNormsAndBiases(c, weights, i) &&
         checkExpertWeights(c, weights, i);
}

/// Checks presence, dtype and shape of every weight the forward pass reads.
static bool checkWeights(const Config &c, Weights &weights) {
  if (!weights.check(embedName, {c.vocab, c.hidden}))
    return false;
  for (int64_t i = 0; i < c.numLayers; ++i)
    if (!checkLayerWeights(c, weights, i))
      return false;
  return weights.check(normName, {c.hidden});
}

/// Each request's hidden states from the embedding of its tokens.
static bool embed(const Config &c, Weights &weights,
                  std::vector<Request> &requests, Failure &failure) {
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
  return true;
}

/// The final norm and the LM head \p headName: each request's last-position
/// logits and, with \p allLogits, every position's.
static bool computeLogits(const Config &c, Weights &weights,
                          const std::string &headName,
                          std::vector<Request> &requests, bool allLogits) {
  int64_t d = c.hidden;
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

bool meshfold::reference::runModel(const Config &c,
                                   const mfrt::Checkpoint &file,
                                   std::vector<Request> &requests,
                                   bool allLogits, Failure &failure) {
  Weights weights(file, failure);
  if (!checkWeights(c, weights))
    return false;
  std::string headName = lmHeadName;
  // Tied: the LM head is the embedding table (HF ties them after loading,
  // so a stored lm_head.weight is ignored).
  if (c.tieWordEmbeddings)
    headName = embedName;
  if (!weights.check(headName, {c.vocab, c.hidden}) ||
      !embed(c, weights, requests, failure))
    return false;
  for (int64_t layer = 0; layer < c.numLayers; ++layer)
    if (!(c.mla ? runLatentAttention(c, layer, weights, requests)
                : runAttention(c, layer, weights, requests)) ||
        !(c.dense(layer) ? runDenseMLP(c, layer, weights, requests)
                         : runMoE(c, layer, weights, requests, failure)))
      return false;
  return computeLogits(c, weights, headName, requests, allLogits);
}
