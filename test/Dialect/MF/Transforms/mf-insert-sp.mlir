// RUN: meshfold-opt %s -split-input-file --mf-insert-sp | FileCheck %s

// -mf-insert-sp: sequence parallelism. Outside attention each TP rank keeps
// 1/TP of the CP rank's tokens (mf.slice of the positions, and of the
// embedding's tokens unless they are taken by position); each layer also
// gets the CP rank's positions, an mf.all_gather on tp before QKV rebuilds
// the CP rank's tokens, and the output projection's all-reduce becomes an
// mf.reduce_scatter (or, without TP sharding, its output is sliced). Inputs
// are layers with one attention chain (d 8). Errors are in
// mf-insert-sp-invalid.mlir.

// After -mf-zigzag-cp and -mf-shard-tp (TP=2, CP=2): the zigzag positions
// are sliced, mf.take and every other user outside the layer read the slice,
// the layer gets (residual, SP positions, CP positions) and attention uses
// the CP positions.
// CHECK-LABEL: func.func @after_shard_tp(
// CHECK-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>, %[[TABLE:[^:]+]]: tensor<16x8xf32>)
// CHECK:           %[[ZZ:.+]] = mf.zigzag_positions
// CHECK-NEXT:      %[[SP:.+]] = mf.slice %[[ZZ]] on "attention" ["tp"] dim 0 : tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:      %[[MINE:.+]] = mf.take %[[TOK]][%[[SP]]] fill 0
// CHECK-NEXT:      %[[EMB:.+]] = moe.embed %[[TABLE]], %[[MINE]] :
// CHECK-NEXT:      %[[OUT:.+]] = moe.layer 0(%[[EMB]], %[[SP]], %[[ZZ]]) : (tensor<?x8xf32>, tensor<?xi64>, tensor<?xi64>) -> tensor<?x8xf32> {
// CHECK-NEXT:      ^bb0(%[[H:[^:]+]]: tensor<?x8xf32>, %{{[^:]+}}: tensor<?xi64>, %[[CPPOS:[^:]+]]: tensor<?xi64>):
// CHECK-NEXT:        %[[G:.+]] = mf.all_gather %[[H]] on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:        %[[C0:.+]] = arith.constant 0 : index
// CHECK-NEXT:        %[[ROWS:.+]] = tensor.dim %[[G]], %[[C0]] : tensor<?x8xf32>
// CHECK:             %[[QL:.+]] = moe.linear %[[G]], %{{.+}} : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
// CHECK-NEXT:        tensor.expand_shape %[[QL]] {{.+}} output_shape [%[[ROWS]], 2, 2]
// CHECK:             %[[KL:.+]] = moe.linear %[[G]], %{{.+}} -> tensor<?x2xf32>
// CHECK-NEXT:        tensor.expand_shape %[[KL]] {{.+}} output_shape [%[[ROWS]], 1, 2]
// CHECK:             %[[VL:.+]] = moe.linear %[[G]], %{{.+}} -> tensor<?x2xf32>
// CHECK-NEXT:        tensor.expand_shape %[[VL]] {{.+}} output_shape [%[[ROWS]], 1, 2]
// CHECK:             moe.rope %{{.+}}, %[[CPPOS]] {{.+}} -> tensor<?x2x2xf32>
// CHECK-NEXT:        moe.rope %{{.+}}, %[[CPPOS]] {{.+}} -> tensor<?x1x2xf32>
// CHECK-NEXT:        moe.attention %{{.+}}, %{{.+}}, %{{.+}}, %[[CPPOS]], %[[CPPOS]] {
// CHECK:             %[[PART:.+]] = moe.linear %{{.+}}, %{{.+}} : tensor<?x4xf32>, tensor<8x4xf32> -> tensor<?x8xf32>
// CHECK-NEXT:        %[[RS:.+]] = mf.reduce_scatter %[[PART]] on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:        %[[RES:.+]] = arith.addf %[[H]], %[[RS]] : tensor<?x8xf32>
// CHECK-NEXT:        moe.yield %[[RES]] : tensor<?x8xf32>
// CHECK-NEXT:      }
// CHECK-NEXT:      return %[[OUT]], %[[SP]]
// CHECK-NOT:       mf.all_reduce
module attributes {mf.plan = #mf.plan<devices = 8, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 2], experts = [ep = 8 : (tp, cp, dp)]>,
    moe.model_info = {experts = 4 : i64, ffn = 16 : i64, head_dim = 2 : i64, heads = 4 : i64, hidden = 8 : i64, kv_heads = 2 : i64, layers = 1 : i64, top_k = 2 : i64, vocab = 16 : i64}} {
  func.func @after_shard_tp(%tok: tensor<?xi64>, %table: tensor<16x8xf32>) -> (tensor<?x8xf32>, tensor<?xi64>) {
    %c0 = arith.constant 0 : index
    %len = tensor.dim %tok, %c0 : tensor<?xi64>
    %zz = mf.zigzag_positions %len on "attention" "cp" pad_to 8 : tensor<?xi64>
    %mine = mf.take %tok[%zz] fill 0 : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
    %x = moe.embed %table, %mine : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    %h = moe.layer 0(%x, %zz) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a0: tensor<?x8xf32>, %p0: tensor<?xi64>):
      %c0_0 = arith.constant 0 : index
      %t = tensor.dim %a0, %c0_0 : tensor<?x8xf32>
      %wq = moe.param "q.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<4x8xf32>
      %ql = moe.linear %a0, %wq : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
      %wk = moe.param "k.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<2x8xf32>
      %kl = moe.linear %a0, %wk : tensor<?x8xf32>, tensor<2x8xf32> -> tensor<?x2xf32>
      %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 1, 2] : tensor<?x2xf32> into tensor<?x1x2xf32>
      %wv = moe.param "v.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<2x8xf32>
      %vl = moe.linear %a0, %wv : tensor<?x8xf32>, tensor<2x8xf32> -> tensor<?x2xf32>
      %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 1, 2] : tensor<?x2xf32> into tensor<?x1x2xf32>
      %q = moe.rope %qe, %p0 {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
      %k = moe.rope %ke, %p0 {theta = 1.000000e+04 : f32} : tensor<?x1x2xf32>, tensor<?xi64> -> tensor<?x1x2xf32>
      %att = moe.attention %q, %k, %ve, %p0, %p0 {scale = 0.707106769 : f32} : tensor<?x2x2xf32>, tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x2xf32>
      %f = tensor.collapse_shape %att [[0], [1, 2]] : tensor<?x2x2xf32> into tensor<?x4xf32>
      %wo = moe.param "o.weight" {mf.shard = #mf.shard<dim = 1, mesh = "attention", axis = "tp", parts = 2>} : tensor<8x4xf32>
      %o = moe.linear %f, %wo : tensor<?x4xf32>, tensor<8x4xf32> -> tensor<?x8xf32>
      %sum = mf.all_reduce %o on "attention" ["tp"] : tensor<?x8xf32> -> tensor<?x8xf32>
      %r = arith.addf %a0, %sum : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    return %h, %zz : tensor<?x8xf32>, tensor<?xi64>
  }
}

