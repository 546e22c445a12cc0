// RUN: hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu -verify-diagnostics | FileCheck %s
// RUN: hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu="all-devices=true" -verify-diagnostics | FileCheck %s --check-prefix=ALL
// RUN: hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu -hg-expand-math -verify-diagnostics | FileCheck %s --check-prefix=EXP

!q = memref<1x8x64xf32>
!kv = memref<8x2x16x64xbf16>
!st = memref<1x8xf32>

// A cpu partial becomes a call to a private kernel: one scf.parallel over (sequence, kv-head unit
// group, token chunk) walking blocks and, per block, kv heads with vectorized online softmax, then one
// scf.parallel merging the chunks by log-sum-exp. bf16 rows are widened 32 at a time into
// (even, odd) halves (q permuted alike), a block's logits come out of a transpose-add tree as one
// vector per head, the softmax statistics of the 4 heads are one vector<4> each, the next pieces
// are prefetched row by row, and the accumulators are put back in natural order at the end.
// CHECK-LABEL: func.func @dense_bf16
// CHECK-NOT: hg.partial_attention
// CHECK: %[[END:.*]] = arith.constant 4611686018427387904 : index
// CHECK: call @[[KERNEL:__hg_cpu_dense_[a-z0-9_]*]](%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[END]], %{{.*}}, %{{.*}}, %{{.*}}) : (memref<?x8x64xf32>, memref<?x2x16x64xbf16>, memref<?x2x16x64xbf16>, memref<?x?xi32>, memref<?xi32>, index, index, memref<?x8x64xf32>, memref<?x8xf32>, memref<?x8xf32>) -> ()
// CHECK: func.func private @[[KERNEL]]
// Units are split into groups where (sequence, chunk) pairs are fewer than two per thread.
// CHECK: call @omp_get_max_threads() : () -> i32
// CHECK: scf.parallel (%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}) = {{.*}} {
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<4x16xf32>
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<2x4x64xf32>
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<8x64xf32>
// CHECK: vector.shuffle %{{.*}} [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30] : vector<32xf32>, vector<32xf32>
// CHECK: memref.prefetch %{{.*}}, read, locality<3>, data : memref<?x2x16x64xbf16>
// Slot-major: blocks, then the kv-head units of a block, each with its statistics from the stack.
// CHECK: scf.for
// CHECK: scf.for
// CHECK: vector.load %{{.*}} : memref<8x64xf32>, vector<16xf32>
// V rows are prefetched into L2 during the logits, the next piece's K rows into L1 during p.V.
// CHECK: memref.prefetch %{{.*}}, read, locality<2>, data : memref<?x2x16x64xbf16>
// CHECK: vector.load %{{.*}} : memref<?x2x16x64xbf16>, vector<32xbf16>
// CHECK: vector.bitcast %{{.*}} : vector<32xbf16> to vector<16xi32>
// CHECK: arith.shli
// CHECK: arith.andi
// CHECK: vector.fma %{{.*}} : vector<16xf32>
// CHECK: vector.shuffle
// CHECK: vector.store %{{.*}} : memref<4x16xf32>, vector<16xf32>
// CHECK: vector.load %{{.*}} : memref<2x4xf32>, vector<4xf32>
// CHECK: arith.maximumf %{{.*}} : vector<16xf32>
// CHECK: math.exp %{{.*}} : vector<4xf32>
// CHECK: math.exp %{{.*}} : vector<16xf32>
// CHECK: vector.reduction <add>
// CHECK: scf.if
// CHECK: memref.prefetch %{{.*}}, read, locality<3>, data : memref<?x2x16x64xbf16>
// CHECK: vector.load %{{.*}} : memref<?x2x16x64xbf16>, vector<32xbf16>
// CHECK: memref.load %{{.*}} : memref<4x16xf32>
// CHECK: vector.fma %{{.*}} : vector<16xf32>
// CHECK: vector.shuffle %{{.*}} [0, 16, 1, 17, 2, 18
// CHECK: scf.parallel (%{{.*}}, %{{.*}}) = {{.*}} {
// CHECK: math.exp
// CHECK: memref.dealloc
// EXP-LABEL: func.func private @__hg_cpu_dense
// EXP-NOT: math.exp
// EXP-NOT: math.tanh
// EXP: return
func.func @dense_bf16(%q: !q, %k: !kv, %v: !kv, %bt: memref<1x8xi32>, %lens: memref<1xi32>,
                      %o: !q, %m: !st, %l: !st) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : !q) kv(%k, %v : !kv, !kv) table(%bt : memref<1x8xi32>)
      lens(%lens : memref<1xi32>) range [%c0, len) on cpu -> o(%o : !q) m(%m : !st) l(%l : !st)
      {scale = 0.125 : f32}
  return
}

