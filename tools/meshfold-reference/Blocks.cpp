//===- Blocks.cpp - The reference's building blocks -----------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//

#include "Blocks.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace meshfold::reference;

void meshfold::reference::linear(const float *x, int64_t rows, int64_t in,
                                 const float *w, int64_t out, float *y) {
  for (int64_t t = 0; t < rows; ++t) {
    const float *xRow = x + t * in;
    for (int64_t o = 0; o < out; ++o) {
      const float *wRow = w + o * in;
      double sum = 0.0;
      for (int64_t i = 0; i < in; ++i)
        sum += static_cast<double>(xRow[i]) * static_cast<double>(wRow[i]);
      y[t * out + o] = static_cast<float>(sum);
    }
  }
}

void meshfold::reference::rmsNorm(const float *x, int64_t rows, int64_t d,
                                  const std::vector<float> &weight, double eps,
                                  float *y) {
  for (int64_t t = 0; t < rows; ++t) {
    const float *row = x + t * d;
    double sumSquares = 0.0;
    for (int64_t j = 0; j < d; ++j)
      sumSquares += static_cast<double>(row[j]) * row[j];
    double scale = 1.0 / std::sqrt(sumSquares / static_cast<double>(d) + eps);
    for (int64_t j = 0; j < d; ++j)
      y[t * d + j] = static_cast<float>(row[j] * scale * weight[j]);
  }
}

void meshfold::reference::applyRope(std::vector<float> &x, int64_t tokens,
                                    int64_t heads, int64_t headDim,
                                    double theta, const YaRN *yarn) {
  int64_t half = headDim / 2;
  std::vector<float> invFreq(static_cast<size_t>(half));
  for (int64_t j = 0; j < half; ++j) {
    float exponent = static_cast<float>(2 * j) / static_cast<float>(headDim);
    float base =
        static_cast<float>(std::pow(theta, static_cast<double>(exponent)));
    invFreq[j] = 1.0f / base;
    if (yarn && yarn->factor != 1.0) {
      // YaRN: 1/base (kept) and 1/(s base) (divided), mixed by a ramp over
      // the dims, in f32 as transformers computes them.
      float divided = 1.0f / (static_cast<float>(yarn->factor) * base);
      float ramp = (static_cast<float>(j) - static_cast<float>(yarn->low)) /
                   static_cast<float>(yarn->high - yarn->low);
      ramp = std::min(std::max(ramp, 0.0f), 1.0f);
      float kept = 1.0f - ramp;
      invFreq[j] = divided * (1.0f - kept) + invFreq[j] * kept;
    }
  }
  double cosScale = yarn ? yarn->cosScale : 1.0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < half; ++j) {
      float angle = static_cast<float>(t) * invFreq[j];
      double c = std::cos(static_cast<double>(angle)) * cosScale;
      double s = std::sin(static_cast<double>(angle)) * cosScale;
      for (int64_t h = 0; h < heads; ++h) {
        float *v = &x[(t * heads + h) * headDim];
        double a = v[j], b = v[j + half];
        v[j] = static_cast<float>(a * c - b * s);
        v[j + half] = static_cast<float>(b * c + a * s);
      }
    }
  }
}

void meshfold::reference::deinterleave(std::vector<float> &x, int64_t dim) {
  std::vector<float> tmp(static_cast<size_t>(dim));
  for (size_t at = 0; at < x.size(); at += static_cast<size_t>(dim)) {
    for (int64_t j = 0; j < dim / 2; ++j) {
      tmp[j] = x[at + 2 * j];
      tmp[j + dim / 2] = x[at + 2 * j + 1];
    }
    std::copy(tmp.begin(), tmp.end(), x.begin() + at);
  }
}

void meshfold::reference::attention(const std::vector<float> &q,
                                    const std::vector<float> &k,
                                    const std::vector<float> &v, int64_t tokens,
                                    int64_t numHeads, int64_t numKVHeads,
                                    int64_t headDim, int64_t valueDim,
                                    std::vector<float> &out,
                                    double scaleFactor) {
  int64_t group = numHeads / numKVHeads;
  double scale = scaleFactor / std::sqrt(static_cast<double>(headDim));
  out.assign(static_cast<size_t>(tokens * numHeads * valueDim), 0.0f);
  std::vector<double> scores(static_cast<size_t>(tokens));
  std::vector<double> acc(static_cast<size_t>(valueDim));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < numHeads; ++h) {
      int64_t kvh = h / group;
      const float *qRow = &q[(t * numHeads + h) * headDim];
      double maxScore = -INFINITY;
      for (int64_t s = 0; s <= t; ++s) {
        const float *kRow = &k[(s * numKVHeads + kvh) * headDim];
        double dot = 0.0;
        for (int64_t j = 0; j < headDim; ++j)
          dot += static_cast<double>(qRow[j]) * kRow[j];
        scores[s] = dot * scale;
        maxScore = std::max(maxScore, scores[s]);
      }
      double denominator = 0.0;
      for (int64_t s = 0; s <= t; ++s) {
        scores[s] = std::exp(scores[s] - maxScore);
        denominator += scores[s];
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t s = 0; s <= t; ++s) {
        const float *vRow = &v[(s * numKVHeads + kvh) * valueDim];
        double p = scores[s] / denominator;
        for (int64_t j = 0; j < valueDim; ++j)
          acc[j] += p * vRow[j];
      }
      float *outRow = &out[(t * numHeads + h) * valueDim];
      for (int64_t j = 0; j < valueDim; ++j)
        outRow[j] = static_cast<float>(acc[j]);
    }
  }
}

