// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true far-prefetch-bytes=8192 overlap-pieces=true" | FileCheck %s --check-prefix=OVERLAP
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true far-prefetch-bytes=8192 overlap-pieces=false" | FileCheck %s --check-prefix=PLAIN

// How p.V widens bf16 V rows on 512-bit tiles. The plain kernel loads 32 elements (64 bytes) at
// a time and takes the even ones by a shift and the odd ones by a mask (bf16Pairs). The
// overlapped kernel widens each 16-element half on its own: it read 0.01-0.03 more of the roof
// from DRAM that way on Emerald Rapids (docs/cpu-runs.md, "bf16 V widened by halves in the
// overlapped kernel"). K (transposed: viewed as [128 x 16] per piece) is read by 16-row columns.
// OVERLAP-LABEL: func.func private @__hg_cpu_dense_bf16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt_ov(
// OVERLAP-SAME: %[[K:[a-z0-9]+]]: memref<?x8x16x128xbf16>, %[[V:[a-z0-9]+]]: memref<?x8x16x128xbf16>
// OVERLAP-NOT: vector<32xbf16>
// OVERLAP-NOT: vector.bitcast
// OVERLAP: vector.load %[[V]][{{.*}}] : memref<?x8x16x128xbf16>, vector<16xbf16>
// OVERLAP-NOT: vector<32xbf16>
// OVERLAP-NOT: vector.bitcast
// OVERLAP: return
// PLAIN-LABEL: func.func private @__hg_cpu_dense_bf16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt(
// PLAIN-SAME: %[[K:[a-z0-9]+]]: memref<?x8x16x128xbf16>, %[[V:[a-z0-9]+]]: memref<?x8x16x128xbf16>
// PLAIN: %[[RAW:.*]] = vector.load %[[V]][{{.*}}] : memref<?x8x16x128xbf16>, vector<32xbf16>
// PLAIN: vector.bitcast %[[RAW]] : vector<32xbf16> to vector<16xi32>
func.func @llama_bf16(%q: memref<1x32x128xf32>, %k: memref<64x8x16x128xbf16>,
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
