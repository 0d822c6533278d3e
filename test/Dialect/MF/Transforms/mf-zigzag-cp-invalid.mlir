// RUN: meshfold-opt %s -split-input-file --mf-zigzag-cp -verify-diagnostics

// -mf-zigzag-cp needs a valid plan with a cp axis; errors sit on the module.

// Without a plan there is nothing to cut the prompt by.
// expected-error @+1 {{mf-zigzag-cp: the module has no plan (set mf.plan or use the mf-partition options)}}
module {
  func.func @no_plan(%tok: tensor<?xi64>) -> tensor<?xi64> {
    %pos = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    return %pos : tensor<?xi64>
  }
}

// -----

// The plan must pass the plan rules (here: 2 x 2 axes on 8 devices).
// expected-error @+1 {{plan rule 'mesh-size': attention mesh axes multiply to 4, but the plan has 8 devices}}
module attributes {mf.plan = #mf.plan<devices = 8, gpus_per_node = 8,
    attention = [tp = 2, cp = 2], experts = [ep = 8 : (tp, cp)]>} {
  func.func @bad_plan(%tok: tensor<?xi64>) -> tensor<?xi64> {
    %pos = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    return %pos : tensor<?xi64>
  }
}

// -----

// TP > 1 places tokens by CP rank: the attention mesh needs a cp axis.
// expected-error @+1 {{mf-zigzag-cp: the attention mesh needs a cp axis (size 1 is fine) to place tokens}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, dp = 2], experts = [ep = 4 : (tp, dp)]>} {
  func.func @no_cp_axis(%tok: tensor<?xi64>) -> tensor<?xi64> {
    %pos = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    return %pos : tensor<?xi64>
  }
}
