// RUN: meshfold-opt %s -split-input-file --mf-shard-tp -verify-diagnostics

// -mf-shard-tp checks the plan rules it relies on itself (so the pass alone
// never builds wrong IR) and the structure of the attention chain.

// Without a plan there is no TP group.
// expected-error @+1 {{mf-shard-tp: the module has no plan (set mf.plan or use the mf-partition options)}}
module {
  func.func @no_plan(%x: tensor<?x8xf32>, %pos: tensor<?xi64>) -> tensor<?x8xf32> {
    %c0 = arith.constant 0 : index
    %t = tensor.dim %x, %c0 : tensor<?x8xf32>
    %wq = moe.param "q.weight" : tensor<8x8xf32>
    %ql = moe.linear %x, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 4, 2] : tensor<?x8xf32> into tensor<?x4x2xf32>
    %wk = moe.param "k.weight" : tensor<4x8xf32>
    %kl = moe.linear %x, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %wv = moe.param "v.weight" : tensor<4x8xf32>
    %vl = moe.linear %x, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %q = moe.rope %qe, %pos {theta = 1.000000e+04 : f32} : tensor<?x4x2xf32>, tensor<?xi64> -> tensor<?x4x2xf32>
    %k = moe.rope %ke, %pos {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
    moe.kv_cache %k, %ve, %pos {layer = 0 : i64} : tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>
    %a = moe.attention %q, %k, %ve, %pos, %pos {scale = 0.707106769 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    %f = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
    %wo = moe.param "o.weight" : tensor<8x8xf32>
    %o = moe.linear %f, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    return %o : tensor<?x8xf32>
  }
}

// -----

// tp-heads: TP=4 does not divide 6 query heads.
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
  func.func @tp_heads(%x: tensor<?x12xf32>, %pos: tensor<?xi64>) -> tensor<?x12xf32> {
    %c0 = arith.constant 0 : index
    %t = tensor.dim %x, %c0 : tensor<?x12xf32>
    %wq = moe.param "q.weight" : tensor<12x12xf32>
    %ql = moe.linear %x, %wq : tensor<?x12xf32>, tensor<12x12xf32> -> tensor<?x12xf32>
    %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 6, 2] : tensor<?x12xf32> into tensor<?x6x2xf32>
    %wk = moe.param "k.weight" : tensor<4x12xf32>
    %kl = moe.linear %x, %wk : tensor<?x12xf32>, tensor<4x12xf32> -> tensor<?x4xf32>
    %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %wv = moe.param "v.weight" : tensor<4x12xf32>
    %vl = moe.linear %x, %wv : tensor<?x12xf32>, tensor<4x12xf32> -> tensor<?x4xf32>
    %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %q = moe.rope %qe, %pos {theta = 1.000000e+04 : f32} : tensor<?x6x2xf32>, tensor<?xi64> -> tensor<?x6x2xf32>
    %k = moe.rope %ke, %pos {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
    moe.kv_cache %k, %ve, %pos {layer = 0 : i64} : tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>
    // expected-error @+1 {{plan rule 'tp-heads': TP=4 must divide n_heads=6}}
    %a = moe.attention %q, %k, %ve, %pos, %pos {scale = 0.707106769 : f32} : tensor<?x6x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x6x2xf32>
    %f = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x6x2xf32> into tensor<?x12xf32>
    %wo = moe.param "o.weight" : tensor<12x12xf32>
    %o = moe.linear %f, %wo : tensor<?x12xf32>, tensor<12x12xf32> -> tensor<?x12xf32>
    return %o : tensor<?x12xf32>
  }
}

// -----

