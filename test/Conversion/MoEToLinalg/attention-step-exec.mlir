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
// RUN: meshfold-opt %s --convert-moe-to-linalg="attention-tile=32" \
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

// A decode step's attention (its function is a moe.decode_step) whose rows
// are one request's decoded token and another's prompt chunk
// (--prefill-chunk, or the rows past a cached prefix): query tiles by
// sequence (one tile for the decoded row; the chunk's 70 rows in tiles of
// 64 and 6, or 32, 32 and 6), with the materialised lowering against the
// same values.
//
// Keys, as moe.kv_history lays them out: the cached rows of sequence 0
// (places 0..9) and of sequence 1 (places 0..4), then the step's own rows:
// sequence 1 at place 5, sequence 0 at places 10..79. Queries are the
// step's rows. Every score is 0 (queries are 0), so a query's output is
// the mean of the values it sees: a key's value is its place, plus 1000 in
// sequence 1. Sequence 1's row sees places 0..5 (1002.5); sequence 0's row
// at place p sees 0..p (p / 2), never sequence 1's keys between them.
// CHECK: {{^}}[1002.5, 5, 5.5, 6, 6.5, 7, 7.5, 8, 8.5, 9, 9.5, 10, 10.5, 11, 11.5, 12, 12.5, 13, 13.5, 14, 14.5, 15, 15.5, 16, 16.5, 17, 17.5, 18, 18.5, 19, 19.5, 20, 20.5, 21, 21.5, 22, 22.5, 23, 23.5, 24, 24.5, 25, 25.5, 26, 26.5, 27, 27.5, 28, 28.5, 29, 29.5, 30, 30.5, 31, 31.5, 32, 32.5, 33, 33.5, 34, 34.5, 35, 35.5, 36, 36.5, 37, 37.5, 38, 38.5, 39, 39.5]{{$}}

func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @step(%q: tensor<?x1x2xf32>, %k: tensor<?x1x2xf32>, %v: tensor<?x1x2xf32>, %qp: tensor<?xi64>, %kp: tensor<?xi64>) -> tensor<?x1x2xf32> attributes {moe.decode_step} {
  %o = moe.attention %q, %k, %v, %qp, %kp {scale = 1.0 : f32} : tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x1x2xf32>
  return %o : tensor<?x1x2xf32>
}

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c10 = arith.constant 10 : index
  %c15 = arith.constant 15 : index
  %c16 = arith.constant 16 : index
  %c86 = arith.constant 86 : index
  %s1 = arith.constant 4294967296 : i64
  %c0i = arith.constant 0 : i64
  // Key positions and values: [0, 10) sequence 0 places 0..9; [10, 15)
  // sequence 1 places 0..4; 15 sequence 1 place 5; [16, 86) sequence 0
  // places 10..79.
  %kp0 = tensor.empty() : tensor<86xi64>
  %v0 = tensor.empty() : tensor<86x1x2xf32>
  %kv:2 = scf.for %j = %c0 to %c86 step %c1 iter_args(%kp = %kp0, %v = %v0) -> (tensor<86xi64>, tensor<86x1x2xf32>) {
    %ji = arith.index_cast %j : index to i64
    %lt10 = arith.cmpi ult, %j, %c10 : index
    %lt16 = arith.cmpi ult, %j, %c16 : index
    %c10i = arith.constant 10 : i64
    %c6i = arith.constant 6 : i64
    %p1 = arith.subi %ji, %c10i : i64
    %p0 = arith.subi %ji, %c6i : i64
    %place = arith.select %lt10, %ji, %p1 : i64
    %place2 = arith.select %lt16, %place, %p0 : i64
    %true = arith.constant true
    %notLt10 = arith.xori %lt10, %true : i1
    %seq1 = arith.andi %lt16, %notLt10 : i1
    %base = arith.select %seq1, %s1, %c0i : i64
    %pos = arith.addi %base, %place2 : i64
    %kp2 = tensor.insert %pos into %kp[%j] : tensor<86xi64>
    %pf = arith.sitofp %place2 : i64 to f32
    %k1000 = arith.constant 1000.0 : f32
    %zero = arith.constant 0.0 : f32
    %add = arith.select %seq1, %k1000, %zero : f32
    %val = arith.addf %pf, %add : f32
    %v1 = tensor.insert %val into %v[%j, %c0, %c0] : tensor<86x1x2xf32>
    %v2 = tensor.insert %val into %v1[%j, %c0, %c1] : tensor<86x1x2xf32>
    scf.yield %kp2, %v2 : tensor<86xi64>, tensor<86x1x2xf32>
  }
  %qp = tensor.extract_slice %kv#0[15] [71] [1] : tensor<86xi64> to tensor<71xi64>
  %q = arith.constant dense<0.0> : tensor<71x1x2xf32>
  %k = arith.constant dense<0.5> : tensor<86x1x2xf32>
  %qd = tensor.cast %q : tensor<71x1x2xf32> to tensor<?x1x2xf32>
  %kd = tensor.cast %k : tensor<86x1x2xf32> to tensor<?x1x2xf32>
  %vd = tensor.cast %kv#1 : tensor<86x1x2xf32> to tensor<?x1x2xf32>
  %qpd = tensor.cast %qp : tensor<71xi64> to tensor<?xi64>
  %kpd = tensor.cast %kv#0 : tensor<86xi64> to tensor<?xi64>
  %o = call @step(%qd, %kd, %vd, %qpd, %kpd) : (tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?x1x2xf32>, tensor<?xi64>, tensor<?xi64>) -> tensor<?x1x2xf32>
  %os = tensor.cast %o : tensor<?x1x2xf32> to tensor<71x1x2xf32>
  %col = tensor.extract_slice %os[0, 0, 1] [71, 1, 1] [1, 1, 1] : tensor<71x1x2xf32> to tensor<71xf32>
  %e = tensor.empty() : tensor<71xf32>
  %c = linalg.copy ins(%col : tensor<71xf32>) outs(%e : tensor<71xf32>) -> tensor<71xf32>
  %m = bufferization.to_buffer %c : tensor<71xf32> to memref<71xf32>
  %u = memref.cast %m : memref<71xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}
