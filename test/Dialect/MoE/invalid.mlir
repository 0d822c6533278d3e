// RUN: meshfold-opt %s -split-input-file -verify-diagnostics

// One case per verifier rule of the moe ops (lib/Dialect/MoE/IR/MoEOps.cpp)
// and per attribute / type constraint of MoEOps.td.

//===----------------------------------------------------------------------===//
// moe.param
//===----------------------------------------------------------------------===//

// A weight needs a name.
func.func @param_empty_name() {
  // expected-error @+1 {{'moe.param' op name must not be empty}}
  %0 = moe.param "" : tensor<64xf32>
  return
}

// -----

// A weight's shape is its full static shape.
func.func @param_dynamic() {
  // expected-error @+1 {{weight 'model.norm.weight' must have a static shape, got 'tensor<?xf32>'}}
  %0 = moe.param "model.norm.weight" : tensor<?xf32>
  return
}

// -----

// A stacked {e} weight needs a leading expert dimension and a weight shape.
func.func @param_stacked_rank() {
  // expected-error @+1 {{stacked expert weight 'model.layers.0.block_sparse_moe.experts.{e}.w1.weight' needs a leading expert dimension}}
  %0 = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w1.weight" : tensor<32xf32>
  return
}

// -----

// Only one {e} placeholder per name.
func.func @param_double_placeholder() {
  // expected-error @+1 {{has more than one {e} placeholder}}
  %0 = moe.param "model.experts.{e}.w1.{e}.weight" : tensor<32x128x64xf32>
  return
}

// -----

// Weights are float tensors (type constraint).
func.func @param_int() {
  // expected-error @+1 {{result #0 must be ranked tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  %0 = "moe.param"() <{name = "model.norm.weight"}> : () -> tensor<64xi32>
  return
}

//===----------------------------------------------------------------------===//
// moe.positions
//===----------------------------------------------------------------------===//

// -----

// Tokens are a vector.
func.func @positions_tokens_rank(%t: tensor<?x?xi64>) {
  // expected-error @+1 {{tokens must have rank 1, got 'tensor<?x?xi64>'}}
  %0 = moe.positions %t : tensor<?x?xi64> -> tensor<?xi64>
  return
}

// -----

// Positions are a vector.
func.func @positions_result_rank(%t: tensor<?xi64>) {
  // expected-error @+1 {{result must have rank 1, got 'tensor<?x1xi64>'}}
  %0 = moe.positions %t : tensor<?xi64> -> tensor<?x1xi64>
  return
}

// -----

// One position per token.
func.func @positions_count(%t: tensor<7xi64>) {
  // expected-error @+1 {{result dim 0 (6) must equal tokens dim 0 (7)}}
  %0 = moe.positions %t : tensor<7xi64> -> tensor<6xi64>
  return
}

//===----------------------------------------------------------------------===//
// moe.embed
//===----------------------------------------------------------------------===//

// -----

// The table is [V, d].
func.func @embed_table_rank(%w: tensor<512xf32>, %t: tensor<?xi64>) {
  // expected-error @+1 {{table must have rank 2, got 'tensor<512xf32>'}}
  %0 = moe.embed %w, %t : tensor<512xf32>, tensor<?xi64> -> tensor<?x64xf32>
  return
}

// -----

// The table is static.
func.func @embed_table_static(%w: tensor<?x64xf32>, %t: tensor<?xi64>) {
  // expected-error @+1 {{table dim 0 must be static, got 'tensor<?x64xf32>'}}
  %0 = moe.embed %w, %t : tensor<?x64xf32>, tensor<?xi64> -> tensor<?x64xf32>
  return
}

// -----

// Tokens are a vector.
func.func @embed_tokens_rank(%w: tensor<512x64xf32>, %t: tensor<?x2xi64>) {
  // expected-error @+1 {{tokens must have rank 1, got 'tensor<?x2xi64>'}}
  %0 = moe.embed %w, %t : tensor<512x64xf32>, tensor<?x2xi64> -> tensor<?x64xf32>
  return
}

// -----

// The result is [T, d].
func.func @embed_result_rank(%w: tensor<512x64xf32>, %t: tensor<?xi64>) {
  // expected-error @+1 {{result must have rank 2, got 'tensor<?x64x1xf32>'}}
  %0 = moe.embed %w, %t : tensor<512x64xf32>, tensor<?xi64> -> tensor<?x64x1xf32>
  return
}

// -----

// One row per token.
func.func @embed_result_tokens(%w: tensor<512x64xf32>, %t: tensor<7xi64>) {
  // expected-error @+1 {{result dim 0 (8) must equal tokens dim 0 (7)}}
  %0 = moe.embed %w, %t : tensor<512x64xf32>, tensor<7xi64> -> tensor<8x64xf32>
  return
}

// -----

// Rows are as wide as the table.
func.func @embed_result_hidden(%w: tensor<512x64xf32>, %t: tensor<?xi64>) {
  // expected-error @+1 {{result dim 1 (32) must equal table dim 1 (64)}}
  %0 = moe.embed %w, %t : tensor<512x64xf32>, tensor<?xi64> -> tensor<?x32xf32>
  return
}

// -----

// The table is not wider than the result (a narrower table is widened).
func.func @embed_element_type(%w: tensor<512x64xf32>, %t: tensor<?xi64>) {
  // expected-error @+1 {{weights must be stored in the compute element type 'bf16' or a narrower float type, got 'f32'}}
  %0 = moe.embed %w, %t : tensor<512x64xf32>, tensor<?xi64> -> tensor<?x64xbf16>
  return
}

// -----

// Tokens are i64 (type constraint).
func.func @embed_tokens_i32(%w: tensor<512x64xf32>, %t: tensor<?xi32>) {
  // expected-error @+1 {{operand #1 must be ranked tensor of 64-bit signless integer values}}
  %0 = "moe.embed"(%w, %t) : (tensor<512x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// moe.rms_norm
//===----------------------------------------------------------------------===//

// -----

// Epsilon must be positive.
func.func @rms_norm_epsilon(%x: tensor<?x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{epsilon must be positive, got 0}}
  %0 = moe.rms_norm %x, %w {epsilon = 0.0 : f32} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  return
}

// -----

// The input is [T, d] or [T, heads, d_h].
func.func @rms_norm_input_rank(%x: tensor<?x2x8x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{input must have rank 2 ([T, d]) or 3 ([T, heads, d_h]), got 'tensor<?x2x8x8xf32>'}}
  %0 = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<?x2x8x8xf32>, tensor<8xf32> -> tensor<?x2x8x8xf32>
  return
}

// -----

// Per head, the weight is [d_h].
func.func @rms_norm_head_weight_dim(%x: tensor<?x8x16xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{weight dim 0 (8) must equal input dim 2 (16)}}
  %0 = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<?x8x16xf32>, tensor<8xf32> -> tensor<?x8x16xf32>
  return
}

// -----

// moe.sum_squares: one sum per row of a [T, n] input.
func.func @sum_squares_rank(%x: tensor<?x4x8xf32>) {
  // expected-error @+1 {{input must have rank 2, got 'tensor<?x4x8xf32>'}}
  %0 = moe.sum_squares %x : tensor<?x4x8xf32> -> tensor<?xf32>
  return
}

// -----

func.func @sum_squares_rows(%x: tensor<5x8xf32>) {
  // expected-error @+1 {{result dim 0 (4) must equal input dim 0 (5)}}
  %0 = moe.sum_squares %x : tensor<5x8xf32> -> tensor<4xf32>
  return
}

// -----

// moe.rms_scale: a positive count of squares, and a weight as wide as a row.
func.func @rms_scale_count(%x: tensor<?x8xf32>, %ss: tensor<?xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{count must be positive, got 0}}
  %0 = moe.rms_scale %x, %ss, %w {count = 0 : i64, epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<?xf32>, tensor<8xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @rms_scale_weight(%x: tensor<?x8xf32>, %ss: tensor<?xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{weight dim 0 (16) must equal input dim 1 (8)}}
  %0 = moe.rms_scale %x, %ss, %w {count = 16 : i64, epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<?xf32>, tensor<16xf32> -> tensor<?x8xf32>
  return
}

// -----

// The weight is [d].
func.func @rms_norm_weight_rank(%x: tensor<?x64xf32>, %w: tensor<1x64xf32>) {
  // expected-error @+1 {{weight must have rank 1, got 'tensor<1x64xf32>'}}
  %0 = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<?x64xf32>, tensor<1x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// The weight is as wide as the input.
func.func @rms_norm_weight_dim(%x: tensor<?x64xf32>, %w: tensor<32xf32>) {
  // expected-error @+1 {{weight dim 0 (32) must equal input dim 1 (64)}}
  %0 = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<?x64xf32>, tensor<32xf32> -> tensor<?x64xf32>
  return
}

// -----

// The weight is not wider than the input.
func.func @rms_norm_element_type(%x: tensor<?x64xbf16>, %w: tensor<64xf32>) {
  // expected-error @+1 {{weights must be stored in the compute element type 'bf16' or a narrower float type, got 'f32'}}
  %0 = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<?x64xbf16>, tensor<64xf32> -> tensor<?x64xbf16>
  return
}

// -----

// The result has exactly the input's type.
func.func @rms_norm_result(%x: tensor<?x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{result type 'tensor<7x64xf32>' must equal the input type 'tensor<?x64xf32>'}}
  %0 = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<?x64xf32>, tensor<64xf32> -> tensor<7x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// moe.linear
//===----------------------------------------------------------------------===//

// -----

// The input is [T, in].
func.func @linear_input_rank(%x: tensor<64xf32>, %w: tensor<32x64xf32>) {
  // expected-error @+1 {{input must have rank 2, got 'tensor<64xf32>'}}
  %0 = moe.linear %x, %w : tensor<64xf32>, tensor<32x64xf32> -> tensor<?x32xf32>
  return
}

// -----

// The weight is [out, in].
func.func @linear_weight_rank(%x: tensor<?x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{weight must have rank 2, got 'tensor<64xf32>'}}
  %0 = moe.linear %x, %w : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x32xf32>
  return
}

// -----

// The weight is static.
func.func @linear_weight_static(%x: tensor<?x64xf32>, %w: tensor<32x?xf32>) {
  // expected-error @+1 {{weight dim 1 must be static, got 'tensor<32x?xf32>'}}
  %0 = moe.linear %x, %w : tensor<?x64xf32>, tensor<32x?xf32> -> tensor<?x32xf32>
  return
}

// -----

// moe.clip: a positive limit.
func.func @clip_limit(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{limit must be positive and finite, got -1}}
  %0 = moe.clip %x {limit = -1.0 : f32} : tensor<?x64xf32>
  return
}

