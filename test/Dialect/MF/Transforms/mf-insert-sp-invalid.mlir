// RUN: meshfold-opt %s -split-input-file --mf-insert-sp -verify-diagnostics

// -mf-insert-sp needs a plan, dynamic token dims (token counts change per
// rank), layers that take (residual, positions) with one positions value,
// and Q, K and V that read one input.

// Without a plan there is no TP group.
// expected-error @+1 {{mf-insert-sp: the module has no plan (set mf.plan or use the mf-partition options)}}
module {
  func.func @no_plan(%zz: tensor<?xi64>, %x: tensor<?x8xf32>) -> tensor<?x8xf32> {
    %h = moe.layer 0(%x, %zz) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a0: tensor<?x8xf32>, %p0: tensor<?xi64>):
      %c0_0 = arith.constant 0 : index
      %t = tensor.dim %a0, %c0_0 : tensor<?x8xf32>
      %wq = moe.param "q.weight" : tensor<8x8xf32>
      %ql = moe.linear %a0, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
      %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 4, 2] : tensor<?x8xf32> into tensor<?x4x2xf32>
      %wk = moe.param "k.weight" : tensor<4x8xf32>
      %kl = moe.linear %a0, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
      %wv = moe.param "v.weight" : tensor<4x8xf32>
      %vl = moe.linear %a0, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
      %q = moe.rope %qe, %p0 {theta = 1.000000e+04 : f32} : tensor<?x4x2xf32>, tensor<?xi64> -> tensor<?x4x2xf32>
      %k = moe.rope %ke, %p0 {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
      %att = moe.attention %q, %k, %ve, %p0, %p0 {scale = 0.707106769 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
      %f = tensor.collapse_shape %att [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
      %wo = moe.param "o.weight" : tensor<8x8xf32>
      %o = moe.linear %f, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
      %r = arith.addf %a0, %o : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    return %h : tensor<?x8xf32>
  }
}

// -----

// Static token dims cannot be cut per rank.
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  // expected-error @+1 {{mf-insert-sp: the token dimension must be dynamic}}
  func.func @static_tokens(%zz: tensor<4xi64>, %x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %h = moe.layer 0(%x, %zz) : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<4x8xf32> {
    ^bb0(%a0: tensor<4x8xf32>, %p0: tensor<4xi64>):
      %wq = moe.param "q.weight" : tensor<8x8xf32>
      %ql = moe.linear %a0, %wq : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
      %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [4, 4, 2] : tensor<4x8xf32> into tensor<4x4x2xf32>
      %wk = moe.param "k.weight" : tensor<4x8xf32>
      %kl = moe.linear %a0, %wk : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x4xf32>
      %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [4, 2, 2] : tensor<4x4xf32> into tensor<4x2x2xf32>
      %wv = moe.param "v.weight" : tensor<4x8xf32>
      %vl = moe.linear %a0, %wv : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x4xf32>
      %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [4, 2, 2] : tensor<4x4xf32> into tensor<4x2x2xf32>
      %q = moe.rope %qe, %p0 {theta = 1.000000e+04 : f32} : tensor<4x4x2xf32>, tensor<4xi64> -> tensor<4x4x2xf32>
      %k = moe.rope %ke, %p0 {theta = 1.000000e+04 : f32} : tensor<4x2x2xf32>, tensor<4xi64> -> tensor<4x2x2xf32>
      %att = moe.attention %q, %k, %ve, %p0, %p0 {scale = 0.707106769 : f32} : tensor<4x4x2xf32>, tensor<4x2x2xf32>, tensor<4x2x2xf32>, tensor<4xi64>, tensor<4xi64> -> tensor<4x4x2xf32>
      %f = tensor.collapse_shape %att [[0], [1, 2]] : tensor<4x4x2xf32> into tensor<4x8xf32>
      %wo = moe.param "o.weight" : tensor<8x8xf32>
      %o = moe.linear %f, %wo : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
      %r = arith.addf %a0, %o : tensor<4x8xf32>
      moe.yield %r : tensor<4x8xf32>
    }
    return %h : tensor<4x8xf32>
  }
}

// -----

