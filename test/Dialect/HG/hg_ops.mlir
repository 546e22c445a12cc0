// Round trip: print, re-parse, print again; both prints must agree and keep every field.
// RUN: hybridgen-opt %s | hybridgen-opt | FileCheck %s
// RUN: hybridgen-opt %s | hybridgen-opt > %t.1 && hybridgen-opt %s > %t.2 && diff %t.1 %t.2
// RUN: hybridgen-opt -mlir-print-op-generic %s | hybridgen-opt | FileCheck %s

// An attention with a static dense split between cpu and gpu, GQA 4, bf16 KV.
// CHECK-LABEL: func.func @attention_static_split
// CHECK: hg.attention q(%{{.*}} : memref<2x32x128xf32>) kv(%{{.*}}, %{{.*}} : memref<64x8x16x128xbf16>, memref<64x8x16x128xbf16>) table(%{{.*}} : memref<2x32xi32>) lens(%{{.*}} : memref<2xi32>) out(%{{.*}} : memref<2x32x128xf32>)
// CHECK-SAME: split = #hg.split<[cpu, gpu], point = 256, merge = lse, dense>
func.func @attention_static_split(%q: memref<2x32x128xf32>, %k: memref<64x8x16x128xbf16>,
                                  %v: memref<64x8x16x128xbf16>, %bt: memref<2x32xi32>,
                                  %lens: memref<2xi32>, %o: memref<2x32x128xf32>) {
  hg.attention q(%q : memref<2x32x128xf32>)
      kv(%k, %v : memref<64x8x16x128xbf16>, memref<64x8x16x128xbf16>)
      table(%bt : memref<2x32xi32>) lens(%lens : memref<2xi32>)
      out(%o : memref<2x32x128xf32>)
      {scale = 0.0883883 : f32, split = #hg.split<[cpu, gpu], point = 256, merge = lse, dense>}
  return
}

// A runtime split point inside a segment, sparse CPU side, window and softcap, dynamic batch.
// CHECK-LABEL: func.func @attention_runtime_sparse
// CHECK: hg.segment 7 {
// CHECK: softcap = 5.000000e+01 : f32
// CHECK-SAME: split = #hg.split<[cpu, gpu], point = runtime, merge = lse, sparse, top_k = 64>
// CHECK-SAME: window = 4096 : i64
func.func @attention_runtime_sparse(%q: memref<?x8x64xf32>, %k: memref<?x2x32x64xf16>,
                                    %v: memref<?x2x32x64xf16>, %bt: memref<?x16xi32>,
                                    %lens: memref<?xi32>, %o: memref<?x8x64xf32>) {
  hg.segment 7 {
    hg.attention q(%q : memref<?x8x64xf32>)
        kv(%k, %v : memref<?x2x32x64xf16>, memref<?x2x32x64xf16>)
        table(%bt : memref<?x16xi32>) lens(%lens : memref<?xi32>)
        out(%o : memref<?x8x64xf32>)
        {scale = 0.125 : f32, window = 4096, softcap = 50.0 : f32,
         split = #hg.split<[cpu, gpu], point = runtime, sparse, top_k = 64>}
  }
  return
}

// Partials over [0, s) and [s, len), a split point read from the runtime, and their merge.
// CHECK-LABEL: func.func @partials_and_merge
// CHECK: hg.segment 0 {
// CHECK: %[[S:.*]] = hg.split_point : index
// CHECK: hg.partial_attention {{.*}} range [%{{.*}}, %[[S]]) on cpu -> o(%{{.*}} : memref<1x8x64xf32>) m(%{{.*}} : memref<1x8xf32>) l(%{{.*}} : memref<1x8xf32>) {scale = 1.250000e-01 : f32, top_k = 16 : i64}
// CHECK: hg.partial_attention {{.*}} range [%[[S]], len) on gpu
// CHECK: hg.merge o(%{{.*}}, %{{.*}} : memref<1x8x64xf32>, memref<1x8x64xf32>) m(%{{.*}}, %{{.*}} : memref<1x8xf32>, memref<1x8xf32>) l(%{{.*}}, %{{.*}} : memref<1x8xf32>, memref<1x8xf32>) into(%{{.*}} : memref<1x8x64xf32>)
func.func @partials_and_merge(%q: memref<1x8x64xf32>, %k: memref<8x2x16x64xf32>,
                              %v: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>,
                              %lens: memref<1xi32>, %o: memref<1x8x64xf32>,
                              %o0: memref<1x8x64xf32>, %m0: memref<1x8xf32>, %l0: memref<1x8xf32>,
                              %o1: memref<1x8x64xf32>, %m1: memref<1x8xf32>, %l1: memref<1x8xf32>) {
  hg.segment 0 {
    %c0 = arith.constant 0 : index
    %s = hg.split_point : index
    hg.partial_attention q(%q : memref<1x8x64xf32>)
        kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>)
        table(%bt : memref<1x8xi32>) lens(%lens : memref<1xi32>)
        range [%c0, %s) on cpu
        -> o(%o0 : memref<1x8x64xf32>) m(%m0 : memref<1x8xf32>) l(%l0 : memref<1x8xf32>)
        {scale = 0.125 : f32, top_k = 16}
    hg.partial_attention q(%q : memref<1x8x64xf32>)
        kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>)
        table(%bt : memref<1x8xi32>) lens(%lens : memref<1xi32>)
        range [%s, len) on gpu
        -> o(%o1 : memref<1x8x64xf32>) m(%m1 : memref<1x8xf32>) l(%l1 : memref<1x8xf32>)
        {scale = 0.125 : f32}
    hg.merge o(%o0, %o1 : memref<1x8x64xf32>, memref<1x8x64xf32>)
             m(%m0, %m1 : memref<1x8xf32>, memref<1x8xf32>)
             l(%l0, %l1 : memref<1x8xf32>, memref<1x8xf32>)
             into(%o : memref<1x8x64xf32>)
  }
  return
}

