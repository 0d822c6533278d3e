//===- Generate.cpp - The reference's generation --------------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// Generation after prefill by dense recomputation: each step re-runs the
// whole model on the prompt and the tokens so far. Tokens are chosen by the
// program's rule (greedy, or sampled with a counter-based hash of the seed,
// the request and the step), so that both pick the same ones.
//
//===----------------------------------------------------------------------===//

#include "Reference.h"

#include <cmath>

using namespace meshfold::reference;

/// SplitMix64's output function of z + golden gamma.
static uint64_t splitMix64(uint64_t z) {
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
static int64_t nextToken(const Sampling &sampling,
                         const std::vector<float> &logits, int64_t request,
                         int64_t step) {
  int64_t vocab = static_cast<int64_t>(logits.size());
  if (sampling.temperature == 0.0)
    return std::max_element(logits.begin(), logits.end()) - logits.begin();
  float top = *std::max_element(logits.begin(), logits.end());
  std::vector<std::pair<double, int64_t>> ranked;
  for (int64_t i = 0; i < vocab; ++i)
    ranked.push_back(
        {std::exp((double(logits[i]) - double(top)) / sampling.temperature),
         i});
  std::sort(ranked.begin(), ranked.end(), [](const auto &a, const auto &b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  if (sampling.topK > 0 && sampling.topK < vocab)
    ranked.resize(static_cast<size_t>(sampling.topK));
  double all = 0;
  for (const auto &r : ranked)
    all += r.first;
  double prefix = 0;
  size_t n = 0;
  while (n < ranked.size()) {
    prefix += ranked[n++].first;
    if (prefix >= sampling.topP * all)
      break;
  }
  uint64_t h =
      splitMix64(splitMix64(splitMix64(sampling.seed) ^ uint64_t(request)) ^
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

bool meshfold::reference::generate(
    const Config &c, const mfrt::Checkpoint &file,
    const std::vector<std::vector<int64_t>> &prompts, const Sampling &sampling,
    std::vector<Request> &requests, std::vector<Generated> &out,
    Failure &failure) {
  out.assign(requests.size(), Generated());
  std::vector<size_t> active(requests.size());
  for (size_t r = 0; r < active.size(); ++r)
    active[r] = r;
  for (int64_t step = 0; step < sampling.maxNewTokens && !active.empty();
       ++step) {
    std::vector<size_t> going;
    for (size_t r : active) {
      int64_t id = nextToken(sampling, requests[r].logits, int64_t(r), step);
      out[r].ids.push_back(static_cast<int32_t>(id));
      if (sampling.stepLogits)
        out[r].stepLogits.insert(out[r].stepLogits.end(),
                                 requests[r].logits.begin(),
                                 requests[r].logits.end());
      bool eos = std::find(c.eosTokens.begin(), c.eosTokens.end(), id) !=
                 c.eosTokens.end();
      if ((sampling.ignoreEos || !eos) && step + 1 < sampling.maxNewTokens)
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
