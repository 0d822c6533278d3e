// RUN: meshfold-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mf-gpu-tile-contractions))" | FileCheck %s
// RUN: meshfold-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mf-gpu-tile-contractions{threads-per-block=8}))" | FileCheck %s --check-prefix=T8
// RUN: meshfold-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mf-gpu-tile-contractions{threads-per-block=8},canonicalize))" | FileCheck %s --check-prefix=CANON
// RUN: not meshfold-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mf-gpu-tile-contractions{threads-per-block=100}))" 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: error: threads-per-block must be a power of two in [1, 1024], got 100

#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (n, k)>
#o = affine_map<(m, n, k) -> (m, n)>

// A linear layer x · Wᵀ with bf16 weights: 256 threads cover 64 x 64 output
// tiles; per slab of 16 along k the threads stage both operands (widened,
// zero outside), then each adds its 4 x 4 register tile; the tiles are
// added to the output inside its bounds. The 48 columns are one block:
// that dim is left out of the block loop (its block starts at 0).
// CHECK-LABEL: func.func @linear
// CHECK-SAME:    (%[[X:.+]]: memref<?x64xf32>, %[[W:.+]]: memref<48x64xbf16>, %[[Y:.+]]: memref<?x48xf32>)
// CHECK-NOT:     linalg.generic
// CHECK:         %[[T:.+]] = memref.dim %[[X]]
// CHECK:         scf.parallel (%[[M0:.+]]) = (%{{.+}}) to (%[[T]]) step (%[[C64:.+]]) {
// CHECK:             %[[SA:.+]] = memref.alloca() : memref<16x64xf32>
// CHECK:             %[[SB:.+]] = memref.alloca() : memref<16x64xf32>
// CHECK:             %[[ACC:.+]] = memref.alloca() {mf.gpu_private} : memref<256x4x4xf32>
// CHECK:             scf.parallel (%[[TI:.+]]) =
// CHECK-COUNT-16:      memref.store %{{.+}}, %[[ACC]][%[[TI]], %{{.+}}, %{{.+}}]
// CHECK:             } {mf.gpu_thread_phase}
// CHECK:             scf.for %[[K0:.+]] = %{{.+}} to %{{.+}} step %{{.+}} {
// CHECK:               scf.parallel
// CHECK:                 scf.if
// CHECK:                   memref.load %[[X]]
// CHECK:                 memref.store %{{.+}}, %[[SA]]
// CHECK:                 scf.if
// CHECK:                   memref.load %[[W]]
// CHECK-NEXT:              arith.extf %{{.+}} : bf16 to f32
// CHECK:                 memref.store %{{.+}}, %[[SB]]
// CHECK:               } {mf.gpu_thread_phase}
// CHECK:               scf.parallel (%[[TJ:.+]]) =
// CHECK-COUNT-16:        memref.load %[[ACC]][%[[TJ]]
// CHECK:                 scf.for {{.+}} -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32)
// CHECK-COUNT-4:           memref.load %[[SA]]
// CHECK-COUNT-4:           memref.load %[[SB]]
// CHECK-COUNT-16:          arith.addf {{.+}} fastmath<contract>
// CHECK-COUNT-16:        memref.store %{{.+}}, %[[ACC]][%[[TJ]]
// CHECK:               } {mf.gpu_thread_phase}
// CHECK:             }
// CHECK:             scf.parallel
// CHECK:               scf.if
// CHECK:                 memref.load %[[Y]]
// CHECK:                 memref.store %{{.+}}, %[[Y]]
// CHECK:             } {mf.gpu_thread_phase}
// CHECK:         } {mf.gpu_phases = 256 : i64}
// 8 threads: a 4 x 2 grid of threads, 8 x 16 output tiles.
// T8-LABEL: func.func @linear
// T8:         scf.parallel {{.+}} step (%c8{{.*}}, %c16{{.*}})
// T8:           memref.alloca() : memref<16x8xf32>
// T8:           memref.alloca() : memref<16x16xf32>
// T8:           memref.alloca() {mf.gpu_private} : memref<8x4x4xf32>
// T8:         } {mf.gpu_phases = 8 : i64}
func.func @linear(%x: memref<?x64xf32>, %w: memref<48x64xbf16>, %y: memref<?x48xf32>) {
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x64xf32>, memref<48x64xbf16>) outs(%y : memref<?x48xf32>) {
  ^bb0(%p: f32, %q: bf16, %r: f32):
    %e = arith.extf %q : bf16 to f32
    %m = arith.mulf %p, %e : f32
    %s = arith.addf %r, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A batch dim (heads) shared by both operands becomes a block loop dim of
// its own; b contiguous along n is staged n-fastest.
// CHECK-LABEL: func.func @batched
// CHECK:         scf.parallel (%[[H:.+]], %{{.+}}, %{{.+}}) = {{.+}} step (%c1{{.*}}, %c64{{.*}}, %c64{{.*}})
// CHECK:           memref.load %arg1[%[[H]], %{{.+}}, %{{.+}}] : memref<4x32x?xf32>
// CHECK:         } {mf.gpu_phases = 256 : i64}
func.func @batched(%q: memref<4x?x32xf32>, %k: memref<4x32x?xf32>, %s: memref<4x?x?xf32>) {
  linalg.generic {indexing_maps = [affine_map<(h, i, j, d) -> (h, i, d)>, affine_map<(h, i, j, d) -> (h, d, j)>, affine_map<(h, i, j, d) -> (h, i, j)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : memref<4x?x32xf32>, memref<4x32x?xf32>) outs(%s : memref<4x?x?xf32>) {
  ^bb0(%p: f32, %r: f32, %o: f32):
    %m = arith.mulf %p, %r : f32
    %a = arith.addf %o, %m : f32
    linalg.yield %a : f32
  }
  return
}

// -----

// Not contractions (another body, or inside a lowering's own parallel
// loop): left as they are.
// CHECK-LABEL: func.func @untouched
// CHECK-NOT:     mf.gpu_phases
// CHECK:         linalg.generic
// CHECK:         linalg.generic
// CHECK-NOT:     mf.gpu_phases
func.func @untouched(%x: memref<8x16xf32>, %w: memref<4x16xf32>, %y: memref<8x4xf32>) {
  linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<8x16xf32>, memref<4x16xf32>) outs(%y : memref<8x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %m = arith.maximumf %p, %q : f32
    %s = arith.addf %r, %m : f32
    linalg.yield %s : f32
  }
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  scf.forall (%i) in (2) {
    linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>], iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%x, %w : memref<8x16xf32>, memref<4x16xf32>) outs(%y : memref<8x4xf32>) {
    ^bb0(%p: f32, %q: f32, %r: f32):
      %m = arith.mulf %p, %q : f32
      %s = arith.addf %r, %m : f32
      linalg.yield %s : f32
    }
  }
  return
}