// A one-device split and an f32 pool with a single partial merged on its own.
// CHECK-LABEL: func.func @single_device
// CHECK: split = #hg.split<[cpu], point = 0, merge = lse, dense>
func.func @single_device(%q: memref<1x4x32xf32>, %k: memref<4x4x8x32xf32>,
                         %v: memref<4x4x8x32xf32>, %bt: memref<1x4xi32>,
                         %lens: memref<1xi32>, %o: memref<1x4x32xf32>) {
  hg.attention q(%q : memref<1x4x32xf32>)
      kv(%k, %v : memref<4x4x8x32xf32>, memref<4x4x8x32xf32>)
      table(%bt : memref<1x4xi32>) lens(%lens : memref<1xi32>)
      out(%o : memref<1x4x32xf32>)
      {scale = 0.17677 : f32, split = #hg.split<[cpu], point = 0>}
  return
}

// Chunked prefill: 64 new tokens of GQA 4 over a bf16 pool, with window and softcap.
// CHECK-LABEL: func.func @prefill_window_softcap
// CHECK: hg.prefill_attention q(%{{.*}} : memref<1x64x32x128xf32>) kv(%{{.*}}, %{{.*}} : memref<64x8x16x128xbf16>, memref<64x8x16x128xbf16>) table(%{{.*}} : memref<1x32xi32>) lens(%{{.*}} : memref<1xi32>) out(%{{.*}} : memref<1x64x32x128xf32>)
// CHECK-SAME: scale = 8.838830e-02 : f32
// CHECK-SAME: softcap = 3.000000e+01 : f32
// CHECK-SAME: window = 4096 : i64
func.func @prefill_window_softcap(%q: memref<1x64x32x128xf32>, %k: memref<64x8x16x128xbf16>,
                                  %v: memref<64x8x16x128xbf16>, %bt: memref<1x32xi32>,
                                  %lens: memref<1xi32>, %o: memref<1x64x32x128xf32>) {
  hg.prefill_attention q(%q : memref<1x64x32x128xf32>)
      kv(%k, %v : memref<64x8x16x128xbf16>, memref<64x8x16x128xbf16>)
      table(%bt : memref<1x32xi32>) lens(%lens : memref<1xi32>)
      out(%o : memref<1x64x32x128xf32>)
      {scale = 0.0883883 : f32, window = 4096, softcap = 30.0 : f32}
  return
}

// Prefill with a dynamic batch and chunk, f32 pool, no window.
// CHECK-LABEL: func.func @prefill_dynamic
// CHECK: hg.prefill_attention q(%{{.*}} : memref<?x?x8x64xf32>) {{.*}} out(%{{.*}} : memref<?x?x8x64xf32>) {scale = 1.250000e-01 : f32}
func.func @prefill_dynamic(%q: memref<?x?x8x64xf32>, %k: memref<?x8x16x64xf32>,
                           %v: memref<?x8x16x64xf32>, %bt: memref<?x?xi32>,
                           %lens: memref<?xi32>, %o: memref<?x?x8x64xf32>) {
  hg.prefill_attention q(%q : memref<?x?x8x64xf32>)
      kv(%k, %v : memref<?x8x16x64xf32>, memref<?x8x16x64xf32>)
      table(%bt : memref<?x?xi32>) lens(%lens : memref<?xi32>)
      out(%o : memref<?x?x8x64xf32>) {scale = 0.125 : f32}
  return
}

// A segment whose id is a run-time value (one layer function serving every layer), with a
// runtime split point inside.
// CHECK-LABEL: func.func @dynamic_segment
// CHECK-SAME: (%[[LAYER:.*]]: index
// CHECK: hg.segment dynamic(%[[LAYER]]) {
// CHECK-NEXT: hg.split_point : index
// CHECK: split = #hg.split<[cpu, gpu], point = runtime, merge = lse, dense>
func.func @dynamic_segment(%layer: index, %q: memref<1x8x64xf32>, %k: memref<8x2x16x64xf32>,
                           %v: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>,
                           %lens: memref<1xi32>, %o: memref<1x8x64xf32>) {
  hg.segment dynamic(%layer) {
    %s = hg.split_point : index
    hg.attention q(%q : memref<1x8x64xf32>)
        kv(%k, %v : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>)
        table(%bt : memref<1x8xi32>) lens(%lens : memref<1xi32>)
        out(%o : memref<1x8x64xf32>)
        {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], point = runtime>}
  }
  return
}