// -----

// A bias is [out].
func.func @linear_bias_dim(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>, %b: tensor<64xf32>) {
  // expected-error @+1 {{bias dim 0 (64) must equal weight dim 0 (32)}}
  %0 = moe.linear %x, %w bias %b : tensor<?x64xf32>, tensor<32x64xf32>, tensor<64xf32> -> tensor<?x32xf32>
  return
}

// -----

func.func @linear_bias_rank(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>, %b: tensor<1x32xf32>) {
  // expected-error @+1 {{bias must have rank 1, got 'tensor<1x32xf32>'}}
  %0 = moe.linear %x, %w bias %b : tensor<?x64xf32>, tensor<32x64xf32>, tensor<1x32xf32> -> tensor<?x32xf32>
  return
}

// -----

// moe.mlp: w1 and w3 [ffn, d], w2 [d, ffn], the gate one row [1, d].
func.func @mlp_w2(%x: tensor<?x64xf32>, %w1: tensor<96x64xf32>, %w2: tensor<64x32xf32>, %w3: tensor<96x64xf32>) {
  // expected-error @+1 {{w2 dim 1 (32) must equal w1 dim 0 (96)}}
  %0 = moe.mlp %x, %w1, %w2, %w3 : tensor<?x64xf32>, tensor<96x64xf32>, tensor<64x32xf32>, tensor<96x64xf32> -> tensor<?x64xf32>
  return
}

// -----

func.func @mlp_w3(%x: tensor<?x64xf32>, %w1: tensor<96x64xf32>, %w2: tensor<64x96xf32>, %w3: tensor<32x64xf32>) {
  // expected-error @+1 {{w3 type 'tensor<32x64xf32>' must equal the w1 type 'tensor<96x64xf32>'}}
  %0 = moe.mlp %x, %w1, %w2, %w3 : tensor<?x64xf32>, tensor<96x64xf32>, tensor<64x96xf32>, tensor<32x64xf32> -> tensor<?x64xf32>
  return
}

// -----

func.func @mlp_gate(%x: tensor<?x64xf32>, %w1: tensor<96x64xf32>, %w2: tensor<64x96xf32>, %g: tensor<2x64xf32>) {
  // expected-error @+1 {{gate must be one row ([1, d]), got 'tensor<2x64xf32>'}}
  %0 = moe.mlp %x, %w1, %w2, %w1 gate %g : tensor<?x64xf32>, tensor<96x64xf32>, tensor<64x96xf32>, tensor<96x64xf32>, tensor<2x64xf32> -> tensor<?x64xf32>
  return
}

// -----

func.func @mlp_result(%x: tensor<?x64xf32>, %w1: tensor<96x64xf32>, %w2: tensor<64x96xf32>) {
  // expected-error @+1 {{result type 'tensor<?x96xf32>' must equal the input type 'tensor<?x64xf32>'}}
  %0 = moe.mlp %x, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<96x64xf32>, tensor<64x96xf32>, tensor<96x64xf32> -> tensor<?x96xf32>
  return
}

// -----

// The result is [T, out].
func.func @linear_result_rank(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>) {
  // expected-error @+1 {{result must have rank 2, got 'tensor<?x4x8xf32>'}}
  %0 = moe.linear %x, %w : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x4x8xf32>
  return
}

// -----

// The weight's in dimension matches the input.
func.func @linear_in_dim(%x: tensor<?x64xf32>, %w: tensor<32x48xf32>) {
  // expected-error @+1 {{weight dim 1 (48) must equal input dim 1 (64)}}
  %0 = moe.linear %x, %w : tensor<?x64xf32>, tensor<32x48xf32> -> tensor<?x32xf32>
  return
}

// -----

// One result row per input row.
func.func @linear_tokens(%x: tensor<5x64xf32>, %w: tensor<32x64xf32>) {
  // expected-error @+1 {{result dim 0 (6) must equal input dim 0 (5)}}
  %0 = moe.linear %x, %w : tensor<5x64xf32>, tensor<32x64xf32> -> tensor<6x32xf32>
  return
}

// -----

// The result's out dimension is the weight's.
func.func @linear_out_dim(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>) {
  // expected-error @+1 {{result dim 1 (16) must equal weight dim 0 (32)}}
  %0 = moe.linear %x, %w : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x16xf32>
  return
}

// -----

// Input, weight and result share one element type.
func.func @linear_element_type(%x: tensor<?x64xbf16>, %w: tensor<32x64xbf16>) {
  // expected-error @+1 {{must share one element type, got 'bf16' and 'f32'}}
  %0 = moe.linear %x, %w : tensor<?x64xbf16>, tensor<32x64xbf16> -> tensor<?x32xf32>
  return
}

//===----------------------------------------------------------------------===//
// moe.rope
//===----------------------------------------------------------------------===//

// -----

// Theta must be positive.
func.func @rope_theta(%x: tensor<?x8x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{theta must be positive, got -1}}
  %0 = moe.rope %x, %p {theta = -1.0 : f32} : tensor<?x8x8xf32>, tensor<?xi64> -> tensor<?x8x8xf32>
  return
}

// -----

// The input is [T, heads, d_h].
func.func @rope_input_rank(%x: tensor<?x64xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{input must have rank 3, got 'tensor<?x64xf32>'}}
  %0 = moe.rope %x, %p {theta = 1.0e4 : f32} : tensor<?x64xf32>, tensor<?xi64> -> tensor<?x64xf32>
  return
}

// -----

// Heads and head dim are static.
func.func @rope_input_static(%x: tensor<?x?x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{input dim 1 must be static, got 'tensor<?x?x8xf32>'}}
  %0 = moe.rope %x, %p {theta = 1.0e4 : f32} : tensor<?x?x8xf32>, tensor<?xi64> -> tensor<?x?x8xf32>
  return
}

// -----

// Positions are a vector.
func.func @rope_positions_rank(%x: tensor<?x8x8xf32>, %p: tensor<?x1xi64>) {
  // expected-error @+1 {{positions must have rank 1, got 'tensor<?x1xi64>'}}
  %0 = moe.rope %x, %p {theta = 1.0e4 : f32} : tensor<?x8x8xf32>, tensor<?x1xi64> -> tensor<?x8x8xf32>
  return
}

// -----

// One position per token.
func.func @rope_positions_count(%x: tensor<5x8x8xf32>, %p: tensor<4xi64>) {
  // expected-error @+1 {{positions dim 0 (4) must equal input dim 0 (5)}}
  %0 = moe.rope %x, %p {theta = 1.0e4 : f32} : tensor<5x8x8xf32>, tensor<4xi64> -> tensor<5x8x8xf32>
  return
}

// -----

// Rotate-half needs an even head dim.
func.func @rope_odd_head_dim(%x: tensor<?x8x7xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{head dim must be even for rotate-half, got 7}}
  %0 = moe.rope %x, %p {theta = 1.0e4 : f32} : tensor<?x8x7xf32>, tensor<?xi64> -> tensor<?x8x7xf32>
  return
}

// -----

// The result has exactly the input's type.
func.func @rope_result(%x: tensor<?x8x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{result type 'tensor<?x8x8xbf16>' must equal the input type 'tensor<?x8x8xf32>'}}
  %0 = moe.rope %x, %p {theta = 1.0e4 : f32} : tensor<?x8x8xf32>, tensor<?xi64> -> tensor<?x8x8xbf16>
  return
}

//===----------------------------------------------------------------------===//
// moe.attention
//===----------------------------------------------------------------------===//

// -----

// The query is [Tq, n_h, d_h].
func.func @attention_query_rank(%q: tensor<?x64xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{query must have rank 3, got 'tensor<?x64xf32>'}}
  %0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x64xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x64xf32>
  return
}

