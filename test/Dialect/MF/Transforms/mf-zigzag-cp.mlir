// RUN: meshfold-opt %s -split-input-file --mf-zigzag-cp | FileCheck %s

// -mf-zigzag-cp gives each CP rank its zigzag chunks of the prompt:
// moe.positions becomes mf.zigzag_positions (padded to 2*CP*TP) of the
// prompt length, the embedding reads the rank's tokens through mf.take, and
// every other use of the positions gets the rank's global positions. Errors
// are in mf-zigzag-cp-invalid.mlir.

// CP=2, TP=2: pad_to 2*2*2 = 8. Only the embedding's use of the tokens is
// replaced; the prompt length (used for the last position) still reads them.
// CHECK-LABEL: func.func @cp2_tp2(
// CHECK-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>, %[[TABLE:[^:]+]]: tensor<16x8xf32>)
// CHECK-NOT:       moe.positions
// CHECK:           %[[C0:.+]] = arith.constant 0 : index
// CHECK-NEXT:      %[[T:.+]] = tensor.dim %[[TOK]], %[[C0]] : tensor<?xi64>
// CHECK-NEXT:      %[[ZZ:.+]] = mf.zigzag_positions %[[T]] on "attention" "cp" pad_to 8 : tensor<?xi64>
// CHECK-NEXT:      %[[MINE:.+]] = mf.take %[[TOK]][%[[ZZ]]] fill 0 : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:      %[[EMB:.+]] = moe.embed %[[TABLE]], %[[MINE]] : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
// CHECK:           %[[LEN:.+]] = tensor.dim %[[TOK]], %{{.+}} : tensor<?xi64>
// CHECK-NEXT:      return %[[EMB]], %[[ZZ]], %[[LEN]]
module attributes {mf.plan = #mf.plan<devices = 8, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 2], experts = [ep = 8 : (tp, cp, dp)]>} {
  func.func @cp2_tp2(%tok: tensor<?xi64>, %table: tensor<16x8xf32>) -> (tensor<?x8xf32>, tensor<?xi64>, index) {
    %pos = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    %x = moe.embed %table, %tok : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    %c0 = arith.constant 0 : index
    %t = tensor.dim %tok, %c0 : tensor<?xi64>
    return %x, %pos, %t : tensor<?x8xf32>, tensor<?xi64>, index
  }
}

// -----

// CP=4, TP=1: a real ring of 8 chunks, pad_to 2*4*1 = 8.
// CHECK-LABEL: func.func @cp4(
// CHECK-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>,
// CHECK:           %[[ZZ:.+]] = mf.zigzag_positions %{{.+}} on "attention" "cp" pad_to 8 : tensor<?xi64>
// CHECK-NEXT:      %[[MINE:.+]] = mf.take %[[TOK]][%[[ZZ]]] fill 0
// CHECK-NEXT:      moe.embed %{{.+}}, %[[MINE]] :
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [cp = 4], experts = [ep = 4 : (cp)]>} {
  func.func @cp4(%tok: tensor<?xi64>, %table: tensor<16x8xf32>) -> (tensor<?x8xf32>, tensor<?xi64>) {
    %pos = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    %x = moe.embed %table, %tok : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    return %x, %pos : tensor<?x8xf32>, tensor<?xi64>
  }
}

// -----

// CP=1, TP=2: sequence parallelism still needs the prompt cut into chunks
// that TP divides, pad_to 2*1*2 = 4.
// CHECK-LABEL: func.func @cp1_tp2(
// CHECK:           %[[ZZ:.+]] = mf.zigzag_positions %{{.+}} on "attention" "cp" pad_to 4 : tensor<?xi64>
// CHECK-NEXT:      mf.take %{{.+}}[%[[ZZ]]] fill 0
// CHECK-NOT:       moe.positions
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2, cp = 1], experts = [ep = 2 : (tp, cp)]>} {
  func.func @cp1_tp2(%tok: tensor<?xi64>, %table: tensor<16x8xf32>) -> (tensor<?x8xf32>, tensor<?xi64>) {
    %pos = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    %x = moe.embed %table, %tok : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    return %x, %pos : tensor<?x8xf32>, tensor<?xi64>
  }
}

// -----

// CP=1 and TP=1 (DP only): every rank holds the whole prompt; nothing changes.
// CHECK-LABEL: func.func @dp_only(
// CHECK-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>,
// CHECK-NEXT:      %[[POS:.+]] = moe.positions %[[TOK]] : tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:      %[[EMB:.+]] = moe.embed %{{.+}}, %[[TOK]] :
// CHECK-NEXT:      return %[[EMB]], %[[POS]]
// CHECK-NOT:       mf.zigzag_positions
// CHECK-NOT:       mf.take
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [dp = 4], experts = [ep = 4 : (dp)]>} {
  func.func @dp_only(%tok: tensor<?xi64>, %table: tensor<16x8xf32>) -> (tensor<?x8xf32>, tensor<?xi64>) {
    %pos = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    %x = moe.embed %table, %tok : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    return %x, %pos : tensor<?x8xf32>, tensor<?xi64>
  }
}

// -----

// Positions used inside a layer (RoPE, the KV cache, attention) get the
// rank's global positions through the layer's operand. Each function's
// moe.positions is rewritten; the mf.take is built even where no embedding
// reads it.
// CHECK-LABEL: func.func @layer(
// CHECK:           %[[ZZ:.+]] = mf.zigzag_positions
// CHECK:           moe.layer 0(%{{.+}}, %[[ZZ]]) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
// CHECK-NOT:       moe.positions
// CHECK-LABEL: func.func @other(
// CHECK:           %[[ZZ2:.+]] = mf.zigzag_positions %{{.+}} on "attention" "cp" pad_to 4
// CHECK-NEXT:      mf.take %{{.+}}[%[[ZZ2]]] fill 0
// CHECK-NEXT:      return %[[ZZ2]]
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [cp = 2], experts = [ep = 2 : (cp)]>} {
  func.func @layer(%tok: tensor<?xi64>, %table: tensor<16x8xf32>) -> tensor<?x8xf32> {
    %pos = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    %x = moe.embed %table, %tok : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    %h = moe.layer 0(%x, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
      moe.yield %a : tensor<?x8xf32>
    }
    return %h : tensor<?x8xf32>
  }
  func.func @other(%tok: tensor<?xi64>) -> tensor<?xi64> {
    %pos = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    return %pos : tensor<?xi64>
  }
}
