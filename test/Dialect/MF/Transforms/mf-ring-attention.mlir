// RUN: meshfold-opt %s -split-input-file --mf-ring-attention | FileCheck %s

// -mf-ring-attention: each CP rank attends its queries to its own K/V block,
// then CP-1 times passes K, V and their positions one step around the cp
// ring (three separate mf.ring_step ops, fused later) and attends to the
// block received; partial results are merged by their log-sum-exp.

// CP=2: one swap of K, V and positions; two partials and one merge. The
// queries keep their own positions; only the K/V positions travel.
// CHECK-LABEL: func.func @cp2(
// CHECK-SAME:      %[[Q:[^:]+]]: tensor<?x4x2xf32>, %[[K:[^:]+]]: tensor<?x2x2xf32>, %[[V:[^:]+]]: tensor<?x2x2xf32>, %[[QP:[^:]+]]: tensor<?xi64>, %[[KP:[^:]+]]: tensor<?xi64>)
// CHECK-NEXT:      %[[O0:.+]], %[[L0:.+]] = moe.attention_partial %[[Q]], %[[K]], %[[V]], %[[QP]], %[[KP]] {scale = 5.000000e-01 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>, tensor<?x4xf32>
// CHECK-NEXT:      %[[K1:.+]] = mf.ring_step %[[K]] on "attention" ["cp"] : tensor<?x2x2xf32> -> tensor<?x2x2xf32>
// CHECK-NEXT:      %[[V1:.+]] = mf.ring_step %[[V]] on "attention" ["cp"] : tensor<?x2x2xf32> -> tensor<?x2x2xf32>
// CHECK-NEXT:      %[[P1:.+]] = mf.ring_step %[[KP]] on "attention" ["cp"] : tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:      %[[O1:.+]], %[[L1:.+]] = moe.attention_partial %[[Q]], %[[K1]], %[[V1]], %[[QP]], %[[P1]] {scale = 5.000000e-01 : f32}
// CHECK-NEXT:      %[[O:.+]], %{{.+}} = moe.attention_merge %[[O0]], %[[L0]], %[[O1]], %[[L1]] : tensor<?x4x2xf32>, tensor<?x4xf32> -> tensor<?x4x2xf32>, tensor<?x4xf32>
// CHECK-NEXT:      return %[[O]]
// CHECK-NOT:       moe.attention %
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @cp2(%q: tensor<?x4x2xf32>, %k: tensor<?x2x2xf32>, %v: tensor<?x2x2xf32>, %qp: tensor<?xi64>, %kp: tensor<?xi64>) -> tensor<?x4x2xf32> {
    %a = moe.attention %q, %k, %v, %qp, %kp {scale = 0.5 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    return %a : tensor<?x4x2xf32>
  }
}

// -----

