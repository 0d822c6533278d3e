// RUN: not meshfold-opt %s --mf-fold-experts=mode=ring 2>&1 | FileCheck %s --implicit-check-not=error
// RUN: not meshfold-opt %s --mf-fold-experts=mode=Flat 2>&1 | FileCheck %s --check-prefix=CASE --implicit-check-not=error

// -mf-fold-experts checks its mode option before it looks at the plan: an
// unknown mode is one error naming the option and the accepted values, even
// where the plan leaves nothing to fold (EP = 1, the experts stay whole).
// Modes are spelled in lower case.

// CHECK: error: mf-fold-experts: mode must be auto, flat or hierarchical, got 'ring'
// CASE: error: mf-fold-experts: mode must be auto, flat or hierarchical, got 'Flat'
module attributes {mf.plan = #mf.plan<devices = 1, gpus_per_node = 8,
    attention = [tp = 1], experts = [ep = 1 : (tp)]>} {
  func.func @ep1(%x: tensor<?x8xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>) -> tensor<?x8xf32> {
    %w1 = moe.param "experts.{e}.w1.weight" : tensor<8x16x8xf32>
    %w2 = moe.param "experts.{e}.w2.weight" : tensor<8x8x16xf32>
    %w3 = moe.param "experts.{e}.w3.weight" : tensor<8x16x8xf32>
    %y = moe.experts %x, %w, %i, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x8xf32>, tensor<8x8x16xf32>, tensor<8x16x8xf32> -> tensor<?x8xf32>
    return %y : tensor<?x8xf32>
  }
}