// -----

// Alone (TP=2, no zigzag, no TP sharding): the embedding's tokens are sliced
// like the positions, and the whole output projection is sliced, not
// reduce-scattered.
// CHECK-LABEL: func.func @alone(
// CHECK-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>, %[[TABLE:[^:]+]]: tensor<16x8xf32>)
// CHECK-NEXT:      %[[POS:.+]] = moe.positions %[[TOK]]
// CHECK-NEXT:      %[[SP:.+]] = mf.slice %[[POS]] on "attention" ["tp"] dim 0 : tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:      %[[MINE:.+]] = mf.slice %[[TOK]] on "attention" ["tp"] dim 0 : tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:      %[[EMB:.+]] = moe.embed %[[TABLE]], %[[MINE]] :
// CHECK-NEXT:      moe.layer 0(%[[EMB]], %[[SP]], %[[POS]])
// CHECK:             mf.all_gather %{{.+}} on "attention" ["tp"] dim 0
// CHECK:             %[[WO:.+]] = moe.param "o.weight" : tensor<8x8xf32>
// CHECK-NEXT:        %[[O:.+]] = moe.linear %{{.+}}, %[[WO]] : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:        %[[OS:.+]] = mf.slice %[[O]] on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:        %[[RES:.+]] = arith.addf %{{.+}}, %[[OS]]
// CHECK-NEXT:        moe.yield %[[RES]]
// CHECK-NOT:       mf.reduce_scatter
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @alone(%tok: tensor<?xi64>, %table: tensor<16x8xf32>) -> tensor<?x8xf32> {
    %zz = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    %x = moe.embed %table, %tok : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    %h = moe.layer 0(%x, %zz) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a0: tensor<?x8xf32>, %p0: tensor<?xi64>):
      %c0_0 = arith.constant 0 : index
      %t = tensor.dim %a0, %c0_0 : tensor<?x8xf32>
      %wq = moe.param "q.weight" : tensor<8x8xf32>
      %ql = moe.linear %a0, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
      %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 4, 2] : tensor<?x8xf32> into tensor<?x4x2xf32>
      %wk = moe.param "k.weight" : tensor<4x8xf32>
      %kl = moe.linear %a0, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
      %wv = moe.param "v.weight" : tensor<4x8xf32>
      %vl = moe.linear %a0, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
      %q = moe.rope %qe, %p0 {theta = 1.000000e+04 : f32} : tensor<?x4x2xf32>, tensor<?xi64> -> tensor<?x4x2xf32>
      %k = moe.rope %ke, %p0 {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
      %att = moe.attention %q, %k, %ve, %p0, %p0 {scale = 0.707106769 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
      %f = tensor.collapse_shape %att [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
      %wo = moe.param "o.weight" : tensor<8x8xf32>
      %o = moe.linear %f, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
      %r = arith.addf %a0, %o : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    return %h : tensor<?x8xf32>
  }
}

// -----

// Two layers: each gets the CP positions as a third operand and its own
// all-gather and reduce-scatter; a function without layers is left alone.
// CHECK-LABEL: func.func @two_layers(
// CHECK:           %[[SP:.+]] = mf.slice %[[ZZ:[^ ]+]] on "attention" ["tp"] dim 0
// CHECK:           %[[L0:.+]] = moe.layer 0(%{{.+}}, %[[SP]], %[[ZZ]])
// CHECK:             mf.all_gather
// CHECK:             mf.reduce_scatter
// CHECK:           %[[L1:.+]] = moe.layer 1(%[[L0]], %[[SP]], %[[ZZ]])
// CHECK:             mf.all_gather
// CHECK:             mf.reduce_scatter
// CHECK:           return %[[L1]]
// CHECK-LABEL: func.func @no_layers(
// CHECK-SAME:      %[[P:[^:]+]]: tensor<?xi64>)
// CHECK-NEXT:      return %[[P]]
module attributes {mf.plan = #mf.plan<devices = 8, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 2], experts = [ep = 8 : (tp, cp, dp)]>,
    moe.model_info = {experts = 4 : i64, ffn = 16 : i64, head_dim = 2 : i64, heads = 4 : i64, hidden = 8 : i64, kv_heads = 2 : i64, layers = 1 : i64, top_k = 2 : i64, vocab = 16 : i64}} {
  func.func @two_layers(%zz: tensor<?xi64>, %x: tensor<?x8xf32>) -> tensor<?x8xf32> {
    %h0 = moe.layer 0(%x, %zz) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a0: tensor<?x8xf32>, %p0: tensor<?xi64>):
      %c0_0 = arith.constant 0 : index
      %t = tensor.dim %a0, %c0_0 : tensor<?x8xf32>
      %wq = moe.param "q.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<4x8xf32>
      %ql = moe.linear %a0, %wq : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
      %wk = moe.param "k.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<2x8xf32>
      %kl = moe.linear %a0, %wk : tensor<?x8xf32>, tensor<2x8xf32> -> tensor<?x2xf32>
      %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 1, 2] : tensor<?x2xf32> into tensor<?x1x2xf32>
      %wv = moe.param "v.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<2x8xf32>
      %vl = moe.linear %a0, %wv : tensor<?x8xf32>, tensor<2x8xf32> -> tensor<?x2xf32>
      %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 1, 2] : tensor<?x2xf32> into tensor<?x1x2xf32>
      %q = moe.rope %qe, %p0 {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
      %k = moe.rope %ke, %p0 {theta = 1.000000e+04 : f32} : tensor<?x1x2xf32>, tensor<?xi64> -> tensor<?x1x2xf32>
      %att = moe.attention %q, %k, %ve, %p0, %p0 {scale = 0.707106769 : f32} : tensor<?x2x2xf32>, tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x2xf32>
      %f = tensor.collapse_shape %att [[0], [1, 2]] : tensor<?x2x2xf32> into tensor<?x4xf32>
      %wo = moe.param "o.weight" {mf.shard = #mf.shard<dim = 1, mesh = "attention", axis = "tp", parts = 2>} : tensor<8x4xf32>
      %o = moe.linear %f, %wo : tensor<?x4xf32>, tensor<8x4xf32> -> tensor<?x8xf32>
      %sum = mf.all_reduce %o on "attention" ["tp"] : tensor<?x8xf32> -> tensor<?x8xf32>
      %r = arith.addf %a0, %sum : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    %h = moe.layer 1(%h0, %zz) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a1: tensor<?x8xf32>, %p1: tensor<?xi64>):
      %c0_1 = arith.constant 0 : index
      %t = tensor.dim %a1, %c0_1 : tensor<?x8xf32>
      %wq = moe.param "q.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<4x8xf32>
      %ql = moe.linear %a1, %wq : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
      %wk = moe.param "k.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<2x8xf32>
      %kl = moe.linear %a1, %wk : tensor<?x8xf32>, tensor<2x8xf32> -> tensor<?x2xf32>
      %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 1, 2] : tensor<?x2xf32> into tensor<?x1x2xf32>
      %wv = moe.param "v.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<2x8xf32>
      %vl = moe.linear %a1, %wv : tensor<?x8xf32>, tensor<2x8xf32> -> tensor<?x2xf32>
      %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 1, 2] : tensor<?x2xf32> into tensor<?x1x2xf32>
      %q = moe.rope %qe, %p1 {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
      %k = moe.rope %ke, %p1 {theta = 1.000000e+04 : f32} : tensor<?x1x2xf32>, tensor<?xi64> -> tensor<?x1x2xf32>
      %att = moe.attention %q, %k, %ve, %p1, %p1 {scale = 0.707106769 : f32} : tensor<?x2x2xf32>, tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x2xf32>
      %f = tensor.collapse_shape %att [[0], [1, 2]] : tensor<?x2x2xf32> into tensor<?x4xf32>
      %wo = moe.param "o.weight" {mf.shard = #mf.shard<dim = 1, mesh = "attention", axis = "tp", parts = 2>} : tensor<8x4xf32>
      %o = moe.linear %f, %wo : tensor<?x4xf32>, tensor<8x4xf32> -> tensor<?x8xf32>
      %sum = mf.all_reduce %o on "attention" ["tp"] : tensor<?x8xf32> -> tensor<?x8xf32>
      %r = arith.addf %a1, %sum : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    return %h : tensor<?x8xf32>
  }
  func.func @no_layers(%p: tensor<?xi64>) -> tensor<?xi64> {
    return %p : tensor<?xi64>
  }
}

