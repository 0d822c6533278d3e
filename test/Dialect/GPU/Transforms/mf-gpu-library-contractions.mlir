// RUN: meshfold-opt %s --split-input-file --pass-pipeline="builtin.module(mf-gpu-library-contractions)" | FileCheck %s

#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (n, k)>
#o = affine_map<(m, n, k) -> (m, n)>

// A linear layer with bf16 weights (any N and K: 48 x 40 here) becomes a
// call of the runtime's cuBLASLt product on a contiguous bf16 copy of the
// activations in device memory, freed in stream order after it; the
// runtime function is declared once with the C interface.
// CHECK:       func.func private @mfrt_cg_gemm_bf16(memref<*xbf16>, memref<*xbf16>, memref<*xf32>) attributes {llvm.emit_c_interface}
// CHECK-LABEL: func.func @linear
// CHECK-SAME:    (%[[X:.+]]: memref<?x40xf32>, %[[W:.+]]: memref<48x40xbf16, strided<[40, 1], offset: ?>>, %[[Y:.+]]: memref<?x48xf32>)
// CHECK:         %[[T:.+]] = memref.dim %[[X]], %{{.+}} : memref<?x40xf32>
// CHECK:         %[[STREAM:.+]] = gpu.wait async
// CHECK:         %[[X16:.+]], %{{.+}} = gpu.alloc async [%[[STREAM]]] (%[[T]]) : memref<?x40xbf16>
// CHECK:         linalg.generic
// CHECK-SAME:      ins(%[[X]] : memref<?x40xf32>) outs(%[[X16]] : memref<?x40xbf16>)
// CHECK:           arith.truncf
// CHECK:         %[[WU:.+]] = memref.cast %[[W]] : memref<48x40xbf16, strided<[40, 1], offset: ?>> to memref<*xbf16>
// CHECK:         %[[XU:.+]] = memref.cast %[[X16]] : memref<?x40xbf16> to memref<*xbf16>
// CHECK:         %[[YU:.+]] = memref.cast %[[Y]] : memref<?x48xf32> to memref<*xf32>
// CHECK:         call @mfrt_cg_gemm_bf16(%[[WU]], %[[XU]], %[[YU]])
// CHECK:         %[[FREE:.+]] = gpu.wait async
// CHECK:         gpu.dealloc async [%[[FREE]]] %[[X16]]
// The second product (its own copy) calls the same declaration.
// CHECK:         linalg.generic
// CHECK:         call @mfrt_cg_gemm_bf16
// CHECK:         return
func.func @linear(%x: memref<?x40xf32>, %w: memref<48x40xbf16, strided<[40, 1], offset: ?>>, %y: memref<?x48xf32>) {
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x40xf32>, memref<48x40xbf16, strided<[40, 1], offset: ?>>) outs(%y : memref<?x48xf32>) {
  ^bb0(%in: f32, %in_w: bf16, %out: f32):
    %0 = arith.extf %in_w : bf16 to f32
    %1 = arith.mulf %in, %0 : f32
    %2 = arith.addf %out, %1 : f32
    linalg.yield %2 : f32
  }
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x40xf32>, memref<48x40xbf16, strided<[40, 1], offset: ?>>) outs(%y : memref<?x48xf32>) {
  ^bb0(%in: f32, %in_w: bf16, %out: f32):
    %0 = arith.extf %in_w : bf16 to f32
    %1 = arith.mulf %in, %0 : f32
    %2 = arith.addf %out, %1 : f32
    linalg.yield %2 : f32
  }
  return
}

// -----

#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (n, k)>
#o = affine_map<(m, n, k) -> (m, n)>

// f32 weights and attention-like products (a batch dim) stay generated; no
// declaration is added.
// CHECK-NOT:     mfrt_cg_gemm_bf16
// CHECK-LABEL: func.func @left_alone
// CHECK:         linalg.generic
// CHECK-NOT:     call
func.func @left_alone(%x: memref<?x64xf32>, %w: memref<32x64xf32>, %y: memref<?x32xf32>) {
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x64xf32>, memref<32x64xf32>) outs(%y : memref<?x32xf32>) {
  ^bb0(%in: f32, %in_w: f32, %out: f32):
    %1 = arith.mulf %in, %in_w : f32
    %2 = arith.addf %out, %1 : f32
    linalg.yield %2 : f32
  }
  return
}
