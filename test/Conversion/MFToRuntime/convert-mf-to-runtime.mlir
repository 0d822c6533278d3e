// RUN: meshfold-opt %s -split-input-file --convert-mf-to-runtime | FileCheck %s
// RUN: meshfold-opt %s -split-input-file --convert-mf-to-runtime | FileCheck %s --check-prefix=GONE

// -convert-mf-to-runtime lowers mf ops to calls into the runtime (mfrt) on
// buffers: inputs are passed as read-only buffers (bufferization.to_buffer,
// cast to an unranked memref), results come back in new buffers
// (memref.alloc) seen as tensors (bufferization.to_tensor restrict writable).
// Every (mesh, axes) group gets an id in order of first use, listed in the
// module's mf.groups. Errors are in convert-mf-to-runtime-invalid.mlir.

// No mf op is left in any case but mf.weight.
// GONE-NOT: {{^ *(%.* = )?mf\.[^w]}}

// mf.coord is the rank's index in the group of its axis; ids follow first
// use and the runtime functions are declared with the C interface.
// CHECK-LABEL: module attributes {mf.groups = ["attention:tp", "experts:ep", "attention:cp"], mf.plan =
// CHECK-DAG:     func.func private @mfrt_cg_group_rank(i64) -> i64 attributes {llvm.emit_c_interface}
// CHECK-LABEL:   func.func @coord(
// CHECK:           %[[TP:.+]] = arith.constant 0 : i64
// CHECK-NEXT:      %[[R0:.+]] = call @mfrt_cg_group_rank(%[[TP]]) : (i64) -> i64
// CHECK-NEXT:      %[[I0:.+]] = arith.index_cast %[[R0]] : i64 to index
// CHECK-NEXT:      %[[EP:.+]] = arith.constant 1 : i64
// CHECK-NEXT:      %[[R1:.+]] = call @mfrt_cg_group_rank(%[[EP]]) : (i64) -> i64
// CHECK-NEXT:      %[[I1:.+]] = arith.index_cast %[[R1]] : i64 to index
// CHECK-NEXT:      %[[CP:.+]] = arith.constant 2 : i64
// CHECK-NEXT:      call @mfrt_cg_group_rank(%[[CP]])
// CHECK-NEXT:      arith.index_cast
// CHECK-NEXT:      %[[TP2:.+]] = arith.constant 0 : i64
// CHECK-NEXT:      call @mfrt_cg_group_rank(%[[TP2]])
// CHECK:           return %[[I0]], %[[I1]],
module attributes {mf.plan = #mf.plan<devices = 8, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 2], experts = [ep = 8 : (tp, cp, dp)]>} {
  func.func @coord() -> (index, index, index, index) {
    %0 = mf.coord "attention" "tp" : index
    %1 = mf.coord "experts" "ep" : index
    %2 = mf.coord "attention" "cp" : index
    %3 = mf.coord "attention" "tp" : index
    return %0, %1, %2, %3 : index, index, index, index
  }
}

// -----