// -----

// Ops of one configuration share a kernel; another scale, softcap or dtype gets its own.
// CHECK-LABEL: func.func @shared_kernels
// CHECK: call @[[A:__hg_cpu_dense_[a-z0-9_]*]](
// CHECK: call @[[A]](
// CHECK: call @[[B:__hg_cpu_dense_[a-z0-9_]*]](
// CHECK-COUNT-2: func.func private @__hg_cpu_dense
// CHECK-NOT: func.func private @__hg_cpu_dense
// CHECK: math.tanh
func.func @shared_kernels(%q: memref<2x4x32xf32>, %k: memref<4x4x8x32xf32>, %v: memref<4x4x8x32xf32>,
                          %bt: memref<2x4xi32>, %lens: memref<2xi32>, %o: memref<2x4x32xf32>,
                          %m: memref<2x4xf32>, %l: memref<2x4xf32>, %s: index) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<2x4x32xf32>) kv(%k, %v : memref<4x4x8x32xf32>, memref<4x4x8x32xf32>)
      table(%bt : memref<2x4xi32>) lens(%lens : memref<2xi32>) range [%c0, %s) on cpu
      -> o(%o : memref<2x4x32xf32>) m(%m : memref<2x4xf32>) l(%l : memref<2x4xf32>) {scale = 0.25 : f32}
  hg.partial_attention q(%q : memref<2x4x32xf32>) kv(%k, %v : memref<4x4x8x32xf32>, memref<4x4x8x32xf32>)
      table(%bt : memref<2x4xi32>) lens(%lens : memref<2xi32>) range [%s, len) on cpu
      -> o(%o : memref<2x4x32xf32>) m(%m : memref<2x4xf32>) l(%l : memref<2x4xf32>) {scale = 0.25 : f32}
  hg.partial_attention q(%q : memref<2x4x32xf32>) kv(%k, %v : memref<4x4x8x32xf32>, memref<4x4x8x32xf32>)
      table(%bt : memref<2x4xi32>) lens(%lens : memref<2xi32>) range [%s, len) on cpu
      -> o(%o : memref<2x4x32xf32>) m(%m : memref<2x4xf32>) l(%l : memref<2x4xf32>)
      {scale = 0.25 : f32, softcap = 20.0 : f32}
  return
}

// -----

!q = memref<1x8x64xf32>
!kv = memref<8x2x16x64xbf16>
!st = memref<1x8xf32>

