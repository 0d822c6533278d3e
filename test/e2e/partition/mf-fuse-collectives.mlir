// RUN: meshfold-opt %s --mf-fuse-collectives | FileCheck %s
// RUN: meshfold-opt %s | FileCheck %s --check-prefix=BEFORE
// RUN: meshfold-import-hf %examples/seed/config.json -o %t.seed.mlir
// RUN: meshfold-opt %t.seed.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-verify-plan --mf-zigzag-cp --mf-shard-tp --mf-insert-sp --mf-ring-attention --mf-fold-experts --mf-last-token-head --mf-split-pipeline --mf-fuse-collectives="remarks=true" -o /dev/null 2>&1 | FileCheck %s --check-prefix=REMARK
// RUN: meshfold-opt %t.seed.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-verify-plan --mf-zigzag-cp --mf-shard-tp --mf-insert-sp --mf-ring-attention --mf-fold-experts --mf-last-token-head --mf-split-pipeline --mf-fuse-collectives="remarks=true" -o /dev/null 2>&1 | grep -c "collective calls before fusion" | FileCheck %s --check-prefix=REMARK-COUNT
// RUN: meshfold-opt %t.seed.mlir --mf-set-plan="tp=2 cp=2 dp=4 pp=2" --mf-verify-plan --mf-zigzag-cp --mf-shard-tp --mf-insert-sp --mf-ring-attention --mf-fold-experts --mf-last-token-head --mf-split-pipeline --mf-fuse-collectives -o /dev/null 2>&1 | count 0

// -mf-fuse-collectives: fewer runtime calls. Adjacent ring steps on one group
// become one message, adjacent independent all-reduces on one group one
// grouped call, and an all-reduce that is only sliced along its group (through
// per-token element-wise ops) a reduce-scatter. Hand-written inputs under the
// seed plan, then the remarks on the seed model (8 layers).

// The input is unchanged without the pass (the cases below are not already fused).
// BEFORE-LABEL: func.func @ring_three
// BEFORE-COUNT-3: mf.ring_step %{{[^,]+}} on "attention" ["cp"]
// BEFORE-LABEL: func.func @all_reduce_independent
// BEFORE-COUNT-2: mf.all_reduce %{{[^,]+}} on "attention" ["tp"]

