// REQUIRES: mlir-runner
// RUN: meshfold-opt %s --convert-moe-to-linalg --convert-elementwise-to-linalg \
// RUN:   --canonicalize --cse \
// RUN:   --one-shot-bufferize="bufferize-function-boundaries" \
// RUN:   --buffer-deallocation-pipeline \
// RUN:   --convert-linalg-to-loops --lower-affine --convert-scf-to-cf \
// RUN:   --expand-strided-metadata --lower-affine --finalize-memref-to-llvm \
// RUN:   --convert-math-to-llvm --convert-math-to-libm --convert-arith-to-llvm \
// RUN:   --convert-func-to-llvm --convert-cf-to-llvm --reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils \
// RUN: | FileCheck %s

// The routed experts, grouped by expert and run: 5 tokens (not a multiple of
// the 4 experts nor of anything else), d = 3, ffn = 2. Every weight is a
// multiple of 1/8, so that bf16 weights hold the same values as f32 ones.
// The expected numbers come from a float64 evaluation of the op's definition
// (6 digits as printed; float32 rounds to the same digits).

// (a) top-2, no token routed to expert 1, experts 0, 2 and 3 shared.
// CHECK: rank = 2 offset = 0 sizes = [5, 3] strides = [3, 1] data =
// CHECK-NEXT: {{^}}[[A0:\[\[0.0896304, +0.111464, +-0.185562\],]]
// CHECK-NEXT: {{^}}[[A1: \[0.118336, +-0.0750401, +-0.161777\],]]
// CHECK-NEXT: {{^}}[[A2: \[0.0735289, +-0.0243611, +0.10768\],]]
// CHECK-NEXT: {{^}}[[A3: \[0.0535023, +-0.0171545, +0.0337934\],]]
// CHECK-NEXT: {{^}}[[A4: \[-0.0600263, +-0.122611, +0.0357005\]\]]]{{$}}

// (b) top-1, every token to expert 3 (the others have no rows).
// CHECK: rank = 2 offset = 0 sizes = [5, 3] strides = [3, 1] data =
// CHECK-NEXT: {{^}}[[B0:\[\[0.0387253, +-0.0113732, +-0.021384\],]]
// CHECK-NEXT: {{^}}[[B1: \[0.23037, +-0.0706657, +-0.173838\],]]
// CHECK-NEXT: {{^}}[[B2: \[0.071573, +-0.019543, +-0.0166252\],]]
// CHECK-NEXT: {{^}}[[B3: \[-0.0926209, +0.0192747, +-0.0717262\],]]
// CHECK-NEXT: {{^}}[[B4: \[-0.111204, +0.0412588, +0.194696\]\]]]{{$}}

// (c) moe.expert_ffn with every row on expert 3: the values of (b).
// CHECK: rank = 2 offset = 0 sizes = [5, 3] strides = [3, 1] data =
// CHECK-NEXT: {{^}}[[B0]]
// CHECK-NEXT: {{^}}[[B1]]
// CHECK-NEXT: {{^}}[[B2]]
// CHECK-NEXT: {{^}}[[B3]]
// CHECK-NEXT: {{^}}[[B4]]{{$}}

// (d) moe.expert_ffn, rows on experts 1, 4, 1, -1, 0. Ids outside [0, 4)
// belong to no expert: this lowering leaves their rows zero.
// CHECK: rank = 2 offset = 0 sizes = [5, 3] strides = [3, 1] data =
// CHECK-NEXT: {{^}}[[D0:\[\[-0.128951, +-0.077073, +0.354571\],]]
// CHECK-NEXT: {{^}}[[D1: \[0, +0, +0\],]]
// CHECK-NEXT: {{^}}[[D2: \[-0.0952712, +0.0783773, +-0.083855\],]]
// CHECK-NEXT: {{^}}[[D1]]
// CHECK-NEXT: {{^}}[[D4: \[-0.0429672, +-0.177234, +-0.0172981\]\]]]{{$}}

// (e) (a) with bf16 weights, widened to f32: the values of (a).
// CHECK: rank = 2 offset = 0 sizes = [5, 3] strides = [3, 1] data =
// CHECK-NEXT: {{^}}[[A0]]
// CHECK-NEXT: {{^}}[[A1]]
// CHECK-NEXT: {{^}}[[A2]]
// CHECK-NEXT: {{^}}[[A3]]
// CHECK-NEXT: {{^}}[[A4]]{{$}}