double meshfold::reference::silu(double x) { return x / (1.0 + std::exp(-x)); }

void meshfold::reference::swiGLU(const float *x, int64_t d, int64_t ffn,
                                 const std::vector<float> &w1,
                                 const std::vector<float> &w2,
                                 const std::vector<float> &w3,
                                 std::vector<float> &g, std::vector<float> &u,
                                 float *out) {
  g.resize(static_cast<size_t>(ffn));
  u.resize(static_cast<size_t>(ffn));
  linear(x, 1, d, w1.data(), ffn, g.data());
  linear(x, 1, d, w3.data(), ffn, u.data());
  for (int64_t j = 0; j < ffn; ++j)
    g[j] = static_cast<float>(silu(g[j]) * u[j]);
  linear(g.data(), 1, ffn, w2.data(), d, out);
}

void meshfold::reference::addBias(std::vector<float> &y,
                                  const std::vector<float> &bias) {
  size_t out = bias.size();
  for (size_t i = 0; i < y.size(); ++i)
    y[i] += bias[i % out];
}

void meshfold::reference::route(const float *logits, int64_t numExperts,
                                int64_t topK, bool normTopKProb,
                                std::vector<int64_t> &experts,
                                std::vector<double> &weights) {
  std::vector<int64_t> order(static_cast<size_t>(numExperts));
  for (int64_t e = 0; e < numExperts; ++e)
    order[e] = e;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  experts.assign(order.begin(), order.begin() + topK);
  double maxLogit = logits[experts[0]];
  double denominator = 0.0;
  if (normTopKProb) {
    for (int64_t e : experts)
      denominator += std::exp(logits[e] - maxLogit);
  } else {
    for (int64_t e = 0; e < numExperts; ++e)
      denominator += std::exp(logits[e] - maxLogit);
  }
  weights.clear();
  for (int64_t e : experts)
    weights.push_back(std::exp(logits[e] - maxLogit) / denominator);
}

void meshfold::reference::routeSigmoid(const GroupLimitedRouting &c,
                                       const float *logits,
                                       const std::vector<float> &bias,
                                       std::vector<int64_t> &experts,
                                       std::vector<double> &weights) {
  int64_t n = c.numExperts, size = n / c.nGroup;
  std::vector<float> s(static_cast<size_t>(n)), choice(s.size());
  for (int64_t e = 0; e < n; ++e) {
    s[e] = static_cast<float>(1.0 / (1.0 + std::exp(-double(logits[e]))));
    choice[e] = s[e] + bias[e];
  }
  auto byScore = [](const std::vector<float> &v) {
    std::vector<int64_t> order(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      order[i] = static_cast<int64_t>(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return v[a] > v[b]; });
    return order;
  };
  if (c.nGroup > 1) {
    std::vector<float> groupScore(static_cast<size_t>(c.nGroup));
    for (int64_t g = 0; g < c.nGroup; ++g) {
      std::vector<float> members(choice.begin() + g * size,
                                 choice.begin() + (g + 1) * size);
      std::vector<int64_t> order = byScore(members);
      groupScore[g] = members[order[0]] + members[order[1]];
    }
    std::vector<int64_t> groups = byScore(groupScore);
    std::vector<bool> kept(static_cast<size_t>(c.nGroup), false);
    for (int64_t i = 0; i < c.topkGroup; ++i)
      kept[groups[i]] = true;
    for (int64_t e = 0; e < n; ++e)
      if (!kept[e / size])
        choice[e] = -std::numeric_limits<float>::infinity();
  }
  std::vector<int64_t> order = byScore(choice);
  experts.assign(order.begin(), order.begin() + c.topK);
  double sum = 0.0;
  for (int64_t e : experts)
    sum += s[e];
  weights.clear();
  for (int64_t e : experts)
    weights.push_back((c.normTopKProb ? s[e] / (sum + 1e-20) : s[e]) *
                      c.routedScaling);
}