module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {

  // Ring attention's K, V and positions: three adjacent steps, one message.
  // CHECK-LABEL: func.func @ring_three(
  // CHECK-SAME:      %[[K:[^:]+]]: tensor<?x2x8xf32>, %[[V:[^:]+]]: tensor<?x2x8xf32>, %[[P:[^:]+]]: tensor<?xi64>)
  // CHECK-NEXT:    %[[S:.+]]:3 = mf.ring_step %[[K]], %[[V]], %[[P]] on "attention" ["cp"] : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64> -> tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
  // CHECK-NOT:     mf.ring_step
  // CHECK-NEXT:    return %[[S]]#0, %[[S]]#1, %[[S]]#2
  func.func @ring_three(%k: tensor<?x2x8xf32>, %v: tensor<?x2x8xf32>, %p: tensor<?xi64>) -> (tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>) {
    %k1 = mf.ring_step %k on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %v1 = mf.ring_step %v on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %p1 = mf.ring_step %p on "attention" ["cp"] : tensor<?xi64> -> tensor<?xi64>
    return %k1, %v1, %p1 : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
  }

  // A pure op that does not use the run does not split it.
  // CHECK-LABEL: func.func @ring_pure_between(
  // CHECK-SAME:      %[[K:[^:]+]]: tensor<?x2x8xf32>, %[[V:[^:]+]]: tensor<?x2x8xf32>,
  // CHECK:         %[[S:.+]]:2 = mf.ring_step %[[K]], %[[V]] on "attention" ["cp"]
  // CHECK-NOT:     mf.ring_step
  // CHECK:         return
  func.func @ring_pure_between(%k: tensor<?x2x8xf32>, %v: tensor<?x2x8xf32>, %x: tensor<?x64xf32>) -> (tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?x64xf32>) {
    %k1 = mf.ring_step %k on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %y = arith.addf %x, %x : tensor<?x64xf32>
    %v1 = mf.ring_step %v on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    return %k1, %v1, %y : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?x64xf32>
  }

  // Ring steps on different groups stay apart.
  // CHECK-LABEL: func.func @ring_groups(
  // CHECK:         mf.ring_step %{{[^,]+}} on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
  // CHECK-NEXT:    mf.ring_step %{{[^,]+}} on "attention" ["tp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
  // CHECK-NEXT:    mf.ring_step %{{[^,]+}} on "attention" ["tp", "cp"] : tensor<?xi64> -> tensor<?xi64>
  func.func @ring_groups(%k: tensor<?x2x8xf32>, %v: tensor<?x2x8xf32>, %p: tensor<?xi64>) -> (tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>) {
    %k1 = mf.ring_step %k on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %v1 = mf.ring_step %v on "attention" ["tp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %p1 = mf.ring_step %p on "attention" ["tp", "cp"] : tensor<?xi64> -> tensor<?xi64>
    return %k1, %v1, %p1 : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
  }

  // A real ring (CP=4): each step sends what the previous one received, so
  // the steps stay apart (one fused K/V/positions message per step).
  // CHECK-LABEL: func.func @ring_chain(
  // CHECK:         %[[S1:.+]]:2 = mf.ring_step %{{[^,]+}}, %{{[^,]+}} on "attention" ["cp"]
  // CHECK-NEXT:    %[[S2:.+]]:2 = mf.ring_step %[[S1]]#0, %[[S1]]#1 on "attention" ["cp"]
  // CHECK-NEXT:    return %[[S2]]#0, %[[S2]]#1
  func.func @ring_chain(%k: tensor<?x2x8xf32>, %v: tensor<?x2x8xf32>) -> (tensor<?x2x8xf32>, tensor<?x2x8xf32>) {
    %k1 = mf.ring_step %k on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %v1 = mf.ring_step %v on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %k2 = mf.ring_step %k1 on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %v2 = mf.ring_step %v1 on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    return %k2, %v2 : tensor<?x2x8xf32>, tensor<?x2x8xf32>
  }

  // Two independent adjacent all-reduces on tp: one grouped call.
  // CHECK-LABEL: func.func @all_reduce_independent(
  // CHECK-SAME:      %[[R:[^:]+]]: tensor<1x64xf32>, %[[F:[^:]+]]: tensor<1xf32>)
  // CHECK-NEXT:    %[[G:.+]]:2 = mf.all_reduce %[[R]], %[[F]] on "attention" ["tp"] : tensor<1x64xf32>, tensor<1xf32> -> tensor<1x64xf32>, tensor<1xf32>
  // CHECK-NOT:     mf.all_reduce
  // CHECK-NEXT:    return %[[G]]#0, %[[G]]#1
  func.func @all_reduce_independent(%r: tensor<1x64xf32>, %f: tensor<1xf32>) -> (tensor<1x64xf32>, tensor<1xf32>) {
    %0 = mf.all_reduce %r on "attention" ["tp"] : tensor<1x64xf32> -> tensor<1x64xf32>
    %1 = mf.all_reduce %f on "attention" ["tp"] : tensor<1xf32> -> tensor<1xf32>
    return %0, %1 : tensor<1x64xf32>, tensor<1xf32>
  }

  // The second all-reduce reads the first: not merged.
  // CHECK-LABEL: func.func @all_reduce_dependent(
  // CHECK-SAME:      %[[X:[^:]+]]: tensor<?x64xf32>)
  // CHECK-NEXT:    %[[A:.+]] = mf.all_reduce %[[X]] on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
  // CHECK-NEXT:    %[[B:.+]] = mf.all_reduce %[[A]] on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
  // CHECK-NEXT:    return %[[B]]
  func.func @all_reduce_dependent(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
    %0 = mf.all_reduce %x on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    %1 = mf.all_reduce %0 on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    return %1 : tensor<?x64xf32>
  }

  // An op using the first result, or a side effect, between them: not merged.
  // CHECK-LABEL: func.func @all_reduce_separated(
  // CHECK:         mf.all_reduce %{{[^,]+}} on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
  // CHECK-NEXT:    arith.addf
  // CHECK-NEXT:    mf.all_reduce %{{[^,]+}} on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
  // CHECK-NEXT:    mf.send
  // CHECK-NEXT:    mf.all_reduce %{{[^,]+}} on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
  // CHECK-NEXT:    return
  func.func @all_reduce_separated(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>, %c: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) {
    %0 = mf.all_reduce %a on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    %u = arith.addf %0, %b : tensor<?x64xf32>
    %1 = mf.all_reduce %b on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    mf.send %u to "attention" "pp" 1 : tensor<?x64xf32>
    %2 = mf.all_reduce %c on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    return %1, %2, %u : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>
  }

  // All-reduces on different groups: not merged.
  // CHECK-LABEL: func.func @all_reduce_groups(
  // CHECK:         mf.all_reduce %{{[^,]+}} on "attention" ["tp"]
  // CHECK-NEXT:    mf.all_reduce %{{[^,]+}} on "attention" ["cp"]
  func.func @all_reduce_groups(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
    %0 = mf.all_reduce %a on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    %1 = mf.all_reduce %b on "attention" ["cp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    return %0, %1 : tensor<?x64xf32>, tensor<?x64xf32>
  }

  // all_reduce -> residual add -> slice on tp (TP without SP) is the SP
  // identity: reduce-scatter, and the add's other operand is sliced.
  // CHECK-LABEL: func.func @all_reduce_slice(
  // CHECK-SAME:      %[[PART:[^:]+]]: tensor<?x64xf32>, %[[H:[^:]+]]: tensor<?x64xf32>)
  // CHECK-NOT:     mf.all_reduce
  // CHECK:         %[[RS:.+]] = mf.reduce_scatter %[[PART]] on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
  // CHECK-NEXT:    %[[HS:.+]] = mf.slice %[[H]] on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
  // CHECK-NEXT:    %[[SUM:.+]] = arith.addf %[[HS]], %[[RS]] : tensor<?x64xf32>
  // CHECK-NOT:     mf.all_reduce
  // CHECK-NOT:     mf.slice
  // CHECK-NEXT:    return %[[SUM]]
  func.func @all_reduce_slice(%part: tensor<?x64xf32>, %h: tensor<?x64xf32>) -> tensor<?x64xf32> {
    %0 = mf.all_reduce %part on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    %1 = arith.addf %h, %0 : tensor<?x64xf32>
    %2 = mf.slice %1 on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
    return %2 : tensor<?x64xf32>
  }

  // Directly sliced: a reduce-scatter.
  // CHECK-LABEL: func.func @all_reduce_slice_direct(
  // CHECK-SAME:      %[[PART:[^:]+]]: tensor<?x64xf32>)
  // CHECK-NEXT:    %[[RS:.+]] = mf.reduce_scatter %[[PART]] on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
  // CHECK-NEXT:    return %[[RS]]
  func.func @all_reduce_slice_direct(%part: tensor<?x64xf32>) -> tensor<?x64xf32> {
    %0 = mf.all_reduce %part on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    %1 = mf.slice %0 on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
    return %1 : tensor<?x64xf32>
  }

  // Sliced along another group, or used whole as well: kept.
  // CHECK-LABEL: func.func @all_reduce_slice_kept(
  // CHECK-NOT:     mf.reduce_scatter
  // CHECK:         mf.all_reduce %{{[^,]+}} on "attention" ["tp"]
  // CHECK-NEXT:    mf.slice %{{[^,]+}} on "attention" ["cp"] dim 0
  // CHECK-NEXT:    mf.all_reduce %{{[^,]+}} on "attention" ["tp"]
  // CHECK-NEXT:    mf.slice %{{[^,]+}} on "attention" ["tp"] dim 0
  // CHECK-NOT:     mf.reduce_scatter
  func.func @all_reduce_slice_kept(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) {
    %0 = mf.all_reduce %a on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    %1 = mf.slice %0 on "attention" ["cp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
    %2 = mf.all_reduce %b on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    %3 = mf.slice %2 on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
    return %1, %2, %3 : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>
  }
}

// The seed model through the partitioning passes: every layer has the
// all-gather, 3 ring steps (K, V, positions), the reduce-scatter, dispatch
// and combine before fusion, and one ring step after.
// REMARK-DAG: remark: layer 0: 7 collective calls before fusion, 5 after
// REMARK-DAG: remark: layer 1: 7 collective calls before fusion, 5 after
// REMARK-DAG: remark: layer 2: 7 collective calls before fusion, 5 after
// REMARK-DAG: remark: layer 3: 7 collective calls before fusion, 5 after
// REMARK-DAG: remark: layer 4: 7 collective calls before fusion, 5 after
// REMARK-DAG: remark: layer 5: 7 collective calls before fusion, 5 after
// REMARK-DAG: remark: layer 6: 7 collective calls before fusion, 5 after
// REMARK-DAG: remark: layer 7: 7 collective calls before fusion, 5 after
// REMARK-NOT: error
// REMARK-COUNT: {{^}}8{{$}}
