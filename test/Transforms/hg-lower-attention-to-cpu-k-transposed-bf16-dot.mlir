// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true bf16-dot-rounded=true" | FileCheck %s
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true bf16-dot=true" | FileCheck %s --check-prefix=HALVES
// RUN: hybridgen-opt %s -hg-cpu-pipeline="k-transposed=true bf16-dot-rounded=true aot=true target-cpu=znver4" | FileCheck %s --check-prefix=LLVM

// K transposed with the bf16 dot products, rounded once (bf16-dot-rounded): q is scaled, rounded
// to bf16 and kept as i32 pairs of columns (memref<32x64xi32>, no f32 copy); the logits load two
// columns of the block's 16 rows, interleave them into (column 2j, column 2j+1) pairs and take
// one vdpbf16ps per head against q's broadcast pair, with no widening and no f32 FMA; p.V takes
// vdpbf16ps too: p rounded once to bf16 and stored as i32 pairs of rows, two V rows unpacked into
// pairs. The kernel is named _drq_kt. With the (hi, lo) halves (bf16-dot) the logits stay f32
// FMAs on q as f32 and only p.V takes the dot products, p split in two.
// CHECK-LABEL: func.func private @__hg_cpu_dense_bf16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_drq_kt(
// CHECK: memref.reinterpret_cast %{{.*}} to offset: [0], sizes: [%{{.*}}, 8, 128, 16]
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<32x64xi32>
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<1x4x8xi32>
// CHECK: %[[Q:.*]] = arith.truncf %{{.*}} : vector<32xf32> to vector<32xbf16>
// CHECK: vector.bitcast %[[Q]] : vector<32xbf16> to vector<16xi32>
// CHECK: scf.for %{{.*}} = %{{.*}} to %c128 step %c8
// CHECK-NOT: arith.extf
// CHECK-NOT: vector.fma
// CHECK: %[[QB:.*]] = vector.broadcast %{{.*}} : i32 to vector<16xi32>
// CHECK: %[[QP:.*]] = vector.bitcast %[[QB]] : vector<16xi32> to vector<32xbf16>
// CHECK: %[[EVEN:.*]] = vector.load %{{.*}} : memref<?x8x128x16xbf16>, vector<16xbf16>
// CHECK: %[[ODD:.*]] = vector.load %{{.*}} : memref<?x8x128x16xbf16>, vector<16xbf16>
// CHECK: %[[KP:.*]] = vector.shuffle %[[EVEN]], %[[ODD]] [0, 16, 1, 17, 2, 18, {{.*}}, 15, 31] : vector<16xbf16>, vector<16xbf16>
// CHECK: x86vector.avx512.dot %{{.*}}, %[[KP]], %[[QP]] : vector<32xbf16> -> vector<16xf32>
// CHECK: %[[P:.*]] = arith.truncf %{{.*}} : vector<16xf32> to vector<16xbf16>
// CHECK: vector.bitcast %[[P]] : vector<16xbf16> to vector<8xi32>
// CHECK-NOT: arith.extf
// CHECK: vector.shuffle %{{.*}} [0, 32, 1, 33, 2, 34, 3, 35, {{.*}}] : vector<32xbf16>, vector<32xbf16>
// CHECK: %[[PB:.*]] = vector.broadcast %{{.*}} : i32 to vector<16xi32>
// CHECK: %[[PV:.*]] = vector.bitcast %[[PB]] : vector<16xi32> to vector<32xbf16>
// CHECK: x86vector.avx512.dot %{{.*}}, %{{.*}}, %[[PV]] : vector<32xbf16> -> vector<16xf32>
// CHECK-NOT: vector.fma {{.*}} : vector<16xf32>
// CHECK: return
// HALVES-LABEL: func.func private @__hg_cpu_dense_bf16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_dp_kt(
// HALVES: memref.alloca() {alignment = 64 : i64} : memref<32x128xf32>
// HALVES: memref.alloca() {alignment = 64 : i64} : memref<2x4x8xi32>
// HALVES: arith.extf %{{.*}} : vector<16xbf16> to vector<16xf32>
// HALVES: vector.fma
// HALVES: x86vector.avx512.dot
// LLVM: llvm.func @__hg_cpu_dense_bf16{{.*}}_drq_kt
// LLVM-SAME: target_cpu = "znver4"
// LLVM: llvm.call_intrinsic "llvm.x86.avx512bf16.dpbf16ps.512"
func.func @kt_bf16_dot(%q: memref<1x32x128xf32>, %k: memref<64x8x16x128xbf16>,
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
