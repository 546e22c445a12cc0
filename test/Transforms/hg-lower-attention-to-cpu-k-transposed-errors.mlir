// RUN: hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu="k-transposed=true" -verify-diagnostics

// The top-k kernel reads K rows whole: it does not take transposed pieces.
func.func @sparse_kt(%q: memref<1x4x64xf32>, %k: memref<8x2x16x64xf16>, %v: memref<8x2x16x64xf16>,
                     %bt: memref<1x8xi32>, %lens: memref<1xi32>, %o: memref<1x4x64xf32>,
                     %m: memref<1x4xf32>, %l: memref<1x4xf32>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{k-transposed (K pool pieces stored [head_dim][block_size]) is not supported by the top-k kernel}}
  hg.partial_attention q(%q : memref<1x4x64xf32>) kv(%k, %v : memref<8x2x16x64xf16>, memref<8x2x16x64xf16>)
      table(%bt : memref<1x8xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x4x64xf32>) m(%m : memref<1x4xf32>) l(%l : memref<1x4xf32>)
      {scale = 0.125 : f32, top_k = 8}
  return
}