func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @print(%t: tensor<5x3xf32>) {
  %m = bufferization.to_buffer %t : tensor<5x3xf32> to memref<5x3xf32>
  %u = memref.cast %m : memref<5x3xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  %x = arith.constant dense<[[0.5, -1.0, 0.25], [1.5, 0.75, -0.5], [-0.25, 0.5, 1.0], [2.0, -0.5, -1.5], [0.125, 1.25, -0.75]]> : tensor<5x3xf32>
  // w1, w3: [E = 4, ffn = 2, d = 3]; w2: [E, d, ffn].
  %w1 = arith.constant dense<[[[0.25, -0.5, 0.5], [-0.875, -0.75, -0.625]], [[0.375, -0.875, 1.0], [-0.25, -0.875, -0.75]], [[0.625, 0.625, -0.75], [-0.125, -0.75, 0.625]], [[-0.875, -0.625, -0.125], [-0.875, 0.5, -0.875]]]> : tensor<4x2x3xf32>
  %w3 = arith.constant dense<[[[-0.125, -0.875, -0.5], [0.125, 0.625, -0.5]], [[-0.625, 0.125, -0.375], [-0.625, -0.25, 0.375]], [[-0.625, -0.75, -0.875], [-0.25, 0.875, 0.625]], [[0.25, 0.75, 0.75], [0.375, 0.125, -0.125]]]> : tensor<4x2x3xf32>
  %w2 = arith.constant dense<[[[-0.375, -0.125], [-0.75, 0.125], [1.0, 0.875]], [[0.25, 0.75], [0.125, -0.75], [-0.625, 1.0]], [[0.625, -0.375], [0.25, -0.5], [0.875, 0.625]], [[-0.875, -0.75], [0.25, 0.25], [0.375, 0.875]]]> : tensor<4x3x2xf32>
  %xd = tensor.cast %x : tensor<5x3xf32> to tensor<?x3xf32>

  // (a)
  %ids = arith.constant dense<[[2, 0], [0, 3], [3, 2], [0, 2], [3, 0]]> : tensor<5x2xi64>
  %wts = arith.constant dense<[[0.75, 0.25], [0.5, 0.5], [0.625, 0.375], [0.875, 0.125], [0.25, 0.75]]> : tensor<5x2xf32>
  %idsd = tensor.cast %ids : tensor<5x2xi64> to tensor<?x2xi64>
  %wtsd = tensor.cast %wts : tensor<5x2xf32> to tensor<?x2xf32>
  %a = moe.experts %xd, %wtsd, %idsd, %w1, %w2, %w3 : tensor<?x3xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<4x2x3xf32>, tensor<4x3x2xf32>, tensor<4x2x3xf32> -> tensor<?x3xf32>
  %as = tensor.cast %a : tensor<?x3xf32> to tensor<5x3xf32>
  call @print(%as) : (tensor<5x3xf32>) -> ()

  // (b)
  %ids1 = arith.constant dense<3> : tensor<5x1xi64>
  %ones = arith.constant dense<1.0> : tensor<5x1xf32>
  %b = moe.experts %x, %ones, %ids1, %w1, %w2, %w3 : tensor<5x3xf32>, tensor<5x1xf32>, tensor<5x1xi64>, tensor<4x2x3xf32>, tensor<4x3x2xf32>, tensor<4x2x3xf32> -> tensor<5x3xf32>
  call @print(%b) : (tensor<5x3xf32>) -> ()

  // (c)
  %rows3 = arith.constant dense<3> : tensor<5xi64>
  %c = moe.expert_ffn %x, %rows3, %w1, %w2, %w3 : tensor<5x3xf32>, tensor<5xi64>, tensor<4x2x3xf32>, tensor<4x3x2xf32>, tensor<4x2x3xf32> -> tensor<5x3xf32>
  call @print(%c) : (tensor<5x3xf32>) -> ()

  // (d)
  %rows = arith.constant dense<[1, 4, 1, -1, 0]> : tensor<5xi64>
  %rowsd = tensor.cast %rows : tensor<5xi64> to tensor<?xi64>
  %d = moe.expert_ffn %xd, %rowsd, %w1, %w2, %w3 : tensor<?x3xf32>, tensor<?xi64>, tensor<4x2x3xf32>, tensor<4x3x2xf32>, tensor<4x2x3xf32> -> tensor<?x3xf32>
  %ds = tensor.cast %d : tensor<?x3xf32> to tensor<5x3xf32>
  call @print(%ds) : (tensor<5x3xf32>) -> ()

  // (e)
  %w1h = arith.truncf %w1 : tensor<4x2x3xf32> to tensor<4x2x3xbf16>
  %w2h = arith.truncf %w2 : tensor<4x3x2xf32> to tensor<4x3x2xbf16>
  %w3h = arith.truncf %w3 : tensor<4x2x3xf32> to tensor<4x2x3xbf16>
  %e = moe.experts %xd, %wtsd, %idsd, %w1h, %w2h, %w3h : tensor<?x3xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<4x2x3xbf16>, tensor<4x3x2xbf16>, tensor<4x2x3xbf16> -> tensor<?x3xf32>
  %es = tensor.cast %e : tensor<?x3xf32> to tensor<5x3xf32>
  call @print(%es) : (tensor<5x3xf32>) -> ()
  return
}
