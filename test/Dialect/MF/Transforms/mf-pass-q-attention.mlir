// RUN: meshfold-opt %s -split-input-file --mf-pass-q-attention | FileCheck %s

// -mf-pass-q-attention: a decode step's attention over the rank's own K/V
// history moves its queries around the cp ring instead of the cache. Each
// rank attends its queries to its own K/V; then, CP-1 times, the queries,
// the running partial output, its log-sum-exp and the queries' positions
// take one ring step together (four separate mf.ring_step ops, fused
// later), and the receiver adds its own partial; a last step hands each
// merged output back to its queries' rank, with their positions (which say
// whose output it is; a ring step is kept though the positions are not
// used). The K/V never move. Every step is marked `queries`: the runtime
// counts its traffic as pass-Q's.

// CP=2: out and back.
// CHECK-LABEL: func.func @cp2(
// CHECK-SAME:      %[[Q:[^:]+]]: tensor<?x4x2xf32>, %[[SK:[^:]+]]: tensor<?x2x2xf32>, %[[SV:[^:]+]]: tensor<?x2x2xf32>, %[[QP:[^:]+]]: tensor<?xi64>)
// CHECK-NEXT:      %[[K:.+]], %[[V:.+]], %[[KP:.+]] = moe.kv_history %[[SK]], %[[SV]], %[[QP]] {layer = 0 : i64}
// CHECK-NEXT:      %[[O0:.+]], %[[L0:.+]] = moe.attention_partial %[[Q]], %[[K]], %[[V]], %[[QP]], %[[KP]] {scale = 5.000000e-01 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>, tensor<?x4xf32>
// CHECK-NEXT:      %[[Q1:.+]] = mf.ring_step %[[Q]] on "attention" ["cp"] {queries} : tensor<?x4x2xf32> -> tensor<?x4x2xf32>
// CHECK-NEXT:      %[[O1:.+]] = mf.ring_step %[[O0]] on "attention" ["cp"] {queries} : tensor<?x4x2xf32> -> tensor<?x4x2xf32>
// CHECK-NEXT:      %[[L1:.+]] = mf.ring_step %[[L0]] on "attention" ["cp"] {queries} : tensor<?x4xf32> -> tensor<?x4xf32>
// CHECK-NEXT:      %[[QP1:.+]] = mf.ring_step %[[QP]] on "attention" ["cp"] {queries} : tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:      %[[O2:.+]], %[[L2:.+]] = moe.attention_partial %[[Q1]], %[[K]], %[[V]], %[[QP1]], %[[KP]]
// CHECK-NEXT:      %[[M:.+]], %{{.+}} = moe.attention_merge %[[O1]], %[[L1]], %[[O2]], %[[L2]]
// CHECK-NEXT:      %[[BACK:.+]] = mf.ring_step %[[M]] on "attention" ["cp"] {queries} : tensor<?x4x2xf32> -> tensor<?x4x2xf32>
// CHECK-NEXT:      mf.ring_step %[[QP1]] on "attention" ["cp"] {queries} : tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:      return %[[BACK]]
// CHECK-NOT:       moe.attention %
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @cp2(%q: tensor<?x4x2xf32>, %sk: tensor<?x2x2xf32>, %sv: tensor<?x2x2xf32>, %qp: tensor<?xi64>) -> tensor<?x4x2xf32> {
    %k, %v, %kp = moe.kv_history %sk, %sv, %qp {layer = 0 : i64} : tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>
    %a = moe.attention %q, %k, %v, %qp, %kp {scale = 0.5 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    return %a : tensor<?x4x2xf32>
  }
}

// -----

