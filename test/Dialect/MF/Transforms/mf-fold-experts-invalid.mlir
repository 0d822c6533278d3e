// RUN: meshfold-opt %s -split-input-file --mf-fold-experts -verify-diagnostics

// -mf-fold-experts needs a plan, experts that EP divides and expert weights
// that are moe.param (each rank loads its slice).

// Without a plan there is no EP group.
// expected-error @+1 {{mf-fold-experts: the module has no plan (set mf.plan or use the mf-partition options)}}
module {
  func.func @no_plan(%x: tensor<?x8xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>) -> tensor<?x8xf32> {
    %w1 = moe.param "experts.{e}.w1.weight" : tensor<8x16x8xf32>
    %w2 = moe.param "experts.{e}.w2.weight" : tensor<8x8x16xf32>
    %w3 = moe.param "experts.{e}.w3.weight" : tensor<8x16x8xf32>
    %y = moe.experts %x, %w, %i, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x8xf32>, tensor<8x8x16xf32>, tensor<8x16x8xf32> -> tensor<?x8xf32>
    return %y : tensor<?x8xf32>
  }
}

// -----

// ep-experts: EP=4 does not divide 6 experts.
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, dp = 2], experts = [ep = 4 : (tp, dp)]>} {
  func.func @ep_experts(%x: tensor<?x8xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>) -> tensor<?x8xf32> {
    %w1 = moe.param "experts.{e}.w1.weight" : tensor<6x16x8xf32>
    %w2 = moe.param "experts.{e}.w2.weight" : tensor<6x8x16xf32>
    %w3 = moe.param "experts.{e}.w3.weight" : tensor<6x16x8xf32>
    // expected-error @+1 {{plan rule 'ep-experts': EP=4 must divide n_experts=6}}
    %y = moe.experts %x, %w, %i, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<6x16x8xf32>, tensor<6x8x16xf32>, tensor<6x16x8xf32> -> tensor<?x8xf32>
    return %y : tensor<?x8xf32>
  }
}

// -----

// The expert weights must be moe.param to be sharded.
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, dp = 2], experts = [ep = 4 : (tp, dp)]>} {
  func.func @not_param(%x: tensor<?x8xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<8x16x8xf32>) -> tensor<?x8xf32> {
    %w2 = moe.param "experts.{e}.w2.weight" : tensor<8x8x16xf32>
    %w3 = moe.param "experts.{e}.w3.weight" : tensor<8x16x8xf32>
    // expected-error @+1 {{mf-fold-experts: expert weights must be moe.param}}
    %y = moe.experts %x, %w, %i, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x8xf32>, tensor<8x8x16xf32>, tensor<8x16x8xf32> -> tensor<?x8xf32>
    return %y : tensor<?x8xf32>
  }
}