// Inside a segment the kernel call is bracketed by hgrt_device_begin/end (device 0 = cpu). A gpu
// partial is left to the GPU lowering unless all-devices is set; then it runs on the cpu but is
// still reported as device 1.
// CHECK-DAG: func.func private @hgrt_device_begin(i64, i32)
// CHECK-DAG: func.func private @hgrt_device_end(i64, i32)
// CHECK-LABEL: func.func @segment_devices
// CHECK: hg.segment 4 {
// CHECK: %[[ID:.*]] = arith.constant 4 : i64
// CHECK: %[[DEV:.*]] = arith.constant 0 : i32
// CHECK: call @hgrt_device_begin(%[[ID]], %[[DEV]]) : (i64, i32) -> ()
// CHECK-NEXT: call @__hg_cpu_dense
// CHECK-NEXT: call @hgrt_device_end(%[[ID]], %[[DEV]]) : (i64, i32) -> ()
// CHECK: hg.partial_attention {{.*}} on gpu
// CHECK: scf.parallel
// CHECK-NOT: hg.merge
// ALL-LABEL: func.func @segment_devices
// ALL: call @hgrt_device_begin(%{{.*}}, %{{.*}}) : (i64, i32) -> ()
// ALL: %[[GPU:.*]] = arith.constant 1 : i32
// ALL: call @hgrt_device_begin(%{{.*}}, %[[GPU]]) : (i64, i32) -> ()
// ALL-NEXT: call @__hg_cpu_dense
// ALL-NEXT: call @hgrt_device_end(%{{.*}}, %[[GPU]]) : (i64, i32) -> ()
// ALL-NOT: hg.partial_attention
func.func @segment_devices(%q: !q, %k: !kv, %v: !kv, %bt: memref<1x8xi32>, %lens: memref<1xi32>,
                           %out: !q, %o0: !q, %m0: !st, %l0: !st, %o1: !q, %m1: !st, %l1: !st) {
  hg.segment 4 {
    %c0 = arith.constant 0 : index
    %s = hg.split_point : index
    hg.partial_attention q(%q : !q) kv(%k, %v : !kv, !kv) table(%bt : memref<1x8xi32>)
        lens(%lens : memref<1xi32>) range [%c0, %s) on cpu -> o(%o0 : !q) m(%m0 : !st) l(%l0 : !st)
        {scale = 0.125 : f32}
    hg.partial_attention q(%q : !q) kv(%k, %v : !kv, !kv) table(%bt : memref<1x8xi32>)
        lens(%lens : memref<1xi32>) range [%s, len) on gpu -> o(%o1 : !q) m(%m1 : !st) l(%l1 : !st)
        {scale = 0.125 : f32}
    hg.merge o(%o0, %o1 : !q, !q) m(%m0, %m1 : !st, !st) l(%l0, %l1 : !st, !st) into(%out : !q)
  }
  return
}

// -----

// A merge with a dynamic head_dim falls back to a scalar loop over the row.
// CHECK-LABEL: func.func @merge_dynamic_head_dim
// CHECK: scf.parallel
// CHECK: arith.cmpf ogt
// CHECK: scf.for
// CHECK: memref.load %{{.*}} : memref<?x4x?xf32>
// CHECK-NOT: hg.merge
func.func @merge_dynamic_head_dim(%o0: memref<?x4x?xf32>, %o1: memref<?x4x?xf32>,
                                  %m0: memref<?x4xf32>, %m1: memref<?x4xf32>,
                                  %l0: memref<?x4xf32>, %l1: memref<?x4xf32>,
                                  %out: memref<?x4x?xf32>) {
  hg.merge o(%o0, %o1 : memref<?x4x?xf32>, memref<?x4x?xf32>)
           m(%m0, %m1 : memref<?x4xf32>, memref<?x4xf32>)
           l(%l0, %l1 : memref<?x4xf32>, memref<?x4xf32>) into(%out : memref<?x4x?xf32>)
  return
}

// -----

// Negative: head_dim 6 is not a multiple of 4.
func.func @odd_head_dim(%q: memref<1x2x6xf32>, %k: memref<4x2x8x6xf32>, %v: memref<4x2x8x6xf32>,
                        %bt: memref<1x4xi32>, %lens: memref<1xi32>, %o: memref<1x2x6xf32>,
                        %m: memref<1x2xf32>, %l: memref<1x2xf32>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{head_dim 6 is not supported by the CPU lowering (needs a multiple of 4 up to 512)}}
  hg.partial_attention q(%q : memref<1x2x6xf32>) kv(%k, %v : memref<4x2x8x6xf32>, memref<4x2x8x6xf32>)
      table(%bt : memref<1x4xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x2x6xf32>) m(%m : memref<1x2xf32>) l(%l : memref<1x2xf32>) {scale = 0.5 : f32}
  return
}

// -----

