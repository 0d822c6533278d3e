//===- Reference.h - What the reference's files share -----------*- C++ -*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
//
// The declarations meshfold-reference's files share: the model's
// configuration and how config.json is read, the weights, the per-request
// state, and each file's entry points. Config.cpp reads the fields every
// architecture has and calls Mixtral.cpp and DeepSeekV3.cpp for their own;
// Model.cpp runs the layers, whose attention is in those two files and whose
// MoE and dense MLPs are in FeedForward.cpp, all on Blocks.h's math;
// Generate.cpp generates by dense recomputation.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_REFERENCE_REFERENCE_H
#define MESHFOLD_REFERENCE_REFERENCE_H

#include "Blocks.h"

#include "mfrt/io/Checkpoint.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshfold::reference {

/// rope_theta when config.json does not give one (HF MixtralConfig).
constexpr double defaultRopeTheta = 1e6;
/// rms_norm_eps when config.json does not give one (HF MixtralConfig).
constexpr double defaultRmsNormEps = 1e-5;

/// Model hyper-parameters read from config.json.
struct Config {
  int64_t hidden = 0;     ///< d
  int64_t expertFfn = 0;  ///< expert intermediate size
  int64_t numLayers = 0;  ///< layers to run (after --num-layers)
  int64_t numHeads = 0;   ///< n_h
  int64_t numKVHeads = 0; ///< n_kv
  int64_t headDim = 0;    ///< d_h
  int64_t numExperts = 0; ///< experts per layer
  int64_t topK = 0;       ///< experts per token
  int64_t vocab = 0;      ///< V
  double rmsNormEps = defaultRmsNormEps;
  double ropeTheta = defaultRopeTheta;
  bool normTopKProb = true;
  bool tieWordEmbeddings = false;
  /// Qwen3-MoE: q and k RMS-normalised per head (self_attn.q_norm/k_norm)
  /// before RoPE.
  bool qkNorm = false;
  /// OLMoE: q and k RMS-normalised over the whole projection (all heads)
  /// before the head split.
  bool qkProjectionNorm = false;
  /// OLMoE's clip_qkv: q and k (after their norms) and v clamped to
  /// [-clipQKV, clipQKV]; 0: none.
  double clipQKV = 0;
  /// Qwen2-MoE: biases on the q, k and v projections.
  bool qkvBias = false;
  /// Qwen2-MoE: the shared expert's width (0: none); it sees every token,
  /// scaled by sigmoid(shared_expert_gate . x).
  int64_t sharedFfn = 0;
  /// Qwen2-MoE and Qwen3-MoE: layer i is dense (one SwiGLU MLP of
  /// denseFfn at mlp.{gate,up,down}_proj, no router) when it is in
  /// mlp_only_layers or (i + 1) is not a multiple of decoder_sparse_step.
  std::vector<int64_t> mlpOnlyLayers;
  int64_t sparseStep = 1, denseFfn = 0;
  /// DeepSeek-V3: layers before first_k_dense_replace are dense.
  int64_t firstDense = 0;
  bool dense(int64_t layer) const {
    return layer < firstDense ||
           std::find(mlpOnlyLayers.begin(), mlpOnlyLayers.end(), layer) !=
               mlpOnlyLayers.end() ||
           (layer + 1) % sparseStep != 0;
  }
  /// DeepSeek-V3's multi-head latent attention, computed here per head as
  /// transformers writes it: q from q_a_proj / q_a_layernorm / q_b_proj (or
  /// q_proj when qLoraRank is 0), [q_nope, q_rope] per head; K and V per
  /// head from kv_b_proj of the normalised latent, the RoPE key shared.
  /// The cache outputs are the latent and the RoPE key, [T, 1, r + rope].
  bool mla = false;
  int64_t qLoraRank = 0, kvLoraRank = 0, qkNope = 0, qkRope = 0, vHead = 0;
  bool ropeInterleave = false;
  /// DeepSeek-V3's YaRN (none: factor 1).
  YaRN yarn;
  /// DeepSeek-V3's routing: sigmoid scores, e_score_correction_bias for
  /// the choice only, n_group groups of which topk_group are kept, the
  /// weights times routed_scaling_factor.
  bool sigmoidRouting = false;
  int64_t nGroup = 1, topkGroup = 1;
  double routedScaling = 1.0;
  /// The shared expert's block name and whether a sigmoid gate scales it
  /// (Qwen2-MoE's shared_expert is gated, DeepSeek-V3's shared_experts not).
  std::string sharedBlock = "shared_expert";
  bool sharedGated = true;
  /// Names under model.layers.N.: the MoE block and the experts' gate,
  /// down and up projections.
  std::string moeBlock = "block_sparse_moe";
  const char *expertGate = "w1", *expertDown = "w2", *expertUp = "w3";
  std::optional<int64_t> slidingWindow;
  /// End-of-sequence ids: generation_config.json's eos_token_id beside
  /// config.json when it has one, else config.json's (an id or a list).
  std::vector<int64_t> eosTokens;

