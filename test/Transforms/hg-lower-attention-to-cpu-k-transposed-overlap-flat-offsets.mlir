// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="vector-bits=256 k-transposed=true far-prefetch-bytes=8192 overlap-pieces=true" | FileCheck %s --check-prefix=AVX2
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="vector-bits=512 k-transposed=true far-prefetch-bytes=8192 overlap-pieces=true" | FileCheck %s --check-prefix=AVX512

// The overlapped step of 16-bit KV on a 16-register (AVX2) target addresses its V rows, K
// columns and prefetched lines as element offsets in flat pieces, memref<blocks x kv_heads x
// (block_size * head_dim)> views of the pools (pieceView): one base per loop iteration plus
// constants, where the 4-D indices cost a `lea` and a `shl` per load and a division and a
// remainder per prefetched line. Measured faster on a Zen 3 for bf16 and f16 only; f32 keeps
// its 4-D indices (it read less of the roof with them), and so does AVX-512 code (not measured).
// AVX2-LABEL: func.func private @__hg_cpu_dense_f16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_v256_{{[a-z0-9_]*}}_kt_ov(
// AVX2: %[[KP:[a-z0-9_]+]] = memref.reinterpret_cast %arg1 to offset: [0], sizes: [%{{[a-z0-9_]+}}, 8, 2048], strides: [16384, 2048, 1] : memref<?x8x16x128xf16> to memref<?x8x2048xf16>
// AVX2: %[[VP:[a-z0-9_]+]] = memref.reinterpret_cast %arg2 to offset: [0], sizes: [%{{[a-z0-9_]+}}, 8, 2048], strides: [16384, 2048, 1] : memref<?x8x16x128xf16> to memref<?x8x2048xf16>
// Per row step: this piece's V line and the far piece's K line, then the V row's two 8-lane
// halves of this tile and the step's K columns, all from the flat views.
// AVX2: memref.prefetch %[[VP]][%{{.*}}], read, locality<2>, data : memref<?x8x2048xf16>
// AVX2-NEXT: memref.prefetch %[[KP]][%{{.*}}], read, locality<2>, data : memref<?x8x2048xf16>
// AVX2: vector.load %[[VP]][%{{.*}}] : memref<?x8x2048xf16>, vector<8xf16>
// AVX2: vector.load %[[VP]][%{{.*}}] : memref<?x8x2048xf16>, vector<8xf16>
// AVX2: vector.load %[[KP]][%{{.*}}] : memref<?x8x2048xf16>, vector<16xf16>
// AVX2-NOT: vector.load %arg1
// AVX2: vector.load %[[KP]][%{{.*}}] : memref<?x8x2048xf16>, vector<16xf16>
// AVX2-LABEL: func.func private @__hg_cpu_dense_f32_q32_kv8_b16_d128_{{[a-z0-9_]*}}_v256_{{[a-z0-9_]*}}_kt_ov(
// AVX2-NOT: x2048xf32
// AVX2: memref.prefetch %{{.*}} : memref<?x8x16x128xf32>
// AVX512-NOT: x2048x
func.func @llama_f16(%q: memref<1x32x128xf32>, %k: memref<64x8x16x128xf16>,
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
func.func @llama_f32(%q: memref<1x32x128xf32>, %k: memref<64x8x16x128xf32>,
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
