// RUN: meshfold-opt %s -split-input-file --mf-narrow-last-layer=remarks=true -verify-diagnostics | FileCheck %s

// -mf-narrow-last-layer: a layer whose result only `moe.take_position` of
// one position reads computes its query, attention, output projection and
// MoE for that row alone; its K/V path stays whole. Inputs: one partitioned
// layer (d 8, 2 local query heads and 1 KV head of 4, 4 experts top-1).

// SP + CP (TP and CP > 1): the SP row of the residual and the CP row of the
// all-gathered input are taken (zero or one row each), the query, RoPE and
// the ring's partial attentions run on that row against the whole K/V, the
// reduce-scatter becomes an all-reduce of the row that its SP holder keeps,
// and router, dispatch, experts and combine see that row only.
// CHECK-LABEL: func.func @sp_cp(
// CHECK-SAME:      %[[H:[^:]+]]: tensor<?x8xf32>, %[[SP:[^:]+]]: tensor<?xi64>, %[[CP:[^:]+]]: tensor<?xi64>, %[[LAST:[^:]+]]: index)
// CHECK:         %[[OUT:.+]]:2 = moe.layer 3(%[[H]], %[[SP]], %[[CP]], %[[LAST]]) {mf.narrowed} : (tensor<?x8xf32>, tensor<?xi64>, tensor<?xi64>, index) -> (tensor<?x8xf32>, tensor<?xi64>) {
// CHECK-NEXT:    ^bb0(%[[BH:[^:]+]]: tensor<?x8xf32>, %[[BSP:[^:]+]]: tensor<?xi64>, %[[BCP:[^:]+]]: tensor<?xi64>, %[[BLAST:[^:]+]]: index):
// The K/V path, whole.
// CHECK:           %[[X:.+]] = mf.all_gather
// CHECK:           %[[K:.+]] = moe.linear %[[X]], %{{.+}} : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
// CHECK:           %[[KR:.+]] = moe.rope %{{.+}}, %[[BCP]]
// CHECK:           moe.kv_cache %[[KR]], %{{.+}}, %[[BCP]]
// CHECK:           %[[RING:.+]]:3 = mf.ring_step %[[KR]]
// The surviving SP row and its positions.
// CHECK:           %[[HROW:.+]], %[[HFOUND:.+]] = moe.take_position %[[BH]], %[[BSP]], %[[BLAST]]
// CHECK:           %[[M:.+]] = arith.select
// CHECK:           %[[HN:.+]] = tensor.extract_slice %[[HROW]][0, 0] [%[[M]], 8] [1, 1] : tensor<1x8xf32> to tensor<?x8xf32>
// CHECK:           %[[SPN:.+]] = tensor.extract_slice %{{.+}}[0] [%[[M]]] [1] : tensor<1xi64> to tensor<?xi64>
// The surviving CP row: the query.
// CHECK:           %[[XROW:.+]], %{{.+}} = moe.take_position %[[X]], %[[BCP]], %[[BLAST]]
// CHECK:           %[[N1:.+]] = arith.select
// CHECK:           %[[XN:.+]] = tensor.extract_slice %[[XROW]][0, 0] [%[[N1]], 8] [1, 1]
// CHECK:           %[[Q:.+]] = moe.linear %[[XN]], %{{.+}} : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
// CHECK:           %[[CPN:.+]] = tensor.extract_slice %{{.+}}[0] [%[[N1]]] [1] : tensor<1xi64> to tensor<?xi64>
// CHECK:           %[[QR:.+]] = moe.rope %{{.+}}, %[[CPN]]
// The first block of keys keeps its own positions.
// CHECK:           moe.attention_partial %[[QR]], %[[KR]], %{{.+}}, %[[CPN]], %[[BCP]]
// CHECK:           moe.attention_partial %[[QR]], %[[RING]]#0, %[[RING]]#1, %[[CPN]], %[[RING]]#2
// CHECK:           moe.attention_merge
// CHECK:           %[[O:.+]] = moe.linear
// CHECK-NEXT:      mf.layer_rows %[[SPN]], %[[CPN]] : tensor<?xi64>, tensor<?xi64>
// CHECK-NEXT:      %[[SUM:.+]] = mf.all_reduce %[[O]] on "attention" ["tp"] : tensor<?x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:      %[[MINE:.+]] = tensor.extract_slice %[[SUM]][0, 0] [%[[M]], 8] [1, 1] : tensor<?x8xf32> to tensor<?x8xf32>
// CHECK-NEXT:      %[[R1:.+]] = arith.addf %[[HN]], %[[MINE]] : tensor<?x8xf32>
// CHECK-NEXT:      %[[N2:.+]] = moe.rms_norm %[[R1]]
// CHECK-NEXT:      %{{.+}}, %[[IDX:.+]] = moe.router %[[N2]]
// CHECK-NEXT:      %[[ROWS:.+]], %[[LOCAL:.+]], %[[ROUTE:.+]] = mf.dispatch %[[N2]], %[[IDX]]
// CHECK-NEXT:      %[[Y:.+]] = moe.expert_ffn %[[ROWS]], %[[LOCAL]]
// CHECK-NEXT:      %[[C0:.+]] = arith.constant 0 : index
// CHECK-NEXT:      %[[T:.+]] = tensor.dim %[[N2]], %[[C0]] : tensor<?x8xf32>
// CHECK-NEXT:      %[[COMB:.+]] = mf.combine %[[ROUTE]], %[[Y]] tokens %[[T]]
// CHECK-NEXT:      %[[R2:.+]] = arith.addf %[[R1]], %[[COMB]] : tensor<?x8xf32>
// CHECK-NEXT:      moe.yield %[[R2]], %[[SPN]] : tensor<?x8xf32>, tensor<?xi64>
// CHECK-NEXT:    }
// The head reads the surviving rows at their positions.
// CHECK-NEXT:    moe.take_position %[[OUT]]#0, %[[OUT]]#1, %[[LAST]]
// No whole-row query, reduce-scatter or second dispatch is left.
// CHECK-NOT:     mf.reduce_scatter
func.func @sp_cp(%h: tensor<?x8xf32>, %sp: tensor<?xi64>, %cp: tensor<?xi64>, %last: index) -> (tensor<1x8xf32>, tensor<1xf32>) {
  %out = moe.layer 3(%h, %sp, %cp) : (tensor<?x8xf32>, tensor<?xi64>, tensor<?xi64>) -> tensor<?x8xf32> {
  ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>, %c: tensor<?xi64>):
    %c0 = arith.constant 0 : index
    %n1w = moe.param "model.layers.3.input_layernorm.weight" : tensor<8xf32>
    %n1 = moe.rms_norm %a, %n1w {epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %x = mf.all_gather %n1 on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
    %rows = tensor.dim %x, %c0 : tensor<?x8xf32>
    %wq = moe.param "model.layers.3.self_attn.q_proj.weight" : tensor<8x8xf32>
    %q = moe.linear %x, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    %q3 = tensor.expand_shape %q [[0], [1, 2]] output_shape [%rows, 2, 4] : tensor<?x8xf32> into tensor<?x2x4xf32>
    %wk = moe.param "model.layers.3.self_attn.k_proj.weight" : tensor<4x8xf32>
    %k = moe.linear %x, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %k3 = tensor.expand_shape %k [[0], [1, 2]] output_shape [%rows, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
    %wv = moe.param "model.layers.3.self_attn.v_proj.weight" : tensor<4x8xf32>
    %v = moe.linear %x, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %v3 = tensor.expand_shape %v [[0], [1, 2]] output_shape [%rows, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
    %qr = moe.rope %q3, %c {theta = 1.0e4 : f32} : tensor<?x2x4xf32>, tensor<?xi64> -> tensor<?x2x4xf32>
    %kr = moe.rope %k3, %c {theta = 1.0e4 : f32} : tensor<?x1x4xf32>, tensor<?xi64> -> tensor<?x1x4xf32>
    moe.kv_cache %kr, %v3, %c {layer = 3 : i64} : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>
    %o0, %l0 = moe.attention_partial %qr, %kr, %v3, %c, %c {scale = 0.5 : f32} : tensor<?x2x4xf32>, tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x4xf32>, tensor<?x2xf32>
    %ring:3 = mf.ring_step %kr, %v3, %c on "attention" ["cp"] : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64> -> tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>
    %o1, %l1 = moe.attention_partial %qr, %ring#0, %ring#1, %c, %ring#2 {scale = 0.5 : f32} : tensor<?x2x4xf32>, tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x4xf32>, tensor<?x2xf32>
    %o, %l = moe.attention_merge %o0, %l0, %o1, %l1 : tensor<?x2x4xf32>, tensor<?x2xf32> -> tensor<?x2x4xf32>, tensor<?x2xf32>
    %o2 = tensor.collapse_shape %o [[0], [1, 2]] : tensor<?x2x4xf32> into tensor<?x8xf32>
    %wo = moe.param "model.layers.3.self_attn.o_proj.weight" : tensor<8x8xf32>
    %proj = moe.linear %o2, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    %rs = mf.reduce_scatter %proj on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
    %r1 = arith.addf %a, %rs : tensor<?x8xf32>
    %n2w = moe.param "model.layers.3.post_attention_layernorm.weight" : tensor<8xf32>
    %n2 = moe.rms_norm %r1, %n2w {epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %gw = moe.param "model.layers.3.block_sparse_moe.gate.weight" : tensor<4x8xf32>
    %wts, %idx = moe.router %n2, %gw {top_k = 1 : i64} : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x1xf32>, tensor<?x1xi64>
    %er, %el, %route = mf.dispatch %n2, %idx, %wts on "experts" ["ep"] experts 4 flat : tensor<?x8xf32>, tensor<?x1xi64>, tensor<?x1xf32> -> tensor<?x8xf32>, tensor<?xi64>, !mf.dispatch
    %w1 = moe.param "model.layers.3.block_sparse_moe.experts.{e}.w1.weight" : tensor<1x16x8xf32>
    %w2 = moe.param "model.layers.3.block_sparse_moe.experts.{e}.w2.weight" : tensor<1x8x16xf32>
    %w3 = moe.param "model.layers.3.block_sparse_moe.experts.{e}.w3.weight" : tensor<1x16x8xf32>
    %y = moe.expert_ffn %er, %el, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?xi64>, tensor<1x16x8xf32>, tensor<1x8x16xf32>, tensor<1x16x8xf32> -> tensor<?x8xf32>
    %t = tensor.dim %n2, %c0 : tensor<?x8xf32>
    %comb = mf.combine %route, %y tokens %t : !mf.dispatch, tensor<?x8xf32> -> tensor<?x8xf32>
    %r2 = arith.addf %r1, %comb : tensor<?x8xf32>
    moe.yield %r2 : tensor<?x8xf32>
  }
  %row, %found = moe.take_position %out, %sp, %last : tensor<?x8xf32>, tensor<?xi64> -> tensor<1x8xf32>, tensor<1xf32>
  return %row, %found : tensor<1x8xf32>, tensor<1xf32>
}

// -----

// No TP (one row layout), no CP (plain attention): one take of the residual
// row serves the query and the MoE; the position computed after the layer is
// moved ahead of it.
// CHECK-LABEL: func.func @one_layout(
// CHECK-SAME:      %[[H:[^:]+]]: tensor<?x8xf32>, %[[POS:[^:]+]]: tensor<?xi64>)
// CHECK:         %[[LAST:.+]] = arith.subi
// CHECK-NEXT:    %[[OUT:.+]]:2 = moe.layer 0(%[[H]], %[[POS]], %[[LAST]]) {mf.narrowed}
// CHECK-NEXT:    ^bb0(%[[BH:[^:]+]]: tensor<?x8xf32>, %[[BP:[^:]+]]: tensor<?xi64>, %[[BLAST:[^:]+]]: index):
// CHECK:           %[[K:.+]] = moe.linear %[[X:.+]], %{{.+}} : tensor<?x8xf32>, tensor<4x8xf32>
// CHECK:           moe.kv_cache
// CHECK:           %[[ROW:.+]], %{{.+}} = moe.take_position %[[BH]], %[[BP]], %[[BLAST]]
// CHECK-NOT:       moe.take_position
// CHECK:           %[[Q:.+]] = moe.linear %{{.+}}, %{{.+}} : tensor<?x8xf32>, tensor<8x8xf32>
// CHECK:           moe.attention %{{.+}}, %{{.+}}, %{{.+}}, %[[PN:[^,]+]], %[[BP]]
// CHECK:           mf.layer_rows %[[PN]], %[[PN]]
// CHECK-NEXT:      %{{.+}}, %{{.+}}, %{{.+}} = mf.dispatch
// CHECK:           moe.yield %{{.+}}, %[[PN]]
// CHECK:         moe.take_position %[[OUT]]#0, %[[OUT]]#1, %[[LAST]]
func.func @one_layout(%h: tensor<?x8xf32>, %pos: tensor<?xi64>) -> (tensor<1x8xf32>, tensor<1xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %T = tensor.dim %pos, %c0 : tensor<?xi64>
  %out = moe.layer 0(%h, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
  ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
    %z = arith.constant 0 : index
    %n1w = moe.param "model.layers.0.input_layernorm.weight" : tensor<8xf32>
    %x = moe.rms_norm %a, %n1w {epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %rows = tensor.dim %x, %z : tensor<?x8xf32>
    %wq = moe.param "model.layers.0.self_attn.q_proj.weight" : tensor<8x8xf32>
    %q = moe.linear %x, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    %q3 = tensor.expand_shape %q [[0], [1, 2]] output_shape [%rows, 2, 4] : tensor<?x8xf32> into tensor<?x2x4xf32>
    %wk = moe.param "model.layers.0.self_attn.k_proj.weight" : tensor<4x8xf32>
    %k = moe.linear %x, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %k3 = tensor.expand_shape %k [[0], [1, 2]] output_shape [%rows, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
    %wv = moe.param "model.layers.0.self_attn.v_proj.weight" : tensor<4x8xf32>
    %v = moe.linear %x, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %v3 = tensor.expand_shape %v [[0], [1, 2]] output_shape [%rows, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
    %qr = moe.rope %q3, %p {theta = 1.0e4 : f32} : tensor<?x2x4xf32>, tensor<?xi64> -> tensor<?x2x4xf32>
    %kr = moe.rope %k3, %p {theta = 1.0e4 : f32} : tensor<?x1x4xf32>, tensor<?xi64> -> tensor<?x1x4xf32>
    moe.kv_cache %kr, %v3, %p {layer = 0 : i64} : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>
    %o = moe.attention %qr, %kr, %v3, %p, %p {scale = 0.5 : f32} : tensor<?x2x4xf32>, tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x4xf32>
    %o2 = tensor.collapse_shape %o [[0], [1, 2]] : tensor<?x2x4xf32> into tensor<?x8xf32>
    %wo = moe.param "model.layers.0.self_attn.o_proj.weight" : tensor<8x8xf32>
    %proj = moe.linear %o2, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    %r1 = arith.addf %a, %proj : tensor<?x8xf32>
    %n2w = moe.param "model.layers.0.post_attention_layernorm.weight" : tensor<8xf32>
    %n2 = moe.rms_norm %r1, %n2w {epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %gw = moe.param "model.layers.0.block_sparse_moe.gate.weight" : tensor<4x8xf32>
    %wts, %idx = moe.router %n2, %gw {top_k = 1 : i64} : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x1xf32>, tensor<?x1xi64>
    %er, %el, %route = mf.dispatch %n2, %idx, %wts on "experts" ["ep"] experts 4 flat : tensor<?x8xf32>, tensor<?x1xi64>, tensor<?x1xf32> -> tensor<?x8xf32>, tensor<?xi64>, !mf.dispatch
    %w1 = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w1.weight" : tensor<1x16x8xf32>
    %w2 = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w2.weight" : tensor<1x8x16xf32>
    %w3 = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w3.weight" : tensor<1x16x8xf32>
    %y = moe.expert_ffn %er, %el, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?xi64>, tensor<1x16x8xf32>, tensor<1x8x16xf32>, tensor<1x16x8xf32> -> tensor<?x8xf32>
    %t = tensor.dim %n2, %z : tensor<?x8xf32>
    %comb = mf.combine %route, %y tokens %t : !mf.dispatch, tensor<?x8xf32> -> tensor<?x8xf32>
    %r2 = arith.addf %r1, %comb : tensor<?x8xf32>
    moe.yield %r2 : tensor<?x8xf32>
  }
  %last = arith.subi %T, %c1 : index
  %row, %found = moe.take_position %out, %pos, %last : tensor<?x8xf32>, tensor<?xi64> -> tensor<1x8xf32>, tensor<1xf32>
  return %row, %found : tensor<1x8xf32>, tensor<1xf32>
}

// -----

// A shared expert (moe.mlp) acts on each row alone: it runs on the surviving
// rows, those the dispatch sends.
// CHECK-LABEL: func.func @shared_expert(
// CHECK:         moe.layer 0(%{{.+}}) {mf.narrowed}
// CHECK:           %{{.+}}, %{{.+}}, %{{.+}} = mf.dispatch %[[N:[^,]+]],
// CHECK:           %[[C:.+]] = mf.combine
// CHECK:           %[[S:.+]] = moe.mlp %[[N]], {{.*}} gate
// CHECK:           arith.addf %[[C]], %[[S]]
func.func @shared_expert(%h: tensor<?x8xf32>, %pos: tensor<?xi64>) -> (tensor<1x8xf32>, tensor<1xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %T = tensor.dim %pos, %c0 : tensor<?xi64>
  %out = moe.layer 0(%h, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
  ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
    %z = arith.constant 0 : index
    %n1w = moe.param "model.layers.0.input_layernorm.weight" : tensor<8xf32>
    %x = moe.rms_norm %a, %n1w {epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %rows = tensor.dim %x, %z : tensor<?x8xf32>
    %wq = moe.param "model.layers.0.self_attn.q_proj.weight" : tensor<8x8xf32>
    %q = moe.linear %x, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    %q3 = tensor.expand_shape %q [[0], [1, 2]] output_shape [%rows, 2, 4] : tensor<?x8xf32> into tensor<?x2x4xf32>
    %wk = moe.param "model.layers.0.self_attn.k_proj.weight" : tensor<4x8xf32>
    %k = moe.linear %x, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %k3 = tensor.expand_shape %k [[0], [1, 2]] output_shape [%rows, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
    %wv = moe.param "model.layers.0.self_attn.v_proj.weight" : tensor<4x8xf32>
    %v = moe.linear %x, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %v3 = tensor.expand_shape %v [[0], [1, 2]] output_shape [%rows, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
    %qr = moe.rope %q3, %p {theta = 1.0e4 : f32} : tensor<?x2x4xf32>, tensor<?xi64> -> tensor<?x2x4xf32>
    %kr = moe.rope %k3, %p {theta = 1.0e4 : f32} : tensor<?x1x4xf32>, tensor<?xi64> -> tensor<?x1x4xf32>
    moe.kv_cache %kr, %v3, %p {layer = 0 : i64} : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>
    %o = moe.attention %qr, %kr, %v3, %p, %p {scale = 0.5 : f32} : tensor<?x2x4xf32>, tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x4xf32>
    %o2 = tensor.collapse_shape %o [[0], [1, 2]] : tensor<?x2x4xf32> into tensor<?x8xf32>
    %wo = moe.param "model.layers.0.self_attn.o_proj.weight" : tensor<8x8xf32>
    %proj = moe.linear %o2, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    %r1 = arith.addf %a, %proj : tensor<?x8xf32>
    %n2w = moe.param "model.layers.0.post_attention_layernorm.weight" : tensor<8xf32>
    %n2 = moe.rms_norm %r1, %n2w {epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %gw = moe.param "model.layers.0.block_sparse_moe.gate.weight" : tensor<4x8xf32>
    %wts, %idx = moe.router %n2, %gw {top_k = 1 : i64} : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x1xf32>, tensor<?x1xi64>
    %er, %el, %route = mf.dispatch %n2, %idx, %wts on "experts" ["ep"] experts 4 flat : tensor<?x8xf32>, tensor<?x1xi64>, tensor<?x1xf32> -> tensor<?x8xf32>, tensor<?xi64>, !mf.dispatch
    %w1 = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w1.weight" : tensor<1x16x8xf32>
    %w2 = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w2.weight" : tensor<1x8x16xf32>
    %w3 = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w3.weight" : tensor<1x16x8xf32>
    %y = moe.expert_ffn %er, %el, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?xi64>, tensor<1x16x8xf32>, tensor<1x8x16xf32>, tensor<1x16x8xf32> -> tensor<?x8xf32>
    %t = tensor.dim %n2, %z : tensor<?x8xf32>
    %comb = mf.combine %route, %y tokens %t : !mf.dispatch, tensor<?x8xf32> -> tensor<?x8xf32>
    %s1 = moe.param "model.layers.0.mlp.shared_expert.gate_proj.weight" : tensor<16x8xf32>
    %s2 = moe.param "model.layers.0.mlp.shared_expert.down_proj.weight" : tensor<8x16xf32>
    %s3 = moe.param "model.layers.0.mlp.shared_expert.up_proj.weight" : tensor<16x8xf32>
    %sg = moe.param "model.layers.0.mlp.shared_expert_gate.weight" : tensor<1x8xf32>
    %sh = moe.mlp %n2, %s1, %s2, %s3 gate %sg : tensor<?x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>, tensor<1x8xf32> -> tensor<?x8xf32>
    %ys = arith.addf %comb, %sh : tensor<?x8xf32>
    %r2 = arith.addf %r1, %ys : tensor<?x8xf32>
    moe.yield %r2 : tensor<?x8xf32>
  }
  %last = arith.subi %T, %c1 : index
  %row, %found = moe.take_position %out, %pos, %last : tensor<?x8xf32>, tensor<?xi64> -> tensor<1x8xf32>, tensor<1xf32>
  return %row, %found : tensor<1x8xf32>, tensor<1xf32>
}

// -----

// A norm over a TP-split projection (OLMoE's q_norm): the surviving row's
// sum of squares is all-reduced over the TP group and scales its row; the
// key's norm stays whole (the cache and the attention need every row).
// CHECK-LABEL: func.func @projection_norm(
// CHECK:         moe.layer 0(%{{.+}}) {mf.narrowed}
// CHECK:           %[[K:.+]] = moe.linear %{{.+}}, %[[WK:.+]] : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
// CHECK:           %[[KS:.+]] = moe.sum_squares %[[K]] : tensor<?x4xf32> -> tensor<?xf32>
// CHECK:           %[[KR:.+]] = mf.all_reduce %[[KS]] on "attention" ["tp"]
// CHECK:           moe.rms_scale %[[K]], %[[KR]]
// CHECK:           moe.take_position
// CHECK:           %[[Q:.+]] = moe.linear %{{.+}}, %{{.+}} : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:      %[[QS:.+]] = moe.sum_squares %[[Q]] : tensor<?x8xf32> -> tensor<?xf32>
// CHECK:           %[[QR:.+]] = mf.all_reduce %[[QS]] on "attention" ["tp"] : tensor<?xf32> -> tensor<?xf32>
// CHECK-NEXT:      moe.rms_scale %[[Q]], %[[QR]], %{{.+}} {count = 16 : i64
// CHECK:           moe.attention %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {scale
// CHECK-SAME:        tensor<?x2x4xf32>, tensor<?x1x4xf32>
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
func.func @projection_norm(%h: tensor<?x8xf32>, %pos: tensor<?xi64>) -> (tensor<1x8xf32>, tensor<1xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %T = tensor.dim %pos, %c0 : tensor<?xi64>
  %out = moe.layer 0(%h, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
  ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
    %z = arith.constant 0 : index
    %n1w = moe.param "model.layers.0.input_layernorm.weight" : tensor<8xf32>
    %x = moe.rms_norm %a, %n1w {epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %rows = tensor.dim %x, %z : tensor<?x8xf32>
    %wq = moe.param "model.layers.0.self_attn.q_proj.weight" : tensor<8x8xf32>
    %q = moe.linear %x, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    %qnw = moe.param "model.layers.0.self_attn.q_norm.weight" : tensor<8xf32>
    %qs = moe.sum_squares %q : tensor<?x8xf32> -> tensor<?xf32>
    %qsum = mf.all_reduce %qs on "attention" ["tp"] : tensor<?xf32> -> tensor<?xf32>
    %qn = moe.rms_scale %q, %qsum, %qnw {count = 16 : i64, epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<?xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %q3 = tensor.expand_shape %qn [[0], [1, 2]] output_shape [%rows, 2, 4] : tensor<?x8xf32> into tensor<?x2x4xf32>
    %wk = moe.param "model.layers.0.self_attn.k_proj.weight" : tensor<4x8xf32>
    %k = moe.linear %x, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %knw = moe.param "model.layers.0.self_attn.k_norm.weight" : tensor<4xf32>
    %ks = moe.sum_squares %k : tensor<?x4xf32> -> tensor<?xf32>
    %ksum = mf.all_reduce %ks on "attention" ["tp"] : tensor<?xf32> -> tensor<?xf32>
    %kn = moe.rms_scale %k, %ksum, %knw {count = 8 : i64, epsilon = 1.0e-5 : f32} : tensor<?x4xf32>, tensor<?xf32>, tensor<4xf32> -> tensor<?x4xf32>
    %k3 = tensor.expand_shape %kn [[0], [1, 2]] output_shape [%rows, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
    %wv = moe.param "model.layers.0.self_attn.v_proj.weight" : tensor<4x8xf32>
    %v = moe.linear %x, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %v3 = tensor.expand_shape %v [[0], [1, 2]] output_shape [%rows, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
    %qr = moe.rope %q3, %p {theta = 1.0e4 : f32} : tensor<?x2x4xf32>, tensor<?xi64> -> tensor<?x2x4xf32>
    %kr = moe.rope %k3, %p {theta = 1.0e4 : f32} : tensor<?x1x4xf32>, tensor<?xi64> -> tensor<?x1x4xf32>
    moe.kv_cache %kr, %v3, %p {layer = 0 : i64} : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>
    %o = moe.attention %qr, %kr, %v3, %p, %p {scale = 0.5 : f32} : tensor<?x2x4xf32>, tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x4xf32>
    %o2 = tensor.collapse_shape %o [[0], [1, 2]] : tensor<?x2x4xf32> into tensor<?x8xf32>
    %wo = moe.param "model.layers.0.self_attn.o_proj.weight" : tensor<8x8xf32>
    %proj = moe.linear %o2, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    %r1 = arith.addf %a, %proj : tensor<?x8xf32>
    moe.yield %r1 : tensor<?x8xf32>
  }
  %last = arith.subi %T, %c1 : index
  %row, %found = moe.take_position %out, %pos, %last : tensor<?x8xf32>, tensor<?xi64> -> tensor<1x8xf32>, tensor<1xf32>
  return %row, %found : tensor<1x8xf32>, tensor<1xf32>
}
}

// -----

// Every row's result is used (prompt logprobs' LM head over all rows): the
// layer stays whole, with no remark (it is not a candidate).
// CHECK-LABEL: func.func @all_rows_used(
// CHECK:         %[[OUT:.+]] = moe.layer 0(%{{.+}}, %{{.+}}) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
// CHECK-NOT:     mf.narrowed
// CHECK:         moe.take_position %[[OUT]]
// CHECK:         moe.linear %[[OUT]]
func.func @all_rows_used(%h: tensor<?x8xf32>, %pos: tensor<?xi64>, %last: index) -> (tensor<1x8xf32>, tensor<?x16xf32>) {
  %out = moe.layer 0(%h, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
  ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
    %w = moe.param "model.layers.0.input_layernorm.weight" : tensor<8xf32>
    %x = moe.rms_norm %a, %w {epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    moe.yield %x : tensor<?x8xf32>
  }
  %row, %found = moe.take_position %out, %pos, %last : tensor<?x8xf32>, tensor<?xi64> -> tensor<1x8xf32>, tensor<1xf32>
  %hw = moe.param "lm_head.weight" : tensor<16x8xf32>
  %all = moe.linear %out, %hw : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<?x16xf32>
  return %row, %all : tensor<1x8xf32>, tensor<?x16xf32>
}

// -----

// A candidate with an op the narrowing does not know (here an embedding
// lookup) stays whole, and says why.
func.func @unknown_op(%h: tensor<?x8xf32>, %pos: tensor<?xi64>, %last: index) -> (tensor<1x8xf32>, tensor<1xf32>) {
  // expected-remark @+1 {{layer 0 kept whole: 'moe.embed' is not an op the narrowing knows}}
  %out = moe.layer 0(%h, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
  ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
    %table = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %e = moe.embed %table, %p : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    %x = arith.addf %a, %e : tensor<?x8xf32>
    moe.yield %x : tensor<?x8xf32>
  }
  %row, %found = moe.take_position %out, %pos, %last : tensor<?x8xf32>, tensor<?xi64> -> tensor<1x8xf32>, tensor<1xf32>
  return %row, %found : tensor<1x8xf32>, tensor<1xf32>
}
