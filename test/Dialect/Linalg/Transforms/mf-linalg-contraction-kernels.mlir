// RUN: meshfold-opt %s -split-input-file --mf-linalg-contraction-kernels | FileCheck %s
// RUN: meshfold-opt %s -split-input-file --mf-linalg-contraction-kernels="vector-bits=512 parallel=false" | FileCheck %s --check-prefix=AVX512
// RUN: meshfold-opt %s -split-input-file --mf-linalg-contraction-kernels=batch-invariant=true | FileCheck %s --check-prefix=INVARIANT
// RUN: meshfold-opt %s -split-input-file --mf-linalg-contraction-kernels="vector-bits=512 parallel=false bf16-dot=true" | FileCheck %s --check-prefix=BF16DOT

// x · wᵀ with bf16 weights: both operands contiguous along k. With at least
// 32 rows (AVX2's 16 registers; 256 with AVX-512's 32), each block of 128
// columns of w (a parallel iteration) and 256 of k is first copied, widened
// and transposed in squares of 8 x 8, into panels of 16 columns, which every
// 6-row tile of x then reads as outer products (2 vectors of a panel, one
// broadcast of x per row); the 48 % 16 = 0 columns left would take dot
// tiles. Rows come in chunks of about 1024, a multiple of 6: each block is
// packed once per chunk. With fewer rows, dot tiles alone: a 4 x 3 tile of
// vector accumulators runs along k, over blocks of 48 rows of w; an edge
// tile of the rows left (1 to 3) and 1-column tiles and a scalar k tail
// follow.
// With batch-invariant, the packed path whatever the row count (a row sums
// in one order alone or with others), none included (a positive chunk).
// INVARIANT-LABEL: func.func @linear
// INVARIANT: %[[ROWS:.*]] = memref.dim %arg0, %c0
// INVARIANT-NOT: arith.cmpi uge
// INVARIANT: arith.maxui %[[ROWS]], %c1
// INVARIANT: memref.alloc() {alignment = 64 : i64} : memref<3x64x16xf32>
// INVARIANT: vector.fma
// INVARIANT-LABEL: func.func
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (n, k)>
#o = affine_map<(m, n, k) -> (m, n)>
// CHECK: #[[$CHUNK:.*]] = affine_map<()[s0] -> (((s0 ceildiv (s0 ceildiv 1024)) ceildiv 6) * 6)>
// CHECK-LABEL: func.func @linear
// CHECK-NOT: linalg.generic
// CHECK: %[[ROWS:.*]] = memref.dim %arg0, %c0
// No rows (an expert no row chose), no loops.
// CHECK: %[[ANY:.*]] = arith.cmpi ne, %[[ROWS]], %c0
// CHECK-NEXT: scf.if %[[ANY]] {
// CHECK: %[[MANY:.*]] = arith.cmpi uge, %[[ROWS]], %c32
// CHECK: scf.if %[[MANY]] {
// CHECK: %[[SOME:.*]] = arith.maxui %[[ROWS]], %c1
// CHECK: %[[CHUNK:.*]] = affine.apply #[[$CHUNK]]()[%[[SOME]]]
// CHECK: scf.parallel (%{{.*}}, %{{.*}}) = (%{{.*}}, %{{.*}}) to (%[[ROWS]], %c48) step (%[[CHUNK]], %c128
// CHECK: %[[PANELS:.*]] = memref.alloc() {alignment = 64 : i64} : memref<3x64x16xf32>
// CHECK: vector.load %arg1{{.*}} : memref<48x64xbf16>, vector<8xbf16>
// The 8 x 8 squares as x86vector's AVX sequence: 8 unpacks, 4 shuffles,
// 8 blends, 8 lane permutes (not a vector.transpose, whose one 64-lane
// shuffle LLVM splits lane by lane).
// CHECK-NOT: vector.transpose
// CHECK-COUNT-4: vector.shuffle %{{.*}}, %{{.*}} [0, 8, 1, 9, 4, 12, 5, 13] : vector<8xf32>, vector<8xf32>
// CHECK: llvm.inline_asm asm_dialect = intel "vblendps
// CHECK-COUNT-4: vector.shuffle %{{.*}}, %{{.*}} [0, 1, 2, 3, 8, 9, 10, 11] : vector<8xf32>, vector<8xf32>
// CHECK-COUNT-4: vector.shuffle %{{.*}}, %{{.*}} [4, 5, 6, 7, 12, 13, 14, 15] : vector<8xf32>, vector<8xf32>
// CHECK-COUNT-8: vector.store %{{.*}}, %[[PANELS]]
// The last 6-row tile of a chunk may pass its end: its rows 1-5 read the
// chunk's last row at most, and their stores are guarded.
// CHECK: %[[LAST:.*]] = arith.subi %{{.*}}, %c1
// CHECK: arith.minsi %{{.*}}, %[[LAST]]
// CHECK: scf.for %[[KP:.*]] = {{.*}} iter_args({{.*}}) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
// CHECK-COUNT-2: vector.load %[[PANELS]]{{.*}} : memref<3x64x16xf32>, vector<8xf32>
// CHECK: memref.load %arg0[%{{.*}}, %[[KP]]]
// CHECK-NEXT: vector.broadcast %{{.*}} : f32 to vector<8xf32>
// CHECK-COUNT-2: vector.fma
// CHECK: arith.cmpi sle, %{{.*}}, %[[LAST]]
// CHECK-NEXT: scf.if
// CHECK: vector.store
// CHECK: memref.dealloc %[[PANELS]]
// CHECK: } else {
// CHECK: scf.parallel (%{{.*}}) = (%{{.*}}) to (%{{.*}}) step (%c48
// CHECK: scf.for %{{.*}} step %c512
// CHECK: scf.for %[[K:.*]] = {{.*}} iter_args({{.*}}) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
// CHECK-COUNT-4: vector.load %arg0[%{{.*}}, %[[K]]] : memref<?x64xf32>, vector<8xf32>
// CHECK: vector.load %arg1[%{{.*}}, %[[K]]] : memref<48x64xbf16>, vector<8xbf16>
// CHECK-NEXT: arith.extf %{{.*}} : vector<8xbf16> to vector<8xf32>
// CHECK-COUNT-12: vector.fma
// CHECK: vector.reduction <add>, %{{.*}} fastmath<reassoc,contract> : vector<8xf32> into f32
// With AVX-512's 32 registers, a 4 x 4 tile of 16-lane accumulators (and
// no packing: 48 columns are less than one 64-column panel).
// AVX512-LABEL: func.func @linear
// AVX512: arith.cmpi ne
// AVX512-NEXT: scf.if
// AVX512-NOT: scf.if
// AVX512-NOT: scf.parallel
// AVX512: iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// AVX512-COUNT-4: vector.load %arg0{{.*}} vector<16xf32>
// AVX512-COUNT-16: vector.fma
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