// Row collectives: one call (group id, input, result); the result has the
// input's rows times the group size (all-gather, gather) or divided by it
// (reduce-scatter, here over tp and cp: 4 ranks). A static result needs no
// row count; gather passes its root after the group id.
// CHECK-LABEL: module attributes {mf.groups = ["attention:tp", "attention:tp,cp"]
// CHECK-DAG:     func.func private @mfrt_cg_all_gather_f32(i64, memref<*xf32>, memref<*xf32>) attributes {llvm.emit_c_interface}
// CHECK-DAG:     func.func private @mfrt_cg_reduce_scatter_f32(i64, memref<*xf32>, memref<*xf32>) attributes {llvm.emit_c_interface}
// CHECK-DAG:     func.func private @mfrt_cg_gather_f32(i64, i64, memref<*xf32>, memref<*xf32>) attributes {llvm.emit_c_interface}
// CHECK-LABEL:   func.func @rows(
// CHECK-SAME:        %[[X:[^:]+]]: tensor<?x8xf32>, %[[Y:[^:]+]]: tensor<4x8xf32>)
// CHECK:           %[[T:.+]] = tensor.dim %[[X]], %{{.+}} : tensor<?x8xf32>
// CHECK-NEXT:      %[[C2:.+]] = arith.constant 2 : index
// CHECK-NEXT:      %[[N:.+]] = arith.muli %[[T]], %[[C2]] : index
// CHECK-NEXT:      %[[AG:.+]] = memref.alloc(%[[N]]) : memref<?x8xf32>
// CHECK-NEXT:      %[[AGU:.+]] = memref.cast %[[AG]] : memref<?x8xf32> to memref<*xf32>
// CHECK-NEXT:      %[[G0:.+]] = arith.constant 0 : i64
// CHECK-NEXT:      %[[XB:.+]] = bufferization.to_buffer %[[X]] read_only : tensor<?x8xf32> to memref<?x8xf32, strided<[?, ?], offset: ?>>
// CHECK-NEXT:      %[[XU:.+]] = memref.cast %[[XB]] : memref<?x8xf32, strided<[?, ?], offset: ?>> to memref<*xf32>
// CHECK-NEXT:      call @mfrt_cg_all_gather_f32(%[[G0]], %[[XU]], %[[AGU]]) : (i64, memref<*xf32>, memref<*xf32>) -> ()
// CHECK-NEXT:      %[[R0:.+]] = bufferization.to_tensor %[[AG]] restrict writable : memref<?x8xf32> to tensor<?x8xf32>
// CHECK:           %[[T1:.+]] = tensor.dim %[[X]], %{{.+}} : tensor<?x8xf32>
// CHECK-NEXT:      %[[C4:.+]] = arith.constant 4 : index
// CHECK-NEXT:      %[[M:.+]] = arith.divui %[[T1]], %[[C4]] : index
// CHECK-NEXT:      %[[RS:.+]] = memref.alloc(%[[M]]) : memref<?x8xf32>
// CHECK-NEXT:      %[[RSU:.+]] = memref.cast %[[RS]]
// CHECK-NEXT:      %[[G1:.+]] = arith.constant 1 : i64
// CHECK:           call @mfrt_cg_reduce_scatter_f32(%[[G1]], %{{.+}}, %[[RSU]])
// CHECK-NEXT:      %[[R1:.+]] = bufferization.to_tensor %[[RS]] restrict writable
// CHECK-NEXT:      %[[GA:.+]] = memref.alloc() : memref<8x8xf32>
// CHECK-NEXT:      %[[GAU:.+]] = memref.cast %[[GA]] : memref<8x8xf32> to memref<*xf32>
// CHECK-NEXT:      %[[G2:.+]] = arith.constant 0 : i64
// CHECK-NEXT:      %[[ROOT:.+]] = arith.constant 1 : i64
// CHECK-NEXT:      %[[YB:.+]] = bufferization.to_buffer %[[Y]] read_only : tensor<4x8xf32> to memref<4x8xf32, strided<[?, ?], offset: ?>>
// CHECK-NEXT:      %[[YU:.+]] = memref.cast %[[YB]]
// CHECK-NEXT:      call @mfrt_cg_gather_f32(%[[G2]], %[[ROOT]], %[[YU]], %[[GAU]]) : (i64, i64, memref<*xf32>, memref<*xf32>) -> ()
// CHECK-NEXT:      %[[R2:.+]] = bufferization.to_tensor %[[GA]] restrict writable : memref<8x8xf32> to tensor<8x8xf32>
// CHECK-NEXT:      return %[[R0]], %[[R1]], %[[R2]]
module attributes {mf.plan = #mf.plan<devices = 8, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 2], experts = [ep = 8 : (tp, cp, dp)]>} {
  func.func @rows(%x: tensor<?x8xf32>, %y: tensor<4x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>, tensor<8x8xf32>) {
    %0 = mf.all_gather %x on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
    %1 = mf.reduce_scatter %x on "attention" ["tp", "cp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
    %2 = mf.gather %y on "attention" ["tp"] dim 0 root 1 : tensor<4x8xf32> -> tensor<8x8xf32>
    return %0, %1, %2 : tensor<?x8xf32>, tensor<?x8xf32>, tensor<8x8xf32>
  }
}

// -----

// An all-reduce is one call on a flat buffer. Its tensors are collapsed to
// 1-D, concatenated when there are several, reduced together and cut back
// into their shapes.
// CHECK-DAG:     func.func private @mfrt_cg_all_reduce_f32(i64, memref<*xf32>, memref<*xf32>) attributes {llvm.emit_c_interface}
// CHECK-LABEL:   func.func @all_reduce(
// CHECK-SAME:        %[[X:[^:]+]]: tensor<?x8xf32>, %[[F:[^:]+]]: tensor<1xf32>)
// CHECK-NEXT:      %[[XF:.+]] = tensor.collapse_shape %[[X]] {{\[\[}}0, 1]] : tensor<?x8xf32> into tensor<?xf32>
// CHECK-NEXT:      %[[C0:.+]] = arith.constant 0 : index
// CHECK-NEXT:      %[[XN:.+]] = tensor.dim %[[XF]], %[[C0]] : tensor<?xf32>
// CHECK:           %[[FN:.+]] = tensor.dim %[[F]], %{{.+}} : tensor<1xf32>
// CHECK-NEXT:      %[[CAT:.+]] = tensor.concat dim(0) %[[XF]], %[[F]] : (tensor<?xf32>, tensor<1xf32>) -> tensor<?xf32>
// CHECK:           %[[N:.+]] = tensor.dim %[[CAT]], %{{.+}} : tensor<?xf32>
// CHECK-NEXT:      %[[BUF:.+]] = memref.alloc(%[[N]]) : memref<?xf32>
// CHECK-NEXT:      %[[BUFU:.+]] = memref.cast %[[BUF]]
// CHECK-NEXT:      %[[G:.+]] = arith.constant 0 : i64
// CHECK-NEXT:      %[[CATB:.+]] = bufferization.to_buffer %[[CAT]] read_only
// CHECK-NEXT:      %[[CATU:.+]] = memref.cast %[[CATB]]
// CHECK-NEXT:      call @mfrt_cg_all_reduce_f32(%[[G]], %[[CATU]], %[[BUFU]]) : (i64, memref<*xf32>, memref<*xf32>) -> ()
// CHECK-NEXT:      %[[SUM:.+]] = bufferization.to_tensor %[[BUF]] restrict writable : memref<?xf32> to tensor<?xf32>
// CHECK-NEXT:      %[[OFF0:.+]] = arith.constant 0 : index
// CHECK-NEXT:      %[[S0:.+]] = tensor.extract_slice %[[SUM]][%[[OFF0]]] [%[[XN]]] [1] : tensor<?xf32> to tensor<?xf32>
// CHECK-NEXT:      %[[OFF1:.+]] = arith.addi %[[OFF0]], %[[XN]] : index
// CHECK:           %[[T:.+]] = tensor.dim %[[X]], %{{.+}} : tensor<?x8xf32>
// CHECK-NEXT:      %[[XS:.+]] = tensor.expand_shape %[[S0]] {{\[\[}}0, 1]] output_shape [%[[T]], 8] : tensor<?xf32> into tensor<?x8xf32>
// CHECK-NEXT:      %[[FS:.+]] = tensor.extract_slice %[[SUM]][%[[OFF1]]] [1] [1] : tensor<?xf32> to tensor<1xf32>
// The single all-reduce of a 1-D tensor needs no reshaping.
// CHECK:           %[[VB:.+]] = memref.alloc() : memref<1xf32>
// CHECK:           call @mfrt_cg_all_reduce_f32(%{{.+}}, %{{.+}}, %{{.+}})
// CHECK-NEXT:      %[[V:.+]] = bufferization.to_tensor %[[VB]] restrict writable : memref<1xf32> to tensor<1xf32>
// CHECK:           return %[[XS]], %[[FS]], %[[V]]
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @all_reduce(%x: tensor<?x8xf32>, %f: tensor<1xf32>) -> (tensor<?x8xf32>, tensor<1xf32>, tensor<1xf32>) {
    %0:2 = mf.all_reduce %x, %f on "attention" ["tp"] : tensor<?x8xf32>, tensor<1xf32> -> tensor<?x8xf32>, tensor<1xf32>
    %1 = mf.all_reduce %f on "attention" ["tp"] : tensor<1xf32> -> tensor<1xf32>
    return %0#0, %0#1, %1 : tensor<?x8xf32>, tensor<1xf32>, tensor<1xf32>
  }
}

