// RUN: meshfold-opt %s -split-input-file --mf-last-token-head | FileCheck %s
// RUN: meshfold-opt %s -split-input-file --mf-last-token-head=prompt-logprobs=true | FileCheck %s --check-prefix=PROMPT

// -mf-last-token-head: only position T-1 reaches the final norm and the LM
// head. The row of that position is taken before the norm, the TP group
// shares it (all-reduce of the row and of its found flag), each TP rank
// computes V/TP logits with its vocab slice of the head and TP rank 0 gathers
// them and records them where the row was found. Inputs: the final norm,
// LM head and logits (d 8, vocab 16). Errors are in
// mf-last-token-head-invalid.mlir.

// TP=2: half the vocab per rank, gathered on TP rank 0.
// CHECK-LABEL: func.func @tp2(
// CHECK-SAME:      %[[H:[^:]+]]: tensor<?x8xf32>, %[[POS:[^:]+]]: tensor<?xi64>, %[[LAST:[^:]+]]: index)
// CHECK-NEXT:      %[[NW:.+]] = moe.param "model.norm.weight" : tensor<8xf32>
// CHECK-NEXT:      %[[ROW:.+]], %[[FOUND:.+]] = moe.take_position %[[H]], %[[POS]], %[[LAST]] : tensor<?x8xf32>, tensor<?xi64> -> tensor<1x8xf32>, tensor<1xf32>
// CHECK-NEXT:      %[[SROW:.+]] = mf.all_reduce %[[ROW]] on "attention" ["tp"] : tensor<1x8xf32> -> tensor<1x8xf32>
// CHECK-NEXT:      %[[SFOUND:.+]] = mf.all_reduce %[[FOUND]] on "attention" ["tp"] : tensor<1xf32> -> tensor<1xf32>
// CHECK-NEXT:      %[[N:.+]] = moe.rms_norm %[[SROW]], %[[NW]] {epsilon = 9.99999974E-6 : f32} : tensor<1x8xf32>, tensor<8xf32> -> tensor<1x8xf32>
// CHECK-NEXT:      %[[LASTI:.+]] = arith.index_cast %[[LAST]] : index to i64
// CHECK-NEXT:      %[[ONE:.+]] = tensor.from_elements %[[LASTI]] : tensor<1xi64>
// CHECK-NEXT:      %[[W:.+]] = moe.param "lm_head.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<8x8xf32>
// CHECK-NEXT:      %[[PART:.+]] = moe.lm_head %[[N]], %[[W]], %[[ONE]], %[[LAST]] : tensor<1x8xf32>, tensor<8x8xf32>, tensor<1xi64> -> tensor<8xf32>
// CHECK-NEXT:      %[[ALL:.+]] = mf.gather %[[PART]] on "attention" ["tp"] dim 0 root 0 : tensor<8xf32> -> tensor<16xf32>
// CHECK-NEXT:      %[[C0:.+]] = arith.constant 0 : index
// CHECK-NEXT:      %[[F:.+]] = tensor.extract %[[SFOUND]][%[[C0]]] : tensor<1xf32>
// CHECK-NEXT:      %[[HALF:.+]] = arith.constant 5.000000e-01 : f32
// CHECK-NEXT:      %[[HELD:.+]] = arith.cmpf ogt, %[[F]], %[[HALF]] : f32
// CHECK-NEXT:      %[[TP:.+]] = mf.coord "attention" "tp" : index
// CHECK-NEXT:      %[[ROOT:.+]] = arith.cmpi eq, %[[TP]], %[[C0]] : index
// CHECK-NEXT:      %[[VALID:.+]] = arith.andi %[[HELD]], %[[ROOT]] : i1
// CHECK-NEXT:      moe.logits %[[ALL]] if %[[VALID]] : tensor<16xf32>
// CHECK-NEXT:      return
// With prompt-logprobs the rank also records the logits of every position
// it holds, with the whole LM head, before the last-token path; its vocab
// slice is then a view of that head (the rank loads lm_head once).
// PROMPT-LABEL: func.func @tp2(
// PROMPT-SAME:      %[[H:[^:]+]]: tensor<?x8xf32>, %[[POS:[^:]+]]: tensor<?xi64>, %{{[^:]+}}: index)
// PROMPT-NEXT:      %[[NW:.+]] = moe.param "model.norm.weight" : tensor<8xf32>
// PROMPT-NEXT:      %[[N:.+]] = moe.rms_norm %[[H]], %[[NW]] {{.+}} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
// PROMPT-NEXT:      %[[W:.+]] = moe.param "lm_head.weight" : tensor<16x8xf32>
// PROMPT-NEXT:      %[[ALL:.+]] = moe.linear %[[N]], %[[W]] : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<?x16xf32>
// PROMPT-NEXT:      moe.prompt_logits %[[ALL]], %[[POS]] : tensor<?x16xf32>, tensor<?xi64>
// PROMPT-NEXT:      moe.take_position %[[H]], %[[POS]]
// PROMPT-NOT:       mf.shard
// PROMPT:           %[[TP:.+]] = mf.coord "attention" "tp" : index
// PROMPT-NEXT:      %[[C8:.+]] = arith.constant 8 : index
// PROMPT-NEXT:      %[[OFF:.+]] = arith.muli %[[TP]], %[[C8]] : index
// PROMPT-NEXT:      %[[SLICE:.+]] = tensor.extract_slice %[[W]][%[[OFF]], 0] [8, 8] [1, 1] : tensor<16x8xf32> to tensor<8x8xf32>
// PROMPT-NEXT:      moe.lm_head %{{.+}}, %[[SLICE]], %{{.+}} : tensor<1x8xf32>, tensor<8x8xf32>, tensor<1xi64> -> tensor<8xf32>
// PROMPT:           moe.logits %{{.+}} if %{{.+}} : tensor<16xf32>
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @tp2(%h: tensor<?x8xf32>, %pos: tensor<?xi64>, %last: index) {
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = moe.rms_norm %h, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %w = moe.param "lm_head.weight" : tensor<16x8xf32>
    %l = moe.lm_head %n, %w, %pos, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l : tensor<16xf32>
    return
  }
}

