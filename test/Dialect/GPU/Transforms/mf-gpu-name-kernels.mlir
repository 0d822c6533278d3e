// RUN: meshfold-opt %s --mf-gpu-name-kernels | FileCheck %s
// RUN: meshfold-opt %s --mf-gpu-name-kernels="module=seed_kernels" --gpu-kernel-outlining | FileCheck %s --check-prefix=OUTLINED

// Each gpu.launch is named after the op of its location (without the moe.
// prefix; arith.addf gives arith_addf) and a counter, all in one module, so
// that outlining makes one gpu.module with every kernel.
// CHECK-LABEL: func.func @host
// CHECK:         gpu.launch {{.*}} module(@prefill_kernels) function(@rms_norm_0)
// CHECK:         gpu.launch {{.*}} module(@prefill_kernels) function(@arith_addf_1)
// CHECK:         gpu.launch {{.*}} module(@prefill_kernels) function(@rms_norm_2)

// OUTLINED:      gpu.launch_func @seed_kernels::@rms_norm_0
// OUTLINED:      gpu.launch_func @seed_kernels::@arith_addf_1
// OUTLINED:      gpu.launch_func @seed_kernels::@rms_norm_2
// OUTLINED:      gpu.module @seed_kernels
// OUTLINED-NEXT:   gpu.func @rms_norm_0
// OUTLINED:        gpu.func @arith_addf_1
// OUTLINED:        gpu.func @rms_norm_2
// OUTLINED-NOT:  gpu.module
module {
  func.func @host(%a: memref<16xf32>) {
    %c1 = arith.constant 1 : index
    %c16 = arith.constant 16 : index
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1) threads(%tx, %ty, %tz) in (%sx = %c16, %sy = %c1, %sz = %c1) {
      %v = memref.load %a[%tx] : memref<16xf32>
      %s = arith.addf %v, %v : f32
      memref.store %s, %a[%tx] : memref<16xf32>
      gpu.terminator
    } loc("moe.rms_norm"("x.mlir":3:4))
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1) threads(%tx, %ty, %tz) in (%sx = %c16, %sy = %c1, %sz = %c1) {
      gpu.terminator
    } loc("arith.addf"("x.mlir":5:4))
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1) threads(%tx, %ty, %tz) in (%sx = %c16, %sy = %c1, %sz = %c1) {
      gpu.terminator
    } loc("moe.rms_norm"("x.mlir":7:4))
    return
  }
}