// -----

// A ring step is one call whose name lists the element types of its tensors:
// ring attention's fused K, V and positions, and single f32 and i64 steps.
// Each result gets a buffer of its input's shape.
// CHECK-DAG:     func.func private @mfrt_cg_ring_step_f32_f32_i64(i64, memref<*xf32>, memref<*xf32>, memref<*xi64>, memref<*xf32>, memref<*xf32>, memref<*xi64>) attributes {llvm.emit_c_interface}
// CHECK-DAG:     func.func private @mfrt_cg_ring_step_f32(i64, memref<*xf32>, memref<*xf32>) attributes {llvm.emit_c_interface}
// CHECK-DAG:     func.func private @mfrt_cg_ring_step_i64(i64, memref<*xi64>, memref<*xi64>) attributes {llvm.emit_c_interface}
// CHECK-LABEL:   func.func @ring(
// CHECK-SAME:        %[[K:[^:]+]]: tensor<?x1x2xf32>, %[[V:[^:]+]]: tensor<?x1x2xf32>, %[[P:[^:]+]]: tensor<?xi64>,
// CHECK-NEXT:      %[[KB:.+]] = bufferization.to_buffer %[[K]] read_only : tensor<?x1x2xf32> to memref<?x1x2xf32, strided<[?, ?, ?], offset: ?>>
// CHECK-NEXT:      %[[KU:.+]] = memref.cast %[[KB]]
// CHECK-NEXT:      %[[VB:.+]] = bufferization.to_buffer %[[V]] read_only
// CHECK-NEXT:      %[[VU:.+]] = memref.cast %[[VB]]
// CHECK-NEXT:      %[[PB:.+]] = bufferization.to_buffer %[[P]] read_only : tensor<?xi64> to memref<?xi64, strided<[?], offset: ?>>
// CHECK-NEXT:      %[[PU:.+]] = memref.cast %[[PB]] : memref<?xi64, strided<[?], offset: ?>> to memref<*xi64>
// CHECK:           %[[K1:.+]] = memref.alloc(%{{.+}}) : memref<?x1x2xf32>
// CHECK-NEXT:      %[[K1U:.+]] = memref.cast %[[K1]]
// CHECK:           %[[V1:.+]] = memref.alloc(%{{.+}}) : memref<?x1x2xf32>
// CHECK-NEXT:      %[[V1U:.+]] = memref.cast %[[V1]]
// CHECK:           %[[P1:.+]] = memref.alloc(%{{.+}}) : memref<?xi64>
// CHECK-NEXT:      %[[P1U:.+]] = memref.cast %[[P1]] : memref<?xi64> to memref<*xi64>
// CHECK-NEXT:      %[[G:.+]] = arith.constant 0 : i64
// CHECK-NEXT:      call @mfrt_cg_ring_step_f32_f32_i64(%[[G]], %[[KU]], %[[VU]], %[[PU]], %[[K1U]], %[[V1U]], %[[P1U]])
// CHECK-NEXT:      bufferization.to_tensor %[[K1]] restrict writable
// CHECK-NEXT:      bufferization.to_tensor %[[V1]] restrict writable
// CHECK-NEXT:      bufferization.to_tensor %[[P1]] restrict writable
// CHECK:           call @mfrt_cg_ring_step_f32(%{{.+}}, %{{.+}}, %{{.+}}) : (i64, memref<*xf32>, memref<*xf32>) -> ()
// CHECK:           call @mfrt_cg_ring_step_i64(%{{.+}}, %{{.+}}, %{{.+}}) : (i64, memref<*xi64>, memref<*xi64>) -> ()
// A decode step's queries, partial output, log-sum-exp and positions
// (pass-Q attention, marked queries) travel together too, counted apart.
// CHECK:           call @mfrt_cg_q_ring_step_f32_f32_f32_i64(%{{.+}}) : (i64, memref<*xf32>, memref<*xf32>, memref<*xf32>, memref<*xi64>, memref<*xf32>, memref<*xf32>, memref<*xf32>, memref<*xi64>) -> ()
// Its last step (the merged outputs and positions), and one tensor that is
// both key and value (MLA's latent) with its positions, have the same
// types: the marker tells them apart.
// CHECK:           call @mfrt_cg_q_ring_step_f32_i64(%{{.+}}) : (i64, memref<*xf32>, memref<*xi64>, memref<*xf32>, memref<*xi64>) -> ()
// CHECK:           call @mfrt_cg_ring_step_f32_i64(%{{.+}}) : (i64, memref<*xf32>, memref<*xi64>, memref<*xf32>, memref<*xi64>) -> ()
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [cp = 2], experts = [ep = 2 : (cp)]>} {
  func.func @ring(%k: tensor<?x1x2xf32>, %v: tensor<?x1x2xf32>, %p: tensor<?xi64>, %l: tensor<?x1xf32>) -> (tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>, tensor<?x1x2xf32>, tensor<?xi64>, tensor<?x1xf32>, tensor<?x1x2xf32>, tensor<?x1x2xf32>) {
    %0:3 = mf.ring_step %k, %v, %p on "attention" ["cp"] : tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64> -> tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>
    %1 = mf.ring_step %k on "attention" ["cp"] : tensor<?x1x2xf32> -> tensor<?x1x2xf32>
    %2 = mf.ring_step %p on "attention" ["cp"] : tensor<?xi64> -> tensor<?xi64>
    %3:4 = mf.ring_step %k, %v, %l, %p on "attention" ["cp"] {queries} : tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?x1xf32>, tensor<?xi64> -> tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?x1xf32>, tensor<?xi64>
    %4:2 = mf.ring_step %k, %p on "attention" ["cp"] {queries} : tensor<?x1x2xf32>, tensor<?xi64> -> tensor<?x1x2xf32>, tensor<?xi64>
    %5:2 = mf.ring_step %k, %p on "attention" ["cp"] : tensor<?x1x2xf32>, tensor<?xi64> -> tensor<?x1x2xf32>, tensor<?xi64>
    return %0#0, %0#1, %0#2, %1, %2, %3#2, %4#0, %5#0 : tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>, tensor<?x1x2xf32>, tensor<?xi64>, tensor<?x1xf32>, tensor<?x1x2xf32>, tensor<?x1x2xf32>
  }
}

