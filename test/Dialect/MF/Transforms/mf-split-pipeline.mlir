// RUN: meshfold-opt %s -split-input-file --mf-split-pipeline | FileCheck %s

// -mf-split-pipeline cuts the top-level moe.layer ops of the entry @prefill
// into PP stages, one private function @prefill_stage<s> per stage, and
// makes the entry a switch on the rank's pp coordinate. Stage 0 keeps the
// embedding, the last stage the final norm, LM head and logits; each
// boundary sends the residual to pp+1 and receives it from pp-1, sized by
// the stage's positions. Inputs: embedding, layers with a trivial body, and
// the head (d 8, vocab 16). The entry option is tested in
// mf-split-pipeline-entry.mlir, errors in mf-split-pipeline-invalid.mlir.

// PP=2 with 2 layers: the entry only dispatches (and keeps its C interface,
// which the stages do not get); stage 0 runs the embedding and layer 0 and
// sends; stage 1 receives and runs layer 1 and the head.
// CHECK-LABEL: func.func @prefill(
// CHECK-SAME:      %[[TOK:[^:]+]]: tensor<?xi64>) attributes {llvm.emit_c_interface} {
// CHECK-NEXT:      %[[PP:.+]] = mf.coord "attention" "pp" : index
// CHECK-NEXT:      scf.index_switch %[[PP]]{{ *$}}
// CHECK-NEXT:      case 0 {
// CHECK-NEXT:        func.call @prefill_stage0(%[[TOK]]) : (tensor<?xi64>) -> ()
// CHECK-NEXT:        scf.yield
// CHECK-NEXT:      }
// CHECK-NEXT:      case 1 {
// CHECK-NEXT:        func.call @prefill_stage1(%[[TOK]]) : (tensor<?xi64>) -> ()
// CHECK-NEXT:        scf.yield
// CHECK-NEXT:      }
// CHECK-NEXT:      default {
// CHECK-NEXT:      }
// CHECK-NEXT:      return
// CHECK-NEXT:    }
// CHECK-LABEL: func.func private @prefill_stage0(
// CHECK-SAME:      %[[TOK0:[^:]+]]: tensor<?xi64>) {
// CHECK-NEXT:      %[[POS0:.+]] = moe.positions %[[TOK0]]
// CHECK-NEXT:      %[[E:.+]] = moe.param "model.embed_tokens.weight"
// CHECK-NEXT:      %[[EMB:.+]] = moe.embed %[[E]], %[[TOK0]]
// CHECK-NEXT:      %[[L0:.+]] = moe.layer 0(%[[EMB]], %[[POS0]])
// CHECK:             moe.yield
// CHECK-NEXT:      }
// CHECK-NEXT:      mf.send %[[L0]] to "attention" "pp" 1 : tensor<?x8xf32>
// CHECK-NEXT:      return
// CHECK-NEXT:    }
// CHECK-LABEL: func.func private @prefill_stage1(
// CHECK-SAME:      %[[TOK1:[^:]+]]: tensor<?xi64>) {
// CHECK-NEXT:      %[[POS1:.+]] = moe.positions %[[TOK1]]
// CHECK-NEXT:      %[[C0:.+]] = arith.constant 0 : index
// CHECK-NEXT:      %[[T:.+]] = tensor.dim %[[POS1]], %[[C0]] : tensor<?xi64>
// CHECK-NEXT:      %[[H:.+]] = mf.recv from "attention" "pp" -1[%[[T]]] : tensor<?x8xf32>
// CHECK-NEXT:      %[[L1:.+]] = moe.layer 1(%[[H]], %[[POS1]])
// CHECK:             moe.yield
// CHECK-NEXT:      }
// CHECK-NEXT:      %[[NW:.+]] = moe.param "model.norm.weight"
// CHECK-NEXT:      %[[N:.+]] = moe.rms_norm %[[L1]], %[[NW]]
// CHECK:           %[[LOG:.+]] = moe.lm_head %[[N]],
// CHECK-NEXT:      moe.logits %[[LOG]] : tensor<16xf32>
// CHECK-NEXT:      return
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
}

// -----

// PP=3 with 3 layers: the middle stage receives, runs layer 1 and sends.
// CHECK-LABEL: func.func @prefill(
// CHECK:           case 2 {
// CHECK-NEXT:        func.call @prefill_stage2
// CHECK-LABEL: func.func private @prefill_stage0(
// CHECK-NOT:       mf.recv
// CHECK:           moe.layer 0(
// CHECK-NOT:       moe.layer
// CHECK:           mf.send %{{.+}} to "attention" "pp" 1
// CHECK-LABEL: func.func private @prefill_stage1(
// CHECK-NOT:       moe.embed
// CHECK:           %[[H:.+]] = mf.recv from "attention" "pp" -1
// CHECK-NEXT:      %[[O:.+]] = moe.layer 1(%[[H]],
// CHECK:           mf.send %[[O]] to "attention" "pp" 1
// CHECK-NEXT:      return
// CHECK-LABEL: func.func private @prefill_stage2(
// CHECK:           %[[H2:.+]] = mf.recv from "attention" "pp" -1
// CHECK-NEXT:      moe.layer 2(%[[H2]],
// CHECK:           moe.logits
// CHECK-NOT:       mf.send
module attributes {mf.plan = #mf.plan<devices = 3, gpus_per_node = 8,
    attention = [tp = 1, pp = 3], experts = [ep = 1 : (tp), pp = 3 : (pp)]>} {
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

// PP=2 with 4 layers: two consecutive layers per stage.
// CHECK-LABEL: func.func private @prefill_stage0(
// CHECK:           %[[A:.+]] = moe.layer 0(
// CHECK:           %[[B:.+]] = moe.layer 1(%[[A]],
// CHECK:           mf.send %[[B]] to "attention" "pp" 1
// CHECK-LABEL: func.func private @prefill_stage1(
// CHECK:           %[[H:.+]] = mf.recv from "attention" "pp" -1
// CHECK-NEXT:      %[[C:.+]] = moe.layer 2(%[[H]],
// CHECK:           moe.layer 3(%[[C]],
// CHECK-NOT:       moe.layer
// CHECK:           moe.logits
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
    %h2 = moe.layer 2(%h1, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
      %r = arith.addf %a, %a : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    %h3 = moe.layer 3(%h2, %pos) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
      %r = arith.addf %a, %a : tensor<?x8xf32>
      moe.yield %r : tensor<?x8xf32>
    }
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = moe.rms_norm %h3, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
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

// PP=1 (TP2): no stages; the entry keeps everything.
// CHECK-LABEL: func.func @prefill(
// CHECK-NOT:       scf.index_switch
// CHECK:           moe.layer 0(
// CHECK:           moe.layer 1(
// CHECK:           moe.logits
// CHECK-NOT:       mf.send
// CHECK-NOT:       func.func
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2, pp = 1], experts = [ep = 2 : (tp), pp = 1 : (pp)]>} {
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