// gqa: TP=2 neither divides n_kv=3 nor is a multiple of it.
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @gqa(%x: tensor<?x12xf32>, %pos: tensor<?xi64>) -> tensor<?x12xf32> {
    %c0 = arith.constant 0 : index
    %t = tensor.dim %x, %c0 : tensor<?x12xf32>
    %wq = moe.param "q.weight" : tensor<12x12xf32>
    %ql = moe.linear %x, %wq : tensor<?x12xf32>, tensor<12x12xf32> -> tensor<?x12xf32>
    %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 6, 2] : tensor<?x12xf32> into tensor<?x6x2xf32>
    %wk = moe.param "k.weight" : tensor<6x12xf32>
    %kl = moe.linear %x, %wk : tensor<?x12xf32>, tensor<6x12xf32> -> tensor<?x6xf32>
    %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 3, 2] : tensor<?x6xf32> into tensor<?x3x2xf32>
    %wv = moe.param "v.weight" : tensor<6x12xf32>
    %vl = moe.linear %x, %wv : tensor<?x12xf32>, tensor<6x12xf32> -> tensor<?x6xf32>
    %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 3, 2] : tensor<?x6xf32> into tensor<?x3x2xf32>
    %q = moe.rope %qe, %pos {theta = 1.000000e+04 : f32} : tensor<?x6x2xf32>, tensor<?xi64> -> tensor<?x6x2xf32>
    %k = moe.rope %ke, %pos {theta = 1.000000e+04 : f32} : tensor<?x3x2xf32>, tensor<?xi64> -> tensor<?x3x2xf32>
    moe.kv_cache %k, %ve, %pos {layer = 0 : i64} : tensor<?x3x2xf32>, tensor<?x3x2xf32>, tensor<?xi64>
    // expected-error @+1 {{plan rule 'gqa': TP=2 must divide n_kv=3, or be a multiple of it (KV-head replication)}}
    %a = moe.attention %q, %k, %ve, %pos, %pos {scale = 0.707106769 : f32} : tensor<?x6x2xf32>, tensor<?x3x2xf32>, tensor<?x3x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x6x2xf32>
    %f = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x6x2xf32> into tensor<?x12xf32>
    %wo = moe.param "o.weight" : tensor<12x12xf32>
    %o = moe.linear %f, %wo : tensor<?x12xf32>, tensor<12x12xf32> -> tensor<?x12xf32>
    return %o : tensor<?x12xf32>
  }
}

// -----

// gqa: n_kv=3 < TP=4, but 4 is not a multiple of 3.
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
  func.func @gqa_replication(%x: tensor<?x24xf32>, %pos: tensor<?xi64>) -> tensor<?x24xf32> {
    %c0 = arith.constant 0 : index
    %t = tensor.dim %x, %c0 : tensor<?x24xf32>
    %wq = moe.param "q.weight" : tensor<24x24xf32>
    %ql = moe.linear %x, %wq : tensor<?x24xf32>, tensor<24x24xf32> -> tensor<?x24xf32>
    %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 12, 2] : tensor<?x24xf32> into tensor<?x12x2xf32>
    %wk = moe.param "k.weight" : tensor<6x24xf32>
    %kl = moe.linear %x, %wk : tensor<?x24xf32>, tensor<6x24xf32> -> tensor<?x6xf32>
    %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 3, 2] : tensor<?x6xf32> into tensor<?x3x2xf32>
    %wv = moe.param "v.weight" : tensor<6x24xf32>
    %vl = moe.linear %x, %wv : tensor<?x24xf32>, tensor<6x24xf32> -> tensor<?x6xf32>
    %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 3, 2] : tensor<?x6xf32> into tensor<?x3x2xf32>
    %q = moe.rope %qe, %pos {theta = 1.000000e+04 : f32} : tensor<?x12x2xf32>, tensor<?xi64> -> tensor<?x12x2xf32>
    %k = moe.rope %ke, %pos {theta = 1.000000e+04 : f32} : tensor<?x3x2xf32>, tensor<?xi64> -> tensor<?x3x2xf32>
    moe.kv_cache %k, %ve, %pos {layer = 0 : i64} : tensor<?x3x2xf32>, tensor<?x3x2xf32>, tensor<?xi64>
    // expected-error @+1 {{plan rule 'gqa': TP=4 must divide n_kv=3, or be a multiple of it (KV-head replication)}}
    %a = moe.attention %q, %k, %ve, %pos, %pos {scale = 0.707106769 : f32} : tensor<?x12x2xf32>, tensor<?x3x2xf32>, tensor<?x3x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x12x2xf32>
    %f = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x12x2xf32> into tensor<?x24xf32>
    %wo = moe.param "o.weight" : tensor<24x24xf32>
    %o = moe.linear %f, %wo : tensor<?x24xf32>, tensor<24x24xf32> -> tensor<?x24xf32>
    return %o : tensor<?x24xf32>
  }
}

// -----

// The query must come from moe.rope.
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @no_rope(%x: tensor<?x8xf32>, %pos: tensor<?xi64>, %qin: tensor<?x4x2xf32>) -> tensor<?x8xf32> {
    %c0 = arith.constant 0 : index
    %t = tensor.dim %x, %c0 : tensor<?x8xf32>
    %wq = moe.param "q.weight" : tensor<8x8xf32>
    %ql = moe.linear %x, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 4, 2] : tensor<?x8xf32> into tensor<?x4x2xf32>
    %wk = moe.param "k.weight" : tensor<4x8xf32>
    %kl = moe.linear %x, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %wv = moe.param "v.weight" : tensor<4x8xf32>
    %vl = moe.linear %x, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %q = moe.rope %qe, %pos {theta = 1.000000e+04 : f32} : tensor<?x4x2xf32>, tensor<?xi64> -> tensor<?x4x2xf32>
    %k = moe.rope %ke, %pos {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
    moe.kv_cache %k, %ve, %pos {layer = 0 : i64} : tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>
    // expected-error @+1 {{partitioning: unexpected structure around attention: query and key must come from moe.rope}}
    %a = moe.attention %qin, %k, %ve, %pos, %pos {scale = 0.707106769 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    %f = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
    %wo = moe.param "o.weight" : tensor<8x8xf32>
    %o = moe.linear %f, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    return %o : tensor<?x8xf32>
  }
}

