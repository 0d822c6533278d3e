// RUN: not meshfold-opt %s --mf-place-experts="routing=%S/Inputs/routing-other-model.json" 2>&1 | FileCheck %s --check-prefix=OTHER
// RUN: not meshfold-opt %s --mf-place-experts="routing=%S/Inputs/routing-bad-rows.json" 2>&1 | FileCheck %s --check-prefix=ROWS
// RUN: not meshfold-opt %s --mf-place-experts="routing=%S/Inputs/routing-layer-0.json" 2>&1 | FileCheck %s --check-prefix=LAYER
// RUN: not meshfold-opt %s --mf-place-experts="routing=%S/Inputs/routing-layer-twice.json" 2>&1 | FileCheck %s --check-prefix=TWICE-LISTED
// RUN: not meshfold-opt %s --mf-place-experts="routing=%S/Inputs/routing-not-routing.json" 2>&1 | FileCheck %s --check-prefix=FORMAT
// RUN: not meshfold-opt %s --mf-place-experts="routing=%S/Inputs/no-such.json" 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not meshfold-opt %s --mf-place-experts 2>&1 | FileCheck %s --check-prefix=NONE
// RUN: not meshfold-opt %s --mf-place-experts="routing=%S/Inputs/routing-8.json redundant=2" 2>&1 | FileCheck %s --check-prefix=DIVIDE
// RUN: not meshfold-opt %s --mf-place-experts="routing=%S/Inputs/routing-8.json redundant=28" 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not meshfold-opt %s --mf-place-experts="routing=%S/Inputs/routing-8.json redundant=-4" 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// RUN: not meshfold-opt %s --mf-set-plan="tp=4 etp=4" --mf-place-experts="routing=%S/Inputs/routing-8.json" 2>&1 | FileCheck %s --check-prefix=NO-EP

// -mf-place-experts refuses, one line each: a routing file of another
// model, one whose layer counts another number of experts (names experts
// the model lacks), one without a layer that has experts, one that lists a
// layer twice, a file that is
// not a routing file or does not exist, no file, replicas that EP does not
// divide with the experts or that would put an expert twice on a rank, and
// a plan without expert parallelism. The model: 2 layers of 8 experts,
// EP = 4 (the routing files are in Inputs/).

// OTHER: error: {{.*}}routing-other-model.json: it is the routing of another model: 'model.experts' is 16, this model has 8
// ROWS: error: {{.*}}routing-bad-rows.json: layer 0 counts rows of 9 experts, the model has 8
// TWICE-LISTED: error: {{.*}}routing-layer-twice.json: layer 0 is listed twice
// LAYER: error: {{.*}}routing-layer-0.json: the routing file has no rows of layer 1, which has experts (run the model's every layer)
// FORMAT: error: {{.*}}routing-not-routing.json: it is not a meshfold routing file ("format" must be "meshfold-routing")
// MISSING: error: {{.*}}no-such.json: cannot read the routing file
// NONE: error: mf-place-experts: no routing file (option routing)
// DIVIDE: error: plan rule 'ep-experts': EP=4 must divide n_experts + --redundant-experts (8 + 2): every EP rank holds as many experts
// TWICE: error: plan rule 'ep-experts': --redundant-experts 28 exceeds n_experts x (EP - 1) = 24: an expert has at most one replica per EP rank
// NEGATIVE: error: plan rule 'ep-experts': --redundant-experts must be 0 or more, got -4
// NO-EP: error: expert placement needs expert parallelism: the plan's EP is 1 (compile with --ep N)
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, dp = 2], experts = [ep = 4 : (tp, dp)]>,
    moe.model_info = {experts = 8 : i64, ffn = 16 : i64, head_dim = 2 : i64, heads = 4 : i64, hidden = 8 : i64, kv_heads = 2 : i64, layers = 2 : i64, top_k = 2 : i64, vocab = 16 : i64}} {
  func.func @placed(%x: tensor<?x8xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>) -> tensor<?x8xf32> {
    %h = moe.layer 0(%x, %w, %i) : (tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %b: tensor<?x2xf32>, %c: tensor<?x2xi64>):
      %w1 = moe.param "experts.{e}.w1.weight" : tensor<8x16x8xf32>
      %w2 = moe.param "experts.{e}.w2.weight" : tensor<8x8x16xf32>
      %w3 = moe.param "experts.{e}.w3.weight" : tensor<8x16x8xf32>
      %y = moe.experts %a, %b, %c, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x8xf32>, tensor<8x8x16xf32>, tensor<8x16x8xf32> -> tensor<?x8xf32>
      moe.yield %y : tensor<?x8xf32>
    }
    %o = moe.layer 1(%h, %w, %i) : (tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %b: tensor<?x2xf32>, %c: tensor<?x2xi64>):
      %w1 = moe.param "model.layers.1.experts.{e}.w1.weight" : tensor<8x16x8xf32>
      %w2 = moe.param "model.layers.1.experts.{e}.w2.weight" : tensor<8x8x16xf32>
      %w3 = moe.param "model.layers.1.experts.{e}.w3.weight" : tensor<8x16x8xf32>
      %y = moe.experts %a, %b, %c, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x16x8xf32>, tensor<8x8x16xf32>, tensor<8x16x8xf32> -> tensor<?x8xf32>
      moe.yield %y : tensor<?x8xf32>
    }
    return %o : tensor<?x8xf32>
  }
}