// -----

// The key is [Tk, n_kv, d_h].
func.func @attention_key_rank(%q: tensor<?x8x8xf32>, %k: tensor<?x32xf32>, %v: tensor<?x4x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{key must have rank 3, got 'tensor<?x32xf32>'}}
  %0 = moe.attention %q, %k, %v, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x32xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
  return
}

// -----

// The value is [Tk, n_kv, d_h].
func.func @attention_value_rank(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %v: tensor<?x32xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{value must have rank 3, got 'tensor<?x32xf32>'}}
  %0 = moe.attention %q, %k, %v, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
  return
}

// -----

// Query heads and head dim are static.
func.func @attention_query_static(%q: tensor<?x8x?xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{query dim 2 must be static, got 'tensor<?x8x?xf32>'}}
  %0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x?xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x?xf32>
  return
}

// -----

// KV heads and head dim are static.
func.func @attention_key_static(%q: tensor<?x8x8xf32>, %k: tensor<?x?x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{key dim 1 must be static, got 'tensor<?x?x8xf32>'}}
  %0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
  return
}

// -----

// Query positions are a vector.
func.func @attention_q_positions_rank(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %qp: tensor<?x1xi64>, %p: tensor<?xi64>) {
  // expected-error @+1 {{q_positions must have rank 1, got 'tensor<?x1xi64>'}}
  %0 = moe.attention %q, %k, %k, %qp, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?x1xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
  return
}

// -----

