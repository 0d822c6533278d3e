// RUN: meshfold-import-hf %examples/seed/config.json --num-layers 1 -o %t.mlir
// RUN: meshfold-opt %t.mlir | FileCheck %s --check-prefix=BEFORE
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-fold-experts | FileCheck %s
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=2 cp=2 dp=2 pp=1 gpus-per-node=8" --mf-fold-experts | FileCheck %s --check-prefix=ONENODE
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-fold-experts=mode=flat | FileCheck %s --check-prefix=FLAT
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=2 cp=2 dp=2 pp=1 gpus-per-node=8" --mf-fold-experts=mode=hierarchical | FileCheck %s --check-prefix=HIER
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2 order=tp,cp,pp,dp" --mf-fold-experts | FileCheck %s --check-prefix=SWAP
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=1 cp=1 dp=32 pp=1" --mf-fold-experts | FileCheck %s --check-prefix=DP32
// RUN: meshfold-opt %t.mlir --mf-set-plan="tp=1 cp=1 dp=1 pp=1" --mf-fold-experts | FileCheck %s --check-prefix=EP1
// RUN: meshfold-import-hf %S/Inputs/experts64.json --num-layers 1 -o %t.e64.mlir
// RUN: meshfold-opt %t.e64.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-fold-experts | FileCheck %s --check-prefix=E64
// RUN: meshfold-import-hf %S/Inputs/top4.json --num-layers 1 -o %t.top4.mlir
// RUN: meshfold-opt %t.top4.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-fold-experts | FileCheck %s --check-prefix=TOP4
// RUN: meshfold-import-hf %S/Inputs/experts24.json --num-layers 1 -o %t.e24.mlir
// RUN: not meshfold-opt %t.e24.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-fold-experts 2>&1 | FileCheck %s --check-prefix=DIVIDE
// RUN: not meshfold-opt %t.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-fold-experts=mode=ring 2>&1 | FileCheck %s --check-prefix=MODE

// -mf-fold-experts: expert parallelism on the folded expert mesh. Each EP
// rank holds n_experts/EP experts; moe.experts becomes mf.dispatch, the local
// moe.expert_ffn and mf.combine. Dispatch is hierarchical when the EP group
// spans nodes. Input: 1 seed layer (32 experts, top-2).

// Before: every rank would hold all 32 experts.
// BEFORE-LABEL: moe.layer 0(
// BEFORE:         moe.experts {{.+}} tensor<32x128x64xf32>, tensor<32x64x128xf32>, tensor<32x128x64xf32> -> tensor<?x64xf32>
// BEFORE-NOT:     mf.dispatch

// Seed plan: EP16 over the stage's 2 nodes, 2 experts per GPU, hierarchical.
// CHECK-LABEL: moe.layer 0(
// CHECK:         moe.param "model.layers.0.post_attention_layernorm.weight"
// CHECK-NEXT:    %[[X:.+]] = moe.rms_norm
// CHECK:         %[[W:.+]], %[[I:.+]] = moe.router %[[X]],
// CHECK-NOT:     moe.experts
// CHECK:         %[[ROWS:.+]], %[[LOCAL:.+]], %[[R:.+]] = mf.dispatch %[[X]], %[[I]], %[[W]] on "experts" ["ep"] experts 32 hierarchical : tensor<?x64xf32>, tensor<?x2xi64>, tensor<?x2xf32> -> tensor<?x64xf32>, tensor<?xi64>, !mf.dispatch
// CHECK-DAG:     %[[W1:.+]] = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w1.weight" {mf.shard = #mf.shard<dim = 0, mesh = "experts", axis = "ep", parts = 16>} : tensor<2x128x64xf32>
// CHECK-DAG:     %[[W2:.+]] = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w2.weight" {mf.shard = #mf.shard<dim = 0, mesh = "experts", axis = "ep", parts = 16>} : tensor<2x64x128xf32>
// CHECK-DAG:     %[[W3:.+]] = moe.param "model.layers.0.block_sparse_moe.experts.{e}.w3.weight" {mf.shard = #mf.shard<dim = 0, mesh = "experts", axis = "ep", parts = 16>} : tensor<2x128x64xf32>
// CHECK:         %[[OUT:.+]] = moe.expert_ffn %[[ROWS]], %[[LOCAL]], %[[W1]], %[[W2]], %[[W3]] : tensor<?x64xf32>, tensor<?xi64>, tensor<2x128x64xf32>, tensor<2x64x128xf32>, tensor<2x128x64xf32> -> tensor<?x64xf32>
// CHECK:         %[[T:.+]] = tensor.dim %[[X]], %{{.+}} : tensor<?x64xf32>
// CHECK-NEXT:    %[[Y:.+]] = mf.combine %[[R]], %[[OUT]] tokens %[[T]] : !mf.dispatch, tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NEXT:    arith.addf %{{.+}}, %[[Y]] : tensor<?x64xf32>
// CHECK-NOT:     tensor<32x128x64xf32>
// CHECK-NOT:     moe.experts
// CHECK:         moe.yield