// CP=4: the queries visit every rank (3 steps, each sending on what the
// previous one received), the partial merged on the way, then go home.
// CHECK-LABEL: func.func @cp4(
// CHECK:           %[[O0:.+]], %[[L0:.+]] = moe.attention_partial
// CHECK-NEXT:      %[[Q1:.+]] = mf.ring_step %{{.+}} on "attention" ["cp"] {queries}
// CHECK-NEXT:      %[[O1:.+]] = mf.ring_step %[[O0]] on "attention" ["cp"] {queries}
// CHECK-NEXT:      %[[L1:.+]] = mf.ring_step %[[L0]] on "attention" ["cp"] {queries}
// CHECK-NEXT:      %[[QP1:.+]] = mf.ring_step %{{.+}} on "attention" ["cp"] {queries}
// CHECK-NEXT:      %[[P1:.+]], %[[PL1:.+]] = moe.attention_partial %[[Q1]], %{{.+}}, %{{.+}}, %[[QP1]],
// CHECK-NEXT:      %[[M1:.+]], %[[LM1:.+]] = moe.attention_merge %[[O1]], %[[L1]], %[[P1]], %[[PL1]]
// CHECK-NEXT:      %[[Q2:.+]] = mf.ring_step %[[Q1]] on "attention" ["cp"] {queries}
// CHECK-NEXT:      %[[O2:.+]] = mf.ring_step %[[M1]] on "attention" ["cp"] {queries}
// CHECK-NEXT:      %[[L2:.+]] = mf.ring_step %[[LM1]] on "attention" ["cp"] {queries}
// CHECK-NEXT:      %[[QP2:.+]] = mf.ring_step %[[QP1]] on "attention" ["cp"] {queries}
// CHECK-NEXT:      moe.attention_partial %[[Q2]], %{{.+}}, %{{.+}}, %[[QP2]],
// CHECK-NEXT:      %[[M2:.+]], %[[LM2:.+]] = moe.attention_merge %[[O2]], %[[L2]],
// CHECK-NEXT:      %[[Q3:.+]] = mf.ring_step %[[Q2]] on "attention" ["cp"] {queries}
// CHECK-NEXT:      %[[O3:.+]] = mf.ring_step %[[M2]] on "attention" ["cp"] {queries}
// CHECK-NEXT:      %[[L3:.+]] = mf.ring_step %[[LM2]] on "attention" ["cp"] {queries}
// CHECK-NEXT:      %[[QP3:.+]] = mf.ring_step %[[QP2]] on "attention" ["cp"] {queries}
// CHECK-NEXT:      moe.attention_partial %[[Q3]], %{{.+}}, %{{.+}}, %[[QP3]],
// CHECK-NEXT:      %[[M3:.+]], %{{.+}} = moe.attention_merge %[[O3]], %[[L3]],
// CHECK-NEXT:      %[[BACK:.+]] = mf.ring_step %[[M3]] on "attention" ["cp"] {queries}
// CHECK-NEXT:      mf.ring_step %[[QP3]] on "attention" ["cp"] {queries}
// CHECK-NEXT:      return %[[BACK]]
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [cp = 4], experts = [ep = 4 : (cp)]>} {
  func.func @cp4(%q: tensor<?x4x2xf32>, %sk: tensor<?x2x2xf32>, %sv: tensor<?x2x2xf32>, %qp: tensor<?xi64>) -> tensor<?x4x2xf32> {
    %k, %v, %kp = moe.kv_history %sk, %sv, %qp {layer = 0 : i64} : tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>
    %a = moe.attention %q, %k, %v, %qp, %kp {scale = 0.5 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    return %a : tensor<?x4x2xf32>
  }
}

// -----

// Prefill's attention (its K/V not a history) is mf-ring-attention's; and
// with CP=1 the step's attention stays whole.
// CHECK-LABEL: func.func @prefill(
// CHECK-NEXT:      moe.attention %
// CHECK-NOT:       mf.ring_step
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 4,
    attention = [cp = 2], experts = [ep = 2 : (cp)]>} {
  func.func @prefill(%q: tensor<?x4x2xf32>, %k: tensor<?x2x2xf32>, %v: tensor<?x2x2xf32>, %p: tensor<?xi64>) -> tensor<?x4x2xf32> {
    %a = moe.attention %q, %k, %v, %p, %p {scale = 0.5 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    return %a : tensor<?x4x2xf32>
  }
}

// -----

// CHECK-LABEL: func.func @cp1(
// CHECK:           moe.kv_history
// CHECK-NEXT:      moe.attention %
// CHECK-NOT:       mf.ring_step
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 4,
    attention = [tp = 2, cp = 1], experts = [ep = 2 : (tp, cp)]>} {
  func.func @cp1(%q: tensor<?x4x2xf32>, %sk: tensor<?x2x2xf32>, %sv: tensor<?x2x2xf32>, %qp: tensor<?xi64>) -> tensor<?x4x2xf32> {
    %k, %v, %kp = moe.kv_history %sk, %sv, %qp {layer = 0 : i64} : tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>
    %a = moe.attention %q, %k, %v, %qp, %kp {scale = 0.5 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    return %a : tensor<?x4x2xf32>
  }
}
