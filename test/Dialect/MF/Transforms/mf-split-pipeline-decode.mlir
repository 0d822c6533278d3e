// RUN: meshfold-opt %s --mf-split-pipeline | FileCheck %s

// -mf-split-pipeline splits the entry (@prefill) and the decode step
// (moe.decode_step, from mf-derive-decode) the same way: each becomes a
// switch on the rank's stage over its own stage functions, the step's with
// the step's (token ids, positions) arguments.
// CHECK-LABEL: func.func @prefill(
// CHECK-NEXT:      %[[PP:.+]] = mf.coord "attention" "pp" : index
// CHECK-NEXT:      scf.index_switch %[[PP]]
// CHECK-NEXT:      case 0 {
// CHECK-NEXT:        func.call @prefill_stage0(
// CHECK-LABEL: func.func private @prefill_stage0(
// CHECK:           mf.send
// CHECK-LABEL: func.func private @prefill_stage1(
// CHECK:           mf.recv
// CHECK-LABEL: func.func @decode(
// CHECK-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>, %[[POS:[^:]+]]: tensor<?xi64>) attributes {moe.decode_step}
// CHECK-NEXT:      %[[PP:.+]] = mf.coord "attention" "pp" : index
// CHECK-NEXT:      scf.index_switch %[[PP]]
// CHECK-NEXT:      case 0 {
// CHECK-NEXT:        func.call @decode_stage0(%[[TOK]], %[[POS]])
// CHECK:           case 1 {
// CHECK-NEXT:        func.call @decode_stage1(%[[TOK]], %[[POS]])
// CHECK-LABEL: func.func private @decode_stage0(
// CHECK-NOT:       moe.layer 1
// CHECK:           mf.send
// CHECK-LABEL: func.func private @decode_stage1(
// CHECK:           mf.recv
// CHECK-NOT:       moe.layer 0
// CHECK:           moe.logits
// CHECK-NOT:       func.func
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 1, pp = 2], experts = [ep = 1 : (tp), pp = 2 : (pp)]>} {
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
  func.func @decode(%tok: tensor<?xi64>, %pos: tensor<?xi64>) attributes {moe.decode_step} {
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
