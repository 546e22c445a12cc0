// hybridgen-compile --overlap-pieces on an AVX2 target (x86-64-v3, 16 registers): by default the
// kernels of every KV dtype overlap each piece's logits with the previous piece's p.V (_ov), the
// logits in passes over the heads so that both loops' accumulators fit (on Emerald Rapids the
// x86-64-v3 code read bf16 0.68 -> 0.77-0.79 of the roof, f32 0.77 -> 0.87-0.95); 0 turns it
// off, 1 on, as on AVX-512 targets.
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=x86-64-v3
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=ON
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=x86-64-v3 --overlap-pieces=0
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=OFF
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=x86-64-v3 --overlap-pieces=1
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=ON
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=sapphirerapids
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=ON

// llvm-nm lists symbols by name: bf16 before f32.
// OFF: __hg_cpu_dense_bf16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt{{$}}
// OFF: __hg_cpu_dense_f32_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt{{$}}
// OFF-NOT: _ov
// ON: __hg_cpu_dense_bf16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt_ov{{$}}
// ON: __hg_cpu_dense_f32_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt_ov{{$}}
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