// -----

// TP=1 (CP=2): the rank holding the row computes all 16 logits with the
// whole head and records them; no all-reduce, slice, gather or TP coordinate.
// CHECK-LABEL: func.func @tp1(
// CHECK-SAME:      %[[H:[^:]+]]: tensor<?x8xf32>, %[[POS:[^:]+]]: tensor<?xi64>, %[[LAST:[^:]+]]: index)
// CHECK-NEXT:      %[[NW:.+]] = moe.param "model.norm.weight" : tensor<8xf32>
// CHECK-NEXT:      %[[W:.+]] = moe.param "lm_head.weight" : tensor<16x8xf32>
// CHECK-NEXT:      %[[ROW:.+]], %[[FOUND:.+]] = moe.take_position %[[H]], %[[POS]], %[[LAST]]
// CHECK-NEXT:      %[[N:.+]] = moe.rms_norm %[[ROW]], %[[NW]] {{.+}} -> tensor<1x8xf32>
// CHECK-NEXT:      arith.index_cast
// CHECK-NEXT:      %[[ONE:.+]] = tensor.from_elements
// CHECK-NEXT:      %[[L:.+]] = moe.lm_head %[[N]], %[[W]], %[[ONE]], %[[LAST]] : tensor<1x8xf32>, tensor<16x8xf32>, tensor<1xi64> -> tensor<16xf32>
// CHECK-NEXT:      %[[C0:.+]] = arith.constant 0 : index
// CHECK-NEXT:      %[[F:.+]] = tensor.extract %[[FOUND]][%[[C0]]] : tensor<1xf32>
// CHECK-NEXT:      %[[HALF:.+]] = arith.constant 5.000000e-01 : f32
// CHECK-NEXT:      %[[HELD:.+]] = arith.cmpf ogt, %[[F]], %[[HALF]] : f32
// CHECK-NEXT:      moe.logits %[[L]] if %[[HELD]] : tensor<16xf32>
// CHECK-NEXT:      return
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [cp = 2], experts = [ep = 2 : (cp)]>} {
  func.func @tp1(%h: tensor<?x8xf32>, %pos: tensor<?xi64>, %last: index) {
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = moe.rms_norm %h, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %w = moe.param "lm_head.weight" : tensor<16x8xf32>
    %l = moe.lm_head %n, %w, %pos, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l : tensor<16xf32>
    return
  }
}

// -----

// TP=4: a quarter of the vocab per rank.
// CHECK-LABEL: func.func @tp4(
// CHECK:           moe.param "lm_head.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 4>} : tensor<4x8xf32>
// CHECK-NEXT:      moe.lm_head {{.+}} -> tensor<4xf32>
// CHECK-NEXT:      mf.gather %{{.+}} on "attention" ["tp"] dim 0 root 0 : tensor<4xf32> -> tensor<16xf32>
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
  func.func @tp4(%h: tensor<?x8xf32>, %pos: tensor<?xi64>, %last: index) {
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = moe.rms_norm %h, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %w = moe.param "lm_head.weight" : tensor<16x8xf32>
    %l = moe.lm_head %n, %w, %pos, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l : tensor<16xf32>
    return
  }
}

