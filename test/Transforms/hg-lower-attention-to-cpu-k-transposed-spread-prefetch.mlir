// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true far-prefetch-bytes=8192 spread-prefetch=true" | FileCheck %s
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true far-prefetch-bytes=8192" | FileCheck %s --check-prefix=OFF

// spread-prefetch (the driver's default on AMD Zen 4): the transposed kernel's logits ask only
// for this piece's V rows and the far piece's K rows into L2; p.V asks for the far piece's V rows
// (L2) and the next piece's K rows (L1), so both phases keep lines in flight. The kernel is named
// _kt_sp. Pieces under 4 KiB (SmolLM2's shape, 16 x 64 f16) keep the logits' prefetches: their
// exact kernel read ~4% less spread. Without the option the prefetches are all in the logits and
// p.V asks for nothing: this piece's V rows and the far piece's K rows, and for pieces under 4 KiB
// (the SmolLM2 shape here) the far piece's V rows too.
// The spread 16-bit kernel's p.V (widePvTile) runs two passes of 64 columns, 16 accumulators (4
// heads x 4 zmm), 4 rows per iteration; without the option, four passes of 32 columns, 8
// accumulators, 8 rows per iteration.
// CHECK-LABEL: func.func private @__hg_cpu_dense_f16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt_sp(
// CHECK-SAME: %[[K:[a-z0-9]+]]: memref<?x8x16x128xf16>, %[[V:[a-z0-9]+]]: memref<?x8x16x128xf16>
// CHECK: scf.for %{{.*}} = %{{.*}} to %c128 step %c8
// CHECK: memref.prefetch %[[V]][{{.*}}], read, locality<2>
// CHECK: memref.prefetch %[[K]][{{.*}}], read, locality<2>
// CHECK-NOT: memref.prefetch %[[V]]
// CHECK: vector.fma
// CHECK: %{{.*}}:16 = scf.for %{{.*}} = %{{.*}} to %c16{{.*}} step %c4{{.*}} -> (vector<16xf32>,
// CHECK: memref.prefetch %[[K]][{{.*}}], read, locality<3>
// CHECK: memref.prefetch %[[V]][{{.*}}], read, locality<2>
// CHECK: vector.fma
// CHECK: %{{.*}}:16 = scf.for %{{.*}} = %{{.*}} to %c16{{.*}} step %c4{{.*}} -> (vector<16xf32>,
// CHECK-NOT: memref.prefetch
// CHECK: vector.fma
// CHECK-NOT: %{{.*}}:16 = scf.for %{{.*}} = %{{.*}} to %c16{{.*}} step %c4
// CHECK: %{{.*}}:16 = scf.for %{{.*}} = %{{.*}} step %c1
// CHECK-LABEL: func.func private @__hg_cpu_dense_f16_q9_kv3_b16_d64_{{[a-z0-9_]*}}_kt(
// OFF-LABEL: func.func private @__hg_cpu_dense_f16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt(
// OFF-SAME: %[[K:[a-z0-9]+]]: memref<?x8x16x128xf16>, %[[V:[a-z0-9]+]]: memref<?x8x16x128xf16>
// OFF: scf.for %{{.*}} = %{{.*}} to %c128 step %c8
// OFF: memref.prefetch %[[V]][{{.*}}], read, locality<2>
// OFF: memref.prefetch %[[K]][{{.*}}], read, locality<2>
// OFF-NOT: memref.prefetch %[[V]]
// OFF: vector.fma
// OFF: %{{.*}}:8 = scf.for %{{.*}} = %{{.*}} to %c16{{.*}} step %c8{{.*}} -> (vector<16xf32>,
// OFF-NOT: memref.prefetch
// OFF: vector.fma
// OFF-LABEL: func.func private @__hg_cpu_dense_f16_q9_kv3_b16_d64_{{[a-z0-9_]*}}_kt(
// OFF-SAME: %[[K2:[a-z0-9]+]]: memref<?x3x16x64xf16>, %[[V2:[a-z0-9]+]]: memref<?x3x16x64xf16>
// OFF: scf.for %{{.*}} = %{{.*}} to %c64 step %c8
// OFF: memref.prefetch %[[V2]][{{.*}}], read, locality<2>
// OFF: memref.prefetch %[[K2]][{{.*}}], read, locality<2>
// OFF-NOT: vector.fma
// OFF: memref.prefetch %[[V2]][{{.*}}], read, locality<2>
// OFF: vector.fma
func.func @llama_shape(%q: memref<1x32x128xf32>, %k: memref<64x8x16x128xf16>,
                       %v: memref<64x8x16x128xf16>, %bt: memref<1x64xi32>,
                       %lens: memref<1xi32>, %o: memref<1x32x128xf32>, %m: memref<1x32xf32>,
                       %l: memref<1x32xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<1x32x128xf32>)
      kv(%k, %v : memref<64x8x16x128xf16>, memref<64x8x16x128xf16>)
      table(%bt : memref<1x64xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x32x128xf32>) m(%m : memref<1x32xf32>) l(%l : memref<1x32xf32>)
      {scale = 0.0883883461 : f32}
  return
}

func.func @smollm2_shape(%q: memref<1x9x64xf32>, %k: memref<8x3x16x64xf16>,
                         %v: memref<8x3x16x64xf16>, %bt: memref<1x8xi32>, %lens: memref<1xi32>,
                         %o: memref<1x9x64xf32>, %m: memref<1x9xf32>, %l: memref<1x9xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<1x9x64xf32>) kv(%k, %v : memref<8x3x16x64xf16>, memref<8x3x16x64xf16>)
      table(%bt : memref<1x8xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x9x64xf32>) m(%m : memref<1x9xf32>) l(%l : memref<1x9xf32>)
      {scale = 0.125 : f32}
  return
}
