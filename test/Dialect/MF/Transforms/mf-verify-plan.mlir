// RUN: meshfold-opt %s -split-input-file -mf-verify-plan -verify-diagnostics | FileCheck %s

// -mf-verify-plan checks the module's #mf.plan against the plan rules and the
// model read off the moe ops (n_layers = number of moe.attention ops), and
// leaves a valid module unchanged. Errors name the rule and sit on the module.

//===----------------------------------------------------------------------===//
// Valid plans
//===----------------------------------------------------------------------===//

// The seed plan on a 2-layer model with 8 heads, 4 KV heads and 32 experts.
// CHECK-LABEL: module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8, nvlink_gbps = 4.500000e+02, ib_gbps = 5.000000e+01, attention = [tp = 2, cp = 2, dp = 4, pp = 2], experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>}
// CHECK-LABEL: func.func @seed
// CHECK: [[A0:%.+]] = moe.attention
// CHECK: moe.attention [[A0]]
// CHECK: [[W:%.+]], [[I:%.+]] = moe.router
// CHECK: moe.experts %{{.+}}, [[W]], [[I]]
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @seed(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>, %x: tensor<?x64xf32>,
                  %g: tensor<32x64xf32>, %w1: tensor<32x16x64xf32>, %w2: tensor<32x64x16xf32>)
      -> (tensor<?x8x8xf32>, tensor<?x64xf32>) {
    %a0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    %a1 = moe.attention %a0, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    %w, %i = moe.router %x, %g {renormalize, top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
    %e = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<32x16x64xf32>, tensor<32x64x16xf32>, tensor<32x16x64xf32> -> tensor<?x64xf32>
    return %a1, %e : tensor<?x8x8xf32>, tensor<?x64xf32>
  }
}

// -----

// The seed plan with PP and DP swapped (rank = tp + 2*cp + 4*pp + 8*dp).
// CHECK-LABEL: module attributes {mf.plan = #mf.plan<{{.*}}attention = [tp = 2, cp = 2, pp = 2, dp = 4], experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>}
// CHECK-LABEL: func.func @swapped
// CHECK-COUNT-2: moe.attention
// CHECK: moe.router
// CHECK: moe.experts
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, pp = 2, dp = 4],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @swapped(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>, %x: tensor<?x64xf32>,
                     %g: tensor<32x64xf32>, %w1: tensor<32x16x64xf32>, %w2: tensor<32x64x16xf32>)
      -> (tensor<?x8x8xf32>, tensor<?x64xf32>) {
    %a0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    %a1 = moe.attention %a0, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    %w, %i = moe.router %x, %g {renormalize, top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
    %e = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<32x16x64xf32>, tensor<32x64x16xf32>, tensor<32x16x64xf32> -> tensor<?x64xf32>
    return %a1, %e : tensor<?x8x8xf32>, tensor<?x64xf32>
  }
}

// -----

// DP32/EP32: TP=1 and PP=1 put no constraint on heads or layers (here 3 layers).
// CHECK-LABEL: module attributes {mf.plan = #mf.plan<{{.*}}attention = [dp = 32], experts = [ep = 32 : (dp)]>}
// CHECK-LABEL: func.func @dp32_ep32
// CHECK-COUNT-3: moe.attention
// CHECK: moe.router
// CHECK: moe.experts
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [dp = 32], experts = [ep = 32 : (dp)]>} {
  func.func @dp32_ep32(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>, %x: tensor<?x64xf32>,
                       %g: tensor<32x64xf32>, %w1: tensor<32x16x64xf32>, %w2: tensor<32x64x16xf32>)
      -> (tensor<?x8x8xf32>, tensor<?x64xf32>) {
    %a0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    %a1 = moe.attention %a0, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    %a2 = moe.attention %a1, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    %w, %i = moe.router %x, %g {renormalize, top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
    %e = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<32x16x64xf32>, tensor<32x64x16xf32>, tensor<32x16x64xf32> -> tensor<?x64xf32>
    return %a2, %e : tensor<?x8x8xf32>, tensor<?x64xf32>
  }
}

// -----

// n_kv = 2 < TP = 4 with TP a multiple of n_kv: KV heads are replicated.
// CHECK-LABEL: module attributes {mf.plan = #mf.plan<{{.*}}attention = [tp = 4, dp = 2], experts = [ep = 8 : (tp, dp)]>}
// CHECK-LABEL: func.func @kv_replication
// CHECK: moe.attention {{.*}} : tensor<?x8x8xf32>, tensor<?x2x8xf32>, tensor<?x2x8xf32>
module attributes {mf.plan = #mf.plan<devices = 8, gpus_per_node = 8,
    attention = [tp = 4, dp = 2], experts = [ep = 8 : (tp, dp)]>} {
  func.func @kv_replication(%q: tensor<?x8x8xf32>, %k: tensor<?x2x8xf32>, %p: tensor<?xi64>, %x: tensor<?x64xf32>,
                            %g: tensor<32x64xf32>)
      -> (tensor<?x8x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>) {
    %a0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
    return %a0, %w, %i : tensor<?x8x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>
  }
}

// -----

// Fewer devices than GPUs per node is one partly filled node; a plan with no
// model ops is checked on its own.
// CHECK-LABEL: module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 8, {{.*}}attention = [tp = 2, pp = 2], experts = [ep = 2 : (tp), pp = 2 : (pp)]>}
// CHECK-LABEL: func.func @no_model
// CHECK-NEXT: return
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 8,
    attention = [tp = 2, pp = 2], experts = [ep = 2 : (tp), pp = 2 : (pp)]>} {
  func.func @no_model() {
    return
  }
}

