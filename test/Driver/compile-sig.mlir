// A valid hg module compiles ahead of time to a .so with a .sig listing its memref signature.
// RUN: hybridgen-compile %s -o %t.so
// RUN: FileCheck %s < %t.so.sig
// RUN: llvm-readelf -d %t.so | FileCheck %s --check-prefix=NEEDED

// CHECK: attn f32:2x8x64 bf16:?x2x16x64 bf16:?x2x16x64 i32:2x? i32:2 f32:2x8x64
// NEEDED-NOT: libMLIR
// NEEDED: libhybridgen_runtime
// NEEDED-NOT: libMLIR
func.func @attn(%q: memref<2x8x64xf32>, %k: memref<?x2x16x64xbf16>, %v: memref<?x2x16x64xbf16>,
                %bt: memref<2x?xi32>, %n: memref<2xi32>, %o: memref<2x8x64xf32>) {
  hg.attention q(%q : memref<2x8x64xf32>)
      kv(%k, %v : memref<?x2x16x64xbf16>, memref<?x2x16x64xbf16>)
      table(%bt : memref<2x?xi32>) lens(%n : memref<2xi32>) out(%o : memref<2x8x64xf32>)
      {scale = 0.125 : f32}
  return
}
