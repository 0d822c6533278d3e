// RUN: meshfold-opt %s -split-input-file --mf-shard-tp | FileCheck %s

// -mf-shard-tp splits attention heads over the TP group: column-parallel
// Q/K/V weights (mf.shard on dim 0), attention and KV-cache writes for the
// rank's heads (from head tp * n_kv_local), and a row-parallel output
// projection (mf.shard on dim 1) summed by mf.all_reduce on tp. Inputs are
// one attention chain as the importer builds it (d 8, 4 query heads, 2 KV
// heads, d_h 2). Errors are in mf-shard-tp-invalid.mlir.

// TP=2: 2 query heads and 1 KV head per rank. The model's global dimensions
// are recorded on the module first.
// CHECK-LABEL: module attributes {mf.plan = {{.+}}, moe.model_info = {{{.*}}head_dim = 2 : i64, heads = 4 : i64{{.*}}kv_heads = 2 : i64, layers = 1 : i64{{.*}}}}
// CHECK-LABEL: func.func @tp2(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<?x8xf32>, %[[POS:[^:]+]]: tensor<?xi64>)
// CHECK:         %[[T:.+]] = tensor.dim %[[X]]
// CHECK-NEXT:    %[[WQ:.+]] = moe.param "q.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<4x8xf32>
// CHECK-NEXT:    %[[QL:.+]] = moe.linear %[[X]], %[[WQ]] : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
// CHECK-NEXT:    %[[QE:.+]] = tensor.expand_shape %[[QL]] {{\[\[}}0], [1, 2]] output_shape [%[[T]], 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
// CHECK-NEXT:    %[[WK:.+]] = moe.param "k.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<2x8xf32>
// CHECK-NEXT:    %[[KL:.+]] = moe.linear %[[X]], %[[WK]] : tensor<?x8xf32>, tensor<2x8xf32> -> tensor<?x2xf32>
// CHECK-NEXT:    %[[KE:.+]] = tensor.expand_shape %[[KL]] {{\[\[}}0], [1, 2]] output_shape [%[[T]], 1, 2] : tensor<?x2xf32> into tensor<?x1x2xf32>
// CHECK-NEXT:    %[[WV:.+]] = moe.param "v.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<2x8xf32>
// CHECK-NEXT:    %[[VL:.+]] = moe.linear %[[X]], %[[WV]] : tensor<?x8xf32>, tensor<2x8xf32> -> tensor<?x2xf32>
// CHECK-NEXT:    %[[VE:.+]] = tensor.expand_shape %[[VL]] {{\[\[}}0], [1, 2]] output_shape [%[[T]], 1, 2] : tensor<?x2xf32> into tensor<?x1x2xf32>
// CHECK-NEXT:    %[[Q:.+]] = moe.rope %[[QE]], %[[POS]] {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
// CHECK-NEXT:    %[[K:.+]] = moe.rope %[[KE]], %[[POS]] {theta = 1.000000e+04 : f32} : tensor<?x1x2xf32>, tensor<?xi64> -> tensor<?x1x2xf32>
// CHECK-NEXT:    %[[TP:.+]] = mf.coord "attention" "tp" : index
// CHECK-NEXT:    %[[C1:.+]] = arith.constant 1 : index
// CHECK-NEXT:    %[[FIRST:.+]] = arith.muli %[[TP]], %[[C1]] : index
// CHECK-NEXT:    moe.kv_cache %[[K]], %[[VE]], %[[POS]] heads from %[[FIRST]] {layer = 0 : i64} : tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>
// CHECK-NEXT:    %[[A:.+]] = moe.attention %[[Q]], %[[K]], %[[VE]], %[[POS]], %[[POS]] {scale = 0.707106769 : f32} : tensor<?x2x2xf32>, tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x2xf32>
// CHECK-NEXT:    %[[F:.+]] = tensor.collapse_shape %[[A]] {{\[\[}}0], [1, 2]] : tensor<?x2x2xf32> into tensor<?x4xf32>
// CHECK-NEXT:    %[[WO:.+]] = moe.param "o.weight" {mf.shard = #mf.shard<dim = 1, mesh = "attention", axis = "tp", parts = 2>} : tensor<8x4xf32>
// CHECK-NEXT:    %[[PART:.+]] = moe.linear %[[F]], %[[WO]] : tensor<?x4xf32>, tensor<8x4xf32> -> tensor<?x8xf32>
// CHECK-NEXT:    %[[SUM:.+]] = mf.all_reduce %[[PART]] on "attention" ["tp"] : tensor<?x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:    return %[[SUM]] : tensor<?x8xf32>
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @tp2(%x: tensor<?x8xf32>, %pos: tensor<?xi64>) -> tensor<?x8xf32> {
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

// TP=4 > n_kv=2 (KV-head replication): 1 query head per rank, the K/V weights
// in 2 parts (each KV head held by 2 ranks) and the rank's KV head
// (tp * 2 / 4) * 1.
// CHECK-LABEL: func.func @kv_replication(
// CHECK:         moe.param "q.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 4>} : tensor<2x8xf32>
// CHECK:         tensor.expand_shape {{.+}} : tensor<?x2xf32> into tensor<?x1x2xf32>
// CHECK:         moe.param "k.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<2x8xf32>
// CHECK:         moe.param "v.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<2x8xf32>
// CHECK:         %[[TP:.+]] = mf.coord "attention" "tp" : index
// CHECK-NEXT:    %[[C2:.+]] = arith.constant 2 : index
// CHECK-NEXT:    %[[M:.+]] = arith.muli %[[TP]], %[[C2]] : index
// CHECK-NEXT:    %[[C4:.+]] = arith.constant 4 : index
// CHECK-NEXT:    %[[D:.+]] = arith.divui %[[M]], %[[C4]] : index
// CHECK-NEXT:    %[[C1:.+]] = arith.constant 1 : index
// CHECK-NEXT:    %[[FIRST:.+]] = arith.muli %[[D]], %[[C1]] : index
// CHECK-NEXT:    moe.kv_cache {{.+}} heads from %[[FIRST]] {layer = 0 : i64} : tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>
// CHECK-NEXT:    moe.attention {{.+}} : tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x1x2xf32>
// CHECK:         moe.param "o.weight" {mf.shard = #mf.shard<dim = 1, mesh = "attention", axis = "tp", parts = 4>} : tensor<8x2xf32>
// CHECK:         mf.all_reduce %{{.+}} on "attention" ["tp"] : tensor<?x8xf32> -> tensor<?x8xf32>
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
  func.func @kv_replication(%x: tensor<?x8xf32>, %pos: tensor<?xi64>) -> tensor<?x8xf32> {
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

// Without a KV cache there is no head offset to compute.
// CHECK-LABEL: func.func @no_cache(
// CHECK-NOT:     mf.coord
// CHECK-NOT:     moe.kv_cache
// CHECK:         moe.attention {{.+}} -> tensor<?x2x2xf32>
// CHECK:         mf.all_reduce
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @no_cache(%x: tensor<?x8xf32>, %pos: tensor<?xi64>) -> tensor<?x8xf32> {
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
    %a = moe.attention %q, %k, %ve, %pos, %pos {scale = 0.707106769 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    %f = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
    %wo = moe.param "o.weight" : tensor<8x8xf32>
    %o = moe.linear %f, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    return %o : tensor<?x8xf32>
  }
}

// -----

// TP=1 (DP only): nothing to split.
// CHECK-LABEL: func.func @tp1(
// CHECK-NOT:     mf.shard
// CHECK:         moe.param "q.weight" : tensor<8x8xf32>
// CHECK:         moe.kv_cache %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}} {layer = 0 : i64}
// CHECK:         moe.attention {{.+}} -> tensor<?x4x2xf32>
// CHECK:         %[[O:.+]] = moe.linear %{{.+}}, %{{.+}} : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:    return %[[O]]
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [dp = 2], experts = [ep = 2 : (dp)]>} {
  func.func @tp1(%x: tensor<?x8xf32>, %pos: tensor<?xi64>) -> tensor<?x8xf32> {
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

// A chain whose query weight is already sharded (the pass ran before) is
// left as it is: the K/V weights keep their type and no all-reduce is added.
// CHECK-LABEL: func.func @already_sharded(
// CHECK:         moe.param "q.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<4x8xf32>
// CHECK:         moe.param "k.weight" : tensor<4x8xf32>
// CHECK:         moe.param "v.weight" : tensor<4x8xf32>
// CHECK-NOT:     mf.coord
// CHECK:         moe.param "o.weight" : tensor<8x4xf32>
// CHECK-NEXT:    %[[O:.+]] = moe.linear
// CHECK-NEXT:    return %[[O]]
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @already_sharded(%x: tensor<?x8xf32>, %pos: tensor<?xi64>) -> tensor<?x8xf32> {
    %c0 = arith.constant 0 : index
    %t = tensor.dim %x, %c0 : tensor<?x8xf32>
    %wq = moe.param "q.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<4x8xf32>
    %ql = moe.linear %x, %wq : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %wk = moe.param "k.weight" : tensor<4x8xf32>
    %kl = moe.linear %x, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %wv = moe.param "v.weight" : tensor<4x8xf32>
    %vl = moe.linear %x, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %q = moe.rope %qe, %pos {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
    %k = moe.rope %ke, %pos {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
    moe.kv_cache %k, %ve, %pos {layer = 0 : i64} : tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>
    %a = moe.attention %q, %k, %ve, %pos, %pos {scale = 0.707106769 : f32} : tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x2xf32>
    %f = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x2x2xf32> into tensor<?x4xf32>
    %wo = moe.param "o.weight" : tensor<8x4xf32>
    %o = moe.linear %f, %wo : tensor<?x4xf32>, tensor<8x4xf32> -> tensor<?x8xf32>
    return %o : tensor<?x8xf32>
  }
}

// -----

// A decode step's attention reads the layer's K/V history: the history
// becomes the rank's own (its KV heads, from the same first head as its
// cache writes), over the step's local K and V.
// CHECK-LABEL: func.func @decode_step(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<?x8xf32>, %[[POS:[^:]+]]: tensor<?xi64>)
// CHECK:         %[[K:.+]] = moe.rope %{{.+}}, %[[POS]] {theta = 1.000000e+04 : f32} : tensor<?x1x2xf32>, tensor<?xi64> -> tensor<?x1x2xf32>
// CHECK:         %[[FIRST:.+]] = arith.muli
// CHECK-NEXT:    moe.kv_cache %[[K]], %[[VE:[^,]+]], %[[POS]] heads from %[[FIRST]] {layer = 0 : i64}
// CHECK-NEXT:    %[[HK:.+]], %[[HV:.+]], %[[HP:.+]] = moe.kv_history %[[K]], %[[VE]], %[[POS]] heads from %[[FIRST]] {layer = 0 : i64} : tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64> -> tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>
// CHECK-NEXT:    moe.attention %{{.+}}, %[[HK]], %[[HV]], %[[POS]], %[[HP]] {{.+}} -> tensor<?x2x2xf32>
// CHECK-NOT:     moe.kv_history
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @decode_step(%x: tensor<?x8xf32>, %pos: tensor<?xi64>) -> tensor<?x8xf32> {
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
    %hk, %hv, %hp = moe.kv_history %k, %ve, %pos {layer = 0 : i64} : tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>
    %a = moe.attention %q, %hk, %hv, %pos, %hp {scale = 0.707106769 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    %f = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
    %wo = moe.param "o.weight" : tensor<8x8xf32>
    %o = moe.linear %f, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    return %o : tensor<?x8xf32>
  }
}

// -----

// Per-head q/k norms between the head split and RoPE (Qwen3-MoE): each
// rank normalises its own heads with the same, whole [d_h] weights.
// CHECK-LABEL: func.func @head_norms(
// CHECK:         %[[QE:.+]] = tensor.expand_shape {{.*}} into tensor<?x2x2xf32>
// CHECK:         %[[KE:.+]] = tensor.expand_shape {{.*}} into tensor<?x1x2xf32>
// CHECK:         %[[VE:.+]] = tensor.expand_shape {{.*}} into tensor<?x1x2xf32>
// CHECK:         %[[QN:.+]] = moe.rms_norm %[[QE]], %[[WQN:[^ ]+]] {epsilon = 9.99999997E-7 : f32} : tensor<?x2x2xf32>, tensor<2xf32> -> tensor<?x2x2xf32>
// CHECK-NEXT:    %[[KN:.+]] = moe.rms_norm %[[KE]], %[[WKN:[^ ]+]] {epsilon = 9.99999997E-7 : f32} : tensor<?x1x2xf32>, tensor<2xf32> -> tensor<?x1x2xf32>
// CHECK-NEXT:    %[[Q:.+]] = moe.rope %[[QN]], %{{.+}} : tensor<?x2x2xf32>
// CHECK-NEXT:    %[[K:.+]] = moe.rope %[[KN]], %{{.+}} : tensor<?x1x2xf32>
// CHECK:         moe.attention %[[Q]], %[[K]], %[[VE]]
// CHECK-NOT:     moe.rms_norm
// CHECK:         return
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @head_norms(%x: tensor<?x8xf32>, %pos: tensor<?xi64>) -> tensor<?x8xf32> {
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
    %wkn = moe.param "k_norm.weight" : tensor<2xf32>
    %kn = moe.rms_norm %ke, %wkn {epsilon = 1.0e-6 : f32} : tensor<?x2x2xf32>, tensor<2xf32> -> tensor<?x2x2xf32>
    %q = moe.rope %qn, %pos {theta = 1.000000e+04 : f32} : tensor<?x4x2xf32>, tensor<?xi64> -> tensor<?x4x2xf32>
    %k = moe.rope %kn, %pos {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
    moe.kv_cache %k, %ve, %pos {layer = 0 : i64} : tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>
    %a = moe.attention %q, %k, %ve, %pos, %pos {scale = 0.707106769 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    %f = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
    %wo = moe.param "o.weight" : tensor<8x8xf32>
    %o = moe.linear %f, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    return %o : tensor<?x8xf32>
  }
}

// -----

// Norms over the whole q and k projections (OLMoE), TP=4 with 2 KV heads:
// each rank sums the squares of its columns, the TP group all-reduces the
// sums, and the rank scales its columns by its slice of the norm weight.
// The query's 4 ranks hold 2 columns each of 8 (count 8); the key's 2 heads
// are each held by 2 ranks, so the sum holds every square twice (count 2 x
// 4 = 8).
// CHECK-LABEL: func.func @projection_norms(
// CHECK:         %[[QL:.+]] = moe.linear %{{.+}} -> tensor<?x2xf32>
// CHECK-NEXT:    %[[WQN:.+]] = moe.param "q_norm.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 4>} : tensor<2xf32>
// CHECK-NEXT:    %[[QSS:.+]] = moe.sum_squares %[[QL]] : tensor<?x2xf32> -> tensor<?xf32>
// CHECK-NEXT:    %[[QSUM:.+]] = mf.all_reduce %[[QSS]] on "attention" ["tp"] : tensor<?xf32> -> tensor<?xf32>
// CHECK-NEXT:    %[[QN:.+]] = moe.rms_scale %[[QL]], %[[QSUM]], %[[WQN]] {count = 8 : i64, epsilon = 9.99999974E-6 : f32}
// CHECK-NEXT:    tensor.expand_shape %[[QN]]
// CHECK:         %[[KL:.+]] = moe.linear %{{.+}} -> tensor<?x2xf32>
// CHECK-NEXT:    %[[WKN:.+]] = moe.param "k_norm.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<2xf32>
// CHECK-NEXT:    %[[KSS:.+]] = moe.sum_squares %[[KL]]
// CHECK-NEXT:    %[[KSUM:.+]] = mf.all_reduce %[[KSS]] on "attention" ["tp"]
// CHECK-NEXT:    moe.rms_scale %[[KL]], %[[KSUM]], %[[WKN]] {count = 8 : i64, epsilon = 9.99999974E-6 : f32}
// CHECK-NOT:     moe.rms_norm
// CHECK:         return
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 8,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
  func.func @projection_norms(%x: tensor<?x8xf32>, %pos: tensor<?xi64>) -> tensor<?x8xf32> {
    %c0 = arith.constant 0 : index
    %t = tensor.dim %x, %c0 : tensor<?x8xf32>
    %wq = moe.param "q.weight" : tensor<8x8xf32>
    %ql = moe.linear %x, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    %wqn = moe.param "q_norm.weight" : tensor<8xf32>
    %qn = moe.rms_norm %ql, %wqn {epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %qe = tensor.expand_shape %qn [[0], [1, 2]] output_shape [%t, 4, 2] : tensor<?x8xf32> into tensor<?x4x2xf32>
    %wk = moe.param "k.weight" : tensor<4x8xf32>
    %kl = moe.linear %x, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %wkn = moe.param "k_norm.weight" : tensor<4xf32>
    %kn = moe.rms_norm %kl, %wkn {epsilon = 1.0e-5 : f32} : tensor<?x4xf32>, tensor<4xf32> -> tensor<?x4xf32>
    %ke = tensor.expand_shape %kn [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
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

// Biased Q/K/V projections (Qwen2-MoE): each bias is split like its
// weight's rows, the rank's heads' entries.
// CHECK-LABEL: func.func @bias(
// CHECK:         %[[WQ:.+]] = moe.param "q.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<4x8xf32>
// CHECK-NEXT:    %[[BQ:.+]] = moe.param "q.bias" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<4xf32>
// CHECK-NEXT:    moe.linear %{{.+}}, %[[WQ]] bias %[[BQ]] : tensor<?x8xf32>, tensor<4x8xf32>, tensor<4xf32> -> tensor<?x4xf32>
// CHECK:         %[[BK:.+]] = moe.param "k.bias" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<2xf32>
// CHECK-NEXT:    moe.linear %{{.+}}, %{{.+}} bias %[[BK]] : tensor<?x8xf32>, tensor<2x8xf32>, tensor<2xf32> -> tensor<?x2xf32>
// CHECK:         %[[BV:.+]] = moe.param "v.bias" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<2xf32>
// CHECK-NEXT:    moe.linear %{{.+}}, %{{.+}} bias %[[BV]] : tensor<?x8xf32>, tensor<2x8xf32>, tensor<2xf32> -> tensor<?x2xf32>
// CHECK:         mf.all_reduce
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @bias(%x: tensor<?x8xf32>, %pos: tensor<?xi64>) -> tensor<?x8xf32> {
    %c0 = arith.constant 0 : index
    %t = tensor.dim %x, %c0 : tensor<?x8xf32>
    %wq = moe.param "q.weight" : tensor<8x8xf32>
    %bq = moe.param "q.bias" : tensor<8xf32>
    %ql = moe.linear %x, %wq bias %bq : tensor<?x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 4, 2] : tensor<?x8xf32> into tensor<?x4x2xf32>
    %wk = moe.param "k.weight" : tensor<4x8xf32>
    %bk = moe.param "k.bias" : tensor<4xf32>
    %kl = moe.linear %x, %wk bias %bk : tensor<?x8xf32>, tensor<4x8xf32>, tensor<4xf32> -> tensor<?x4xf32>
    %ke = tensor.expand_shape %kl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %wv = moe.param "v.weight" : tensor<4x8xf32>
    %bv = moe.param "v.bias" : tensor<4xf32>
    %vl = moe.linear %x, %wv bias %bv : tensor<?x8xf32>, tensor<4x8xf32>, tensor<4xf32> -> tensor<?x4xf32>
    %ve = tensor.expand_shape %vl [[0], [1, 2]] output_shape [%t, 2, 2] : tensor<?x4xf32> into tensor<?x2x2xf32>
    %q = moe.rope %qe, %pos {theta = 1.000000e+04 : f32} : tensor<?x4x2xf32>, tensor<?xi64> -> tensor<?x4x2xf32>
    %k = moe.rope %ke, %pos {theta = 1.000000e+04 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
    %a = moe.attention %q, %k, %ve, %pos, %pos {scale = 0.707106769 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    %f = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x4x2xf32> into tensor<?x8xf32>
    %wo = moe.param "o.weight" : tensor<8x8xf32>
    %o = moe.linear %f, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    return %o : tensor<?x8xf32>
  }
}

// -----

// MLA (DeepSeek-V3), as the importer builds it (d 8, 2 heads, nope 2, RoPE
// 2, latent 4, v 2), TP=2: each rank holds one head's rows of q_proj (4)
// and kv_b_proj (2 + 2) and its columns of o_proj; the latent's projection,
// its norm and RoPE key, and its cache are whole on every rank, the
// attention multi-query over it.
// CHECK-LABEL: func.func @mla(
// CHECK:         %[[KVA:.+]] = moe.param "kv_a_proj_with_mqa.weight" : tensor<6x8xf32>
// CHECK:         %[[KV:.+]] = tensor.concat dim(2) {{.+}} -> tensor<?x1x6xf32>
// CHECK-NEXT:    moe.kv_cache %[[KV]], %[[KV]], %{{.+}} {layer = 0 : i64} : tensor<?x1x6xf32>, tensor<?x1x6xf32>, tensor<?xi64>
// CHECK-NEXT:    moe.param "q_proj.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<4x8xf32>
// CHECK:         tensor.expand_shape {{.+}} : tensor<?x4xf32> into tensor<?x1x4xf32>
// CHECK-NEXT:    moe.param "kv_b_proj.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<4x4xf32>
// CHECK-NEXT:    %[[W3:.+]] = tensor.expand_shape {{.+}} output_shape [1, 4, 4] : tensor<4x4xf32> into tensor<1x4x4xf32>
// CHECK-NEXT:    %[[WUK:.+]] = tensor.extract_slice %[[W3]][0, 0, 0] [1, 2, 4] [1, 1, 1]
// CHECK-NEXT:    %[[WUV:.+]] = tensor.extract_slice %[[W3]][0, 2, 0] [1, 2, 4] [1, 1, 1]
// CHECK:         %[[QA:.+]] = moe.head_linear %{{.+}}, %[[WUK]] {transpose_weight} : tensor<?x1x2xf32>, tensor<1x2x4xf32> -> tensor<?x1x4xf32>
// CHECK:         %[[QR:.+]] = moe.rope %{{.+}} {interleaved, theta = 1.000000e+04 : f32} : tensor<?x1x2xf32>
// CHECK-NEXT:    %[[Q:.+]] = tensor.concat dim(2) %[[QA]], %[[QR]] : (tensor<?x1x4xf32>, tensor<?x1x2xf32>) -> tensor<?x1x6xf32>
// CHECK-NEXT:    %[[A:.+]] = moe.attention %[[Q]], %[[KV]], %[[KV]], {{.+}} -> tensor<?x1x6xf32>
// CHECK:         %[[AL:.+]] = tensor.extract_slice %[[A]][0, 0, 0] [%{{.+}}, 1, 4] [1, 1, 1] : tensor<?x1x6xf32> to tensor<?x1x4xf32>
// CHECK-NEXT:    %[[V:.+]] = moe.head_linear %[[AL]], %[[WUV]] : tensor<?x1x4xf32>, tensor<1x2x4xf32> -> tensor<?x1x2xf32>
// CHECK-NEXT:    %[[F:.+]] = tensor.collapse_shape %[[V]] {{.+}} into tensor<?x2xf32>
// CHECK-NEXT:    %[[WO:.+]] = moe.param "o_proj.weight" {mf.shard = #mf.shard<dim = 1, mesh = "attention", axis = "tp", parts = 2>} : tensor<8x2xf32>
// CHECK-NEXT:    %[[P:.+]] = moe.linear %[[F]], %[[WO]]
// CHECK-NEXT:    %[[S:.+]] = mf.all_reduce %[[P]] on "attention" ["tp"]
// CHECK-NEXT:    return %[[S]]
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @mla(%x: tensor<?x8xf32>, %pos: tensor<?xi64>) -> tensor<?x8xf32> {
    %c0 = arith.constant 0 : index
    %t = tensor.dim %x, %c0 : tensor<?x8xf32>
    %wq = moe.param "q_proj.weight" : tensor<8x8xf32>
    %ql = moe.linear %x, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    %qe = tensor.expand_shape %ql [[0], [1, 2]] output_shape [%t, 2, 4] : tensor<?x8xf32> into tensor<?x2x4xf32>
    %tq = tensor.dim %qe, %c0 : tensor<?x2x4xf32>
    %qn = tensor.extract_slice %qe[0, 0, 0] [%tq, 2, 2] [1, 1, 1] : tensor<?x2x4xf32> to tensor<?x2x2xf32>
    %qr = tensor.extract_slice %qe[0, 0, 2] [%tq, 2, 2] [1, 1, 1] : tensor<?x2x4xf32> to tensor<?x2x2xf32>
    %wkva = moe.param "kv_a_proj_with_mqa.weight" : tensor<6x8xf32>
    %kva = moe.linear %x, %wkva : tensor<?x8xf32>, tensor<6x8xf32> -> tensor<?x6xf32>
    %tk = tensor.dim %kva, %c0 : tensor<?x6xf32>
    %c = tensor.extract_slice %kva[0, 0] [%tk, 4] [1, 1] : tensor<?x6xf32> to tensor<?x4xf32>
    %wn = moe.param "kv_a_layernorm.weight" : tensor<4xf32>
    %cn = moe.rms_norm %c, %wn {epsilon = 1.0e-6 : f32} : tensor<?x4xf32>, tensor<4xf32> -> tensor<?x4xf32>
    %kr = tensor.extract_slice %kva[0, 4] [%tk, 2] [1, 1] : tensor<?x6xf32> to tensor<?x2xf32>
    %kre = tensor.expand_shape %kr [[0], [1, 2]] output_shape [%t, 1, 2] : tensor<?x2xf32> into tensor<?x1x2xf32>
    %qrr = moe.rope %qr, %pos {interleaved, theta = 1.0e4 : f32} : tensor<?x2x2xf32>, tensor<?xi64> -> tensor<?x2x2xf32>
    %krr = moe.rope %kre, %pos {interleaved, theta = 1.0e4 : f32} : tensor<?x1x2xf32>, tensor<?xi64> -> tensor<?x1x2xf32>
    %wkv = moe.param "kv_b_proj.weight" : tensor<8x4xf32>
    %wkv3 = tensor.expand_shape %wkv [[0, 1], [2]] output_shape [2, 4, 4] : tensor<8x4xf32> into tensor<2x4x4xf32>
    %wuk = tensor.extract_slice %wkv3[0, 0, 0] [2, 2, 4] [1, 1, 1] : tensor<2x4x4xf32> to tensor<2x2x4xf32>
    %wuv = tensor.extract_slice %wkv3[0, 2, 0] [2, 2, 4] [1, 1, 1] : tensor<2x4x4xf32> to tensor<2x2x4xf32>
    %qa = moe.head_linear %qn, %wuk {transpose_weight} : tensor<?x2x2xf32>, tensor<2x2x4xf32> -> tensor<?x2x4xf32>
    %q = tensor.concat dim(2) %qa, %qrr : (tensor<?x2x4xf32>, tensor<?x2x2xf32>) -> tensor<?x2x6xf32>
    %ce = tensor.expand_shape %cn [[0], [1, 2]] output_shape [%t, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
    %kv = tensor.concat dim(2) %ce, %krr : (tensor<?x1x4xf32>, tensor<?x1x2xf32>) -> tensor<?x1x6xf32>
    moe.kv_cache %kv, %kv, %pos {layer = 0 : i64} : tensor<?x1x6xf32>, tensor<?x1x6xf32>, tensor<?xi64>
    %a = moe.attention %q, %kv, %kv, %pos, %pos {scale = 0.5 : f32} : tensor<?x2x6xf32>, tensor<?x1x6xf32>, tensor<?x1x6xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x6xf32>
    %ta = tensor.dim %a, %c0 : tensor<?x2x6xf32>
    %al = tensor.extract_slice %a[0, 0, 0] [%ta, 2, 4] [1, 1, 1] : tensor<?x2x6xf32> to tensor<?x2x4xf32>
    %v = moe.head_linear %al, %wuv : tensor<?x2x4xf32>, tensor<2x2x4xf32> -> tensor<?x2x2xf32>
    %f = tensor.collapse_shape %v [[0], [1, 2]] : tensor<?x2x2xf32> into tensor<?x4xf32>
    %wo = moe.param "o_proj.weight" : tensor<8x4xf32>
    %o = moe.linear %f, %wo : tensor<?x4xf32>, tensor<8x4xf32> -> tensor<?x8xf32>
    return %o : tensor<?x8xf32>
  }
}
