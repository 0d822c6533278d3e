//===- Blocks.h - The reference's building blocks ---------------*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The math every architecture of meshfold-reference is built from: linear
// layers, RMSNorm, RoPE (rotate-half, interleaved, YaRN), causal GQA
// attention, SwiGLU and the routers (softmax top-k, DeepSeek-V3's
// group-limited sigmoid). Plain loops over f32 with double accumulation; no
// weights, no configuration.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_REFERENCE_BLOCKS_H
#define MESHFOLD_REFERENCE_BLOCKS_H

#include <cstdint>
#include <vector>

namespace meshfold::reference {

/// y[t, o] = sum_i x[t, i] * w[o, i] for t < rows (w is [out, in], the HF
/// linear layout), accumulated in double.
void linear(const float *x, int64_t rows, int64_t in, const float *w,
            int64_t out, float *y);

/// y[t, o] += bias[o] for every row t of y ([rows, out]).
void addBias(std::vector<float> &y, const std::vector<float> &bias);

/// RMSNorm of each of \p rows rows of width \p d:
/// x / sqrt(mean(x^2) + eps) * weight. \p y may be \p x.
void rmsNorm(const float *x, int64_t rows, int64_t d,
             const std::vector<float> &weight, double eps, float *y);

/// DeepSeek-V3's YaRN (rope_scaling type "yarn"), as transformers applies
/// it: each frequency mixes theta^(-2j/d) and that over `factor` by a ramp
/// over the dims from `low` to `high`; cos and sin times `cosScale`; the
/// softmax scale times `softmaxScale`.
struct YaRN {
  double factor = 1.0, low = 0, high = 0, cosScale = 1.0, softmaxScale = 1.0;
};

/// Rotate-half RoPE, in place, on x laid out [T, heads, headDim]; token t has
/// position t. As HF computes it, inv_freq and the angle position * inv_freq
/// are rounded to f32 (this matters at large positions); cos and sin are then
/// taken in double. With \p yarn, its frequencies and scale.
void applyRope(std::vector<float> &x, int64_t tokens, int64_t heads,
               int64_t headDim, double theta, const YaRN *yarn = nullptr);

/// The pairs (x[2j], x[2j + 1]) of each [dim] vector moved to (j, j + dim/2),
/// as transformers' apply_rotary_pos_emb_interleave does before rotate-half.
void deinterleave(std::vector<float> &x, int64_t dim);

/// Causal GQA attention. q, k: [T, n_h | n_kv, d_qk]; v: [T, n_kv, d_v];
/// out: [T, n_h, d_v]; scores scaled by scaleFactor/sqrt(d_qk). Query head h
/// reads KV head h / (n_h / n_kv).
void attention(const std::vector<float> &q, const std::vector<float> &k,
               const std::vector<float> &v, int64_t tokens, int64_t numHeads,
               int64_t numKVHeads, int64_t headDim, int64_t valueDim,
               std::vector<float> &out, double scaleFactor = 1.0);

double silu(double x);

/// One row through a SwiGLU MLP: out [d] = W2 (silu(W1 x) * W3 x), with W1
/// and W3 [ffn, d] and W2 [d, ffn]; `g` and `u` are scratch.
void swiGLU(const float *x, int64_t d, int64_t ffn,
            const std::vector<float> &w1, const std::vector<float> &w2,
            const std::vector<float> &w3, std::vector<float> &g,
            std::vector<float> &u, float *out);

/// Router: picks the top-k experts by logit (ties: lower index first) and
/// their weights. With norm_topk_prob the weights are the softmax over the
/// chosen k logits; without, the softmax over all experts at the chosen k.
void route(const float *logits, int64_t numExperts, int64_t topK,
           bool normTopKProb, std::vector<int64_t> &experts,
           std::vector<double> &weights);

/// The parameters of DeepSeek-V3's group-limited sigmoid router.
struct GroupLimitedRouting {
  int64_t numExperts = 0, topK = 0;
  /// n_group groups of numExperts / nGroup experts, topk_group kept.
  int64_t nGroup = 1, topkGroup = 1;
  bool normTopKProb = true;
  double routedScaling = 1.0;
};

/// DeepSeek-V3's router, as transformers' DeepseekV3MoE: s = sigmoid(logit);
/// experts are chosen by s + bias within the topk_group groups with the best
/// sum of their two best choice scores (other groups' experts count -inf,
/// as in transformers 5 and DeepSeek's inference code);
/// the weights are s at the chosen, over their sum (norm_topk_prob), times
/// routed_scaling_factor. Ties go to the lower index.
void routeSigmoid(const GroupLimitedRouting &c, const float *logits,
                  const std::vector<float> &bias, std::vector<int64_t> &experts,
                  std::vector<double> &weights);

} // namespace meshfold::reference

#endif // MESHFOLD_REFERENCE_BLOCKS_H
