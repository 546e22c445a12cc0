// RUN: hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu="vector-bits=256" | FileCheck %s
// RUN: hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu="vector-bits=256" -hg-cpu-pipeline="aot=true target-cpu=x86-64-v3" | FileCheck %s --check-prefix=LLVM
// RUN: not hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu="vector-bits=100" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu="vector-bits=512" | FileCheck %s --check-prefix=Z512

// vector-bits=256 (AVX2: 16 ymm registers) sizes the dense kernel for 8-lane vectors: dot slices,
// V accumulator tiles of 4 heads x 16 lanes (8 ymm, not 4 x 32 = 16, which spilled 6
// accumulators around every FMA), bf16 rows widened 16 at a time from one 32-byte load viewed
// as 8 x i32 (shift for the even elements, mask for the odd ones, no trip through memory), V rows
// unrolled by 4. The kernel's name records the width.
// CHECK-LABEL: func.func @dense_bf16_avx2
// CHECK: call @[[KERNEL:__hg_cpu_dense_bf16_q32_kv8_b16_d128_[a-z0-9_]*_v256]](
// CHECK: func.func private @[[KERNEL]]
// CHECK: vector.shuffle %{{.*}} [0, 2, 4, 6, 8, 10, 12, 14] : vector<16xf32>, vector<16xf32>
// CHECK: scf.for
// CHECK: vector.load %{{.*}} : memref<?x8x16x128xbf16>, vector<16xbf16>
// CHECK-NEXT: vector.bitcast %{{.*}} : vector<16xbf16> to vector<8xi32>
// CHECK: arith.shli %{{.*}} : vector<8xi32>
// CHECK: arith.andi %{{.*}} : vector<8xi32>
// CHECK: vector.fma %{{.*}} : vector<8xf32>
// CHECK-NOT: vector.fma %{{.*}} : vector<16xf32>
// The p.V loop: 4 rows per iteration, each row's 2 V slices times 4 heads' probabilities.
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c4
// CHECK-COUNT-8: vector.fma %{{.*}} : vector<8xf32>
// CHECK: vector.shuffle %{{.*}} [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15] : vector<8xf32>, vector<8xf32>
// LLVM-LABEL: llvm.func @dense_bf16_avx2
// LLVM: llvm.func @__hg_cpu_dense_bf16{{.*}}_v256
// LLVM-SAME: target_cpu = "x86-64-v3"
// LLVM: llvm.intr.fmuladd{{.*}} : (vector<8xf32>, vector<8xf32>, vector<8xf32>) -> vector<8xf32>
func.func @dense_bf16_avx2(%q: memref<1x32x128xf32>, %k: memref<64x8x16x128xbf16>,
                           %v: memref<64x8x16x128xbf16>, %bt: memref<1x64xi32>,
                           %lens: memref<1xi32>, %o: memref<1x32x128xf32>, %m: memref<1x32xf32>,
                           %l: memref<1x32xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<1x32x128xf32>)
      kv(%k, %v : memref<64x8x16x128xbf16>, memref<64x8x16x128xbf16>)
      table(%bt : memref<1x64xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x32x128xf32>) m(%m : memref<1x32xf32>) l(%l : memref<1x32xf32>)
      {scale = 0.0883883461 : f32}
  return
}

// -----

// f16 rows on AVX2 are widened in registers by one extf of 8 lanes (F16C vcvtph2ps).
// CHECK-LABEL: func.func @dense_f16_avx2
// CHECK: func.func private @__hg_cpu_dense_f16{{.*}}_v256
// CHECK: vector.load %{{.*}} : memref<?x2x16x64xf16>, vector<8xf16>
// CHECK-NEXT: arith.extf %{{.*}} : vector<8xf16> to vector<8xf32>
// CHECK: vector.fma %{{.*}} : vector<8xf32>
func.func @dense_f16_avx2(%q: memref<1x8x64xf32>, %k: memref<8x2x16x64xf16>,
                          %v: memref<8x2x16x64xf16>, %bt: memref<1x8xi32>, %lens: memref<1xi32>,
                          %o: memref<1x8x64xf32>, %m: memref<1x8xf32>, %l: memref<1x8xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<1x8x64xf32>)
      kv(%k, %v : memref<8x2x16x64xf16>, memref<8x2x16x64xf16>)
      table(%bt : memref<1x8xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x8x64xf32>) m(%m : memref<1x8xf32>) l(%l : memref<1x8xf32>)
      {scale = 0.125 : f32}
  return
}
// BAD: error: 'hg.partial_attention' op vector-bits must be 128, 256 or 512, got 100

// -----

// On a 16-register target the row-by-row f32 logits load q's slices where they use them (held as
// values, LLVM copied a head's 16 slices to spill slots at the top of every block), and each row's
// prefetches take a row index tied to the previous row's result (row 0 if it is NaN), so code
// generation keeps them beside their rows instead of hoisting a block's ~300 into one burst.
// 512-bit tiles (32 registers) keep q's slices as values; their f32 kernel ties its prefetches
// to the rows too (paced on every target for f32: on Zen 4 it read 0.43 -> 0.65 of the roof).
// CHECK-LABEL: func.func @dense_f32_avx2
// CHECK: func.func private @__hg_cpu_dense_f32{{.*}}_v256(
// CHECK: %[[Q:.*]] = vector.load %{{.*}} : memref<32x128xf32>, vector<8xf32>
// CHECK-NEXT: arith.mulf %[[Q]], %{{.*}} : vector<8xf32>
// CHECK: %[[LAST:.*]] = vector.extract %{{.*}}[0] : f32 from vector<8xf32>
// CHECK: %[[NAN:.*]] = arith.cmpf uno, %[[LAST]], %[[LAST]] : f32
// CHECK: %[[ROW:.*]] = arith.select %[[NAN]], %{{.*}}, %{{.*}} : index
// CHECK: memref.prefetch %{{.*}}[%{{.*}}, %{{.*}}, %[[ROW]], %{{.*}}]
// Z512-LABEL: func.func @dense_f32_avx2
// Z512: func.func private @__hg_cpu_dense_f32{{[a-z0-9_]*}}_t1024(
// Z512: %[[LAST:.*]] = vector.extract %{{.*}}[0] : f32 from vector<16xf32>
// Z512: %[[NAN:.*]] = arith.cmpf uno, %[[LAST]], %[[LAST]] : f32
// Z512: %[[ROW:.*]] = arith.select %[[NAN]], %{{.*}}, %{{.*}} : index
// Z512: memref.prefetch %{{.*}}[%{{.*}}, %{{.*}}, %[[ROW]], %{{.*}}]
func.func @dense_f32_avx2(%q: memref<1x32x128xf32>, %k: memref<64x8x16x128xf32>,
                          %v: memref<64x8x16x128xf32>, %bt: memref<1x64xi32>,
                          %lens: memref<1xi32>, %o: memref<1x32x128xf32>, %m: memref<1x32xf32>,
                          %l: memref<1x32xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<1x32x128xf32>)
      kv(%k, %v : memref<64x8x16x128xf32>, memref<64x8x16x128xf32>)
      table(%bt : memref<1x64xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x32x128xf32>) m(%m : memref<1x32xf32>) l(%l : memref<1x32xf32>)
      {scale = 0.0883883461 : f32}
  return
}