// Key positions are a vector.
func.func @attention_kv_positions_rank(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>, %kp: tensor<?x1xi64>) {
  // expected-error @+1 {{kv_positions must have rank 1, got 'tensor<?x1xi64>'}}
  %0 = moe.attention %q, %k, %k, %p, %kp {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?x1xi64> -> tensor<?x8x8xf32>
  return
}

// -----

// Through key tiles, the keys' positions are by tile: [n, C], C static.
func.func @attention_tiles_positions_rank(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>, %t: tensor<?x2xi64>) {
  // expected-error @+1 {{kv_positions must have rank 2, got 'tensor<?xi64>'}}
  %0 = moe.attention %q, %k, %k, %p, %p tiles %t : tensor<?x2xi64> {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
  return
}

// -----

func.func @attention_tiles_positions_static(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>, %kp: tensor<?x?xi64>, %t: tensor<?x2xi64>) {
  // expected-error @+1 {{kv_positions dim 1 must be static, got 'tensor<?x?xi64>'}}
  %0 = moe.attention %q, %k, %k, %p, %kp tiles %t : tensor<?x2xi64> {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?x?xi64> -> tensor<?x8x8xf32>
  return
}

// -----

// A key tile is its first row and its row count.
func.func @attention_tiles_shape(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>, %kp: tensor<?x64xi64>, %t: tensor<?x3xi64>) {
  // expected-error @+1 {{key_tiles must be [n, 2] (first row, rows), got 'tensor<?x3xi64>'}}
  %0 = moe.attention %q, %k, %k, %p, %kp tiles %t : tensor<?x3xi64> {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?x64xi64> -> tensor<?x8x8xf32>
  return
}

// -----

// One row of positions per key tile.
func.func @attention_tiles_count(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>, %kp: tensor<4x64xi64>, %t: tensor<3x2xi64>) {
  // expected-error @+1 {{kv_positions dim 0 (4) must equal key_tiles dim 0 (3)}}
  %0 = moe.attention %q, %k, %k, %p, %kp tiles %t : tensor<3x2xi64> {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<4x64xi64> -> tensor<?x8x8xf32>
  return
}

// -----

// One query position per query.
func.func @attention_q_positions_count(%q: tensor<3x8x8xf32>, %k: tensor<6x4x8xf32>, %kp: tensor<6xi64>) {
  // expected-error @+1 {{q_positions dim 0 (6) must equal query dim 0 (3)}}
  %0 = moe.attention %q, %k, %k, %kp, %kp {scale = 0.35 : f32} : tensor<3x8x8xf32>, tensor<6x4x8xf32>, tensor<6x4x8xf32>, tensor<6xi64>, tensor<6xi64> -> tensor<3x8x8xf32>
  return
}

// -----

// One key position per key.
func.func @attention_kv_positions_count(%q: tensor<3x8x8xf32>, %k: tensor<6x4x8xf32>, %qp: tensor<3xi64>) {
  // expected-error @+1 {{kv_positions dim 0 (3) must equal key dim 0 (6)}}
  %0 = moe.attention %q, %k, %k, %qp, %qp {scale = 0.35 : f32} : tensor<3x8x8xf32>, tensor<6x4x8xf32>, tensor<6x4x8xf32>, tensor<3xi64>, tensor<3xi64> -> tensor<3x8x8xf32>
  return
}

// -----

// Query, key, value and result share one element type.
func.func @attention_element_type(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xbf16>, %p: tensor<?xi64>) {
  // expected-error @+1 {{must share one element type, got 'f32' and 'bf16'}}
  %0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xbf16>, tensor<?x4x8xbf16>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
  return
}

// -----

// Key and value have the same type.
func.func @attention_kv_type(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %v: tensor<?x2x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{key type 'tensor<?x4x8xf32>' and value type 'tensor<?x2x8xf32>' must be equal}}
  %0 = moe.attention %q, %k, %v, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
  return
}

// -----

// Keys have the query's head dim.
func.func @attention_head_dim(%q: tensor<?x8x8xf32>, %k: tensor<?x4x16xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{key dim 2 (16) must equal query dim 2 (8)}}
  %0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x16xf32>, tensor<?x4x16xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
  return
}

// -----

// GQA: query heads are a multiple of KV heads.
func.func @attention_gqa(%q: tensor<?x8x8xf32>, %k: tensor<?x3x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{GQA: query heads (8) must be a multiple of KV heads (3)}}
  %0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x3x8xf32>, tensor<?x3x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
  return
}

// -----

// The result has exactly the query's type.
func.func @attention_result(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{result type 'tensor<5x8x8xf32>' must equal the query type 'tensor<?x8x8xf32>'}}
  %0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<5x8x8xf32>
  return
}

//===----------------------------------------------------------------------===//
// moe.router
//===----------------------------------------------------------------------===//

// -----

// The input is [T, d].
func.func @router_input_rank(%x: tensor<64xf32>, %g: tensor<32x64xf32>) {
  // expected-error @+1 {{input must have rank 2, got 'tensor<64xf32>'}}
  %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
  return
}

// -----

// The gate is [n_experts, d].
func.func @router_gate_rank(%x: tensor<?x64xf32>, %g: tensor<32x64x1xf32>) {
  // expected-error @+1 {{gate must have rank 2, got 'tensor<32x64x1xf32>'}}
  %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64x1xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
  return
}

// -----

// The gate is static.
func.func @router_gate_static(%x: tensor<?x64xf32>, %g: tensor<?x64xf32>) {
  // expected-error @+1 {{gate dim 0 must be static, got 'tensor<?x64xf32>'}}
  %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
  return
}

// -----

// Routing weights are [T, k].
func.func @router_weights_rank(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>) {
  // expected-error @+1 {{weights must have rank 2, got 'tensor<?xf32>'}}
  %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?xf32>, tensor<?x2xi64>
  return
}

// -----

// Expert indices are [T, k].
func.func @router_indices_rank(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>) {
  // expected-error @+1 {{indices must have rank 2, got 'tensor<?xi64>'}}
  %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?xi64>
  return
}

// -----

// The gate is as wide as the input.
func.func @router_gate_dim(%x: tensor<?x64xf32>, %g: tensor<32x48xf32>) {
  // expected-error @+1 {{gate dim 1 (48) must equal input dim 1 (64)}}
  %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x48xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
  return
}

// -----

// One row of weights per token.
func.func @router_weights_tokens(%x: tensor<5x64xf32>, %g: tensor<32x64xf32>) {
  // expected-error @+1 {{weights dim 0 (4) must equal input dim 0 (5)}}
  %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<5x64xf32>, tensor<32x64xf32> -> tensor<4x2xf32>, tensor<5x2xi64>
  return
}

// -----

// One row of indices per token.
func.func @router_indices_tokens(%x: tensor<5x64xf32>, %g: tensor<32x64xf32>) {
  // expected-error @+1 {{indices dim 0 (6) must equal input dim 0 (5)}}
  %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<5x64xf32>, tensor<32x64xf32> -> tensor<5x2xf32>, tensor<6x2xi64>
  return
}

// -----

// Input, gate and weights share one element type.
func.func @router_element_type(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>) {
  // expected-error @+1 {{must share one element type, got 'f32' and 'bf16'}}
  %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xbf16>, tensor<?x2xi64>
  return
}

// -----

// top_k cannot exceed the number of experts.
func.func @router_top_k_too_large(%x: tensor<?x64xf32>, %g: tensor<4x64xf32>) {
  // expected-error @+1 {{top_k (5) must not exceed the number of experts (4)}}
  %w, %i = moe.router %x, %g {top_k = 5 : i64} : tensor<?x64xf32>, tensor<4x64xf32> -> tensor<?x5xf32>, tensor<?x5xi64>
  return
}

// -----

// top_k is positive (attribute constraint).
func.func @router_top_k_zero(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>) {
  // expected-error @+1 {{attribute 'top_k' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %w, %i = moe.router %x, %g {top_k = 0 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x0xf32>, tensor<?x0xi64>
  return
}

// -----

// Weights have top_k columns.
func.func @router_weights_k(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>) {
  // expected-error @+1 {{weights and indices must be [T, top_k = 2], got 'tensor<?x3xf32>'}}
  %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x3xf32>, tensor<?x2xi64>
  return
}

// -----

// Indices have top_k columns (a dynamic column count is not enough).
func.func @router_indices_k(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>) {
  // expected-error @+1 {{weights and indices must be [T, top_k = 2], got 'tensor<?x?xi64>'}}
  %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x?xi64>
  return
}

//===----------------------------------------------------------------------===//
// moe.experts
//===----------------------------------------------------------------------===//

// -----

// The input is [T, d].
func.func @experts_input_rank(%x: tensor<64xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{input must have rank 2, got 'tensor<64xf32>'}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x64xf32>, tensor<8x64x16xf32>, tensor<8x16x64xf32> -> tensor<64xf32>
  return
}

// -----

// Routing weights are [T, k].
func.func @experts_weights_rank(%x: tensor<?x64xf32>, %w: tensor<?xf32>, %i: tensor<?x2xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{weights must have rank 2, got 'tensor<?xf32>'}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?xf32>, tensor<?x2xi64>, tensor<8x16x64xf32>, tensor<8x64x16xf32>, tensor<8x16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// Expert indices are [T, k].
func.func @experts_indices_rank(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %i: tensor<?xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{indices must have rank 2, got 'tensor<?xi64>'}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?xi64>, tensor<8x16x64xf32>, tensor<8x64x16xf32>, tensor<8x16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// w1 is [E, ffn, d].
func.func @experts_w1_rank(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<16x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{w1 must have rank 3, got 'tensor<16x64xf32>'}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<16x64xf32>, tensor<8x64x16xf32>, tensor<16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// w2 is [E, d, ffn].
func.func @experts_w2_rank(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<64x16xf32>) {
  // expected-error @+1 {{w2 must have rank 3, got 'tensor<64x16xf32>'}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x64xf32>, tensor<64x16xf32>, tensor<8x16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// w3 is [E, ffn, d].
func.func @experts_w3_rank(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x16xf32>, %w3: tensor<16x64xf32>) {
  // expected-error @+1 {{w3 must have rank 3, got 'tensor<16x64xf32>'}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w3 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x64xf32>, tensor<8x64x16xf32>, tensor<16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// w1 is static.
func.func @experts_w1_static(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<?x16x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{w1 dim 0 must be static, got 'tensor<?x16x64xf32>'}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<?x16x64xf32>, tensor<8x64x16xf32>, tensor<?x16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// w2 is static.
func.func @experts_w2_static(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x?xf32>) {
  // expected-error @+1 {{w2 dim 2 must be static, got 'tensor<8x64x?xf32>'}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x64xf32>, tensor<8x64x?xf32>, tensor<8x16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// Input, routing weights and result share one element type.
func.func @experts_element_type(%x: tensor<?x64xf32>, %w: tensor<?x2xbf16>, %i: tensor<?x2xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{must share one element type, got 'f32' and 'bf16'}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xbf16>, tensor<?x2xi64>, tensor<8x16x64xf32>, tensor<8x64x16xf32>, tensor<8x16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// Expert weights are not wider than the input.
func.func @experts_weight_element_type(%x: tensor<?x64xbf16>, %w: tensor<?x2xbf16>, %i: tensor<?x2xi64>, %w1: tensor<8x16x64xbf16>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{weights must be stored in the compute element type 'bf16' or a narrower float type, got 'f32'}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xbf16>, tensor<?x2xbf16>, tensor<?x2xi64>, tensor<8x16x64xbf16>, tensor<8x64x16xf32>, tensor<8x16x64xbf16> -> tensor<?x64xbf16>
  return
}

// -----

// w1 and w3 have the same type.
func.func @experts_w1_w3(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x16xf32>, %w3: tensor<8x32x64xf32>) {
  // expected-error @+1 {{w1 'tensor<8x16x64xf32>' and w3 'tensor<8x32x64xf32>' must have the same type}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w3 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x64xf32>, tensor<8x64x16xf32>, tensor<8x32x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// One row of routing weights per token.
func.func @experts_weights_tokens(%x: tensor<5x64xf32>, %w: tensor<4x2xf32>, %i: tensor<5x2xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{weights dim 0 (4) must equal input dim 0 (5)}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<5x64xf32>, tensor<4x2xf32>, tensor<5x2xi64>, tensor<8x16x64xf32>, tensor<8x64x16xf32>, tensor<8x16x64xf32> -> tensor<5x64xf32>
  return
}

// -----

// One row of indices per token.
func.func @experts_indices_tokens(%x: tensor<5x64xf32>, %w: tensor<5x2xf32>, %i: tensor<6x2xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{indices dim 0 (6) must equal input dim 0 (5)}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<5x64xf32>, tensor<5x2xf32>, tensor<6x2xi64>, tensor<8x16x64xf32>, tensor<8x64x16xf32>, tensor<8x16x64xf32> -> tensor<5x64xf32>
  return
}

// -----

// Indices and weights have the same k.
func.func @experts_k(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %i: tensor<?x3xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{indices dim 1 (3) must equal weights dim 1 (2)}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x3xi64>, tensor<8x16x64xf32>, tensor<8x64x16xf32>, tensor<8x16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// w1 reads the input's hidden size.
func.func @experts_w1_hidden(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<8x16x32xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{w1 dim 2 (32) must equal input dim 1 (64)}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x32xf32>, tensor<8x64x16xf32>, tensor<8x16x32xf32> -> tensor<?x64xf32>
  return
}

// -----

// w2 has as many experts as w1.
func.func @experts_w2_experts(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<4x64x16xf32>) {
  // expected-error @+1 {{w2 dim 0 (4) must equal w1 dim 0 (8)}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x64xf32>, tensor<4x64x16xf32>, tensor<8x16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// w2 writes the input's hidden size.
func.func @experts_w2_hidden(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x32x16xf32>) {
  // expected-error @+1 {{w2 dim 1 (32) must equal input dim 1 (64)}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x64xf32>, tensor<8x32x16xf32>, tensor<8x16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// w2 reads w1's ffn size.
func.func @experts_w2_ffn(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x24xf32>) {
  // expected-error @+1 {{w2 dim 2 (24) must equal w1 dim 1 (16)}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x64xf32>, tensor<8x64x24xf32>, tensor<8x16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// The result has exactly the input's type.
func.func @experts_result(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{result type 'tensor<3x64xf32>' must equal the input type 'tensor<?x64xf32>'}}
  %0 = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x64xf32>, tensor<8x64x16xf32>, tensor<8x16x64xf32> -> tensor<3x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// moe.lm_head
//===----------------------------------------------------------------------===//

// -----

// The input is [T, d].
func.func @lm_head_input_rank(%x: tensor<64xf32>, %w: tensor<512x64xf32>, %p: tensor<?xi64>, %last: index) {
  // expected-error @+1 {{input must have rank 2, got 'tensor<64xf32>'}}
  %0 = moe.lm_head %x, %w, %p, %last : tensor<64xf32>, tensor<512x64xf32>, tensor<?xi64> -> tensor<512xf32>
  return
}

// -----

// The weight is [V, d].
func.func @lm_head_weight_rank(%x: tensor<?x64xf32>, %w: tensor<512xf32>, %p: tensor<?xi64>, %last: index) {
  // expected-error @+1 {{weight must have rank 2, got 'tensor<512xf32>'}}
  %0 = moe.lm_head %x, %w, %p, %last : tensor<?x64xf32>, tensor<512xf32>, tensor<?xi64> -> tensor<512xf32>
  return
}

// -----

// The weight is static.
func.func @lm_head_weight_static(%x: tensor<?x64xf32>, %w: tensor<?x64xf32>, %p: tensor<?xi64>, %last: index) {
  // expected-error @+1 {{weight dim 0 must be static, got 'tensor<?x64xf32>'}}
  %0 = moe.lm_head %x, %w, %p, %last : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?xi64> -> tensor<512xf32>
  return
}

// -----

// The logits are [V], for the last position only.
func.func @lm_head_result_rank(%x: tensor<?x64xf32>, %w: tensor<512x64xf32>, %p: tensor<?xi64>, %last: index) {
  // expected-error @+1 {{result must have rank 1, got 'tensor<?x512xf32>'}}
  %0 = moe.lm_head %x, %w, %p, %last : tensor<?x64xf32>, tensor<512x64xf32>, tensor<?xi64> -> tensor<?x512xf32>
  return
}

// -----

// The weight is as wide as the input.
func.func @lm_head_hidden(%x: tensor<?x64xf32>, %w: tensor<512x32xf32>, %p: tensor<?xi64>, %last: index) {
  // expected-error @+1 {{weight dim 1 (32) must equal input dim 1 (64)}}
  %0 = moe.lm_head %x, %w, %p, %last : tensor<?x64xf32>, tensor<512x32xf32>, tensor<?xi64> -> tensor<512xf32>
  return
}

// -----

// One logit per vocabulary entry.
func.func @lm_head_vocab(%x: tensor<?x64xf32>, %w: tensor<512x64xf32>, %p: tensor<?xi64>, %last: index) {
  // expected-error @+1 {{result dim 0 (256) must equal weight dim 0 (512)}}
  %0 = moe.lm_head %x, %w, %p, %last : tensor<?x64xf32>, tensor<512x64xf32>, tensor<?xi64> -> tensor<256xf32>
  return
}

// -----

// Input, weight and logits share one element type.
func.func @lm_head_element_type(%x: tensor<?x64xbf16>, %w: tensor<512x64xbf16>, %p: tensor<?xi64>, %last: index) {
  // expected-error @+1 {{must share one element type, got 'bf16' and 'f32'}}
  %0 = moe.lm_head %x, %w, %p, %last : tensor<?x64xbf16>, tensor<512x64xbf16>, tensor<?xi64> -> tensor<512xf32>
  return
}

// -----

// Positions are a vector.
func.func @lm_head_positions_rank(%x: tensor<?x64xf32>, %w: tensor<512x64xf32>, %p: tensor<?x1xi64>, %last: index) {
  // expected-error @+1 {{positions must have rank 1, got 'tensor<?x1xi64>'}}
  %0 = moe.lm_head %x, %w, %p, %last : tensor<?x64xf32>, tensor<512x64xf32>, tensor<?x1xi64> -> tensor<512xf32>
  return
}

// -----

// One position per input row.
func.func @lm_head_positions_count(%x: tensor<5x64xf32>, %w: tensor<512x64xf32>, %p: tensor<6xi64>, %last: index) {
  // expected-error @+1 {{positions dim 0 (6) must equal input dim 0 (5)}}
  %0 = moe.lm_head %x, %w, %p, %last : tensor<5x64xf32>, tensor<512x64xf32>, tensor<6xi64> -> tensor<512xf32>
  return
}

// -----

// The last position is an index (type constraint).
func.func @lm_head_last_type(%x: tensor<?x64xf32>, %w: tensor<512x64xf32>, %p: tensor<?xi64>, %last: i64) {
  // expected-note @-1 {{prior use here}}
  // expected-error @+1 {{use of value '%last' expects different type than prior uses: 'index' vs 'i64'}}
  %0 = moe.lm_head %x, %w, %p, %last : tensor<?x64xf32>, tensor<512x64xf32>, tensor<?xi64> -> tensor<512xf32>
  return
}

//===----------------------------------------------------------------------===//
// moe.kv_cache
//===----------------------------------------------------------------------===//

// -----

// K is [T, n_kv, d_h].
func.func @kv_cache_key_rank(%k: tensor<?x32xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{key must have rank 3, got 'tensor<?x32xf32>'}}
  moe.kv_cache %k, %k, %p {layer = 0 : i64} : tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>
  return
}

// -----

// KV heads and head dim are static.
func.func @kv_cache_key_static(%k: tensor<?x4x?xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{key dim 2 must be static, got 'tensor<?x4x?xf32>'}}
  moe.kv_cache %k, %k, %p {layer = 0 : i64} : tensor<?x4x?xf32>, tensor<?x4x?xf32>, tensor<?xi64>
  return
}

// -----

// Positions are a vector.
func.func @kv_cache_positions_rank(%k: tensor<?x4x8xf32>, %p: tensor<?x1xi64>) {
  // expected-error @+1 {{positions must have rank 1, got 'tensor<?x1xi64>'}}
  moe.kv_cache %k, %k, %p {layer = 0 : i64} : tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?x1xi64>
  return
}

// -----

// One position per cached token.
func.func @kv_cache_positions_count(%k: tensor<5x4x8xf32>, %p: tensor<6xi64>) {
  // expected-error @+1 {{positions dim 0 (6) must equal key dim 0 (5)}}
  moe.kv_cache %k, %k, %p {layer = 0 : i64} : tensor<5x4x8xf32>, tensor<5x4x8xf32>, tensor<6xi64>
  return
}

// -----

// K and V have the same type.
func.func @kv_cache_kv_type(%k: tensor<?x4x8xf32>, %v: tensor<?x4x8xbf16>, %p: tensor<?xi64>) {
  // expected-error @+1 {{key type 'tensor<?x4x8xf32>' and value type 'tensor<?x4x8xbf16>' must be equal}}
  moe.kv_cache %k, %v, %p {layer = 0 : i64} : tensor<?x4x8xf32>, tensor<?x4x8xbf16>, tensor<?xi64>
  return
}

// -----

// Layers are numbered from 0 (attribute constraint).
func.func @kv_cache_layer_negative(%k: tensor<?x4x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{attribute 'layer' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  moe.kv_cache %k, %k, %p {layer = -1 : i64} : tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>
  return
}

// -----

// The head offset is an index (type constraint).
func.func @kv_cache_head_offset_type(%k: tensor<?x4x8xf32>, %p: tensor<?xi64>, %h: i64) {
  // expected-note @-1 {{prior use here}}
  // expected-error @+1 {{use of value '%h' expects different type than prior uses: 'index' vs 'i64'}}
  moe.kv_cache %k, %k, %p heads from %h {layer = 0 : i64} : tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>
  return
}

//===----------------------------------------------------------------------===//
// moe.attention_partial
//===----------------------------------------------------------------------===//

// -----

// The query is [Tq, n_h, d_h].
func.func @attention_partial_query_rank(%q: tensor<?x64xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{query must have rank 3, got 'tensor<?x64xf32>'}}
  %o, %l = moe.attention_partial %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x64xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x64xf32>, tensor<?x8xf32>
  return
}

// -----

// The key is [Tk, n_kv, d_h].
func.func @attention_partial_key_rank(%q: tensor<?x8x8xf32>, %k: tensor<?x32xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{key must have rank 3, got 'tensor<?x32xf32>'}}
  %o, %l = moe.attention_partial %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>, tensor<?x8xf32>
  return
}

// -----

// Query heads and head dim are static.
func.func @attention_partial_query_static(%q: tensor<?x?x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{query dim 1 must be static, got 'tensor<?x?x8xf32>'}}
  %o, %l = moe.attention_partial %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x?x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x?x8xf32>, tensor<?x?xf32>
  return
}

// -----

// KV heads and head dim are static.
func.func @attention_partial_key_static(%q: tensor<?x8x8xf32>, %k: tensor<?x4x?xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{key dim 2 must be static, got 'tensor<?x4x?xf32>'}}
  %o, %l = moe.attention_partial %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x?xf32>, tensor<?x4x?xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>, tensor<?x8xf32>
  return
}

// -----

// Query positions are a vector.
func.func @attention_partial_q_positions_rank(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %qp: tensor<?x1xi64>, %p: tensor<?xi64>) {
  // expected-error @+1 {{q_positions must have rank 1, got 'tensor<?x1xi64>'}}
  %o, %l = moe.attention_partial %q, %k, %k, %qp, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?x1xi64>, tensor<?xi64> -> tensor<?x8x8xf32>, tensor<?x8xf32>
  return
}

// -----

// Key positions are a vector.
func.func @attention_partial_kv_positions_rank(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>, %kp: tensor<?x1xi64>) {
  // expected-error @+1 {{kv_positions must have rank 1, got 'tensor<?x1xi64>'}}
  %o, %l = moe.attention_partial %q, %k, %k, %p, %kp {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?x1xi64> -> tensor<?x8x8xf32>, tensor<?x8xf32>
  return
}

// -----

// The log-sum-exp is [Tq, n_h].
func.func @attention_partial_lse_rank(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{lse must have rank 2, got 'tensor<?x8x1xf32>'}}
  %o, %l = moe.attention_partial %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>, tensor<?x8x1xf32>
  return
}

// -----

// One query position per query.
func.func @attention_partial_q_positions_count(%q: tensor<3x8x8xf32>, %k: tensor<6x4x8xf32>, %kp: tensor<6xi64>) {
  // expected-error @+1 {{q_positions dim 0 (6) must equal query dim 0 (3)}}
  %o, %l = moe.attention_partial %q, %k, %k, %kp, %kp {scale = 0.35 : f32} : tensor<3x8x8xf32>, tensor<6x4x8xf32>, tensor<6x4x8xf32>, tensor<6xi64>, tensor<6xi64> -> tensor<3x8x8xf32>, tensor<3x8xf32>
  return
}

// -----

// One key position per key.
func.func @attention_partial_kv_positions_count(%q: tensor<3x8x8xf32>, %k: tensor<6x4x8xf32>, %qp: tensor<3xi64>) {
  // expected-error @+1 {{kv_positions dim 0 (3) must equal key dim 0 (6)}}
  %o, %l = moe.attention_partial %q, %k, %k, %qp, %qp {scale = 0.35 : f32} : tensor<3x8x8xf32>, tensor<6x4x8xf32>, tensor<6x4x8xf32>, tensor<3xi64>, tensor<3xi64> -> tensor<3x8x8xf32>, tensor<3x8xf32>
  return
}

// -----

// Keys have the query's head dim.
func.func @attention_partial_head_dim(%q: tensor<?x8x8xf32>, %k: tensor<?x4x16xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{key dim 2 (16) must equal query dim 2 (8)}}
  %o, %l = moe.attention_partial %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x16xf32>, tensor<?x4x16xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>, tensor<?x8xf32>
  return
}

// -----

// One log-sum-exp row per query.
func.func @attention_partial_lse_rows(%q: tensor<3x8x8xf32>, %k: tensor<6x4x8xf32>, %qp: tensor<3xi64>, %kp: tensor<6xi64>) {
  // expected-error @+1 {{lse dim 0 (6) must equal query dim 0 (3)}}
  %o, %l = moe.attention_partial %q, %k, %k, %qp, %kp {scale = 0.35 : f32} : tensor<3x8x8xf32>, tensor<6x4x8xf32>, tensor<6x4x8xf32>, tensor<3xi64>, tensor<6xi64> -> tensor<3x8x8xf32>, tensor<6x8xf32>
  return
}

// -----

// One log-sum-exp per query head (not per KV head).
func.func @attention_partial_lse_heads(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{lse dim 1 (4) must equal query dim 1 (8)}}
  %o, %l = moe.attention_partial %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>, tensor<?x4xf32>
  return
}

// -----

// Query, key, value, result and log-sum-exp share one element type.
func.func @attention_partial_element_type(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{must share one element type, got 'f32' and 'bf16'}}
  %o, %l = moe.attention_partial %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>, tensor<?x8xbf16>
  return
}

// -----

// The scale must be positive.
func.func @attention_partial_scale(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{scale must be positive, got -1}}
  %o, %l = moe.attention_partial %q, %k, %k, %p, %p {scale = -1.0 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>, tensor<?x8xf32>
  return
}

// -----

// Key and value have the same type.
func.func @attention_partial_kv_type(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %v: tensor<?x2x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{key type 'tensor<?x4x8xf32>' and value type 'tensor<?x2x8xf32>' must be equal}}
  %o, %l = moe.attention_partial %q, %k, %v, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>, tensor<?x8xf32>
  return
}

// -----

// GQA: query heads are a multiple of KV heads.
func.func @attention_partial_gqa(%q: tensor<?x8x8xf32>, %k: tensor<?x3x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{GQA: query heads (8) must be a multiple of KV heads (3)}}
  %o, %l = moe.attention_partial %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x3x8xf32>, tensor<?x3x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>, tensor<?x8xf32>
  return
}

// -----

// The result has exactly the query's type.
func.func @attention_partial_result(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{result type 'tensor<5x8x8xf32>' must equal the query type 'tensor<?x8x8xf32>'}}
  %o, %l = moe.attention_partial %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<5x8x8xf32>, tensor<?x8xf32>
  return
}

//===----------------------------------------------------------------------===//
// moe.attention_merge
//===----------------------------------------------------------------------===//

// -----

// The two partial outputs and the result have one type.
func.func @attention_merge_out_types(%o1: tensor<?x8x8xf32>, %o2: tensor<3x8x8xf32>, %l: tensor<?x8xf32>) {
  // expected-error @+1 {{failed to verify that all of {out1, out2, result} have same type}}
  %o, %lse = "moe.attention_merge"(%o1, %l, %o2, %l) : (tensor<?x8x8xf32>, tensor<?x8xf32>, tensor<3x8x8xf32>, tensor<?x8xf32>) -> (tensor<?x8x8xf32>, tensor<?x8xf32>)
  return
}

// -----

// The two log-sum-exps and the merged one have one type.
func.func @attention_merge_lse_types(%o1: tensor<?x8x8xf32>, %l1: tensor<?x8xf32>, %l2: tensor<3x8xf32>) {
  // expected-error @+1 {{failed to verify that all of {lse1, lse2, lse} have same type}}
  %o, %lse = "moe.attention_merge"(%o1, %l1, %o1, %l2) : (tensor<?x8x8xf32>, tensor<?x8xf32>, tensor<?x8x8xf32>, tensor<3x8xf32>) -> (tensor<?x8x8xf32>, tensor<?x8xf32>)
  return
}

// -----

// The partial outputs are [Tq, n_h, d_h].
func.func @attention_merge_out_rank(%o1: tensor<?x64xf32>, %l1: tensor<?x8xf32>) {
  // expected-error @+1 {{out1 must have rank 3, got 'tensor<?x64xf32>'}}
  %o, %l = moe.attention_merge %o1, %l1, %o1, %l1 : tensor<?x64xf32>, tensor<?x8xf32> -> tensor<?x64xf32>, tensor<?x8xf32>
  return
}

// -----

// The log-sum-exps are [Tq, n_h].
func.func @attention_merge_lse_rank(%o1: tensor<?x8x8xf32>, %l1: tensor<?xf32>) {
  // expected-error @+1 {{lse1 must have rank 2, got 'tensor<?xf32>'}}
  %o, %l = moe.attention_merge %o1, %l1, %o1, %l1 : tensor<?x8x8xf32>, tensor<?xf32> -> tensor<?x8x8xf32>, tensor<?xf32>
  return
}

// -----

// One log-sum-exp row per query.
func.func @attention_merge_lse_rows(%o1: tensor<3x8x8xf32>, %l1: tensor<4x8xf32>) {
  // expected-error @+1 {{lse1 dim 0 (4) must equal out1 dim 0 (3)}}
  %o, %l = moe.attention_merge %o1, %l1, %o1, %l1 : tensor<3x8x8xf32>, tensor<4x8xf32> -> tensor<3x8x8xf32>, tensor<4x8xf32>
  return
}

// -----

// One log-sum-exp per query head.
func.func @attention_merge_lse_heads(%o1: tensor<?x8x8xf32>, %l1: tensor<?x4xf32>) {
  // expected-error @+1 {{lse1 dim 1 (4) must equal out1 dim 1 (8)}}
  %o, %l = moe.attention_merge %o1, %l1, %o1, %l1 : tensor<?x8x8xf32>, tensor<?x4xf32> -> tensor<?x8x8xf32>, tensor<?x4xf32>
  return
}

// -----

// Outputs and log-sum-exps share one element type.
func.func @attention_merge_element_type(%o1: tensor<?x8x8xf32>, %l1: tensor<?x8xbf16>) {
  // expected-error @+1 {{must share one element type, got 'f32' and 'bf16'}}
  %o, %l = moe.attention_merge %o1, %l1, %o1, %l1 : tensor<?x8x8xf32>, tensor<?x8xbf16> -> tensor<?x8x8xf32>, tensor<?x8xbf16>
  return
}

//===----------------------------------------------------------------------===//
// moe.expert_ffn
//===----------------------------------------------------------------------===//

// -----

// The input is [rows, d].
func.func @expert_ffn_input_rank(%x: tensor<64xf32>, %e: tensor<?xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{input must have rank 2, got 'tensor<64xf32>'}}
  %0 = moe.expert_ffn %x, %e, %w1, %w2, %w1 : tensor<64xf32>, tensor<?xi64>, tensor<8x16x64xf32>, tensor<8x64x16xf32>, tensor<8x16x64xf32> -> tensor<64xf32>
  return
}

// -----

// One expert id per row: a vector.
func.func @expert_ffn_experts_rank(%x: tensor<?x64xf32>, %e: tensor<?x1xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{experts must have rank 1, got 'tensor<?x1xi64>'}}
  %0 = moe.expert_ffn %x, %e, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x1xi64>, tensor<8x16x64xf32>, tensor<8x64x16xf32>, tensor<8x16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// w1 is [E, ffn, d].
func.func @expert_ffn_w1_rank(%x: tensor<?x64xf32>, %e: tensor<?xi64>, %w1: tensor<16x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{w1 must have rank 3, got 'tensor<16x64xf32>'}}
  %0 = moe.expert_ffn %x, %e, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?xi64>, tensor<16x64xf32>, tensor<8x64x16xf32>, tensor<16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// w2 is [E, d, ffn].
func.func @expert_ffn_w2_rank(%x: tensor<?x64xf32>, %e: tensor<?xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<64x16xf32>) {
  // expected-error @+1 {{w2 must have rank 3, got 'tensor<64x16xf32>'}}
  %0 = moe.expert_ffn %x, %e, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?xi64>, tensor<8x16x64xf32>, tensor<64x16xf32>, tensor<8x16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// w1 is static.
func.func @expert_ffn_w1_static(%x: tensor<?x64xf32>, %e: tensor<?xi64>, %w1: tensor<8x?x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{w1 dim 1 must be static, got 'tensor<8x?x64xf32>'}}
  %0 = moe.expert_ffn %x, %e, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?xi64>, tensor<8x?x64xf32>, tensor<8x64x16xf32>, tensor<8x?x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// w2 is static.
func.func @expert_ffn_w2_static(%x: tensor<?x64xf32>, %e: tensor<?xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<?x64x16xf32>) {
  // expected-error @+1 {{w2 dim 0 must be static, got 'tensor<?x64x16xf32>'}}
  %0 = moe.expert_ffn %x, %e, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?xi64>, tensor<8x16x64xf32>, tensor<?x64x16xf32>, tensor<8x16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// One expert id per row.
func.func @expert_ffn_experts_count(%x: tensor<5x64xf32>, %e: tensor<4xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{experts dim 0 (4) must equal input dim 0 (5)}}
  %0 = moe.expert_ffn %x, %e, %w1, %w2, %w1 : tensor<5x64xf32>, tensor<4xi64>, tensor<8x16x64xf32>, tensor<8x64x16xf32>, tensor<8x16x64xf32> -> tensor<5x64xf32>
  return
}

// -----

// w1 reads the input's hidden size.
func.func @expert_ffn_w1_hidden(%x: tensor<?x64xf32>, %e: tensor<?xi64>, %w1: tensor<8x16x32xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{w1 dim 2 (32) must equal input dim 1 (64)}}
  %0 = moe.expert_ffn %x, %e, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?xi64>, tensor<8x16x32xf32>, tensor<8x64x16xf32>, tensor<8x16x32xf32> -> tensor<?x64xf32>
  return
}

// -----

// w2 has as many experts as w1.
func.func @expert_ffn_w2_experts(%x: tensor<?x64xf32>, %e: tensor<?xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<4x64x16xf32>) {
  // expected-error @+1 {{w2 dim 0 (4) must equal w1 dim 0 (8)}}
  %0 = moe.expert_ffn %x, %e, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?xi64>, tensor<8x16x64xf32>, tensor<4x64x16xf32>, tensor<8x16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// w2 writes the input's hidden size.
func.func @expert_ffn_w2_hidden(%x: tensor<?x64xf32>, %e: tensor<?xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x32x16xf32>) {
  // expected-error @+1 {{w2 dim 1 (32) must equal input dim 1 (64)}}
  %0 = moe.expert_ffn %x, %e, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?xi64>, tensor<8x16x64xf32>, tensor<8x32x16xf32>, tensor<8x16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// w2 reads w1's ffn size.
func.func @expert_ffn_w2_ffn(%x: tensor<?x64xf32>, %e: tensor<?xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x24xf32>) {
  // expected-error @+1 {{w2 dim 2 (24) must equal w1 dim 1 (16)}}
  %0 = moe.expert_ffn %x, %e, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?xi64>, tensor<8x16x64xf32>, tensor<8x64x24xf32>, tensor<8x16x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// Expert weights are not wider than the input.
func.func @expert_ffn_element_type(%x: tensor<?x64xbf16>, %e: tensor<?xi64>, %w1: tensor<8x16x64xbf16>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{weights must be stored in the compute element type 'bf16' or a narrower float type, got 'f32'}}
  %0 = moe.expert_ffn %x, %e, %w1, %w2, %w1 : tensor<?x64xbf16>, tensor<?xi64>, tensor<8x16x64xbf16>, tensor<8x64x16xf32>, tensor<8x16x64xbf16> -> tensor<?x64xbf16>
  return
}

// -----

// w1 and w3 have the same type.
func.func @expert_ffn_w1_w3(%x: tensor<?x64xf32>, %e: tensor<?xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x16xf32>, %w3: tensor<8x32x64xf32>) {
  // expected-error @+1 {{w1 'tensor<8x16x64xf32>' and w3 'tensor<8x32x64xf32>' must have the same type}}
  %0 = moe.expert_ffn %x, %e, %w1, %w2, %w3 : tensor<?x64xf32>, tensor<?xi64>, tensor<8x16x64xf32>, tensor<8x64x16xf32>, tensor<8x32x64xf32> -> tensor<?x64xf32>
  return
}

// -----

// The result has exactly the input's type.
func.func @expert_ffn_result(%x: tensor<?x64xf32>, %e: tensor<?xi64>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{result type 'tensor<3x64xf32>' must equal the input type 'tensor<?x64xf32>'}}
  %0 = moe.expert_ffn %x, %e, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?xi64>, tensor<8x16x64xf32>, tensor<8x64x16xf32>, tensor<8x16x64xf32> -> tensor<3x64xf32>
  return
}

// -----

// Expert ids are i64 (type constraint).
func.func @expert_ffn_experts_type(%x: tensor<?x64xf32>, %e: tensor<?xi32>, %w1: tensor<8x16x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{operand #1 must be ranked tensor of 64-bit signless integer values, but got 'tensor<?xi32>'}}
  %0 = moe.expert_ffn %x, %e, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?xi32>, tensor<8x16x64xf32>, tensor<8x64x16xf32>, tensor<8x16x64xf32> -> tensor<?x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// moe.layer, moe.yield
//===----------------------------------------------------------------------===//

// -----

// The block arguments have the operands' types.
func.func @layer_block_args(%h: tensor<?x64xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{block arguments must have the types of the operands}}
  %0 = moe.layer 0 (%h, %p) : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32> {
  ^bb0(%a: tensor<?x64xf32>):
    moe.yield %a : tensor<?x64xf32>
  }
  return
}

// -----

// The yielded values have the results' types.
func.func @layer_yield_types(%h: tensor<?x64xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{yielded values must have the types of the results}}
  %0 = moe.layer 0 (%h, %p) : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32> {
  ^bb0(%a: tensor<?x64xf32>, %ap: tensor<?xi64>):
    moe.yield %ap : tensor<?xi64>
  }
  return
}

// -----

// Layers are numbered from 0 (attribute constraint).
func.func @layer_index_negative(%h: tensor<?x64xf32>) {
  // expected-error @+1 {{attribute 'index' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  %0 = moe.layer -1 (%h) : (tensor<?x64xf32>) -> tensor<?x64xf32> {
  ^bb0(%a: tensor<?x64xf32>):
    moe.yield %a : tensor<?x64xf32>
  }
  return
}

// -----

// A layer is isolated from above: values from outside come in as operands.
func.func @layer_isolated(%h: tensor<?x64xf32>, %x: tensor<?x64xf32>) {
  // expected-note @+1 {{required by region isolation constraints}}
  %0 = moe.layer 0 (%h) : (tensor<?x64xf32>) -> tensor<?x64xf32> {
  ^bb0(%a: tensor<?x64xf32>):
    // expected-error @+1 {{'arith.addf' op using value defined outside the region}}
    %d = arith.addf %a, %x : tensor<?x64xf32>
    moe.yield %d : tensor<?x64xf32>
  }
  return
}

// -----

// moe.yield ends a moe.layer only.
func.func @yield_outside_layer(%h: tensor<?x64xf32>) {
  // expected-error @+1 {{'moe.yield' op expects parent op 'moe.layer'}}
  moe.yield %h : tensor<?x64xf32>
}

//===----------------------------------------------------------------------===//
// moe.step_logits

// The row logits are [n, V] with a static vocab, one row per position.
func.func @step_logits_rank(%l: tensor<512xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{logits must have rank 2, got 'tensor<512xf32>'}}
  moe.step_logits %l, %p : tensor<512xf32>, tensor<?xi64>
  return
}

// -----

func.func @step_logits_vocab(%l: tensor<?x?xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{logits dim 1 must be static, got 'tensor<?x?xf32>'}}
  moe.step_logits %l, %p : tensor<?x?xf32>, tensor<?xi64>
  return
}

