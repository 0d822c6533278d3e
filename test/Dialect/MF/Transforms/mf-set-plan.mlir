// RUN: meshfold-opt %s -split-input-file --mf-set-plan | FileCheck %s
// RUN: meshfold-opt %s -split-input-file --mf-set-plan="tp=2 cp=2 dp=4 pp=2" | FileCheck %s --check-prefix=SEED
// RUN: meshfold-opt %s -split-input-file --mf-set-plan="tp=2 cp=2 dp=4 pp=2 order=tp,cp,pp,dp gpus-per-node=4" | FileCheck %s --check-prefix=ORDER
// RUN: meshfold-opt %s -split-input-file --mf-set-plan="tp=4 dp=2 ep=8" | FileCheck %s --check-prefix=EP

// -mf-set-plan builds #mf.plan from its options and sets it on the module.
// The expert mesh is always ep = (the non-pp axes, in the attention order)
// then pp = (pp). Errors are in mf-set-plan-invalid.mlir.

// A module without a plan gets the plan of the options. Without options, a
// one-device plan with every axis of size 1 on a node of 8.
// CHECK-LABEL: module attributes {mf.plan = #mf.plan<devices = 1, gpus_per_node = 8, nvlink_gbps = 4.500000e+02, ib_gbps = 5.000000e+01, attention = [tp = 1, cp = 1, dp = 1, pp = 1], experts = [ep = 1 : (tp, cp, dp), pp = 1 : (pp)]>}
// CHECK-NEXT:    func.func @no_plan()
// The seed plan: 32 devices, EP16 over tp, cp and dp.
// SEED-LABEL: module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8, nvlink_gbps = 4.500000e+02, ib_gbps = 5.000000e+01, attention = [tp = 2, cp = 2, dp = 4, pp = 2], experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>}
// SEED-NEXT:    func.func @no_plan()
// `order` permutes the attention axes (fastest first) and the ep parts
// follow it; `gpus-per-node` is kept.
// ORDER-LABEL: module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 4, nvlink_gbps = 4.500000e+02, ib_gbps = 5.000000e+01, attention = [tp = 2, cp = 2, pp = 2, dp = 4], experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>}
// ORDER-NEXT:    func.func @no_plan()
// An explicit `ep` equal to tp*cp*dp is the default one.
// EP-LABEL: module attributes {mf.plan = #mf.plan<devices = 8, gpus_per_node = 8, nvlink_gbps = 4.500000e+02, ib_gbps = 5.000000e+01, attention = [tp = 4, cp = 1, dp = 2, pp = 1], experts = [ep = 8 : (tp, cp, dp), pp = 1 : (pp)]>}
// EP-NEXT:    func.func @no_plan()
module {
  func.func @no_plan() {
    return
  }
}

// -----

// An existing plan is replaced; the module's other attributes are kept.
// CHECK-LABEL: module attributes {mf.plan = #mf.plan<devices = 1, {{.*}}attention = [tp = 1, cp = 1, dp = 1, pp = 1], experts = [ep = 1 : (tp, cp, dp), pp = 1 : (pp)]>, test.kept}
// CHECK-NEXT:    func.func @replaced()
// SEED-LABEL: module attributes {mf.plan = #mf.plan<devices = 32, {{.*}}attention = [tp = 2, cp = 2, dp = 4, pp = 2], {{.*}}>, test.kept}
// SEED-NEXT:    func.func @replaced()
// SEED-NOT:     devices = 4,
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 4], experts = [ep = 4 : (tp)]>, test.kept} {
  func.func @replaced() {
    return
  }
}

// -----

// The plan is not checked against the model (mf-verify-plan does that): TP=2
// is set on a model with 3 query heads, and the ops are left unchanged.
// SEED-LABEL: module attributes {mf.plan = #mf.plan<devices = 32, {{.*}}attention = [tp = 2, cp = 2, dp = 4, pp = 2]
// SEED-LABEL:   func.func @model_not_checked(
// SEED-SAME:        %[[Q:[^:]+]]: tensor<?x3x2xf32>, %[[K:[^:]+]]: tensor<?x3x2xf32>, %[[P:[^:]+]]: tensor<?xi64>)
// SEED-NEXT:      %[[A:.+]] = moe.attention %[[Q]], %[[K]], %[[K]], %[[P]], %[[P]] {scale = 5.000000e-01 : f32} : tensor<?x3x2xf32>, tensor<?x3x2xf32>, tensor<?x3x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x3x2xf32>
// SEED-NEXT:      return %[[A]]
// SEED-NOT:     moe.model_info
module {
  func.func @model_not_checked(%q: tensor<?x3x2xf32>, %k: tensor<?x3x2xf32>, %p: tensor<?xi64>) -> tensor<?x3x2xf32> {
    %a = moe.attention %q, %k, %k, %p, %p {scale = 0.5 : f32} : tensor<?x3x2xf32>, tensor<?x3x2xf32>, tensor<?x3x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x3x2xf32>
    return %a : tensor<?x3x2xf32>
  }
}
