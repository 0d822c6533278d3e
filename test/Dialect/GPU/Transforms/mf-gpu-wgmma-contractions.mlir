// RUN: meshfold-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mf-gpu-wgmma-contractions,canonicalize,cse))" | FileCheck %s

#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (n, k)>
#o = affine_map<(m, n, k) -> (m, n)>

// A linear layer with bf16 weights (N 256, K 128), for a non-empty `a`: the
// activations are rounded into a contiguous bf16 copy in device memory; the
// host makes a TMA descriptor of each operand (128 x 64 boxes, 128-byte
// swizzle); one warpgroup per 128 x 128 tile, 3 stages of 2 x 16 KiB, 1 KiB
// to align them and 64 bytes past the static mbarriers.
// CHECK-LABEL: func.func @linear
// CHECK-SAME:    (%[[X:.+]]: memref<?x128xf32>, %[[W:.+]]: memref<256x128xbf16>, %[[Y:.+]]: memref<?x256xf32>)
// CHECK-DAG:     %[[C64:.+]] = arith.constant 64 : index
// CHECK-DAG:     %[[C128:.+]] = arith.constant 128 : index
// CHECK-DAG:     %[[SHARED:.+]] = arith.constant 99392 : i32
// CHECK-DAG:     %[[DESC_BITS:.+]] = arith.constant 4611686293305360384 : i64
// CHECK:         %[[T:.+]] = memref.dim %[[X]], %{{.+}}
// CHECK:         %[[ANY:.+]] = arith.cmpi sgt, %[[T]], %c0
// CHECK:         scf.if %[[ANY]] {
// CHECK:           %[[STREAM:.+]] = gpu.wait async
// CHECK:           %[[X16:.+]], %{{.+}} = gpu.alloc async [%[[STREAM]]] (%[[T]]) : memref<?x128xbf16>
// CHECK:           linalg.generic
// CHECK-SAME:      ins(%[[X]] : memref<?x128xf32>) outs(%[[X16]] : memref<?x128xbf16>)
// CHECK:           arith.truncf %{{.+}} : f32 to bf16
// CHECK:         %[[XU:.+]] = memref.cast %[[X16]] : memref<?x128xbf16> to memref<*xbf16>
// CHECK:         %[[DX:.+]] = nvgpu.tma.create.descriptor %[[XU]] box[%[[C128]], %[[C64]]] : memref<*xbf16> -> <tensor = memref<128x64xbf16, #gpu.address_space<workgroup>>, swizzle = swizzle_128b, l2promo = l2promo_256b, oob = zero, interleave = none>
// CHECK:         %[[WU:.+]] = memref.cast %[[W]] : memref<256x128xbf16> to memref<*xbf16>
// CHECK:         %[[DW:.+]] = nvgpu.tma.create.descriptor %[[WU]] box[%[[C128]], %[[C64]]]
// CHECK:           %[[GM:.+]] = arith.ceildivsi %[[T]], %[[C128]]
// CHECK:           gpu.launch blocks(%[[BX:.+]], %[[BY:.+]], %{{.+}}) in (%{{.+}} = %[[GM]], %{{.+}} = %c2, %{{.+}} = %c1) threads(%[[TX:.+]], %{{.+}}, %{{.+}}) in (%{{.+}} = %[[C128]], %{{.+}} = %c1, %{{.+}} = %c1) dynamic_shared_memory_size %[[SHARED]]
// CHECK:             %[[M0:.+]] = arith.muli %[[BX]], %[[C128]]
// CHECK:             %[[N0:.+]] = arith.muli %[[BY]], %[[C128]]
// CHECK:             %[[SMEM:.+]] = gpu.dynamic_shared_memory
// CHECK:             %[[LEADER:.+]] = arith.cmpi eq, %[[TX]], %c0
// CHECK:             %[[BAR:.+]] = nvgpu.mbarrier.create -> <memorySpace = #gpu.address_space<workgroup>, num_barriers = 3>
// CHECK-COUNT-3:     nvgpu.mbarrier.init %[[BAR]][%{{.+}}], %c1, predicate = %[[LEADER]]
// CHECK:             nvvm.fence.mbarrier.init
// CHECK:             gpu.barrier
// Both reduction steps (K 128 = 2 x 64) are in flight before the loop.
// CHECK:             nvgpu.mbarrier.arrive.expect_tx %[[BAR]][%c0], %c32768, predicate = %[[LEADER]]
// CHECK:             nvgpu.tma.async.load %[[DX]][%c0, %[[M0]]], %[[BAR]][%c0] to %{{.+}}, predicate = %[[LEADER]]
// CHECK:             nvgpu.tma.async.load %[[DW]][%c0, %[[N0]]], %[[BAR]][%c0] to %{{.+}}, predicate = %[[LEADER]]
// CHECK:             nvgpu.mbarrier.arrive.expect_tx %[[BAR]][%c1], %c32768, predicate = %[[LEADER]]
// CHECK:             nvgpu.tma.async.load %[[DX]][%[[C64]], %[[M0]]], %[[BAR]][%c1]
// CHECK:             nvgpu.tma.async.load %[[DW]][%[[C64]], %[[N0]]], %[[BAR]][%c1]
// CHECK:             %[[ACCS:.+]]:2 = scf.for %[[STEP:.+]] = %c0 to %c2 step %c1 iter_args(%[[ACC0:.+]] = %{{.+}}, %[[ACC1:.+]] = %{{.+}}) -> (!llvm.struct<(f32,
// CHECK:               %[[STAGE:.+]] = arith.remui %[[STEP]], %c3
// CHECK:               nvgpu.mbarrier.try_wait.parity %[[BAR]][%[[STAGE]]]
// CHECK:               %[[DA:.+]] = arith.ori %{{.+}}, %[[DESC_BITS]] : i64
// CHECK:               %[[DB:.+]] = arith.ori %{{.+}}, %[[DESC_BITS]] : i64
// CHECK:               nvvm.wgmma.fence.aligned
// CHECK:               %[[P0:.+]] = nvvm.wgmma.mma_async %[[DA]], %[[DB]], %[[ACC0]], <m = 64, n = 128, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK-COUNT-3:       nvvm.wgmma.mma_async %{{.+}}, %{{.+}}, %{{.+}}, <m = 64, n = 128, k = 16>
// The second m64 block: 64 rows (8 KiB, 512 in 16-byte units) further.
// CHECK:               %[[DA1:.+]] = arith.addi %[[DA]], %c512_i64
// CHECK:               nvvm.wgmma.mma_async %[[DA1]], %[[DB]], %[[ACC1]]
// CHECK-COUNT-3:       nvvm.wgmma.mma_async
// CHECK:               nvvm.wgmma.commit.group.sync.aligned
// CHECK:               nvvm.wgmma.wait.group.sync.aligned 0
// CHECK:               gpu.barrier
// CHECK:               scf.if
// CHECK:                 nvgpu.mbarrier.arrive.expect_tx
// CHECK-COUNT-2:         nvgpu.tma.async.load
// CHECK:             }
// Each of 2 x 2 row halves is added to the output where its row is inside.
// CHECK-COUNT-4:     arith.cmpi slt, %{{.+}}, %[[T]] : index
// CHECK-NOT:         linalg.generic
// CHECK:           gpu.terminator
// CHECK:           %[[FREE:.+]] = gpu.wait async
// CHECK:           gpu.dealloc async [%[[FREE]]] %[[X16]]
func.func @linear(%x: memref<?x128xf32>, %w: memref<256x128xbf16>, %y: memref<?x256xf32>) {
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x128xf32>, memref<256x128xbf16>) outs(%y : memref<?x256xf32>) {
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

// What the tiles do not fit stays a linalg.generic (mf-gpu-tile-contractions
// takes it): 44 columns, f32 weights, a K of 40.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT:     nvvm.wgmma
// CHECK-COUNT-3: linalg.generic
// CHECK-NOT:     nvvm.wgmma
func.func @left_alone(%x: memref<?x128xf32>, %w44: memref<44x128xbf16>, %y44: memref<?x44xf32>,
                      %w32: memref<128x128xf32>, %y: memref<?x128xf32>,
                      %x40: memref<?x40xf32>, %w40: memref<128x40xbf16>) {
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w44 : memref<?x128xf32>, memref<44x128xbf16>) outs(%y44 : memref<?x44xf32>) {
  ^bb0(%in: f32, %in_w: bf16, %out: f32):
    %0 = arith.extf %in_w : bf16 to f32
    %1 = arith.mulf %in, %0 : f32
    %2 = arith.addf %out, %1 : f32
    linalg.yield %2 : f32
  }
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w32 : memref<?x128xf32>, memref<128x128xf32>) outs(%y : memref<?x128xf32>) {
  ^bb0(%in: f32, %in_w: f32, %out: f32):
    %1 = arith.mulf %in, %in_w : f32
    %2 = arith.addf %out, %1 : f32
    linalg.yield %2 : f32
  }
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x40, %w40 : memref<?x40xf32>, memref<128x40xbf16>) outs(%y : memref<?x128xf32>) {
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

// One expert of a stacked weight (a subview with an offset) and bf16
// activations: the descriptor is made of the view itself; the copy keeps the
// bf16 values as they are.
// CHECK-LABEL: func.func @expert
// CHECK:         %[[E:.+]] = memref.subview
// CHECK:         linalg.generic
// CHECK-NOT:       arith.truncf
// CHECK:           linalg.yield
// CHECK:         memref.cast %[[E]] : memref<128x64xbf16, strided<[64, 1], offset: ?>> to memref<*xbf16>
// CHECK:         nvvm.wgmma.mma_async
func.func @expert(%x: memref<?x64xbf16>, %stacked: memref<4x128x64xbf16>, %e: index, %y: memref<?x128xf32>) {
  %w = memref.subview %stacked[%e, 0, 0] [1, 128, 64] [1, 1, 1] : memref<4x128x64xbf16> to memref<128x64xbf16, strided<[64, 1], offset: ?>>
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x64xbf16>, memref<128x64xbf16, strided<[64, 1], offset: ?>>) outs(%y : memref<?x128xf32>) {
  ^bb0(%in: bf16, %in_w: bf16, %out: f32):
    %0 = arith.extf %in : bf16 to f32
    %1 = arith.extf %in_w : bf16 to f32
    %2 = arith.mulf %0, %1 : f32
    %3 = arith.addf %out, %2 : f32
    linalg.yield %3 : f32
  }
  return
}

