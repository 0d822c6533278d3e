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

// DeepSeek-V3's routing, run: 8 experts in 4 groups of 2, the best 2 groups
// kept, top 3, renormalised, scaled by 2. With d = 1 and x = 1 the gate's
// column is the logits. The expected numbers are computed by hand (in f32,
// 6 digits as printed).
//
// (a) logits [2, -2 | -2, 2 | 3, -6 | 2, -2], bias [0.05, 0.05 | 0 ...]:
// s = sigmoid(logits) = [0.880797, 0.119203 | 0.119203, 0.880797 |
// 0.952574, 0.002473 | 0.880797, 0.119203]; the choice scores add the
// bias to group 0 only. Group scores (the sum of each group's top two):
// 1.1, 1.0, 0.955, 1.0. Groups 0 and 1 are kept: group 3 ties with group 1
// and loses to the lower index. Expert 4 has the highest score but its
// group is not kept. The top 3 of the kept groups are experts 0 (0.930797),
// 3 (0.880797) and 1 (0.169203; expert 2 has 0.119203). The weights are s
// at them, not the biased scores: [0.880797, 0.880797, 0.119203] / 1.880797
// * 2 = [0.936621, 0.936621, 0.126758].
// CHECK: rank = 2 offset = 0 sizes = [1, 3] strides = [3, 1] data =
// CHECK-NEXT: {{^}}{{\[\[}}0,   3,   1]]
// CHECK: rank = 2 offset = 0 sizes = [1, 3] strides = [3, 1] data =
// CHECK-NEXT: {{^}}{{\[\[}}0.936621,   0.936621,   0.126758]]
//
// (b) Dropped groups score -inf (as transformers 5 and DeepSeek's
// inference code mask them): a bias of -0.6 makes every choice score
// negative. Logits [0.2, 0.1 | 0.3, 0.2 | 0, -0.1 | -0.2, -0.3] give group
// scores -0.125187, -0.0757235, -0.224979, -0.324277, so groups 1, 0 and 2
// are kept (topk_group 3). The top 3 come from them although every score is
// below 0: experts 2 (-0.0255575), then 0 and 3 (-0.0501660 each, an exact
// tie, both chosen). Filling 0 instead (transformers 4) would pick experts 6
// and 7 of the dropped group 3. The weights are s = [0.574443, 0.549834,
// 0.549834] over their sum, times 2.
// CHECK: rank = 2 offset = 0 sizes = [1, 3] strides = [3, 1] data =
// CHECK-NEXT: {{^}}{{\[\[}}2,   0,   3]]
// CHECK: rank = 2 offset = 0 sizes = [1, 3] strides = [3, 1] data =
// CHECK-NEXT: {{^}}{{\[\[}}0.686266,   0.656867,   0.656867]]
//
// (c) Exact ties: equal logits give equal scores everywhere. The kept groups
// are 0 and 1 and the experts 0, 1 and 2, the lowest indices, as torch's
// CUDA topk keeps the first of the values equal to the k-th (on the CPU,
// torch.topk picks among ties by its selection algorithm: of four equal
// group scores it keeps groups 2 and 3). Each weight is 1/3 times 2.
// CHECK: rank = 2 offset = 0 sizes = [1, 3] strides = [3, 1] data =
// CHECK-NEXT: {{^}}{{\[\[}}0,   1,   2]]
// CHECK: rank = 2 offset = 0 sizes = [1, 3] strides = [3, 1] data =
// CHECK-NEXT: {{^}}{{\[\[}}0.666667,   0.666667,   0.666667]]

func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}
func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}

func.func @print(%w: tensor<1x3xf32>, %i: tensor<1x3xi64>) {
  %mi = bufferization.to_buffer %i : tensor<1x3xi64> to memref<1x3xi64>
  %ui = memref.cast %mi : memref<1x3xi64> to memref<*xi64>
  call @printMemrefI64(%ui) : (memref<*xi64>) -> ()
  %mw = bufferization.to_buffer %w : tensor<1x3xf32> to memref<1x3xf32>
  %uw = memref.cast %mw : memref<1x3xf32> to memref<*xf32>
  call @printMemrefF32(%uw) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  %x = arith.constant dense<[[1.0]]> : tensor<1x1xf32>
  %g = arith.constant dense<[[2.0], [-2.0], [-2.0], [2.0], [3.0], [-6.0], [2.0], [-2.0]]> : tensor<8x1xf32>
  %b = arith.constant dense<[0.05, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]> : tensor<8xf32>
  %w, %i = moe.router %x, %g bias %b {n_group = 4 : i64, renormalize, scaling = 2.0 : f32, sigmoid, top_k = 3 : i64, topk_group = 2 : i64} : tensor<1x1xf32>, tensor<8x1xf32>, tensor<8xf32> -> tensor<1x3xf32>, tensor<1x3xi64>
  call @print(%w, %i) : (tensor<1x3xf32>, tensor<1x3xi64>) -> ()

  %g0 = arith.constant dense<[[0.2], [0.1], [0.3], [0.2], [0.0], [-0.1], [-0.2], [-0.3]]> : tensor<8x1xf32>
  %b0 = arith.constant dense<-0.6> : tensor<8xf32>
  %w0, %i0 = moe.router %x, %g0 bias %b0 {n_group = 4 : i64, renormalize, scaling = 2.0 : f32, sigmoid, top_k = 3 : i64, topk_group = 3 : i64} : tensor<1x1xf32>, tensor<8x1xf32>, tensor<8xf32> -> tensor<1x3xf32>, tensor<1x3xi64>
  call @print(%w0, %i0) : (tensor<1x3xf32>, tensor<1x3xi64>) -> ()

  %gt = arith.constant dense<0.5> : tensor<8x1xf32>
  %wt, %it = moe.router %x, %gt bias %b0 {n_group = 4 : i64, renormalize, scaling = 2.0 : f32, sigmoid, top_k = 3 : i64, topk_group = 2 : i64} : tensor<1x1xf32>, tensor<8x1xf32>, tensor<8xf32> -> tensor<1x3xf32>, tensor<1x3xi64>
  call @print(%wt, %it) : (tensor<1x3xf32>, tensor<1x3xi64>) -> ()
  return
}
