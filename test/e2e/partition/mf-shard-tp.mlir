// RUN: meshfold-import-hf %examples/seed/config.json --num-layers 1 -o %t.seed.mlir
// RUN: meshfold-opt %t.seed.mlir | FileCheck %s --check-prefix=BEFORE
// RUN: meshfold-opt %t.seed.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-shard-tp | FileCheck %s
// RUN: meshfold-opt %t.seed.mlir --mf-set-plan="tp=1 cp=4 dp=4 pp=2" --mf-shard-tp | FileCheck %s --check-prefix=TP1
// RUN: meshfold-opt %t.seed.mlir --mf-set-plan="tp=8 cp=1 dp=4 pp=1" --mf-shard-tp | FileCheck %s --check-prefix=TP8
// RUN: meshfold-import-hf %S/Inputs/kv2.json --num-layers 1 -o %t.kv2.mlir
// RUN: meshfold-opt %t.kv2.mlir --mf-set-plan="tp=4 cp=2 dp=2 pp=2" --mf-shard-tp | FileCheck %s --check-prefix=REPL
// RUN: not meshfold-opt %t.seed.mlir --mf-set-plan="tp=3 cp=2 dp=4 pp=2" --mf-shard-tp 2>&1 | FileCheck %s --check-prefix=HEADS
// RUN: meshfold-import-hf %S/Inputs/gqa6x3.json --num-layers 1 -o %t.gqa.mlir
// RUN: not meshfold-opt %t.gqa.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-shard-tp 2>&1 | FileCheck %s --check-prefix=GQA

// -mf-shard-tp splits attention heads over the TP group: column-parallel
// Q/K/V, local attention and KV-cache writes for the rank's heads, and a
// row-parallel output projection summed by an mf.all_reduce on tp.
// Input: 1 seed layer (8 query heads, 4 KV heads, d_h 8, d 64), and a variant
// with 2 KV heads.

// Before: all 8 query heads and 4 KV heads on every rank.
// BEFORE-LABEL: moe.layer 0(
// BEFORE:         "model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
// BEFORE:         "model.layers.0.self_attn.k_proj.weight" : tensor<32x64xf32>
// BEFORE:         "model.layers.0.self_attn.v_proj.weight" : tensor<32x64xf32>
// BEFORE:         moe.kv_cache %{{[^,]+}}, %{{[^,]+}}, %{{[^ ]+}} {layer = 0 : i64} : tensor<?x4x8xf32>
// BEFORE:         moe.attention {{.+}} -> tensor<?x8x8xf32>
// BEFORE:         "model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
// BEFORE-NOT:     mf.all_reduce

// TP=2: 4 query heads and 2 KV heads per rank, weights sliced, partial
// output projection all-reduced on tp.
// CHECK-LABEL: moe.layer 0(
// CHECK:         %[[X:.+]] = moe.rms_norm
// CHECK:         %[[WQ:.+]] = moe.param "model.layers.0.self_attn.q_proj.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<32x64xf32>
// CHECK-NEXT:    %[[QL:.+]] = moe.linear %[[X]], %[[WQ]] : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x32xf32>
// CHECK-NEXT:    %[[QE:.+]] = tensor.expand_shape %[[QL]] {{.+}} output_shape [%{{.+}}, 4, 8] : tensor<?x32xf32> into tensor<?x4x8xf32>
// CHECK:         %[[WK:.+]] = moe.param "model.layers.0.self_attn.k_proj.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<16x64xf32>
// CHECK-NEXT:    %[[KL:.+]] = moe.linear %[[X]], %[[WK]] : tensor<?x64xf32>, tensor<16x64xf32> -> tensor<?x16xf32>
// CHECK-NEXT:    %[[KE:.+]] = tensor.expand_shape %[[KL]] {{.+}} output_shape [%{{.+}}, 2, 8] : tensor<?x16xf32> into tensor<?x2x8xf32>
// CHECK:         %[[WV:.+]] = moe.param "model.layers.0.self_attn.v_proj.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<16x64xf32>
// CHECK-NEXT:    %[[VL:.+]] = moe.linear %[[X]], %[[WV]] : tensor<?x64xf32>, tensor<16x64xf32> -> tensor<?x16xf32>
// CHECK-NEXT:    %[[VE:.+]] = tensor.expand_shape %[[VL]] {{.+}} : tensor<?x16xf32> into tensor<?x2x8xf32>
// CHECK:         %[[Q:.+]] = moe.rope %[[QE]], {{.+}} -> tensor<?x4x8xf32>
// CHECK:         %[[K:.+]] = moe.rope %[[KE]], {{.+}} -> tensor<?x2x8xf32>
// CHECK:         %[[TP:.+]] = mf.coord "attention" "tp" : index
// CHECK-NEXT:    %[[C2:.+]] = arith.constant 2 : index
// CHECK-NEXT:    %[[FIRST:.+]] = arith.muli %[[TP]], %[[C2]] : index
// CHECK:         moe.kv_cache %[[K]], %[[VE]], %{{.+}} heads from %[[FIRST]] {layer = 0 : i64} : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
// CHECK:         %[[ATT:.+]] = moe.attention %[[Q]], %[[K]], %[[VE]], {{.+}} -> tensor<?x4x8xf32>
// CHECK:         %[[FLAT:.+]] = tensor.collapse_shape %[[ATT]] {{.+}} into tensor<?x32xf32>
// CHECK:         %[[WO:.+]] = moe.param "model.layers.0.self_attn.o_proj.weight" {mf.shard = #mf.shard<dim = 1, mesh = "attention", axis = "tp", parts = 2>} : tensor<64x32xf32>
// CHECK-NEXT:    %[[PART:.+]] = moe.linear %[[FLAT]], %[[WO]] : tensor<?x32xf32>, tensor<64x32xf32> -> tensor<?x64xf32>
// CHECK-NEXT:    %[[SUM:.+]] = mf.all_reduce %[[PART]] on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NEXT:    arith.addf %{{.+}}, %[[SUM]] : tensor<?x64xf32>
// CHECK-NOT:     tensor<64x64xf32>
// CHECK-NOT:     tensor<?x8x8xf32>
// CHECK-NOT:     tensor<?x4x8xf32>
// CHECK:         moe.yield