// -----

// The KV cache must record the value the attention reads.
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @cache_value(%x: tensor<?x8xf32>, %pos: tensor<?xi64>) -> tensor<?x8xf32> {
    %c0 = arith.constant 0 : index
    %t = tensor.dim %x, %c0 : tensor<?x8xf32>
    %wq = moe.param "q.weight" : tensor<8x8xf32>
    %ql = moe.linear %x, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 4, 2] : tensor<?x8xf32> into tensor<?x4x2xf32>
    %wk = moe.param "k.weight" : tensor<4x8xf32>
    %kl = moe.linear %x, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %wv = moe.param "v.weight" : tensor<4x8xf32>
    %vl = moe.linear %x, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %q = moe.rope %qe, %pos {theta = 1.000000e+04 : f32} : tensor<?x4x2xf32>, tensor<?xi64> -> tensor<?x4x2xf32>
    %k = moe.rope %ke, %pos {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
    // expected-error @+1 {{partitioning: the KV cache must record the attention's value}}
    moe.kv_cache %k, %k, %pos {layer = 0 : i64} : tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>
    %a = moe.attention %q, %k, %ve, %pos, %pos {scale = 0.707106769 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    %f = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
    %wo = moe.param "o.weight" : tensor<8x8xf32>
    %o = moe.linear %f, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    return %o : tensor<?x8xf32>
  }
}

// -----

// A per-head norm on the query alone is not a structure the passes know.
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @query_norm_only(%x: tensor<?x8xf32>, %pos: tensor<?xi64>) -> tensor<?x8xf32> {
    %c0 = arith.constant 0 : index
    %t = tensor.dim %x, %c0 : tensor<?x8xf32>
    %wq = moe.param "q.weight" : tensor<8x8xf32>
    %ql = moe.linear %x, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 4, 2] : tensor<?x8xf32> into tensor<?x4x2xf32>
    %wk = moe.param "k.weight" : tensor<4x8xf32>
    %kl = moe.linear %x, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %wv = moe.param "v.weight" : tensor<4x8xf32>
    %vl = moe.linear %x, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %wqn = moe.param "q_norm.weight" : tensor<2xf32>
    %qn = moe.rms_norm %qe, %wqn {epsilon = 1.0e-6 : f32} : tensor<?x4x2xf32>, tensor<2xf32> -> tensor<?x4x2xf32>
    %q = moe.rope %qn, %pos {theta = 1.000000e+04 : f32} : tensor<?x4x2xf32>, tensor<?xi64> -> tensor<?x4x2xf32>
    %k = moe.rope %ke, %pos {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
    moe.kv_cache %k, %ve, %pos {layer = 0 : i64} : tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>
    // expected-error @+1 {{partitioning: unexpected structure around attention: per-head norms must be on both the query and the key}}
    %a = moe.attention %q, %k, %ve, %pos, %pos {scale = 0.707106769 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    %f = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
    %wo = moe.param "o.weight" : tensor<8x8xf32>
    %o = moe.linear %f, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    return %o : tensor<?x8xf32>
  }
}

// -----

// The output projection's partial sums are all-reduced over TP: a bias on it
// would be added once per rank.
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @o_bias(%x: tensor<?x8xf32>, %pos: tensor<?xi64>) -> tensor<?x8xf32> {
    %c0 = arith.constant 0 : index
    %t = tensor.dim %x, %c0 : tensor<?x8xf32>
    %wq = moe.param "q.weight" : tensor<8x8xf32>
    %ql = moe.linear %x, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 4, 2] : tensor<?x8xf32> into tensor<?x4x2xf32>
    %wk = moe.param "k.weight" : tensor<4x8xf32>
    %kl = moe.linear %x, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %wv = moe.param "v.weight" : tensor<4x8xf32>
    %vl = moe.linear %x, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %q = moe.rope %qe, %pos {theta = 1.000000e+04 : f32} : tensor<?x4x2xf32>, tensor<?xi64> -> tensor<?x4x2xf32>
    %k = moe.rope %ke, %pos {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
    // expected-error @+1 {{partitioning: unexpected structure around attention: the output projection must have no bias}}
    %a = moe.attention %q, %k, %ve, %pos, %pos {scale = 0.707106769 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    %f = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
    %wo = moe.param "o.weight" : tensor<8x8xf32>
    %bo = moe.param "o.bias" : tensor<8xf32>
    %o = moe.linear %f, %wo bias %bo : tensor<?x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    return %o : tensor<?x8xf32>
  }
}
