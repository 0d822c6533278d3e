// REQUIRES: mlir-runner
// RUN: meshfold-opt %s --convert-moe-to-linalg --convert-elementwise-to-linalg \
// RUN:   --one-shot-bufferize="bufferize-function-boundaries" \
// RUN:   --convert-linalg-to-loops --lower-affine --convert-scf-to-cf \
// RUN:   --expand-strided-metadata --lower-affine --finalize-memref-to-llvm \
// RUN:   --convert-math-to-llvm --convert-math-to-libm --convert-arith-to-llvm \
// RUN:   --convert-func-to-llvm --convert-cf-to-llvm --reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils \
// RUN: | FileCheck %s
// RUN: meshfold-opt %s --convert-moe-to-linalg="group-experts=false" --convert-elementwise-to-linalg \
// RUN:   --one-shot-bufferize="bufferize-function-boundaries" \
// RUN:   --convert-linalg-to-loops --lower-affine --convert-scf-to-cf \
// RUN:   --expand-strided-metadata --lower-affine --finalize-memref-to-llvm \
// RUN:   --convert-math-to-llvm --convert-math-to-libm --convert-arith-to-llvm \
// RUN:   --convert-func-to-llvm --convert-cf-to-llvm --reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils \
// RUN: | FileCheck %s

// Expert parallelism's numerics, run: with one-hot routing (top_k = 1, weight
// 1.0), moe.experts equals moe.expert_ffn with each row's expert. 4 tokens,
// d = 2, 3 experts of ffn 2; the tokens go to experts 2, 0, 2, 1.
// The expected numbers are computed by hand (float64, 6 digits as printed).
// Both lowerings of the routed experts (grouped by expert, and per row).

// (a) moe.experts.
// CHECK: rank = 2 offset = 0 sizes = [4, 2] strides = [2, 1] data =
// CHECK-NEXT: {{^}}[[Y0:\[\[-0.32523, +-0.41488\],]]
// CHECK-NEXT: {{^}}[[Y1: \[-0.337397, +0.449879\],]]
// CHECK-NEXT: {{^}}[[Y2: \[-1.54802, +1.0388\],]]
// CHECK-NEXT: {{^}}[[Y3: \[0.031538, +-0.0106752\]\]]]{{$}}

// (b) moe.expert_ffn: the same values.
// CHECK: rank = 2 offset = 0 sizes = [4, 2] strides = [2, 1] data =
// CHECK-NEXT: {{^}}[[Y0]]
// CHECK-NEXT: {{^}}[[Y1]]
// CHECK-NEXT: {{^}}[[Y2]]
// CHECK-NEXT: {{^}}[[Y3]]{{$}}

func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @print(%t: tensor<4x2xf32>) {
  %m = bufferization.to_buffer %t : tensor<4x2xf32> to memref<4x2xf32>
  %u = memref.cast %m : memref<4x2xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  %x = arith.constant dense<[[1.0, -0.5], [0.25, 2.0], [-1.5, 0.75], [0.5, 0.5]]> : tensor<4x2xf32>
  // w1, w3: [E = 3, ffn = 2, d = 2]; w2: [E, d, ffn].
  %w1 = arith.constant dense<[[[0.1, 0.2], [-0.3, 0.4]], [[0.5, -0.6], [0.7, 0.8]], [[-0.9, 1.0], [1.1, -0.2]]]> : tensor<3x2x2xf32>
  %w3 = arith.constant dense<[[[0.3, -0.1], [0.2, 0.6]], [[-0.4, 0.5], [0.9, -0.7]], [[0.8, 0.1], [-0.5, 0.3]]]> : tensor<3x2x2xf32>
  %w2 = arith.constant dense<[[[1.0, -0.5], [0.25, 0.75]], [[-0.8, 0.6], [0.4, -0.2]], [[0.7, 0.3], [-0.6, 0.9]]]> : tensor<3x2x2xf32>
  %ids = arith.constant dense<[[2], [0], [2], [1]]> : tensor<4x1xi64>
  %ones = arith.constant dense<1.0> : tensor<4x1xf32>
  %rows = arith.constant dense<[2, 0, 2, 1]> : tensor<4xi64>

  %a = moe.experts %x, %ones, %ids, %w1, %w2, %w3 : tensor<4x2xf32>, tensor<4x1xf32>, tensor<4x1xi64>, tensor<3x2x2xf32>, tensor<3x2x2xf32>, tensor<3x2x2xf32> -> tensor<4x2xf32>
  %b = moe.expert_ffn %x, %rows, %w1, %w2, %w3 : tensor<4x2xf32>, tensor<4xi64>, tensor<3x2x2xf32>, tensor<3x2x2xf32>, tensor<3x2x2xf32> -> tensor<4x2xf32>

  call @print(%a) : (tensor<4x2xf32>) -> ()
  call @print(%b) : (tensor<4x2xf32>) -> ()
  return
}
