// RUN: meshfold-import-hf %examples/seed/config.json --num-layers 1 -o %t.mlir
// RUN: meshfold-opt %t.mlir | FileCheck %s --check-prefix=BEFORE
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-ring-attention | FileCheck %s
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=1 cp=4 dp=4 pp=2" --mf-ring-attention | FileCheck %s --check-prefix=CP4
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=1 cp=4 dp=4 pp=2" --mf-ring-attention | grep -c "mf.ring_step" | FileCheck %s --check-prefix=CP4-STEPS
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=1 cp=4 dp=4 pp=2" --mf-ring-attention | grep -c "moe.attention_merge" | FileCheck %s --check-prefix=CP4-MERGES
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=2 cp=1 dp=16 pp=1" --mf-ring-attention | FileCheck %s --check-prefix=CP1

// -mf-ring-attention: each CP rank attends its queries to its own K/V block,
// then CP-1 times passes K, V and their positions one step around the cp ring
// and attends to the block received; partial results are merged by their
// log-sum-exp. Input: 1 seed layer.

// Before: one causal attention over the rank's tokens.
// BEFORE-LABEL: moe.layer 0(
// BEFORE:         moe.attention
// BEFORE-NOT:     mf.ring_step
// BEFORE-NOT:     moe.attention_partial

// CP=2: one swap of K, V and positions; two partials and one merge.
// CHECK-LABEL: moe.layer 0(
// CHECK-NEXT:    ^bb0(%{{[^:]+}}: tensor<?x64xf32>, %[[P:[^:]+]]: tensor<?xi64>):
// CHECK:         %[[Q:.+]] = moe.rope %{{.+}} -> tensor<?x8x8xf32>
// CHECK:         %[[K:.+]] = moe.rope %{{.+}} -> tensor<?x4x8xf32>
// CHECK:         moe.kv_cache %[[K]], %[[V:[^,]+]], %[[P]]
// CHECK-NOT:     moe.attention %
// CHECK:         %[[O0:.+]], %[[L0:.+]] = moe.attention_partial %[[Q]], %[[K]], %[[V]], %[[P]], %[[P]] {scale = {{.+}}} : {{.+}} -> tensor<?x8x8xf32>, tensor<?x8xf32>
// CHECK-NEXT:    %[[K1:.+]] = mf.ring_step %[[K]] on "attention" ["cp"] : tensor<?x4x8xf32> -> tensor<?x4x8xf32>
// CHECK-NEXT:    %[[V1:.+]] = mf.ring_step %[[V]] on "attention" ["cp"] : tensor<?x4x8xf32> -> tensor<?x4x8xf32>
// CHECK-NEXT:    %[[P1:.+]] = mf.ring_step %[[P]] on "attention" ["cp"] : tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:    %[[O1:.+]], %[[L1:.+]] = moe.attention_partial %[[Q]], %[[K1]], %[[V1]], %[[P]], %[[P1]] {scale = {{.+}}}
// CHECK-NEXT:    %[[O:.+]], %{{.+}} = moe.attention_merge %[[O0]], %[[L0]], %[[O1]], %[[L1]] : tensor<?x8x8xf32>, tensor<?x8xf32> -> tensor<?x8x8xf32>, tensor<?x8xf32>
// CHECK-NOT:     mf.ring_step
// CHECK-NOT:     moe.attention_partial
// CHECK-NEXT:    tensor.collapse_shape %[[O]]
// CHECK-NOT:     moe.attention %
// CHECK:         moe.yield

// CP=4: a real ring of 3 steps, each feeding the next, and 3 merges.
// CP4-LABEL: moe.layer 0(
// CP4:         %[[O0:.+]], %[[L0:.+]] = moe.attention_partial %[[Q:[^,]+]], %[[K:[^,]+]], %[[V:[^,]+]], %[[P:[^,]+]], %[[P]]
// CP4-NEXT:    %[[K1:.+]] = mf.ring_step %[[K]] on "attention" ["cp"]
// CP4-NEXT:    %[[V1:.+]] = mf.ring_step %[[V]] on "attention" ["cp"]
// CP4-NEXT:    %[[P1:.+]] = mf.ring_step %[[P]] on "attention" ["cp"]
// CP4-NEXT:    %[[O1:.+]], %[[L1:.+]] = moe.attention_partial %[[Q]], %[[K1]], %[[V1]], %[[P]], %[[P1]]
// CP4-NEXT:    %[[M1:.+]], %[[LM1:.+]] = moe.attention_merge %[[O0]], %[[L0]], %[[O1]], %[[L1]]
// CP4-NEXT:    %[[K2:.+]] = mf.ring_step %[[K1]] on "attention" ["cp"]
// CP4-NEXT:    %[[V2:.+]] = mf.ring_step %[[V1]] on "attention" ["cp"]
// CP4-NEXT:    %[[P2:.+]] = mf.ring_step %[[P1]] on "attention" ["cp"]
// CP4-NEXT:    %[[O2:.+]], %[[L2:.+]] = moe.attention_partial %[[Q]], %[[K2]], %[[V2]], %[[P]], %[[P2]]
// CP4-NEXT:    %[[M2:.+]], %[[LM2:.+]] = moe.attention_merge %[[M1]], %[[LM1]], %[[O2]], %[[L2]]
// CP4-NEXT:    %[[K3:.+]] = mf.ring_step %[[K2]] on "attention" ["cp"]
// CP4-NEXT:    %[[V3:.+]] = mf.ring_step %[[V2]] on "attention" ["cp"]
// CP4-NEXT:    %[[P3:.+]] = mf.ring_step %[[P2]] on "attention" ["cp"]
// CP4-NEXT:    %[[O3:.+]], %[[L3:.+]] = moe.attention_partial %[[Q]], %[[K3]], %[[V3]], %[[P]], %[[P3]]
// CP4-NEXT:    %[[M3:.+]], %{{.+}} = moe.attention_merge %[[M2]], %[[LM2]], %[[O3]], %[[L3]]
// CP4-NEXT:    tensor.collapse_shape %[[M3]]
// CP4-NOT:     moe.attention %
// CP4:         moe.yield

// Unfused: 3 steps x (K, V, positions) = 9 ring steps; 3 merges.
// CP4-STEPS: {{^}}9{{$}}
// CP4-MERGES: {{^}}3{{$}}

// CP=1: nothing to exchange.
// CP1-LABEL: moe.layer 0(
// CP1-NOT:     mf.ring_step
// CP1-NOT:     moe.attention_partial
// CP1:         moe.attention %
// CP1-NOT:     mf.ring_step
// CP1-NOT:     moe.attention_merge
