// RUN: meshfold-opt %s -split-input-file --convert-moe-to-linalg | FileCheck %s

// A linear layer is one generic: (t, o, i) with the weight read as [out, in].
// CHECK-DAG: #[[$X:.+]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[$W:.+]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-DAG: #[[$Y:.+]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.+]]: tensor<?x64xf32>, %[[W:.+]]: tensor<128x64xf32>)
// CHECK: %[[T:.+]] = tensor.dim %[[X]], %{{.+}} : tensor<?x64xf32>
// CHECK: %[[E:.+]] = tensor.empty(%[[T]]) : tensor<?x128xf32>
// CHECK: %[[Z:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%[[E]] : tensor<?x128xf32>)
// CHECK: linalg.generic {indexing_maps = [#[[$X]], #[[$W]], #[[$Y]]], iterator_types = ["parallel", "parallel", "reduction"]}
// CHECK-SAME: ins(%[[X]], %[[W]] : tensor<?x64xf32>, tensor<128x64xf32>) outs(%[[Z]] : tensor<?x128xf32>)
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK-NOT: moe.
func.func @linear(%x: tensor<?x64xf32>, %w: tensor<128x64xf32>) -> tensor<?x128xf32> {
  %y = moe.linear %x, %w : tensor<?x64xf32>, tensor<128x64xf32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

// A clip is one elementwise generic: max with -limit, then min with limit.
// CHECK-LABEL: func.func @clip
// CHECK-SAME: (%[[X:.+]]: tensor<?x2x8xf32>)
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel"]} ins(%[[X]] : tensor<?x2x8xf32>)
// CHECK: arith.maximumf %{{.+}}, %{{.+}} : f32
// CHECK: arith.minimumf %{{.+}}, %{{.+}} : f32
// CHECK-NOT: moe.
func.func @clip(%x: tensor<?x2x8xf32>) -> tensor<?x2x8xf32> {
  %y = moe.clip %x {limit = 0.5 : f32} : tensor<?x2x8xf32>
  return %y : tensor<?x2x8xf32>
}

// -----

// A bias is added to the product's rows by a second generic, in place.
// CHECK-DAG: #[[$ROW:.+]] = affine_map<(d0, d1) -> (d1)>
// CHECK-DAG: #[[$ID:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @linear_bias
// CHECK-SAME: (%[[X:.+]]: tensor<?x64xf32>, %[[W:.+]]: tensor<128x64xf32>, %[[B:.+]]: tensor<128xbf16>)
// CHECK: %[[P:.+]] = linalg.generic {{.*}} ins(%[[X]], %[[W]] : tensor<?x64xf32>, tensor<128x64xf32>)
// CHECK: %[[Y:.+]] = linalg.generic {indexing_maps = [#[[$ROW]], #[[$ID]]], iterator_types = ["parallel", "parallel"]} ins(%[[B]] : tensor<128xbf16>) outs(%[[P]] : tensor<?x128xf32>)
// CHECK: arith.extf
// CHECK: arith.addf
// CHECK: return %[[Y]]
// CHECK-NOT: moe.
func.func @linear_bias(%x: tensor<?x64xf32>, %w: tensor<128x64xf32>, %b: tensor<128xbf16>) -> tensor<?x128xf32> {
  %y = moe.linear %x, %w bias %b : tensor<?x64xf32>, tensor<128x64xf32>, tensor<128xbf16> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

// A dense MLP: the gate and up products (the moe.linear form), silu(g) * u
// into g, the down product, and, where gated, the one-column product of the
// gate whose sigmoid scales each row.
// CHECK-DAG: #[[$ID:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[$COL:.+]] = affine_map<(d0, d1) -> (d0, 0)>
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x64xf32>, %[[W1:[^:]+]]: tensor<96x64xf32>, %[[W2:[^:]+]]: tensor<64x96xf32>, %[[W3:[^:]+]]: tensor<96x64xf32>, %[[G:[^:]+]]: tensor<1x64xf32>)
// CHECK: %[[H1:.+]] = linalg.generic {{.*}} ins(%[[X]], %[[W1]] : tensor<?x64xf32>, tensor<96x64xf32>)
// CHECK: %[[H3:.+]] = linalg.generic {{.*}} ins(%[[X]], %[[W3]] : tensor<?x64xf32>, tensor<96x64xf32>)
// CHECK: %[[ACT:.+]] = linalg.generic {indexing_maps = [#[[$ID]], #[[$ID]]], {{.*}} ins(%[[H3]] : tensor<?x96xf32>) outs(%[[H1]] : tensor<?x96xf32>)
// CHECK: math.exp
// CHECK: %[[Y:.+]] = linalg.generic {{.*}} ins(%[[ACT]], %[[W2]] : tensor<?x96xf32>, tensor<64x96xf32>)
// CHECK: %[[S:.+]] = linalg.generic {{.*}} ins(%[[X]], %[[G]] : tensor<?x64xf32>, tensor<1x64xf32>)
// CHECK: %[[OUT:.+]] = linalg.generic {indexing_maps = [#[[$COL]], #[[$ID]]], {{.*}} ins(%[[S]] : tensor<?x1xf32>) outs(%[[Y]] : tensor<?x64xf32>)
// CHECK: math.exp
// CHECK: arith.divf
// CHECK: arith.mulf
// CHECK: return %[[OUT]]
// CHECK-NOT: moe.
func.func @mlp(%x: tensor<?x64xf32>, %w1: tensor<96x64xf32>, %w2: tensor<64x96xf32>, %w3: tensor<96x64xf32>, %g: tensor<1x64xf32>) -> tensor<?x64xf32> {
  %y = moe.mlp %x, %w1, %w2, %w3 gate %g : tensor<?x64xf32>, tensor<96x64xf32>, tensor<64x96xf32>, tensor<96x64xf32>, tensor<1x64xf32> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Fused attention (docs/design.md, 9. The compiler): scf.forall over (head,
// query tile of 64 rows), an scf.for over key tiles of 64 keys carrying the
// running max, sum and accumulator; the KV head of query head h is picked by
// slicing at h floordiv (n_h / n_kv); a key tile none of whose keys any query
// of the tile sees is skipped (min key position > max query position; each
// key tile's bounds are computed once, before the work items); both
// contractions are NN generics with one reduction dim (K is transposed to
// [n_kv, d_h, T] once, before the loops, and each key tile is a slice of
// it). attention-fused-bufferize.mlir checks that no [T, T]
// tensor remains.
// CHECK-DAG: #[[$ID1:.+]] = affine_map<(d0) -> (d0)>
// CHECK-DAG: #[[$SCALAR:.+]] = affine_map<(d0) -> ()>
// CHECK-DAG: #[[$A:.+]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[$B:.+]] = affine_map<(d0, d1, d2) -> (d2, d1)>
// CHECK-DAG: #[[$C:.+]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-DAG: #[[$ROW:.+]] = affine_map<(d0, d1) -> (d0)>
// CHECK-DAG: #[[$COL:.+]] = affine_map<(d0, d1) -> (d1)>
// CHECK-DAG: #[[$ID2:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @attention
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<?x8x16xf32>, %[[K:[^:]+]]: tensor<?x2x16xf32>, %[[V:[^:]+]]: tensor<?x2x16xf32>, %[[QP:[^:]+]]: tensor<?xi64>, %[[KP:[^:]+]]: tensor<?xi64>)
// CHECK-NOT: floordiv
// CHECK: %[[TQ:.+]] = tensor.dim %[[Q]]
// CHECK: %[[TK:.+]] = tensor.dim %[[K]]
// CHECK: %[[TILES:.+]] = arith.ceildivui %[[TK]], %{{.+}} : index
// CHECK: %[[KTALL:.+]] = linalg.transpose ins(%[[K]] : tensor<?x2x16xf32>) outs(%{{.+}} : tensor<2x16x?xf32>) permutation = [1, 2, 0]
// Each key tile's least and greatest position, once.
// CHECK: %[[BOUNDS:.+]]:2 = scf.for %[[T:.+]] = %{{.+}} to %[[TILES]] step %{{.+}} iter_args(%[[LO:.+]] = %{{.+}}, %[[HI:.+]] = %{{.+}}) -> (tensor<?xi64>, tensor<?xi64>)
// CHECK: tensor.extract_slice %[[KP]]
// CHECK: arith.minsi %{{.+}}, %{{.+}} : i64
// CHECK: tensor.insert %{{.+}} into %[[LO]][%[[T]]]
// CHECK: arith.maxsi %{{.+}}, %{{.+}} : i64
// CHECK: tensor.insert %{{.+}} into %[[HI]][%[[T]]]
// CHECK: %[[OUT:.+]] = scf.forall (%[[H:.+]], %[[I0:.+]]) = (0, 0) to (8, %[[TQ]]) step (1, 64) shared_outs(%[[O:.+]] = %{{.+}}) -> (tensor<?x8x16xf32>)
// CHECK: %[[REST:.+]] = arith.subi %[[TQ]], %[[I0]]
// CHECK: %[[BQ:.+]] = arith.minsi %{{.+}}, %[[REST]]
// CHECK: %[[KVH:.+]] = arith.divui %[[H]], %{{.+}} : index
// CHECK: %[[QT:.+]] = tensor.extract_slice %[[Q]][%[[I0]], %[[H]], 0] [%[[BQ]], 1, 16] [1, 1, 1] : tensor<?x8x16xf32> to tensor<?x16xf32>
// CHECK: %[[QPT:.+]] = tensor.extract_slice %[[QP]][%[[I0]]] [%[[BQ]]] [1]
// CHECK: %[[MAXQT:.+]] = linalg.generic {indexing_maps = [#[[$ID1]], #[[$SCALAR]]], iterator_types = ["reduction"]} ins(%[[QPT]] : tensor<?xi64>)
// CHECK: arith.maxsi
// CHECK: %[[MAXQ:.+]] = tensor.extract %[[MAXQT]][]
// CHECK: %[[C32:.+]] = arith.constant 32 : i64
// CHECK: arith.minsi
// CHECK: %[[MINQ:.+]] = tensor.extract
// CHECK: %[[SEQ0:.+]] = arith.shrsi %[[MINQ]], %[[C32]] : i64
// CHECK: %[[M0:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<?xf32>)
// CHECK: %[[L0:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<?xf32>)
// CHECK: %[[ACC0:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<?x16xf32>)
// CHECK: %[[LOOP:.+]]:3 = scf.for %[[TI:.+]] = %{{.+}} to %[[TILES]] step %{{.+}} iter_args(%[[M:.+]] = %[[M0]], %[[L:.+]] = %[[L0]], %[[ACC:.+]] = %[[ACC0]]) -> (tensor<?xf32>, tensor<?xf32>, tensor<?x16xf32>)
// CHECK: %[[MINK:.+]] = tensor.extract %[[BOUNDS]]#0[%[[TI]]]
// CHECK: %[[NOTLATER:.+]] = arith.cmpi sle, %[[MINK]], %[[MAXQ]] : i64
// CHECK: %[[MAXK:.+]] = tensor.extract %[[BOUNDS]]#1[%[[TI]]]
// CHECK: %[[SEQK:.+]] = arith.shrsi %[[MAXK]], %[[C32]] : i64
// CHECK: %[[REACHES:.+]] = arith.cmpi sge, %[[SEQK]], %[[SEQ0]] : i64
// CHECK: %[[VIS:.+]] = arith.andi %[[NOTLATER]], %[[REACHES]] : i1
// CHECK: scf.if %[[VIS]] -> (tensor<?xf32>, tensor<?xf32>, tensor<?x16xf32>)
// CHECK: %[[J0:.+]] = arith.muli %[[TI]], %{{.+}} : index
// CHECK: %[[KPT:.+]] = tensor.extract_slice %[[KP]][%[[J0]]]
// CHECK: %[[VT:.+]] = tensor.extract_slice %[[V]][%[[J0]], %[[KVH]], 0] [%{{.+}}, 1, 16] [1, 1, 1] : tensor<?x2x16xf32> to tensor<?x16xf32>
// CHECK: %[[Z:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<?x?xf32>)
// CHECK: %[[KTT:.+]] = tensor.extract_slice %[[KTALL]][%[[KVH]], 0, %[[J0]]] [1, 16, %{{.+}}] [1, 1, 1] : tensor<2x16x?xf32> to tensor<16x?xf32>
// CHECK: %[[S:.+]] = linalg.generic {indexing_maps = [#[[$A]], #[[$B]], #[[$C]]], iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[QT]], %[[KTT]] : tensor<?x16xf32>, tensor<16x?xf32>) outs(%[[Z]] : tensor<?x?xf32>)
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: %[[SM:.+]] = linalg.generic {indexing_maps = [#[[$ROW]], #[[$COL]], #[[$ID2]]], iterator_types = ["parallel", "parallel"]} ins(%[[QPT]], %[[KPT]] : tensor<?xi64>, tensor<?xi64>) outs(%[[S]] : tensor<?x?xf32>)
// CHECK: ^bb0(%[[QI:.+]]: i64, %[[KJ:.+]]: i64, %{{.+}}: f32):
// CHECK: arith.cmpi sle, %[[KJ]], %[[QI]] : i64
// CHECK: arith.constant 2.500000e-01 : f32
// CHECK: arith.constant 0xFF800000 : f32
// CHECK: %[[TMAX:.+]] = linalg.generic {indexing_maps = [#[[$ID2]], #[[$ROW]]], iterator_types = ["parallel", "reduction"]} ins(%[[SM]] : tensor<?x?xf32>)
// CHECK: arith.maximumf
// CHECK: %[[UPD:.+]]:3 = linalg.generic {indexing_maps = [#[[$ID1]], #[[$ID1]], #[[$ID1]], #[[$ID1]]], iterator_types = ["parallel"]} ins(%[[TMAX]] : tensor<?xf32>) outs(%[[M]], %[[L]], %{{.+}} : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>)
// CHECK: ^bb0(%[[TM:.+]]: f32, %[[MOLD:.+]]: f32, %[[LOLD:.+]]: f32, %{{.+}}: f32):
// CHECK: %[[MNEW:.+]] = arith.maximumf %[[MOLD]], %[[TM]] : f32
// CHECK: %[[NONE:.+]] = arith.cmpf oeq, %[[MOLD]], %{{.+}} : f32
// CHECK: %[[DM:.+]] = arith.subf %[[MOLD]], %[[MNEW]] : f32
// CHECK: %[[E:.+]] = math.exp %[[DM]] : f32
// CHECK: %[[CORR:.+]] = arith.select %[[NONE]], %{{.+}}, %[[E]] : f32
// CHECK: %[[LC:.+]] = arith.mulf %[[LOLD]], %[[CORR]] : f32
// CHECK: linalg.yield %[[MNEW]], %[[LC]], %[[CORR]]
// CHECK: %[[P:.+]] = linalg.generic {indexing_maps = [#[[$ROW]], #[[$ID2]]], iterator_types = ["parallel", "parallel"]} ins(%[[UPD]]#0 : tensor<?xf32>) outs(%[[SM]] : tensor<?x?xf32>)
// CHECK: math.exp
// CHECK: %[[LNEW:.+]] = linalg.generic {indexing_maps = [#[[$ID2]], #[[$ROW]]], iterator_types = ["parallel", "reduction"]} ins(%[[P]] : tensor<?x?xf32>) outs(%[[UPD]]#1 : tensor<?xf32>)
// CHECK: arith.addf
// CHECK: %[[ACCS:.+]] = linalg.generic {indexing_maps = [#[[$ROW]], #[[$ID2]]], iterator_types = ["parallel", "parallel"]} ins(%[[UPD]]#2 : tensor<?xf32>) outs(%[[ACC]] : tensor<?x16xf32>)
// CHECK: %[[ACCN:.+]] = linalg.generic {indexing_maps = [#[[$A]], #[[$B]], #[[$C]]], iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[P]], %[[VT]] : tensor<?x?xf32>, tensor<?x16xf32>) outs(%[[ACCS]] : tensor<?x16xf32>)
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: scf.yield %[[UPD]]#0, %[[LNEW]], %[[ACCN]]
// CHECK: } else {
// CHECK: scf.yield %[[M]], %[[L]], %[[ACC]]
// CHECK: %[[OSLOT:.+]] = tensor.extract_slice %[[O]][%[[I0]], %[[H]], 0] [%[[BQ]], 1, 16] [1, 1, 1]
// CHECK: %[[OT:.+]] = linalg.generic {{.*}} ins(%[[LOOP]]#2, %[[LOOP]]#1 : tensor<?x16xf32>, tensor<?xf32>) outs(%[[OSLOT]] : tensor<?x16xf32>)
// CHECK: arith.divf
// CHECK: scf.forall.in_parallel
// CHECK-NEXT: tensor.parallel_insert_slice %[[OT]] into %[[O]][%[[I0]], %[[H]], 0] [%[[BQ]], 1, 16] [1, 1, 1] : tensor<?x16xf32> into tensor<?x8x16xf32>
// CHECK: return %[[OUT]]
// CHECK-NOT: moe.
func.func @attention(%q: tensor<?x8x16xf32>, %k: tensor<?x2x16xf32>, %v: tensor<?x2x16xf32>, %qp: tensor<?xi64>, %kp: tensor<?xi64>) -> tensor<?x8x16xf32> {
  %o = moe.attention %q, %k, %v, %qp, %kp {scale = 0.25 : f32} : tensor<?x8x16xf32>, tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x16xf32>
  return %o : tensor<?x8x16xf32>
}

// -----

// In a decode step the query tiles never mix sequences: a tile starts at
// the first row, where the sequence (a position's high 32 bits) changes, and
// after 64 rows of one sequence (a prompt's chunk). So a decoding request's
// row is a tile of its own, skipping the key tiles of the batch's other
// requests. The forall runs over (head, tile); a tile's rows run from its
// start to the next (the last entry is the row count). K is not
// transposed: the scores are dot products with the key tile's rows of K
// ([keys, d] at the KV head) where they lie.
// CHECK-DAG: #[[$QROW:.+]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[$KROW:.+]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-LABEL: func.func @step_attention
// CHECK: %[[TQ:.+]] = tensor.dim %arg0
// CHECK-NOT: linalg.transpose
// CHECK: arith.ceildivui
// CHECK-NOT: linalg.transpose
// CHECK: %[[C64:.+]] = arith.constant 64 : index
// CHECK: %[[RUNS:.+]]:3 = scf.for %[[I:.+]] = %{{.+}} to %[[TQ]] step %{{.+}} iter_args(%[[ST:.+]] = %{{.+}}, %[[N:.+]] = %{{.+}}, %[[CUR:.+]] = %{{.+}}) -> (tensor<?xindex>, index, index)
// CHECK: %[[FIRST:.+]] = arith.cmpi eq, %[[I]], %{{.+}} : index
// CHECK: %[[OTHER:.+]] = arith.cmpi ne, %{{.+}}, %{{.+}} : i64
// CHECK: %[[LEN:.+]] = arith.subi %[[I]], %[[CUR]] : index
// CHECK: %[[FULL:.+]] = arith.cmpi eq, %[[LEN]], %[[C64]] : index
// CHECK: %[[NEW:.+]] = arith.ori %[[OTHER]], %[[FULL]] : i1
// CHECK: %[[STARTS:.+]] = arith.ori %[[FIRST]], %[[NEW]] : i1
// CHECK: scf.if %[[STARTS]]
// CHECK-NEXT: tensor.insert %[[I]] into %[[ST]][%[[N]]] : tensor<?xindex>
// CHECK: %[[TILES:.+]] = tensor.insert %[[TQ]] into %[[RUNS]]#0[%[[RUNS]]#1] : tensor<?xindex>
// CHECK: scf.forall (%[[H:.+]], %[[T:.+]]) in (8, %[[RUNS]]#1) shared_outs
// CHECK-NEXT: %[[I0:.+]] = tensor.extract %[[TILES]][%[[T]]] : tensor<?xindex>
// CHECK: %[[T1:.+]] = arith.addi %[[T]], %{{.+}} : index
// CHECK-NEXT: %[[END:.+]] = tensor.extract %[[TILES]][%[[T1]]] : tensor<?xindex>
// CHECK-NEXT: %[[ROWS:.+]] = arith.subi %[[END]], %[[I0]] : index
// CHECK: %[[BQ:.+]] = arith.minsi %{{.+}}, %[[ROWS]] : index
// CHECK: tensor.extract_slice %arg0[%[[I0]], %[[H]], 0] [%[[BQ]], 1, 16] [1, 1, 1]
// CHECK: %[[KT:.+]] = tensor.extract_slice %arg1[%{{.+}}, %{{.+}}, 0] [%{{.+}}, 1, 16] [1, 1, 1] : tensor<?x2x16xf32> to tensor<?x16xf32>
// CHECK-NEXT: linalg.generic {indexing_maps = [#[[$QROW]], #[[$KROW]], #{{.+}}], iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.+}}, %[[KT]] : tensor<?x16xf32>, tensor<?x16xf32>)
func.func @step_attention(%q: tensor<?x8x16xf32>, %k: tensor<?x2x16xf32>, %v: tensor<?x2x16xf32>, %qp: tensor<?xi64>, %kp: tensor<?xi64>) -> tensor<?x8x16xf32> attributes {moe.decode_step} {
  %o = moe.attention %q, %k, %v, %qp, %kp {scale = 0.25 : f32} : tensor<?x8x16xf32>, tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x16xf32>
  return %o : tensor<?x8x16xf32>
}

// -----

// A decode step reading its K/V cache in place: the key tiles are those of
// the table, [n, 2] (first row, rows), with their positions by tile
// ([n, 64]); each tile's bounds and the key loop go over the table's rows,
// and a tile reads its rows of K and V where they lie, at most 64 of them.
// CHECK-LABEL: func.func @paged_step_attention
// CHECK-NOT: linalg.transpose
// CHECK: %[[N:.+]] = tensor.dim %arg5, %{{.+}} : tensor<?x2xi64>
// CHECK: %[[BOUNDS:.+]]:2 = scf.for %[[T:.+]] = %{{.+}} to %[[N]] step
// CHECK: %[[ROWS:.+]] = tensor.extract %arg5[%[[T]], %{{.+}}] : tensor<?x2xi64>
// CHECK: %[[R:.+]] = arith.index_cast %[[ROWS]] : i64 to index
// CHECK: %[[BK:.+]] = arith.minsi %{{.+}}, %[[R]] : index
// CHECK: tensor.extract_slice %arg4[%[[T]], 0] [1, %[[BK]]] [1, 1] : tensor<?x64xi64> to tensor<?xi64>
// CHECK: scf.forall
// CHECK: scf.for %[[TI:.+]] = %{{.+}} to %[[N]] step %{{.+}} iter_args
// CHECK: scf.if
// CHECK: tensor.extract %arg5[%[[TI]], %{{.+}}] : tensor<?x2xi64>
// CHECK: tensor.extract_slice %arg4[%[[TI]], 0]
// CHECK: %[[FIRST:.+]] = tensor.extract %arg5[%[[TI]], %{{.+}}] : tensor<?x2xi64>
// CHECK: %[[J0:.+]] = arith.index_cast %[[FIRST]] : i64 to index
// CHECK: tensor.extract_slice %arg2[%[[J0]], %{{.+}}, 0] [%{{.+}}, 1, 16] [1, 1, 1] : tensor<?x2x16xf32> to tensor<?x16xf32>
// CHECK: tensor.extract_slice %arg1[%[[J0]], %{{.+}}, 0] [%{{.+}}, 1, 16] [1, 1, 1] : tensor<?x2x16xf32> to tensor<?x16xf32>
func.func @paged_step_attention(%q: tensor<?x8x16xf32>, %k: tensor<?x2x16xf32>, %v: tensor<?x2x16xf32>, %qp: tensor<?xi64>, %kp: tensor<?x64xi64>, %tiles: tensor<?x2xi64>) -> tensor<?x8x16xf32> attributes {moe.decode_step} {
  %o = moe.attention %q, %k, %v, %qp, %kp tiles %tiles : tensor<?x2xi64> {scale = 0.25 : f32} : tensor<?x8x16xf32>, tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<?xi64>, tensor<?x64xi64> -> tensor<?x8x16xf32>
  return %o : tensor<?x8x16xf32>
}

// -----

// RMSNorm: a sum of squares over d, then x * rsqrt(sum / d + eps) * w.
// CHECK-LABEL: func.func @rms_norm
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]
// CHECK: arith.constant 6.400000e+01 : f32
// CHECK: arith.constant 9.99999974E-6 : f32
// CHECK: math.rsqrt
// CHECK-NOT: moe.
func.func @rms_norm(%x: tensor<?x64xf32>, %w: tensor<64xf32>) -> tensor<?x64xf32> {
  %y = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Per head (Qwen3-MoE's q_norm): the sum of squares of each [T, heads]
// vector over d_h, then the [d_h] weight on every head.
// CHECK-DAG: #[[$ALL:.+]] = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-DAG: #[[$OUTER:.+]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-DAG: #[[$LAST:.+]] = affine_map<(d0, d1, d2) -> (d2)>
// CHECK-LABEL: func.func @rms_norm_heads
// CHECK: %[[SUM:.+]] = linalg.generic {indexing_maps = [#[[$ALL]], #[[$OUTER]]], iterator_types = ["parallel", "parallel", "reduction"]} ins(%arg0 : tensor<?x4x16xf32>) outs(%{{.+}} : tensor<?x4xf32>)
// CHECK: linalg.generic {indexing_maps = [#[[$ALL]], #[[$OUTER]], #[[$LAST]], #[[$ALL]]], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0, %[[SUM]], %arg1 : tensor<?x4x16xf32>, tensor<?x4xf32>, tensor<16xf32>)
// CHECK: arith.constant 1.600000e+01 : f32
// CHECK: math.rsqrt
// CHECK-NOT: moe.
func.func @rms_norm_heads(%x: tensor<?x4x16xf32>, %w: tensor<16xf32>) -> tensor<?x4x16xf32> {
  %y = moe.rms_norm %x, %w {epsilon = 1.0e-6 : f32} : tensor<?x4x16xf32>, tensor<16xf32> -> tensor<?x4x16xf32>
  return %y : tensor<?x4x16xf32>
}

// -----

// The two halves of a TP-split RMSNorm: the rows' sums of squares; the scale
// by the given sums over `count` squares (64 here, the whole row's, not the
// 32 of this rank's columns).
// CHECK-LABEL: func.func @rms_halves
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<?x32xf32>) outs(%{{.+}} : tensor<?xf32>)
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1, %arg2 : tensor<?x32xf32>, tensor<?xf32>, tensor<32xf32>)
// CHECK: arith.constant 6.400000e+01 : f32
// CHECK: math.rsqrt
// CHECK-NOT: moe.
func.func @rms_halves(%x: tensor<?x32xf32>, %ss: tensor<?xf32>, %w: tensor<32xf32>) -> (tensor<?xf32>, tensor<?x32xf32>) {
  %s = moe.sum_squares %x : tensor<?x32xf32> -> tensor<?xf32>
  %y = moe.rms_scale %x, %ss, %w {count = 64 : i64, epsilon = 1.0e-5 : f32} : tensor<?x32xf32>, tensor<?xf32>, tensor<32xf32> -> tensor<?x32xf32>
  return %s, %y : tensor<?xf32>, tensor<?x32xf32>
}

// -----

// RoPE: one [T, d_h] table of cos and signed sin from the positions, then
// each element reads the table and its partner element j +- d_h/2.
// CHECK-LABEL: func.func @rope
// CHECK: %[[TAB:.+]]:2 = linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%{{.+}} : tensor<?xi64>) outs(%{{.+}}, %{{.+}} : tensor<?x16xf32>, tensor<?x16xf32>)
// CHECK: math.powf
// CHECK: math.cos
// CHECK: math.sin
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %[[TAB]]#0, %[[TAB]]#1 : tensor<?x4x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>)
// CHECK: tensor.extract
// CHECK-NOT: math.powf
// CHECK-NOT: moe.
func.func @rope(%x: tensor<?x4x16xf32>, %p: tensor<?xi64>) -> tensor<?x4x16xf32> {
  %y = moe.rope %x, %p {theta = 1.0e6 : f32} : tensor<?x4x16xf32>, tensor<?xi64> -> tensor<?x4x16xf32>
  return %y : tensor<?x4x16xf32>
}

// -----

// Top-2 routing: two arg-max rounds (the second excludes the first choice),
// then the softmax over the chosen two.
// CHECK-LABEL: func.func @router
// CHECK: %[[LOGITS:.+]] = linalg.generic {{.*}} outs(%{{.+}} : tensor<?x32xf32>)
// CHECK: %[[FIRST:.+]]:2 = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[LOGITS]] : tensor<?x32xf32>)
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[LOGITS]], %[[FIRST]]#1 : tensor<?x32xf32>, tensor<?xi64>)
// CHECK: arith.cmpi eq
// CHECK: math.exp
// CHECK: -> (tensor<?x2xf32>, tensor<?x2xi64>)
// CHECK-NOT: moe.
func.func @router(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>) -> (tensor<?x2xf32>, tensor<?x2xi64>) {
  %w, %i = moe.router %x, %g {top_k = 2 : i64, renormalize} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
  return %w, %i : tensor<?x2xf32>, tensor<?x2xi64>
}

// -----

// Experts: the (token, choice) rows are sorted by expert (counting sort in
// scalar loops: counts, exclusive prefix sum, slots), then each expert with
// rows multiplies its slice of the stacked weights against its rows gathered
// contiguously: three contractions of the moe.linear form, the last one into
// the expert's rows of the sorted result. The routing weights are applied
// when reading the rows back in token order.
// CHECK-DAG: #[[$ID:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[$X:.+]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[$W:.+]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-DAG: #[[$Y:.+]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @experts
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x64xf32>, %[[WT:[^:]+]]: tensor<?x2xf32>, %[[I:[^:]+]]: tensor<?x2xi64>, %[[W1:[^:]+]]: tensor<32x128x64xf32>, %[[W2:[^:]+]]: tensor<32x64x128xf32>, %[[W3:[^:]+]]: tensor<32x128x64xf32>)
// CHECK: %[[N:.+]] = arith.muli %{{.+}}, %{{.+}} : index
// Counts: 32 experts and a group for ids out of range.
// CHECK: %[[C0:.+]] = linalg.fill ins(%{{.+}} : index) outs(%{{.+}} : tensor<33xindex>)
// CHECK: %[[COUNTS:.+]] = scf.for %[[R:.+]] = %{{.+}} to %[[N]] step %{{.+}} iter_args(%[[CA:.+]] = %[[C0]]) -> (tensor<33xindex>)
// CHECK: %[[ID:.+]] = tensor.extract %[[I]][%{{.+}}, %{{.+}}] : tensor<?x2xi64>
// CHECK: %[[OK:.+]] = arith.cmpi ult, %[[ID]], %{{.+}} : i64
// CHECK: arith.select %[[OK]], %[[ID]], %{{.+}} : i64
// CHECK: tensor.insert %{{.+}} into %[[CA]][%{{.+}}] : tensor<33xindex>
// CHECK: %[[STARTS:.+]]:2 = scf.for {{.+}} -> (tensor<33xindex>, index)
// CHECK: %[[SORT:.+]]:3 = scf.for %{{.+}} = %{{.+}} to %[[N]] step %{{.+}} iter_args(%{{.+}} = %[[STARTS]]#0, %{{.+}}, %{{.+}}) -> (tensor<33xindex>, tensor<?xindex>, tensor<?xindex>)
// The experts, on zero-initialised sorted rows.
// CHECK: %[[S0:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<?x64xf32>)
// CHECK: %[[SORTED:.+]] = scf.for %[[E:.+]] = %{{.+}} to %{{.+}} step %{{.+}} iter_args(%[[SA:.+]] = %[[S0]]) -> (tensor<?x64xf32>)
// CHECK: %[[CNT:.+]] = tensor.extract %[[COUNTS]][%[[E]]] : tensor<33xindex>
// CHECK: %[[END:.+]] = tensor.extract %[[SORT]]#0[%[[E]]] : tensor<33xindex>
// CHECK: %[[OFF:.+]] = arith.subi %[[END]], %[[CNT]] : index
// CHECK: %[[ANY:.+]] = arith.cmpi ne, %[[CNT]], %{{.+}} : index
// CHECK: scf.if %[[ANY]] -> (tensor<?x64xf32>)
// CHECK: %[[RE:.+]] = tensor.empty(%[[CNT]]) : tensor<?x64xf32>
// CHECK: %[[ROWS:.+]] = linalg.generic {indexing_maps = [#[[$ID]]], iterator_types = ["parallel", "parallel"]} outs(%[[RE]] : tensor<?x64xf32>)
// CHECK: tensor.extract %[[SORT]]#2[%{{.+}}] : tensor<?xindex>
// CHECK: arith.divui %{{.+}}, %{{.+}} : index
// CHECK: tensor.extract %[[X]][%{{.+}}, %{{.+}}] : tensor<?x64xf32>
// CHECK: %[[W1E:.+]] = tensor.extract_slice %[[W1]][%[[E]], 0, 0] [1, 128, 64] [1, 1, 1] : tensor<32x128x64xf32> to tensor<128x64xf32>
// CHECK: %[[H1I:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<?x128xf32>)
// CHECK: %[[H1:.+]] = linalg.generic {indexing_maps = [#[[$X]], #[[$W]], #[[$Y]]], iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[ROWS]], %[[W1E]] : tensor<?x64xf32>, tensor<128x64xf32>) outs(%[[H1I]] : tensor<?x128xf32>)
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: %[[H3A:.+]] = bufferization.alloc_tensor(%[[CNT]]) : tensor<?x128xf32>
// CHECK: %[[W3E:.+]] = tensor.extract_slice %[[W3]][%[[E]], 0, 0] [1, 128, 64] [1, 1, 1] : tensor<32x128x64xf32> to tensor<128x64xf32>
// CHECK: %[[H3I:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%[[H3A]] : tensor<?x128xf32>)
// CHECK: %[[H3:.+]] = linalg.generic {indexing_maps = [#[[$X]], #[[$W]], #[[$Y]]], iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[ROWS]], %[[W3E]] : tensor<?x64xf32>, tensor<128x64xf32>) outs(%[[H3I]] : tensor<?x128xf32>)
// CHECK: %[[ACT:.+]] = linalg.generic {indexing_maps = [#[[$ID]], #[[$ID]]], iterator_types = ["parallel", "parallel"]} ins(%[[H3]] : tensor<?x128xf32>) outs(%[[H1]] : tensor<?x128xf32>)
// CHECK: math.exp
// CHECK: %[[DST:.+]] = tensor.extract_slice %[[SA]][%[[OFF]], 0] [%[[CNT]], 64] [1, 1] : tensor<?x64xf32> to tensor<?x64xf32>
// CHECK: %[[W2E:.+]] = tensor.extract_slice %[[W2]][%[[E]], 0, 0] [1, 64, 128] [1, 1, 1] : tensor<32x64x128xf32> to tensor<64x128xf32>
// CHECK: %[[YI:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%[[DST]] : tensor<?x64xf32>)
// CHECK: %[[YE:.+]] = linalg.generic {indexing_maps = [#[[$X]], #[[$W]], #[[$Y]]], iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[ACT]], %[[W2E]] : tensor<?x128xf32>, tensor<64x128xf32>) outs(%[[YI]] : tensor<?x64xf32>)
// CHECK: %[[INS:.+]] = tensor.insert_slice %[[YE]] into %[[SA]][%[[OFF]], 0] [%[[CNT]], 64] [1, 1]
// CHECK: scf.yield %[[INS]]
// CHECK: } else {
// CHECK: scf.yield %[[SA]]
// Back in token order: sum over the two choices of weight * expert output.
// CHECK: %[[OUT:.+]] = linalg.generic {indexing_maps = [#[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK: %[[SL0:.+]] = tensor.extract %[[SORT]]#1[%{{.+}}] : tensor<?xindex>
// CHECK: %[[V0:.+]] = tensor.extract %[[SORTED]][%[[SL0]], %{{.+}}] : tensor<?x64xf32>
// CHECK: %[[P0:.+]] = tensor.extract %[[WT]][%{{.+}}, %{{.+}}] : tensor<?x2xf32>
// CHECK: arith.mulf %[[P0]], %[[V0]] : f32
// CHECK: %[[SL1:.+]] = tensor.extract %[[SORT]]#1[%{{.+}}] : tensor<?xindex>
// CHECK: %[[V1:.+]] = tensor.extract %[[SORTED]][%[[SL1]], %{{.+}}] : tensor<?x64xf32>
// CHECK: %[[P1:.+]] = tensor.extract %[[WT]][%{{.+}}, %{{.+}}] : tensor<?x2xf32>
// CHECK: arith.mulf %[[P1]], %[[V1]] : f32
// CHECK: return %[[OUT]]
// CHECK-NOT: moe.
func.func @experts(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<32x128x64xf32>, %w2: tensor<32x64x128xf32>, %w3: tensor<32x128x64xf32>) -> tensor<?x64xf32> {
  %y = moe.experts %x, %w, %i, %w1, %w2, %w3 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<32x128x64xf32>, tensor<32x64x128xf32>, tensor<32x128x64xf32> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// The LM head finds the row whose global position is %last (-1 when none),
// reads only that row, and gives zeros when no row holds %last.
// CHECK-LABEL: func.func @lm_head
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x64xf32>, %[[W:[^:]+]]: tensor<512x64xf32>, %[[P:[^:]+]]: tensor<?xi64>, %[[LASTIDX:[^:]+]]: index)
// CHECK: %[[LAST:.+]] = arith.index_cast %[[LASTIDX]] : index to i64
// CHECK: %[[NONE:.+]] = arith.constant -1 : i64
// CHECK: %[[INIT:.+]] = linalg.fill ins(%[[NONE]] : i64) outs(%{{.+}} : tensor<i64>)
// CHECK: %[[ROWT:.+]] = linalg.generic {{.*}} iterator_types = ["reduction"]} ins(%[[P]] : tensor<?xi64>) outs(%[[INIT]] : tensor<i64>)
// CHECK: ^bb0(%[[PI:.+]]: i64, %[[ACC:.+]]: i64):
// CHECK: %[[HIT:.+]] = arith.cmpi eq, %[[PI]], %[[LAST]] : i64
// CHECK: %[[I:.+]] = linalg.index 0
// CHECK: %[[II:.+]] = arith.index_cast %[[I]] : index to i64
// CHECK: arith.select %[[HIT]], %[[II]], %[[ACC]] : i64
// CHECK: %[[ROW:.+]] = tensor.extract %[[ROWT]][] : tensor<i64>
// CHECK: %[[FOUND:.+]] = arith.cmpi sge, %[[ROW]], %{{.+}} : i64
// CHECK: %[[SAFE:.+]] = arith.select %[[FOUND]], %[[ROW]], %{{.+}} : i64
// CHECK: %[[R:.+]] = arith.index_cast %[[SAFE]] : i64 to index
// CHECK: %[[XROW:.+]] = linalg.generic {{.*}} iterator_types = ["parallel"]} outs(%{{.+}} : tensor<64xf32>)
// CHECK: %[[XV:.+]] = tensor.extract %[[X]][%[[R]], %{{.+}}] : tensor<?x64xf32>
// CHECK: arith.select %[[FOUND]], %[[XV]], %{{.+}} : f32
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[XROW]], %[[W]] : tensor<64xf32>, tensor<512x64xf32>)
// CHECK: arith.mulf
// CHECK-NEXT: arith.addf
// CHECK: -> tensor<512xf32>
// CHECK-NOT: moe.
func.func @lm_head(%x: tensor<?x64xf32>, %w: tensor<512x64xf32>, %p: tensor<?xi64>, %last: index) -> tensor<512xf32> {
  %y = moe.lm_head %x, %w, %p, %last : tensor<?x64xf32>, tensor<512x64xf32>, tensor<?xi64> -> tensor<512xf32>
  return %y : tensor<512xf32>
}