// -----

// A decode step records the logits of the rows that choose a token
// (moe.step_logits, each row the newest token of a request of the batch, or
// a prompt chunk's row): the TP group all-gathers its SP rows, takes those
// the runtime names (moe.step_head_rows of the CP rows' positions), each
// rank computes their logits with its vocab slice, and TP rank 0 gathers the
// slices (stacked [TP * n, V/TP], permuted to [n, V]) and records them at
// the taken positions. prompt-logprobs adds nothing there.
// CHECK-LABEL: func.func @decode_step(
// CHECK-SAME:      %[[H:[^:]+]]: tensor<?x8xf32>, %[[CPPOS:[^:]+]]: tensor<?xi64>)
// CHECK-NOT:       mf.slice
// CHECK-NEXT:      %[[NW:.+]] = moe.param "model.norm.weight" : tensor<8xf32>
// CHECK-NEXT:      %[[ROWS:.+]] = mf.all_gather %[[H]] on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:      %[[PICK:.+]] = moe.step_head_rows %[[CPPOS]] : tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:      %[[TAKEN:.+]] = moe.take_rows %[[ROWS]], %[[PICK]] : tensor<?x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
// CHECK-NEXT:      %[[TAKENPOS:.+]] = moe.take_rows %[[CPPOS]], %[[PICK]] : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
// CHECK-NEXT:      %[[N:.+]] = moe.rms_norm %[[TAKEN]], %[[NW]] {{.+}} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:      %[[W:.+]] = moe.param "lm_head.weight" {mf.shard = #mf.shard<dim = 0, mesh = "attention", axis = "tp", parts = 2>} : tensor<8x8xf32>
// CHECK-NEXT:      %[[PART:.+]] = moe.linear %[[N]], %[[W]] : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:      %[[C0:.+]] = arith.constant 0 : index
// CHECK-NEXT:      %[[NR:.+]] = tensor.dim %[[PART]], %[[C0]] : tensor<?x8xf32>
// CHECK-NEXT:      %[[STACK:.+]] = mf.gather %[[PART]] on "attention" ["tp"] dim 0 root 0 : tensor<?x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:      %[[BLOCKS:.+]] = tensor.expand_shape %[[STACK]] {{\[\[}}0, 1], [2]] output_shape [2, %[[NR]], 8] : tensor<?x8xf32> into tensor<2x?x8xf32>
// CHECK-NEXT:      %[[INIT:.+]] = tensor.empty(%[[NR]]) : tensor<?x2x8xf32>
// CHECK-NEXT:      %[[ROWSFIRST:.+]] = linalg.transpose ins(%[[BLOCKS]] : tensor<2x?x8xf32>) outs(%[[INIT]] : tensor<?x2x8xf32>) permutation = [1, 0, 2]
// CHECK-NEXT:      %[[ALL:.+]] = tensor.collapse_shape %[[ROWSFIRST]] {{\[\[}}0], [1, 2]] : tensor<?x2x8xf32> into tensor<?x16xf32>
// CHECK-NEXT:      %{{.+}} = arith.constant 0 : index
// CHECK-NEXT:      %[[TP:.+]] = mf.coord "attention" "tp" : index
// CHECK-NEXT:      %[[ROOT:.+]] = arith.cmpi eq, %[[TP]], %{{.+}} : index
// CHECK-NEXT:      moe.step_logits %[[ALL]], %[[TAKENPOS]] if %[[ROOT]] : tensor<?x16xf32>, tensor<?xi64>
// CHECK-NEXT:      return
// PROMPT-LABEL: func.func @decode_step(
// PROMPT-NOT:       moe.prompt_logits
// PROMPT:           moe.step_logits
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @decode_step(%h: tensor<?x8xf32>, %cppos: tensor<?xi64>) attributes {moe.decode_step} {
    %pos = mf.slice %cppos on "attention" ["tp"] dim 0 : tensor<?xi64> -> tensor<?xi64>
    %nw = moe.param "model.norm.weight" : tensor<8xf32>
    %n = moe.rms_norm %h, %nw {epsilon = 9.99999974E-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %w = moe.param "lm_head.weight" : tensor<16x8xf32>
    %l = moe.linear %n, %w : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<?x16xf32>
    moe.step_logits %l, %pos : tensor<?x16xf32>, tensor<?xi64>
    return
  }
}