// -----

// Point to point: send and receive pass the group of their axis and the
// offset along it; the receive's buffer has the given row count.
// CHECK-DAG:     func.func private @mfrt_cg_send_f32(i64, i64, memref<*xf32>) attributes {llvm.emit_c_interface}
// CHECK-DAG:     func.func private @mfrt_cg_recv_f32(i64, i64, memref<*xf32>) attributes {llvm.emit_c_interface}
// CHECK-LABEL:   func.func @p2p(
// CHECK-SAME:        %[[H:[^:]+]]: tensor<?x8xf32>, %[[T:[^:]+]]: index)
// CHECK-NEXT:      %[[G:.+]] = arith.constant 0 : i64
// CHECK-NEXT:      %[[NEXT:.+]] = arith.constant 1 : i64
// CHECK-NEXT:      %[[HB:.+]] = bufferization.to_buffer %[[H]] read_only
// CHECK-NEXT:      %[[HU:.+]] = memref.cast %[[HB]]
// CHECK-NEXT:      call @mfrt_cg_send_f32(%[[G]], %[[NEXT]], %[[HU]]) : (i64, i64, memref<*xf32>) -> ()
// CHECK-NEXT:      %[[B:.+]] = memref.alloc(%[[T]]) : memref<?x8xf32>
// CHECK-NEXT:      %[[BU:.+]] = memref.cast %[[B]]
// CHECK-NEXT:      %[[G2:.+]] = arith.constant 0 : i64
// CHECK-NEXT:      %[[PREV:.+]] = arith.constant -1 : i64
// CHECK-NEXT:      call @mfrt_cg_recv_f32(%[[G2]], %[[PREV]], %[[BU]]) : (i64, i64, memref<*xf32>) -> ()
// CHECK-NEXT:      %[[R:.+]] = bufferization.to_tensor %[[B]] restrict writable : memref<?x8xf32> to tensor<?x8xf32>
// CHECK-NEXT:      return %[[R]]
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [dp = 1, pp = 2], experts = [ep = 1 : (dp), pp = 2 : (pp)]>} {
  func.func @p2p(%h: tensor<?x8xf32>, %t: index) -> tensor<?x8xf32> {
    mf.send %h to "attention" "pp" 1 : tensor<?x8xf32>
    %0 = mf.recv from "attention" "pp" -1 [%t] : tensor<?x8xf32>
    return %0 : tensor<?x8xf32>
  }
}

// -----