// -----

// Embedding is a gather by token id; positions are 0..T-1.
// CHECK-LABEL: func.func @embed_positions
// CHECK: linalg.index 0
// CHECK: arith.index_cast %{{.+}} : index to i64
// CHECK: arith.index_cast %{{.+}} : i64 to index
// CHECK: tensor.extract %{{.+}}[%{{.+}}, %{{.+}}] : tensor<512x64xf32>
// CHECK-NOT: moe.
func.func @embed_positions(%t: tensor<?xi64>, %e: tensor<512x64xf32>) -> (tensor<?xi64>, tensor<?x64xf32>) {
  %p = moe.positions %t : tensor<?xi64> -> tensor<?xi64>
  %h = moe.embed %e, %t : tensor<512x64xf32>, tensor<?xi64> -> tensor<?x64xf32>
  return %p, %h : tensor<?xi64>, tensor<?x64xf32>
}

// -----

// Weights and K/V and logits outputs are left for convert-moe-to-runtime.
// CHECK-LABEL: func.func @leaves_io
// CHECK: moe.param
// CHECK: moe.kv_cache
// CHECK: moe.logits
func.func @leaves_io(%k: tensor<?x2x16xf32>, %p: tensor<?xi64>, %l: tensor<64xf32>) -> tensor<64xf32> {
  %w = moe.param "model.norm.weight" : tensor<64xf32>
  moe.kv_cache %k, %k, %p {layer = 0 : i64} : tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<?xi64>
  moe.logits %l : tensor<64xf32>
  return %w : tensor<64xf32>
}

