// RUN: meshfold-opt %s -split-input-file --mf-step-head-rows -verify-diagnostics

// The step's logits come from rms_norm -> linear of a moe.param: the rows
// are taken before the norm.
func.func @no_norm(%h: tensor<?x8xf32>, %pos: tensor<?xi64>) attributes {moe.decode_step} {
  %w = moe.param "lm_head.weight" : tensor<16x8xf32>
  %l = moe.linear %h, %w : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<?x16xf32>
  // expected-error @+1 {{mf-step-head-rows: expected rms_norm -> linear (a moe.param) -> step_logits}}
  moe.step_logits %l, %pos : tensor<?x16xf32>, tensor<?xi64>
  return
}

// -----

func.func @not_param(%h: tensor<?x8xf32>, %pos: tensor<?xi64>, %w: tensor<16x8xf32>) attributes {moe.decode_step} {
  %nw = moe.param "model.norm.weight" : tensor<8xf32>
  %n = moe.rms_norm %h, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  %l = moe.linear %n, %w : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<?x16xf32>
  // expected-error @+1 {{mf-step-head-rows: expected rms_norm -> linear (a moe.param) -> step_logits}}
  moe.step_logits %l, %pos : tensor<?x16xf32>, tensor<?xi64>
  return
}

// -----

// The logits feed the step's output only.
func.func @shared(%h: tensor<?x8xf32>, %pos: tensor<?xi64>) -> tensor<?x16xf32> attributes {moe.decode_step} {
  %nw = moe.param "model.norm.weight" : tensor<8xf32>
  %n = moe.rms_norm %h, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  %w = moe.param "lm_head.weight" : tensor<16x8xf32>
  %l = moe.linear %n, %w : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<?x16xf32>
  // expected-error @+1 {{mf-step-head-rows: expected rms_norm -> linear (a moe.param) -> step_logits}}
  moe.step_logits %l, %pos : tensor<?x16xf32>, tensor<?xi64>
  return %l : tensor<?x16xf32>
}