// Along a reduction of 256 or more (a weight's rows), each dot tile
// prefetches, at its k, the rows of w one tile ahead of its own (a 4 x 3
// tile at n0: rows n0 + 3 .. n0 + 5), the rows the next tile streams. With
// at most two row tiles (a decode step's rows), the threads share the columns
// in tiles of 12 (4 x 3) rather than blocks of 48.
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (n, k)>
#o = affine_map<(m, n, k) -> (m, n)>
// CHECK-LABEL: func.func @decode_linear
// CHECK: } else {
// CHECK: %[[FEW:.*]] = arith.cmpi ule, %[[ROWS:.*]], %c8
// CHECK: %[[STEP:.*]] = arith.select %[[FEW]], %c12, %c48
// CHECK: scf.parallel (%[[NB:.*]]) = (%{{.*}}) to (%c96) step (%[[STEP]])
// CHECK-NEXT: arith.addi %[[NB]], %[[STEP]]
// CHECK: scf.for %[[N0:.*]] = %{{.*}} to %{{.*}} step %c3
// CHECK: scf.for %[[K:.*]] = {{.*}} iter_args
// CHECK: vector.load %arg1[%[[N0]], %[[K]]] : memref<96x256xbf16>, vector<8xbf16>
// CHECK: %[[R3:.*]] = arith.addi %[[N0]], %c3
// CHECK-NEXT: memref.prefetch %arg1[%[[R3]], %[[K]]], read, locality<3>, data : memref<96x256xbf16>
// CHECK: %[[R5:.*]] = arith.addi %[[N0]], %c5
// CHECK-NEXT: memref.prefetch %arg1[%[[R5]], %[[K]]], read, locality<3>, data
// CHECK-NEXT: vector.fma
func.func @decode_linear(%x: memref<?x256xf32>, %w: memref<96x256xbf16>, %y: memref<?x96xf32>) {
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x256xf32>, memref<96x256xbf16>) outs(%y : memref<?x96xf32>) {
  ^bb0(%p: f32, %q: bf16, %r: f32):
    %e = arith.extf %q : bf16 to f32
    %m = arith.mulf %p, %e : f32
    %s = arith.addf %r, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// f32 weights: no prefetch (a 4 KiB row of f32 is long enough for the
// hardware prefetcher).
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (n, k)>
#o = affine_map<(m, n, k) -> (m, n)>
// CHECK-LABEL: func.func @decode_linear_f32
// CHECK-NOT: memref.prefetch
// CHECK: vector.fma
// CHECK-NOT: memref.prefetch
func.func @decode_linear_f32(%x: memref<?x256xf32>, %w: memref<96x256xf32>, %y: memref<?x96xf32>) {
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x256xf32>, memref<96x256xf32>) outs(%y : memref<?x96xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %r, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// p · v: v and the output contiguous along n, so 6 rows x 2 vectors of the
// output stay in registers, one broadcast of p per row and k; column tails
// of one vector, then scalars.
#a = affine_map<(i, d, j) -> (i, j)>
#b = affine_map<(i, d, j) -> (j, d)>
#o = affine_map<(i, d, j) -> (i, d)>
// CHECK-LABEL: func.func @outer
// CHECK-NOT: linalg.generic
// CHECK: scf.parallel
// CHECK: scf.for %[[K:.*]] = {{.*}} iter_args({{.*}}) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
// CHECK-COUNT-2: vector.load %arg1[%[[K]], %{{.*}}] : memref<?x?xf32, strided<[?, 1], offset: ?>>, vector<8xf32>
// CHECK: memref.load %arg0
// CHECK-NEXT: vector.broadcast %{{.*}} : f32 to vector<8xf32>
// CHECK-COUNT-2: vector.fma
// CHECK: vector.store
// CHECK-NOT: vector.reduction
func.func @outer(%p: memref<?x?xf32>, %v: memref<?x?xf32, strided<[?, 1], offset: ?>>, %o: memref<?x?xf32>) {
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%p, %v : memref<?x?xf32>, memref<?x?xf32, strided<[?, 1], offset: ?>>) outs(%o : memref<?x?xf32>) {
  ^bb0(%x: f32, %y: f32, %r: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %m, %r : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// The LM head: one row, no m dim in the output; a 1 x 3 dot tile.
#a = affine_map<(n, k) -> (k)>
#b = affine_map<(n, k) -> (n, k)>
#o = affine_map<(n, k) -> (n)>
// CHECK-LABEL: func.func @matvec
// CHECK-NOT: linalg.generic
// CHECK: scf.for {{.*}} iter_args(%{{[^,]+}} = %cst, %{{[^,]+}} = %cst, %{{[^,]+}} = %cst) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>)
func.func @matvec(%x: memref<64xf32>, %w: memref<?x64xf32>, %y: memref<?xf32>) {
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "reduction"]}
      ins(%x, %w : memref<64xf32>, memref<?x64xf32>) outs(%y : memref<?xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %r, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Inside a parallel loop (a tile of attention), the contraction's own block
// loop is sequential.
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#o = affine_map<(m, n, k) -> (m, n)>
// CHECK-LABEL: func.func @nested
// CHECK: scf.parallel
// CHECK-NOT: scf.parallel
// CHECK: vector.fma
func.func @nested(%q: memref<4x64x8xf32>, %kt: memref<8x64xf32>, %s: memref<4x64x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.parallel (%h) = (%c0) to (%c4) step (%c1) {
    %qh = memref.subview %q[%h, 0, 0] [1, 64, 8] [1, 1, 1] : memref<4x64x8xf32> to memref<64x8xf32, strided<[8, 1], offset: ?>>
    %sh = memref.subview %s[%h, 0, 0] [1, 64, 64] [1, 1, 1] : memref<4x64x64xf32> to memref<64x64xf32, strided<[64, 1], offset: ?>>
    linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%qh, %kt : memref<64x8xf32, strided<[8, 1], offset: ?>>, memref<8x64xf32>) outs(%sh : memref<64x64xf32, strided<[64, 1], offset: ?>>) {
    ^bb0(%x: f32, %y: f32, %r: f32):
      %m = arith.mulf %x, %y : f32
      %t = arith.addf %r, %m : f32
      linalg.yield %t : f32
    }
    scf.reduce
  }
  return
}

// -----

// Left alone: a body that is not a bare multiply-accumulate, an operand
// whose innermost dim is strided, and tensors.
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (n, k)>
#o = affine_map<(m, n, k) -> (m, n)>
// CHECK-LABEL: func.func @not_contractions
// CHECK-COUNT-3: linalg.generic
func.func @not_contractions(%x: memref<?x64xf32>, %w: memref<48x64xf32>, %ws: memref<48x64xf32, strided<[1, 48]>>,
                            %y: memref<?x48xf32>, %tx: tensor<?x64xf32>, %tw: tensor<48x64xf32>, %ty: tensor<?x48xf32>) -> tensor<?x48xf32> {
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x64xf32>, memref<48x64xf32>) outs(%y : memref<?x48xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %m = arith.mulf %p, %q : f32
    %e = math.exp %m : f32
    %s = arith.addf %r, %e : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %ws : memref<?x64xf32>, memref<48x64xf32, strided<[1, 48]>>) outs(%y : memref<?x48xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %r, %m : f32
    linalg.yield %s : f32
  }
  %t = linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%tx, %tw : tensor<?x64xf32>, tensor<48x64xf32>) outs(%ty : tensor<?x48xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %r, %m : f32
    linalg.yield %s : f32
  } -> tensor<?x48xf32>
  return %t : tensor<?x48xf32>
}

// -----

// bf16-dot: x (f32) · wᵀ (bf16) rounds x to bf16 once, into a copy, and
// multiplies pairs of k with the AVX512_BF16 dot. With at least 256 rows,
// each 32 x 16 square of w (16 columns, 16 pairs of k as 32-bit lanes) is
// transposed into panels of pairs ([k / 2][column], 32 pairs deep for
// k = 64), and a 6-row tile of 4 vectors takes per pair of k 4 panel loads
// and, per row, one broadcast of the row's pair into 4 dots. With fewer
// rows, 4 x 4 dot tiles step along k by 32, loading the copy's rows and w's
// as they lie; the rows past the whole tiles take one tile of as many rows.
// The last k % 32 (none here) and the edges read the copy too.
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (n, k)>
#o = affine_map<(m, n, k) -> (m, n)>
// BF16DOT-LABEL: func.func @linear_pairs
// BF16DOT: %[[X16:.*]] = memref.alloc(%{{.*}}) {alignment = 64 : i64} : memref<?x64xbf16>
// BF16DOT: %[[XV:.*]] = vector.load %arg0[%{{.*}}, %{{.*}}] : memref<?x64xf32>, vector<32xf32>
// BF16DOT-NEXT: %[[XR:.*]] = arith.truncf %[[XV]] : vector<32xf32> to vector<32xbf16>
// BF16DOT-NEXT: vector.store %[[XR]], %[[X16]]
// BF16DOT: scf.if
// BF16DOT: %[[PANELS:.*]] = memref.alloc() {alignment = 64 : i64} : memref<2x32x64xf32>
// BF16DOT: scf.for %[[KK:.*]] = %{{.*}} to %{{.*}} step %c32
// BF16DOT: vector.load %arg1[%{{.*}}, %[[KK]]] : memref<128x64xbf16>, vector<32xbf16>
// BF16DOT-NEXT: vector.bitcast %{{.*}} : vector<32xbf16> to vector<16xf32>
// BF16DOT: vector.transpose %{{.*}}, [1, 0] : vector<16x16xf32> to vector<16x16xf32>
// BF16DOT: scf.for %[[KP:.*]] = %{{.*}} to %{{.*}} step %c2{{.*}} -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// BF16DOT: vector.load %[[PANELS]]{{.*}} : memref<2x32x64xf32>, vector<16xf32>
// BF16DOT-NEXT: vector.bitcast %{{.*}} : vector<16xf32> to vector<32xbf16>
// BF16DOT: %[[PAIR:.*]] = vector.load %[[X16]][%{{.*}}, %[[KP]]] : memref<?x64xbf16>, vector<2xbf16>
// BF16DOT-NEXT: vector.bitcast %[[PAIR]] : vector<2xbf16> to vector<1xf32>
// BF16DOT: vector.broadcast %{{.*}} : f32 to vector<16xf32>
// BF16DOT-NEXT: %[[BC:.*]] = vector.bitcast %{{.*}} : vector<16xf32> to vector<32xbf16>
// BF16DOT-COUNT-4: x86vector.avx512.dot %{{.*}}, %[[BC]], %{{.*}} : vector<32xbf16> -> vector<16xf32>
// BF16DOT: } else {
// BF16DOT: scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %c32{{.*}} -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// BF16DOT: vector.load %[[X16]][%{{.*}}, %[[K]]] : memref<?x64xbf16>, vector<32xbf16>
// BF16DOT: vector.load %arg1[%{{.*}}, %[[K]]] : memref<128x64xbf16>, vector<32xbf16>
// BF16DOT-COUNT-16: x86vector.avx512.dot
// BF16DOT: vector.reduction <add>
// BF16DOT: scf.index_switch
// BF16DOT: case 1 {
// BF16DOT: case 2 {
// BF16DOT: case 3 {
// BF16DOT: memref.dealloc %[[X16]]
func.func @linear_pairs(%x: memref<?x64xf32>, %w: memref<128x64xbf16>, %y: memref<?x128xf32>) {
  linalg.generic {indexing_maps = [#a, #b, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x64xf32>, memref<128x64xbf16>) outs(%y : memref<?x128xf32>) {
  ^bb0(%p: f32, %q: bf16, %r: f32):
    %e = arith.extf %q : bf16 to f32
    %m = arith.mulf %p, %e : f32
    %s = arith.addf %r, %m : f32
    linalg.yield %s : f32
  }
  return
}
