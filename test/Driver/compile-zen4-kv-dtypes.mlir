// hybridgen-compile for AMD Zen 4 (znver4) with K transposed: by default the kernels differ by
// KV dtype. bf16/f16 keep 512-bit tiles and the prefetches spread over the piece (_sp); f32 is
// planned as on AVX2, 8 lanes and 16 registers (_v256), with each piece's logits overlapped with
// the previous piece's p.V (_ov), which read 0.87-0.97 of the roof against 0.70-0.83 (one thread)
// for the 512-bit spread kernel (docs/cpu-runs.md, "Zen 4 again"). Naming --spread-prefetch or
// --overlap-pieces goes back to one rule for every dtype (the spread one wins where both are
// asked for); row-major K keeps 512-bit f32 tiles. AMD Zen 5 (znver5) takes the f32 plan only,
// its bf16/f16 kernels overlapped in 512-bit tiles as on Intel's AVX-512 targets, which keep the
// overlapped 512-bit kernels for every dtype (docs/cpu-runs.md, "Zen 5").
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=znver4
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=MIX
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=znver5
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=ZEN5
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=emeraldrapids
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=INTEL
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=znver4 --spread-prefetch=1
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=SPREAD
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=znver4 --overlap-pieces=0
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=SPREAD
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=znver4 --spread-prefetch=0
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=PLAIN
// RUN: hybridgen-compile %s -o %t.so --target-cpu=znver4
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=ROWS

// llvm-nm lists symbols by name: bf16 before f32.
// MIX: __hg_cpu_dense_bf16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_t1024_f8192_kt_sp{{$}}
// MIX: __hg_cpu_dense_f32_q32_kv8_b16_d128_{{[a-z0-9_]*}}_t1024_v256_f8192_kt_ov{{$}}
// SPREAD: __hg_cpu_dense_bf16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_t1024_f8192_kt_sp{{$}}
// SPREAD: __hg_cpu_dense_f32_q32_kv8_b16_d128_{{[a-z0-9_]*}}_t1024_f8192_kt_sp{{$}}
// PLAIN: __hg_cpu_dense_bf16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_t1024_f8192_kt{{$}}
// PLAIN: __hg_cpu_dense_f32_q32_kv8_b16_d128_{{[a-z0-9_]*}}_t1024_f8192_kt{{$}}
// ZEN5: __hg_cpu_dense_bf16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_t1024_f8192_kt_ov{{$}}
// ZEN5: __hg_cpu_dense_f32_q32_kv8_b16_d128_{{[a-z0-9_]*}}_t1024_v256_f8192_kt_ov{{$}}
// INTEL: __hg_cpu_dense_bf16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_t1024_f8192_kt_ov{{$}}
// INTEL: __hg_cpu_dense_f32_q32_kv8_b16_d128_{{[a-z0-9_]*}}_t1024_f8192_kt_ov{{$}}
// ROWS: __hg_cpu_dense_f32_q32_kv8_b16_d128_{{[a-z0-9_]*}}_t1024_f8192{{$}}
func.func @attn_bf16(%q: memref<1x32x128xf32>, %k: memref<?x8x16x128xbf16>, %v: memref<?x8x16x128xbf16>,
                     %bt: memref<1x?xi32>, %n: memref<1xi32>, %o: memref<1x32x128xf32>) {
  hg.attention q(%q : memref<1x32x128xf32>)
      kv(%k, %v : memref<?x8x16x128xbf16>, memref<?x8x16x128xbf16>)
      table(%bt : memref<1x?xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x32x128xf32>)
      {scale = 0.088 : f32}
  return
}
func.func @attn_f32(%q: memref<1x32x128xf32>, %k: memref<?x8x16x128xf32>, %v: memref<?x8x16x128xf32>,
                    %bt: memref<1x?xi32>, %n: memref<1xi32>, %o: memref<1x32x128xf32>) {
  hg.attention q(%q : memref<1x32x128xf32>)
      kv(%k, %v : memref<?x8x16x128xf32>, memref<?x8x16x128xf32>)
      table(%bt : memref<1x?xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x32x128xf32>)
      {scale = 0.088 : f32}
  return
}
