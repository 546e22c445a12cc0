// RUN: hybridgen-opt %s -split-input-file -hg-expand-math | FileCheck %s

// Vector exp becomes a polynomial: no math.exp (so no per-lane expf call) survives.
// CHECK-LABEL: func.func @vector_exp
// CHECK-NOT: math.exp
// CHECK: math.fma
// CHECK-NOT: math.exp
// CHECK: return
func.func @vector_exp(%x: vector<16xf32>) -> vector<16xf32> {
  %y = math.exp %x : vector<16xf32>
  return %y : vector<16xf32>
}

// -----

// Scalar exp and tanh (the softcap) are expanded too.
// CHECK-LABEL: func.func @scalar_exp_tanh
// CHECK-NOT: math.exp
// CHECK-NOT: math.tanh
// CHECK: return
func.func @scalar_exp_tanh(%x: f32) -> f32 {
  %e = math.exp %x : f32
  %t = math.tanh %e : f32
  return %t : f32
}

// -----

// f64 has no polynomial here: it is left alone rather than approximated with f32 precision.
// CHECK-LABEL: func.func @f64_untouched
// CHECK: math.exp %{{.*}} : f64
func.func @f64_untouched(%x: f64) -> f64 {
  %y = math.exp %x : f64
  return %y : f64
}
