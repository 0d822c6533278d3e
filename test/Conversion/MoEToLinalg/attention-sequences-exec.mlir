// REQUIRES: mlir-runner
// RUN: meshfold-opt %s --convert-moe-to-linalg \
// RUN:   --convert-elementwise-to-linalg \
// RUN:   --one-shot-bufferize="bufferize-function-boundaries" \
// RUN:   --convert-linalg-to-loops --lower-affine --convert-scf-to-cf \
// RUN:   --expand-strided-metadata --lower-affine --finalize-memref-to-llvm \
// RUN:   --convert-math-to-llvm --convert-math-to-libm --convert-arith-to-llvm \
// RUN:   --convert-func-to-llvm --convert-cf-to-llvm --reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils \
// RUN: | FileCheck %s
// RUN: meshfold-opt %s --convert-moe-to-linalg="fuse-attention=false" \
// RUN:   --convert-elementwise-to-linalg \
// RUN:   --one-shot-bufferize="bufferize-function-boundaries" \
// RUN:   --convert-linalg-to-loops --lower-affine --convert-scf-to-cf \
// RUN:   --expand-strided-metadata --lower-affine --finalize-memref-to-llvm \
// RUN:   --convert-math-to-llvm --convert-math-to-libm --convert-arith-to-llvm \
// RUN:   --convert-func-to-llvm --convert-cf-to-llvm --reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils \
// RUN: | FileCheck %s

// A decode step batches requests: a global position is sequence * 2^32 +
// place. Attention lets a query see only keys of its own sequence (and not
// later), with both lowerings; RoPE rotates by the place alone.
//
// Keys: sequence 0 at places 0, 1 (v = 1, 3), sequence 1 at places 0, 1
// (v = 10, 30), sequence 2 at place 0 (v = 100). Queries are 0, so a
// query's output is the mean of the values it sees: place 1 of sequence 0
// gives 2; place 1 of sequence 1 gives 20 (not 11: sequence 0's keys are
// earlier positions, but another sequence's); place 0 of sequence 1 gives
// 10; place 5 of sequence 3, which has no key, gives 0.
// CHECK: {{^}}[2, 20, 10, 0]{{$}}
// RoPE of (1, 0) at place 3 of sequence 0 and of sequence 1: cos 3, sin 3
// both times.
// CHECK: {{^}}[-0.98999{{[0-9]*}}, 0.14112{{[0-9]*}}, -0.98999{{[0-9]*}}, 0.14112{{[0-9]*}}]{{$}}

func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @main() {
  %s1 = arith.constant 4294967296 : i64
  %c0 = arith.constant 0 : i64
  %c1 = arith.constant 1 : i64
  %c5 = arith.constant 5 : i64
  %s1p1 = arith.addi %s1, %c1 : i64
  %s2 = arith.addi %s1, %s1 : i64
  %s3 = arith.addi %s2, %s1 : i64
  %s3p5 = arith.addi %s3, %c5 : i64
  %kp = tensor.from_elements %c0, %c1, %s1, %s1p1, %s2 : tensor<5xi64>
  %qp = tensor.from_elements %c1, %s1p1, %s1, %s3p5 : tensor<4xi64>
  %q = arith.constant dense<0.0> : tensor<4x1x2xf32>
  %k = arith.constant dense<0.5> : tensor<5x1x2xf32>
  %v = arith.constant dense<[[[1.0, 1.0]], [[3.0, 3.0]], [[10.0, 10.0]], [[30.0, 30.0]], [[100.0, 100.0]]]> : tensor<5x1x2xf32>
  %qd = tensor.cast %q : tensor<4x1x2xf32> to tensor<?x1x2xf32>
  %kd = tensor.cast %k : tensor<5x1x2xf32> to tensor<?x1x2xf32>
  %vd = tensor.cast %v : tensor<5x1x2xf32> to tensor<?x1x2xf32>
  %qpd = tensor.cast %qp : tensor<4xi64> to tensor<?xi64>
  %kpd = tensor.cast %kp : tensor<5xi64> to tensor<?xi64>
  %o = moe.attention %qd, %kd, %vd, %qpd, %kpd {scale = 1.0 : f32} : tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x1x2xf32>
  %os = tensor.cast %o : tensor<?x1x2xf32> to tensor<4x1x2xf32>
  %col = tensor.extract_slice %os[0, 0, 0] [4, 1, 1] [1, 1, 1] : tensor<4x1x2xf32> to tensor<4xf32>
  %e = tensor.empty() : tensor<4xf32>
  %c = linalg.copy ins(%col : tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %m = bufferization.to_buffer %c : tensor<4xf32> to memref<4xf32>
  %u = memref.cast %m : memref<4xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()

  %c3 = arith.constant 3 : i64
  %s1p3 = arith.addi %s1, %c3 : i64
  %rp = tensor.from_elements %c3, %s1p3 : tensor<2xi64>
  %x = arith.constant dense<[[[1.0, 0.0]], [[1.0, 0.0]]]> : tensor<2x1x2xf32>
  %r = moe.rope %x, %rp {theta = 10000.0 : f32} : tensor<2x1x2xf32>, tensor<2xi64> -> tensor<2x1x2xf32>
  %rf = tensor.collapse_shape %r [[0, 1, 2]] : tensor<2x1x2xf32> into tensor<4xf32>
  %e2 = tensor.empty() : tensor<4xf32>
  %c2 = linalg.copy ins(%rf : tensor<4xf32>) outs(%e2 : tensor<4xf32>) -> tensor<4xf32>
  %m2 = bufferization.to_buffer %c2 : tensor<4xf32> to memref<4xf32>
  %u2 = memref.cast %m2 : memref<4xf32> to memref<*xf32>
  call @printMemrefF32(%u2) : (memref<*xf32>) -> ()
  return
}