// CP=4: a real ring of 3 steps, each sending what the previous one received,
// and 3 merges chained on the running result.
// CHECK-LABEL: func.func @cp4(
// CHECK-SAME:      %[[Q:[^:]+]]: tensor<?x4x2xf32>, %[[K:[^:]+]]: tensor<?x2x2xf32>, %[[V:[^:]+]]: tensor<?x2x2xf32>, %[[P:[^:]+]]: tensor<?xi64>)
// CHECK-NEXT:      %[[O0:.+]], %[[L0:.+]] = moe.attention_partial %[[Q]], %[[K]], %[[V]], %[[P]], %[[P]]
// CHECK-NEXT:      %[[K1:.+]] = mf.ring_step %[[K]] on "attention" ["cp"]
// CHECK-NEXT:      %[[V1:.+]] = mf.ring_step %[[V]] on "attention" ["cp"]
// CHECK-NEXT:      %[[P1:.+]] = mf.ring_step %[[P]] on "attention" ["cp"]
// CHECK-NEXT:      %[[O1:.+]], %[[L1:.+]] = moe.attention_partial %[[Q]], %[[K1]], %[[V1]], %[[P]], %[[P1]]
// CHECK-NEXT:      %[[M1:.+]], %[[LM1:.+]] = moe.attention_merge %[[O0]], %[[L0]], %[[O1]], %[[L1]]
// CHECK-NEXT:      %[[K2:.+]] = mf.ring_step %[[K1]] on "attention" ["cp"]
// CHECK-NEXT:      %[[V2:.+]] = mf.ring_step %[[V1]] on "attention" ["cp"]
// CHECK-NEXT:      %[[P2:.+]] = mf.ring_step %[[P1]] on "attention" ["cp"]
// CHECK-NEXT:      %[[O2:.+]], %[[L2:.+]] = moe.attention_partial %[[Q]], %[[K2]], %[[V2]], %[[P]], %[[P2]]
// CHECK-NEXT:      %[[M2:.+]], %[[LM2:.+]] = moe.attention_merge %[[M1]], %[[LM1]], %[[O2]], %[[L2]]
// CHECK-NEXT:      %[[K3:.+]] = mf.ring_step %[[K2]] on "attention" ["cp"]
// CHECK-NEXT:      %[[V3:.+]] = mf.ring_step %[[V2]] on "attention" ["cp"]
// CHECK-NEXT:      %[[P3:.+]] = mf.ring_step %[[P2]] on "attention" ["cp"]
// CHECK-NEXT:      %[[O3:.+]], %[[L3:.+]] = moe.attention_partial %[[Q]], %[[K3]], %[[V3]], %[[P]], %[[P3]]
// CHECK-NEXT:      %[[M3:.+]], %{{.+}} = moe.attention_merge %[[M2]], %[[LM2]], %[[O3]], %[[L3]]
// CHECK-NEXT:      return %[[M3]]
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [cp = 4], experts = [ep = 4 : (cp)]>} {
  func.func @cp4(%q: tensor<?x4x2xf32>, %k: tensor<?x2x2xf32>, %v: tensor<?x2x2xf32>, %p: tensor<?xi64>) -> tensor<?x4x2xf32> {
    %a = moe.attention %q, %k, %v, %p, %p {scale = 0.5 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    return %a : tensor<?x4x2xf32>
  }
}

// -----

// Every attention is rewritten, also inside layers; each result's users get
// the merged output. Here one tensor is both key and value (as MLA's latent
// is): it travels once, with its positions, and the partial reads it as
// both.
// CHECK-LABEL: func.func @in_layer(
// CHECK:           moe.layer 0(
// CHECK:             %[[O0:.+]], %[[L0:.+]] = moe.attention_partial
// CHECK-NEXT:        %[[KV1:.+]] = mf.ring_step %{{.+}} on "attention" ["cp"] : tensor<?x2x2xf32>
// CHECK-NEXT:        %[[P1:.+]] = mf.ring_step %{{.+}} on "attention" ["cp"] : tensor<?xi64>
// CHECK-NEXT:        %[[O1:.+]], %[[L1:.+]] = moe.attention_partial %{{.+}}, %[[KV1]], %[[KV1]], %{{.+}}, %[[P1]]
// CHECK-NEXT:        %[[O:.+]], %{{.+}} = moe.attention_merge %[[O0]], %[[L0]], %[[O1]], %[[L1]]
// CHECK-NEXT:        tensor.collapse_shape %[[O]]
// CHECK:           moe.layer 1(
// CHECK:             moe.attention_partial
// CHECK:             moe.attention_merge
// CHECK-NOT:       moe.attention %
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [cp = 2], experts = [ep = 2 : (cp)]>} {
  func.func @in_layer(%x: tensor<?x8xf32>, %p: tensor<?xi64>, %q: tensor<?x4x2xf32>, %k: tensor<?x2x2xf32>) -> tensor<?x8xf32> {
    %h0 = moe.layer 0(%x, %p, %q, %k) : (tensor<?x8xf32>, tensor<?xi64>, tensor<?x4x2xf32>, tensor<?x2x2xf32>) -> tensor<?x8xf32> {
    ^bb0(%h: tensor<?x8xf32>, %pos: tensor<?xi64>, %lq: tensor<?x4x2xf32>, %lk: tensor<?x2x2xf32>):
      %a = moe.attention %lq, %lk, %lk, %pos, %pos {scale = 0.5 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
      %f = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
      %r = arith.addf %h, %f : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    %h1 = moe.layer 1(%h0, %p, %q, %k) : (tensor<?x8xf32>, tensor<?xi64>, tensor<?x4x2xf32>, tensor<?x2x2xf32>) -> tensor<?x8xf32> {
    ^bb0(%h: tensor<?x8xf32>, %pos: tensor<?xi64>, %lq: tensor<?x4x2xf32>, %lk: tensor<?x2x2xf32>):
      %a = moe.attention %lq, %lk, %lk, %pos, %pos {scale = 0.5 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
      %f = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
      %r = arith.addf %h, %f : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    return %h1 : tensor<?x8xf32>
  }
}

// -----

// CP=1 (TP and DP only): nothing to exchange.
// CHECK-LABEL: func.func @cp1(
// CHECK-NEXT:      %[[A:.+]] = moe.attention
// CHECK-NEXT:      return %[[A]]
// CHECK-NOT:       mf.ring_step
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, dp = 2], experts = [ep = 4 : (tp, dp)]>} {
  func.func @cp1(%q: tensor<?x4x2xf32>, %k: tensor<?x2x2xf32>, %p: tensor<?xi64>) -> tensor<?x4x2xf32> {
    %a = moe.attention %q, %k, %k, %p, %p {scale = 0.5 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    return %a : tensor<?x4x2xf32>
  }
}

// -----

// A decode step's attention (over the rank's K/V history) is left to
// mf-pass-q-attention: its queries travel, not the cache.
// CHECK-LABEL: func.func @decode_step(
// CHECK:           moe.kv_history
// CHECK-NEXT:      moe.attention %
// CHECK-NOT:       mf.ring_step
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 4,
    attention = [cp = 2], experts = [ep = 2 : (cp)]>} {
  func.func @decode_step(%q: tensor<?x4x2xf32>, %sk: tensor<?x2x2xf32>, %sv: tensor<?x2x2xf32>, %qp: tensor<?xi64>) -> tensor<?x4x2xf32> {
    %k, %v, %kp = moe.kv_history %sk, %sv, %qp {layer = 0 : i64} : tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>
    %a = moe.attention %q, %k, %v, %qp, %kp {scale = 0.5 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    return %a : tensor<?x4x2xf32>
  }
}
