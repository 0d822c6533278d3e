// RUN: meshfold-opt %s --mf-outline-parallel-loops --split-input-file | FileCheck %s

// Two layers' nests, equal but for their buffers: one function, called
// twice. The bounds and the scale are constants, cloned into it; the row
// count and the buffers are its arguments.
// CHECK-LABEL: func.func @stage(
// CHECK-SAME:      %[[A:.+]]: memref<?x8xf32>, %[[B:.+]]: memref<?x8xf32>, %[[N:.+]]: index)
// CHECK-NOT:     scf.parallel
// CHECK:         call @stage_par0(%[[N]], %[[A]]) : (index, memref<?x8xf32>) -> ()
// CHECK-NEXT:    call @stage_par0(%[[N]], %[[B]]) : (index, memref<?x8xf32>) -> ()
// CHECK-NEXT:    return
// CHECK:       func.func private @stage_par0(%[[N2:.+]]: index, %[[M:.+]]: memref<?x8xf32>)
// CHECK-SAME:      attributes {llvm.linkage = #llvm.linkage<internal>}
// CHECK-DAG:     %[[C0:.+]] = arith.constant 0 : index
// CHECK-DAG:     %[[C1:.+]] = arith.constant 1 : index
// CHECK-DAG:     %[[C8:.+]] = arith.constant 8 : index
// CHECK-DAG:     %[[S:.+]] = arith.constant 2.000000e+00 : f32
// CHECK:         scf.parallel (%[[I:.+]], %[[J:.+]]) = (%[[C0]], %[[C0]]) to (%[[N2]], %[[C8]]) step (%[[C1]], %[[C1]])
// CHECK:           %[[X:.+]] = memref.load %[[M]][%[[I]], %[[J]]]
// CHECK:           %[[Y:.+]] = arith.mulf %[[X]], %[[S]]
// CHECK:           memref.store %[[Y]], %[[M]][%[[I]], %[[J]]]
// CHECK:         return
// CHECK-NOT:   func.func private @stage_par1
func.func @stage(%a: memref<?x8xf32>, %b: memref<?x8xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %s = arith.constant 2.0 : f32
  scf.parallel (%i, %j) = (%c0, %c0) to (%n, %c8) step (%c1, %c1) {
    %x = memref.load %a[%i, %j] : memref<?x8xf32>
    %y = arith.mulf %x, %s : f32
    memref.store %y, %a[%i, %j] : memref<?x8xf32>
  }
  scf.parallel (%i, %j) = (%c0, %c0) to (%n, %c8) step (%c1, %c1) {
    %x = memref.load %b[%i, %j] : memref<?x8xf32>
    %y = arith.mulf %x, %s : f32
    memref.store %y, %b[%i, %j] : memref<?x8xf32>
  }
  return
}

// -----

// A constant that differs (the scale) makes another kernel; a reduction's
// result is returned; a nest inside a sequential loop is outlined with the
// loop's index as an argument, and the nest nested in it stays inside.
// CHECK-LABEL: func.func @mixed(
// CHECK:         call @mixed_par0(%{{.+}}) : (memref<16xf32>) -> ()
// CHECK:         call @mixed_par1(%{{.+}}) : (memref<16xf32>) -> ()
// CHECK:         %[[SUM:.+]] = call @mixed_par2(%{{.+}}) : (memref<16xf32>) -> f32
// CHECK:         scf.for %[[K:.+]] =
// CHECK:           call @mixed_par3(%[[K]], %{{.+}}) : (index, memref<16xf32>) -> ()
// CHECK:         return %[[SUM]]
// CHECK:       func.func private @mixed_par0(
// CHECK:         arith.constant 2.000000e+00 : f32
// CHECK:       func.func private @mixed_par1(
// CHECK:         arith.constant 3.000000e+00 : f32
// CHECK:       func.func private @mixed_par2({{.+}}) -> f32
// CHECK:         %[[R:.+]] = scf.parallel
// CHECK:           scf.reduce
// CHECK:         return %[[R]] : f32
// CHECK:       func.func private @mixed_par3(
// CHECK:         scf.parallel
// CHECK:           scf.parallel
func.func @mixed(%a: memref<16xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c16 = arith.constant 16 : index
  %two = arith.constant 2.0 : f32
  %three = arith.constant 3.0 : f32
  %zero = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%c16) step (%c1) {
    %x = memref.load %a[%i] : memref<16xf32>
    %y = arith.mulf %x, %two : f32
    memref.store %y, %a[%i] : memref<16xf32>
  }
  scf.parallel (%i) = (%c0) to (%c16) step (%c1) {
    %x = memref.load %a[%i] : memref<16xf32>
    %y = arith.mulf %x, %three : f32
    memref.store %y, %a[%i] : memref<16xf32>
  }
  %sum = scf.parallel (%i) = (%c0) to (%c16) step (%c1) init (%zero) -> f32 {
    %x = memref.load %a[%i] : memref<16xf32>
    scf.reduce(%x : f32) {
    ^bb0(%l: f32, %r: f32):
      %t = arith.addf %l, %r : f32
      scf.reduce.return %t : f32
    }
  }
  scf.for %k = %c0 to %c4 step %c1 {
    scf.parallel (%i) = (%c0) to (%c4) step (%c1) {
      scf.parallel (%j) = (%c0) to (%c4) step (%c1) {
        %r = arith.muli %k, %c4 : index
        %idx = arith.addi %r, %j : index
        %x = memref.load %a[%idx] : memref<16xf32>
        %y = arith.addf %x, %x : f32
        memref.store %y, %a[%idx] : memref<16xf32>
      }
    }
  }
  return %sum : f32
}
