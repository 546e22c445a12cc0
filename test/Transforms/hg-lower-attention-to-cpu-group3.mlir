// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="vector-bits-16bit-kv=256" | FileCheck %s

// A GQA group that is not a power of two (SmolLM2: 9 query heads over 3 kv heads). The
// interleaved 16-bit kernel (Zen 4's 256-bit tiles on a 32-register target) carries the softmax
// statistics of the 3 heads as vector<3xf32>: the block maxima come from a max tree of 4 rows
// (the 4th all -inf) cut to 3 lanes, and one exp gives the 3 rescale factors. The f32 kernel of
// the same shape keeps per-head scalar statistics (measured faster from DRAM there).
// CHECK-LABEL: func.func private @__hg_cpu_dense_bf16_q9_kv3_{{[a-z0-9_]*}}_v256_il(
// CHECK: vector.load %{{.*}} : memref<3x3xf32>, vector<3xf32>
// CHECK: vector.shuffle %{{.*}} : vector<16xf32>, vector<16xf32>
// CHECK: %[[MAX:.*]] = vector.shuffle %[[BLOCK:.*]], %[[BLOCK]] [0, 1, 2] : vector<4xf32>, vector<4xf32>
// CHECK: arith.maximumf %{{.*}}, %[[MAX]] : vector<3xf32>
// CHECK: math.exp %{{.*}} : vector<3xf32>
// CHECK-LABEL: func.func private @__hg_cpu_dense_f32_q9_kv3_
// CHECK-NOT: vector<3xf32>
// CHECK: return
func.func @group3(%q: memref<1x9x64xf32>, %kb: memref<8x3x16x64xbf16>,
                  %vb: memref<8x3x16x64xbf16>, %kf: memref<8x3x16x64xf32>,
                  %vf: memref<8x3x16x64xf32>, %bt: memref<1x8xi32>, %lens: memref<1xi32>,
                  %o: memref<1x9x64xf32>, %m: memref<1x9xf32>, %l: memref<1x9xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<1x9x64xf32>) kv(%kb, %vb : memref<8x3x16x64xbf16>, memref<8x3x16x64xbf16>)
      table(%bt : memref<1x8xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x9x64xf32>) m(%m : memref<1x9xf32>) l(%l : memref<1x9xf32>)
      {scale = 0.125 : f32}
  hg.partial_attention q(%q : memref<1x9x64xf32>) kv(%kf, %vf : memref<8x3x16x64xf32>, memref<8x3x16x64xf32>)
      table(%bt : memref<1x8xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x9x64xf32>) m(%m : memref<1x9xf32>) l(%l : memref<1x9xf32>)
      {scale = 0.125 : f32}
  return
}
