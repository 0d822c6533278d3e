// RUN: meshfold-opt %s -split-input-file --mf-decode-kv-placement | FileCheck %s
// RUN: meshfold-opt %s -split-input-file --mf-decode-kv-placement=by-place | FileCheck %s --check-prefix=PLACE

// With by-place (a batch-invariant program) each row goes to the CP rank of
// its own place.
// PLACE-LABEL: func.func @decode(
// PLACE: mf.step_rows %{{.+}} on "attention" "cp" pad_to 2 by_place : tensor<?xi64> -> tensor<?xi64>

// -mf-decode-kv-placement: in a decode step (moe.decode_step) the step's
// rows are dealt to the CP ranks round-robin by position (mf.step_rows,
// padded to a multiple of TP); the rank's positions and token ids are taken
// from the step's (padding: token 0, a position past every real one). Every
// use of the positions follows the rank's, but the LM head's last position,
// which stays the step's (tensor.dim / tensor.extract).
// CHECK-LABEL: func.func @decode(
// CHECK-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>, %[[POS:[^:]+]]: tensor<?xi64>)
// CHECK-NEXT:      %[[ROWS:.+]] = mf.step_rows %[[POS]] on "attention" "cp" pad_to 2 : tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:      %[[MINE:.+]] = mf.take %[[POS]][%[[ROWS]]] fill 1073741824 : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:      %[[IDS:.+]] = mf.take %[[TOK]][%[[ROWS]]] fill 0 : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
// CHECK:           moe.embed %{{.+}}, %[[IDS]]
// CHECK:           moe.rope %{{.+}}, %[[MINE]]
// CHECK:           %[[N:.+]] = tensor.dim %[[POS]], %{{.+}}
// CHECK:           tensor.extract %[[POS]][%{{.+}}]
// CHECK:           moe.lm_head %{{.+}}, %{{.+}}, %[[MINE]], %{{.+}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @decode(%tokens: tensor<?xi64>, %pos: tensor<?xi64>) attributes {moe.decode_step} {
    %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %h = moe.embed %e, %tokens : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = tensor.dim %h, %c0 : tensor<?x8xf32>
    %q = tensor.expand_shape %h [[0], [1, 2]] output_shape [%rows, 2, 4] : tensor<?x8xf32> into tensor<?x2x4xf32>
    %r = moe.rope %q, %pos {theta = 1.0e+06 : f32} : tensor<?x2x4xf32>, tensor<?xi64> -> tensor<?x2x4xf32>
    %n = tensor.dim %pos, %c0 : tensor<?xi64>
    %lastRow = arith.subi %n, %c1 : index
    %lastPos = tensor.extract %pos[%lastRow] : tensor<?xi64>
    %last = arith.index_cast %lastPos : i64 to index
    %w = moe.param "lm_head.weight" : tensor<16x8xf32>
    %logits = moe.lm_head %h, %w, %pos, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %logits : tensor<16xf32>
    %flat = tensor.collapse_shape %r [[0], [1, 2]] : tensor<?x2x4xf32> into tensor<?x8xf32>
    %l2 = moe.lm_head %flat, %w, %pos, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l2 : tensor<16xf32>
    return
  }
}

// -----

// Prefill (not a decode step) is mf-zigzag-cp's; and on one device there is
// nothing to deal.
// CHECK-LABEL: func.func @prefill(
// CHECK-NOT:       mf.step_rows
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @prefill(%tokens: tensor<?xi64>, %pos: tensor<?xi64>, %q: tensor<?x2x4xf32>) -> tensor<?x2x4xf32> {
    %r = moe.rope %q, %pos {theta = 1.0e+06 : f32} : tensor<?x2x4xf32>, tensor<?xi64> -> tensor<?x2x4xf32>
    return %r : tensor<?x2x4xf32>
  }
}

// -----

// CHECK-LABEL: func.func @one_device(
// CHECK-NOT:       mf.step_rows
module attributes {mf.plan = #mf.plan<devices = 1, gpus_per_node = 1,
    attention = [tp = 1, cp = 1], experts = [ep = 1 : (tp, cp)]>} {
  func.func @one_device(%tokens: tensor<?xi64>, %pos: tensor<?xi64>, %q: tensor<?x2x4xf32>) -> tensor<?x2x4xf32> attributes {moe.decode_step} {
    %r = moe.rope %q, %pos {theta = 1.0e+06 : f32} : tensor<?x2x4xf32>, tensor<?xi64> -> tensor<?x2x4xf32>
    return %r : tensor<?x2x4xf32>
  }
}
