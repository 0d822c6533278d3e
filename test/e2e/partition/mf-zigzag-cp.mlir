// RUN: meshfold-import-hf %examples/seed/config.json --num-layers 1 -o %t.mlir
// RUN: meshfold-opt %t.mlir | FileCheck %s --check-prefix=BEFORE
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-zigzag-cp | FileCheck %s
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=1 cp=1 dp=32 pp=1" --mf-zigzag-cp | FileCheck %s --check-prefix=NOOP
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=1 cp=4 dp=4 pp=2" --mf-zigzag-cp | FileCheck %s --check-prefix=CP4
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=4 cp=2 dp=2 pp=2" --mf-zigzag-cp | FileCheck %s --check-prefix=TP4
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=2 cp=1 dp=16 pp=1" --mf-zigzag-cp | FileCheck %s --check-prefix=CP1
// RUN: not meshfold-opt %t.mlir --mf-zigzag-cp 2>&1 | FileCheck %s --check-prefix=NOPLAN

// -mf-zigzag-cp gives each CP rank its zigzag chunks: moe.positions becomes
// mf.zigzag_positions (padded to 2*CP*TP), the embedding reads the rank's
// tokens through mf.take, and everything indexed by position (RoPE, KV cache,
// attention, LM head) uses the rank's GLOBAL positions. Input: 1 seed layer.

// Before: global positions of every token feed RoPE, cache, attention, head.
// BEFORE-LABEL: func.func @prefill(
// BEFORE-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>)
// BEFORE:         %[[POS:.+]] = moe.positions %[[TOK]]
// BEFORE:         moe.embed %{{.+}}, %[[TOK]] :
// BEFORE:         moe.layer 0(%{{.+}}, %[[POS]])
// BEFORE:         moe.lm_head %{{.+}}, %{{.+}}, %[[POS]], %{{.+}} :

// CP=2, TP=2: 4 chunks padded to a multiple of 8; the rank's tokens are taken
// by its positions (padding reads token 0).
// CHECK-LABEL: func.func @prefill(
// CHECK-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>)
// CHECK-NOT:       moe.positions
// CHECK:           %[[T:.+]] = tensor.dim %[[TOK]], %{{.+}} : tensor<?xi64>
// CHECK-NEXT:      %[[ZZ:.+]] = mf.zigzag_positions %[[T]] on "attention" "cp" pad_to 8 : tensor<?xi64>
// CHECK-NEXT:      %[[MINE:.+]] = mf.take %[[TOK]][%[[ZZ]]] fill 0 : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
// CHECK:           %[[EMB:.+]] = moe.embed %{{.+}}, %[[MINE]] : tensor<512x64xf32>, tensor<?xi64> -> tensor<?x64xf32>
// CHECK:           %[[L0:.+]] = moe.layer 0(%[[EMB]], %[[ZZ]])
// CHECK-NEXT:      ^bb0(%{{.+}}: tensor<?x64xf32>, %[[P:.+]]: tensor<?xi64>):
// CHECK:           %[[Q:.+]] = moe.rope %{{.+}}, %[[P]] {{.+}} : tensor<?x8x8xf32>
// CHECK:           %[[K:.+]] = moe.rope %{{.+}}, %[[P]] {{.+}} : tensor<?x4x8xf32>
// CHECK:           moe.kv_cache %[[K]], %[[V:.+]], %[[P]] {layer = 0 : i64}
// CHECK:           moe.attention %[[Q]], %[[K]], %[[V]], %[[P]], %[[P]] {
// CHECK:           moe.yield
// CHECK:           moe.lm_head %{{.+}}, %{{.+}}, %[[ZZ]], %{{.+}} :
// CHECK-NOT:       moe.positions
// CHECK:           return

// CP=1, TP=1: no token split, the pass does nothing.
// NOOP-LABEL: func.func @prefill(
// NOOP-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>)
// NOOP-NOT:       mf.zigzag_positions
// NOOP-NOT:       mf.take
// NOOP:           %[[POS:.+]] = moe.positions %[[TOK]]
// NOOP:           moe.embed %{{.+}}, %[[TOK]] :
// NOOP:           moe.layer 0(%{{.+}}, %[[POS]])
// NOOP:           moe.lm_head %{{.+}}, %{{.+}}, %[[POS]], %{{.+}} :
// NOOP-NOT:       mf.zigzag_positions
// NOOP-NOT:       mf.take

// CP=4 (a real ring), TP=1: 8 chunks, pad_to 2*4*1.
// CP4-LABEL: func.func @prefill(
// CP4-NOT:     moe.positions
// CP4:         %[[ZZ:.+]] = mf.zigzag_positions %{{.+}} on "attention" "cp" pad_to 8 : tensor<?xi64>
// CP4:         %[[MINE:.+]] = mf.take %{{.+}}[%[[ZZ]]] fill 0
// CP4:         moe.embed %{{.+}}, %[[MINE]] :
// CP4:         moe.layer 0(%{{.+}}, %[[ZZ]])

// TP=4, CP=2: each chunk is split further over the TP group, pad_to 2*2*4.
// TP4-LABEL: func.func @prefill(
// TP4:         mf.zigzag_positions %{{.+}} on "attention" "cp" pad_to 16 : tensor<?xi64>

// CP=1, TP=2: SP still needs the chunks split over TP, pad_to 2*1*2.
// CP1-LABEL: func.func @prefill(
// CP1-NOT:     moe.positions
// CP1:         %[[ZZ:.+]] = mf.zigzag_positions %{{.+}} on "attention" "cp" pad_to 4 : tensor<?xi64>
// CP1:         %[[MINE:.+]] = mf.take %{{.+}}[%[[ZZ]]] fill 0
// CP1:         moe.embed %{{.+}}, %[[MINE]] :

// Without a plan the pass has nothing to cut by.
// NOPLAN: error: mf-zigzag-cp: the module has no plan