// -----

// Attention over one key block: the same loops as moe.attention, plus the
// log-sum-exp [Tq, n_h] = running max + log(running sum), -inf for a fully
// masked row, written tile by tile into the second shared output.
// CHECK-LABEL: func.func @attention_partial
// CHECK: %[[R:.+]]:2 = scf.forall (%[[H:.+]], %[[I0:.+]]) = (0, 0) to (8, %{{.+}}) step (1, 64) shared_outs(%[[O:.+]] = %{{.+}}, %[[LSE:.+]] = %{{.+}}) -> (tensor<?x8x16xf32>, tensor<?x8xf32>)
// CHECK: %[[LOOP:.+]]:3 = scf.for
// CHECK: scf.if
// CHECK: %[[OT:.+]] = linalg.generic {{.*}} ins(%[[LOOP]]#2, %[[LOOP]]#1 : tensor<?x16xf32>, tensor<?xf32>)
// CHECK: %[[LSLOT:.+]] = tensor.extract_slice %[[LSE]][%[[I0]], %[[H]]] [%[[BQ:.+]], 1] [1, 1] : tensor<?x8xf32> to tensor<?xf32>
// CHECK: %[[LT:.+]] = linalg.generic {{.*}} ins(%[[LOOP]]#0, %[[LOOP]]#1 : tensor<?xf32>, tensor<?xf32>) outs(%[[LSLOT]] : tensor<?xf32>)
// CHECK: ^bb0(%[[M:.+]]: f32, %[[S:.+]]: f32, %{{.+}}: f32):
// CHECK: %[[NOKEY:.+]] = arith.cmpf oeq, %[[M]], %[[NEGINF:.+]] : f32
// CHECK: %[[LOG:.+]] = math.log %[[S]] : f32
// CHECK: %[[V:.+]] = arith.addf %[[M]], %[[LOG]] : f32
// CHECK: arith.select %[[NOKEY]], %{{.+}}, %[[V]] : f32
// CHECK: scf.forall.in_parallel
// CHECK-NEXT: tensor.parallel_insert_slice %[[OT]] into %[[O]]
// CHECK-NEXT: tensor.parallel_insert_slice %[[LT]] into %[[LSE]][%[[I0]], %[[H]]] [%[[BQ]], 1] [1, 1] : tensor<?xf32> into tensor<?x8xf32>
// CHECK: return %[[R]]#0, %[[R]]#1
// CHECK-NOT: moe.
func.func @attention_partial(%q: tensor<?x8x16xf32>, %k: tensor<?x2x16xf32>, %v: tensor<?x2x16xf32>, %qp: tensor<?xi64>, %kp: tensor<?xi64>) -> (tensor<?x8x16xf32>, tensor<?x8xf32>) {
  %o, %l = moe.attention_partial %q, %k, %v, %qp, %kp {scale = 0.25 : f32} : tensor<?x8x16xf32>, tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x16xf32>, tensor<?x8xf32>
  return %o, %l : tensor<?x8x16xf32>, tensor<?x8xf32>
}

