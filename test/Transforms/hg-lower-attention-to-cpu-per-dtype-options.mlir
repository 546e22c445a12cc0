// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true far-prefetch-bytes=8192 vector-bits-f32-kv=256 spread-prefetch=false spread-prefetch-16bit-kv=1 overlap-pieces=true overlap-pieces-16bit-kv=0" | FileCheck %s
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true far-prefetch-bytes=8192 overlap-pieces=true overlap-pieces-16bit-kv=0" | FileCheck %s --check-prefix=WIDE
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true far-prefetch-bytes=8192 spread-prefetch=true spread-prefetch-16bit-kv=0" | FileCheck %s --check-prefix=SPREAD32
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true far-prefetch-bytes=8192 vector-bits-f32-kv=256 overlap-pieces=true" | grep -c 'memref<?x8x128x16xf32>, vector<16xf32>' | FileCheck %s --check-prefix=PASSES
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true far-prefetch-bytes=8192 vector-bits=256 overlap-pieces=true" | grep -c 'memref<?x8x128x16xf32>, vector<16xf32>' | FileCheck %s --check-prefix=PASSES
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true far-prefetch-bytes=8192 overlap-pieces=true" | grep -c 'memref<?x8x128x16xf32>, vector<16xf32>' | FileCheck %s --check-prefix=ONEPASS
// RUN: not hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true vector-bits-f32-kv=384" 2>&1 | FileCheck %s --check-prefix=BAD-BITS
// RUN: not hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true spread-prefetch-16bit-kv=2" 2>&1 | FileCheck %s --check-prefix=BAD-SPREAD

// The options that let one pipeline give f32 and 16-bit KV kernels different choices, as the
// driver does on AMD Zen 4 with K transposed (docs/cpu-runs.md, "Zen 4 again"): f32 KV planned
// as on AVX2 (vector-bits-f32-kv=256: 8 lanes and 16 registers) with each piece's logits
// overlapped with the previous piece's p.V (overlap-pieces), bf16/f16 KV in 512-bit tiles with
// the prefetches spread over the piece (spread-prefetch-16bit-kv=1; where both apply the spread
// one wins, so spread-prefetch=false keeps f32 overlapped).
// CHECK: func.func private @__hg_cpu_dense_f32_{{[a-z0-9_]*}}_t1024_v256_f8192_kt_ov(
// CHECK-NOT: func.func private
// CHECK: vector.fma {{.*}} : vector<8xf32>
// CHECK: func.func private @__hg_cpu_dense_bf16_{{[a-z0-9_]*}}_t1024_f8192_kt_sp(
// CHECK-NOT: vector.fma {{.*}} : vector<8xf32>
// CHECK: return

// Without vector-bits-f32-kv the f32 kernel keeps the target's 512 bits: no 8-lane FMA.
// WIDE: func.func private @__hg_cpu_dense_f32_{{[a-z0-9_]*}}_t1024_f8192_kt_ov(
// WIDE-NOT: vector.fma {{.*}} : vector<8xf32>
// WIDE: func.func private @__hg_cpu_dense_bf16_{{[a-z0-9_]*}}_t1024_f8192_kt(

// spread-prefetch-16bit-kv=0 under spread-prefetch: f32 spread, bf16 plain.
// SPREAD32: func.func private @__hg_cpu_dense_f32_{{[a-z0-9_]*}}_t1024_f8192_kt_sp(
// SPREAD32: func.func private @__hg_cpu_dense_bf16_{{[a-z0-9_]*}}_t1024_f8192_kt(

// The register count comes with the width: on 16 registers the overlapped f32 logits run in 4
// passes over the heads (one head each), every pass loading its K columns again, 72 loads of
// the transposed pool in all, as in the kernel x86-64-v3 code gets (vector-bits=256); the
// 512-bit kernel of the 32-register target loads 40 (with 256-bit tiles over 32 registers, the
// plan measured slower on Zen 4 and no longer produced, it loaded 24).
// PASSES: {{^}}72{{$}}
// ONEPASS: {{^}}40{{$}}

// BAD-BITS: vector-bits-f32-kv must be 0, 128, 256 or 512, got 384
// BAD-SPREAD: spread-prefetch-16bit-kv must be -1 (as spread-prefetch), 0 or 1, got 2

func.func @f32_kv(%q: memref<1x32x128xf32>, %k: memref<64x8x16x128xf32>,
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

func.func @bf16_kv(%q: memref<1x32x128xf32>, %k: memref<64x8x16x128xbf16>,
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
