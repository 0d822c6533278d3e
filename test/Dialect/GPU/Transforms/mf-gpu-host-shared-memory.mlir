// RUN: meshfold-opt %s --mf-gpu-host-shared-memory | FileCheck %s

// Host buffers become managed memory; frees are async on a stream of their
// own, waited for at once; an alloca is freed at the end of its scope.
// Kernels (gpu.module) are left alone.
// CHECK-LABEL: func.func @host
// CHECK:         %[[A:.+]] = gpu.alloc host_shared (%{{.*}}) : memref<?x64xf32>
// CHECK:         %[[B:.+]] = gpu.alloc host_shared () : memref<4xf32>
// CHECK:         gpu.launch_func{{ +}}@k::@k {{.*}} args(%[[A]] : memref<?x64xf32>, %[[B]] : memref<4xf32>)
// CHECK:         %[[S:.+]] = gpu.wait async
// CHECK:         %[[F:.+]] = gpu.dealloc async [%[[S]]] %[[A]] : memref<?x64xf32>
// CHECK:         gpu.wait [%[[F]]]
// CHECK:         %[[S2:.+]] = gpu.wait async
// CHECK:         gpu.dealloc async [%[[S2]]] %[[B]] : memref<4xf32>
// CHECK:         return
// CHECK-NOT:     memref.alloc
// CHECK-NOT:     memref.dealloc
// CHECK:       gpu.module @k
// CHECK:         memref.alloca
module attributes {gpu.container_module} {
  func.func @host(%t: index) {
    %a = memref.alloc(%t) {alignment = 64 : i64} : memref<?x64xf32>
    %b = memref.alloca() : memref<4xf32>
    %c1 = arith.constant 1 : index
    gpu.launch_func @k::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%a : memref<?x64xf32>, %b : memref<4xf32>)
    memref.dealloc %a : memref<?x64xf32>
    return
  }
  gpu.module @k {
    gpu.func @k(%a: memref<?x64xf32>, %b: memref<4xf32>) kernel {
      %s = memref.alloca() : memref<1xf32>
      gpu.return
    }
  }
}