// Dispatch is a call (group, hierarchical flag, experts, rows, indices,
// weights) returning a handle; the received row count is asked for, then the
// rows and their local experts are fetched into buffers of that size.
// Combine answers the dispatch's handle, into a buffer of the token count.
// CHECK-DAG:     func.func private @mfrt_cg_dispatch_f32(i64, i64, i64, memref<*xf32>, memref<*xi64>, memref<*xf32>) -> i64 attributes {llvm.emit_c_interface}
// CHECK-DAG:     func.func private @mfrt_cg_dispatch_count(i64) -> i64 attributes {llvm.emit_c_interface}
// CHECK-DAG:     func.func private @mfrt_cg_dispatch_fetch(i64, memref<*xf32>, memref<*xi64>) attributes {llvm.emit_c_interface}
// CHECK-DAG:     func.func private @mfrt_cg_combine_f32(i64, memref<*xf32>, memref<*xf32>) attributes {llvm.emit_c_interface}
// CHECK-LABEL:   func.func @moe(
// CHECK-SAME:        %[[X:[^:]+]]: tensor<?x8xf32>, %[[I:[^:]+]]: tensor<?x2xi64>, %[[W:[^:]+]]: tensor<?x2xf32>)
// CHECK-NEXT:      %[[G:.+]] = arith.constant 0 : i64
// CHECK-NEXT:      %[[HIER:.+]] = arith.constant 1 : i64
// CHECK-NEXT:      %[[E:.+]] = arith.constant 8 : i64
// CHECK-NEXT:      %[[XB:.+]] = bufferization.to_buffer %[[X]] read_only
// CHECK-NEXT:      %[[XU:.+]] = memref.cast %[[XB]]
// CHECK-NEXT:      %[[IB:.+]] = bufferization.to_buffer %[[I]] read_only : tensor<?x2xi64> to memref<?x2xi64, strided<[?, ?], offset: ?>>
// CHECK-NEXT:      %[[IU:.+]] = memref.cast %[[IB]] : memref<?x2xi64, strided<[?, ?], offset: ?>> to memref<*xi64>
// CHECK-NEXT:      %[[WB:.+]] = bufferization.to_buffer %[[W]] read_only
// CHECK-NEXT:      %[[WU:.+]] = memref.cast %[[WB]]
// CHECK-NEXT:      %[[HANDLE:.+]] = call @mfrt_cg_dispatch_f32(%[[G]], %[[HIER]], %[[E]], %[[XU]], %[[IU]], %[[WU]]) : (i64, i64, i64, memref<*xf32>, memref<*xi64>, memref<*xf32>) -> i64
// CHECK-NEXT:      %[[CNT:.+]] = call @mfrt_cg_dispatch_count(%[[HANDLE]]) : (i64) -> i64
// CHECK-NEXT:      %[[R:.+]] = arith.index_cast %[[CNT]] : i64 to index
// CHECK-NEXT:      %[[ROWS:.+]] = memref.alloc(%[[R]]) : memref<?x8xf32>
// CHECK-NEXT:      %[[ROWSU:.+]] = memref.cast %[[ROWS]]
// CHECK-NEXT:      %[[LOCAL:.+]] = memref.alloc(%[[R]]) : memref<?xi64>
// CHECK-NEXT:      %[[LOCALU:.+]] = memref.cast %[[LOCAL]]
// CHECK-NEXT:      call @mfrt_cg_dispatch_fetch(%[[HANDLE]], %[[ROWSU]], %[[LOCALU]]) : (i64, memref<*xf32>, memref<*xi64>) -> ()
// CHECK-NEXT:      %[[RT:.+]] = bufferization.to_tensor %[[ROWS]] restrict writable : memref<?x8xf32> to tensor<?x8xf32>
// CHECK-NEXT:      %[[LT:.+]] = bufferization.to_tensor %[[LOCAL]] restrict writable : memref<?xi64> to tensor<?xi64>
// CHECK:           %[[OUT:.+]] = moe.expert_ffn %[[RT]], %[[LT]],
// CHECK:           %[[T:.+]] = tensor.dim %[[X]], %{{.+}} : tensor<?x8xf32>
// CHECK-NEXT:      %[[Y:.+]] = memref.alloc(%[[T]]) : memref<?x8xf32>
// CHECK-NEXT:      %[[YU:.+]] = memref.cast %[[Y]]
// CHECK-NEXT:      %[[OB:.+]] = bufferization.to_buffer %[[OUT]] read_only
// CHECK-NEXT:      %[[OU:.+]] = memref.cast %[[OB]]
// CHECK-NEXT:      call @mfrt_cg_combine_f32(%[[HANDLE]], %[[OU]], %[[YU]]) : (i64, memref<*xf32>, memref<*xf32>) -> ()
// CHECK-NEXT:      %[[YT:.+]] = bufferization.to_tensor %[[Y]] restrict writable
// CHECK-NEXT:      return %[[YT]]
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 2,
    attention = [tp = 2, dp = 2], experts = [ep = 4 : (tp, dp)]>} {
  func.func @moe(%x: tensor<?x8xf32>, %idx: tensor<?x2xi64>, %w: tensor<?x2xf32>) -> tensor<?x8xf32> {
    %rows, %local, %r = mf.dispatch %x, %idx, %w on "experts" ["ep"] experts 8 hierarchical : tensor<?x8xf32>, tensor<?x2xi64>, tensor<?x2xf32> -> tensor<?x8xf32>, tensor<?xi64>, !mf.dispatch
    %w1 = moe.param "experts.{e}.w1.weight" {mf.shard = #mf.shard<dim = 0, mesh = "experts", axis = "ep", parts = 4>} : tensor<2x16x8xf32>
    %w2 = moe.param "experts.{e}.w2.weight" {mf.shard = #mf.shard<dim = 0, mesh = "experts", axis = "ep", parts = 4>} : tensor<2x8x16xf32>
    %out = moe.expert_ffn %rows, %local, %w1, %w2, %w1 : tensor<?x8xf32>, tensor<?xi64>, tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<2x16x8xf32> -> tensor<?x8xf32>
    %c0 = arith.constant 0 : index
    %t = tensor.dim %x, %c0 : tensor<?x8xf32>
    %y = mf.combine %r, %out tokens %t : !mf.dispatch, tensor<?x8xf32> -> tensor<?x8xf32>
    return %y : tensor<?x8xf32>
  }
}

// -----

// A flat dispatch passes 0 for the hierarchical flag.
// CHECK-LABEL:   func.func @flat(
// CHECK-NEXT:      %[[G:.+]] = arith.constant 0 : i64
// CHECK-NEXT:      %[[FLAT:.+]] = arith.constant 0 : i64
// CHECK-NEXT:      %[[E:.+]] = arith.constant 4 : i64
// CHECK:           call @mfrt_cg_dispatch_f32(%[[G]], %[[FLAT]], %[[E]],
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [dp = 4], experts = [ep = 4 : (dp)]>} {
  func.func @flat(%x: tensor<?x8xf32>, %idx: tensor<?x1xi64>, %w: tensor<?x1xf32>) -> tensor<?x8xf32> {
    %rows, %local, %r = mf.dispatch %x, %idx, %w on "experts" ["ep"] experts 4 flat : tensor<?x8xf32>, tensor<?x1xi64>, tensor<?x1xf32> -> tensor<?x8xf32>, tensor<?xi64>, !mf.dispatch
    %c0 = arith.constant 0 : index
    %t = tensor.dim %x, %c0 : tensor<?x8xf32>
    %y = mf.combine %r, %rows tokens %t : !mf.dispatch, tensor<?x8xf32> -> tensor<?x8xf32>
    return %y : tensor<?x8xf32>
  }
}

// -----

// No communication: mf.slice is this rank's rows (group rank * rows / n),
// mf.zigzag_positions computes the rank's chunks r and 2*CP-1-r of the padded
// prompt, and mf.take gathers by index with the fill past the end.
// CHECK-LABEL:   func.func @local(
// CHECK-SAME:        %[[X:[^:]+]]: tensor<?x8xf32>, %[[TOK:[^:]+]]: tensor<?xi64>, %[[LEN:[^:]+]]: index)
// CHECK:           %[[R:.+]] = call @mfrt_cg_group_rank(%{{.+}}) : (i64) -> i64
// CHECK-NEXT:      %[[RI:.+]] = arith.index_cast %[[R]] : i64 to index
// CHECK-NEXT:      %[[C0:.+]] = arith.constant 0 : index
// CHECK-NEXT:      %[[T:.+]] = tensor.dim %[[X]], %[[C0]] : tensor<?x8xf32>
// CHECK-NEXT:      %[[C2:.+]] = arith.constant 2 : index
// CHECK-NEXT:      %[[ROWS:.+]] = arith.divui %[[T]], %[[C2]] : index
// CHECK-NEXT:      %[[OFF:.+]] = arith.muli %[[RI]], %[[ROWS]] : index
// CHECK-NEXT:      %[[S:.+]] = tensor.extract_slice %[[X]][%[[OFF]], 0] [%[[ROWS]], 8] [1, 1] : tensor<?x8xf32> to tensor<?x8xf32>
// CHECK-NEXT:      %[[PAD:.+]] = arith.constant 8 : index
// CHECK-NEXT:      %[[CEIL:.+]] = arith.ceildivui %[[LEN]], %[[PAD]] : index
// CHECK-NEXT:      %[[TP:.+]] = arith.muli %[[CEIL]], %[[PAD]] : index
// CHECK-NEXT:      %[[C4:.+]] = arith.constant 4 : index
// CHECK-NEXT:      %[[CHUNK:.+]] = arith.divui %[[TP]], %[[C4]] : index
// CHECK-NEXT:      %[[CPG:.+]] = arith.constant 1 : i64
// CHECK-NEXT:      %[[CPR:.+]] = call @mfrt_cg_group_rank(%[[CPG]])
// CHECK-NEXT:      %[[CPI:.+]] = arith.index_cast %[[CPR]] : i64 to index
// CHECK-NEXT:      %[[C3:.+]] = arith.constant 3 : index
// CHECK-NEXT:      %[[MIRROR:.+]] = arith.subi %[[C3]], %[[CPI]] : index
// CHECK-NEXT:      %[[FIRST:.+]] = arith.muli %[[CPI]], %[[CHUNK]] : index
// CHECK-NEXT:      %[[SECOND:.+]] = arith.muli %[[MIRROR]], %[[CHUNK]] : index
// CHECK:           %[[N:.+]] = arith.muli %[[CHUNK]], %{{.+}} : index
// CHECK-NEXT:      %[[E:.+]] = tensor.empty(%[[N]]) : tensor<?xi64>
// CHECK-NEXT:      %[[ZZ:.+]] = linalg.generic {{.+}} outs(%[[E]] : tensor<?xi64>)
// CHECK:             %[[I:.+]] = linalg.index 0 : index
// CHECK-NEXT:        %[[IN1:.+]] = arith.cmpi ult, %[[I]], %[[CHUNK]] : index
// CHECK-NEXT:        %[[A:.+]] = arith.addi %[[FIRST]], %[[I]] : index
// CHECK-NEXT:        %[[D:.+]] = arith.subi %[[I]], %[[CHUNK]] : index
// CHECK-NEXT:        %[[B:.+]] = arith.addi %[[SECOND]], %[[D]] : index
// CHECK-NEXT:        %[[SEL:.+]] = arith.select %[[IN1]], %[[A]], %[[B]] : index
// CHECK-NEXT:        %[[P:.+]] = arith.index_cast %[[SEL]] : index to i64
// CHECK-NEXT:        linalg.yield %[[P]] : i64
// CHECK:           %[[LEN64:.+]] = arith.index_cast %{{.+}} : index to i64
// CHECK:           %[[TAKE:.+]] = linalg.generic {{.+}} ins(%[[ZZ]] : tensor<?xi64>)
// CHECK-NEXT:      ^bb0(%[[IDX:[^:]+]]: i64,
// CHECK-NEXT:        %[[ZERO:.+]] = arith.constant 0 : i64
// CHECK-NEXT:        %[[LT:.+]] = arith.cmpi slt, %[[IDX]], %[[LEN64]] : i64
// CHECK-NEXT:        %[[GE:.+]] = arith.cmpi sge, %[[IDX]], %[[ZERO]] : i64
// CHECK-NEXT:        %[[OK:.+]] = arith.andi %[[LT]], %[[GE]] : i1
// CHECK:             %[[V:.+]] = tensor.extract %[[TOK]][%{{.+}}] : tensor<?xi64>
// CHECK-NEXT:        %[[FILL:.+]] = arith.constant 0 : i64
// CHECK-NEXT:        %[[OUT:.+]] = arith.select %[[OK]], %[[V]], %[[FILL]] : i64
// CHECK-NEXT:        linalg.yield %[[OUT]] : i64
// CHECK:           return %[[S]], %[[TAKE]]
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @local(%x: tensor<?x8xf32>, %tok: tensor<?xi64>, %len: index) -> (tensor<?x8xf32>, tensor<?xi64>) {
    %0 = mf.slice %x on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
    %zz = mf.zigzag_positions %len on "attention" "cp" pad_to 8 : tensor<?xi64>
    %1 = mf.take %tok[%zz] fill 0 : tensor<?xi64>, tensor<?xi64> -> tensor<?xi64>
    return %0, %1 : tensor<?x8xf32>, tensor<?xi64>
  }
}

