// RUN: meshfold-opt %s -split-input-file --mf-fold-experts | FileCheck %s
// RUN: meshfold-opt %s -split-input-file --mf-fold-experts=mode=flat | FileCheck %s --check-prefix=FLAT
// RUN: meshfold-opt %s -split-input-file --mf-fold-experts=mode=hierarchical | FileCheck %s --check-prefix=HIER
// RUN: not meshfold-opt %s -split-input-file --mf-fold-experts=mode=ring 2>&1 | FileCheck %s --check-prefix=MODE

// -mf-fold-experts: expert parallelism on the folded expert mesh. Each rank
// of an EP group holds n_experts/EP experts (mf.shard on dim 0 of w1, w2,
// w3 over "experts" "ep"); moe.experts becomes mf.dispatch of the tokens to
// their experts' owners, moe.expert_ffn on the rows received and mf.combine
// back. In auto mode the dispatch is hierarchical when some EP group spans
// nodes, flat otherwise; mode=flat and mode=hierarchical force it. Inputs:
// d 8, ffn 16, top-2. Errors are in mf-fold-experts-invalid.mlir.

// An unknown routing mode is rejected.
// MODE: error: mf-fold-experts: mode must be auto, flat or hierarchical, got 'ring'

// EP4 over two nodes of 2: 8 experts, 2 per rank, hierarchical dispatch.
// CHECK-LABEL: func.func @two_nodes(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<?x8xf32>, %[[W:[^:]+]]: tensor<?x2xf32>, %[[I:[^:]+]]: tensor<?x2xi64>)
// CHECK-NOT:       tensor<8x16x8xf32>
// CHECK:           %[[ROWS:.+]], %[[LOCAL:.+]], %[[R:.+]] = mf.dispatch %[[X]], %[[I]], %[[W]] on "experts" ["ep"] experts 8 hierarchical : tensor<?x8xf32>, tensor<?x2xi64>, tensor<?x2xf32> -> tensor<?x8xf32>, tensor<?xi64>, !mf.dispatch
// CHECK-NEXT:      %[[W1:.+]] = moe.param "experts.{e}.w1.weight" {mf.shard = #mf.shard<dim = 0, mesh = "experts", axis = "ep", parts = 4>} : tensor<2x16x8xf32>
// CHECK-NEXT:      %[[W2:.+]] = moe.param "experts.{e}.w2.weight" {mf.shard = #mf.shard<dim = 0, mesh = "experts", axis = "ep", parts = 4>} : tensor<2x8x16xf32>
// CHECK-NEXT:      %[[W3:.+]] = moe.param "experts.{e}.w3.weight" {mf.shard = #mf.shard<dim = 0, mesh = "experts", axis = "ep", parts = 4>} : tensor<2x16x8xf32>
// CHECK-NEXT:      %[[OUT:.+]] = moe.expert_ffn %[[ROWS]], %[[LOCAL]], %[[W1]], %[[W2]], %[[W3]] : tensor<?x8xf32>, tensor<?xi64>, tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<2x16x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:      %[[C0:.+]] = arith.constant 0 : index
// CHECK-NEXT:      %[[T:.+]] = tensor.dim %[[X]], %[[C0]] : tensor<?x8xf32>
// CHECK-NEXT:      %[[Y:.+]] = mf.combine %[[R]], %[[OUT]] tokens %[[T]] : !mf.dispatch, tensor<?x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:      return %[[Y]]
// mode=flat overrides the choice.
// FLAT-LABEL: func.func @two_nodes(
// FLAT:         mf.dispatch {{.+}} experts 8 flat :
// HIER-LABEL: func.func @two_nodes(
// HIER:         mf.dispatch {{.+}} experts 8 hierarchical :
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 2,
    attention = [tp = 2, dp = 2], experts = [ep = 4 : (tp, dp)]>} {
  func.func @two_nodes(%x: tensor<?x8xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>) -> tensor<?x8xf32> {
    %w1 = moe.param "experts.{e}.w1.weight" : tensor<8x16x8xf32>
    %w2 = moe.param "experts.{e}.w2.weight" : tensor<8x8x16xf32>
    %w3 = moe.param "experts.{e}.w3.weight" : tensor<8x16x8xf32>
    %y = moe.experts %x, %w, %i, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x8xf32>, tensor<8x8x16xf32>, tensor<8x16x8xf32> -> tensor<?x8xf32>
    return %y : tensor<?x8xf32>
  }
}

// -----

