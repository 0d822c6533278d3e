// RUN: meshfold-import-hf %examples/seed/config.json --num-layers 1 -o %t.mlir
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-zigzag-cp --mf-shard-tp | FileCheck %s --check-prefix=BEFORE
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-zigzag-cp --mf-shard-tp --mf-insert-sp | FileCheck %s
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=2 cp=1 dp=16 pp=1" --mf-insert-sp | FileCheck %s --check-prefix=ALONE
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=1 cp=2 dp=8 pp=2" --mf-zigzag-cp --mf-insert-sp | FileCheck %s --check-prefix=TP1

// -mf-insert-sp: outside attention each TP rank keeps T/(CP*TP) whole tokens;
// an mf.all_gather on tp rebuilds the CP rank's tokens before QKV and the
// output projection's all-reduce becomes an mf.reduce_scatter. Input: 1 seed
// layer after -mf-zigzag-cp and -mf-shard-tp (TP=2, CP=2).

// Before: the layer sees the CP rank's tokens; TP ends in an all-reduce.
// BEFORE-LABEL: func.func @prefill(
// BEFORE:         %[[ZZ:.+]] = mf.zigzag_positions
// BEFORE-NOT:     mf.slice
// BEFORE:         moe.layer 0(%{{.+}}, %[[ZZ]]) : (tensor<?x64xf32>, tensor<?xi64>)
// BEFORE-NOT:     mf.all_gather
// BEFORE:         mf.all_reduce %{{.+}} on "attention" ["tp"]
// BEFORE-NOT:     mf.reduce_scatter

// After: the TP rank's positions are a slice of the CP rank's; the layer gets
// the residual, the SP positions and the CP positions.
// CHECK-LABEL: func.func @prefill(
// CHECK-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>)
// CHECK:           %[[ZZ:.+]] = mf.zigzag_positions
// CHECK-NEXT:      %[[SP:.+]] = mf.slice %[[ZZ]] on "attention" ["tp"] dim 0 : tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:      %[[MINE:.+]] = mf.take %[[TOK]][%[[SP]]] fill 0
// CHECK:           %[[EMB:.+]] = moe.embed %{{.+}}, %[[MINE]] :
// CHECK:           %[[OUT:.+]] = moe.layer 0(%[[EMB]], %[[SP]], %[[ZZ]]) : (tensor<?x64xf32>, tensor<?xi64>, tensor<?xi64>) -> tensor<?x64xf32>
// CHECK-NEXT:      ^bb0(%[[H:[^:]+]]: tensor<?x64xf32>, %{{[^:]+}}: tensor<?xi64>, %[[CPPOS:[^:]+]]: tensor<?xi64>):
// CHECK:           %[[X:.+]] = moe.rms_norm %[[H]], %{{.+}}
// CHECK-NEXT:      %[[G:.+]] = mf.all_gather %[[X]] on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK:           %[[ROWS:.+]] = tensor.dim %[[G]], %{{.+}} : tensor<?x64xf32>
// CHECK:           %[[QL:.+]] = moe.linear %[[G]], %{{.+}} -> tensor<?x32xf32>
// CHECK-NEXT:      tensor.expand_shape %[[QL]] {{.+}} output_shape [%[[ROWS]], 4, 8]
// CHECK:           %[[KL:.+]] = moe.linear %[[G]], %{{.+}} -> tensor<?x16xf32>
// CHECK-NEXT:      tensor.expand_shape %[[KL]] {{.+}} output_shape [%[[ROWS]], 2, 8]
// CHECK:           %[[VL:.+]] = moe.linear %[[G]], %{{.+}} -> tensor<?x16xf32>
// CHECK-NEXT:      tensor.expand_shape %[[VL]] {{.+}} output_shape [%[[ROWS]], 2, 8]
// CHECK:           moe.rope %{{.+}}, %[[CPPOS]] {{.+}} : tensor<?x4x8xf32>
// CHECK:           moe.kv_cache %{{.+}}, %{{.+}}, %[[CPPOS]] heads from
// CHECK:           moe.attention %{{.+}}, %{{.+}}, %{{.+}}, %[[CPPOS]], %[[CPPOS]] {
// CHECK:           %[[PART:.+]] = moe.linear %{{.+}}, %{{.+}} : tensor<?x32xf32>, tensor<64x32xf32> -> tensor<?x64xf32>
// CHECK-NEXT:      %[[RS:.+]] = mf.reduce_scatter %[[PART]] on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NEXT:      %[[RES:.+]] = arith.addf %[[H]], %[[RS]] : tensor<?x64xf32>
// CHECK:           moe.rms_norm %[[RES]], %{{.+}}
// CHECK-NOT:       mf.all_reduce
// CHECK-NOT:       mf.all_gather
// CHECK:           moe.yield
// CHECK:           moe.lm_head %{{.+}}, %{{.+}}, %[[SP]], %{{.+}} :
// CHECK-NOT:       mf.all_reduce

// Alone (no zigzag, no TP sharding, CP=1): the embedding's tokens are sliced
// like the positions, and the whole output projection is sliced, not
// reduce-scattered.
// ALONE-LABEL: func.func @prefill(
// ALONE-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>)
// ALONE:           %[[POS:.+]] = moe.positions %[[TOK]]
// ALONE-NEXT:      %[[SP:.+]] = mf.slice %[[POS]] on "attention" ["tp"] dim 0
// ALONE:           %[[MINE:.+]] = mf.slice %[[TOK]] on "attention" ["tp"] dim 0 : tensor<?xi64> -> tensor<?xi64>
// ALONE-NEXT:      %[[EMB:.+]] = moe.embed %{{.+}}, %[[MINE]] :
// ALONE:           moe.layer 0(%[[EMB]], %[[SP]], %[[POS]])
// ALONE:           mf.all_gather %{{.+}} on "attention" ["tp"] dim 0
// ALONE:           %[[WO:.+]] = moe.param "model.layers.0.self_attn.o_proj.weight"
// ALONE-NEXT:      %[[O:.+]] = moe.linear %{{.+}}, %[[WO]] : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
// ALONE-NEXT:      %[[OS:.+]] = mf.slice %[[O]] on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// ALONE-NEXT:      arith.addf %{{.+}}, %[[OS]]
// ALONE-NOT:       mf.reduce_scatter
// ALONE-NOT:       mf.all_reduce

// TP=1: no sequence parallelism.
// TP1-LABEL: func.func @prefill(
// TP1-NOT:     mf.slice
// TP1-NOT:     mf.all_gather
// TP1-NOT:     mf.reduce_scatter
// TP1:         moe.layer 0(%{{[^,]+}}, %{{[^,)]+}}) :
// TP1-NOT:     mf.slice
// TP1-NOT:     mf.all_gather
// TP1-NOT:     mf.reduce_scatter
