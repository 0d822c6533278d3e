//===- Sampling.cpp - The next token from a step's logits -----------------===//
//
// Greedy (temperature 0): the highest logit, the lowest id on ties. Else
// the README's rule, the same on every plan and backend because its only
// randomness is a counter-based draw keyed by (seed, request, step):
//
//   w_i = exp((l_i - max l) / temperature) in double; ids ordered by w
//   descending, lower id first on ties; the first top_k of them (all when
//   top_k is 0); of those, the shortest prefix whose sum reaches
//   top_p * their sum; u = draw(seed, request, step) in [0, 1); the first id
//   of the prefix whose running sum exceeds u * the prefix's sum.
//
// draw: h = mix(mix(mix(seed) ^ request) ^ step) with SplitMix64's mix
// (z += 0x9E3779B97F4A7C15, then the two multiply-xorshift rounds), and
// u = (h >> 11) * 2^-53.
//
//===----------------------------------------------------------------------===//

#include "mfrt/program/Sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

using namespace mfrt;

namespace {
uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double draw(uint64_t seed, int64_t request, int64_t step) {
  uint64_t h = mix(mix(mix(seed) ^ uint64_t(request)) ^ uint64_t(step));
  return double(h >> 11) * 0x1.0p-53;
}
} // namespace

int64_t mfrt::chooseToken(const Generation &g, const float *logits,
                          int64_t vocab, int64_t request, int64_t step) {
  if (g.temperature == 0.0) {
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i)
      if (logits[i] > logits[best])
        best = i;
    return best;
  }
  double top = logits[0];
  for (int64_t i = 1; i < vocab; ++i)
    top = std::max(top, double(logits[i]));
  std::vector<double> w(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i)
    w[size_t(i)] = std::exp((double(logits[i]) - top) / g.temperature);
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return w[size_t(a)] > w[size_t(b)];
  });
  size_t keep = g.topK > 0 ? size_t(std::min(g.topK, vocab)) : size_t(vocab);
  double kept = 0;
  for (size_t i = 0; i < keep; ++i)
    kept += w[size_t(order[i])];
  size_t prefix = 0;
  double sum = 0;
  while (prefix < keep) {
    sum += w[size_t(order[prefix++])];
    if (sum >= g.topP * kept)
      break;
  }
  double target = draw(g.seed, request, step) * sum;
  double running = 0;
  for (size_t i = 0; i < prefix; ++i) {
    running += w[size_t(order[i])];
    if (running > target)
      return order[i];
  }
  return order[prefix - 1];
}