// -----

// mf.step_rows deals a decode step's n rows to the CP ranks round-robin from
// CP rank positions[0] mod CP: this rank's first row is (r - p0) mod CP, its
// rows step by CP, and it gets ceil(n / CP) of them rounded up to a multiple
// of pad_to (-1 past the step's rows), rotated by (p0 / CP mod pad_to)
// blocks of count / pad_to.
// CHECK-LABEL:   func.func @step_rows(
// CHECK-SAME:        %[[POS:[^:]+]]: tensor<?xi64>)
// CHECK:           %[[N:.+]] = tensor.dim %[[POS]], %{{.+}} : tensor<?xi64>
// CHECK:           %[[CP:.+]] = arith.constant 2 : index
// CHECK:           %[[PAD:.+]] = arith.constant 4 : index
// CHECK-NEXT:      %[[PER:.+]] = arith.ceildivui %[[N]], %[[CP]] : index
// CHECK-NEXT:      %[[BLOCKS:.+]] = arith.ceildivui %[[PER]], %[[PAD]] : index
// CHECK-NEXT:      %[[ATLEAST:.+]] = arith.maxui %[[BLOCKS]], %{{.+}} : index
// CHECK-NEXT:      %[[COUNT:.+]] = arith.muli %[[ATLEAST]], %[[PAD]] : index
// CHECK-NEXT:      %[[P0:.+]] = tensor.extract %[[POS]][%{{.+}}] : tensor<?xi64>
// CHECK-NEXT:      %[[P0I:.+]] = arith.index_cast %[[P0]] : i64 to index
// CHECK:           %[[R:.+]] = arith.index_cast %{{.+}} : i64 to index
// CHECK-NEXT:      %[[RCP:.+]] = arith.addi %[[R]], %[[CP]] : index
// CHECK-NEXT:      %[[P0MOD:.+]] = arith.remui %[[P0I]], %[[CP]] : index
// CHECK-NEXT:      %[[D:.+]] = arith.subi %[[RCP]], %[[P0MOD]] : index
// CHECK-NEXT:      %[[FIRST:.+]] = arith.remui %[[D]], %[[CP]] : index
// CHECK-NEXT:      %[[BLOCK:.+]] = arith.divui %[[COUNT]], %[[PAD]] : index
// CHECK-NEXT:      %[[P0CP:.+]] = arith.divui %[[P0I]], %[[CP]] : index
// CHECK-NEXT:      %[[TURN:.+]] = arith.remui %[[P0CP]], %[[PAD]] : index
// CHECK-NEXT:      %[[SHIFT:.+]] = arith.muli %[[TURN]], %[[BLOCK]] : index
// CHECK-NEXT:      %[[UNSHIFT:.+]] = arith.subi %[[COUNT]], %[[SHIFT]] : index
// CHECK-NEXT:      %[[E:.+]] = tensor.empty(%[[COUNT]]) : tensor<?xi64>
// CHECK-NEXT:      linalg.generic {{.+}} outs(%[[E]] : tensor<?xi64>)
// CHECK:             %[[I:.+]] = linalg.index 0 : index
// CHECK-NEXT:        %[[IU:.+]] = arith.addi %[[I]], %[[UNSHIFT]] : index
// CHECK-NEXT:        %[[J:.+]] = arith.remui %[[IU]], %[[COUNT]] : index
// CHECK-NEXT:        %[[STRIDE:.+]] = arith.muli %[[J]], %[[CP]] : index
// CHECK-NEXT:        %[[ROW:.+]] = arith.addi %[[FIRST]], %[[STRIDE]] : index
// CHECK-NEXT:        %[[IN:.+]] = arith.cmpi ult, %[[ROW]], %[[N]] : index
// CHECK-NEXT:        %[[ID:.+]] = arith.index_cast %[[ROW]] : index to i64
// CHECK-NEXT:        %[[NONE:.+]] = arith.constant -1 : i64
// CHECK-NEXT:        %[[SEL:.+]] = arith.select %[[IN]], %[[ID]], %[[NONE]] : i64
// CHECK-NEXT:        linalg.yield %[[SEL]] : i64
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @step_rows(%pos: tensor<?xi64>) -> tensor<?xi64> {
    %0 = mf.step_rows %pos on "attention" "cp" pad_to 4 : tensor<?xi64> -> tensor<?xi64>
    return %0 : tensor<?xi64>
  }
}

