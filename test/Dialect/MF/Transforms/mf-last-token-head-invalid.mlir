// RUN: meshfold-opt %s -split-input-file --mf-last-token-head -verify-diagnostics

// -mf-last-token-head needs a plan, the chain rms_norm -> lm_head -> logits,
// and a moe.param LM head whose vocab TP divides.

// Without a plan there is no TP group.
// expected-error @+1 {{mf-last-token-head: the module has no plan (set mf.plan or use the mf-partition options)}}
module {
  func.func @no_plan(%h: tensor<?x8xf32>, %pos: tensor<?xi64>, %last: index) {
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = moe.rms_norm %h, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %w = moe.param "lm_head.weight" : tensor<16x8xf32>
    %l = moe.lm_head %n, %w, %pos, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l : tensor<16xf32>
    return
  }
}

// -----

// The head must read a moe.rms_norm.
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @no_norm(%h: tensor<?x8xf32>, %pos: tensor<?xi64>, %last: index) {
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = arith.addf %h, %h : tensor<?x8xf32>
    %w = moe.param "lm_head.weight" : tensor<16x8xf32>
    // expected-error @+1 {{mf-last-token-head: expected rms_norm -> lm_head -> logits}}
    %l = moe.lm_head %n, %w, %pos, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l : tensor<16xf32>
    return
  }
}

// -----

// The head's only user must be moe.logits.
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @two_uses(%h: tensor<?x8xf32>, %pos: tensor<?xi64>, %last: index) -> tensor<16xf32> {
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = moe.rms_norm %h, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %w = moe.param "lm_head.weight" : tensor<16x8xf32>
    // expected-error @+1 {{mf-last-token-head: expected rms_norm -> lm_head -> logits}}
    %l = moe.lm_head %n, %w, %pos, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l : tensor<16xf32>
    return %l : tensor<16xf32>
  }
}

// -----

// TP=4 does not divide a vocab of 10.
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
  func.func @vocab(%h: tensor<?x8xf32>, %pos: tensor<?xi64>, %last: index) {
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = moe.rms_norm %h, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %w = moe.param "lm_head.weight" : tensor<10x8xf32>
    // expected-error @+1 {{mf-last-token-head: the LM head weight must be a moe.param whose vocab (10) TP=4 divides}}
    %l = moe.lm_head %n, %w, %pos, %last : tensor<?x8xf32>, tensor<10x8xf32>, tensor<?xi64> -> tensor<10xf32>
    moe.logits %l : tensor<10xf32>
    return
  }
}

// -----

// The head weight must be a moe.param to be sliced.
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @not_param(%h: tensor<?x8xf32>, %pos: tensor<?xi64>, %last: index, %w: tensor<16x8xf32>) {
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = moe.rms_norm %h, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    // expected-error @+1 {{mf-last-token-head: the LM head weight must be a moe.param whose vocab (16) TP=2 divides}}
    %l = moe.lm_head %n, %w, %pos, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l : tensor<16xf32>
    return
  }
}
