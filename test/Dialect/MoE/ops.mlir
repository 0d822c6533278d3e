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

// RMSNorm keeps its epsilon; f32 dynamic, bf16 static.
// CHECK-LABEL: func.func @rms_norm
// CHECK-SAME: ([[X:%.+]]: tensor<?x64xf32>, [[XB:%.+]]: tensor<5x64xbf16>, [[W:%.+]]: tensor<64xf32>, [[WB:%.+]]: tensor<64xbf16>)
// CHECK: moe.rms_norm [[X]], [[W]] {epsilon = 9.99999974E-6 : f32} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
// CHECK: moe.rms_norm [[XB]], [[WB]] {epsilon = 1.000000e-01 : f32} : tensor<5x64xbf16>, tensor<64xbf16> -> tensor<5x64xbf16>
// GENERIC-LABEL: sym_name = "rms_norm"
// GENERIC: "moe.rms_norm"(%{{.*}}, %{{.*}}) <{epsilon = 9.99999974E-6 : f32}> : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
func.func @rms_norm(%x: tensor<?x64xf32>, %xb: tensor<5x64xbf16>, %w: tensor<64xf32>, %wb: tensor<64xbf16>) -> (tensor<?x64xf32>, tensor<5x64xbf16>) {
  %0 = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  %1 = moe.rms_norm %xb, %wb {epsilon = 0.1 : f32} : tensor<5x64xbf16>, tensor<64xbf16> -> tensor<5x64xbf16>
  return %0, %1 : tensor<?x64xf32>, tensor<5x64xbf16>
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

// RoPE keeps its theta; f32 dynamic, bf16 static.
// CHECK-LABEL: func.func @rope
// CHECK-SAME: ([[Q:%.+]]: tensor<?x8x8xf32>, [[P:%.+]]: tensor<?xi64>, [[QB:%.+]]: tensor<5x4x8xbf16>, [[PB:%.+]]: tensor<5xi64>)
// CHECK: moe.rope [[Q]], [[P]] {theta = 1.000000e+06 : f32} : tensor<?x8x8xf32>, tensor<?xi64> -> tensor<?x8x8xf32>
// CHECK: moe.rope [[QB]], [[PB]] {theta = 1.000000e+04 : f32} : tensor<5x4x8xbf16>, tensor<5xi64> -> tensor<5x4x8xbf16>
// GENERIC-LABEL: sym_name = "rope"
// GENERIC: "moe.rope"(%{{.*}}, %{{.*}}) <{theta = 1.000000e+06 : f32}> : (tensor<?x8x8xf32>, tensor<?xi64>) -> tensor<?x8x8xf32>
func.func @rope(%q: tensor<?x8x8xf32>, %p: tensor<?xi64>, %qb: tensor<5x4x8xbf16>, %pb: tensor<5xi64>) -> (tensor<?x8x8xf32>, tensor<5x4x8xbf16>) {
  %0 = moe.rope %q, %p {theta = 1.0e6 : f32} : tensor<?x8x8xf32>, tensor<?xi64> -> tensor<?x8x8xf32>
  %1 = moe.rope %qb, %pb {theta = 1.0e4 : f32} : tensor<5x4x8xbf16>, tensor<5xi64> -> tensor<5x4x8xbf16>
  return %0, %1 : tensor<?x8x8xf32>, tensor<5x4x8xbf16>
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

// Router with renormalize (Mixtral), and without it in bf16 (Qwen2-MoE / OLMoE).
// CHECK-LABEL: func.func @router
// CHECK-SAME: ([[X:%.+]]: tensor<?x64xf32>, [[XB:%.+]]: tensor<5x64xbf16>)
// CHECK: [[G:%.+]] = moe.param "model.layers.0.block_sparse_moe.gate.weight" : tensor<32x64xf32>
// CHECK: [[W:%.+]], [[I:%.+]] = moe.router [[X]], [[G]] {renormalize, top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
// CHECK: [[GB:%.+]] = moe.param "model.layers.0.mlp.gate.weight" : tensor<32x64xbf16>
// CHECK: moe.router [[XB]], [[GB]] {top_k = 4 : i64} : tensor<5x64xbf16>, tensor<32x64xbf16> -> tensor<5x4xbf16>, tensor<5x4xi64>
// CHECK: return [[W]], [[I]]
// GENERIC-LABEL: sym_name = "router"
// GENERIC: "moe.router"(%{{.*}}, %{{.*}}) <{renormalize, top_k = 2 : i64}> : (tensor<?x64xf32>, tensor<32x64xf32>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
// GENERIC: "moe.router"(%{{.*}}, %{{.*}}) <{top_k = 4 : i64}>
func.func @router(%x: tensor<?x64xf32>, %xb: tensor<5x64xbf16>)
    -> (tensor<?x2xf32>, tensor<?x2xi64>, tensor<5x4xbf16>, tensor<5x4xi64>) {
  %g = moe.param "model.layers.0.block_sparse_moe.gate.weight" : tensor<32x64xf32>
  %w, %i = moe.router %x, %g {renormalize, top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
  %gb = moe.param "model.layers.0.mlp.gate.weight" : tensor<32x64xbf16>
  %wb, %ib = moe.router %xb, %gb {top_k = 4 : i64} : tensor<5x64xbf16>, tensor<32x64xbf16> -> tensor<5x4xbf16>, tensor<5x4xi64>
  return %w, %i, %wb, %ib : tensor<?x2xf32>, tensor<?x2xi64>, tensor<5x4xbf16>, tensor<5x4xi64>
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

// LM head on the last position: f32 dynamic, bf16 static.
// CHECK-LABEL: func.func @lm_head
// CHECK-SAME: ([[X:%.+]]: tensor<?x64xf32>, [[XB:%.+]]: tensor<5x64xbf16>)
// CHECK: [[W:%.+]] = moe.param "lm_head.weight" : tensor<512x64xf32>
// CHECK: moe.lm_head [[X]], [[W]] : tensor<?x64xf32>, tensor<512x64xf32> -> tensor<512xf32>
// CHECK: moe.lm_head [[XB]], %{{.+}} : tensor<5x64xbf16>, tensor<512x64xbf16> -> tensor<512xbf16>
// GENERIC-LABEL: sym_name = "lm_head"
// GENERIC: "moe.lm_head"(%{{.*}}, %{{.*}}) : (tensor<?x64xf32>, tensor<512x64xf32>) -> tensor<512xf32>
func.func @lm_head(%x: tensor<?x64xf32>, %xb: tensor<5x64xbf16>) -> (tensor<512xf32>, tensor<512xbf16>) {
  %w = moe.param "lm_head.weight" : tensor<512x64xf32>
  %0 = moe.lm_head %x, %w : tensor<?x64xf32>, tensor<512x64xf32> -> tensor<512xf32>
  %wb = moe.param "lm_head.weight" : tensor<512x64xbf16>
  %1 = moe.lm_head %xb, %wb : tensor<5x64xbf16>, tensor<512x64xbf16> -> tensor<512xbf16>
  return %0, %1 : tensor<512xf32>, tensor<512xbf16>
}

// KV cache outputs of layers 0 and 3 (result-less, side-effecting), dynamic f32 and static bf16.
// CHECK-LABEL: func.func @kv_cache
// CHECK-SAME: ([[K:%.+]]: tensor<?x4x8xf32>, [[V:%.+]]: tensor<?x4x8xf32>, [[P:%.+]]: tensor<?xi64>,
// CHECK: moe.kv_cache [[K]], [[V]], [[P]] {layer = 0 : i64} : tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>
// CHECK: moe.kv_cache %{{.+}} {layer = 3 : i64} : tensor<5x4x8xbf16>, tensor<5x4x8xbf16>, tensor<5xi64>
// GENERIC-LABEL: sym_name = "kv_cache"
// GENERIC: "moe.kv_cache"(%{{.*}}, %{{.*}}, %{{.*}}) <{layer = 0 : i64}> : (tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>) -> ()
func.func @kv_cache(%k: tensor<?x4x8xf32>, %v: tensor<?x4x8xf32>, %p: tensor<?xi64>,
                    %kb: tensor<5x4x8xbf16>, %vb: tensor<5x4x8xbf16>, %pb: tensor<5xi64>) {
  moe.kv_cache %k, %v, %p {layer = 0 : i64} : tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>
  moe.kv_cache %kb, %vb, %pb {layer = 3 : i64} : tensor<5x4x8xbf16>, tensor<5x4x8xbf16>, tensor<5xi64>
  return
}

// f16 is the third accepted float type.
// CHECK-LABEL: func.func @f16
// CHECK: moe.linear %{{.+}}, %{{.+}} : tensor<?x64xf16>, tensor<32x64xf16> -> tensor<?x32xf16>
func.func @f16(%x: tensor<?x64xf16>, %w: tensor<32x64xf16>) -> tensor<?x32xf16> {
  %0 = moe.linear %x, %w : tensor<?x64xf16>, tensor<32x64xf16> -> tensor<?x32xf16>
  return %0 : tensor<?x32xf16>
}
