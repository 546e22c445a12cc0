// RUN: hybridgen-opt %s -split-input-file -hg-split-attention -verify-diagnostics | FileCheck %s

// A static dense split: [0, 64) on the cpu, [64, len) on the gpu, merged into the output.
// CHECK-LABEL: func.func @static_split
// CHECK-SAME: %[[Q:[^:]*]]: memref<2x8x64xf32>
// CHECK-SAME: %[[OUT:[^:]*]]: memref<2x8x64xf32>)
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[S:.*]] = arith.constant 64 : index
// CHECK: %[[O0:.*]] = memref.alloc() : memref<2x8x64xf32>
// CHECK: %[[M0:.*]] = memref.alloc() : memref<2x8xf32>
// CHECK: %[[L0:.*]] = memref.alloc() : memref<2x8xf32>
// CHECK: hg.partial_attention q(%[[Q]] : memref<2x8x64xf32>) {{.*}} range [%[[C0]], %[[S]]) on cpu -> o(%[[O0]] : {{.*}}) m(%[[M0]] : {{.*}}) l(%[[L0]] : {{.*}}) {scale = 1.250000e-01 : f32}
// CHECK: %[[O1:.*]] = memref.alloc() : memref<2x8x64xf32>
// CHECK: %[[M1:.*]] = memref.alloc() : memref<2x8xf32>
// CHECK: %[[L1:.*]] = memref.alloc() : memref<2x8xf32>
// CHECK: hg.partial_attention {{.*}} range [%[[S]], len) on gpu -> o(%[[O1]] : {{.*}}) m(%[[M1]] : {{.*}}) l(%[[L1]] : {{.*}})
// CHECK: hg.merge o(%[[O0]], %[[O1]] : {{.*}}) m(%[[M0]], %[[M1]] : {{.*}}) l(%[[L0]], %[[L1]] : {{.*}}) into(%[[OUT]] : memref<2x8x64xf32>)
// CHECK-COUNT-6: memref.dealloc
// CHECK-NOT: hg.attention
func.func @static_split(%q: memref<2x8x64xf32>, %k: memref<16x2x16x64xbf16>,
                        %v: memref<16x2x16x64xbf16>, %bt: memref<2x8xi32>, %lens: memref<2xi32>,
                        %o: memref<2x8x64xf32>) {
  hg.attention q(%q : memref<2x8x64xf32>)
      kv(%k, %v : memref<16x2x16x64xbf16>, memref<16x2x16x64xbf16>)
      table(%bt : memref<2x8xi32>) lens(%lens : memref<2xi32>) out(%o : memref<2x8x64xf32>)
      {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], point = 64, merge = lse, dense>}
  return
}

// -----

// No annotation: the whole range [0, len) goes to the cpu; window and softcap carry over.
// CHECK-LABEL: func.func @unannotated
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK: hg.partial_attention {{.*}} range [%[[C0]], len) on cpu
// CHECK-SAME: softcap = 3.000000e+01 : f32
// CHECK-SAME: window = 128 : i64
// CHECK-NOT: hg.partial_attention
// CHECK: hg.merge o(%{{[^,]*}} : memref<1x4x32xf32>)
func.func @unannotated(%q: memref<1x4x32xf32>, %k: memref<4x4x8x32xf32>, %v: memref<4x4x8x32xf32>,
                       %bt: memref<1x4xi32>, %lens: memref<1xi32>, %o: memref<1x4x32xf32>) {
  hg.attention q(%q : memref<1x4x32xf32>) kv(%k, %v : memref<4x4x8x32xf32>, memref<4x4x8x32xf32>)
      table(%bt : memref<1x4xi32>) lens(%lens : memref<1xi32>) out(%o : memref<1x4x32xf32>)
      {scale = 0.17677 : f32, window = 128, softcap = 30.0 : f32}
  return
}

// -----