// -----

// A module without a plan is a one-rank program and passes, whatever its model.
// CHECK-LABEL: module {
// CHECK-LABEL: func.func @no_plan
// CHECK-COUNT-3: moe.attention
// CHECK: moe.router {{.*}} : tensor<?x64xf32>, tensor<7x64xf32>
module {
  func.func @no_plan(%q: tensor<?x6x8xf32>, %k: tensor<?x3x8xf32>, %p: tensor<?xi64>, %x: tensor<?x64xf32>,
                     %g: tensor<7x64xf32>)
      -> (tensor<?x6x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>) {
    %a0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x6x8xf32>, tensor<?x3x8xf32>, tensor<?x3x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x6x8xf32>
    %a1 = moe.attention %a0, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x6x8xf32>, tensor<?x3x8xf32>, tensor<?x3x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x6x8xf32>
    %a2 = moe.attention %a1, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x6x8xf32>, tensor<?x3x8xf32>, tensor<?x3x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x6x8xf32>
    %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<?x64xf32>, tensor<7x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
    return %a2, %w, %i : tensor<?x6x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>
  }
}

// -----

// A partitioned module is checked against the global dimensions recorded in
// moe.model_info, not against its local ops: 1 local query head, but 8 heads
// and 4 KV heads in the model, which TP=4 divides.
// CHECK-LABEL: module attributes {mf.plan = #mf.plan<{{.*}}attention = [tp = 4], experts = [ep = 4 : (tp)]>, moe.model_info = {{{.*}}heads = 8 : i64{{.*}}}}
// CHECK-LABEL: func.func @partitioned
// CHECK: moe.attention {{.*}} : tensor<?x2x2xf32>, tensor<?x1x2xf32>, tensor<?x1x2xf32>
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>,
    moe.model_info = {heads = 8, kv_heads = 4, head_dim = 2, experts = 8, layers = 2, vocab = 16}} {
  func.func @partitioned(%q: tensor<?x2x2xf32>, %k: tensor<?x1x2xf32>, %p: tensor<?xi64>) -> tensor<?x2x2xf32> {
    %a = moe.attention %q, %k, %k, %p, %p {scale = 0.5 : f32} : tensor<?x2x2xf32>, tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x2xf32>
    return %a : tensor<?x2x2xf32>
  }
}

//===----------------------------------------------------------------------===//
// Plan rules (MeshLayout::create): checked with or without a model
//===----------------------------------------------------------------------===//

// -----

// axis-size: an attention axis of size 0.
// expected-error @+1 {{plan rule 'axis-size': attention axis 'tp' has size 0, but sizes must be >= 1}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 8,
    attention = [tp = 0, dp = 4], experts = [ep = 4 : (tp, dp)]>} {
}

// -----

// axis-size: an expert axis of negative size.
// expected-error @+1 {{plan rule 'axis-size': expert axis 'ep' has size -4, but sizes must be >= 1}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 8,
    attention = [dp = 4], experts = [ep = -4 : (dp)]>} {
}

// -----

// duplicate-axis: two attention axes named tp.
// expected-error @+1 {{plan rule 'duplicate-axis': the attention mesh has two axes named 'tp'}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 8,
    attention = [tp = 2, tp = 2], experts = [ep = 4 : (tp)]>} {
}

// -----

// duplicate-axis: two expert axes named ep.
// expected-error @+1 {{plan rule 'duplicate-axis': the expert mesh has two axes named 'ep'}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 8,
    attention = [tp = 2, dp = 2], experts = [ep = 2 : (tp), ep = 2 : (dp)]>} {
}

