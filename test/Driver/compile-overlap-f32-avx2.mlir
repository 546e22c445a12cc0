// hybridgen-compile --overlap-pieces by KV dtype on an AVX2 target (x86-64-v3, 16 registers):
// by default the f32 kernel overlaps each piece's logits with the previous piece's p.V (_ov; it
// read 0.77 -> 0.87 of the roof on Emerald Rapids though it spills) and the bf16 kernel does
// not (it lost there); 0 turns both off, 1 both on. AVX-512 targets overlap both by default.
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=x86-64-v3
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=DEFAULT
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=x86-64-v3 --overlap-pieces=0
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=OFF
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=x86-64-v3 --overlap-pieces=1
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=ON
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=sapphirerapids
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=ON

// llvm-nm lists symbols by name: bf16 before f32.
// DEFAULT: __hg_cpu_dense_bf16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt{{$}}
// DEFAULT: __hg_cpu_dense_f32_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt_ov{{$}}
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