// A runtime point reads hg.split_point; top_k goes to the cpu partial only. Dynamic batch sizes
// the partial buffers from the output.
// CHECK-LABEL: func.func @runtime_sparse
// CHECK: hg.segment 7 {
// CHECK: %[[S:.*]] = hg.split_point : index
// CHECK: %[[B:.*]] = memref.dim %{{.*}}, %{{.*}} : memref<?x8x64xf32>
// CHECK: memref.alloc(%[[B]]) : memref<?x8x64xf32>
// CHECK: hg.partial_attention {{.*}} range [%{{.*}}, %[[S]]) on cpu {{.*}} {scale = 1.250000e-01 : f32, top_k = 16 : i64}
// CHECK: hg.partial_attention {{.*}} range [%[[S]], len) on gpu {{.*}} {scale = 1.250000e-01 : f32}
// CHECK: hg.merge
func.func @runtime_sparse(%q: memref<?x8x64xf32>, %k: memref<?x2x16x64xf16>,
                          %v: memref<?x2x16x64xf16>, %bt: memref<?x8xi32>, %lens: memref<?xi32>,
                          %o: memref<?x8x64xf32>) {
  hg.segment 7 {
    hg.attention q(%q : memref<?x8x64xf32>)
        kv(%k, %v : memref<?x2x16x64xf16>, memref<?x2x16x64xf16>)
        table(%bt : memref<?x8xi32>) lens(%lens : memref<?xi32>) out(%o : memref<?x8x64xf32>)
        {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], point = runtime, sparse, top_k = 16>}
  }
  return
}

// -----

// A gpu-first split: the gpu takes [0, s) and the cpu the rest.
// CHECK-LABEL: func.func @gpu_first
// CHECK: %[[S:.*]] = arith.constant 5 : index
// CHECK: range [%{{.*}}, %[[S]]) on gpu
// CHECK: range [%[[S]], len) on cpu
func.func @gpu_first(%q: memref<1x4x32xf32>, %k: memref<4x4x8x32xf32>, %v: memref<4x4x8x32xf32>,
                     %bt: memref<1x4xi32>, %lens: memref<1xi32>, %o: memref<1x4x32xf32>) {
  hg.attention q(%q : memref<1x4x32xf32>) kv(%k, %v : memref<4x4x8x32xf32>, memref<4x4x8x32xf32>)
      table(%bt : memref<1x4xi32>) lens(%lens : memref<1xi32>) out(%o : memref<1x4x32xf32>)
      {scale = 0.17677 : f32, split = #hg.split<[gpu, cpu], point = 5, merge = lse, dense>}
  return
}

// -----

// Negative: a runtime split point outside any segment has no segment id to ask the runtime with.
func.func @runtime_point_needs_segment(%q: memref<1x4x32xf32>, %k: memref<4x4x8x32xf32>,
                                       %v: memref<4x4x8x32xf32>, %bt: memref<1x4xi32>,
                                       %lens: memref<1xi32>, %o: memref<1x4x32xf32>) {
  // expected-error @+1 {{split point = runtime needs an enclosing hg.segment}}
  hg.attention q(%q : memref<1x4x32xf32>) kv(%k, %v : memref<4x4x8x32xf32>, memref<4x4x8x32xf32>)
      table(%bt : memref<1x4xi32>) lens(%lens : memref<1xi32>) out(%o : memref<1x4x32xf32>)
      {scale = 0.17677 : f32, split = #hg.split<[cpu, gpu], point = runtime, merge = lse, dense>}
  return
}

// -----

// Negative: a static split point past what the block table can hold.
func.func @point_past_capacity(%q: memref<1x4x32xf32>, %k: memref<4x4x8x32xf32>,
                               %v: memref<4x4x8x32xf32>, %bt: memref<1x4xi32>,
                               %lens: memref<1xi32>, %o: memref<1x4x32xf32>) {
  // expected-error @+1 {{split point 33 is outside [0, len]: no sequence holds more than 32 tokens}}
  hg.attention q(%q : memref<1x4x32xf32>) kv(%k, %v : memref<4x4x8x32xf32>, memref<4x4x8x32xf32>)
      table(%bt : memref<1x4xi32>) lens(%lens : memref<1xi32>) out(%o : memref<1x4x32xf32>)
      {scale = 0.17677 : f32, split = #hg.split<[cpu, gpu], point = 33, merge = lse, dense>}
  return
}
