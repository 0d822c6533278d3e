// RUN: meshfold-opt %s -split-input-file --mf-fuse-collectives | FileCheck %s
// RUN: meshfold-opt %s -split-input-file | FileCheck %s --check-prefix=BEFORE
// RUN: meshfold-opt %s -split-input-file --mf-fuse-collectives=remarks=true -verify-diagnostics -o /dev/null

// -mf-fuse-collectives: fewer runtime calls. Adjacent ring steps on one group
// become one message, adjacent independent all-reduces on one group one
// grouped call, and an all-reduce that is only sliced along its group (through
// per-token element-wise ops) a reduce-scatter. With remarks, each layer
// reports its collective calls before and after. Hand-written inputs; the
// remarks on the partitioned seed model are in test/e2e/partition.

// The input is unchanged without the pass (the cases below are not already fused).
// BEFORE-LABEL: func.func @ring_three
// BEFORE-COUNT-3: mf.ring_step %{{[^,]+}} on "attention" ["cp"]
// BEFORE-LABEL: func.func @all_reduce_independent
// BEFORE-COUNT-2: mf.all_reduce %{{[^,]+}} on "attention" ["tp"]

// Ring attention's K, V and positions: three adjacent steps, one message.
// CHECK-LABEL: func.func @ring_three(
// CHECK-SAME:      %[[K:[^:]+]]: tensor<?x2x8xf32>, %[[V:[^:]+]]: tensor<?x2x8xf32>, %[[P:[^:]+]]: tensor<?xi64>)
// CHECK-NEXT:    %[[S:.+]]:3 = mf.ring_step %[[K]], %[[V]], %[[P]] on "attention" ["cp"] : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64> -> tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
// CHECK-NOT:     mf.ring_step
// CHECK-NEXT:    return %[[S]]#0, %[[S]]#1, %[[S]]#2
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @ring_three(%k: tensor<?x2x8xf32>, %v: tensor<?x2x8xf32>, %p: tensor<?xi64>) -> (tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>) {
    %k1 = mf.ring_step %k on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %v1 = mf.ring_step %v on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %p1 = mf.ring_step %p on "attention" ["cp"] : tensor<?xi64> -> tensor<?xi64>
    return %k1, %v1, %p1 : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
  }
}

// -----

// A pure op that does not use the run does not split it.
// CHECK-LABEL: func.func @ring_pure_between(
// CHECK-SAME:      %[[K:[^:]+]]: tensor<?x2x8xf32>, %[[V:[^:]+]]: tensor<?x2x8xf32>,
// CHECK:         %[[S:.+]]:2 = mf.ring_step %[[K]], %[[V]] on "attention" ["cp"]
// CHECK-NOT:     mf.ring_step
// CHECK:         return
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @ring_pure_between(%k: tensor<?x2x8xf32>, %v: tensor<?x2x8xf32>, %x: tensor<?x64xf32>) -> (tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?x64xf32>) {
    %k1 = mf.ring_step %k on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %y = arith.addf %x, %x : tensor<?x64xf32>
    %v1 = mf.ring_step %v on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    return %k1, %v1, %y : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?x64xf32>
  }
}

// -----

// Pass-Q's steps (marked queries) travel together, and apart from K/V's:
// the runtime counts the two kinds apart.
// CHECK-LABEL: func.func @ring_kinds(
// CHECK:         mf.ring_step %{{[^,]+}}, %{{[^,]+}} on "attention" ["cp"] {queries} : tensor<?x2x8xf32>, tensor<?xi64>
// CHECK-NEXT:    mf.ring_step %{{[^,]+}}, %{{[^,]+}} on "attention" ["cp"] : tensor<?x2x8xf32>, tensor<?xi64>
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @ring_kinds(%q: tensor<?x2x8xf32>, %kv: tensor<?x2x8xf32>, %p: tensor<?xi64>) -> (tensor<?x2x8xf32>, tensor<?xi64>, tensor<?x2x8xf32>, tensor<?xi64>) {
    %q1 = mf.ring_step %q on "attention" ["cp"] {queries} : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %p1 = mf.ring_step %p on "attention" ["cp"] {queries} : tensor<?xi64> -> tensor<?xi64>
    %kv1 = mf.ring_step %kv on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %p2 = mf.ring_step %p on "attention" ["cp"] : tensor<?xi64> -> tensor<?xi64>
    return %q1, %p1, %kv1, %p2 : tensor<?x2x8xf32>, tensor<?xi64>, tensor<?x2x8xf32>, tensor<?xi64>
  }
}

