// hybridgen-compile --spread-prefetch and --overlap-pieces: where the dense kernel on transposed K
// issues its prefetches. By default znver4 spreads them over the piece for 16-bit KV (kernel
// names end in _sp; its f32 kernels: compile-zen4-kv-dtypes.mlir), other AVX-512 and AVX2
// targets overlap each piece's logits with the previous piece's p.V (_ov;
// compile-overlap-avx2.mlir for AVX2); 0 and 1 override the target's choice (the spread one
// wins where both are asked for), anything else is an error naming the option.
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=znver4
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=SPREAD
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=znver4 --spread-prefetch=0
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=PLAIN
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=znver4 --spread-prefetch=0 --overlap-pieces=1
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=OVERLAP
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=sapphirerapids
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=OVERLAP
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=sapphirerapids --overlap-pieces=0
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=PLAIN
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=x86-64-v3
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=OVERLAP
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=x86-64-v3 --overlap-pieces=0
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=PLAIN
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=x86-64-v3 --spread-prefetch=1
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=SPREAD
// RUN: not hybridgen-compile %s -o %t.so --spread-prefetch=2 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not hybridgen-compile %s -o %t.so --overlap-pieces=-2 2>&1 | FileCheck %s --check-prefix=BAD-OVERLAP
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=x86-64-v3 --overlap-pv-lag=2
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=LAG2
// RUN: not hybridgen-compile %s -o %t.so --overlap-pv-lag=5 2>&1 | FileCheck %s --check-prefix=BAD-LAG

// SPREAD: __hg_cpu_dense_bf16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt_sp
// PLAIN: __hg_cpu_dense_bf16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt{{$}}
// PLAIN-NOT: _sp
// PLAIN-NOT: _ov
// OVERLAP: __hg_cpu_dense_bf16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt_ov{{$}}
// BAD: spread_prefetch must be -1 (the target's default), 0 or 1, got 2
// BAD-OVERLAP: overlap_pieces must be -1 (the target's default), 0 or 1, got -2
// --overlap-pv-lag=2 puts the overlapped kernel's p.V two pieces behind its logits (_ov_lag2);
// 0 is the target's default (1), and past 4 is an error.
// LAG2: __hg_cpu_dense_bf16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt_ov_lag2{{$}}
// BAD-LAG: overlap_pv_lag must be 0 (the target's default) or in [1, 4], got 5
func.func @attn(%q: memref<1x32x128xf32>, %k: memref<?x8x16x128xbf16>, %v: memref<?x8x16x128xbf16>,
                %bt: memref<1x?xi32>, %n: memref<1xi32>, %o: memref<1x32x128xf32>) {
  hg.attention q(%q : memref<1x32x128xf32>)
      kv(%k, %v : memref<?x8x16x128xbf16>, memref<?x8x16x128xbf16>)
      table(%bt : memref<1x?xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x32x128xf32>)
      {scale = 0.088 : f32}
  return
}