// -----

#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (n, k)>
#o = affine_map<(m, n, k) -> (m, n)>

// A router of 32 experts: 128 x 32 tiles (m64n32k16, 16 registers per
// fragment), a 4 KiB weight tile per stage: 3 x (16 + 4) KiB + 1088 bytes.
// CHECK-LABEL: func.func @narrow
// CHECK-DAG:     arith.constant 62528 : i32
// CHECK-DAG:     %[[C32:.+]] = arith.constant 32 : index
// CHECK:         nvgpu.tma.create.descriptor %{{.+}} box[%[[C32]], %{{.+}}] : memref<*xbf16> -> <tensor = memref<32x64xbf16, #gpu.address_space<workgroup>>
// CHECK:         gpu.launch
// CHECK:           nvgpu.mbarrier.arrive.expect_tx %{{.+}}[%c0], %c20480
// CHECK:           nvvm.wgmma.mma_async {{.+}} <m = 64, n = 32, k = 16>
// CHECK-SAME:        -> !llvm.struct<(f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32)>
func.func @narrow(%x: memref<?x64xf32>, %w: memref<32x64xbf16>, %y: memref<?x32xf32>) {
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x64xf32>, memref<32x64xbf16>) outs(%y : memref<?x32xf32>) {
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

// 96 input columns (3 x 32; a TP shard of a 192-wide layer): stages of
// 32-wide rows (64 bytes, the 64-byte swizzle), 2 k16 MMAs per m64 block;
// descriptors with 512-byte atoms (stride 32 in 16-byte units) and swizzle
// mode 2.
// CHECK-LABEL: func.func @narrow_k
// CHECK-DAG:     arith.constant -9223371899415756800 : i64
// CHECK:         nvgpu.tma.create.descriptor %{{.+}} : memref<*xbf16> -> <tensor = memref<128x32xbf16, #gpu.address_space<workgroup>>, swizzle = swizzle_64b
// CHECK:         gpu.launch
// CHECK:           scf.for
// CHECK-COUNT-4:     nvvm.wgmma.mma_async {{.+}} <m = 64, n = 64, k = 16>
// CHECK-NOT:         nvvm.wgmma.mma_async
// CHECK:             nvvm.wgmma.commit.group.sync.aligned
func.func @narrow_k(%x: memref<?x96xf32>, %w: memref<64x96xbf16>, %y: memref<?x64xf32>) {
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x96xf32>, memref<64x96xbf16>) outs(%y : memref<?x64xf32>) {
  ^bb0(%in: f32, %in_w: bf16, %out: f32):
    %0 = arith.extf %in_w : bf16 to f32
    %1 = arith.mulf %in, %0 : f32
    %2 = arith.addf %out, %1 : f32
    linalg.yield %2 : f32
  }
  return
}