// -----

// mesh-size: a plan needs at least one device.
// expected-error @+1 {{plan rule 'mesh-size': the plan has 0 devices, but needs at least 1}}
module attributes {mf.plan = #mf.plan<devices = 0, gpus_per_node = 8,
    attention = [], experts = []>} {
}

// -----

// mesh-size: the attention mesh covers 16 of 32 devices.
// expected-error @+1 {{plan rule 'mesh-size': attention mesh axes multiply to 16, but the plan has 32 devices}}
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
}

// -----

// mesh-size: the expert mesh covers 16 of 32 devices.
// expected-error @+1 {{plan rule 'mesh-size': expert mesh axes multiply to 16, but the plan has 32 devices}}
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 8 : (tp, cp, dp), pp = 2 : (pp)]>} {
}

// -----

// mesh-size: an expert axis is not the product of its parts (8 vs 2*2*4).
// expected-error @+1 {{plan rule 'mesh-size': expert axis 'ep' has size 8, but its components tp,cp,dp multiply to 16}}
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 8 : (tp, cp, dp), pp = 4 : (pp)]>} {
}

// -----

// node-size: no GPUs per node.
// expected-error @+1 {{plan rule 'node-size': gpus per node is 0, but must be >= 1}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 0,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
}

// -----

// node-size: 12 devices do not fill nodes of 8.
// expected-error @+1 {{plan rule 'node-size': 8 GPUs per node do not divide 12 devices}}
module attributes {mf.plan = #mf.plan<devices = 12, gpus_per_node = 8,
    attention = [tp = 4, dp = 3], experts = [ep = 12 : (tp, dp)]>} {
}

// -----

// fold: an expert axis composed of no attention axes.
// expected-error @+1 {{plan rule 'fold': expert axis 'ep' is composed of no attention axes}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 8,
    attention = [tp = 4], experts = [ep = 4]>} {
}

// -----

// fold: an expert axis names an axis the attention mesh does not have.
// expected-error @+1 {{plan rule 'fold': expert axis 'ep' is composed of 'sp', which is not an attention axis}}
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, sp, dp), pp = 2 : (pp)]>} {
}

// -----

// fold: an attention axis is part of two expert axes that are not folded
// over the same attention axes.
// expected-error @+1 {{plan rule 'fold': attention axis 'tp' is named twice in the expert mesh (by expert axes 'ep' of tp and 'xp' of tp,dp); only axes folded over the same attention axes share one}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 8,
    attention = [tp = 2, dp = 2], experts = [ep = 2 : (tp), xp = 2 : (tp, dp)]>} {
}

// -----

// mesh-size: axes folded over the same attention axes must split them
// exactly.
// expected-error @+1 {{plan rule 'mesh-size': expert axes ep,etp, folded over tp,dp, multiply to 8, but tp,dp multiply to 4}}
module attributes {mf.plan = #mf.plan<devices = 8, gpus_per_node = 8,
    attention = [tp = 2, dp = 2, pp = 2],
    experts = [ep = 4 : (tp, dp), etp = 2 : (tp, dp), pp = 1 : (pp)]>} {
}

// -----

// fold: an attention axis (even of size 1) is not covered by the expert mesh.
// expected-error @+1 {{plan rule 'fold': attention axis 'pp' (size 1) is not part of any expert axis}}
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 8, pp = 1],
    experts = [ep = 32 : (tp, cp, dp)]>} {
}

// -----

// fold: the expert mesh has no ep axis.
// expected-error @+1 {{plan rule 'fold': the expert mesh has no axis named 'ep'}}
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [moe = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
}

// -----

// pp-groups: the attention mesh pipelines, the expert mesh has no pp axis.
// expected-error @+1 {{plan rule 'pp-groups': the attention mesh has pp=2, but the expert mesh has no axis named 'pp'}}
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 32 : (tp, cp, dp, pp)]>} {
}

// -----

// pp-groups: the expert pp axis is not the attention pp axis.
// expected-error @+1 {{plan rule 'pp-groups': expert axis 'pp' (size 4) is composed of dp, but must be exactly the attention axis 'pp'}}
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 8 : (tp, cp, pp), pp = 4 : (dp)]>} {
}

//===----------------------------------------------------------------------===//
// Model rules (MeshLayout::checkModel)
//===----------------------------------------------------------------------===//

// -----