// All layers must share one positions value.
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @two_positions(%zz: tensor<?xi64>, %other: tensor<?xi64>, %x: tensor<?x8xf32>) -> tensor<?x8xf32> {
    %h0 = moe.layer 0(%x, %zz) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a0: tensor<?x8xf32>, %p0: tensor<?xi64>):
      %c0_0 = arith.constant 0 : index
      %t = tensor.dim %a0, %c0_0 : tensor<?x8xf32>
      %wq = moe.param "q.weight" : tensor<8x8xf32>
      %ql = moe.linear %a0, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
      %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 4, 2] : tensor<?x8xf32> into tensor<?x4x2xf32>
      %wk = moe.param "k.weight" : tensor<4x8xf32>
      %kl = moe.linear %a0, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
      %wv = moe.param "v.weight" : tensor<4x8xf32>
      %vl = moe.linear %a0, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
      %q = moe.rope %qe, %p0 {theta = 1.000000e+04 : f32} : tensor<?x4x2xf32>, tensor<?xi64> -> tensor<?x4x2xf32>
      %k = moe.rope %ke, %p0 {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
      %att = moe.attention %q, %k, %ve, %p0, %p0 {scale = 0.707106769 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
      %f = tensor.collapse_shape %att [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
      %wo = moe.param "o.weight" : tensor<8x8xf32>
      %o = moe.linear %f, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
      %r = arith.addf %a0, %o : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    // expected-error @+1 {{mf-insert-sp: every layer must take (residual, positions) with one positions value}}
    %h = moe.layer 1(%h0, %other) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a1: tensor<?x8xf32>, %p1: tensor<?xi64>):
      %c0_1 = arith.constant 0 : index
      %t = tensor.dim %a1, %c0_1 : tensor<?x8xf32>
      %wq = moe.param "q.weight" : tensor<8x8xf32>
      %ql = moe.linear %a1, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
      %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 4, 2] : tensor<?x8xf32> into tensor<?x4x2xf32>
      %wk = moe.param "k.weight" : tensor<4x8xf32>
      %kl = moe.linear %a1, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
      %wv = moe.param "v.weight" : tensor<4x8xf32>
      %vl = moe.linear %a1, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
      %q = moe.rope %qe, %p1 {theta = 1.000000e+04 : f32} : tensor<?x4x2xf32>, tensor<?xi64> -> tensor<?x4x2xf32>
      %k = moe.rope %ke, %p1 {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
      %att = moe.attention %q, %k, %ve, %p1, %p1 {scale = 0.707106769 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
      %f = tensor.collapse_shape %att [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
      %wo = moe.param "o.weight" : tensor<8x8xf32>
      %o = moe.linear %f, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
      %r = arith.addf %a1, %o : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    return %h : tensor<?x8xf32>
  }
}

// -----

// K reads another input than Q and V: one all-gather cannot feed them.
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @qkv_inputs(%zz: tensor<?xi64>, %x: tensor<?x8xf32>) -> tensor<?x8xf32> {
    %h = moe.layer 0(%x, %zz) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a0: tensor<?x8xf32>, %p0: tensor<?xi64>):
      %c0_0 = arith.constant 0 : index
      %t = tensor.dim %a0, %c0_0 : tensor<?x8xf32>
      %r0 = arith.addf %a0, %a0 : tensor<?x8xf32>
      %wq = moe.param "q.weight" : tensor<8x8xf32>
      %ql = moe.linear %a0, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
      %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 4, 2] : tensor<?x8xf32> into tensor<?x4x2xf32>
      %wk = moe.param "k.weight" : tensor<4x8xf32>
      %kl = moe.linear %r0, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
      %wv = moe.param "v.weight" : tensor<4x8xf32>
      %vl = moe.linear %a0, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
      %q = moe.rope %qe, %p0 {theta = 1.000000e+04 : f32} : tensor<?x4x2xf32>, tensor<?xi64> -> tensor<?x4x2xf32>
      %k = moe.rope %ke, %p0 {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
      // expected-error @+1 {{mf-insert-sp: the attention's projections must read one input}}
      %att = moe.attention %q, %k, %ve, %p0, %p0 {scale = 0.707106769 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
      %f = tensor.collapse_shape %att [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
      %wo = moe.param "o.weight" : tensor<8x8xf32>
      %o = moe.linear %f, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
      %r = arith.addf %a0, %o : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    return %h : tensor<?x8xf32>
  }
}