// Negative: blocks of 512 tokens would need a 512-lane logit vector per head.
func.func @huge_block(%q: memref<1x2x64xf32>, %k: memref<4x2x512x64xf32>, %v: memref<4x2x512x64xf32>,
                      %bt: memref<1x4xi32>, %lens: memref<1xi32>, %o: memref<1x2x64xf32>,
                      %m: memref<1x2xf32>, %l: memref<1x2xf32>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{block size 512 is not supported by the CPU lowering (at most 256)}}
  hg.partial_attention q(%q : memref<1x2x64xf32>) kv(%k, %v : memref<4x2x512x64xf32>, memref<4x2x512x64xf32>)
      table(%bt : memref<1x4xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x2x64xf32>) m(%m : memref<1x2xf32>) l(%l : memref<1x2xf32>) {scale = 0.5 : f32}
  return
}

// -----

// Negative: a strided query view is not row-major.
func.func @strided_query(%q: memref<1x2x64xf32, strided<[256, 128, 1]>>, %k: memref<4x2x8x64xf32>,
                         %v: memref<4x2x8x64xf32>, %bt: memref<1x4xi32>, %lens: memref<1xi32>,
                         %o: memref<1x2x64xf32>, %m: memref<1x2xf32>, %l: memref<1x2xf32>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{the CPU lowering needs identity (row-major) layouts}}
  hg.partial_attention q(%q : memref<1x2x64xf32, strided<[256, 128, 1]>>) kv(%k, %v : memref<4x2x8x64xf32>, memref<4x2x8x64xf32>)
      table(%bt : memref<1x4xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x2x64xf32>) m(%m : memref<1x2xf32>) l(%l : memref<1x2xf32>) {scale = 0.5 : f32}
  return
}

// -----

// top_k selects the sparse kernel: parallel over (sequence, kv-head), a bisection of 32 vector
// counting passes over the int32 image of the logits, and V rows read only under scf.if.
// CHECK-LABEL: func.func @sparse_top_k
// CHECK: call @[[K:__hg_cpu_sparse_[a-z0-9_]*]](
// CHECK: func.func private @[[K]]
// CHECK: scf.parallel (%{{.*}}, %{{.*}}) = {{.*}} {
// CHECK: memref.alloc(%{{.*}}) : memref<2x?xf32>
// CHECK: memref.alloc(%{{.*}}) : memref<2x?xi32>
// CHECK: arith.bitcast %{{.*}} : vector<16xf32> to vector<16xi32>
// CHECK: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[C32]]
// CHECK: vector.load %{{.*}} : memref<2x?xi32>, vector<16xi32>
// CHECK: scf.if
// CHECK: vector.load %{{.*}} : memref<?x2x16x64xf16>, vector<64xf16>
// CHECK: vector.fma
func.func @sparse_top_k(%q: memref<1x4x64xf32>, %k: memref<8x2x16x64xf16>, %v: memref<8x2x16x64xf16>,
                        %bt: memref<1x8xi32>, %lens: memref<1xi32>, %o: memref<1x4x64xf32>,
                        %m: memref<1x4xf32>, %l: memref<1x4xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<1x4x64xf32>) kv(%k, %v : memref<8x2x16x64xf16>, memref<8x2x16x64xf16>)
      table(%bt : memref<1x8xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x4x64xf32>) m(%m : memref<1x4xf32>) l(%l : memref<1x4xf32>)
      {scale = 0.125 : f32, top_k = 8}
  return
}

// -----

// Negative: the kernel keeps q and the accumulators of every head on each OpenMP thread's stack
// (1 MiB here; 4096 heads of 512 would be 16 MiB, past libomp's 4 MiB default worker stack).
func.func @too_many_heads(%q: memref<1x1024x128xf32>, %k: memref<4x8x16x128xf32>,
                          %bt: memref<1x4xi32>, %lens: memref<1xi32>, %m: memref<1x1024xf32>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{q_heads x head_dim = 1024 x 128 is not supported by the CPU lowering (at most 16384 elements per sequence)}}
  hg.partial_attention q(%q : memref<1x1024x128xf32>) kv(%k, %k : memref<4x8x16x128xf32>, memref<4x8x16x128xf32>)
      table(%bt : memref<1x4xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%q : memref<1x1024x128xf32>) m(%m : memref<1x1024xf32>) l(%m : memref<1x1024xf32>) {scale = 0.5 : f32}
  return
}