// -----

func.func @step_logits_rows(%l: tensor<4x512xf32>, %p: tensor<3xi64>) {
  // expected-error @+1 {{positions dim 0 (3) must equal logits dim 0 (4)}}
  moe.step_logits %l, %p : tensor<4x512xf32>, tensor<3xi64>
  return
}

// -----

// moe.step_head_rows

// The positions and the rows are vectors.
func.func @step_head_rows_rank(%p: tensor<?x2xi64>) {
  // expected-error @+1 {{positions must have rank 1, got 'tensor<?x2xi64>'}}
  %r = moe.step_head_rows %p : tensor<?x2xi64> -> tensor<?xi64>
  return
}

// -----

func.func @step_head_rows_result(%p: tensor<?xi64>) {
  // expected-error @+1 {{rows must have rank 1, got 'tensor<?x1xi64>'}}
  %r = moe.step_head_rows %p : tensor<?xi64> -> tensor<?x1xi64>
  return
}

// -----

// moe.take_rows

// One result row per index.
func.func @take_rows_count(%x: tensor<?x8xf32>, %r: tensor<3xi64>) {
  // expected-error @+1 {{result dim 0 (4) must equal rows dim 0 (3)}}
  %y = moe.take_rows %x, %r : tensor<?x8xf32>, tensor<3xi64> -> tensor<4x8xf32>
  return
}