// The same mesh on one node of 4: flat dispatch (mode=hierarchical forces
// the relay anyway). The experts of a layer are folded in place.
// CHECK-LABEL: func.func @one_node(
// CHECK:           moe.layer 0(
// CHECK:             %[[ROWS:.+]], %[[LOCAL:.+]], %[[R:.+]] = mf.dispatch {{.+}} on "experts" ["ep"] experts 8 flat :
// CHECK:             moe.expert_ffn %[[ROWS]], %[[LOCAL]], {{.+}} : tensor<?x8xf32>, tensor<?xi64>, tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<2x16x8xf32> -> tensor<?x8xf32>
// CHECK:             %[[Y:.+]] = mf.combine %[[R]],
// CHECK-NEXT:        moe.yield %[[Y]]
// FLAT-LABEL: func.func @one_node(
// FLAT:         mf.dispatch {{.+}} experts 8 flat :
// HIER-LABEL: func.func @one_node(
// HIER:         mf.dispatch {{.+}} experts 8 hierarchical :
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, dp = 2], experts = [ep = 4 : (tp, dp)]>} {
  func.func @one_node(%h: tensor<?x8xf32>, %p: tensor<?xi64>, %g: tensor<8x8xf32>) -> tensor<?x8xf32> {
    %0 = moe.layer 0(%h, %p, %g) : (tensor<?x8xf32>, tensor<?xi64>, tensor<8x8xf32>) -> tensor<?x8xf32> {
    ^bb0(%x: tensor<?x8xf32>, %pos: tensor<?xi64>, %gate: tensor<8x8xf32>):
      %w, %i = moe.router %x, %gate {renormalize, top_k = 2 : i64} : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
      %w1 = moe.param "experts.{e}.w1.weight" : tensor<8x16x8xf32>
      %w2 = moe.param "experts.{e}.w2.weight" : tensor<8x8x16xf32>
      %w3 = moe.param "experts.{e}.w3.weight" : tensor<8x16x8xf32>
      %y = moe.experts %x, %w, %i, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x8xf32>, tensor<8x8x16xf32>, tensor<8x16x8xf32> -> tensor<?x8xf32>
      moe.yield %y : tensor<?x8xf32>
    }
    return %0 : tensor<?x8xf32>
  }
}

// -----

// PP=3 on nodes of 3: stage 0's EP group (ranks 0, 1) is on one node but
// stage 1's (ranks 2, 3) spans two, so auto picks hierarchical for all.
// CHECK-LABEL: func.func @stage_spans_nodes(
// CHECK:           mf.dispatch {{.+}} on "experts" ["ep"] experts 4 hierarchical :
// CHECK:           moe.param "experts.{e}.w1.weight" {mf.shard = #mf.shard<dim = 0, mesh = "experts", axis = "ep", parts = 2>} : tensor<2x16x8xf32>
// FLAT-LABEL: func.func @stage_spans_nodes(
// FLAT:         mf.dispatch {{.+}} experts 4 flat :
module attributes {mf.plan = #mf.plan<devices = 6, gpus_per_node = 3,
    attention = [tp = 2, pp = 3], experts = [ep = 2 : (tp), pp = 3 : (pp)]>} {
  func.func @stage_spans_nodes(%x: tensor<?x8xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>) -> tensor<?x8xf32> {
    %w1 = moe.param "experts.{e}.w1.weight" : tensor<4x16x8xf32>
    %w2 = moe.param "experts.{e}.w2.weight" : tensor<4x8x16xf32>
    %w3 = moe.param "experts.{e}.w3.weight" : tensor<4x16x8xf32>
    %y = moe.experts %x, %w, %i, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32> -> tensor<?x8xf32>
    return %y : tensor<?x8xf32>
  }
}

// -----

// Attention DP4 with EP4 on one node, top-1 routing: 1 expert per rank and
// one choice per token.
// CHECK-LABEL: func.func @dp4_top1(
// CHECK:           mf.dispatch {{.+}} experts 4 flat : tensor<?x8xf32>, tensor<?x1xi64>, tensor<?x1xf32> -> tensor<?x8xf32>, tensor<?xi64>, !mf.dispatch
// CHECK:           moe.expert_ffn {{.+}} : tensor<?x8xf32>, tensor<?xi64>, tensor<1x16x8xf32>, tensor<1x8x16xf32>, tensor<1x16x8xf32> -> tensor<?x8xf32>
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 8,
    attention = [dp = 4], experts = [ep = 4 : (dp)]>} {
  func.func @dp4_top1(%x: tensor<?x8xf32>, %w: tensor<?x1xf32>, %i: tensor<?x1xi64>) -> tensor<?x8xf32> {
    %w1 = moe.param "experts.{e}.w1.weight" : tensor<4x16x8xf32>
    %w2 = moe.param "experts.{e}.w2.weight" : tensor<4x8x16xf32>
    %w3 = moe.param "experts.{e}.w3.weight" : tensor<4x16x8xf32>
    %y = moe.experts %x, %w, %i, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?x1xf32>, tensor<?x1xi64>, tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32> -> tensor<?x8xf32>
    return %y : tensor<?x8xf32>
  }
}

// -----

// EP=1 (TP1 x PP2): every rank holds all experts; nothing to fold, in any
// mode.
// CHECK-LABEL: func.func @ep1(
// CHECK-NOT:       mf.dispatch
// CHECK:           moe.experts {{.+}} tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32> -> tensor<?x8xf32>
// FLAT-LABEL: func.func @ep1(
// FLAT-NOT:     mf.dispatch
// FLAT:         moe.experts
// HIER-LABEL: func.func @ep1(
// HIER-NOT:     mf.dispatch
// HIER:         moe.experts
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 1, pp = 2], experts = [ep = 1 : (tp), pp = 2 : (pp)]>} {
  func.func @ep1(%x: tensor<?x8xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>) -> tensor<?x8xf32> {
    %w1 = moe.param "experts.{e}.w1.weight" : tensor<4x16x8xf32>
    %w2 = moe.param "experts.{e}.w2.weight" : tensor<4x8x16xf32>
    %w3 = moe.param "experts.{e}.w3.weight" : tensor<4x16x8xf32>
    %y = moe.experts %x, %w, %i, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32> -> tensor<?x8xf32>
    return %y : tensor<?x8xf32>
  }
}