// -----

// Merge by log-sum-exp: with m = max(lse1, lse2) and w_i = exp(lse_i - m)
// (0 when both are -inf), O = (w1 O1 + w2 O2) / (w1 + w2) and
// lse = m + log(w1 + w2).
// CHECK-LABEL: func.func @attention_merge
// CHECK-SAME: (%[[O1:[^:]+]]: tensor<?x8x16xf32>, %[[L1:[^:]+]]: tensor<?x8xf32>, %[[O2:[^:]+]]: tensor<?x8x16xf32>, %[[L2:[^:]+]]: tensor<?x8xf32>)
// CHECK: %[[OUT:.+]] = linalg.generic {{.*}} ins(%[[O1]], %[[L1]], %[[O2]], %[[L2]] : tensor<?x8x16xf32>, tensor<?x8xf32>, tensor<?x8x16xf32>, tensor<?x8xf32>)
// CHECK: ^bb0(%[[A1:.+]]: f32, %[[B1:.+]]: f32, %[[A2:.+]]: f32, %[[B2:.+]]: f32, %{{.+}}: f32):
// CHECK: %[[M:.+]] = arith.maximumf %[[B1]], %[[B2]] : f32
// CHECK: %[[NONE:.+]] = arith.cmpf oeq, %[[M]], %{{.+}} : f32
// CHECK: %[[D1:.+]] = arith.subf %[[B1]], %[[M]] : f32
// CHECK: %[[E1:.+]] = math.exp %[[D1]] : f32
// CHECK: %[[W1:.+]] = arith.select %[[NONE]], %{{.+}}, %[[E1]] : f32
// CHECK: %[[D2:.+]] = arith.subf %[[B2]], %[[M]] : f32
// CHECK: %[[E2:.+]] = math.exp %[[D2]] : f32
// CHECK: %[[W2:.+]] = arith.select %[[NONE]], %{{.+}}, %[[E2]] : f32
// CHECK-DAG: %[[P2:.+]] = arith.mulf %[[W2]], %[[A2]] : f32
// CHECK-DAG: %[[P1:.+]] = arith.mulf %[[W1]], %[[A1]] : f32
// CHECK: %[[NUM:.+]] = arith.addf %[[P1]], %[[P2]] : f32
// CHECK: %[[DEN:.+]] = arith.addf %[[W1]], %[[W2]] : f32
// CHECK: %[[Q:.+]] = arith.divf %[[NUM]], %[[DEN]] : f32
// CHECK: arith.select %[[NONE]], %{{.+}}, %[[Q]] : f32
// CHECK: %[[LSE:.+]] = linalg.generic {{.*}} ins(%[[L1]], %[[L2]] : tensor<?x8xf32>, tensor<?x8xf32>)
// CHECK: arith.maximumf
// CHECK: math.log
// CHECK: return %[[OUT]], %[[LSE]]
// CHECK-NOT: moe.
func.func @attention_merge(%o1: tensor<?x8x16xf32>, %l1: tensor<?x8xf32>, %o2: tensor<?x8x16xf32>, %l2: tensor<?x8xf32>) -> (tensor<?x8x16xf32>, tensor<?x8xf32>) {
  %o, %l = moe.attention_merge %o1, %l1, %o2, %l2 : tensor<?x8x16xf32>, tensor<?x8xf32> -> tensor<?x8x16xf32>, tensor<?x8xf32>
  return %o, %l : tensor<?x8x16xf32>, tensor<?x8xf32>
}