// tp-heads: TP=4 does not divide 6 query heads.
// expected-error @+1 {{plan rule 'tp-heads': TP=4 must divide n_heads=6}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
  func.func @tp_heads(%q: tensor<?x6x8xf32>, %k: tensor<?x2x8xf32>, %p: tensor<?xi64>, %x: tensor<?x64xf32>,
                      %g: tensor<32x64xf32>)
      -> (tensor<?x6x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>) {
    %a0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x6x8xf32>, tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x6x8xf32>
    %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
    return %a0, %w, %i : tensor<?x6x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>
  }
}

// -----

// gqa: n_kv=6 > TP=4 and TP does not divide it.
// expected-error @+1 {{plan rule 'gqa': TP=4 must divide n_kv=6, or n_kv must be < TP with TP a multiple of n_kv}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
  func.func @gqa_not_divisible(%q: tensor<?x12x8xf32>, %k: tensor<?x6x8xf32>, %p: tensor<?xi64>, %x: tensor<?x64xf32>,
                               %g: tensor<32x64xf32>)
      -> (tensor<?x12x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>) {
    %a0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x12x8xf32>, tensor<?x6x8xf32>, tensor<?x6x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x12x8xf32>
    %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
    return %a0, %w, %i : tensor<?x12x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>
  }
}

// -----

// gqa: n_kv=3 < TP=4, but TP is not a multiple of n_kv (no even replication).
// expected-error @+1 {{plan rule 'gqa': TP=4 must divide n_kv=3}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
  func.func @gqa_no_replication(%q: tensor<?x12x8xf32>, %k: tensor<?x3x8xf32>, %p: tensor<?xi64>, %x: tensor<?x64xf32>,
                                %g: tensor<32x64xf32>)
      -> (tensor<?x12x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>) {
    %a0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x12x8xf32>, tensor<?x3x8xf32>, tensor<?x3x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x12x8xf32>
    %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
    return %a0, %w, %i : tensor<?x12x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>
  }
}

// -----

// ep-experts: EP=16 does not divide 24 experts (read off moe.experts' w1).
// expected-error @+1 {{plan rule 'ep-experts': EP=16 must divide n_experts=24}}
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @ep_experts(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>, %x: tensor<?x64xf32>,
                        %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<24x16x64xf32>, %w2: tensor<24x64x16xf32>)
      -> (tensor<?x8x8xf32>, tensor<?x64xf32>) {
    %a0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    %a1 = moe.attention %a0, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    %e = moe.experts %x, %w, %i, %w1, %w2, %w1 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<24x16x64xf32>, tensor<24x64x16xf32>, tensor<24x16x64xf32> -> tensor<?x64xf32>
    return %a1, %e : tensor<?x8x8xf32>, tensor<?x64xf32>
  }
}

// -----

// pp-layers: PP=2 does not divide 3 layers (3 moe.attention ops).
// expected-error @+1 {{plan rule 'pp-layers': PP=2 must divide n_layers=3}}
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @pp_layers(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>, %x: tensor<?x64xf32>,
                       %g: tensor<32x64xf32>)
      -> (tensor<?x8x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>) {
    %a0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    %a1 = moe.attention %a0, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    %a2 = moe.attention %a1, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    %w, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
    return %a2, %w, %i : tensor<?x8x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>
  }
}

// -----

// The model itself must be consistent: two layers with different KV head
// counts are reported on the op, before any plan rule.
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
  func.func @inconsistent(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %k2: tensor<?x2x8xf32>, %p: tensor<?xi64>)
      -> tensor<?x8x8xf32> {
    %a0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    // expected-error @+1 {{model is inconsistent: n_kv_heads is 2 here but 4 elsewhere}}
    %a1 = moe.attention %a0, %k2, %k2, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    return %a1 : tensor<?x8x8xf32>
  }
}

// -----

// A norm over the whole query projection (OLMoE's q_norm, all heads at once)
// needs one over the key's too: the TP rule all-reduces both, and the traffic
// model counts both. One of them is reported on the function.
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
  // expected-error @+1 {{model is inconsistent: 1 norms over a whole query or key projection for 1 attentions (one each for the query and the key of every attention, or none)}}
  func.func @one_projection_norm(%x: tensor<?x64xf32>, %wq: tensor<64x64xf32>, %nq: tensor<64xf32>,
                                 %k: tensor<?x4x8xf32>, %p: tensor<?xi64>, %n: index) -> tensor<?x8x8xf32> {
    %q = moe.linear %x, %wq : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
    %qn = moe.rms_norm %q, %nq {epsilon = 1.0E-6 : f32} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
    %qh = tensor.expand_shape %qn [[0], [1, 2]] output_shape [%n, 8, 8] : tensor<?x64xf32> into tensor<?x8x8xf32>
    %a = moe.attention %qh, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    return %a : tensor<?x8x8xf32>
  }
}