  /// The names of every architecture but Mixtral: mlp.experts.E.gate_proj,
  /// down_proj and up_proj.
  void useMlpNames() {
    moeBlock = "mlp";
    expertGate = "gate_proj";
    expertDown = "down_proj";
    expertUp = "up_proj";
  }
};

/// The architecture config.json names, by `architectures` or `model_type`
/// (none: Mixtral): at most one flag is set, as a config naming two
/// families is refused.
struct Architecture {
  bool qwen2 = false, qwen3 = false, olmoe = false, deepseek = false;
  /// Qwen2-MoE, Qwen3-MoE or OLMoE: Mixtral's layer with other defaults.
  bool mixtralFamily() const { return qwen2 || qwen3 || olmoe; }
};

/// The error sink: every failure is one line.
struct Failure {
  std::string message;
};

/// Records \p message in \p f; returns false.
inline bool fail(Failure &f, const std::string &message) {
  f.message = message;
  return false;
}

//===----------------------------------------------------------------------===//
// config.json
//===----------------------------------------------------------------------===//

/// Reads typed fields of one JSON object (read from `path`); every error is
/// one line naming the file and the field.
class ConfigReader {
public:
  ConfigReader(const std::string &path, const llvm::json::Object &object,
               Failure &failure)
      : file(path), fields(object), failure(failure) {}

  const std::string &path() const { return file; }
  const llvm::json::Object &object() const { return fields; }

  /// Fails with "<path>: <message>".
  bool error(const std::string &message) {
    return fail(failure, file + ": " + message);
  }

  /// Reads an integer field; a missing or null field leaves \p out unset.
  bool optionalInt(llvm::StringRef key, std::optional<int64_t> &out);
  /// Reads a required positive integer field.
  bool requiredPositive(llvm::StringRef key, int64_t &out);
  /// Sets \p out to \p value, read from field \p key, if it is positive.
  bool positive(llvm::StringRef key, int64_t value, int64_t &out);
  /// Reads a number field; a missing or null field leaves \p out as is.
  bool optionalNumber(llvm::StringRef key, double &out);
  /// Reads a boolean field; a missing or null field leaves \p out as is.
  bool optionalBool(llvm::StringRef key, bool &out);
  /// Whether \p key is there and not null.
  bool isPresent(llvm::StringRef key) const;

private:
  const std::string &file;
  const llvm::json::Object &fields;
  Failure &failure;
};

/// Reads config.json at \p path into \p config, running its first
/// \p numLayersLimit layers (-1: all).
bool readConfig(const std::string &path, int numLayersLimit, Config &config,
                Failure &failure);

/// Qwen2-MoE's, Qwen3-MoE's and OLMoE's defaults, Qwen2-MoE's shared expert
/// and the Qwen models' dense layers; refuses those for other architectures.
/// \p moeIntermediate: whether moe_intermediate_size is given.
bool readMixtralFamilyFields(ConfigReader &reader, const Architecture &arch,
                             int64_t numHiddenLayers, bool moeIntermediate,
                             Config &config);

/// The Mixtral family's attention variants: q/k norms, names, eps and
/// OLMoE's clip_qkv (refused for other architectures).
bool readMixtralFamilyAttention(ConfigReader &reader, const Architecture &arch,
                                Config &config);

/// DeepSeek-V3's fields: MLA's dims, its routing, shared experts and dense
/// first layers; what transformers' DeepseekV3 does not implement is refused.
bool readDeepSeekV3Fields(ConfigReader &reader, int64_t numHiddenLayers,
                          Config &config);

/// DeepSeek-V3's YaRN parameters in \p object: rope_parameters when its
/// rope_type is "yarn", else rope_scaling; null when neither is an object.
const llvm::json::Object *findYaRN(const llvm::json::Object &object);

/// Reads YaRN's parameters \p yarn (and its rope_theta) into config.yarn
/// (after qk_rope_head_dim and rope_theta).
bool readYaRN(ConfigReader &reader, const llvm::json::Object &yarn,
              Config &config);

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

/// Checks and loads weights by name, converting to f32. An fp8 (F8_E4M3)
/// matrix is dequantized with its `<name>_scale_inv`: one scale per
/// 128 x 128 block, which multiplies the block's values.
class Weights {
public:
  Weights(const mfrt::Checkpoint &file, Failure &failure)
      : file(file), failure(failure) {}

  /// Checks that \p name exists, is a float tensor (or an fp8 matrix with
  /// its scales) and has \p shape.
  bool check(const std::string &name, const std::vector<int64_t> &shape);

  /// Loads the whole tensor (already checked) as f32.
  bool load(const std::string &name, std::vector<float> &out);

