//===- MoEOps.td - MoE dialect ops -------------------------*- tablegen -*-===//

#ifndef MESHFOLD_DIALECT_MOE_IR_MOEOPS_TD
#define MESHFOLD_DIALECT_MOE_IR_MOEOPS_TD

include "meshfold/Dialect/MoE/IR/MoEBase.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def MoE_FloatTensor : RankedTensorOf<[F32, BF16, F16]>;
def MoE_IndexTensor : RankedTensorOf<[I64]>;

//===----------------------------------------------------------------------===//
// Weights and inputs
//===----------------------------------------------------------------------===//

def MoE_ParamOp : MoE_Op<"param", [Pure]> {
  let summary = "a weight tensor by its Hugging Face name";
  let description = [{
    A model weight, named as in the checkpoint. The shape is static and is the
    weight's full (global) shape; linear weights are `[out, in]`. A name with
    the placeholder `{e}` stands for the stacked per-expert tensors
    `...experts.0...`, `...experts.1...`: its leading dimension counts experts.

    ```mlir
    %w = moe.param "model.norm.weight" : tensor<64xf32>
    %w1 = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w1.weight"
        : tensor<32x128x64xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// True when the name stands for stacked per-expert tensors.
    bool isStackedExperts() { return getName().contains("{e}"); }
  }];
}

def MoE_PositionsOp : MoE_Op<"positions", [Pure]> {
  let summary = "global positions of the prompt tokens";
  let description = [{
    The global position of each token of `tokens`: `0 .. T-1` for a whole
    prompt. RoPE and the causal mask take these, never local indices, so that
    a partitioned program can hand each rank the positions of its own chunks.
  }];
  let arguments = (ins MoE_IndexTensor:$tokens);
  let results = (outs MoE_IndexTensor:$result);
  let assemblyFormat = "$tokens attr-dict `:` type($tokens) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Layers
//===----------------------------------------------------------------------===//

def MoE_EmbedOp : MoE_Op<"embed", [Pure]> {
  let summary = "token embedding lookup";
  let description = [{
    `result[t, :] = table[tokens[t], :]`. Table `[V, d]`, tokens `[T]`,
    result `[T, d]`.
  }];
  let arguments = (ins MoE_FloatTensor:$table, MoE_IndexTensor:$tokens);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $table `,` $tokens attr-dict `:` type($table) `,` type($tokens) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MoE_RMSNormOp : MoE_Op<"rms_norm", [Pure]> {
  let summary = "RMSNorm over the last dimension, per token (or token and head)";
  let description = [{
    `result[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + epsilon) * weight` for
    a `[T, d]` input; on a `[T, heads, d_h]` input each head's vector is
    normalised on its own with the one `[d_h]` weight (Qwen3-MoE's q_norm
    and k_norm, before RoPE).
  }];
  let arguments = (ins MoE_FloatTensor:$input, MoE_FloatTensor:$weight,
                       F32Attr:$epsilon);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight attr-dict `:` type($input) `,` type($weight) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MoE_SumSquaresOp : MoE_Op<"sum_squares", [Pure]> {
  let summary = "the sum of squares of each row: an RMSNorm's first half";
  let description = [{
    `result[t] = sum_j x[t, j]^2` (accumulated in f32). With the columns of
    `x` split over a group, the partial sums all-reduced over the group give
    the whole row's: how an RMSNorm over a TP-split projection (OLMoE's
    q_norm / k_norm) normalises with `moe.rms_scale`.
  }];
  let arguments = (ins MoE_FloatTensor:$input);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MoE_RMSScaleOp : MoE_Op<"rms_scale", [Pure]> {
  let summary = "an RMSNorm's second half, from given sums of squares";
  let description = [{
    `result[t, j] = x[t, j] / sqrt(sum_squares[t] / count + epsilon) *
    weight[j]`: `moe.rms_norm` of a row whose squares, `count` of them, were
    summed elsewhere (over every rank's columns of the row). `count` is the
    number of squares the sum holds: the whole row's width, times the number
    of ranks that hold the same columns where some do.
  }];
  let arguments = (ins MoE_FloatTensor:$input, MoE_FloatTensor:$sum_squares,
                       MoE_FloatTensor:$weight, F32Attr:$epsilon,
                       I64Attr:$count);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $sum_squares `,` $weight attr-dict `:` type($input) `,`
    type($sum_squares) `,` type($weight) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MoE_ClipOp : MoE_Op<"clip", [Pure, Elementwise, SameOperandsAndResultType]> {
  let summary = "clamps every element to [-limit, limit]";
  let description = [{
    `result = min(max(x, -limit), limit)`: OLMoE's `clip_qkv` on the q, k and
    v projections (q and k after their norms). Each element is its own, so
    any split of `x` applies it unchanged.
  }];
  let arguments = (ins MoE_FloatTensor:$input, F32Attr:$limit);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $input attr-dict `:` type($input)
  }];
  let hasVerifier = 1;
}

def MoE_LinearOp : MoE_Op<"linear", [Pure]> {
  let summary = "a linear layer: x W^T, plus a bias where given";
  let description = [{
    `result[t, o] = sum_i x[t, i] * weight[o, i] (+ bias[o])` with the weight
    `[out, in]` and the bias `[out]` as stored by Hugging Face (Qwen2-MoE's
    q/k/v projections have biases).
  }];
  let arguments = (ins MoE_FloatTensor:$input, MoE_FloatTensor:$weight,
                       Optional<MoE_FloatTensor>:$bias);
  let results = (outs MoE_FloatTensor:$result);
  let builders = [
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$input,
                   "::mlir::Value":$weight), [{
      build($_builder, $_state, result, input, weight, ::mlir::Value());
    }]>
  ];
  let assemblyFormat = [{
    $input `,` $weight (`bias` $bias^)? attr-dict `:` type($input) `,`
    type($weight) (`,` type($bias)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def MoE_HeadLinearOp : MoE_Op<"head_linear", [Pure]> {
  let summary = "a linear map per attention head";
  let description = [{
    Input `[T, H, a]`, weight `[H, m, n]` (a head's slice of a projection as
    stored, e.g. DeepSeek-V3's `kv_b_proj` viewed per head). By default
    `result[t, h, i] = sum_j x[t, h, j] * weight[h, i, j]` (`a = n`, result
    `[T, H, m]`, x W^T per head); with `transpose_weight`,
    `result[t, h, j] = sum_i x[t, h, i] * weight[h, i, j]` (`a = m`, result
    `[T, H, n]`). MLA uses both: the query's no-RoPE part is absorbed into
    the latent space with `W_UK` (transposed), and attention over the latent
    is brought back to each head's values with `W_UV`.
  }];
  let arguments = (ins MoE_FloatTensor:$input, MoE_FloatTensor:$weight,
                       UnitAttr:$transpose_weight);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight attr-dict `:` type($input) `,` type($weight) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def MoE_RoPEOp : MoE_Op<"rope", [Pure]> {
  let summary = "rotary position embedding (rotate-half) at global positions";
  let description = [{
    Input `[T, heads, d_h]`, positions `[T]`. With `half = d_h / 2`,
    `inv_freq[j] = theta^(-2j / d_h)` and `a = p * inv_freq[j]`, where `p`
    is the place in its sequence of the global position `positions[t]` (its
    low 32 bits, see `moe.attention`):
    `out[j] = x[j] cos a - x[j + half] sin a`,
    `out[j + half] = x[j + half] cos a + x[j] sin a`.
    With `interleaved` (DeepSeek-V3's `rope_interleave`) the rotated pairs
    are `(x[2j], x[2j + 1])`, and the result holds them de-interleaved as
    transformers leaves them: `out[j] = x[2j] cos a - x[2j + 1] sin a`,
    `out[j + half] = x[2j + 1] cos a + x[2j] sin a`.

    YaRN (`yarn_factor` s != 1, DeepSeek-V3's `rope_scaling`): with
    `r = clamp((j - yarn_low) / (yarn_high - yarn_low), 0, 1)` the frequency
    is `inv_freq[j] / s * r + inv_freq[j] * (1 - r)` (dims below `yarn_low`
    keep their frequency, those above `yarn_high` are interpolated), and cos
    and sin are scaled by `attention_factor`, as transformers' YaRN computes
    them.
  }];
  let builders = [
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$input,
                   "::mlir::Value":$positions, "::mlir::FloatAttr":$theta), [{
      build($_builder, $_state, result, input, positions, theta,
            ::mlir::UnitAttr(), ::mlir::FloatAttr(), ::mlir::FloatAttr(),
            ::mlir::FloatAttr(), ::mlir::FloatAttr());
    }]>
  ];
  let arguments = (ins MoE_FloatTensor:$input, MoE_IndexTensor:$positions,
                       F32Attr:$theta, UnitAttr:$interleaved,
                       DefaultValuedAttr<F32Attr, "1.0f">:$yarn_factor,
                       DefaultValuedAttr<F32Attr, "0.0f">:$yarn_low,
                       DefaultValuedAttr<F32Attr, "0.0f">:$yarn_high,
                       DefaultValuedAttr<F32Attr, "1.0f">:$attention_factor);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $positions attr-dict `:` type($input) `,` type($positions) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MoE_AttentionOp : MoE_Op<"attention", [Pure]> {
  let summary = "causal grouped-query attention by global positions";
  let description = [{
    Query `[Tq, n_h, d_h]`, key and value `[Tk, n_kv, d_h]`, and the global
    positions of queries `[Tq]` and keys `[Tk]`. Query head `h` reads KV head
    `h / (n_h / n_kv)`. A global position is `sequence * 2^32 + p`: in the
    low 32 bits the token's place `p` in its sequence, in the high bits the
    sequence (request) of a batch: 0 in prefill, the batch slot in a decode
    step that runs several requests' tokens together. Query `i` attends to key `j` iff
    both are of one sequence and `kv_positions[j] <= q_positions[i]`;
    scores are scaled by `scale` (usually `1/sqrt(d_h)`) and normalised by
    a numerically safe softmax.

    With `tiles`, the keys are those of a table of key tiles over the rows
    of `key` and `value` (a decode step reading its K/V cache in place,
    `convert-moe-to-runtime`): `key_tiles [n, 2]` gives each tile's first
    row and row count (at most C), and `kv_positions [n, C]` its rows'
    positions (row `j` of tile `t` at `kv_positions[t, j]`). The rows no
    tile names are not keys.

    ```mlir
    %o = moe.attention %q, %k, %v, %qp, %kp tiles %t : tensor<?x2xi64>
        {scale = 0.125 : f32} : tensor<?x8x64xf32>, tensor<?x2x64xf32>,
        tensor<?x2x64xf32>, tensor<?xi64>, tensor<?x64xi64>
        -> tensor<?x8x64xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$query, MoE_FloatTensor:$key,
                       MoE_FloatTensor:$value, MoE_IndexTensor:$q_positions,
                       MoE_IndexTensor:$kv_positions,
                       Optional<MoE_IndexTensor>:$key_tiles, F32Attr:$scale);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $q_positions `,` $kv_positions
    (`tiles` $key_tiles^ `:` type($key_tiles))? attr-dict `:`
    type($query) `,` type($key) `,` type($value) `,` type($q_positions) `,`
    type($kv_positions) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MoE_RouterOp : MoE_Op<"router", [Pure]> {
  let summary = "MoE router: gate logits, top-k, routing weights";
  let description = [{
    `logits = x gate^T` (gate `[n_experts, d]`), then the `top_k` experts per
    token (ties go to the lower expert index), returned in descending order
    of their choice score as `indices [T, k]`.

    Softmax scoring (the default): the choice score is the logit. With
    `renormalize` (Mixtral), `weights [T, k]` are the softmax over the chosen
    k logits; without it (Qwen2-MoE / OLMoE `norm_topk_prob = false`), the
    softmax over all experts at the chosen ones.

    `sigmoid` scoring (DeepSeek-V3): `s = sigmoid(logits)`, and the choice
    score is `s + bias` (`e_score_correction_bias`, `[n_experts]`; 0 where
    no bias is given), which selects experts but does not weigh them. With
    `n_group` > 1 the experts form `n_group` groups of consecutive indices;
    each group scores the sum of its two highest choice scores, the
    `topk_group` best groups are kept (ties to the lower group), and every
    expert of another group has its choice score replaced by -inf (as
    transformers 5 and DeepSeek's inference code mask it; transformers 4
    filled 0, which picks a dropped group's expert over a kept one whose
    biased score is negative). `weights` are `s` at the
    chosen experts, divided by their sum (plus 1e-20) with `renormalize`,
    times `scaling` (`routed_scaling_factor`).
  }];
  let arguments = (ins MoE_FloatTensor:$input, MoE_FloatTensor:$gate,
                       Optional<MoE_FloatTensor>:$bias,
                       ConfinedAttr<I64Attr, [IntPositive]>:$top_k,
                       UnitAttr:$renormalize, UnitAttr:$sigmoid,
                       DefaultValuedAttr<ConfinedAttr<I64Attr, [IntPositive]>,
                                         "1">:$n_group,
                       DefaultValuedAttr<ConfinedAttr<I64Attr, [IntPositive]>,
                                         "1">:$topk_group,
                       DefaultValuedAttr<F32Attr, "1.0f">:$scaling);
  let results = (outs MoE_FloatTensor:$weights, MoE_IndexTensor:$indices);
  let builders = [
    OpBuilder<(ins "::mlir::Type":$weights, "::mlir::Type":$indices,
                   "::mlir::Value":$input, "::mlir::Value":$gate,
                   "::mlir::IntegerAttr":$top_k,
                   "::mlir::UnitAttr":$renormalize), [{
      build($_builder, $_state, weights, indices, input, gate,
            ::mlir::Value(), top_k, renormalize, ::mlir::UnitAttr(),
            ::mlir::IntegerAttr(), ::mlir::IntegerAttr(), ::mlir::FloatAttr());
    }]>
  ];
  let assemblyFormat = [{
    $input `,` $gate (`bias` $bias^)? attr-dict `:` type($input) `,`
    type($gate) (`,` type($bias)^)? `->` type($weights) `,` type($indices)
  }];
  let hasVerifier = 1;
}

def MoE_ExpertsOp : MoE_Op<"experts", [Pure]> {
  let summary = "SwiGLU experts and the weighted sum of the chosen ones";
  let description = [{
    `result[t] = sum_k weights[t, k] * E_{indices[t, k]}(x[t])` with
    `E_e(x) = w2[e] (silu(w1[e] x) * w3[e] x)`; `w1`, `w3`: `[E, ffn, d]`,
    `w2`: `[E, d, ffn]` (the stacked `experts.{e}.w*` weights).
  }];
  let arguments = (ins MoE_FloatTensor:$input, MoE_FloatTensor:$weights,
                       MoE_IndexTensor:$indices, MoE_FloatTensor:$w1,
                       MoE_FloatTensor:$w2, MoE_FloatTensor:$w3);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weights `,` $indices `,` $w1 `,` $w2 `,` $w3 attr-dict `:`
    type($input) `,` type($weights) `,` type($indices) `,` type($w1) `,`
    type($w2) `,` type($w3) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MoE_MLPOp : MoE_Op<"mlp", [Pure]> {
  let summary = "a dense SwiGLU MLP, optionally scaled by a sigmoid gate";
  let description = [{
    `result[t] = w2 (silu(w1 x[t]) * w3 x[t])`, times `sigmoid(gate . x[t])`
    where a gate is given; `w1`, `w3`: `[ffn, d]`, `w2`: `[d, ffn]`, `gate`:
    `[1, d]`. A shared expert (Qwen2-MoE's `mlp.shared_expert`, gated by
    `mlp.shared_expert_gate`; DeepSeek's, ungated) and the MLP of a dense
    layer. Each row is its own: a rank applies it to the rows it holds.
  }];
  let arguments = (ins MoE_FloatTensor:$input, MoE_FloatTensor:$w1,
                       MoE_FloatTensor:$w2, MoE_FloatTensor:$w3,
                       Optional<MoE_FloatTensor>:$gate);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $w1 `,` $w2 `,` $w3 (`gate` $gate^)? attr-dict `:`
    type($input) `,` type($w1) `,` type($w2) `,` type($w3)
    (`,` type($gate)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def MoE_LMHeadOp : MoE_Op<"lm_head", [Pure]> {
  let summary = "LM head on the last prompt position";
  let description = [{
    Prefill's logits: `result[v] = sum_i x[r, i] * weight[v, i]` for the row
    `r` of `x [T, d]` whose global position `positions[r]` is `last` (the
    prompt's last position, T-1); all zeros when no row has that position
    (after partitioning, a rank that does not hold it). Weight `[V, d]`,
    result `[V]`.

    ```mlir
    %l = moe.lm_head %x, %w, %pos, %last
        : tensor<?x64xf32>, tensor<512x64xf32>, tensor<?xi64> -> tensor<512xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$input, MoE_FloatTensor:$weight,
                       MoE_IndexTensor:$positions, Index:$last);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight `,` $positions `,` $last attr-dict `:` type($input) `,`
    type($weight) `,` type($positions) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MoE_TakePositionOp : MoE_Op<"take_position", [Pure]> {
  let summary = "the row at one global position, if this rank holds it";
  let description = [{
    Returns `x[r]` as `[1, d]` for the row `r` whose position is `target`,
    and whether there is one (else a zero row and 0). `found` is a one-element
    f32 tensor (1.0 or 0.0) so that it can be reduced over a group.
  }];
  let arguments = (ins MoE_FloatTensor:$input, MoE_IndexTensor:$positions,
                       Index:$target);
  let results = (outs MoE_FloatTensor:$row, MoE_FloatTensor:$found);
  let assemblyFormat = [{
    $input `,` $positions `,` $target attr-dict `:` type($input) `,`
    type($positions) `->` type($row) `,` type($found)
  }];
  let hasVerifier = 1;
}

def MoE_AttentionPartialOp : MoE_Op<"attention_partial", [Pure]> {
  let summary = "attention over one block of keys, with its log-sum-exp";
  let description = [{
    As `moe.attention`, over the keys given, also returning for each query
    and head the log-sum-exp of its masked scaled scores,
    `lse = m + log(sum_j exp(s_j - m))` (`-inf` when no key is visible; the
    output row is then 0). Partial results over disjoint key blocks combine
    exactly with `moe.attention_merge` (ring attention). `tiles` as
    `moe.attention`'s.
  }];
  let arguments = (ins MoE_FloatTensor:$query, MoE_FloatTensor:$key,
                       MoE_FloatTensor:$value, MoE_IndexTensor:$q_positions,
                       MoE_IndexTensor:$kv_positions,
                       Optional<MoE_IndexTensor>:$key_tiles, F32Attr:$scale);
  let results = (outs MoE_FloatTensor:$result, MoE_FloatTensor:$lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $q_positions `,` $kv_positions
    (`tiles` $key_tiles^ `:` type($key_tiles))? attr-dict `:`
    type($query) `,` type($key) `,` type($value) `,` type($q_positions) `,`
    type($kv_positions) `->` type($result) `,` type($lse)
  }];
  let hasVerifier = 1;
}

def MoE_AttentionMergeOp : MoE_Op<"attention_merge", [Pure,
    AllTypesMatch<["out1", "out2", "result"]>,
    AllTypesMatch<["lse1", "lse2", "lse"]>]> {
  let summary = "merge two partial attention results by their log-sum-exp";
  let description = [{
    `O = (w1 O1 + w2 O2) / (w1 + w2)` with `w_i = exp(lse_i - m)`,
    `m = max(lse_1, lse_2)`, and `lse = m + log(w1 + w2)`. With each side's
    softmax max `m_i` and sum `l_i` (`lse_i = m_i + log(l_i)`), `w_i` is the
    online-softmax weight `exp(m_i - max(m_1, m_2)) * l_i` up to a factor
    common to both sides, which cancels; no exponent is positive, so nothing
    overflows. A side with `lse = -inf` contributes nothing.
  }];
  let arguments = (ins MoE_FloatTensor:$out1, MoE_FloatTensor:$lse1,
                       MoE_FloatTensor:$out2, MoE_FloatTensor:$lse2);
  let results = (outs MoE_FloatTensor:$result, MoE_FloatTensor:$lse);
  let assemblyFormat = [{
    $out1 `,` $lse1 `,` $out2 `,` $lse2 attr-dict `:` type($out1) `,`
    type($lse1) `->` type($result) `,` type($lse)
  }];
  let hasVerifier = 1;
}

def MoE_ExpertFFNOp : MoE_Op<"expert_ffn", [Pure]> {
  let summary = "SwiGLU expert per row, for rows grouped by expert parallelism";
  let description = [{
    `result[i] = w2[e] (silu(w1[e] x[i]) * w3[e] x[i])` with
    `e = experts[i]`: the experts of this rank applied to the rows a dispatch
    brought here (no routing weight; combine applies it).
  }];
  let arguments = (ins MoE_FloatTensor:$input, MoE_IndexTensor:$experts,
                       MoE_FloatTensor:$w1, MoE_FloatTensor:$w2,
                       MoE_FloatTensor:$w3);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $experts `,` $w1 `,` $w2 `,` $w3 attr-dict `:` type($input) `,`
    type($experts) `,` type($w1) `,` type($w2) `,` type($w3) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Structure
//===----------------------------------------------------------------------===//

def MoE_LayerOp : MoE_Op<"layer", [IsolatedFromAbove,
    SingleBlockImplicitTerminator<"YieldOp">]> {
  let summary = "one decoder layer";
  let description = [{
    The ops of decoder layer `index` (0-based), isolated from above: the block
    arguments are the operands (the residual stream and the tokens' global
    positions), the yielded values the results. Partitioning moves whole
    layers between pipeline stages; lowering inlines them.

    ```mlir
    %h1 = moe.layer 3 (%h0, %pos) : (tensor<?x64xf32>, tensor<?xi64>)
        -> tensor<?x64xf32> {
    ^bb0(%h: tensor<?x64xf32>, %p: tensor<?xi64>):
      ...
      moe.yield %out : tensor<?x64xf32>
    }
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$index,
                       Variadic<AnyType>:$inputs);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $index `(` $inputs `)` attr-dict `:` functional-type($inputs, $results)
    $body
  }];
  let hasVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    OpBuilder<(ins "int64_t":$index, "::mlir::ValueRange":$inputs,
                   "::mlir::TypeRange":$resultTypes)>
  ];
}

def MoE_YieldOp : MoE_Op<"yield", [Pure, Terminator, HasParent<"LayerOp">]> {
  let summary = "the results of a layer";
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
  let builders = [OpBuilder<(ins), [{ build($_builder, $_state, {}); }]>];
}

//===----------------------------------------------------------------------===//
// Outputs
//===----------------------------------------------------------------------===//

def MoE_PromptLogitsOp : MoE_Op<"prompt_logits", [MemoryEffects<[MemWrite]>]> {
  let summary = "logits of every prompt position (prompt logprobs), an output";
  let description = [{
    Records `logits [T, V]` for the tokens at the global `positions [T]`
    (positions past the prompt, padding, are dropped).
  }];
  let arguments = (ins MoE_FloatTensor:$logits, MoE_IndexTensor:$positions);
  let assemblyFormat = [{
    $logits `,` $positions attr-dict `:` type($logits) `,` type($positions)
  }];
  let hasVerifier = 1;
}

def MoE_StepLogitsOp : MoE_Op<"step_logits", [MemoryEffects<[MemWrite]>]> {
  let summary = "the logits of a decode step's rows, an output";
  let description = [{
    Records `logits [n, V]` for the rows at `positions [n]` of a decode step:
    each row is the newest token of one request of the batch (a position
    names its request and its place in it, see `moe.kv_history`); padding
    rows and rows that choose no token (a prompt chunk's before the prompt's
    last) are dropped. With `valid`, only the ranks on which `valid` is true
    record them (after partitioning, TP rank 0 of the rows' holders).

    ```mlir
    moe.step_logits %logits, %positions if %valid
        : tensor<?x32000xf32>, tensor<?xi64>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$logits, MoE_IndexTensor:$positions,
                       Optional<I1>:$valid);
  let assemblyFormat = [{
    $logits `,` $positions (`if` $valid^)? attr-dict `:` type($logits) `,`
    type($positions)
  }];
  let hasVerifier = 1;
}

def MoE_StepHeadRowsOp
    : MoE_Op<"step_head_rows", [MemoryEffects<[MemRead]>]> {
  let summary = "the rows of a decode step whose logits are recorded";
  let description = [{
    Returns the indices into `positions [n]` of the rows whose logits the
    step records (`moe.step_logits`): each request's newest token that
    chooses a next one, that is a decode row, or the last row of a prompt's
    last chunk. A chunk before the last, a recomputed place and padding
    choose nothing. Positions of at least one row give at least one (the
    first, when none chooses), so that the head's shapes are not empty; no
    positions give no rows. The runtime knows
    the step's requests: the op reads its state, and every rank given the
    same positions gets the same rows.

    ```mlir
    %rows = moe.step_head_rows %positions : tensor<?xi64> -> tensor<?xi64>
    ```
  }];
  let arguments = (ins MoE_IndexTensor:$positions);
  let results = (outs MoE_IndexTensor:$rows);
  let assemblyFormat = [{
    $positions attr-dict `:` type($positions) `->` type($rows)
  }];
  let hasVerifier = 1;
}

def MoE_TakeRowsOp : MoE_Op<"take_rows", [Pure]> {
  let summary = "the rows of a tensor at the given indices";
  let description = [{
    `result[i] = input[rows[i]]` along the first dimension: `[m, ...]` from
    `input [n, ...]` and `rows [m]`, each index in `[0, n)`.

    ```mlir
    %x = moe.take_rows %input, %rows
        : tensor<?x1024xf32>, tensor<?xi64> -> tensor<?x1024xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, MoE_IndexTensor:$rows);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `,` $rows attr-dict `:` type($input) `,` type($rows) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def MoE_LogitsOp : MoE_Op<"logits", [MemoryEffects<[MemWrite]>]> {
  let summary = "the request's last-token logits, an output of prefill";
  let description = [{
    Records `logits [V]` as the request's output. With `valid`, only the rank
    on which `valid` is true records them (after partitioning, the rank that
    holds the last prompt position).
  }];
  let arguments = (ins MoE_FloatTensor:$logits, Optional<I1>:$valid);
  let assemblyFormat = [{
    $logits (`if` $valid^)? attr-dict `:` type($logits)
  }];
  let hasVerifier = 1;
}

def MoE_KVCacheOp : MoE_Op<"kv_cache", [MemoryEffects<[MemWrite]>]> {
  let summary = "a layer's K/V cache entries, an output of prefill";
  let description = [{
    Records K (after RoPE) and V `[T, n_kv, d_h]` of layer `layer` (0-based)
    for the tokens at the global `positions [T]`; with `heads from %h`, the
    tensors hold the KV heads `%h ..` of the model's (tensor parallelism).
    Positions at or past the prompt's length (padding) are not recorded. The
    program's outputs are these and the logits. Where the key and the value
    are one tensor (MLA's latent), the cache holds it once: every layer's
    cache must then be so (`kv_shared` of the model).
  }];
  let arguments = (ins MoE_FloatTensor:$key, MoE_FloatTensor:$value,
                       MoE_IndexTensor:$positions,
                       Optional<Index>:$head_offset,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$layer);
  let assemblyFormat = [{
    $key `,` $value `,` $positions (`heads` `from` $head_offset^)? attr-dict
    `:` type($key) `,` type($value) `,` type($positions)
  }];
  let hasVerifier = 1;
}

def MoE_KVHistoryOp : MoE_Op<"kv_history", [MemoryEffects<[MemRead]>]> {
  let summary = "a layer's cached K/V of the request's earlier positions "
                "followed by a decode step's own";
  let description = [{
    The K (after RoPE) and V `[P + n, n_kv, d_h]` and global positions
    `[P + n]` a decode step's attention reads: first the `P` rows that layer
    `layer` (0-based) recorded (`moe.kv_cache`) for the request's positions
    before the step (the prompt's, then each decoded token's), then the
    step's own `n` rows, `step_key`, `step_value` at `step_positions`. The
    runtime keeps the cache and fills the result. In a partitioned program
    the cache is the rank's own: the positions it recorded, in the order it
    recorded them, and with `heads from %h` the KV heads `%h ..` of the
    model's (those its `moe.kv_cache` records). A step that runs several
    requests (each of its positions names its sequence, see
    `moe.attention`) reads every one's cache; the mask keeps each query to
    its own.
  }];
  let arguments = (ins MoE_FloatTensor:$step_key, MoE_FloatTensor:$step_value,
                       MoE_IndexTensor:$step_positions,
                       Optional<Index>:$head_offset,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$layer);
  let results = (outs MoE_FloatTensor:$key, MoE_FloatTensor:$value,
                      MoE_IndexTensor:$positions);
  let assemblyFormat = [{
    $step_key `,` $step_value `,` $step_positions
    (`heads` `from` $head_offset^)? attr-dict `:`
    type($step_key) `,` type($step_value) `,` type($step_positions) `->`
    type($key) `,` type($value) `,` type($positions)
  }];
  let hasVerifier = 1;
}

#endif // MESHFOLD_DIALECT_MOE_IR_MOEOPS_TD
