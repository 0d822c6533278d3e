// RUN: meshfold-opt %s --split-input-file --verify-diagnostics --pass-pipeline="builtin.module(func.func(mf-gpu-phases-to-launch))" | FileCheck %s

// A block loop of thread phases (a block sums 4 x 8 elements staged in
// block memory; each thread keeps a partial sum): one launch of 4 threads
// per block, one block per iteration of the block loop (none when %n is 0);
// the staging buffer becomes workgroup memory, the per-thread one private
// memory without its thread index; a barrier follows each phase, in the
// loop too.
// CHECK-LABEL: func.func @phases
// CHECK-SAME:    (%[[IN:.+]]: memref<?x8xf32>, %[[OUT:.+]]: memref<?xf32>, %[[N:.+]]: index)
// CHECK:         %[[BLOCKS:.+]] = arith.ceildivsi
// CHECK:         %[[GRID:.+]] = arith.muli %{{.+}}, %[[BLOCKS]]
// CHECK:         %[[ANY:.+]] = arith.cmpi sgt, %[[GRID]]
// CHECK:         scf.if %[[ANY]] {
// CHECK:           gpu.launch blocks(%[[BX:[^,]+]], {{.*}} in (%{{[^ ]+}} = %[[GRID]], {{.*}} threads(%[[TX:[^,]+]], {{.*}} in (%{{[^ ]+}} = %c4{{[_0-9]*}},
// CHECK-SAME:        workgroup(%[[S:[^ ]+]] : memref<4x8xf32, #gpu.address_space<workgroup>>)
// CHECK-SAME:        private(%[[P:[^ ]+]] : memref<1xf32, #gpu.address_space<private>>)
// CHECK:             %[[B:.+]] = arith.muli %[[BX]], %c4
// CHECK:             memref.store %{{.+}}, %[[P]][%{{.+}}] : memref<1xf32, #gpu.address_space<private>>
// CHECK-NEXT:        gpu.barrier
// CHECK:             scf.for
// CHECK:               %[[ROW:.+]] = arith.addi %{{.+}}, %[[TX]]
// CHECK:               memref.load %[[IN]][%[[ROW]]
// CHECK:               memref.store %{{.+}}, %[[S]][%[[TX]], %{{.+}}]
// CHECK-NEXT:          gpu.barrier
// CHECK:               memref.load %[[S]]
// CHECK:               memref.store %{{.+}}, %[[P]][%{{.+}}] : memref<1xf32, #gpu.address_space<private>>
// CHECK-NEXT:          gpu.barrier
// CHECK:             }
// CHECK:             memref.load %[[P]]
// CHECK:             memref.atomic_rmw addf
// CHECK:             gpu.barrier
// CHECK-NEXT:        gpu.terminator
// CHECK-NOT:     scf.parallel
func.func @phases(%in: memref<?x8xf32>, %out: memref<?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%b) = (%c0) to (%n) step (%c4) {
      %s = memref.alloca() : memref<4x8xf32>
      %p = memref.alloca() {mf.gpu_private} : memref<4x1xf32>
      scf.parallel (%t) = (%c0) to (%c4) step (%c1) {
        memref.store %zero, %p[%t, %c0] : memref<4x1xf32>
        scf.reduce
      } {mf.gpu_thread_phase}
      scf.for %j0 = %c0 to %c8 step %c2 {
        scf.parallel (%t) = (%c0) to (%c4) step (%c1) {
          %row = arith.addi %b, %t : index
          %v = memref.load %in[%row, %j0] : memref<?x8xf32>
          memref.store %v, %s[%t, %j0] : memref<4x8xf32>
          scf.reduce
        } {mf.gpu_thread_phase}
        scf.parallel (%t) = (%c0) to (%c4) step (%c1) {
          %other = arith.subi %c4, %t : index
          %last = arith.subi %other, %c1 : index
          %v = memref.load %s[%last, %j0] : memref<4x8xf32>
          %acc = memref.load %p[%t, %c0] : memref<4x1xf32>
          %sum = arith.addf %acc, %v : f32
          memref.store %sum, %p[%t, %c0] : memref<4x1xf32>
          scf.reduce
        } {mf.gpu_thread_phase}
      }
      scf.parallel (%t) = (%c0) to (%c4) step (%c1) {
        %acc = memref.load %p[%t, %c0] : memref<4x1xf32>
        %r = memref.atomic_rmw addf %acc, %out[%b] : (f32, memref<?xf32>) -> f32
        scf.reduce
      } {mf.gpu_thread_phase}
    scf.reduce
  } {mf.gpu_phases = 4 : i64}
  return
}

// -----

