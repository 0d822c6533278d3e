// nvgpu.tma.create.descriptor (wgmma / TMA kernels on sm_90a) lowers to
// mgpuTensorMapEncodeTiledMemref.
!tmap = !nvgpu.tensormap.descriptor<tensor = memref<128x64xf16, 3>, swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>
func.func @tma(%u: memref<*xf16>) -> !tmap {
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %d = nvgpu.tma.create.descriptor %u box[%c128, %c64] : memref<*xf16> -> !tmap
  return %d : !tmap
}
