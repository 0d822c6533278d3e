// RUN: meshfold-opt %s -split-input-file --mf-step-head-rows | FileCheck %s

// -mf-step-head-rows: a decode step's head takes the rows that choose a
// token (moe.step_head_rows of the step's positions) before the final norm;
// the norm, the LM head and moe.step_logits run on those rows and their
// positions. The head is rebuilt at the step's logits, where the positions
// are defined. Inputs: the final norm, LM head and step logits (d 8, vocab
// 16). Errors are in mf-step-head-rows-invalid.mlir.

// One device.
// CHECK-LABEL: func.func @step(
// CHECK-SAME:      %[[H:[^:]+]]: tensor<?x8xf32>, %{{[^:]+}}: tensor<4xi64>)
// CHECK-NEXT:      %[[NW:.+]] = moe.param "model.norm.weight" : tensor<8xf32>
// CHECK-NEXT:      %[[W:.+]] = moe.param "lm_head.weight" : tensor<16x8xf32>
// CHECK-NEXT:      %[[POS:.+]] = tensor.cast
// CHECK-NEXT:      %[[PICK:.+]] = moe.step_head_rows %[[POS]] : tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:      %[[TAKEN:.+]] = moe.take_rows %[[H]], %[[PICK]] : tensor<?x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
// CHECK-NEXT:      %[[TAKENPOS:.+]] = moe.take_rows %[[POS]], %[[PICK]] : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:      %[[N:.+]] = moe.rms_norm %[[TAKEN]], %[[NW]] {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:      %[[L:.+]] = moe.linear %[[N]], %[[W]] : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<?x16xf32>
// CHECK-NEXT:      moe.step_logits %[[L]], %[[TAKENPOS]] : tensor<?x16xf32>, tensor<?xi64>
// CHECK-NEXT:      return
func.func @step(%h: tensor<?x8xf32>, %p: tensor<4xi64>) attributes {moe.decode_step} {
  %nw = moe.param "model.norm.weight" : tensor<8xf32>
  %n = moe.rms_norm %h, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  %w = moe.param "lm_head.weight" : tensor<16x8xf32>
  %l = moe.linear %n, %w : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<?x16xf32>
  %pos = tensor.cast %p : tensor<4xi64> to tensor<?xi64>
  moe.step_logits %l, %pos : tensor<?x16xf32>, tensor<?xi64>
  return
}

// -----

// A partitioned step (TP = 1) keeps the rank's `if`: the CP rows' holder
// records them.
// CHECK-LABEL: func.func @step_valid(
// CHECK-SAME:      %[[H:[^:]+]]: tensor<?x8xf32>, %[[POS:[^:]+]]: tensor<?xi64>, %[[V:[^:]+]]: i1)
// CHECK:           %[[PICK:.+]] = moe.step_head_rows %[[POS]]
// CHECK-NEXT:      %[[TAKEN:.+]] = moe.take_rows %[[H]], %[[PICK]]
// CHECK-NEXT:      %[[TAKENPOS:.+]] = moe.take_rows %[[POS]], %[[PICK]]
// CHECK:           moe.step_logits %{{.+}}, %[[TAKENPOS]] if %[[V]] : tensor<?x16xf32>, tensor<?xi64>
func.func @step_valid(%h: tensor<?x8xf32>, %pos: tensor<?xi64>, %valid: i1) attributes {moe.decode_step} {
  %nw = moe.param "model.norm.weight" : tensor<8xf32>
  %n = moe.rms_norm %h, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  %w = moe.param "lm_head.weight" : tensor<16x8xf32>
  %l = moe.linear %n, %w : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<?x16xf32>
  moe.step_logits %l, %pos if %valid : tensor<?x16xf32>, tensor<?xi64>
  return
}

// -----

// A head whose rows are taken already (a TP group's, split by
// mf-last-token-head) is left as it is.
// CHECK-LABEL: func.func @taken(
// CHECK-COUNT-1:   moe.step_head_rows
// CHECK-NOT:       moe.step_head_rows
func.func @taken(%h: tensor<?x8xf32>, %pos: tensor<?xi64>) attributes {moe.decode_step} {
  %rows = moe.step_head_rows %pos : tensor<?xi64> -> tensor<?xi64>
  %x = moe.take_rows %h, %rows : tensor<?x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
  %p = moe.take_rows %pos, %rows : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
  %w = moe.param "lm_head.weight" : tensor<16x8xf32>
  %l = moe.linear %x, %w : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<?x16xf32>
  moe.step_logits %l, %p : tensor<?x16xf32>, tensor<?xi64>
  return
}