// -----

// by_place: row i goes to CP rank (its place, the low 32 bits) mod CP. A
// loop counts each rank's rows (CP of them), the count is the most rounded
// up to pad_to, and a second loop lists this rank's rows in step order
// (-1 after them), rotated as above.
// CHECK-LABEL:   func.func @step_rows_by_place(
// CHECK-SAME:        %[[POS:[^:]+]]: tensor<?xi64>)
// CHECK:           %[[N:.+]] = tensor.dim %[[POS]], %{{.+}} : tensor<?xi64>
// CHECK:           %[[COUNTS:.+]]:2 = scf.for %[[I:.+]] = %{{.+}} to %[[N]] step %{{.+}} iter_args(%{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) -> (index, index)
// CHECK:             %[[P:.+]] = tensor.extract %[[POS]][%[[I]]] : tensor<?xi64>
// CHECK:             %[[PLACE:.+]] = arith.andi %[[P]], %{{.+}} : i64
// CHECK:             arith.remui %[[PLACE]], %{{.+}} : i64
// CHECK:           %[[M0:.+]] = arith.maxui %{{.+}}, %[[COUNTS]]#0 : index
// CHECK:           %[[M1:.+]] = arith.maxui %[[M0]], %[[COUNTS]]#1 : index
// CHECK:           arith.ceildivui %[[M1]], %{{.+}} : index
// CHECK:           %[[COUNT:.+]] = arith.muli %{{.+}}, %{{.+}} : index
// CHECK:           call @mfrt_cg_group_rank
// CHECK:           %[[LIST:.+]]:2 = scf.for %{{.+}} = %{{.+}} to %[[N]] step %{{.+}} iter_args(%{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) -> (tensor<?xi64>, index)
// CHECK:             scf.if %{{.+}} -> (tensor<?xi64>, index)
// CHECK:               tensor.insert
// CHECK:           linalg.generic
// CHECK:             tensor.extract %[[LIST]]#0[%{{.+}}] : tensor<?xi64>
module attributes {mf.plan = #mf.plan<devices = 4, gpus_per_node = 4,
    attention = [tp = 2, cp = 2], experts = [ep = 4 : (tp, cp)]>} {
  func.func @step_rows_by_place(%pos: tensor<?xi64>) -> tensor<?xi64> {
    %0 = mf.step_rows %pos on "attention" "cp" pad_to 4 by_place : tensor<?xi64> -> tensor<?xi64>
    return %0 : tensor<?xi64>
  }
}