// -----

// Ring steps on different groups stay apart.
// CHECK-LABEL: func.func @ring_groups(
// CHECK:         mf.ring_step %{{[^,]+}} on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
// CHECK-NEXT:    mf.ring_step %{{[^,]+}} on "attention" ["tp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
// CHECK-NEXT:    mf.ring_step %{{[^,]+}} on "attention" ["tp", "cp"] : tensor<?xi64> -> tensor<?xi64>
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @ring_groups(%k: tensor<?x2x8xf32>, %v: tensor<?x2x8xf32>, %p: tensor<?xi64>) -> (tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>) {
    %k1 = mf.ring_step %k on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %v1 = mf.ring_step %v on "attention" ["tp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %p1 = mf.ring_step %p on "attention" ["tp", "cp"] : tensor<?xi64> -> tensor<?xi64>
    return %k1, %v1, %p1 : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi64>
  }
}

// -----

// A real ring (CP=4): each step sends what the previous one received, so
// the steps stay apart (one fused K/V/positions message per step).
// CHECK-LABEL: func.func @ring_chain(
// CHECK:         %[[S1:.+]]:2 = mf.ring_step %{{[^,]+}}, %{{[^,]+}} on "attention" ["cp"]
// CHECK-NEXT:    %[[S2:.+]]:2 = mf.ring_step %[[S1]]#0, %[[S1]]#1 on "attention" ["cp"]
// CHECK-NEXT:    return %[[S2]]#0, %[[S2]]#1
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @ring_chain(%k: tensor<?x2x8xf32>, %v: tensor<?x2x8xf32>) -> (tensor<?x2x8xf32>, tensor<?x2x8xf32>) {
    %k1 = mf.ring_step %k on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %v1 = mf.ring_step %v on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %k2 = mf.ring_step %k1 on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    %v2 = mf.ring_step %v1 on "attention" ["cp"] : tensor<?x2x8xf32> -> tensor<?x2x8xf32>
    return %k2, %v2 : tensor<?x2x8xf32>, tensor<?x2x8xf32>
  }
}

// -----

// Two independent adjacent all-reduces on tp: one grouped call.
// CHECK-LABEL: func.func @all_reduce_independent(
// CHECK-SAME:      %[[R:[^:]+]]: tensor<1x64xf32>, %[[F:[^:]+]]: tensor<1xf32>)
// CHECK-NEXT:    %[[G:.+]]:2 = mf.all_reduce %[[R]], %[[F]] on "attention" ["tp"] : tensor<1x64xf32>, tensor<1xf32> -> tensor<1x64xf32>, tensor<1xf32>
// CHECK-NOT:     mf.all_reduce
// CHECK-NEXT:    return %[[G]]#0, %[[G]]#1
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @all_reduce_independent(%r: tensor<1x64xf32>, %f: tensor<1xf32>) -> (tensor<1x64xf32>, tensor<1xf32>) {
    %0 = mf.all_reduce %r on "attention" ["tp"] : tensor<1x64xf32> -> tensor<1x64xf32>
    %1 = mf.all_reduce %f on "attention" ["tp"] : tensor<1xf32> -> tensor<1xf32>
    return %0, %1 : tensor<1x64xf32>, tensor<1xf32>
  }
}

// -----

// The second all-reduce reads the first: not merged.
// CHECK-LABEL: func.func @all_reduce_dependent(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<?x64xf32>)
// CHECK-NEXT:    %[[A:.+]] = mf.all_reduce %[[X]] on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NEXT:    %[[B:.+]] = mf.all_reduce %[[A]] on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NEXT:    return %[[B]]
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @all_reduce_dependent(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
    %0 = mf.all_reduce %x on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    %1 = mf.all_reduce %0 on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    return %1 : tensor<?x64xf32>
  }
}

// -----

