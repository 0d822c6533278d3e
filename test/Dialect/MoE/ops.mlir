// RUN: meshfold-opt %s | meshfold-opt | FileCheck %s
// RUN: meshfold-opt %s --mlir-print-op-generic | meshfold-opt | FileCheck %s
// RUN: meshfold-opt %s --mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC

// Round trip of every moe op, in the custom and in the generic form.

// A plain weight, a bf16 weight and a stacked per-expert {e} weight.
// CHECK-LABEL: func.func @param
// CHECK: moe.param "model.norm.weight" : tensor<64xf32>
// CHECK: moe.param "model.embed_tokens.weight" : tensor<512x64xbf16>
// CHECK: moe.param "model.layers.0.block_sparse_moe.experts.{e}.w1.weight" : tensor<32x128x64xf32>
// GENERIC-LABEL: sym_name = "param"
// GENERIC: "moe.param"() <{name = "model.norm.weight"}> : () -> tensor<64xf32>
// GENERIC: "moe.param"() <{name = "model.embed_tokens.weight"}> : () -> tensor<512x64xbf16>
// GENERIC: "moe.param"() <{name = "model.layers.0.block_sparse_moe.experts.{e}.w1.weight"}> : () -> tensor<32x128x64xf32>
func.func @param() -> (tensor<64xf32>, tensor<512x64xbf16>, tensor<32x128x64xf32>) {
  %0 = moe.param "model.norm.weight" : tensor<64xf32>
  %1 = moe.param "model.embed_tokens.weight" : tensor<512x64xbf16>
  %2 = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w1.weight" : tensor<32x128x64xf32>
  return %0, %1, %2 : tensor<64xf32>, tensor<512x64xbf16>, tensor<32x128x64xf32>
}

// Positions of a dynamic and of a static prompt.
// CHECK-LABEL: func.func @positions
// CHECK-SAME: ([[DYN:%.+]]: tensor<?xi64>, [[STAT:%.+]]: tensor<7xi64>)
// CHECK: moe.positions [[DYN]] : tensor<?xi64> -> tensor<?xi64>
// CHECK: moe.positions [[STAT]] : tensor<7xi64> -> tensor<7xi64>
// GENERIC-LABEL: sym_name = "positions"
// GENERIC: "moe.positions"(%{{.*}}) : (tensor<?xi64>) -> tensor<?xi64>
func.func @positions(%t: tensor<?xi64>, %s: tensor<7xi64>) -> (tensor<?xi64>, tensor<7xi64>) {
  %0 = moe.positions %t : tensor<?xi64> -> tensor<?xi64>
  %1 = moe.positions %s : tensor<7xi64> -> tensor<7xi64>
  return %0, %1 : tensor<?xi64>, tensor<7xi64>
}

// Embedding lookup: f32 with a dynamic token count, bf16 with a static one.
// CHECK-LABEL: func.func @embed
// CHECK-SAME: ([[TOK:%.+]]: tensor<?xi64>, [[TOK7:%.+]]: tensor<7xi64>)
// CHECK: [[TAB:%.+]] = moe.param "model.embed_tokens.weight" : tensor<512x64xf32>
// CHECK: moe.embed [[TAB]], [[TOK]] : tensor<512x64xf32>, tensor<?xi64> -> tensor<?x64xf32>
// CHECK: [[TABB:%.+]] = moe.param "model.embed_tokens.weight" : tensor<512x64xbf16>
// CHECK: moe.embed [[TABB]], [[TOK7]] : tensor<512x64xbf16>, tensor<7xi64> -> tensor<7x64xbf16>
func.func @embed(%t: tensor<?xi64>, %s: tensor<7xi64>) -> (tensor<?x64xf32>, tensor<7x64xbf16>) {
  %w = moe.param "model.embed_tokens.weight" : tensor<512x64xf32>
  %0 = moe.embed %w, %t : tensor<512x64xf32>, tensor<?xi64> -> tensor<?x64xf32>
  %wb = moe.param "model.embed_tokens.weight" : tensor<512x64xbf16>
  %1 = moe.embed %wb, %s : tensor<512x64xbf16>, tensor<7xi64> -> tensor<7x64xbf16>
  return %0, %1 : tensor<?x64xf32>, tensor<7x64xbf16>
}

// RMSNorm keeps its epsilon; f32 dynamic, bf16 static; per head on
// [T, heads, d_h] (Qwen3-MoE's q_norm).
// CHECK-LABEL: func.func @rms_norm
// CHECK-SAME: ([[X:%.+]]: tensor<?x64xf32>, [[XB:%.+]]: tensor<5x64xbf16>, [[W:%.+]]: tensor<64xf32>, [[WB:%.+]]: tensor<64xbf16>)
// CHECK: moe.rms_norm [[X]], [[W]] {epsilon = 9.99999974E-6 : f32} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
// CHECK: moe.rms_norm [[XB]], [[WB]] {epsilon = 1.000000e-01 : f32} : tensor<5x64xbf16>, tensor<64xbf16> -> tensor<5x64xbf16>
// CHECK-LABEL: func.func @rms_norm_heads
// CHECK: moe.rms_norm %{{.+}}, %{{.+}} {epsilon = 9.99999997E-7 : f32} : tensor<?x4x16xf32>, tensor<16xf32> -> tensor<?x4x16xf32>
// GENERIC-LABEL: sym_name = "rms_norm"
// GENERIC: "moe.rms_norm"(%{{.*}}, %{{.*}}) <{epsilon = 9.99999974E-6 : f32}> : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
func.func @rms_norm(%x: tensor<?x64xf32>, %xb: tensor<5x64xbf16>, %w: tensor<64xf32>, %wb: tensor<64xbf16>) -> (tensor<?x64xf32>, tensor<5x64xbf16>) {
  %0 = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  %1 = moe.rms_norm %xb, %wb {epsilon = 0.1 : f32} : tensor<5x64xbf16>, tensor<64xbf16> -> tensor<5x64xbf16>
  return %0, %1 : tensor<?x64xf32>, tensor<5x64xbf16>
}