// -----

// Attention's Q · Kᵀ under GQA (two query heads per KV head): the KV head
// index h floordiv 2 is computed where K is staged; heads are a block dim.
// CHECK-LABEL: func.func @gqa_scores
// CHECK:         scf.parallel (%[[H:.+]], %{{.+}}, %{{.+}}) =
// CHECK:           scf.if
// CHECK:             memref.load %arg0[%{{.+}}, %[[H]], %{{.+}}] : memref<?x8x16xf32>
// CHECK:           scf.if
// CHECK:             arith.divsi %{{.+}}, %c2
// CHECK:             %[[KVH:.+]] = arith.select
// CHECK-NEXT:        memref.load %arg1[%{{.+}}, %[[KVH]], %{{.+}}] : memref<?x4x16xf32>
// CHECK:         } {mf.gpu_phases = 256 : i64}
func.func @gqa_scores(%q: memref<?x8x16xf32>, %k: memref<?x4x16xf32>, %s: memref<8x?x?xf32>) {
  linalg.generic {indexing_maps = [affine_map<(h, i, j, d) -> (i, h, d)>, affine_map<(h, i, j, d) -> (j, h floordiv 2, d)>, affine_map<(h, i, j, d) -> (h, i, j)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %k : memref<?x8x16xf32>, memref<?x4x16xf32>) outs(%s : memref<8x?x?xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %r = arith.addf %o, %m : f32
    linalg.yield %r : f32
  }
  return
}

// -----

// A dim of one block (16 columns in blocks of 16) is left out of the block
// loop: canonicalization would fold it and rebuild the loop without the
// mf.gpu_phases marker (the 8 x 16 row blocks ran as plain loops, their
// second block never stored). The columns' block start is 0.
// T8-LABEL: func.func @one_column_block
// T8:         scf.parallel (%[[M0:.+]]) = (%c0) to (%c16) step (%c8) {
// T8:         } {mf.gpu_phases = 8 : i64}
// CANON-LABEL: func.func @one_column_block
// CANON:         scf.parallel (%{{.+}}) = (%c0) to (%c16) step (%c8) {
// CANON:         } {mf.gpu_phases = 8 : i64}
func.func @one_column_block(%x: memref<16x32xf32>, %w: memref<16x32xf32>, %y: memref<16x16xf32>) {
  linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<16x32xf32>, memref<16x32xf32>) outs(%y : memref<16x16xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %r = arith.addf %o, %m : f32
    linalg.yield %r : f32
  }
  return
}