// An op using the first result, or a side effect, between them: not merged.
// CHECK-LABEL: func.func @all_reduce_separated(
// CHECK:         mf.all_reduce %{{[^,]+}} on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NEXT:    arith.addf
// CHECK-NEXT:    mf.all_reduce %{{[^,]+}} on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NEXT:    mf.send
// CHECK-NEXT:    mf.all_reduce %{{[^,]+}} on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NEXT:    return
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @all_reduce_separated(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>, %c: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) {
    %0 = mf.all_reduce %a on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    %u = arith.addf %0, %b : tensor<?x64xf32>
    %1 = mf.all_reduce %b on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    mf.send %u to "attention" "pp" 1 : tensor<?x64xf32>
    %2 = mf.all_reduce %c on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    return %1, %2, %u : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>
  }
}

// -----

// All-reduces on different groups: not merged.
// CHECK-LABEL: func.func @all_reduce_groups(
// CHECK:         mf.all_reduce %{{[^,]+}} on "attention" ["tp"]
// CHECK-NEXT:    mf.all_reduce %{{[^,]+}} on "attention" ["cp"]
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @all_reduce_groups(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
    %0 = mf.all_reduce %a on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    %1 = mf.all_reduce %b on "attention" ["cp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    return %0, %1 : tensor<?x64xf32>, tensor<?x64xf32>
  }
}

// -----

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
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @all_reduce_slice(%part: tensor<?x64xf32>, %h: tensor<?x64xf32>) -> tensor<?x64xf32> {
    %0 = mf.all_reduce %part on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    %1 = arith.addf %h, %0 : tensor<?x64xf32>
    %2 = mf.slice %1 on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
    return %2 : tensor<?x64xf32>
  }
}

// -----

// Directly sliced: a reduce-scatter.
// CHECK-LABEL: func.func @all_reduce_slice_direct(
// CHECK-SAME:      %[[PART:[^:]+]]: tensor<?x64xf32>)
// CHECK-NEXT:    %[[RS:.+]] = mf.reduce_scatter %[[PART]] on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
// CHECK-NEXT:    return %[[RS]]
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @all_reduce_slice_direct(%part: tensor<?x64xf32>) -> tensor<?x64xf32> {
    %0 = mf.all_reduce %part on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    %1 = mf.slice %0 on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
    return %1 : tensor<?x64xf32>
  }
}

// -----

// Sliced along another group, or used whole as well: kept.
// CHECK-LABEL: func.func @all_reduce_slice_kept(
// CHECK-NOT:     mf.reduce_scatter
// CHECK:         mf.all_reduce %{{[^,]+}} on "attention" ["tp"]
// CHECK-NEXT:    mf.slice %{{[^,]+}} on "attention" ["cp"] dim 0
// CHECK-NEXT:    mf.all_reduce %{{[^,]+}} on "attention" ["tp"]
// CHECK-NEXT:    mf.slice %{{[^,]+}} on "attention" ["tp"] dim 0
// CHECK-NOT:     mf.reduce_scatter
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @all_reduce_slice_kept(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) {
    %0 = mf.all_reduce %a on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    %1 = mf.slice %0 on "attention" ["cp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
    %2 = mf.all_reduce %b on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    %3 = mf.slice %2 on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
    return %1, %2, %3 : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>
  }
}

// -----

// An all-reduce sliced along a static dim becomes a reduce-scatter whose
// result, and the per-token ops after it, have the slice's (local) type.
// CHECK-LABEL: func.func @static_rs
// CHECK-SAME: (%[[P:.+]]: tensor<8x64xf32>, %[[H:.+]]: tensor<8x64xf32>) -> tensor<4x64xf32>
// CHECK: %[[RS:.+]] = mf.reduce_scatter %[[P]] on "attention" ["tp"] dim 0 : tensor<8x64xf32> -> tensor<4x64xf32>
// CHECK: %[[HS:.+]] = mf.slice %[[H]] on "attention" ["tp"] dim 0 : tensor<8x64xf32> -> tensor<4x64xf32>
// CHECK: %[[SUM:.+]] = arith.addf %[[HS]], %[[RS]] : tensor<4x64xf32>
// CHECK: return %[[SUM]] : tensor<4x64xf32>
// CHECK-NOT: mf.all_reduce
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @static_rs(%p: tensor<8x64xf32>, %h: tensor<8x64xf32>) -> tensor<4x64xf32> {
    %s = mf.all_reduce %p on "attention" ["tp"] : tensor<8x64xf32> -> tensor<8x64xf32>
    %a = arith.addf %h, %s : tensor<8x64xf32>
    %m = mf.slice %a on "attention" ["tp"] dim 0 : tensor<8x64xf32> -> tensor<4x64xf32>
    return %m : tensor<4x64xf32>
  }

  // The same along a static dim 1 of a tensor with dynamic rows.
  // CHECK-LABEL: func.func @static_dim1
  // CHECK: mf.reduce_scatter %{{.+}} on "attention" ["tp"] dim 1 : tensor<?x64xf32> -> tensor<?x32xf32>
  func.func @static_dim1(%p: tensor<?x64xf32>) -> tensor<?x32xf32> {
    %s = mf.all_reduce %p on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    %m = mf.slice %s on "attention" ["tp"] dim 1 : tensor<?x64xf32> -> tensor<?x32xf32>
    return %m : tensor<?x32xf32>
  }
}