func.func @rms_norm_heads(%q: tensor<?x4x16xf32>, %w: tensor<16xf32>) -> tensor<?x4x16xf32> {
  %0 = moe.rms_norm %q, %w {epsilon = 1.0e-6 : f32} : tensor<?x4x16xf32>, tensor<16xf32> -> tensor<?x4x16xf32>
  return %0 : tensor<?x4x16xf32>
}

// An RMSNorm in two halves (a TP-split projection's): the rows' sums of
// squares, then the scale by them over `count` squares.
// CHECK-LABEL: func.func @rms_halves
// CHECK: %[[SS:.+]] = moe.sum_squares %arg0 : tensor<?x32xf32> -> tensor<?xf32>
// CHECK: moe.rms_scale %arg0, %[[SS]], %arg1 {count = 64 : i64, epsilon = 9.99999974E-6 : f32} : tensor<?x32xf32>, tensor<?xf32>, tensor<32xbf16> -> tensor<?x32xf32>
func.func @rms_halves(%x: tensor<?x32xf32>, %w: tensor<32xbf16>) -> tensor<?x32xf32> {
  %ss = moe.sum_squares %x : tensor<?x32xf32> -> tensor<?xf32>
  %y = moe.rms_scale %x, %ss, %w {count = 64 : i64, epsilon = 1.0e-5 : f32} : tensor<?x32xf32>, tensor<?xf32>, tensor<32xbf16> -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// Linear with an [out, in] weight; f32 dynamic, bf16 static.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: ([[X:%.+]]: tensor<?x64xf32>, [[XB:%.+]]: tensor<5x64xbf16>)
// CHECK: [[W:%.+]] = moe.param "model.layers.0.self_attn.k_proj.weight" : tensor<32x64xf32>
// CHECK: moe.linear [[X]], [[W]] : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x32xf32>
// CHECK: [[WB:%.+]] = moe.param "model.layers.0.self_attn.k_proj.weight" : tensor<32x64xbf16>
// CHECK: moe.linear [[XB]], [[WB]] : tensor<5x64xbf16>, tensor<32x64xbf16> -> tensor<5x32xbf16>
func.func @linear(%x: tensor<?x64xf32>, %xb: tensor<5x64xbf16>) -> (tensor<?x32xf32>, tensor<5x32xbf16>) {
  %w = moe.param "model.layers.0.self_attn.k_proj.weight" : tensor<32x64xf32>
  %0 = moe.linear %x, %w : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x32xf32>
  %wb = moe.param "model.layers.0.self_attn.k_proj.weight" : tensor<32x64xbf16>
  %1 = moe.linear %xb, %wb : tensor<5x64xbf16>, tensor<32x64xbf16> -> tensor<5x32xbf16>
  return %0, %1 : tensor<?x32xf32>, tensor<5x32xbf16>
}

// A clip of every element (OLMoE's clip_qkv), on any shape.
// CHECK-LABEL: func.func @clip
// CHECK: moe.clip %{{.+}} {limit = 8.000000e+00 : f32} : tensor<?x64xf32>
// GENERIC-LABEL: sym_name = "clip"
// GENERIC: "moe.clip"(%{{.*}}) <{limit = 8.000000e+00 : f32}> : (tensor<?x64xf32>) -> tensor<?x64xf32>
func.func @clip(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %0 = moe.clip %x {limit = 8.0 : f32} : tensor<?x64xf32>
  return %0 : tensor<?x64xf32>
}

// A linear with a bias (Qwen2-MoE's q/k/v), the bias stored in bf16.
// CHECK-LABEL: func.func @linear_bias
// CHECK-SAME: ([[X:%.+]]: tensor<?x64xf32>)
// CHECK: [[W:%.+]] = moe.param "model.layers.0.self_attn.q_proj.weight" : tensor<32x64xf32>
// CHECK: [[B:%.+]] = moe.param "model.layers.0.self_attn.q_proj.bias" : tensor<32xbf16>
// CHECK: moe.linear [[X]], [[W]] bias [[B]] : tensor<?x64xf32>, tensor<32x64xf32>, tensor<32xbf16> -> tensor<?x32xf32>
// GENERIC-LABEL: sym_name = "linear_bias"
// GENERIC: "moe.linear"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<?x64xf32>, tensor<32x64xf32>, tensor<32xbf16>) -> tensor<?x32xf32>
func.func @linear_bias(%x: tensor<?x64xf32>) -> tensor<?x32xf32> {
  %w = moe.param "model.layers.0.self_attn.q_proj.weight" : tensor<32x64xf32>
  %b = moe.param "model.layers.0.self_attn.q_proj.bias" : tensor<32xbf16>
  %0 = moe.linear %x, %w bias %b : tensor<?x64xf32>, tensor<32x64xf32>, tensor<32xbf16> -> tensor<?x32xf32>
  return %0 : tensor<?x32xf32>
}

// A dense SwiGLU MLP: gated (Qwen2-MoE's shared expert) and not.
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: ([[X:%.+]]: tensor<?x64xf32>, [[W1:%.+]]: tensor<96x64xf32>, [[W2:%.+]]: tensor<64x96xf32>, [[W3:%.+]]: tensor<96x64xf32>, [[G:%.+]]: tensor<1x64xf32>)
// CHECK: moe.mlp [[X]], [[W1]], [[W2]], [[W3]] gate [[G]] : tensor<?x64xf32>, tensor<96x64xf32>, tensor<64x96xf32>, tensor<96x64xf32>, tensor<1x64xf32> -> tensor<?x64xf32>
// CHECK: moe.mlp [[X]], [[W1]], [[W2]], [[W3]] : tensor<?x64xf32>, tensor<96x64xf32>, tensor<64x96xf32>, tensor<96x64xf32> -> tensor<?x64xf32>
// GENERIC-LABEL: sym_name = "mlp"
// GENERIC: "moe.mlp"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (tensor<?x64xf32>, tensor<96x64xf32>, tensor<64x96xf32>, tensor<96x64xf32>, tensor<1x64xf32>) -> tensor<?x64xf32>
// GENERIC: "moe.mlp"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (tensor<?x64xf32>, tensor<96x64xf32>, tensor<64x96xf32>, tensor<96x64xf32>) -> tensor<?x64xf32>
func.func @mlp(%x: tensor<?x64xf32>, %w1: tensor<96x64xf32>, %w2: tensor<64x96xf32>, %w3: tensor<96x64xf32>, %g: tensor<1x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  %0 = moe.mlp %x, %w1, %w2, %w3 gate %g : tensor<?x64xf32>, tensor<96x64xf32>, tensor<64x96xf32>, tensor<96x64xf32>, tensor<1x64xf32> -> tensor<?x64xf32>
  %1 = moe.mlp %x, %w1, %w2, %w3 : tensor<?x64xf32>, tensor<96x64xf32>, tensor<64x96xf32>, tensor<96x64xf32> -> tensor<?x64xf32>
  return %0, %1 : tensor<?x64xf32>, tensor<?x64xf32>
}

// RoPE keeps its theta; f32 dynamic, bf16 static.
// CHECK-LABEL: func.func @rope
// CHECK-SAME: ([[Q:%.+]]: tensor<?x8x8xf32>, [[P:%.+]]: tensor<?xi64>, [[QB:%.+]]: tensor<5x4x8xbf16>, [[PB:%.+]]: tensor<5xi64>)
// CHECK: moe.rope [[Q]], [[P]] {theta = 1.000000e+06 : f32} : tensor<?x8x8xf32>, tensor<?xi64> -> tensor<?x8x8xf32>
// CHECK: moe.rope [[QB]], [[PB]] {theta = 1.000000e+04 : f32} : tensor<5x4x8xbf16>, tensor<5xi64> -> tensor<5x4x8xbf16>
// GENERIC-LABEL: sym_name = "rope"
// GENERIC: "moe.rope"(%{{.*}}, %{{.*}}) <{attention_factor = 1.000000e+00 : f32, theta = 1.000000e+06 : f32, yarn_factor = 1.000000e+00 : f32, yarn_high = 0.000000e+00 : f32, yarn_low = 0.000000e+00 : f32}> : (tensor<?x8x8xf32>, tensor<?xi64>) -> tensor<?x8x8xf32>
func.func @rope(%q: tensor<?x8x8xf32>, %p: tensor<?xi64>, %qb: tensor<5x4x8xbf16>, %pb: tensor<5xi64>) -> (tensor<?x8x8xf32>, tensor<5x4x8xbf16>) {
  %0 = moe.rope %q, %p {theta = 1.0e6 : f32} : tensor<?x8x8xf32>, tensor<?xi64> -> tensor<?x8x8xf32>
  %1 = moe.rope %qb, %pb {theta = 1.0e4 : f32} : tensor<5x4x8xbf16>, tensor<5xi64> -> tensor<5x4x8xbf16>
  return %0, %1 : tensor<?x8x8xf32>, tensor<5x4x8xbf16>
}

// DeepSeek-V3's interleaved RoPE, and with YaRN.
// CHECK-LABEL: func.func @rope_interleaved
// CHECK: moe.rope %{{.+}}, %{{.+}} {interleaved, theta = 1.000000e+04 : f32} : tensor<?x1x8xf32>, tensor<?xi64> -> tensor<?x1x8xf32>
// CHECK: moe.rope %{{.+}}, %{{.+}} {attention_factor = 1.250000e+00 : f32, interleaved, theta = 1.000000e+04 : f32, yarn_factor = 4.000000e+01 : f32, yarn_high = 3.000000e+00 : f32, yarn_low = 1.000000e+00 : f32} : tensor<?x1x8xf32>, tensor<?xi64> -> tensor<?x1x8xf32>
// GENERIC-LABEL: sym_name = "rope_interleaved"
// GENERIC: "moe.rope"(%{{.*}}, %{{.*}}) <{attention_factor = 1.000000e+00 : f32, interleaved, theta = 1.000000e+04 : f32, yarn_factor = 1.000000e+00 : f32, yarn_high = 0.000000e+00 : f32, yarn_low = 0.000000e+00 : f32}>
func.func @rope_interleaved(%k: tensor<?x1x8xf32>, %p: tensor<?xi64>) -> (tensor<?x1x8xf32>, tensor<?x1x8xf32>) {
  %0 = moe.rope %k, %p {interleaved, theta = 1.0e4 : f32} : tensor<?x1x8xf32>, tensor<?xi64> -> tensor<?x1x8xf32>
  %1 = moe.rope %k, %p {attention_factor = 1.25 : f32, interleaved, theta = 1.0e4 : f32, yarn_factor = 40.0 : f32, yarn_high = 3.0 : f32, yarn_low = 1.0 : f32} : tensor<?x1x8xf32>, tensor<?xi64> -> tensor<?x1x8xf32>
  return %0, %1 : tensor<?x1x8xf32>, tensor<?x1x8xf32>
}

// A linear per head (MLA's W_UK, transposed, and W_UV), the weight in bf16.
// CHECK-LABEL: func.func @head_linear
// CHECK: moe.head_linear %{{.+}}, %{{.+}} {transpose_weight} : tensor<?x8x16xf32>, tensor<8x16x32xbf16> -> tensor<?x8x32xf32>
// CHECK: moe.head_linear %{{.+}}, %{{.+}} : tensor<?x8x32xf32>, tensor<8x16x32xbf16> -> tensor<?x8x16xf32>
// GENERIC-LABEL: sym_name = "head_linear"
// GENERIC: "moe.head_linear"(%{{.*}}, %{{.*}}) <{transpose_weight}> : (tensor<?x8x16xf32>, tensor<8x16x32xbf16>) -> tensor<?x8x32xf32>
// GENERIC: "moe.head_linear"(%{{.*}}, %{{.*}}) : (tensor<?x8x32xf32>, tensor<8x16x32xbf16>) -> tensor<?x8x16xf32>
func.func @head_linear(%q: tensor<?x8x16xf32>, %w: tensor<8x16x32xbf16>, %o: tensor<?x8x32xf32>) -> (tensor<?x8x32xf32>, tensor<?x8x16xf32>) {
  %0 = moe.head_linear %q, %w {transpose_weight} : tensor<?x8x16xf32>, tensor<8x16x32xbf16> -> tensor<?x8x32xf32>
  %1 = moe.head_linear %o, %w : tensor<?x8x32xf32>, tensor<8x16x32xbf16> -> tensor<?x8x16xf32>
  return %0, %1 : tensor<?x8x32xf32>, tensor<?x8x16xf32>
}

// GQA attention (8 query heads, 4 KV heads): dynamic, and static with Tq != Tk in bf16.
// CHECK-LABEL: func.func @attention
// CHECK-SAME: ([[Q:%.+]]: tensor<?x8x8xf32>, [[K:%.+]]: tensor<?x4x8xf32>, [[V:%.+]]: tensor<?x4x8xf32>, [[P:%.+]]: tensor<?xi64>,
// CHECK: moe.attention [[Q]], [[K]], [[V]], [[P]], [[P]] {scale = 0.353553385 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
// CHECK: moe.attention %{{.+}} {scale = 1.250000e-01 : f32} : tensor<3x8x8xbf16>, tensor<6x4x8xbf16>, tensor<6x4x8xbf16>, tensor<3xi64>, tensor<6xi64> -> tensor<3x8x8xbf16>
// GENERIC-LABEL: sym_name = "attention"
// GENERIC: "moe.attention"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{scale = 0.353553385 : f32}> : (tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64>) -> tensor<?x8x8xf32>
func.func @attention(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %v: tensor<?x4x8xf32>, %p: tensor<?xi64>,
                     %qb: tensor<3x8x8xbf16>, %kb: tensor<6x4x8xbf16>, %vb: tensor<6x4x8xbf16>, %qp: tensor<3xi64>, %kp: tensor<6xi64>)
    -> (tensor<?x8x8xf32>, tensor<3x8x8xbf16>) {
  %0 = moe.attention %q, %k, %v, %p, %p {scale = 0.353553385 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
  %1 = moe.attention %qb, %kb, %vb, %qp, %kp {scale = 0.125 : f32} : tensor<3x8x8xbf16>, tensor<6x4x8xbf16>, tensor<6x4x8xbf16>, tensor<3xi64>, tensor<6xi64> -> tensor<3x8x8xbf16>
  return %0, %1 : tensor<?x8x8xf32>, tensor<3x8x8xbf16>
}

// Attention over a table of key tiles (a decode step reading its K/V cache
// in place): `tiles` [n, 2], and the keys' positions by tile [n, C].
// CHECK-LABEL: func.func @attention_tiles
// CHECK: moe.attention %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} tiles %{{.+}} : tensor<?x2xi64> {scale = 0.353553385 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?x64xi64> -> tensor<?x8x8xf32>
// CHECK: moe.attention_partial %{{.+}} tiles %{{.+}} : tensor<?x2xi64>
func.func @attention_tiles(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>, %kp: tensor<?x64xi64>, %t: tensor<?x2xi64>)
    -> (tensor<?x8x8xf32>, tensor<?x8x8xf32>) {
  %0 = moe.attention %q, %k, %k, %p, %kp tiles %t : tensor<?x2xi64> {scale = 0.353553385 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?x64xi64> -> tensor<?x8x8xf32>
  %1, %lse = moe.attention_partial %q, %k, %k, %p, %kp tiles %t : tensor<?x2xi64> {scale = 0.353553385 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?x64xi64> -> tensor<?x8x8xf32>, tensor<?x8xf32>
  return %0, %1 : tensor<?x8x8xf32>, tensor<?x8x8xf32>
}

// Router with renormalize (Mixtral), and without it in bf16 (Qwen2-MoE / OLMoE).
// CHECK-LABEL: func.func @router
// CHECK-SAME: ([[X:%.+]]: tensor<?x64xf32>, [[XB:%.+]]: tensor<5x64xbf16>)
// CHECK: [[G:%.+]] = moe.param "model.layers.0.block_sparse_moe.gate.weight" : tensor<32x64xf32>
// CHECK: [[W:%.+]], [[I:%.+]] = moe.router [[X]], [[G]] {renormalize, top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
// CHECK: [[GB:%.+]] = moe.param "model.layers.0.mlp.gate.weight" : tensor<32x64xbf16>
// CHECK: moe.router [[XB]], [[GB]] {top_k = 4 : i64} : tensor<5x64xbf16>, tensor<32x64xbf16> -> tensor<5x4xbf16>, tensor<5x4xi64>
// CHECK: return [[W]], [[I]]
// GENERIC-LABEL: sym_name = "router"
// GENERIC: "moe.router"(%{{.*}}, %{{.*}}) <{n_group = 1 : i64, renormalize, scaling = 1.000000e+00 : f32, top_k = 2 : i64, topk_group = 1 : i64}> : (tensor<?x64xf32>, tensor<32x64xf32>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
// GENERIC: "moe.router"(%{{.*}}, %{{.*}}) <{n_group = 1 : i64, scaling = 1.000000e+00 : f32, top_k = 4 : i64, topk_group = 1 : i64}>

func.func @router(%x: tensor<?x64xf32>, %xb: tensor<5x64xbf16>)
    -> (tensor<?x2xf32>, tensor<?x2xi64>, tensor<5x4xbf16>, tensor<5x4xi64>) {
  %g = moe.param "model.layers.0.block_sparse_moe.gate.weight" : tensor<32x64xf32>
  %w, %i = moe.router %x, %g {renormalize, top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
  %gb = moe.param "model.layers.0.mlp.gate.weight" : tensor<32x64xbf16>
  %wb, %ib = moe.router %xb, %gb {top_k = 4 : i64} : tensor<5x64xbf16>, tensor<32x64xbf16> -> tensor<5x4xbf16>, tensor<5x4xi64>
  return %w, %i, %wb, %ib : tensor<?x2xf32>, tensor<?x2xi64>, tensor<5x4xbf16>, tensor<5x4xi64>
}

// DeepSeek-V3's router: sigmoid scores, a bias for the choice, 2 of 4
// groups, the weights scaled.
// CHECK-LABEL: func.func @router_sigmoid
// CHECK: moe.router %{{.+}}, %{{.+}} bias %{{.+}} {n_group = 4 : i64, renormalize, scaling = 2.500000e+00 : f32, sigmoid, top_k = 4 : i64, topk_group = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32>, tensor<32xf32> -> tensor<?x4xf32>, tensor<?x4xi64>
// GENERIC-LABEL: sym_name = "router_sigmoid"
// GENERIC: "moe.router"(%{{.*}}, %{{.*}}, %{{.*}}) <{n_group = 4 : i64, renormalize, scaling = 2.500000e+00 : f32, sigmoid, top_k = 4 : i64, topk_group = 2 : i64}>
func.func @router_sigmoid(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>, %b: tensor<32xf32>) -> (tensor<?x4xf32>, tensor<?x4xi64>) {
  %w, %i = moe.router %x, %g bias %b {n_group = 4 : i64, renormalize, scaling = 2.5 : f32, sigmoid, top_k = 4 : i64, topk_group = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32>, tensor<32xf32> -> tensor<?x4xf32>, tensor<?x4xi64>
  return %w, %i : tensor<?x4xf32>, tensor<?x4xi64>
}

// SwiGLU experts over stacked {e} weights, fed by the router.
// CHECK-LABEL: func.func @experts
// CHECK-SAME: ([[X:%.+]]: tensor<?x64xf32>)
// CHECK: [[W:%.+]], [[I:%.+]] = moe.router [[X]]
// CHECK: [[W1:%.+]] = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w1.weight" : tensor<32x128x64xf32>
// CHECK: [[W2:%.+]] = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w2.weight" : tensor<32x64x128xf32>
// CHECK: [[W3:%.+]] = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w3.weight" : tensor<32x128x64xf32>
// CHECK: moe.experts [[X]], [[W]], [[I]], [[W1]], [[W2]], [[W3]] : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<32x128x64xf32>, tensor<32x64x128xf32>, tensor<32x128x64xf32> -> tensor<?x64xf32>
// GENERIC-LABEL: sym_name = "experts"
// GENERIC: "moe.experts"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<32x128x64xf32>, tensor<32x64x128xf32>, tensor<32x128x64xf32>) -> tensor<?x64xf32>
func.func @experts(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %g = moe.param "model.layers.0.block_sparse_moe.gate.weight" : tensor<32x64xf32>
  %w, %i = moe.router %x, %g {renormalize, top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
  %w1 = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w1.weight" : tensor<32x128x64xf32>
  %w2 = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w2.weight" : tensor<32x64x128xf32>
  %w3 = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w3.weight" : tensor<32x128x64xf32>
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w3 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<32x128x64xf32>, tensor<32x64x128xf32>, tensor<32x128x64xf32> -> tensor<?x64xf32>
  return %0 : tensor<?x64xf32>
}

// Experts in bf16 with a static token count.
// CHECK-LABEL: func.func @experts_bf16
// CHECK: moe.experts %{{.+}} : tensor<5x64xbf16>, tensor<5x2xbf16>, tensor<5x2xi64>, tensor<8x16x64xbf16>, tensor<8x64x16xbf16>, tensor<8x16x64xbf16> -> tensor<5x64xbf16>
func.func @experts_bf16(%x: tensor<5x64xbf16>, %w: tensor<5x2xbf16>, %i: tensor<5x2xi64>, %w1: tensor<8x16x64xbf16>, %w2: tensor<8x64x16xbf16>, %w3: tensor<8x16x64xbf16>) -> tensor<5x64xbf16> {
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w3 : tensor<5x64xbf16>, tensor<5x2xbf16>, tensor<5x2xi64>, tensor<8x16x64xbf16>, tensor<8x64x16xbf16>, tensor<8x16x64xbf16> -> tensor<5x64xbf16>
  return %0 : tensor<5x64xbf16>
}

// bf16 weights (storage) read by ops that compute in f32.
// CHECK-LABEL: func.func @bf16_weights_f32_compute
// CHECK: moe.embed %{{.+}} : tensor<512x64xbf16>, tensor<?xi64> -> tensor<?x64xf32>
// CHECK: moe.rms_norm %{{.+}} : tensor<?x64xf32>, tensor<64xbf16> -> tensor<?x64xf32>
// CHECK: moe.linear %{{.+}} : tensor<?x64xf32>, tensor<32x64xbf16> -> tensor<?x32xf32>
// CHECK: moe.router %{{.+}} : tensor<?x64xf32>, tensor<8x64xbf16> -> tensor<?x2xf32>, tensor<?x2xi64>
// CHECK: moe.experts %{{.+}} : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x64xbf16>, tensor<8x64x16xbf16>, tensor<8x16x64xbf16> -> tensor<?x64xf32>
func.func @bf16_weights_f32_compute(%t: tensor<?xi64>, %e: tensor<512x64xbf16>, %n: tensor<64xbf16>, %q: tensor<32x64xbf16>, %g: tensor<8x64xbf16>, %w1: tensor<8x16x64xbf16>, %w2: tensor<8x64x16xbf16>) -> (tensor<?x32xf32>, tensor<?x64xf32>) {
  %x = moe.embed %e, %t : tensor<512x64xbf16>, tensor<?xi64> -> tensor<?x64xf32>
  %h = moe.rms_norm %x, %n {epsilon = 1.0e-5 : f32} : tensor<?x64xf32>, tensor<64xbf16> -> tensor<?x64xf32>
  %y = moe.linear %h, %q : tensor<?x64xf32>, tensor<32x64xbf16> -> tensor<?x32xf32>
  %w, %i = moe.router %h, %g {top_k = 2 : i64} : tensor<?x64xf32>, tensor<8x64xbf16> -> tensor<?x2xf32>, tensor<?x2xi64>
  %z = moe.experts %h, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x64xbf16>, tensor<8x64x16xbf16>, tensor<8x16x64xbf16> -> tensor<?x64xf32>
  return %y, %z : tensor<?x32xf32>, tensor<?x64xf32>
}

// LM head at the row whose global position is %last: f32 dynamic, bf16 static.
// CHECK-LABEL: func.func @lm_head
// CHECK-SAME: ([[X:%.+]]: tensor<?x64xf32>, [[XB:%.+]]: tensor<5x64xbf16>, [[P:%.+]]: tensor<?xi64>, [[PB:%.+]]: tensor<5xi64>, [[LAST:%.+]]: index)
// CHECK: [[W:%.+]] = moe.param "lm_head.weight" : tensor<512x64xf32>
// CHECK: moe.lm_head [[X]], [[W]], [[P]], [[LAST]] : tensor<?x64xf32>, tensor<512x64xf32>, tensor<?xi64> -> tensor<512xf32>
// CHECK: moe.lm_head [[XB]], %{{.+}}, [[PB]], [[LAST]] : tensor<5x64xbf16>, tensor<512x64xbf16>, tensor<5xi64> -> tensor<512xbf16>
// GENERIC-LABEL: sym_name = "lm_head"
// GENERIC: "moe.lm_head"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (tensor<?x64xf32>, tensor<512x64xf32>, tensor<?xi64>, index) -> tensor<512xf32>
func.func @lm_head(%x: tensor<?x64xf32>, %xb: tensor<5x64xbf16>, %p: tensor<?xi64>, %pb: tensor<5xi64>, %last: index) -> (tensor<512xf32>, tensor<512xbf16>) {
  %w = moe.param "lm_head.weight" : tensor<512x64xf32>
  %0 = moe.lm_head %x, %w, %p, %last : tensor<?x64xf32>, tensor<512x64xf32>, tensor<?xi64> -> tensor<512xf32>
  %wb = moe.param "lm_head.weight" : tensor<512x64xbf16>
  %1 = moe.lm_head %xb, %wb, %pb, %last : tensor<5x64xbf16>, tensor<512x64xbf16>, tensor<5xi64> -> tensor<512xbf16>
  return %0, %1 : tensor<512xf32>, tensor<512xbf16>
}

// KV cache outputs of layers 0 and 3 (result-less, side-effecting), dynamic f32 and static bf16;
// the second holds the KV heads from %h on (tensor parallelism).
// CHECK-LABEL: func.func @kv_cache
// CHECK-SAME: ([[K:%.+]]: tensor<?x4x8xf32>, [[V:%.+]]: tensor<?x4x8xf32>, [[P:%.+]]: tensor<?xi64>,
// CHECK-SAME: [[H:%[^:]+]]: index)
// CHECK: moe.kv_cache [[K]], [[V]], [[P]] {layer = 0 : i64} : tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>
// CHECK: moe.kv_cache %{{.+}}, %{{.+}}, %{{.+}} heads from [[H]] {layer = 3 : i64} : tensor<5x4x8xbf16>, tensor<5x4x8xbf16>, tensor<5xi64>
// GENERIC-LABEL: sym_name = "kv_cache"
// GENERIC: "moe.kv_cache"(%{{.*}}, %{{.*}}, %{{.*}}) <{layer = 0 : i64}> : (tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>) -> ()
// GENERIC: "moe.kv_cache"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{layer = 3 : i64}> : (tensor<5x4x8xbf16>, tensor<5x4x8xbf16>, tensor<5xi64>, index) -> ()
func.func @kv_cache(%k: tensor<?x4x8xf32>, %v: tensor<?x4x8xf32>, %p: tensor<?xi64>,
                    %kb: tensor<5x4x8xbf16>, %vb: tensor<5x4x8xbf16>, %pb: tensor<5xi64>, %h: index) {
  moe.kv_cache %k, %v, %p {layer = 0 : i64} : tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>
  moe.kv_cache %kb, %vb, %pb heads from %h {layer = 3 : i64} : tensor<5x4x8xbf16>, tensor<5x4x8xbf16>, tensor<5xi64>
  return
}

// A decode step's K/V: the cached rows of layer 2, then the step's own.
// CHECK-LABEL: func.func @kv_history
// CHECK: moe.kv_history %arg0, %arg1, %arg2 {layer = 2 : i64} : tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<1xi64> -> tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>
// A partitioned rank's: its KV heads from %h.
// CHECK: moe.kv_history %arg0, %arg1, %arg2 heads from %arg3 {layer = 2 : i64} : tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<1xi64> -> tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>
func.func @kv_history(%k: tensor<1x4x8xf32>, %v: tensor<1x4x8xf32>, %p: tensor<1xi64>, %h: index) -> (tensor<?x4x8xf32>, tensor<?x4x8xf32>) {
  %hk, %hv, %hp = moe.kv_history %k, %v, %p {layer = 2 : i64} : tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<1xi64> -> tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>
  %lk, %lv, %lp = moe.kv_history %k, %v, %p heads from %h {layer = 2 : i64} : tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<1xi64> -> tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>
  return %hk, %lk : tensor<?x4x8xf32>, tensor<?x4x8xf32>
}

// Attention over one key block with its log-sum-exp [Tq, n_h]: dynamic f32, static bf16 with Tq != Tk.
// CHECK-LABEL: func.func @attention_partial
// CHECK-SAME: ([[Q:%.+]]: tensor<?x8x8xf32>, [[K:%.+]]: tensor<?x4x8xf32>, [[V:%.+]]: tensor<?x4x8xf32>, [[QP:%.+]]: tensor<?xi64>, [[KP:%.+]]: tensor<?xi64>,
// CHECK: [[O:%.+]], [[L:%.+]] = moe.attention_partial [[Q]], [[K]], [[V]], [[QP]], [[KP]] {scale = 0.353553385 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>, tensor<?x8xf32>
// CHECK: moe.attention_partial %{{.+}} {scale = 1.250000e-01 : f32} : tensor<3x8x8xbf16>, tensor<6x4x8xbf16>, tensor<6x4x8xbf16>, tensor<3xi64>, tensor<6xi64> -> tensor<3x8x8xbf16>, tensor<3x8xbf16>
// CHECK: return [[O]], [[L]]
// GENERIC-LABEL: sym_name = "attention_partial"
// GENERIC: "moe.attention_partial"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{scale = 0.353553385 : f32}> : (tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64>) -> (tensor<?x8x8xf32>, tensor<?x8xf32>)
func.func @attention_partial(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %v: tensor<?x4x8xf32>, %qp: tensor<?xi64>, %kp: tensor<?xi64>,
                             %qb: tensor<3x8x8xbf16>, %kb: tensor<6x4x8xbf16>, %vb: tensor<6x4x8xbf16>, %qpb: tensor<3xi64>, %kpb: tensor<6xi64>)
    -> (tensor<?x8x8xf32>, tensor<?x8xf32>, tensor<3x8x8xbf16>, tensor<3x8xbf16>) {
  %o, %l = moe.attention_partial %q, %k, %v, %qp, %kp {scale = 0.353553385 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>, tensor<?x8xf32>
  %ob, %lb = moe.attention_partial %qb, %kb, %vb, %qpb, %kpb {scale = 0.125 : f32} : tensor<3x8x8xbf16>, tensor<6x4x8xbf16>, tensor<6x4x8xbf16>, tensor<3xi64>, tensor<6xi64> -> tensor<3x8x8xbf16>, tensor<3x8xbf16>
  return %o, %l, %ob, %lb : tensor<?x8x8xf32>, tensor<?x8xf32>, tensor<3x8x8xbf16>, tensor<3x8xbf16>
}

// Merge of two partial results by their log-sum-exps (ring attention), dynamic and static.
// CHECK-LABEL: func.func @attention_merge
// CHECK-SAME: ([[O1:%.+]]: tensor<?x8x8xf32>, [[L1:%.+]]: tensor<?x8xf32>, [[O2:%.+]]: tensor<?x8x8xf32>, [[L2:%.+]]: tensor<?x8xf32>,
// CHECK: [[O:%.+]], [[L:%.+]] = moe.attention_merge [[O1]], [[L1]], [[O2]], [[L2]] : tensor<?x8x8xf32>, tensor<?x8xf32> -> tensor<?x8x8xf32>, tensor<?x8xf32>
// CHECK: moe.attention_merge %{{.+}} : tensor<3x8x8xbf16>, tensor<3x8xbf16> -> tensor<3x8x8xbf16>, tensor<3x8xbf16>
// CHECK: return [[O]], [[L]]
// GENERIC-LABEL: sym_name = "attention_merge"
// GENERIC: "moe.attention_merge"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (tensor<?x8x8xf32>, tensor<?x8xf32>, tensor<?x8x8xf32>, tensor<?x8xf32>) -> (tensor<?x8x8xf32>, tensor<?x8xf32>)
func.func @attention_merge(%o1: tensor<?x8x8xf32>, %l1: tensor<?x8xf32>, %o2: tensor<?x8x8xf32>, %l2: tensor<?x8xf32>,
                           %ob: tensor<3x8x8xbf16>, %lb: tensor<3x8xbf16>)
    -> (tensor<?x8x8xf32>, tensor<?x8xf32>, tensor<3x8x8xbf16>, tensor<3x8xbf16>) {
  %o, %l = moe.attention_merge %o1, %l1, %o2, %l2 : tensor<?x8x8xf32>, tensor<?x8xf32> -> tensor<?x8x8xf32>, tensor<?x8xf32>
  %o3, %l3 = moe.attention_merge %ob, %lb, %ob, %lb : tensor<3x8x8xbf16>, tensor<3x8xbf16> -> tensor<3x8x8xbf16>, tensor<3x8xbf16>
  return %o, %l, %o3, %l3 : tensor<?x8x8xf32>, tensor<?x8xf32>, tensor<3x8x8xbf16>, tensor<3x8xbf16>
}

// One SwiGLU expert per row (rows grouped by expert parallelism): dynamic f32, static bf16.
// CHECK-LABEL: func.func @expert_ffn
// CHECK-SAME: ([[X:%.+]]: tensor<?x64xf32>, [[E:%.+]]: tensor<?xi64>,
// CHECK: [[W1:%.+]] = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w1.weight" : tensor<32x128x64xf32>
// CHECK: [[W2:%.+]] = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w2.weight" : tensor<32x64x128xf32>
// CHECK: [[W3:%.+]] = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w3.weight" : tensor<32x128x64xf32>
// CHECK: moe.expert_ffn [[X]], [[E]], [[W1]], [[W2]], [[W3]] : tensor<?x64xf32>, tensor<?xi64>, tensor<32x128x64xf32>, tensor<32x64x128xf32>, tensor<32x128x64xf32> -> tensor<?x64xf32>
// CHECK: moe.expert_ffn %{{.+}} : tensor<5x64xbf16>, tensor<5xi64>, tensor<8x16x64xbf16>, tensor<8x64x16xbf16>, tensor<8x16x64xbf16> -> tensor<5x64xbf16>
// GENERIC-LABEL: sym_name = "expert_ffn"
// GENERIC: "moe.expert_ffn"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (tensor<?x64xf32>, tensor<?xi64>, tensor<32x128x64xf32>, tensor<32x64x128xf32>, tensor<32x128x64xf32>) -> tensor<?x64xf32>
func.func @expert_ffn(%x: tensor<?x64xf32>, %e: tensor<?xi64>,
                      %xb: tensor<5x64xbf16>, %eb: tensor<5xi64>, %w1b: tensor<8x16x64xbf16>, %w2b: tensor<8x64x16xbf16>)
    -> (tensor<?x64xf32>, tensor<5x64xbf16>) {
  %w1 = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w1.weight" : tensor<32x128x64xf32>
  %w2 = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w2.weight" : tensor<32x64x128xf32>
  %w3 = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w3.weight" : tensor<32x128x64xf32>
  %0 = moe.expert_ffn %x, %e, %w1, %w2, %w3 : tensor<?x64xf32>, tensor<?xi64>, tensor<32x128x64xf32>, tensor<32x64x128xf32>, tensor<32x128x64xf32> -> tensor<?x64xf32>
  %1 = moe.expert_ffn %xb, %eb, %w1b, %w2b, %w1b : tensor<5x64xbf16>, tensor<5xi64>, tensor<8x16x64xbf16>, tensor<8x64x16xbf16>, tensor<8x16x64xbf16> -> tensor<5x64xbf16>
  return %0, %1 : tensor<?x64xf32>, tensor<5x64xbf16>
}

// A decoder layer: a region isolated from above whose block arguments are the
// operands (residual stream, positions) and whose moe.yield gives the results;
// a second layer chains on the first, and an empty layer yields nothing.
// CHECK-LABEL: func.func @layer
// CHECK-SAME: ([[H:%.+]]: tensor<?x64xf32>, [[P:%.+]]: tensor<?xi64>)
// CHECK: [[H1:%.+]] = moe.layer 0([[H]], [[P]]) : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32> {
// CHECK-NEXT: ^bb0([[A:%.+]]: tensor<?x64xf32>, [[AP:%.+]]: tensor<?xi64>):
// CHECK-NEXT: [[W:%.+]] = moe.param "model.layers.0.input_layernorm.weight" : tensor<64xf32>
// CHECK-NEXT: [[N:%.+]] = moe.rms_norm [[A]], [[W]]
// CHECK-NEXT: moe.yield [[N]] : tensor<?x64xf32>
// CHECK-NEXT: }
// CHECK: [[H2:%.+]] = moe.layer 7([[H1]], [[P]]) : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32> {
// CHECK: moe.yield %{{.+}} : tensor<?x64xf32>
// CHECK: moe.layer 1() : () -> () {
// CHECK-NEXT: }
// CHECK: return [[H2]]
// GENERIC-LABEL: sym_name = "layer"
// GENERIC: "moe.layer"(%{{.*}}, %{{.*}}) <{index = 0 : i64}> ({
// GENERIC-NEXT: ^bb0(%{{.*}}: tensor<?x64xf32>, %{{.*}}: tensor<?xi64>):
// GENERIC: "moe.yield"(%{{.*}}) : (tensor<?x64xf32>) -> ()
// GENERIC-NEXT: }) : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32>
// GENERIC: "moe.layer"() <{index = 1 : i64}> ({
// GENERIC-NEXT: "moe.yield"() : () -> ()
// GENERIC-NEXT: }) : () -> ()
func.func @layer(%h: tensor<?x64xf32>, %p: tensor<?xi64>) -> tensor<?x64xf32> {
  %0 = moe.layer 0 (%h, %p) : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32> {
  ^bb0(%a: tensor<?x64xf32>, %ap: tensor<?xi64>):
    %w = moe.param "model.layers.0.input_layernorm.weight" : tensor<64xf32>
    %n = moe.rms_norm %a, %w {epsilon = 1.0e-5 : f32} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
    moe.yield %n : tensor<?x64xf32>
  }
  %1 = moe.layer 7 (%0, %p) : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32> {
  ^bb0(%a: tensor<?x64xf32>, %ap: tensor<?xi64>):
    moe.yield %a : tensor<?x64xf32>
  }
  moe.layer 1 () : () -> () {
  }
  return %1 : tensor<?x64xf32>
}

// The logits output: recorded unconditionally, or only where %valid holds (f32 and bf16).
// CHECK-LABEL: func.func @logits
// CHECK-SAME: ([[L:%.+]]: tensor<512xf32>, [[LB:%.+]]: tensor<?xbf16>, [[VALID:%.+]]: i1)
// CHECK: moe.logits [[L]] : tensor<512xf32>
// CHECK: moe.logits [[LB]] if [[VALID]] : tensor<?xbf16>
// GENERIC-LABEL: sym_name = "logits"
// GENERIC: "moe.logits"(%{{.*}}) : (tensor<512xf32>) -> ()
// GENERIC: "moe.logits"(%{{.*}}, %{{.*}}) : (tensor<?xbf16>, i1) -> ()
func.func @logits(%l: tensor<512xf32>, %lb: tensor<?xbf16>, %valid: i1) {
  moe.logits %l : tensor<512xf32>
  moe.logits %lb if %valid : tensor<?xbf16>
  return
}

// A decode step's row logits: every row, recorded unconditionally or only
// where %valid holds.
// CHECK-LABEL: func.func @step_logits
// CHECK-SAME: ([[L:%.+]]: tensor<?x512xf32>, [[P:%.+]]: tensor<?xi64>, [[VALID:%.+]]: i1)
// CHECK: moe.step_logits [[L]], [[P]] : tensor<?x512xf32>, tensor<?xi64>
// CHECK: moe.step_logits [[L]], [[P]] if [[VALID]] : tensor<?x512xf32>, tensor<?xi64>
// GENERIC-LABEL: sym_name = "step_logits"
// GENERIC: "moe.step_logits"(%{{.*}}, %{{.*}}) : (tensor<?x512xf32>, tensor<?xi64>) -> ()
// GENERIC: "moe.step_logits"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<?x512xf32>, tensor<?xi64>, i1) -> ()
func.func @step_logits(%l: tensor<?x512xf32>, %p: tensor<?xi64>, %valid: i1) {
  moe.step_logits %l, %p : tensor<?x512xf32>, tensor<?xi64>
  moe.step_logits %l, %p if %valid : tensor<?x512xf32>, tensor<?xi64>
  return
}

// A decode step's head rows (the runtime names them) and a gather of rows.
// CHECK-LABEL: func.func @step_head_rows
// CHECK-SAME: ([[X:%.+]]: tensor<?x512xf32>, [[P:%.+]]: tensor<?xi64>)
// CHECK: [[R:%.+]] = moe.step_head_rows [[P]] : tensor<?xi64> -> tensor<?xi64>
// CHECK: moe.take_rows [[X]], [[R]] : tensor<?x512xf32>, tensor<?xi64> -> tensor<?x512xf32>
// CHECK: moe.take_rows [[P]], [[R]] : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
// GENERIC-LABEL: sym_name = "step_head_rows"
// GENERIC: "moe.step_head_rows"(%{{.*}}) : (tensor<?xi64>) -> tensor<?xi64>
// GENERIC: "moe.take_rows"(%{{.*}}, %{{.*}}) : (tensor<?x512xf32>, tensor<?xi64>) -> tensor<?x512xf32>
func.func @step_head_rows(%x: tensor<?x512xf32>, %p: tensor<?xi64>) -> (tensor<?x512xf32>, tensor<?xi64>) {
  %r = moe.step_head_rows %p : tensor<?xi64> -> tensor<?xi64>
  %y = moe.take_rows %x, %r : tensor<?x512xf32>, tensor<?xi64> -> tensor<?x512xf32>
  %q = moe.take_rows %p, %r : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
  return %y, %q : tensor<?x512xf32>, tensor<?xi64>
}

// f16 is the third accepted float type.
// CHECK-LABEL: func.func @f16
// CHECK: moe.linear %{{.+}}, %{{.+}} : tensor<?x64xf16>, tensor<32x64xf16> -> tensor<?x32xf16>
func.func @f16(%x: tensor<?x64xf16>, %w: tensor<32x64xf16>) -> tensor<?x32xf16> {
  %0 = moe.linear %x, %w : tensor<?x64xf16>, tensor<32x64xf16> -> tensor<?x32xf16>
  return %0 : tensor<?x32xf16>
}