// A private buffer belongs to its thread: another thread's row is an error.
func.func @foreign_row(%out: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.parallel (%b) = (%c0) to (%c4) step (%c4) {
      %p = memref.alloca() {mf.gpu_private} : memref<4x1xf32>
      scf.parallel (%t) = (%c0) to (%c4) step (%c1) {
        // expected-error @+1 {{a private buffer is indexed by its thread}}
        %v = memref.load %p[%c0, %c0] : memref<4x1xf32>
        memref.store %v, %out[%t] : memref<4xf32>
        scf.reduce
      } {mf.gpu_thread_phase}
    scf.reduce
  } {mf.gpu_phases = 4 : i64}
  return
}

// -----

// Every thread runs the block's code outside the phases: a store there
// would race.
func.func @store_outside(%out: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%b) = (%c0) to (%c4) step (%c4) {
      // expected-error @+1 {{outside a thread phase a block runs only side-effect-free ops, loads, and loops and branches of phases}}
      memref.store %zero, %out[%b] : memref<4xf32>
    scf.reduce
  } {mf.gpu_phases = 4 : i64}
  return
}

// -----

// A thread phase covers the block's threads exactly.
func.func @short_phase(%out: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%b) = (%c0) to (%c4) step (%c4) {
      // expected-error @+1 {{a thread phase runs over [0, 4) in steps of 1}}
      scf.parallel (%t) = (%c0) to (%c2) step (%c1) {
        memref.store %zero, %out[%t] : memref<4xf32>
        scf.reduce
      } {mf.gpu_thread_phase}
    scf.reduce
  } {mf.gpu_phases = 4 : i64}
  return
}

// -----

// Block code with a view of a block buffer, a scalar every thread reads
// back, and a branch and a loop with results around phases: the view takes
// the buffer in the generic address space, loads and stores in phases use
// workgroup memory; a barrier follows the block-level read (no thread may
// overwrite the scalar before all have read it); branch and loop are
// cloned with their phases.
// CHECK-LABEL: func.func @block_code
// CHECK:         gpu.launch {{.*}} workgroup(%[[S:[^ ]+]] : memref<8xf32, #gpu.address_space<workgroup>>)
// CHECK:           %[[G:.+]] = memref.memory_space_cast %[[S]] : memref<8xf32, #gpu.address_space<workgroup>> to memref<8xf32>
// CHECK:           %[[V:.+]] = memref.reinterpret_cast %[[G]]
// CHECK:           memref.store %{{.+}}, %[[S]][%{{.+}}] : memref<8xf32, #gpu.address_space<workgroup>>
// CHECK-NEXT:      gpu.barrier
// CHECK:           %[[X:.+]] = memref.load %[[V]][%{{.+}}] : memref<?xf32>
// CHECK-NEXT:      gpu.barrier
// CHECK:           %[[POS:.+]] = arith.cmpf ogt, %[[X]]
// CHECK:           %{{.+}} = scf.if %[[POS]] -> (f32) {
// CHECK:             memref.store %{{.+}}, %[[S]]
// CHECK-NEXT:        gpu.barrier
// CHECK:             scf.yield
// CHECK:           } else {
// CHECK:           scf.for {{.+}} iter_args
// CHECK:             memref.atomic_rmw
// CHECK-NEXT:        gpu.barrier
// CHECK:             scf.yield
func.func @block_code(%out: memref<4xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  scf.parallel (%b) = (%c0) to (%c4) step (%c1) {
    %s = memref.alloca() : memref<8xf32>
    %v = memref.reinterpret_cast %s to offset: [0], sizes: [%n], strides: [1] : memref<8xf32> to memref<?xf32>
    scf.parallel (%t) = (%c0) to (%c4) step (%c1) {
      memref.store %one, %s[%t] : memref<8xf32>
      scf.reduce
    } {mf.gpu_thread_phase}
    %x = memref.load %v[%c0] : memref<?xf32>
    %pos = arith.cmpf ogt, %x, %zero : f32
    %y = scf.if %pos -> (f32) {
      scf.parallel (%t) = (%c0) to (%c4) step (%c1) {
        memref.store %zero, %s[%t] : memref<8xf32>
        scf.reduce
      } {mf.gpu_thread_phase}
      scf.yield %one : f32
    } else {
      scf.yield %zero : f32
    }
    %sum = scf.for %i = %c0 to %c2 step %c1 iter_args(%acc = %y) -> (f32) {
      scf.parallel (%t) = (%c0) to (%c4) step (%c1) {
        %r = memref.atomic_rmw addf %acc, %out[%b] : (f32, memref<4xf32>) -> f32
        scf.reduce
      } {mf.gpu_thread_phase}
      %next = arith.addf %acc, %one : f32
      scf.yield %next : f32
    }
    scf.reduce
  } {mf.gpu_phases = 4 : i64}
  return
}