// -----

// The rows keep the input's row shape and element type.
func.func @take_rows_shape(%x: tensor<?x8xf32>, %r: tensor<?xi64>) {
  // expected-error @+1 {{result 'tensor<?x4xf32>' must be rows of input 'tensor<?x8xf32>'}}
  %y = moe.take_rows %x, %r : tensor<?x8xf32>, tensor<?xi64> -> tensor<?x4xf32>
  return
}

// -----

func.func @take_rows_index(%x: tensor<?x8xf32>, %r: tensor<?x1xi64>) {
  // expected-error @+1 {{rows must have rank 1, got 'tensor<?x1xi64>'}}
  %y = moe.take_rows %x, %r : tensor<?x8xf32>, tensor<?x1xi64> -> tensor<?x8xf32>
  return
}

// -----

// moe.logits
//===----------------------------------------------------------------------===//

// -----

// The logits are [V].
func.func @logits_rank(%l: tensor<1x512xf32>) {
  // expected-error @+1 {{logits must have rank 1, got 'tensor<1x512xf32>'}}
  moe.logits %l : tensor<1x512xf32>
  return
}

// -----

// The validity flag is an i1 (type constraint).
func.func @logits_valid_type(%l: tensor<512xf32>, %v: i32) {
  // expected-note @-1 {{prior use here}}
  // expected-error @+1 {{use of value '%v' expects different type than prior uses: 'i1' vs 'i32'}}
  moe.logits %l if %v : tensor<512xf32>
  return
}