// -----

// An all-reduce that depends on another through a region (the generic reads
// %a inside its body) is not grouped with it.
#map = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @captured
// CHECK: %[[A:.+]] = mf.all_reduce %{{.+}} on "attention" ["tp"] : tensor<4x64xf32> -> tensor<4x64xf32>
// CHECK: %[[G:.+]] = linalg.generic
// CHECK: tensor.extract %[[A]]
// CHECK: mf.all_reduce %[[G]] on "attention" ["tp"] : tensor<4x64xf32> -> tensor<4x64xf32>
func.func @captured(%x: tensor<4x64xf32>, %y: tensor<4x64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>) {
  %c0 = arith.constant 0 : index
  %a = mf.all_reduce %x on "attention" ["tp"] : tensor<4x64xf32> -> tensor<4x64xf32>
  %g = linalg.generic {indexing_maps = [#map], iterator_types = ["parallel", "parallel"]} outs(%y : tensor<4x64xf32>) {
  ^bb0(%o: f32):
    %e = tensor.extract %a[%c0, %c0] : tensor<4x64xf32>
    linalg.yield %e : f32
  } -> tensor<4x64xf32>
  %b = mf.all_reduce %g on "attention" ["tp"] : tensor<4x64xf32> -> tensor<4x64xf32>
  return %a, %b : tensor<4x64xf32>, tensor<4x64xf32>
}

// -----

// Through several per-token ops (mulf, subf): every other operand is sliced
// and the ops run on the local rows.
// CHECK-LABEL: func.func @per_token_chain(
// CHECK-SAME:      %[[PART:[^:]+]]: tensor<?x8xf32>, %[[H:[^:]+]]: tensor<?x8xf32>, %[[G:[^:]+]]: tensor<?x8xf32>)
// CHECK-NEXT:    %[[RS:.+]] = mf.reduce_scatter %[[PART]] on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:    %[[GS:.+]] = mf.slice %[[G]] on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:    %[[M:.+]] = arith.mulf %[[RS]], %[[GS]] : tensor<?x8xf32>
// CHECK-NEXT:    %[[HS:.+]] = mf.slice %[[H]] on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
// CHECK-NEXT:    %[[D:.+]] = arith.subf %[[HS]], %[[M]] : tensor<?x8xf32>
// CHECK-NEXT:    return %[[D]]
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @per_token_chain(%part: tensor<?x8xf32>, %h: tensor<?x8xf32>, %g: tensor<?x8xf32>) -> tensor<?x8xf32> {
    %0 = mf.all_reduce %part on "attention" ["tp"] : tensor<?x8xf32> -> tensor<?x8xf32>
    %1 = arith.mulf %0, %g : tensor<?x8xf32>
    %2 = arith.subf %h, %1 : tensor<?x8xf32>
    %3 = mf.slice %2 on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
    return %3 : tensor<?x8xf32>
  }
}

// -----

