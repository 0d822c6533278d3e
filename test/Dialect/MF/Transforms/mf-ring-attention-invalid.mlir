// RUN: meshfold-opt %s -split-input-file --mf-ring-attention -verify-diagnostics

// -mf-ring-attention needs a valid plan; errors sit on the module.

// Without a plan there is no CP group.
// expected-error @+1 {{mf-ring-attention: the module has no plan (set mf.plan or use the mf-partition options)}}
module {
  func.func @no_plan(%q: tensor<?x4x2xf32>, %k: tensor<?x2x2xf32>, %p: tensor<?xi64>) -> tensor<?x4x2xf32> {
    %a = moe.attention %q, %k, %k, %p, %p {scale = 0.5 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    return %a : tensor<?x4x2xf32>
  }
}

// -----

// The plan must pass the plan rules (here: an expert axis named pp that is
// not the attention pp axis).
// expected-error @+1 {{plan rule 'pp-groups': expert axis 'pp' (size 2) is composed of cp, but must be exactly the attention axis 'pp'}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 2 : (tp), pp = 2 : (cp)]>} {
  func.func @bad_plan(%q: tensor<?x4x2xf32>, %k: tensor<?x2x2xf32>, %p: tensor<?xi64>) -> tensor<?x4x2xf32> {
    %a = moe.attention %q, %k, %k, %p, %p {scale = 0.5 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
    return %a : tensor<?x4x2xf32>
  }
}