// -----

// A NaN epsilon is not positive.
func.func @rms_norm_nan_eps(%x: tensor<?x64xf32>, %w: tensor<64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{epsilon must be positive}}
  %y = moe.rms_norm %x, %w {epsilon = 0x7FC00000 : f32} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// The attention scale must be positive.
func.func @attention_bad_scale(%q: tensor<?x8x16xf32>, %k: tensor<?x4x16xf32>, %p: tensor<?xi64>) -> tensor<?x8x16xf32> {
  // expected-error @+1 {{scale must be positive, got 0}}
  %o = moe.attention %q, %k, %k, %p, %p {scale = 0.0 : f32} : tensor<?x8x16xf32>, tensor<?x4x16xf32>, tensor<?x4x16xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x16xf32>
  return %o : tensor<?x8x16xf32>
}

// -----

// The LM head's logits have a static vocab.
func.func @lm_head_dynamic_vocab(%x: tensor<?x64xf32>, %w: tensor<512x64xf32>, %p: tensor<?xi64>, %l: index) -> tensor<?xf32> {
  // expected-error @+1 {{result dim 0 must be static}}
  %y = moe.lm_head %x, %w, %p, %l : tensor<?x64xf32>, tensor<512x64xf32>, tensor<?xi64> -> tensor<?xf32>
  return %y : tensor<?xf32>
}