// -----

// An expert per row: the rows are grouped by expert as for moe.experts
// (4 experts and the out-of-range group), each expert's three contractions
// run on its rows, and row r reads its result back from its slot.
// CHECK-LABEL: func.func @expert_ffn
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x64xf32>, %[[E:[^:]+]]: tensor<?xi64>, %[[W1:[^:]+]]: tensor<4x32x64xf32>, %[[W2:[^:]+]]: tensor<4x64x32xf32>, %[[W3:[^:]+]]: tensor<4x32x64xf32>)
// CHECK: %[[N:.+]] = tensor.dim %[[X]], %{{.+}} : tensor<?x64xf32>
// CHECK: scf.for %{{.+}} = %{{.+}} to %[[N]] {{.+}} -> (tensor<5xindex>)
// CHECK: tensor.extract %[[E]][%{{.+}}] : tensor<?xi64>
// CHECK: %[[SORT:.+]]:3 = scf.for {{.+}} -> (tensor<5xindex>, tensor<?xindex>, tensor<?xindex>)
// CHECK: %[[SORTED:.+]] = scf.for
// CHECK: scf.if
// CHECK: linalg.generic {{.+}} ins(%{{.+}}, %{{.+}} : tensor<?x64xf32>, tensor<32x64xf32>) outs(%{{.+}} : tensor<?x32xf32>)
// CHECK: linalg.generic {{.+}} ins(%{{.+}}, %{{.+}} : tensor<?x64xf32>, tensor<32x64xf32>) outs(%{{.+}} : tensor<?x32xf32>)
// CHECK: math.exp
// CHECK: linalg.generic {{.+}} ins(%{{.+}}, %{{.+}} : tensor<?x32xf32>, tensor<64x32xf32>) outs(%{{.+}} : tensor<?x64xf32>)
// CHECK: tensor.insert_slice
// CHECK: %[[Y:.+]] = linalg.generic
// CHECK: %[[SL:.+]] = tensor.extract %[[SORT]]#1[%{{.+}}] : tensor<?xindex>
// CHECK: tensor.extract %[[SORTED]][%[[SL]], %{{.+}}] : tensor<?x64xf32>
// CHECK: return %[[Y]]
// CHECK-NOT: moe.
func.func @expert_ffn(%x: tensor<?x64xf32>, %e: tensor<?xi64>, %w1: tensor<4x32x64xf32>, %w2: tensor<4x64x32xf32>, %w3: tensor<4x32x64xf32>) -> tensor<?x64xf32> {
  %y = moe.expert_ffn %x, %e, %w1, %w2, %w3 : tensor<?x64xf32>, tensor<?xi64>, tensor<4x32x64xf32>, tensor<4x64x32xf32>, tensor<4x32x64xf32> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// moe.layer is inlined: its block arguments become the operands, its yielded
// values the results, and the ops inside are lowered in place.
// CHECK-LABEL: func.func @layer
// CHECK-SAME: (%[[H:[^:]+]]: tensor<?x64xf32>, %[[P:[^:]+]]: tensor<?xi64>, %[[K:[^:]+]]: tensor<?x8x8xf32>, %[[W:[^:]+]]: tensor<64x64xf32>)
// CHECK-NOT: moe.layer
// CHECK: %[[Y:.+]] = linalg.generic {{.*}} ins(%[[H]], %[[W]] : tensor<?x64xf32>, tensor<64x64xf32>)
// CHECK: moe.kv_cache %[[K]], %[[K]], %[[P]] {layer = 2 : i64}
// CHECK: %[[R:.+]] = arith.addf %[[H]], %[[Y]] : tensor<?x64xf32>
// CHECK: return %[[R]] : tensor<?x64xf32>
// CHECK-NOT: moe.yield
func.func @layer(%h: tensor<?x64xf32>, %p: tensor<?xi64>, %k: tensor<?x8x8xf32>, %w: tensor<64x64xf32>) -> tensor<?x64xf32> {
  %0 = moe.layer 2 (%h, %p, %k, %w) : (tensor<?x64xf32>, tensor<?xi64>, tensor<?x8x8xf32>, tensor<64x64xf32>) -> tensor<?x64xf32> {
  ^bb0(%a: tensor<?x64xf32>, %ap: tensor<?xi64>, %ak: tensor<?x8x8xf32>, %aw: tensor<64x64xf32>):
    %y = moe.linear %a, %aw : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
    moe.kv_cache %ak, %ak, %ap {layer = 2 : i64} : tensor<?x8x8xf32>, tensor<?x8x8xf32>, tensor<?xi64>
    %r = arith.addf %a, %y : tensor<?x64xf32>
    moe.yield %r : tensor<?x64xf32>
  }
  return %0 : tensor<?x64xf32>
}

// -----

// moe.head_linear: one contraction per head, the head a parallel dim. Loop
// dims (t, h, o, i): x W^T reads the weight at (h, o, i); transposed, at
// (h, i, o).
// CHECK-DAG: #[[$X:.+]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-DAG: #[[$WT:.+]] = affine_map<(d0, d1, d2, d3) -> (d1, d3, d2)>
// CHECK-DAG: #[[$W:.+]] = affine_map<(d0, d1, d2, d3) -> (d1, d2, d3)>
// CHECK-DAG: #[[$Y:.+]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @head_linear
// CHECK:         linalg.generic {indexing_maps = [#[[$X]], #[[$WT]], #[[$Y]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%{{.+}}, %{{.+}} : tensor<?x8x16xf32>, tensor<8x16x32xf32>) outs(%{{.+}} : tensor<?x8x32xf32>)
// CHECK:         linalg.generic {indexing_maps = [#[[$X]], #[[$W]], #[[$Y]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%{{.+}}, %{{.+}} : tensor<?x8x32xf32>, tensor<8x16x32xf32>) outs(%{{.+}} : tensor<?x8x16xf32>)
// CHECK-NOT:     moe.head_linear
func.func @head_linear(%q: tensor<?x8x16xf32>, %w: tensor<8x16x32xf32>, %o: tensor<?x8x32xf32>) -> (tensor<?x8x32xf32>, tensor<?x8x16xf32>) {
  %0 = moe.head_linear %q, %w {transpose_weight} : tensor<?x8x16xf32>, tensor<8x16x32xf32> -> tensor<?x8x32xf32>
  %1 = moe.head_linear %o, %w : tensor<?x8x32xf32>, tensor<8x16x32xf32> -> tensor<?x8x16xf32>
  return %0, %1 : tensor<?x8x32xf32>, tensor<?x8x16xf32>
}