// TP=1: nothing to split.
// TP1-LABEL: moe.layer 0(
// TP1-NOT:     mf.shard
// TP1-NOT:     mf.all_reduce
// TP1:         moe.attention {{.+}} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>,
// TP1-NOT:     mf.shard
// TP1-NOT:     mf.all_reduce

// TP=8 > n_kv=4: one query head per rank; each KV head is held by 2 ranks
// (4 parts), from head tp*4/8.
// TP8-LABEL: moe.layer 0(
// TP8:         "model.layers.0.self_attn.q_proj.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 8>} : tensor<8x64xf32>
// TP8:         "model.layers.0.self_attn.k_proj.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 4>} : tensor<8x64xf32>
// TP8:         "model.layers.0.self_attn.v_proj.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 4>} : tensor<8x64xf32>
// TP8:         %[[TP:.+]] = mf.coord "attention" "tp" : index
// TP8:         %[[C4:.+]] = arith.constant 4 : index
// TP8-NEXT:    %[[M:.+]] = arith.muli %[[TP]], %[[C4]] : index
// TP8-NEXT:    %[[C8:.+]] = arith.constant 8 : index
// TP8-NEXT:    %[[D:.+]] = arith.divui %[[M]], %[[C8]] : index
// TP8:         %[[H:.+]] = arith.muli %[[D]], %{{.+}} : index
// TP8-NEXT:    moe.kv_cache {{.+}} heads from %[[H]] {layer = 0 : i64} : tensor<?x1x8xf32>, tensor<?x1x8xf32>
// TP8:         moe.attention {{.+}} -> tensor<?x1x8xf32>
// TP8:         "model.layers.0.self_attn.o_proj.weight" {mf.shard = #mf.shard<dim = 1, mesh = "attention", axis = "tp", parts = 8>} : tensor<64x8xf32>
// TP8:         mf.all_reduce %{{.+}} on "attention" ["tp"]

// n_kv=2 < TP=4 (KV replication): K/V weights in 2 parts, 1 KV head per rank,
// the rank's KV head is tp*2/4.
// REPL-LABEL: moe.layer 0(
// REPL:         "model.layers.0.self_attn.q_proj.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 4>} : tensor<16x64xf32>
// REPL:         tensor.expand_shape {{.+}} output_shape [%{{.+}}, 2, 8] : tensor<?x16xf32> into tensor<?x2x8xf32>
// REPL:         "model.layers.0.self_attn.k_proj.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<8x64xf32>
// REPL:         tensor.expand_shape {{.+}} output_shape [%{{.+}}, 1, 8] : tensor<?x8xf32> into tensor<?x1x8xf32>
// REPL:         "model.layers.0.self_attn.v_proj.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<8x64xf32>
// REPL:         %[[TP:.+]] = mf.coord "attention" "tp" : index
// REPL:         %[[C2:.+]] = arith.constant 2 : index
// REPL-NEXT:    %[[M:.+]] = arith.muli %[[TP]], %[[C2]] : index
// REPL-NEXT:    %[[C4:.+]] = arith.constant 4 : index
// REPL-NEXT:    %[[D:.+]] = arith.divui %[[M]], %[[C4]] : index
// REPL:         %[[H:.+]] = arith.muli %[[D]], %{{.+}} : index
// REPL-NEXT:    moe.kv_cache {{.+}} heads from %[[H]] {layer = 0 : i64} : tensor<?x1x8xf32>, tensor<?x1x8xf32>, tensor<?xi64>
// REPL:         moe.attention {{.+}} : tensor<?x2x8xf32>, tensor<?x1x8xf32>, tensor<?x1x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x8xf32>
// REPL:         "model.layers.0.self_attn.o_proj.weight" {mf.shard = #mf.shard<dim = 1, mesh = "attention", axis = "tp", parts = 4>} : tensor<64x16xf32>
// REPL:         mf.all_reduce %{{.+}} on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>

// TP=3 does not divide 8 query heads.
// HEADS: error: plan rule 'tp-heads': TP=3 must divide n_heads=8

// TP=2 neither divides n_kv=3 nor is a multiple of it.
// GQA: error: plan rule 'gqa': TP=2 must divide n_kv=3
