// RUN: meshfold-opt %s --pass-pipeline="builtin.module(func.func(mf-math-polynomial-exp))" | FileCheck %s

// f32 exp, scalar or vector, becomes arithmetic (a clamp, range reduction
// by ln 2, a polynomial of FMAs, the power of two built in the exponent
// bits): no call that would stop the loop vectorizer.
// CHECK-LABEL: func.func @scalar
// CHECK-NOT:     math.exp
// CHECK:         arith.constant 1.44269502 : f32
// CHECK:         math.floor
// CHECK:         math.fma
// CHECK:         arith.shli
// CHECK:         %[[P2:.+]] = arith.bitcast %{{.+}} : i32 to f32
// CHECK:         %[[E:.+]] = arith.mulf %{{.+}}, %[[P2]] : f32
// CHECK:         return %[[E]]
func.func @scalar(%x: f32) -> f32 {
  %e = math.exp %x : f32
  return %e : f32
}

// CHECK-LABEL: func.func @vector
// CHECK-NOT:     math.exp
// CHECK:         arith.bitcast %{{.+}} : vector<16xi32> to vector<16xf32>
func.func @vector(%x: vector<16xf32>) -> vector<16xf32> {
  %e = math.exp %x : vector<16xf32>
  return %e : vector<16xf32>
}

// Other functions, and f64, stay libm's.
// CHECK-LABEL: func.func @others
// CHECK:         math.exp %{{.+}} : f64
// CHECK:         math.sin %{{.+}} : f32
func.func @others(%x: f64, %y: f32) -> (f64, f32) {
  %e = math.exp %x : f64
  %s = math.sin %y : f32
  return %e, %s : f64, f32
}
