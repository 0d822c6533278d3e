// RUN: meshfold-opt %s -split-input-file --mf-decode-kv-placement -verify-diagnostics

// A decode step takes the step's token ids and their positions.
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 4,
    attention = [tp = 1, cp = 2], experts = [ep = 2 : (tp, cp)]>} {
  // expected-error @+1 {{mf-decode-kv-placement: a decode step takes (token ids, positions)}}
  func.func @decode(%tokens: tensor<?xi64>) attributes {moe.decode_step} {
    return
  }
}

// -----

module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 4,
    attention = [tp = 1, cp = 2], experts = [ep = 2 : (tp, cp)]>} {
  // expected-error @+1 {{mf-decode-kv-placement: the step's token ids and positions must be 1-D with a dynamic row count}}
  func.func @decode(%tokens: tensor<1xi64>, %pos: tensor<1xi64>) attributes {moe.decode_step} {
    return
  }
}

// -----

// Tokens are placed along cp.
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 4,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  // expected-error @+1 {{mf-decode-kv-placement: the attention mesh needs a cp axis (size 1 is fine) to place tokens}}
  func.func @decode(%tokens: tensor<?xi64>, %pos: tensor<?xi64>) attributes {moe.decode_step} {
    return
  }
}
