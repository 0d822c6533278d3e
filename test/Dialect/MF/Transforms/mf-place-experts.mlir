// RUN: meshfold-opt %s --mf-place-experts="routing=%S/Inputs/routing-8.json" | FileCheck %s
// RUN: meshfold-opt %s --mf-place-experts="routing=%S/Inputs/routing-8.json redundant=4" | FileCheck %s --check-prefix=R4
// RUN: meshfold-opt %s --mf-place-experts="routing=%S/Inputs/routing-8.json redundant=4" --mf-fold-experts | FileCheck %s --check-prefix=FOLD

// -mf-place-experts: each layer's experts placed on the EP ranks from the
// rows a run routed to them (Inputs/routing-8.json: layer 0 has a hot
// expert 0 of 40 rows, the others 2-4; layer 1 is balanced). EP = 4, 8
// experts: 2 slots per rank, or 3 with 4 replicas. Errors are in
// mf-place-experts-invalid.mlir.

// Without replicas (LPT, heaviest first to the least loaded rank with a
// free slot): expert 0 (40 rows) ends up beside the last, lightest one (7);
// ranks 1-3 get 8, 8 and 6 rows. Balanced rows: experts e and e + 4.
// CHECK-LABEL: func.func @placed
// CHECK:         moe.layer 0(
// CHECK:           moe.experts {{.+}} {mf.placement = array<i64: 0, 7, 1, 4, 2, 5, 3, 6>}
// CHECK:         moe.layer 1(
// CHECK:           moe.experts {{.+}} {mf.placement = array<i64: 0, 4, 1, 5, 2, 6, 3, 7>}

// With 4 replicas: three more of expert 0 (one per rank, 10 rows each),
// then, with expert 0 on every rank, one more of expert 1 (the first of the
// heaviest others): every rank gets 16 rows.
// R4-LABEL: func.func @placed
// R4:         moe.layer 0(
// R4:           moe.experts {{.+}} {mf.placement = array<i64: 0, 1, 2, 0, 1, 3, 0, 4, 6, 0, 5, 7>}

// mf-fold-experts then gives each rank the weights of its 3 slots (mf.placed
// names the layer) and records the placements on the module.
// FOLD:       module attributes {
// FOLD-SAME:    mf.placements = {"0" = array<i64: 0, 1, 2, 0, 1, 3, 0, 4, 6, 0, 5, 7>, "1" = array<i64:
// FOLD:         moe.layer 0(
// FOLD:           mf.dispatch {{.+}} experts 8 flat
// FOLD:           moe.param "experts.{e}.w1.weight" {mf.placed = 0 : i64} : tensor<3x16x8xf32>
// FOLD:           moe.param "experts.{e}.w2.weight" {mf.placed = 0 : i64} : tensor<3x8x16xf32>
// FOLD:           moe.param "experts.{e}.w3.weight" {mf.placed = 0 : i64} : tensor<3x16x8xf32>
// FOLD:           moe.expert_ffn {{.+}} tensor<3x16x8xf32>, tensor<3x8x16xf32>, tensor<3x16x8xf32> -> tensor<?x8xf32>
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, dp = 2], experts = [ep = 4 : (tp, dp)]>,
    moe.model_info = {experts = 8 : i64, ffn = 16 : i64, head_dim = 2 : i64, heads = 4 : i64, hidden = 8 : i64, kv_heads = 2 : i64, layers = 2 : i64, top_k = 2 : i64, vocab = 16 : i64}} {
  func.func @placed(%x: tensor<?x8xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>) -> tensor<?x8xf32> {
    %h = moe.layer 0(%x, %w, %i) : (tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %b: tensor<?x2xf32>, %c: tensor<?x2xi64>):
      %w1 = moe.param "experts.{e}.w1.weight" : tensor<8x16x8xf32>
      %w2 = moe.param "experts.{e}.w2.weight" : tensor<8x8x16xf32>
      %w3 = moe.param "experts.{e}.w3.weight" : tensor<8x16x8xf32>
      %y = moe.experts %a, %b, %c, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x8xf32>, tensor<8x8x16xf32>, tensor<8x16x8xf32> -> tensor<?x8xf32>
      moe.yield %y : tensor<?x8xf32>
    }
    %o = moe.layer 1(%h, %w, %i) : (tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %b: tensor<?x2xf32>, %c: tensor<?x2xi64>):
      %w1 = moe.param "model.layers.1.experts.{e}.w1.weight" : tensor<8x16x8xf32>
      %w2 = moe.param "model.layers.1.experts.{e}.w2.weight" : tensor<8x8x16xf32>
      %w3 = moe.param "model.layers.1.experts.{e}.w3.weight" : tensor<8x16x8xf32>
      %y = moe.experts %a, %b, %c, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x8xf32>, tensor<8x8x16xf32>, tensor<8x16x8xf32> -> tensor<?x8xf32>
      moe.yield %y : tensor<?x8xf32>
    }
    return %o : tensor<?x8xf32>
  }
}