// -----

// TP=1 (CP=2): no sequence parallelism.
// CHECK-LABEL: func.func @tp1(
// CHECK-NOT:       mf.slice
// CHECK:           moe.layer 0(%{{[^,]+}}, %{{[^,)]+}}) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
// CHECK-NOT:       mf.all_gather
// CHECK:           moe.yield
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [cp = 2], experts = [ep = 2 : (cp)]>} {
  func.func @tp1(%zz: tensor<?xi64>, %x: tensor<?x8xf32>) -> tensor<?x8xf32> {
    %h = moe.layer 0(%x, %zz) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a0: tensor<?x8xf32>, %p0: tensor<?xi64>):
      %c0_0 = arith.constant 0 : index
      %t = tensor.dim %a0, %c0_0 : tensor<?x8xf32>
      %wq = moe.param "q.weight" : tensor<8x8xf32>
      %ql = moe.linear %a0, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
      %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 4, 2] : tensor<?x8xf32> into tensor<?x4x2xf32>
      %wk = moe.param "k.weight" : tensor<4x8xf32>
      %kl = moe.linear %a0, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
      %wv = moe.param "v.weight" : tensor<4x8xf32>
      %vl = moe.linear %a0, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
      %q = moe.rope %qe, %p0 {theta = 1.000000e+04 : f32} : tensor<?x4x2xf32>, tensor<?xi64> -> tensor<?x4x2xf32>
      %k = moe.rope %ke, %p0 {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
      %att = moe.attention %q, %k, %ve, %p0, %p0 {scale = 0.707106769 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
      %f = tensor.collapse_shape %att [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
      %wo = moe.param "o.weight" : tensor<8x8xf32>
      %o = moe.linear %f, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
      %r = arith.addf %a0, %o : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    return %h : tensor<?x8xf32>
  }
}

// -----

// MLA (DeepSeek-V3), after -mf-shard-tp (TP=2): the latent's projection
// (kv_a_proj_with_mqa) and the query's read the all-gathered rows; the
// splits of the query and of the latent into heads take the gathered token
// count, and the output projection's all-reduce becomes a reduce-scatter.
// CHECK-LABEL: func.func @mla(
// CHECK:         ^bb0(%[[H:[^:]+]]: tensor<?x8xf32>, %{{[^:]+}}: tensor<?xi64>, %{{[^:]+}}: tensor<?xi64>):
// CHECK-NEXT:      %[[G:.+]] = mf.all_gather %[[H]] on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:      %[[C0:.+]] = arith.constant 0 : index
// CHECK-NEXT:      %[[ROWS:.+]] = tensor.dim %[[G]], %[[C0]] : tensor<?x8xf32>
// CHECK:           moe.linear %[[G]], %{{.+}} : tensor<?x8xf32>, tensor<6x8xf32> -> tensor<?x6xf32>
// CHECK:           tensor.expand_shape {{.+}} output_shape [%[[ROWS]], 1, 2] : tensor<?x2xf32> into tensor<?x1x2xf32>
// CHECK:           tensor.expand_shape {{.+}} output_shape [%[[ROWS]], 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
// CHECK:           moe.linear %[[G]], %{{.+}} : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
// CHECK-NEXT:      tensor.expand_shape {{.+}} output_shape [%[[ROWS]], 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
// CHECK:           %[[PART:.+]] = moe.linear %{{.+}}, %{{.+}} : tensor<?x2xf32>, tensor<8x2xf32> -> tensor<?x8xf32>
// CHECK-NEXT:      %[[RS:.+]] = mf.reduce_scatter %[[PART]] on "attention" ["tp"] dim 0
// CHECK-NEXT:      arith.addf %[[H]], %[[RS]]
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8, nvlink_gbps = 4.500000e+02, ib_gbps = 5.000000e+01, attention = [tp = 2], experts = [ep = 2 : (tp)]>, moe.model_info = {experts = 0 : i64, ffn = 0 : i64, head_dim = 6 : i64, heads = 2 : i64, hidden = 8 : i64, kv_heads = 1 : i64, layers = 1 : i64, top_k = 0 : i64, vocab = 16 : i64}} {
  func.func @mla(%arg0: tensor<?xi64>, %arg1: tensor<16x8xf32>) -> tensor<?x8xf32> {
    %0 = moe.positions %arg0 : tensor<?xi64> -> tensor<?xi64>
    %1 = moe.embed %arg1, %arg0 : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    %2 = moe.layer 0(%1, %0) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%arg2: tensor<?x8xf32>, %arg3: tensor<?xi64>):
      %c0 = arith.constant 0 : index
      %dim = tensor.dim %arg2, %c0 : tensor<?x8xf32>
      %3 = moe.param "kv_a_proj_with_mqa.weight" : tensor<6x8xf32>
      %4 = moe.linear %arg2, %3 : tensor<?x8xf32>, tensor<6x8xf32> -> tensor<?x6xf32>
      %dim_0 = tensor.dim %4, %c0 : tensor<?x6xf32>
      %extracted_slice = tensor.extract_slice %4[0, 0] [%dim_0, 4] [1, 1] : tensor<?x6xf32> to tensor<?x4xf32>
      %5 = moe.param "kv_a_layernorm.weight" : tensor<4xf32>
      %6 = moe.rms_norm %extracted_slice, %5 {epsilon = 9.99999997E-7 : f32} : tensor<?x4xf32>, tensor<4xf32> -> tensor<?x4xf32>
      %extracted_slice_1 = tensor.extract_slice %4[0, 4] [%dim_0, 2] [1, 1] : tensor<?x6xf32> to tensor<?x2xf32>
      %expanded = tensor.expand_shape %extracted_slice_1 [[0], [1, 2]] output_shape [%dim, 1, 2] : tensor<?x2xf32> into tensor<?x1x2xf32>
      %7 = moe.rope %expanded, %arg3 {interleaved, theta = 1.000000e+04 : f32} : tensor<?x1x2xf32>, tensor<?xi64> -> tensor<?x1x2xf32>
      %expanded_2 = tensor.expand_shape %6 [[0], [1, 2]] output_shape [%dim, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
      %concat = tensor.concat dim(2) %expanded_2, %7 : (tensor<?x1x4xf32>, tensor<?x1x2xf32>) -> tensor<?x1x6xf32>
      moe.kv_cache %concat, %concat, %arg3 {layer = 0 : i64} : tensor<?x1x6xf32>, tensor<?x1x6xf32>, tensor<?xi64>
      %8 = moe.param "q_proj.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<4x8xf32>
      %9 = moe.linear %arg2, %8 : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %expanded_3 = tensor.expand_shape %9 [[0], [1, 2]] output_shape [%dim, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
      %10 = moe.param "kv_b_proj.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<4x4xf32>
      %expanded_4 = tensor.expand_shape %10 [[0, 1], [2]] output_shape [1, 4, 4] : tensor<4x4xf32> into tensor<1x4x4xf32>
      %extracted_slice_5 = tensor.extract_slice %expanded_4[0, 0, 0] [1, 2, 4] [1, 1, 1] : tensor<1x4x4xf32> to tensor<1x2x4xf32>
      %extracted_slice_6 = tensor.extract_slice %expanded_4[0, 2, 0] [1, 2, 4] [1, 1, 1] : tensor<1x4x4xf32> to tensor<1x2x4xf32>
      %c0_7 = arith.constant 0 : index
      %dim_8 = tensor.dim %expanded_3, %c0_7 : tensor<?x1x4xf32>
      %extracted_slice_9 = tensor.extract_slice %expanded_3[0, 0, 0] [%dim_8, 1, 2] [1, 1, 1] : tensor<?x1x4xf32> to tensor<?x1x2xf32>
      %11 = moe.head_linear %extracted_slice_9, %extracted_slice_5 {transpose_weight} : tensor<?x1x2xf32>, tensor<1x2x4xf32> -> tensor<?x1x4xf32>
      %c0_10 = arith.constant 0 : index
      %dim_11 = tensor.dim %expanded_3, %c0_10 : tensor<?x1x4xf32>
      %extracted_slice_12 = tensor.extract_slice %expanded_3[0, 0, 2] [%dim_11, 1, 2] [1, 1, 1] : tensor<?x1x4xf32> to tensor<?x1x2xf32>
      %12 = moe.rope %extracted_slice_12, %arg3 {interleaved, theta = 1.000000e+04 : f32} : tensor<?x1x2xf32>, tensor<?xi64> -> tensor<?x1x2xf32>
      %concat_13 = tensor.concat dim(2) %11, %12 : (tensor<?x1x4xf32>, tensor<?x1x2xf32>) -> tensor<?x1x6xf32>
      %13 = moe.attention %concat_13, %concat, %concat, %arg3, %arg3 {scale = 5.000000e-01 : f32} : tensor<?x1x6xf32>, tensor<?x1x6xf32>, tensor<?x1x6xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x1x6xf32>
      %c0_14 = arith.constant 0 : index
      %dim_15 = tensor.dim %13, %c0_14 : tensor<?x1x6xf32>
      %extracted_slice_16 = tensor.extract_slice %13[0, 0, 0] [%dim_15, 1, 4] [1, 1, 1] : tensor<?x1x6xf32> to tensor<?x1x4xf32>
      %14 = moe.head_linear %extracted_slice_16, %extracted_slice_6 : tensor<?x1x4xf32>, tensor<1x2x4xf32> -> tensor<?x1x2xf32>
      %collapsed = tensor.collapse_shape %14 [[0], [1, 2]] : tensor<?x1x2xf32> into tensor<?x2xf32>
      %15 = moe.param "o_proj.weight" {mf.shard = #mf.shard<dim = 1, mesh = "attention", axis = "tp", parts = 2>} : tensor<8x2xf32>
      %16 = moe.linear %collapsed, %15 : tensor<?x2xf32>, tensor<8x2xf32> -> tensor<?x8xf32>
      %17 = mf.all_reduce %16 on "attention" ["tp"] : tensor<?x8xf32> -> tensor<?x8xf32>
      %18 = arith.addf %arg2, %17 : tensor<?x8xf32>
      moe.yield %18 : tensor<?x8xf32>
    }
    return %2 : tensor<?x8xf32>
  }
}

