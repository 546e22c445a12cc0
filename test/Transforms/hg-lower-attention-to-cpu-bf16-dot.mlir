// RUN: hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu="vector-bits=256 bf16-dot=true" | FileCheck %s
// RUN: hybridgen-opt %s -split-input-file -hg-cpu-pipeline="bf16-dot=true vector-bits=256 aot=true target-cpu=znver4" | FileCheck %s --check-prefix=LLVM
// RUN: hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu="vector-bits=256" | FileCheck %s --check-prefix=OFF
// RUN: hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu="vector-bits=256 bf16-dot-rounded=true" | FileCheck %s --check-prefix=RND
// RUN: hybridgen-opt %s -split-input-file -hg-cpu-pipeline="bf16-dot=true bf16-dot-rounded=true vector-bits=256 aot=true target-cpu=znver4" | FileCheck %s --check-prefix=RNDLLVM

// bf16-dot (targets with AVX512-BF16, e.g. AMD Zen 4): the bf16 kernel computes with
// x86vector.avx512.dot (vdpbf16ps) on the rows as stored, never widening them. q is kept as two
// bf16 halves (hi, then the rounded rest lo); K rows are loaded as 16 x bf16 and go straight into
// the dot products; p is split alike and stored as i32 pairs of rows, broadcast against two V rows
// unpacked into (row 2r, row 2r+1) pairs within each 128-bit lane; the accumulators are put back
// in column order when the chunk is written. The kernel's name records the path.
// CHECK-LABEL: func.func @dense_bf16_dot
// CHECK: call @[[KERNEL:__hg_cpu_dense_bf16_q32_kv8_b16_d128_[a-z0-9_]*_v256_dp]](
// CHECK: func.func private @[[KERNEL]]
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<32x2x128xbf16>
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<2x4x8xi32>
// q: hi = truncf(q * scale), lo = truncf(q * scale - hi).
// CHECK: %[[HI:.*]] = arith.truncf %[[QS:.*]] : vector<16xf32> to vector<16xbf16>
// CHECK: %[[HIF:.*]] = arith.extf %[[HI]] : vector<16xbf16> to vector<16xf32>
// CHECK: %[[REST:.*]] = arith.subf %[[QS]], %[[HIF]] : vector<16xf32>
// CHECK: arith.truncf %[[REST]] : vector<16xf32> to vector<16xbf16>
// Logits: K as stored, into the dot products (no integer widening anywhere in the kernel).
// CHECK: %[[K:.*]] = vector.load %{{.*}} : memref<?x8x16x128xbf16>, vector<16xbf16>
// CHECK: x86vector.avx512.dot %{{.*}}, %{{.*}}, %[[K]] : vector<16xbf16> -> vector<8xf32>
// CHECK-NOT: arith.shli
// p.V: two rows unpacked into pairs, the broadcast pair of probabilities.
// CHECK: vector.shuffle %{{.*}} [0, 16, 1, 17, 2, 18, 3, 19, 8, 24, 9, 25, 10, 26, 11, 27] : vector<16xbf16>, vector<16xbf16>
// CHECK: vector.shuffle %{{.*}} [4, 20, 5, 21, 6, 22, 7, 23, 12, 28, 13, 29, 14, 30, 15, 31] : vector<16xbf16>, vector<16xbf16>
// CHECK: %[[P:.*]] = vector.broadcast %{{.*}} : i32 to vector<8xi32>
// CHECK: %[[PV:.*]] = vector.bitcast %[[P]] : vector<8xi32> to vector<16xbf16>
// CHECK: x86vector.avx512.dot %{{.*}}, %{{.*}}, %[[PV]] : vector<16xbf16> -> vector<8xf32>
// CHECK-NOT: arith.shli
// CHECK: vector.shuffle %{{.*}} [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15] : vector<16xf32>, vector<16xf32>
// LLVM-LABEL: llvm.func @dense_bf16_dot
// LLVM: llvm.func @__hg_cpu_dense_bf16{{.*}}_v256_dp
// LLVM-SAME: target_cpu = "znver4"
// LLVM: llvm.call_intrinsic "llvm.x86.avx512bf16.dpbf16ps.256"
// bf16-dot-rounded: q and p rounded once to bf16 (one half each, no rest), so each K slice and
// each pair of V rows takes one dot product per head instead of two; the kernel is named _dr.
// RND-LABEL: func.func @dense_bf16_dot
// RND: func.func private @__hg_cpu_dense_bf16{{.*}}_v256_dr(
// RND: memref.alloca() {alignment = 64 : i64} : memref<32x1x128xbf16>
// RND: memref.alloca() {alignment = 64 : i64} : memref<1x4x8xi32>
// RND: %[[HI:.*]] = arith.truncf %{{.*}} : vector<16xf32> to vector<16xbf16>
// RND: vector.store %[[HI]], %{{.*}} : memref<32x1x128xbf16>, vector<16xbf16>
// RND-NOT: arith.extf
// RND: x86vector.avx512.dot
// RND-NOT: arith.extf
// RND: return
// RNDLLVM-LABEL: llvm.func @dense_bf16_dot
// RNDLLVM: llvm.func @__hg_cpu_dense_bf16{{.*}}_v256_dr
// RNDLLVM: llvm.call_intrinsic "llvm.x86.avx512bf16.dpbf16ps.256"
// OFF-LABEL: func.func @dense_bf16_dot
// OFF: func.func private @__hg_cpu_dense_bf16{{.*}}_v256(
// OFF-NOT: x86vector
func.func @dense_bf16_dot(%q: memref<1x32x128xf32>, %k: memref<64x8x16x128xbf16>,
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

// f16 KV keeps the FMA path (vdpbf16ps takes bf16 only), rounded or not.
// CHECK-LABEL: func.func @dense_f16_not_dot
// RND-LABEL: func.func @dense_f16_not_dot
// RND: func.func private @__hg_cpu_dense_f16{{.*}}_v256(
// RND-NOT: x86vector
// CHECK: func.func private @__hg_cpu_dense_f16{{.*}}_v256(
// CHECK-NOT: x86vector
// CHECK: vector.fma %{{.*}} : vector<8xf32>
func.func @dense_f16_not_dot(%q: memref<1x8x64xf32>, %k: memref<8x2x16x64xf16>,
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
