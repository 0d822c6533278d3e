// Host code that makes upstream gpu-to-llvm and gpu.select_object emit every
// non-sparse mgpu* call: module load (global constructor) and unload
// (global destructor), synchronous, asynchronous and cluster launches,
// host_shared and device allocations, copies, 16- and 32-bit memsets, events
// between streams and host registration (the TMA descriptor is in
// mgpu-tma.mlir).
module attributes {gpu.container_module} {
  gpu.module @kernels [#nvvm.target<chip = "sm_90a">] {
    gpu.func @k(%a: memref<16xf32>) kernel {
      %i = gpu.thread_id x
      %v = memref.load %a[%i] : memref<16xf32>
      %w = arith.addf %v, %v : f32
      memref.store %w, %a[%i] : memref<16xf32>
      gpu.return
    }
  }
  func.func @host(%h16: memref<16xf16>, %u: memref<*xf16>, %out: memref<16xf32>) {
    %c1 = arith.constant 1 : index
    %c16 = arith.constant 16 : index
    %m = gpu.alloc host_shared () : memref<16xf32>
    %one = arith.constant 1.0 : f32
    %half = arith.constant 1.0 : f16
    %ta = gpu.wait async
    %d, %t0 = gpu.alloc async [%ta] () : memref<16xf32>
    %t1 = gpu.memset async [%t0] %m, %one : memref<16xf32>, f32
    %t2 = gpu.memset async [%t1] %h16, %half : memref<16xf16>, f16
    %t3 = gpu.launch_func async [%t2] @kernels::@k blocks in (%c1, %c1, %c1) threads in (%c16, %c1, %c1) args(%m : memref<16xf32>)
    %t4 = gpu.wait async [%t3]
    %t5 = gpu.wait async [%t3, %t4]
    %t6 = gpu.memcpy async [%t5] %d, %m : memref<16xf32>, memref<16xf32>
    %t6b = gpu.memcpy async [%t6] %out, %d : memref<16xf32>, memref<16xf32>
    gpu.wait [%t6b]
    gpu.launch_func @kernels::@k blocks in (%c1, %c1, %c1) threads in (%c16, %c1, %c1) args(%m : memref<16xf32>)
    gpu.launch_func @kernels::@k clusters in (%c1, %c1, %c1) blocks in (%c1, %c1, %c1) threads in (%c16, %c1, %c1) args(%m : memref<16xf32>)
    %t7 = gpu.wait async
    %t8 = gpu.dealloc async [%t7] %m : memref<16xf32>
    %t9 = gpu.dealloc async [%t8] %d : memref<16xf32>
    gpu.wait [%t9]
    gpu.host_register %u : memref<*xf16>
    gpu.host_unregister %u : memref<*xf16>
    return
  }
}
