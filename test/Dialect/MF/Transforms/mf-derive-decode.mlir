// RUN: meshfold-opt %s -split-input-file --mf-derive-decode -verify-diagnostics | FileCheck %s
// RUN: meshfold-opt %s -split-input-file --mf-derive-decode="keep-entry=false" -verify-diagnostics | FileCheck %s --check-prefix=STEP

// With keep-entry=false the step alone remains: with no history it is
// prefill.
// STEP-LABEL: module
// STEP-NOT: func.func @prefill
// STEP: func.func @decode(%{{.*}}: tensor<?xi64>, %{{.*}}: tensor<?xi64>)
// STEP-NOT: func.func @prefill

// One layer of the imported model's shape: @prefill stays as it was and
// @decode(%tokens, %positions) follows it, with the positions taken from its
// argument, the attention reading the cached history followed by the step's
// own K/V, and the LM head computing every row's logits (a step's rows are
// the newest tokens of the requests it batches).
// CHECK-LABEL: func.func @prefill(%{{.*}}: tensor<?xi64>)
// CHECK: moe.positions
// CHECK: moe.attention %{{.*}}, %[[K:[^,]+]], %[[V:[^,]+]], %[[P:[^,]+]], %[[P]]
// CHECK-NOT: moe.kv_history
// CHECK: func.func @decode(%[[TOK:.*]]: tensor<?xi64>, %[[POS:.*]]: tensor<?xi64>) attributes {moe.decode_step}
// CHECK-NOT: moe.positions
// CHECK: moe.embed %{{.*}}, %[[TOK]]
// CHECK: moe.layer 0(%{{.*}}, %[[POS]])
// CHECK: ^bb0(%{{.*}}: tensor<?x8xf32>, %[[LP:.*]]: tensor<?xi64>):
// CHECK: moe.kv_cache %[[SK:[^,]+]], %[[SV:[^,]+]], %[[LP]] {layer = 0 : i64}
// CHECK: %[[HK:.*]], %[[HV:.*]], %[[HP:.*]] = moe.kv_history %[[SK]], %[[SV]], %[[LP]] {layer = 0 : i64} : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64> -> tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>
// CHECK: moe.attention %{{.*}}, %[[HK]], %[[HV]], %[[LP]], %[[HP]]
// CHECK: %[[N:.*]] = moe.rms_norm
// CHECK: %[[ALL:.*]] = moe.linear %[[N]], %{{.*}} : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<?x16xf32>
// CHECK: moe.step_logits %[[ALL]], %[[POS]] : tensor<?x16xf32>, tensor<?xi64>
// CHECK-NOT: moe.lm_head
// CHECK-NOT: moe.logits
module {
  func.func @prefill(%tokens: tensor<?xi64>) {
    %pos = moe.positions %tokens : tensor<?xi64> -> tensor<?xi64>
    %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %h = moe.embed %e, %tokens : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    %h1 = moe.layer 0(%h, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%x: tensor<?x8xf32>, %p: tensor<?xi64>):
      %c0 = arith.constant 0 : index
      %t = tensor.dim %x, %c0 : tensor<?x8xf32>
      %wq = moe.param "model.layers.0.self_attn.q_proj.weight" : tensor<8x8xf32>
      %q2 = moe.linear %x, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
      %q = tensor.expand_shape %q2 [[0], [1, 2]] output_shape [%t, 2, 4] : tensor<?x8xf32> into tensor<?x2x4xf32>
      %wk = moe.param "model.layers.0.self_attn.k_proj.weight" : tensor<4x8xf32>
      %k2 = moe.linear %x, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %k = tensor.expand_shape %k2 [[0], [1, 2]] output_shape [%t, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
      %wv = moe.param "model.layers.0.self_attn.v_proj.weight" : tensor<4x8xf32>
      %v2 = moe.linear %x, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
      %v = tensor.expand_shape %v2 [[0], [1, 2]] output_shape [%t, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
      moe.kv_cache %k, %v, %p {layer = 0 : i64} : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>
      %a = moe.attention %q, %k, %v, %p, %p {scale = 0.5 : f32} : tensor<?x2x4xf32>, tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x4xf32>
      %f = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x2x4xf32> into tensor<?x8xf32>
      %y = arith.addf %x, %f : tensor<?x8xf32>
      moe.yield %y : tensor<?x8xf32>
    }
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = moe.rms_norm %h1, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %w = moe.param "lm_head.weight" : tensor<16x8xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %t = tensor.dim %tokens, %c0 : tensor<?xi64>
    %last = arith.subi %t, %c1 : index
    %l = moe.lm_head %n, %w, %pos, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l : tensor<16xf32>
    return
  }
}

// -----

// Nothing to derive from.
// expected-error @+1 {{mf-derive-decode: no entry function @prefill}}
module {
  func.func @other() {
    return
  }
}

// -----

// The step is derived from the global model and partitioned with prefill
// (mf-partition): not from an already partitioned module.
// expected-error @+1 {{mf-derive-decode: the module is partitioned already; derive the step from the global model, then partition both}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @prefill(%tokens: tensor<?xi64>) {
    %0 = mf.coord "attention" "tp" : index
    return
  }
}

// -----

// An attention whose K/V no moe.kv_cache records has no cache to read.
module {
  func.func @prefill(%tokens: tensor<?xi64>) {
    %pos = moe.positions %tokens : tensor<?xi64> -> tensor<?xi64>
    %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %h = moe.embed %e, %tokens : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    %c0 = arith.constant 0 : index
    %t = tensor.dim %h, %c0 : tensor<?x8xf32>
    %q = tensor.expand_shape %h [[0], [1, 2]] output_shape [%t, 2, 4] : tensor<?x8xf32> into tensor<?x2x4xf32>
    // expected-error @+1 {{mf-derive-decode: the attention's K/V are not recorded by a moe.kv_cache: no cache to decode from}}
    %a = moe.attention %q, %q, %q, %pos, %pos {scale = 0.5 : f32} : tensor<?x2x4xf32>, tensor<?x2x4xf32>, tensor<?x2x4xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x4xf32>
    return
  }
}
