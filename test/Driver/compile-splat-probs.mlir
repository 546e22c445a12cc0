// hybridgen-compile --splat-probs reaches the lowering: the dense kernels' p.V loads splatted
// probabilities (names end in _ps) on AVX2 and AVX-512 targets; off by default (not measured on
// the AMD CPUs it is predicted to help; docs/cpu-runs.md, "Predicted core cycles").
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=x86-64-v3 --splat-probs
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=ON
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=sapphirerapids --splat-probs
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=ON
// RUN: hybridgen-compile %s -o %t.so --k-transposed --target-cpu=x86-64-v3
// RUN: llvm-nm %t.so | FileCheck %s --check-prefix=OFF

// ON: __hg_cpu_dense_f16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt_ov_ps{{$}}
// OFF: __hg_cpu_dense_f16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt_ov{{$}}
// OFF-NOT: _ps
func.func @attn_f16(%q: memref<1x32x128xf32>, %k: memref<?x8x16x128xf16>, %v: memref<?x8x16x128xf16>,
                    %bt: memref<1x?xi32>, %n: memref<1xi32>, %o: memref<1x32x128xf32>) {
  hg.attention q(%q : memref<1x32x128xf32>)
      kv(%k, %v : memref<?x8x16x128xf16>, memref<?x8x16x128xf16>)
      table(%bt : memref<1x?xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x32x128xf32>)
      {scale = 0.088 : f32}
  return
}