// -----

// A rank-0 input is rejected before its dims are compared.
func.func @lm_head_rank0(%x: tensor<f32>, %w: tensor<512x64xf32>, %p: tensor<?xi64>, %l: index) -> tensor<512xf32> {
  // expected-error @+1 {{input must have rank 2}}
  %y = moe.lm_head %x, %w, %p, %l : tensor<f32>, tensor<512x64xf32>, tensor<?xi64> -> tensor<512xf32>
  return %y : tensor<512xf32>
}

// -----

// A linear layer's output features are static.
func.func @linear_dynamic_out(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>) -> tensor<?x?xf32> {
  // expected-error @+1 {{result dim 1 must be static}}
  %y = moe.linear %x, %w : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x?xf32>
  return %y : tensor<?x?xf32>
}

//===----------------------------------------------------------------------===//
// moe.kv_history
//===----------------------------------------------------------------------===//

// -----

// The step's K/V have the history's KV heads and head dim.
func.func @kv_history_step_heads(%k: tensor<1x2x8xf32>, %p: tensor<1xi64>) {
  // expected-error @+1 {{step key 'tensor<1x2x8xf32>' must have the key's head and element dims, 'tensor<?x4x8xf32>'}}
  %hk, %hv, %hp = moe.kv_history %k, %k, %p {layer = 0 : i64} : tensor<1x2x8xf32>, tensor<1x2x8xf32>, tensor<1xi64> -> tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>
  return
}

// -----

// One position per step row.
func.func @kv_history_step_positions(%k: tensor<1x4x8xf32>, %p: tensor<2xi64>) {
  // expected-error @+1 {{step_positions dim 0}}
  %hk, %hv, %hp = moe.kv_history %k, %k, %p {layer = 0 : i64} : tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<2xi64> -> tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>
  return
}

// -----

// K and V of one type.
func.func @kv_history_value_type(%k: tensor<1x4x8xf32>, %p: tensor<1xi64>) {
  // expected-error @+1 {{key type 'tensor<?x4x8xf32>' and value type 'tensor<?x4x9xf32>' must be equal}}
  %hk, %hv, %hp = moe.kv_history %k, %k, %p {layer = 0 : i64} : tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<1xi64> -> tensor<?x4x8xf32>, tensor<?x4x9xf32>, tensor<?xi64>
  return
}

//===----------------------------------------------------------------------===//
// moe.router: sigmoid scoring (DeepSeek-V3)
//===----------------------------------------------------------------------===//

// -----

// A choice bias needs sigmoid scores.
func.func @router_bias_softmax(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{a bias (e_score_correction_bias) needs sigmoid scoring}}
  %w, %i = moe.router %x, %g bias %b {top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32>, tensor<32xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
  return
}

// -----

// One bias per expert.
func.func @router_bias_size(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{bias dim 0 (16) must equal gate dim 0 (32)}}
  %w, %i = moe.router %x, %g bias %b {sigmoid, top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32>, tensor<16xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
  return
}

// -----

// Groups need sigmoid scores.
func.func @router_groups_softmax(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>) {
  // expected-error @+1 {{n_group, topk_group and scaling need sigmoid scoring}}
  %w, %i = moe.router %x, %g {n_group = 4 : i64, top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
  return
}

// -----

// The groups divide the experts.
func.func @router_groups_divide(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>) {
  // expected-error @+1 {{n_group (5) must divide the number of experts (32)}}
  %w, %i = moe.router %x, %g {n_group = 5 : i64, sigmoid, top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
  return
}

// -----

// A group scores its top two experts.
func.func @router_groups_of_one(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>) {
  // expected-error @+1 {{each of the n_group (32) groups needs at least 2 experts (a group scores its top two), got 1}}
  %w, %i = moe.router %x, %g {n_group = 32 : i64, sigmoid, top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
  return
}

// -----

// No more groups kept than there are.
func.func @router_keep(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>) {
  // expected-error @+1 {{topk_group (8) must not exceed n_group (4)}}
  %w, %i = moe.router %x, %g {n_group = 4 : i64, sigmoid, top_k = 2 : i64, topk_group = 8 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
  return
}

// -----

// The kept groups hold the top k.
func.func @router_keep_k(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>) {
  // expected-error @+1 {{top_k (9) exceeds the experts of the topk_group (1) kept groups (8)}}
  %w, %i = moe.router %x, %g {n_group = 4 : i64, sigmoid, top_k = 9 : i64, topk_group = 1 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x9xf32>, tensor<?x9xi64>
  return
}

// -----

// A positive scaling.
func.func @router_scaling(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>) {
  // expected-error @+1 {{scaling must be positive and finite}}
  %w, %i = moe.router %x, %g {scaling = -1.0 : f32, sigmoid, top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
  return
}

//===----------------------------------------------------------------------===//
// moe.head_linear
//===----------------------------------------------------------------------===//

// -----

// One weight slice per head.
func.func @head_linear_heads(%x: tensor<?x8x16xf32>, %w: tensor<4x32x16xf32>) {
  // expected-error @+1 {{weight dim 0 (4) must equal input dim 1 (8)}}
  %0 = moe.head_linear %x, %w : tensor<?x8x16xf32>, tensor<4x32x16xf32> -> tensor<?x8x32xf32>
  return
}

// -----

// x W^T: the input's last dim is the weight's last.
func.func @head_linear_in(%x: tensor<?x8x16xf32>, %w: tensor<8x16x32xf32>) {
  // expected-error @+1 {{weight dim 2 (32) must equal input dim 2 (16)}}
  %0 = moe.head_linear %x, %w : tensor<?x8x16xf32>, tensor<8x16x32xf32> -> tensor<?x8x16xf32>
  return
}

// -----

// Transposed, the result's last dim is the weight's last.
func.func @head_linear_out(%x: tensor<?x8x16xf32>, %w: tensor<8x16x32xf32>) {
  // expected-error @+1 {{result dim 2 (16) must equal weight dim 2 (32)}}
  %0 = moe.head_linear %x, %w {transpose_weight} : tensor<?x8x16xf32>, tensor<8x16x32xf32> -> tensor<?x8x16xf32>
  return
}

//===----------------------------------------------------------------------===//
// moe.rope: YaRN
//===----------------------------------------------------------------------===//

// -----

// YaRN's ramp runs up.
func.func @rope_yarn_ramp(%x: tensor<?x1x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{YaRN needs yarn_high > yarn_low}}
  %0 = moe.rope %x, %p {theta = 1.0e4 : f32, yarn_factor = 40.0 : f32, yarn_high = 1.0 : f32, yarn_low = 2.0 : f32} : tensor<?x1x8xf32>, tensor<?xi64> -> tensor<?x1x8xf32>
  return
}

// -----

// A positive scale of cos and sin.
func.func @rope_attention_factor(%x: tensor<?x1x8xf32>, %p: tensor<?xi64>) {
  // expected-error @+1 {{yarn_factor and attention_factor must be positive and finite}}
  %0 = moe.rope %x, %p {attention_factor = 0.0 : f32, theta = 1.0e4 : f32} : tensor<?x1x8xf32>, tensor<?xi64> -> tensor<?x1x8xf32>
  return
}
