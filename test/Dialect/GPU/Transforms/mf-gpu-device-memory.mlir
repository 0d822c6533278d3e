// RUN: meshfold-opt %s --mf-gpu-device-memory | FileCheck %s

// Buffers that only kernels use, directly or through views, go to device
// memory; a buffer the host loads from, one handed to a call (the runtime)
// and one returned stay host-shared. Kernels' own buffers are left alone.
// CHECK-LABEL: func.func @host
// CHECK:         %[[S0:.+]] = gpu.wait async
// CHECK:         %[[A:.+]], %{{.+}} = gpu.alloc async [%[[S0]]] (%{{.*}}) : memref<?x64xf32>
// CHECK:         %[[S1:.+]] = gpu.wait async
// CHECK:         %[[B:.+]], %{{.+}} = gpu.alloc async [%[[S1]]] () : memref<4x16xf32>
// CHECK:         %[[C:.+]] = gpu.alloc{{ +}}host_shared () : memref<4xindex>
// CHECK:         %[[D:.+]] = gpu.alloc{{ +}}host_shared () : memref<8xf32>
// CHECK:         %[[E:.+]] = gpu.alloc{{ +}}host_shared () : memref<8xf32>
// CHECK:         %[[S2:.+]] = gpu.wait async
// CHECK:         %[[F:.+]], %{{.+}} = gpu.alloc async [%[[S2]]] () : memref<8xf32>
// CHECK:         memref.subview %[[B]]
// CHECK:         memref.collapse_shape
// CHECK:         gpu.launch_func
// CHECK:         memref.load %[[C]]
// CHECK:         call @mfrt_use(%[[D]])
// The device buffer's free no longer waits on the host.
// CHECK:         %[[S3:.+]] = gpu.wait async
// CHECK-NEXT:    gpu.dealloc async [%[[S3]]] %[[F]] : memref<8xf32>
// CHECK-NEXT:    return %[[E]]
// CHECK:       gpu.module @k
// CHECK:         gpu.alloc{{ +}}host_shared () : memref<2xf32>
module attributes {gpu.container_module} {
  func.func private @mfrt_use(memref<8xf32>)
  func.func @host(%t: index) -> memref<8xf32> {
    %a = gpu.alloc host_shared (%t) : memref<?x64xf32>
    %b = gpu.alloc host_shared () : memref<4x16xf32>
    %c = gpu.alloc host_shared () : memref<4xindex>
    %d = gpu.alloc host_shared () : memref<8xf32>
    %e = gpu.alloc host_shared () : memref<8xf32>
    %f = gpu.alloc host_shared () : memref<8xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = memref.dim %a, %c0 : memref<?x64xf32>
    %sv = memref.subview %b[0, 0] [2, 16] [1, 1] : memref<4x16xf32> to memref<2x16xf32, strided<[16, 1]>>
    %flat = memref.collapse_shape %sv [[0, 1]] : memref<2x16xf32, strided<[16, 1]>> into memref<32xf32, strided<[1]>>
    gpu.launch_func @k::@k blocks in (%n, %c1, %c1) threads in (%c1, %c1, %c1) args(%a : memref<?x64xf32>, %flat : memref<32xf32, strided<[1]>>, %c : memref<4xindex>, %d : memref<8xf32>, %e : memref<8xf32>, %f : memref<8xf32>)
    %i = memref.load %c[%c0] : memref<4xindex>
    call @mfrt_use(%d) : (memref<8xf32>) -> ()
    %s = gpu.wait async
    %freed = gpu.dealloc async [%s] %f : memref<8xf32>
    gpu.wait [%freed]
    return %e : memref<8xf32>
  }
  gpu.module @k {
    gpu.func @k(%a: memref<?x64xf32>, %b: memref<32xf32, strided<[1]>>, %c: memref<4xindex>, %d: memref<8xf32>, %e: memref<8xf32>, %f: memref<8xf32>) kernel {
      %s = gpu.alloc host_shared () : memref<2xf32>
      gpu.return
    }
  }
}