  /// Loads row \p row of the 2-D tensor \p name (already checked) as f32.
  bool loadRow(const std::string &name, int64_t row, float *out);

private:
  /// Checks the block scales of the fp8 matrix \p name of \p shape.
  bool checkScales(const std::string &name, const std::vector<int64_t> &shape);

  /// Dequantizes rows [first, first + rows) of the fp8 matrix \p tensor
  /// (already checked) into \p out: each value times its block's scale.
  bool loadF8(const mfrt::TensorInfo &tensor, int64_t first, int64_t rows,
              float *out);

  const mfrt::Checkpoint &file;
  Failure &failure;
};

inline constexpr const char *embedName = "model.embed_tokens.weight";
inline constexpr const char *normName = "model.norm.weight";
inline constexpr const char *lmHeadName = "lm_head.weight";

/// model.layers.<layer>.<suffix>
std::string layerName(int64_t layer, const std::string &suffix);
/// Routed expert \p expert's projection \p which.
std::string expertName(const Config &c, int64_t layer, int64_t expert,
                       const char *which);
/// The shared expert's projection \p which.
std::string sharedName(const Config &c, int64_t layer, const char *which);
/// self_attn.<which>.weight of \p layer.
std::string attnName(int64_t layer, const char *which);

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

/// Per-request state and outputs.
struct Request {
  std::vector<int64_t> tokens;
  std::vector<float> hidden;                    ///< [T, d]
  std::vector<std::vector<float>> keys, values; ///< per layer, [T, n_kv, d_h]
  std::vector<float> logits;                    ///< [V]
  std::vector<float> promptLogits;              ///< [T, V] (optional)
};

/// Checks q, k, v and o of \p layer (not MLA).
bool checkAttentionWeights(const Config &c, Weights &weights, int64_t layer);
/// Checks the q/k norms and q/k/v biases of \p layer, where it has them.
bool checkQKNormsAndBiases(const Config &c, Weights &weights, int64_t layer);
/// Checks MLA's projections and norms of \p layer.
bool checkLatentAttentionWeights(const Config &c, Weights &weights,
                                 int64_t layer);
/// Checks a dense layer's MLP, or the router of a MoE layer.
bool checkMLPOrRouterWeights(const Config &c, Weights &weights, int64_t layer);
/// Checks a MoE layer's shared and routed experts.
bool checkExpertWeights(const Config &c, Weights &weights, int64_t layer);

/// The attention of \p layer (Mixtral's, with Qwen's and OLMoE's variants)
/// on every request: h += o(attention(q, k, v)); records K and V.
bool runAttention(const Config &c, int64_t layer, Weights &weights,
                  std::vector<Request> &requests);

/// DeepSeek-V3's latent attention of \p layer on every request; records the
/// latent cache.
bool runLatentAttention(const Config &c, int64_t layer, Weights &weights,
                        std::vector<Request> &requests);

/// The MoE of \p layer on every request: h += the routed experts' weighted
/// sum (and the shared expert's output).
bool runMoE(const Config &c, int64_t layer, Weights &weights,
            std::vector<Request> &requests, Failure &failure);

/// A dense layer's MLP (no experts): h += W2 (silu(W1 x) * W3 x) with x the
/// post-attention RMSNorm of h.
bool runDenseMLP(const Config &c, int64_t layer, Weights &weights,
                 std::vector<Request> &requests);

/// Prefill of `requests`: their K/V, last-position logits and, with
/// `allLogits`, every position's (prompt logprobs).
bool runModel(const Config &c, const mfrt::Checkpoint &file,
              std::vector<Request> &requests, bool allLogits, Failure &failure);

//===----------------------------------------------------------------------===//
// Generation (dense recomputation)
//===----------------------------------------------------------------------===//

/// How tokens are generated after prefill.
struct Sampling {
  int64_t maxNewTokens = 0; ///< 0: no generation
  double temperature = 0.0; ///< 0: greedy
  int64_t topK = 0;         ///< 0: all
  double topP = 1.0;
  uint64_t seed = 0;
  bool ignoreEos = false;
  bool stepLogits = false; ///< keep the logits of each step
};

/// One request's generated tokens.
struct Generated {
  std::vector<int32_t> ids;
  std::vector<float> stepLogits; ///< [n, V] with --step-logits
};

/// Generates after the prefill run of `requests` (their logits): each step
/// re-runs the whole model on prompt + the tokens so far of every request
/// still going. Each request ends with the K/V of its last run: prompt + all
/// generated tokens but the last.
bool generate(const Config &c, const mfrt::Checkpoint &file,
              const std::vector<std::vector<int64_t>> &prompts,
              const Sampling &sampling, std::vector<Request> &requests,
              std::vector<Generated> &out, Failure &failure);

} // namespace meshfold::reference

#endif // MESHFOLD_REFERENCE_REFERENCE_H