// -----

// tp-vocab: the LM head is split by vocab over TP=4, which 510 does not allow.
// expected-error @+1 {{plan rule 'tp-vocab': TP=4 must divide the vocab (510) to split the LM head}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
  func.func @tp_vocab(%q: tensor<?x8x8xf32>, %k: tensor<?x4x8xf32>, %p: tensor<?xi64>, %x: tensor<?x64xf32>,
                      %g: tensor<32x64xf32>, %w: tensor<510x64xf32>, %last: index)
      -> (tensor<?x8x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<510xf32>) {
    %a0 = moe.attention %q, %k, %k, %p, %p {scale = 0.35 : f32} : tensor<?x8x8xf32>, tensor<?x4x8xf32>, tensor<?x4x8xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x8xf32>
    %wt, %i = moe.router %x, %g {top_k = 2 : i64} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
    %l = moe.lm_head %x, %w, %p, %last : tensor<?x64xf32>, tensor<510x64xf32>, tensor<?xi64> -> tensor<510xf32>
    return %a0, %wt, %i, %l : tensor<?x8x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<510xf32>
  }
}

// -----

// pp-layers with moe.model_info: its layer count (3) is checked, not the ops'
// (1 attention).
// expected-error @+1 {{plan rule 'pp-layers': PP=2 must divide n_layers=3}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, pp = 2], experts = [ep = 2 : (tp), pp = 2 : (pp)]>,
    moe.model_info = {heads = 4, kv_heads = 2, head_dim = 2, experts = 4, layers = 3, vocab = 16}} {
  func.func @model_info_layers(%q: tensor<?x2x2xf32>, %k: tensor<?x1x2xf32>, %p: tensor<?xi64>) -> tensor<?x2x2xf32> {
    %a = moe.attention %q, %k, %k, %p, %p {scale = 0.5 : f32} : tensor<?x2x2xf32>, tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x2xf32>
    return %a : tensor<?x2x2xf32>
  }
}

// -----

// pp-layers with moe.layer ops: the layers are the moe.layer ops (3), not the
// attentions (1).
// expected-error @+1 {{plan rule 'pp-layers': PP=2 must divide n_layers=3}}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, pp = 2], experts = [ep = 2 : (tp), pp = 2 : (pp)]>} {
  func.func @layer_ops(%h: tensor<?x8xf32>, %p: tensor<?xi64>, %q: tensor<?x4x2xf32>, %k: tensor<?x2x2xf32>, %g: tensor<4x8xf32>) -> tensor<?x8xf32> {
    %0 = moe.layer 0(%h, %p, %q, %k, %g) : (tensor<?x8xf32>, tensor<?xi64>, tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<4x8xf32>) -> tensor<?x8xf32> {
    ^bb0(%x: tensor<?x8xf32>, %pos: tensor<?xi64>, %lq: tensor<?x4x2xf32>, %lk: tensor<?x2x2xf32>, %lg: tensor<4x8xf32>):
      %a = moe.attention %lq, %lk, %lk, %pos, %pos {scale = 0.5 : f32} : tensor<?x4x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x4x2xf32>
      %w, %i = moe.router %x, %lg {top_k = 2 : i64} : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
      moe.yield %x : tensor<?x8xf32>
    }
    %1 = moe.layer 1(%0, %p) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%x: tensor<?x8xf32>, %pos: tensor<?xi64>):
      moe.yield %x : tensor<?x8xf32>
    }
    %2 = moe.layer 2(%1, %p) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%x: tensor<?x8xf32>, %pos: tensor<?xi64>):
      moe.yield %x : tensor<?x8xf32>
    }
    return %2 : tensor<?x8xf32>
  }
}

// -----

// ep-experts: a model with attention but no router or experts has no experts
// to place, which is rejected whatever EP is (here EP=1).
// expected-error @+1 {{plan rule 'ep-experts': EP=1 must divide n_experts=0 (and n_experts must be >= 1)}}
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 2,
    attention = [dp = 1, pp = 2], experts = [ep = 1 : (dp), pp = 2 : (pp)]>} {
  func.func @no_experts(%q: tensor<?x2x2xf32>, %k: tensor<?x1x2xf32>, %p: tensor<?xi64>) -> tensor<?x2x2xf32> {
    %a = moe.attention %q, %k, %k, %p, %p {scale = 0.5 : f32} : tensor<?x2x2xf32>, tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x2xf32>
    return %a : tensor<?x2x2xf32>
  }
}
