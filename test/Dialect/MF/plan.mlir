// RUN: meshfold-opt %s -split-input-file | meshfold-opt -split-input-file | FileCheck %s
// RUN: meshfold-opt %s -split-input-file --mlir-print-op-generic | meshfold-opt -split-input-file | FileCheck %s

// Round trip of the #mf.plan module attribute and of mf.weight. The parser only
// reads a plan; its rules are checked by -mf-verify-plan (Transforms/mf-verify-plan.mlir).

// The seed plan (TP2 x CP2 x DP4 x PP2 / EP16 x PP2 on 4 nodes of 8); omitted
// link bandwidths print as their defaults (450 and 50 GB/s).
// CHECK-LABEL: module attributes {mf.plan = #mf.plan<
// CHECK-SAME: devices = 32, gpus_per_node = 8, nvlink_gbps = 4.500000e+02, ib_gbps = 5.000000e+01,
// CHECK-SAME: attention = [tp = 2, cp = 2, dp = 4, pp = 2],
// CHECK-SAME: experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>}
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
}

// -----

// The seed plan with explicit bandwidths, which are kept.
// CHECK-LABEL: module attributes {mf.plan = #mf.plan<
// CHECK-SAME: devices = 32, gpus_per_node = 8, nvlink_gbps = 9.000000e+02, ib_gbps = 2.500000e+01,
// CHECK-SAME: attention = [tp = 2, cp = 2, dp = 4, pp = 2],
// CHECK-SAME: experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>}
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    nvlink_gbps = 900.0, ib_gbps = 25.0,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
}

// -----

// PP and DP swapped (rank = tp + 2*cp + 4*pp + 8*dp): the axis order is kept
// as written, and fields may come in any order (printed in canonical order).
// CHECK-LABEL: module attributes {mf.plan = #mf.plan<
// CHECK-SAME: devices = 32, gpus_per_node = 8, nvlink_gbps = 4.500000e+02, ib_gbps = 1.000000e+02,
// CHECK-SAME: attention = [tp = 2, cp = 2, pp = 2, dp = 4],
// CHECK-SAME: experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>}
module attributes {mf.plan = #mf.plan<
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)], ib_gbps = 100.0,
    attention = [tp = 2, cp = 2, pp = 2, dp = 4], gpus_per_node = 8,
    devices = 32>} {
}

// -----

// DeepSeek-style prefill: attention DP32, experts EP32, with only the axes used.
// CHECK-LABEL: module attributes {mf.plan = #mf.plan<
// CHECK-SAME: devices = 32, gpus_per_node = 8, nvlink_gbps = 4.500000e+02, ib_gbps = 5.000000e+01,
// CHECK-SAME: attention = [dp = 32], experts = [ep = 32 : (dp)]>}
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [dp = 32], experts = [ep = 32 : (dp)]>} {
}

// -----

// DP32/EP32 with every axis spelled out (as PlanSpec::fromFlags builds it).
// CHECK-LABEL: module attributes {mf.plan = #mf.plan<
// CHECK-SAME: devices = 32, gpus_per_node = 8, nvlink_gbps = 4.500000e+02, ib_gbps = 5.000000e+01,
// CHECK-SAME: attention = [tp = 1, cp = 1, dp = 32, pp = 1],
// CHECK-SAME: experts = [ep = 32 : (tp, cp, dp), pp = 1 : (pp)]>}
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 1, cp = 1, dp = 32, pp = 1],
    experts = [ep = 32 : (tp, cp, dp), pp = 1 : (pp)]>} {
}

// -----

// Axis names that are not bare keywords are quoted, in both meshes.
// CHECK-LABEL: module attributes {mf.plan = #mf.plan<
// CHECK-SAME: devices = 4, gpus_per_node = 4, nvlink_gbps = 4.500000e+02, ib_gbps = 5.000000e+01,
// CHECK-SAME: attention = ["tensor parallel" = 4], experts = [ep = 4 : ("tensor parallel")]>}
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = ["tensor parallel" = 4], experts = [ep = 4 : ("tensor parallel")]>} {
}

// -----

// A runtime-owned weight buffer inside a function of a planned module.
// CHECK-LABEL: module attributes {mf.plan = #mf.plan<
// CHECK-SAME: attention = [dp = 32], experts = [ep = 32 : (dp)]>}
// CHECK-LABEL: func.func @weights
// CHECK: [[NORM:%.+]] = mf.weight 3, "model.norm.weight" : memref<64xf32>
// CHECK: [[W1:%.+]] = mf.weight 0, "model.layers.0.block_sparse_moe.experts.{e}.w1.weight" : memref<32x128x64xbf16>
// CHECK: return [[NORM]], [[W1]] : memref<64xf32>, memref<32x128x64xbf16>
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [dp = 32], experts = [ep = 32 : (dp)]>} {
  func.func @weights() -> (memref<64xf32>, memref<32x128x64xbf16>) {
    %0 = mf.weight 3, "model.norm.weight" : memref<64xf32>
    %1 = mf.weight 0, "model.layers.0.block_sparse_moe.experts.{e}.w1.weight" : memref<32x128x64xbf16>
    return %0, %1 : memref<64xf32>, memref<32x128x64xbf16>
  }
}

// -----

// mf.weight needs no plan on its module.
// CHECK-LABEL: func.func @weight_without_plan
// CHECK: mf.weight 7, "lm_head.weight" : memref<512x64xf32>
func.func @weight_without_plan() -> memref<512x64xf32> {
  %0 = mf.weight 7, "lm_head.weight" : memref<512x64xf32>
  return %0 : memref<512x64xf32>
}

// -----

// Bandwidths may be written as integers.
// CHECK-LABEL: module attributes {mf.plan = #mf.plan<
// CHECK-SAME: nvlink_gbps = 4.000000e+02, ib_gbps = 1.000000e+02,
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    nvlink_gbps = 400, ib_gbps = 100, attention = [tp = 4], experts = [ep = 4 : (tp)]>} {
}

// -----

// A layer's K or V rows of the runtime's K/V cache.
// CHECK-LABEL: func.func @kv_rows
// CHECK: mf.kv_rows %{{.+}}, %{{.+}} {layer = 1 : i64, tensor = 0 : i64} : memref<?x2x8xf32>
func.func @kv_rows(%rows: index, %first: i64) -> memref<?x2x8xf32> {
  %0 = mf.kv_rows %rows, %first {layer = 1 : i64, tensor = 0 : i64} : memref<?x2x8xf32>
  return %0 : memref<?x2x8xf32>
}
