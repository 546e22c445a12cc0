// Malformed IR: hybridgen-opt reports a located diagnostic and exits non-zero, never crashes.
// RUN: not hybridgen-opt %s -split-input-file 2>&1 | FileCheck %s

// A split attribute missing its point.
// CHECK: malformed.mlir:[[# @LINE + 2]]:{{[0-9]+}}: error: {{.*}}expected 'point'
func.func @missing_point(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], 8>}
  return
}

// -----

// An attention without its kv clause.
// CHECK: malformed.mlir:[[# @LINE + 2]]:{{[0-9]+}}: error: {{.*}}expected 'kv'
func.func @missing_kv(%q: memref<1x8x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  hg.attention q(%q : memref<1x8x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// An attention without its scale.
// CHECK: malformed.mlir:[[# @LINE + 2]]:{{[0-9]+}}: error: {{.*}}'hg.attention' op requires attribute 'scale'
func.func @missing_scale(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>)
  return
}

// -----

// An unknown split field.
// CHECK: malformed.mlir:[[# @LINE + 2]]:{{[0-9]+}}: error: {{.*}}unknown split field 'fast'
func.func @unknown_field(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], point = 8, fast>}
  return
}

// -----

// An unknown merge mode.
// CHECK: malformed.mlir:[[# @LINE + 2]]:{{[0-9]+}}: error: {{.*}}unknown merge mode 'mean' (expected lse)
func.func @unknown_merge(%q: memref<1x8x64xf32>, %k: memref<4x2x16x64xf32>, %bt: memref<1x4xi32>, %n: memref<1xi32>) {
  hg.attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>) table(%bt : memref<1x4xi32>) lens(%n : memref<1xi32>) out(%q : memref<1x8x64xf32>) {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], point = 8, merge = mean>}
  return
}
