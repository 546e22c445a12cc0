// hg.prefill_attention becomes a call to a generated, OpenMP-parallel, vectorized kernel.
// RUN: hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu -verify-diagnostics | FileCheck %s

!q = memref<2x7x8x64xf32>
!kv = memref<16x2x16x64xbf16>

// One kernel per configuration: two ops of the same shape share it. Inside a dynamic segment the
// call is bracketed by hgrt_device_begin/end with the run-time id (device 0 = cpu).
// CHECK-LABEL: func.func @prefill_in_dynamic_segment
// CHECK-SAME: (%[[LAYER:[^:]*]]: index
// CHECK: %[[ID:.*]] = arith.index_cast %[[LAYER]] : index to i64
// CHECK: %[[DEV:.*]] = arith.constant 0 : i32
// CHECK: call @hgrt_device_begin(%[[ID]], %[[DEV]]) : (i64, i32) -> ()
// CHECK-NEXT: call @[[KERNEL:__hg_cpu_prefill_bf16_q8_kv2_b16_d64_[0-9a-zx_]*]](%{{.*}}) : (memref<?x?x8x64xf32>, memref<?x2x16x64xbf16>, memref<?x2x16x64xbf16>, memref<?x?xi32>, memref<?xi32>, memref<?x?x8x64xf32>) -> ()
// CHECK-NEXT: call @hgrt_device_end(%[[ID]], %[[DEV]]) : (i64, i32) -> ()
// CHECK: call @[[KERNEL]](
// CHECK-NOT: hg.prefill_attention
// The kernel: parallel over (sequence, kv head, query tile); tiles of 8 positions x group 4.
// CHECK: func.func private @[[KERNEL]](
// CHECK: %[[TILES:.*]] = arith.divui
// CHECK: scf.parallel (%{{.*}}, %{{.*}}, %{{.*}}) = ({{.*}}) to (%{{.*}}, %c2{{.*}}, %[[TILES]])
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<32x64xf32>
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<32x64xf32>
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<32x16xf32>
// Block ids outside the pool are skipped, one compare pair per block.
// CHECK: memref.load %{{.*}} : memref<?x?xi32>
// CHECK-NEXT: %[[PB:.*]] = arith.index_cast %{{.*}} : i32 to index
// CHECK: arith.cmpi sge, %[[PB]]
// CHECK: arith.cmpi slt, %[[PB]]
// Logits: steps of 4 K rows (head_dim 64), each widened once, then per query row of the tile
// one FMA chain per K row and one sum tree storing the step's 4 logits; the remaining rows one
// at a time, with a reduction each.
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c4{{(_[0-9]+)?}} {
// CHECK: vector.load %{{.*}} : memref<?x2x16x64xbf16>, vector<16xbf16>
// CHECK: arith.extf %{{.*}} : vector<16xbf16> to vector<16xf32>
// CHECK: scf.for
// CHECK: vector.fma
// CHECK: vector.shuffle
// CHECK: vector.store %{{.*}} : memref<32x16xf32>, vector<4xf32>
// CHECK: scf.for
// CHECK: scf.for
// CHECK: vector.fma
// CHECK: vector.reduction <add>
// Causal and window masks by lane, softcap, online softmax.
// CHECK: arith.cmpi sle, %{{.*}} : vector<16xi32>
// CHECK: arith.cmpi sge, %{{.*}} : vector<16xi32>
// CHECK: math.tanh %{{.*}} : vector<16xf32>
// CHECK: vector.reduction <maximumf>
// CHECK: math.exp %{{.*}} : vector<16xf32>
// V: each V row widened once for every query row.
// CHECK: arith.extf %{{.*}} : vector<16xbf16> to vector<16xf32>
// CHECK: scf.for
// CHECK: vector.fma
// CHECK-NOT: func.func private @__hg_cpu_prefill
func.func @prefill_in_dynamic_segment(%layer: index, %q: !q, %k: !kv, %v: !kv,
                                      %bt: memref<2x8xi32>, %lens: memref<2xi32>, %o: !q) {
  hg.segment dynamic(%layer) {
    hg.prefill_attention q(%q : !q) kv(%k, %v : !kv, !kv) table(%bt : memref<2x8xi32>)
        lens(%lens : memref<2xi32>) out(%o : !q) {scale = 0.125 : f32, window = 64, softcap = 30.0 : f32}
  }
  hg.prefill_attention q(%q : !q) kv(%k, %v : !kv, !kv) table(%bt : memref<2x8xi32>)
      lens(%lens : memref<2xi32>) out(%o : !q) {scale = 0.125 : f32, window = 64, softcap = 30.0 : f32}
  return
}

// -----

// Without a window no lower-bound mask is built, and without a softcap no tanh; an f32 pool is
// read without widening; MHA (group 1) takes tiles of 32 positions.
// CHECK-LABEL: func.func private @__hg_cpu_prefill_f32_q4_kv4_b16_d64
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<32x64xf32>
// CHECK-NOT: math.tanh
// CHECK-NOT: arith.extf
// CHECK: arith.cmpi sle, %{{.*}} : vector<16xi32>
// CHECK-NOT: arith.cmpi sge, %{{.*}} : vector<16xi32>
// CHECK: return
func.func @prefill_plain(%q: memref<1x?x4x64xf32>, %k: memref<?x4x16x64xf32>,
                         %bt: memref<1x?xi32>, %lens: memref<1xi32>, %o: memref<1x?x4x64xf32>) {
  hg.prefill_attention q(%q : memref<1x?x4x64xf32>) kv(%k, %k : memref<?x4x16x64xf32>, memref<?x4x16x64xf32>)
      table(%bt : memref<1x?xi32>) lens(%lens : memref<1xi32>) out(%o : memref<1x?x4x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// Negative: a head_dim the CPU kernels do not support.
func.func @prefill_odd_head_dim(%q: memref<1x4x2x6xf32>, %k: memref<4x2x16x6xf32>,
                                %bt: memref<1x4xi32>, %lens: memref<1xi32>) {
  // expected-error @+1 {{head_dim 6 is not supported by the CPU lowering}}
  hg.prefill_attention q(%q : memref<1x4x2x6xf32>) kv(%k, %k : memref<4x2x16x6xf32>, memref<4x2x16x6xf32>)
      table(%bt : memref<1x4xi32>) lens(%lens : memref<1xi32>) out(%q : memref<1x4x2x6xf32>) {scale = 0.125 : f32}
  return
}

// -----

// Negative: blocks wider than the kernels unroll.
func.func @prefill_wide_blocks(%q: memref<1x4x2x64xf32>, %k: memref<4x2x512x64xf32>,
                               %bt: memref<1x4xi32>, %lens: memref<1xi32>) {
  // expected-error @+1 {{block size 512 is not supported by the CPU lowering (at most 256)}}
  hg.prefill_attention q(%q : memref<1x4x2x64xf32>) kv(%k, %k : memref<4x2x512x64xf32>, memref<4x2x512x64xf32>)
      table(%bt : memref<1x4xi32>) lens(%lens : memref<1xi32>) out(%q : memref<1x4x2x64xf32>) {scale = 0.125 : f32}
  return
}

// -----

// Negative: a strided (non row-major) query.
func.func @prefill_strided(%q: memref<1x4x2x64xf32, strided<[1024, 256, 128, 1]>>, %k: memref<4x2x16x64xf32>,
                           %bt: memref<1x4xi32>, %lens: memref<1xi32>, %o: memref<1x4x2x64xf32>) {
  // expected-error @+1 {{the CPU lowering needs identity (row-major) layouts}}
  hg.prefill_attention q(%q : memref<1x4x2x64xf32, strided<[1024, 256, 128, 1]>>) kv(%k, %k : memref<4x2x16x64xf32>, memref<4x2x16x64xf32>)
      table(%bt : memref<1x4xi32>) lens(%lens : memref<1xi32>) out(%o : memref<1x4x2x64xf32>) {scale = 0.125 : f32}
  return
}