// An op that mixes rows (here moe.rms_norm, not element-wise arith) between
// the all-reduce and the slice: kept.
// CHECK-LABEL: func.func @not_per_token(
// CHECK-NEXT:    %[[A:.+]] = mf.all_reduce
// CHECK-NEXT:    %[[N:.+]] = moe.rms_norm %[[A]],
// CHECK-NEXT:    mf.slice %[[N]] on "attention" ["tp"] dim 0
// CHECK-NOT:     mf.reduce_scatter
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @not_per_token(%part: tensor<?x8xf32>, %w: tensor<8xf32>) -> tensor<?x8xf32> {
    %0 = mf.all_reduce %part on "attention" ["tp"] : tensor<?x8xf32> -> tensor<?x8xf32>
    %1 = moe.rms_norm %0, %w {epsilon = 1.0e-05 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %2 = mf.slice %1 on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
    return %2 : tensor<?x8xf32>
  }
}

// -----

// A grouped all-reduce is not turned into a reduce-scatter, even when one of
// its results is only sliced.
// CHECK-LABEL: func.func @grouped(
// CHECK-NEXT:    %[[A:.+]]:2 = mf.all_reduce %{{[^,]+}}, %{{[^ ]+}} on "attention" ["tp"]
// CHECK-NEXT:    mf.slice %[[A]]#0 on "attention" ["tp"] dim 0
// CHECK-NOT:     mf.reduce_scatter
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @grouped(%a: tensor<?x8xf32>, %b: tensor<1xf32>) -> (tensor<?x8xf32>, tensor<1xf32>) {
    %0:2 = mf.all_reduce %a, %b on "attention" ["tp"] : tensor<?x8xf32>, tensor<1xf32> -> tensor<?x8xf32>, tensor<1xf32>
    %1 = mf.slice %0#0 on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
    return %1, %0#1 : tensor<?x8xf32>, tensor<1xf32>
  }
}

// -----

// Inside a layer: the ring steps are fused; dispatch and combine are left as
// they are (the dispatch already carries its counts). The remark counts the
// layer's calls: 3 ring steps, dispatch and combine before; 1 + 2 after.
// CHECK-LABEL: func.func @layer(
// CHECK:         moe.layer 3(
// CHECK-NEXT:    ^bb0(%{{[^:]+}}: tensor<?x8xf32>, %[[P:[^:]+]]: tensor<?xi64>, %[[K:[^:]+]]: tensor<?x1x2xf32>,
// CHECK-NEXT:      %{{.+}}:3 = mf.ring_step %[[K]], %[[K]], %[[P]] on "attention" ["cp"] : tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64> -> tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>
// CHECK-NEXT:      %[[ROWS:.+]], %{{.+}}, %[[R:.+]] = mf.dispatch
// CHECK:           mf.combine %[[R]], %[[ROWS]]
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @layer(%h: tensor<?x8xf32>, %p: tensor<?xi64>, %k: tensor<?x1x2xf32>, %idx: tensor<?x2xi64>, %w: tensor<?x2xf32>) -> tensor<?x8xf32> {
    // expected-remark @+1 {{layer 3: 5 collective calls before fusion, 3 after}}
    %0 = moe.layer 3(%h, %p, %k, %idx, %w) : (tensor<?x8xf32>, tensor<?xi64>, tensor<?x1x2xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x8xf32> {
    ^bb0(%x: tensor<?x8xf32>, %pos: tensor<?xi64>, %lk: tensor<?x1x2xf32>, %li: tensor<?x2xi64>, %lw: tensor<?x2xf32>):
      %k1 = mf.ring_step %lk on "attention" ["cp"] : tensor<?x1x2xf32> -> tensor<?x1x2xf32>
      %v1 = mf.ring_step %lk on "attention" ["cp"] : tensor<?x1x2xf32> -> tensor<?x1x2xf32>
      %p1 = mf.ring_step %pos on "attention" ["cp"] : tensor<?xi64> -> tensor<?xi64>
      %rows, %local, %r = mf.dispatch %x, %li, %lw on "experts" ["ep"] experts 4 flat : tensor<?x8xf32>, tensor<?x2xi64>, tensor<?x2xf32> -> tensor<?x8xf32>, tensor<?xi64>, !mf.dispatch
      %c0 = arith.constant 0 : index
      %t = tensor.dim %x, %c0 : tensor<?x8xf32>
      %y = mf.combine %r, %rows tokens %t : !mf.dispatch, tensor<?x8xf32> -> tensor<?x8xf32>
      moe.yield %y : tensor<?x8xf32>
    }
    return %0 : tensor<?x8xf32>
  }
}
