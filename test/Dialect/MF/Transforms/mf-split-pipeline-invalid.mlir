// RUN: meshfold-opt %s -split-input-file --mf-split-pipeline -verify-diagnostics

// -mf-split-pipeline needs a plan, an entry function that returns nothing,
// and a number of top-level layers that PP divides.

// Without a plan there are no stages.
// expected-error @+1 {{mf-split-pipeline: the module has no plan (set mf.plan or use the mf-partition options)}}
module {
  func.func @prefill(%tok: tensor<?xi64>) attributes {llvm.emit_c_interface} {
    %pos = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %x = moe.embed %e, %tok : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    %h0 = moe.layer 0(%x, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
      %r = arith.addf %a, %a : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    %h1 = moe.layer 1(%h0, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
      %r = arith.addf %a, %a : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = moe.rms_norm %h1, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %w = moe.param "lm_head.weight" : tensor<16x8xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %t = tensor.dim %tok, %c0 : tensor<?xi64>
    %last = arith.subi %t, %c1 : index
    %l = moe.lm_head %n, %w, %pos, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l : tensor<16xf32>
    return
  }
}

// -----

// pp-layers: PP=2 does not divide 3 layers.
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 1, pp = 2], experts = [ep = 1 : (tp), pp = 2 : (pp)]>} {
  // expected-error @+1 {{plan rule 'pp-layers': PP=2 must divide the number of layers (3)}}
  func.func @prefill(%tok: tensor<?xi64>) attributes {llvm.emit_c_interface} {
    %pos = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %x = moe.embed %e, %tok : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    %h0 = moe.layer 0(%x, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
      %r = arith.addf %a, %a : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    %h1 = moe.layer 1(%h0, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
      %r = arith.addf %a, %a : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    %h2 = moe.layer 2(%h1, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
      %r = arith.addf %a, %a : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = moe.rms_norm %h2, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %w = moe.param "lm_head.weight" : tensor<16x8xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %t = tensor.dim %tok, %c0 : tensor<?xi64>
    %last = arith.subi %t, %c1 : index
    %l = moe.lm_head %n, %w, %pos, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l : tensor<16xf32>
    return
  }
}

// -----

// pp-layers: an entry without layers cannot be split.
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 1, pp = 2], experts = [ep = 1 : (tp), pp = 2 : (pp)]>} {
  // expected-error @+1 {{plan rule 'pp-layers': PP=2 must divide the number of layers (0)}}
  func.func @prefill(%tok: tensor<?xi64>) attributes {llvm.emit_c_interface} {
    %pos = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %x = moe.embed %e, %tok : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = moe.rms_norm %x, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %w = moe.param "lm_head.weight" : tensor<16x8xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %t = tensor.dim %tok, %c0 : tensor<?xi64>
    %last = arith.subi %t, %c1 : index
    %l = moe.lm_head %n, %w, %pos, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l : tensor<16xf32>
    return
  }
}

// -----

// The entry's outputs are its effects (KV cache, logits): it returns nothing.
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 1, pp = 2], experts = [ep = 1 : (tp), pp = 2 : (pp)]>} {
  // expected-error @+1 {{mf-split-pipeline: the entry must return nothing (its outputs are moe.kv_cache and moe.logits)}}
  func.func @prefill(%tok: tensor<?xi64>) -> tensor<16xf32> attributes {llvm.emit_c_interface} {
    %pos = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %x = moe.embed %e, %tok : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    %h0 = moe.layer 0(%x, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
      %r = arith.addf %a, %a : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    %h1 = moe.layer 1(%h0, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
      %r = arith.addf %a, %a : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = moe.rms_norm %h1, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %w = moe.param "lm_head.weight" : tensor<16x8xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %t = tensor.dim %tok, %c0 : tensor<?xi64>
    %last = arith.subi %t, %c1 : index
    %l = moe.lm_head %n, %w, %pos, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l : tensor<16xf32>
    return %l : tensor<16xf32>
  }
}

// -----

// There is no entry function to split.
// expected-error @+1 {{mf-split-pipeline: no entry function @prefill}}
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 1, pp = 2], experts = [ep = 1 : (tp), pp = 2 : (pp)]>} {
  func.func @decode(%tok: tensor<?xi64>) attributes {llvm.emit_c_interface} {
    %pos = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %x = moe.embed %e, %tok : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    %h0 = moe.layer 0(%x, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
      %r = arith.addf %a, %a : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    %h1 = moe.layer 1(%h0, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
      %r = arith.addf %a, %a : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = moe.rms_norm %h1, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %w = moe.param "lm_head.weight" : tensor<16x8xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %t = tensor.dim %tok, %c0 : tensor<?xi64>
    %last = arith.subi %t, %c1 : index
    %l = moe.lm_head %n, %w, %pos, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l : tensor<16xf32>
    return
  }
}
