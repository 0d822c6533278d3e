//===- HFConfig.h - A Hugging Face config.json, read and checked -*- C++
//-*-===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// The model a Hugging Face `config.json` describes (Mixtral; Qwen3-MoE with
/// its per-head q/k RMSNorm, OLMoE with its q/k RMSNorm over the whole
/// projections, Qwen2-MoE with its q/k/v biases and gated shared expert, each
/// with its weight names; the field names
/// num_experts, moe_intermediate_size and norm_topk_prob are read where they
/// mean the same thing), with every field
/// that changes the math and is not implemented refused, sizes counted
/// without overflow and bounded, and `eos_token_id` from
/// `generation_config.json` where given. Errors are one line naming the file
/// and the field; nothing here exits.
///
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_IMPORTER_HFCONFIG_H
#define MESHFOLD_IMPORTER_HFCONFIG_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace meshfold {

struct HFConfig {
  std::string arch;
  int64_t hidden = 0, ffn = 0, layers = 0, heads = 0, kvHeads = 0, headDim = 0,
          experts = 0, topK = 0, vocab = 0;
  /// max_position_embeddings (0: not in the config).
  int64_t maxPositions = 0;
  double eps = 0, theta = 0;
  bool renormalize = false, tieEmbeddings = false;
  /// Per-head RMSNorm of q and k before RoPE (self_attn.q_norm / k_norm,
  /// [head_dim] weights, Qwen3-MoE).
  bool qkNorm = false;
  /// RMSNorm of the whole q and k projections before the head split
  /// (self_attn.q_norm / k_norm, [heads * head_dim] and [kv_heads *
  /// head_dim] weights, OLMoE).
  bool qkProjectionNorm = false;
  /// OLMoE's clip_qkv: q, k (after their norms) and v clamped to
  /// [-clipQKV, clipQKV]; 0: none.
  double clipQKV = 0;
  /// Biases on the q, k and v projections (self_attn.{q,k,v}_proj.bias,
  /// Qwen2-MoE).
  bool qkvBias = false;
  /// A shared expert beside the routed ones: a dense SwiGLU of this width at
  /// `<moeBlock>.<sharedName>.{gate,up,down}_proj`, scaled per token by
  /// sigmoid(`<moeBlock>.shared_expert_gate` . x) where `sharedGate`
  /// (Qwen2-MoE's shared_expert; DeepSeek-V3's shared_experts, n_shared_experts
  /// x moe_intermediate_size wide, are ungated); 0: none.
  int64_t sharedFfn = 0;
  std::string sharedName = "shared_expert";
  bool sharedGate = true;
  /// DeepSeek-V3's multi-head latent attention (MLA): the query through
  /// q_a_proj, q_a_layernorm and q_b_proj (q_proj where qLoraRank is 0),
  /// the keys and values from one latent of kvLoraRank per token
  /// (kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj) plus one RoPE key of
  /// qkRopeDim shared by all heads. `headDim` is then the latent's width
  /// (kvLoraRank + qkRopeDim) and `kvHeads` 1: the attention runs in the
  /// latent space (the query's no-RoPE part absorbed through kv_b_proj).
  bool mla = false;
  int64_t qLoraRank = 0, kvLoraRank = 0, qkNopeDim = 0, qkRopeDim = 0,
          vHeadDim = 0;
  /// RoPE on interleaved pairs (DeepSeek-V3's rope_interleave).
  bool ropeInterleave = false;
  /// YaRN RoPE scaling (DeepSeek-V3's rope_scaling, type "yarn"), as
  /// transformers computes it: frequencies interpolated by yarnFactor over
  /// the ramp from dim yarnLow to yarnHigh, cos and sin scaled by
  /// attentionFactor, and (MLA) the softmax scale by softmaxScale.
  double yarnFactor = 1.0, yarnLow = 0, yarnHigh = 0, attentionFactor = 1.0,
         softmaxScale = 1.0;
  /// DeepSeek-V3's routing: sigmoid scores with
  /// mlp.gate.e_score_correction_bias for the choice, group-limited (nGroup
  /// groups, the topkGroup best kept), the weights times routedScaling.
  bool sigmoidRouting = false;
  int64_t nGroup = 1, topkGroup = 1;
  double routedScaling = 1.0;
  /// Layers before firstDense are dense (DeepSeek-V3's first_k_dense_replace).
  int64_t firstDense = 0;
  /// Dense layers (Qwen3-MoE, Qwen2-MoE): layer i has routed experts unless
  /// it is in mlp_only_layers or (i + 1) is not a multiple of
  /// decoder_sparse_step, as transformers decides; a dense layer's MLP is a
  /// SwiGLU of denseFfn (intermediate_size) at mlp.{gate,up,down}_proj.
  std::vector<int64_t> mlpOnlyLayers;
  int64_t sparseStep = 1, denseFfn = 0;
  bool isDense(int64_t layer) const {
    if (layer < firstDense)
      return true;
    for (int64_t i : mlpOnlyLayers)
      if (i == layer)
        return true;
    return (layer + 1) % sparseStep != 0;
  }
  /// The checkpoint's names under model.layers.N.: the MoE block (its router
  /// is `<moeBlock>.gate`) and each expert's gate, down and up projections
  /// (`<moeBlock>.experts.E.<name>.weight`).
  std::string moeBlock = "block_sparse_moe", expertGate = "w1",
              expertDown = "w2", expertUp = "w3";
  /// End-of-sequence ids (generation stops at them); empty: none named.
  std::vector<int64_t> eosTokens;
};

/// The most layers a model may have (the importer builds each one), and the
/// most elements of one weight tensor (2^40: sizes stay far from int64's
/// limits in bytes and in every product the tools form).
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxTensorElements = int64_t(1) << 40;

/// Parses and checks the text of a config.json (\p path names it in errors).
bool parseHFConfig(llvm::StringRef text, llvm::StringRef path, HFConfig &out,
                   std::string &error);

/// Applies the text of a generation_config.json: its eos_token_id wins.
bool applyGenerationConfig(llvm::StringRef text, llvm::StringRef path,
                           HFConfig &config, std::string &error);

/// Reads \p path (a config.json) and the generation_config.json beside it,
/// where there is one.
bool readHFConfig(llvm::StringRef path, HFConfig &out, std::string &error);

} // namespace meshfold

#endif // MESHFOLD_IMPORTER_HFCONFIG_H
