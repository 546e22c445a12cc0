// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="vector-bits-16bit-kv=256" | FileCheck %s
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu | FileCheck %s --check-prefix=SAME
// RUN: not hybridgen-opt %s -hg-lower-attention-to-cpu="vector-bits-16bit-kv=300" 2>&1 | FileCheck %s --check-prefix=BAD

// 16-bit KV kernels can be given narrower register tiles than f32 ones (the driver asks for 256
// on AMD Zen 4, docs/cpu-path.md): the bf16 kernel is the AVX2-sized one (16 x bf16 loads,
// widened to 8 lanes; named _v256), the f32 kernel keeps the 512-bit tiles. Since the target
// still has 32 registers, the bf16 logits take rows in interleaved groups of 4 and p.V tiles of
// 16 registers (interleavedFma; named _il), and its prefetches are not tied to the rows (paced,
// it read less on Zen 4); the f32 kernel's are.
// CHECK: func.func private @__hg_cpu_dense_bf16_{{[a-z0-9_]*}}_t1024_v256_il(
// CHECK: vector.load %{{.*}} : memref<?x2x16x64xbf16>, vector<16xbf16>
// CHECK: vector.bitcast %{{.*}} : vector<16xbf16> to vector<8xi32>
// CHECK-NOT: vector<32xbf16>
// CHECK-NOT: arith.cmpf uno
// CHECK: func.func private @__hg_cpu_dense_f32_{{[a-z0-9_]*}}_t1024(
// CHECK: vector.load %{{.*}} : memref<?x2x16x64xf32>, vector<16xf32>

// Without the option both use the target's width (512 by default).
// SAME-NOT: _v256
// SAME: vector<32xbf16>

// BAD: vector-bits-16bit-kv must be 0, 128, 256 or 512, got 300
func.func @two_dtypes(%q: memref<1x8x64xf32>, %kb: memref<8x2x16x64xbf16>,
                      %vb: memref<8x2x16x64xbf16>, %kf: memref<8x2x16x64xf32>,
                      %vf: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>, %lens: memref<1xi32>,
                      %o: memref<1x8x64xf32>, %m: memref<1x8xf32>, %l: memref<1x8xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<1x8x64xf32>) kv(%kb, %vb : memref<8x2x16x64xbf16>, memref<8x2x16x64xbf16>)
      table(%bt : memref<1x8xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x8x64xf32>) m(%m : memref<1x8xf32>) l(%l : memref<1x8xf32>)
      {scale = 0.125 : f32}
  hg.partial_attention q(%q : memref<1x8x64xf32>) kv(%kf, %vf : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>)
      table(%bt : memref<1x8xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x8x64xf32>) m(%m : memref<1x8xf32>) l(%l : memref<1x8xf32>)
      {scale = 0.125 : f32}
  return
}