// TP2xCP2xDP2xPP1 on one 8-GPU node: EP=8, 4 experts per GPU, flat.
// ONENODE-LABEL: moe.layer 0(
// ONENODE:         mf.dispatch {{.+}} on "experts" ["ep"] experts 32 flat :
// ONENODE:         "model.layers.0.block_sparse_moe.experts.{e}.w1.weight" {mf.shard = #mf.shard<dim = 0, mesh = "experts", axis = "ep", parts = 8>} : tensor<4x128x64xf32>
// ONENODE:         moe.expert_ffn {{.+}} tensor<4x128x64xf32>, tensor<4x64x128xf32>, tensor<4x128x64xf32> -> tensor<?x64xf32>
// ONENODE:         mf.combine
// ONENODE-NOT:     moe.experts

// mode=flat overrides the seed plan's hierarchical routing.
// FLAT-LABEL: moe.layer 0(
// FLAT:         mf.dispatch {{.+}} experts 32 flat :
// FLAT-NOT:     hierarchical

// mode=hierarchical on one node, and auto with PP and DP swapped (a stage on
// all four nodes).
// HIER-LABEL: moe.layer 0(
// HIER:         mf.dispatch {{.+}} on "experts" ["ep"] experts 32 hierarchical :
// HIER-NOT:     flat
// SWAP-LABEL: moe.layer 0(
// SWAP:         mf.dispatch {{.+}} on "experts" ["ep"] experts 32 hierarchical :
// SWAP:         {mf.shard = #mf.shard<dim = 0, mesh = "experts", axis = "ep", parts = 16>} : tensor<2x128x64xf32>

// Attention DP32 with EP32 over four nodes: one expert per GPU, hierarchical.
// DP32-LABEL: moe.layer 0(
// DP32:         mf.dispatch {{.+}} experts 32 hierarchical :
// DP32:         {mf.shard = #mf.shard<dim = 0, mesh = "experts", axis = "ep", parts = 32>} : tensor<1x128x64xf32>
// DP32:         moe.expert_ffn {{.+}} tensor<1x128x64xf32>, tensor<1x64x128xf32>, tensor<1x128x64xf32> -> tensor<?x64xf32>

// One rank: nothing to fold.
// EP1-LABEL: moe.layer 0(
// EP1-NOT:     mf.dispatch
// EP1:         moe.experts {{.+}} tensor<32x128x64xf32>
// EP1-NOT:     mf.combine

// 64 experts over EP16: 4 per GPU.
// E64-LABEL: moe.layer 0(
// E64:         mf.dispatch {{.+}} experts 64 hierarchical :
// E64:         {mf.shard = #mf.shard<dim = 0, mesh = "experts", axis = "ep", parts = 16>} : tensor<4x128x64xf32>
// E64:         moe.expert_ffn {{.+}} tensor<4x128x64xf32>, tensor<4x64x128xf32>, tensor<4x128x64xf32> -> tensor<?x64xf32>
// E64-NOT:     moe.experts

// Top-4 routing: the dispatch carries 4 choices per token.
// TOP4-LABEL: moe.layer 0(
// TOP4:         mf.dispatch {{.+}} experts 32 hierarchical : tensor<?x64xf32>, tensor<?x4xi64>, tensor<?x4xf32> ->

// EP16 does not divide 24 experts.
// DIVIDE: error: plan rule 'ep-experts': EP=16 must divide n_experts=24

// An unknown routing mode.
// MODE: error: mf-fold-experts: mode must be auto, flat or hierarchical, got 'ring'

// -----

// PP=3 stages on nodes of 6: stage 0's EP group (ranks 0-3) is on one node
// but stage 1's (4-7) spans two, so auto mode picks hierarchical.
// RUN: meshfold-import-hf %examples/seed/config.json --num-layers 3 -o %t.3.mlir
// RUN: meshfold-opt %t.3.mlir --mf-set-plan="tp=2 cp=2 dp=1 pp=3 gpus-per-node=6" --mf-fold-experts | FileCheck %s --check-prefix=SPAN
// SPAN-COUNT-3: mf.dispatch {{.*}} experts 32 hierarchical
// SPAN-NOT: flat
