// --bf16-dot and --bf16-dot-rounded need AVX512-BF16: for a target without it (x86-64-v3 is
// AVX2 only) hybridgen-compile says that they change nothing, and still compiles; for one with
// it (znver4) it says nothing.
// RUN: hybridgen-compile %s -o %t.so --target-cpu=x86-64-v3 --bf16-dot-rounded 2>&1 | FileCheck %s --check-prefix=NOTE
// RUN: hybridgen-compile %s -o %t.so --target-cpu=x86-64-v3 --bf16-dot 2>&1 | FileCheck %s --check-prefix=NOTE-DOT
// RUN: hybridgen-compile %s -o %t.so --target-cpu=znver4 --bf16-dot-rounded 2>&1 | FileCheck %s --check-prefix=QUIET --allow-empty
// RUN: test -f %t.so

// NOTE: note: the target (x86-64-v3) has no AVX512-BF16, so --bf16-dot-rounded changes nothing
// NOTE-DOT: note: the target (x86-64-v3) has no AVX512-BF16, so --bf16-dot changes nothing
// QUIET-NOT: note:
func.func @attn(%q: memref<2x8x64xf32>, %k: memref<?x2x16x64xbf16>, %v: memref<?x2x16x64xbf16>,
                %bt: memref<2x?xi32>, %n: memref<2xi32>, %o: memref<2x8x64xf32>) {
  hg.attention q(%q : memref<2x8x64xf32>)
      kv(%k, %v : memref<?x2x16x64xbf16>, memref<?x2x16x64xbf16>)
      table(%bt : memref<2x?xi32>) lens(%n : memref<2xi32>) out(%o : memref<2x8x64xf32>)
      {scale = 0.125 : f32}
  return
}