// -----

// Each layer tags its traffic: mfrt_cg_set_layer(index) first, then its rows'
// positions (SP and CP; the same value when the layer has only one), and
// set_layer(-1) after the layer. mf.weight is left to the weight lowering.
// CHECK-DAG:     func.func private @mfrt_cg_set_layer(i64) attributes {llvm.emit_c_interface}
// CHECK-DAG:     func.func private @mfrt_cg_layer_rows(i64, memref<*xi64>, memref<*xi64>) attributes {llvm.emit_c_interface}
// CHECK-LABEL:   func.func @layers(
// CHECK:           moe.layer 2(
// CHECK-NEXT:      ^bb0(%[[H:[^:]+]]: tensor<?x8xf32>, %[[SP:[^:]+]]: tensor<?xi64>, %[[CP:[^:]+]]: tensor<?xi64>):
// CHECK-NEXT:        %[[L2:.+]] = arith.constant 2 : i64
// CHECK-NEXT:        func.call @mfrt_cg_set_layer(%[[L2]]) : (i64) -> ()
// CHECK-NEXT:        %[[L2B:.+]] = arith.constant 2 : i64
// CHECK-NEXT:        %[[SPB:.+]] = bufferization.to_buffer %[[SP]] read_only
// CHECK-NEXT:        %[[SPU:.+]] = memref.cast %[[SPB]]
// CHECK-NEXT:        %[[CPB:.+]] = bufferization.to_buffer %[[CP]] read_only
// CHECK-NEXT:        %[[CPU:.+]] = memref.cast %[[CPB]]
// CHECK-NEXT:        func.call @mfrt_cg_layer_rows(%[[L2B]], %[[SPU]], %[[CPU]]) : (i64, memref<*xi64>, memref<*xi64>) -> ()
// CHECK:             func.call @mfrt_cg_all_gather_f32(
// CHECK:             moe.yield
// CHECK-NEXT:      }
// CHECK-NEXT:      %[[OUT:.+]] = arith.constant -1 : i64
// CHECK-NEXT:      call @mfrt_cg_set_layer(%[[OUT]]) : (i64) -> ()
// CHECK:           moe.layer 3(
// CHECK-NEXT:      ^bb0(%{{[^:]+}}: tensor<?x8xf32>, %[[POS:[^:]+]]: tensor<?xi64>):
// CHECK-NEXT:        arith.constant 3 : i64
// CHECK-NEXT:        func.call @mfrt_cg_set_layer(
// CHECK-NEXT:        arith.constant 3 : i64
// CHECK-NEXT:        %[[PB:.+]] = bufferization.to_buffer %[[POS]] read_only
// CHECK-NEXT:        %[[PU:.+]] = memref.cast %[[PB]]
// CHECK-NEXT:        %[[PB2:.+]] = bufferization.to_buffer %[[POS]] read_only
// CHECK-NEXT:        %[[PU2:.+]] = memref.cast %[[PB2]]
// CHECK-NEXT:        func.call @mfrt_cg_layer_rows(%{{.+}}, %[[PU]], %[[PU2]])
// CHECK:           mf.weight 0, "model.norm.weight" : memref<8xf32>
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @layers(%h: tensor<?x8xf32>, %sp: tensor<?xi64>, %cp: tensor<?xi64>) -> (tensor<?x8xf32>, memref<8xf32>) {
    %0 = moe.layer 2(%h, %sp, %cp) : (tensor<?x8xf32>, tensor<?xi64>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %b: tensor<?xi64>, %c: tensor<?xi64>):
      %g = mf.all_gather %a on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
      moe.yield %g : tensor<?x8xf32>
    }
    %1 = moe.layer 3(%0, %cp) : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32> {
    ^bb0(%a: tensor<?x8xf32>, %p: tensor<?xi64>):
      moe.yield %a : tensor<?x8xf32>
    }
    %w = mf.weight 0, "model.norm.weight" : memref<8xf32>
    return %1, %w : tensor<?x8xf32>, memref<8xf32>
  }
}

// -----

// Without a plan the program has one rank: every group has one member, so
// an all-gather keeps the row count. The groups are still listed.
// CHECK-LABEL: module attributes {mf.groups = ["attention:tp", "attention:cp"]} {
// CHECK-LABEL:   func.func @one_rank(
// CHECK-SAME:        %[[X:[^:]+]]: tensor<?x8xf32>)
// CHECK:           %[[T:.+]] = tensor.dim %[[X]], %{{.+}} : tensor<?x8xf32>
// CHECK-NEXT:      %[[B:.+]] = memref.alloc(%[[T]]) : memref<?x8xf32>
// CHECK:           call @mfrt_cg_all_gather_f32(
// CHECK:           call @mfrt_cg_group_rank(
module {
  func.func @one_rank(%x: tensor<?x8xf32>) -> (tensor<?x8xf32>, index) {
    %0 = mf.all_gather %x on "attention" ["tp"] dim 0 : tensor<?x8xf32> -> tensor<?x8xf32>
    %1 = mf.coord "attention" "cp" : index
    return %0, %1 : tensor<?x8xf32>, index
  }
}

// -----

// A module without mf ops gets no mf.groups.
// CHECK-LABEL: module attributes {mf.plan =
// CHECK-NOT:     mf.groups
// CHECK-LABEL:   func.func @nothing(
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @nothing(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
    return %x : tensor<?x8xf32>
  }
}
