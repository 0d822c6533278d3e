// RUN: meshfold-opt %s | meshfold-opt | FileCheck %s
// RUN: meshfold-opt %s --mlir-print-op-generic | meshfold-opt | FileCheck %s

// Round trip of the mf communication ops on local tensors, each naming its
// mesh and the axes of its group, under the seed plan (whose group sizes the
// verifiers check: TP = 2, CP = 2, EP = 16).
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {

  // CHECK-LABEL: func.func @coord
  // CHECK: mf.coord "attention" "cp" : index
  // CHECK: mf.coord "experts" "ep" : index
  func.func @coord() -> (index, index) {
    %c = mf.coord "attention" "cp" : index
    %e = mf.coord "experts" "ep" : index
    return %c, %e : index, index
  }

  // The SP all-gather and reduce-scatter on the TP pair, with static sizes
  // doubled and halved, and an all-reduce.
  // CHECK-LABEL: func.func @tp_collectives
  // CHECK: %[[AG:.+]] = mf.all_gather %{{.+}} on "attention" ["tp"] dim 0 : tensor<4x64xf32> -> tensor<8x64xf32>
  // CHECK: %[[RS:.+]] = mf.reduce_scatter %[[AG]] on "attention" ["tp"] dim 0 : tensor<8x64xf32> -> tensor<4x64xf32>
  // CHECK: mf.all_reduce %[[RS]] on "attention" ["tp"] : tensor<4x64xf32> -> tensor<4x64xf32>
  // CHECK: mf.all_gather %{{.+}} on "attention" ["tp", "cp"] dim 1 : tensor<?x16xbf16> -> tensor<?x64xbf16>
  func.func @tp_collectives(%x: tensor<4x64xf32>, %y: tensor<?x16xbf16>) -> (tensor<4x64xf32>, tensor<?x64xbf16>) {
    %a = mf.all_gather %x on "attention" ["tp"] dim 0 : tensor<4x64xf32> -> tensor<8x64xf32>
    %s = mf.reduce_scatter %a on "attention" ["tp"] dim 0 : tensor<8x64xf32> -> tensor<4x64xf32>
    %r = mf.all_reduce %s on "attention" ["tp"] : tensor<4x64xf32> -> tensor<4x64xf32>
    %b = mf.all_gather %y on "attention" ["tp", "cp"] dim 1 : tensor<?x16xbf16> -> tensor<?x64xbf16>
    return %r, %b : tensor<4x64xf32>, tensor<?x64xbf16>
  }

  // K, V and their global positions in one ring step on the CP group.
  // CHECK-LABEL: func.func @ring
  // CHECK: %{{.+}}:3 = mf.ring_step %{{.+}}, %{{.+}}, %{{.+}} on "attention" ["cp"] : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64> -> tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
  func.func @ring(%k: tensor<?x2x8xf32>, %v: tensor<?x2x8xf32>, %p: tensor<?xi64>) -> tensor<?x2x8xf32> {
    %k1, %v1, %p1 = mf.ring_step %k, %v, %p on "attention" ["cp"] : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64> -> tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
    return %k1 : tensor<?x2x8xf32>
  }

  // EP dispatch (flat and hierarchical) and combine.
  // CHECK-LABEL: func.func @moe
  // CHECK: %[[ROWS:.+]], %[[LOCAL:.+]], %[[R:.+]] = mf.dispatch %{{.+}}, %{{.+}}, %{{.+}} on "experts" ["ep"] experts 32 hierarchical : tensor<?x64xf32>, tensor<?x2xi64>, tensor<?x2xf32> -> tensor<?x64xf32>, tensor<?xi64>, !mf.dispatch
  // CHECK: mf.combine %[[R]], %[[ROWS]] tokens %{{.+}} : !mf.dispatch, tensor<?x64xf32> -> tensor<?x64xf32>
  // CHECK: mf.dispatch {{.+}} experts 32 flat
  func.func @moe(%x: tensor<?x64xf32>, %i: tensor<?x2xi64>, %w: tensor<?x2xf32>, %t: index) -> tensor<?x64xf32> {
    %rows, %local, %r = mf.dispatch %x, %i, %w on "experts" ["ep"] experts 32 hierarchical : tensor<?x64xf32>, tensor<?x2xi64>, tensor<?x2xf32> -> tensor<?x64xf32>, tensor<?xi64>, !mf.dispatch
    %y = mf.combine %r, %rows tokens %t : !mf.dispatch, tensor<?x64xf32> -> tensor<?x64xf32>
    %rows2, %local2, %r2 = mf.dispatch %y, %i, %w on "experts" ["ep"] experts 32 flat : tensor<?x64xf32>, tensor<?x2xi64>, tensor<?x2xf32> -> tensor<?x64xf32>, tensor<?xi64>, !mf.dispatch
    %z = mf.combine %r2, %rows2 tokens %t : !mf.dispatch, tensor<?x64xf32> -> tensor<?x64xf32>
    return %z : tensor<?x64xf32>
  }

  // A pipeline-stage boundary and the LM-head gather.
  // CHECK-LABEL: func.func @p2p_gather
  // CHECK: mf.send %{{.+}} to "attention" "pp" 1 : tensor<?x64xf32>
  // CHECK: %[[RECV:.+]] = mf.recv from "attention" "pp" -1[%{{.+}}] : tensor<?x64xf32>
  // CHECK: mf.gather %{{.+}} on "attention" ["tp"] dim 0 root 0 : tensor<256xf32> -> tensor<512xf32>
  func.func @p2p_gather(%x: tensor<?x64xf32>, %t: index, %l: tensor<256xf32>) -> (tensor<?x64xf32>, tensor<512xf32>) {
    mf.send %x to "attention" "pp" 1 : tensor<?x64xf32>
    %y = mf.recv from "attention" "pp" -1 [%t] : tensor<?x64xf32>
    %g = mf.gather %l on "attention" ["tp"] dim 0 root 0 : tensor<256xf32> -> tensor<512xf32>
    return %y, %g : tensor<?x64xf32>, tensor<512xf32>
  }

  // A decode step's rows dealt over the CP ranks, and the rank's positions
  // and token ids taken from the step's.
  // CHECK-LABEL: func.func @step_rows
  // CHECK: %[[ROWS:.+]] = mf.step_rows %{{.+}} on "attention" "cp" pad_to 2 : tensor<?xi64> -> tensor<?xi64>
  // CHECK: mf.take %{{.+}}[%[[ROWS]]] fill 1073741824 : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
  func.func @step_rows(%pos: tensor<?xi64>) -> tensor<?xi64> {
    %rows = mf.step_rows %pos on "attention" "cp" pad_to 2 : tensor<?xi64> -> tensor<?xi64>
    %mine = mf.take %pos[%rows] fill 1073741824 : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
    return %mine : tensor<?xi64>
  }
}
