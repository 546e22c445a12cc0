// RUN: hybridgen-opt %s -split-input-file -verify-diagnostics -hg-lower-attention-to-gpu | FileCheck %s
// RUN: hybridgen-opt %s -split-input-file -verify-diagnostics -hg-lower-attention-to-gpu="sm-count=16 min-chunk-tokens=64" | FileCheck %s --check-prefix=SIZE

// The two halves of a bf16 split (GQA group 4, head_dim 64: 8 lanes of 16 bytes per row): the
// kernels go into one gpu.module; on the host the launch comes first, the CPU half runs before
// the wait, only (o, m, l) are copied back, and the else branch is the CPU fallback.
// CHECK-LABEL: func.func @split_bf16
// CHECK-SAME: (%[[Q:.*]]: memref<2x8x64xf32>, %[[K:.*]]: memref<8x2x16x64xbf16>, %[[V:.*]]: memref<8x2x16x64xbf16>, %[[BT:.*]]: memref<2x4xi32>, %[[LENS:.*]]: memref<2xi32>
// CHECK: %[[AVAIL:.*]] = call @hgrt_gpu_available() : () -> i32
// CHECK: %[[KP:.*]] = call @hgrt_gpu_alias(%{{.*}}) : (!llvm.ptr) -> !llvm.ptr
// CHECK: %[[KA:.*]] = llvm.ptrtoint %[[KP]] : !llvm.ptr to i64
// CHECK: %[[VP:.*]] = call @hgrt_gpu_alias(%{{.*}}) : (!llvm.ptr) -> !llvm.ptr
// CHECK: %[[VA:.*]] = llvm.ptrtoint %[[VP]] : !llvm.ptr to i64
// The longest range of the batch: with no token on the GPU side nothing is launched.
// CHECK: %[[SPAN:.*]] = scf.for
// CHECK: arith.cmpi sgt, %[[SPAN]], %c0
// With a GPU, the runtime checks the table and lengths (from the split point on) before launch.
// CHECK: %[[OK:.*]] = scf.if %{{.*}} -> (i1) {
// CHECK: %[[CHK:.*]] = func.call @hgrt_gpu_check_batch(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %c16_i64, %{{.*}}) : (!llvm.ptr, !llvm.ptr, i64, i64, i64, i64) -> i32
// CHECK: scf.if %[[OK]] {
// The chunk count: ceil(sm-count * 4 / (batch * kv_heads)) capped by the longest range / 256.
// The chunk count: of the counts that fill 1..4 waves of 132 x 2 resident blocks (work = batch
// x kv_heads), the one whose last wave is fullest; then at most one chunk per 256 tokens.
// CHECK: arith.divui %c264, %[[WORK:.*]] : index
// CHECK: arith.divui %c528, %[[WORK]] : index
// CHECK: arith.divui %c792, %[[WORK]] : index
// CHECK: arith.divui %c1056, %[[WORK]] : index
// CHECK: arith.addi %[[SPAN]], %c255
// CHECK: %[[T0:.*]] = gpu.wait async
// CHECK: %[[QD:.*]], %{{.*}} = gpu.alloc async [%[[T0]]] () : memref<2x8x64xf32>
// CHECK: gpu.memcpy async [%{{.*}}] %[[QD]], %[[Q]] : memref<2x8x64xf32>, memref<2x8x64xf32>
// CHECK: gpu.memcpy async [%{{.*}}] %{{.*}}, %[[BT]]
// CHECK: gpu.memcpy async [%{{.*}}] %{{.*}}, %[[LENS]]
// CHECK: %[[P:.*]] = gpu.launch_func async [%{{.*}}] @hg_gpu_kernels::@[[PARTIAL:__hg_gpu_partial_bf16_q8_kv2_b16_d64_[a-z0-9_]*]] blocks in (%[[CHUNKS:.*]], %c2{{.*}}, %{{.*}}) threads in (%c128{{.*}}, %c1{{.*}}, %c1{{.*}}) args(%{{.*}} : memref<?x8x64xf32>, %[[KA]] : i64, %[[VA]] : i64,
// CHECK: %[[C:.*]] = gpu.launch_func async [%[[P]]] @hg_gpu_kernels::@[[COMBINE:__hg_gpu_combine_[a-z0-9_]*]] blocks in (%c8{{.*}}, %{{.*}}, %c1{{.*}}) threads in (%c128
// The CPU half, then the copies back (which block the host) and the frees (which wait for the
// device), then the wait.
// CHECK-NEXT: hg.partial_attention {{.*}} range [%{{.*}}, %{{.*}}) on cpu
// CHECK-NEXT: gpu.memcpy async [%[[C]]] %[[OG:.*]], %{{.*}} : memref<2x8x64xf32>, memref<2x8x64xf32>
// CHECK-NEXT: gpu.memcpy async
// CHECK-NEXT: gpu.memcpy async
// CHECK-COUNT-8: gpu.dealloc async
// CHECK-NEXT: %[[LAST:.*]] = gpu.dealloc async
// CHECK-NEXT: gpu.wait [%[[LAST]]]
// CHECK-NEXT: } else {
// CHECK-NEXT: hg.partial_attention {{.*}} range [%{{.*}}, len) on cpu
// CHECK: memref.store %cst{{.*}}, %[[OG]][
// CHECK: }
// CHECK-NOT: on gpu
// CHECK: hg.merge
// CHECK: gpu.module @hg_gpu_kernels {
// CHECK: gpu.func @[[PARTIAL]](%{{.*}}: memref<?x8x64xf32>, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: index, %{{.*}}: memref<?x?xi32>, %{{.*}}: memref<?xi32>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: memref<?x64xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>) workgroup(%{{.*}} : memref<1024xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<16xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<16xf32, #gpu.address_space<workgroup>>) kernel attributes {known_block_size = array<i32: 128, 1, 1>, nvvm.minctasm = 2 : i32}
// CHECK: gpu.block_id  x
// CHECK: gpu.block_id  y
// CHECK: gpu.block_id  z
// 16-byte invariant loads of K and V rows (ld.global.nc.v4 in PTX), software-pipelined: the first
// step's 4 row groups of K and V before the loop (where the warp has rows), and in the loop the
// next step's before this step's arithmetic, carried as raw words; the bf16 pairs widened by
// shift and mask.
// CHECK: %[[FIRST:.*]]:8 = scf.if %{{.*}} -> (vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>) {
// CHECK-COUNT-8: llvm.load %{{.*}} invariant {alignment = 16 : i64} : !llvm.ptr<1> -> vector<4xi32>
// CHECK: } else {
// CHECK: scf.for {{.*}} iter_args({{.*}}%{{.*}} = %[[FIRST]]#0, {{.*}}%{{.*}} = %[[FIRST]]#7) -> ({{.*}}vector<4xi32>) {
// CHECK-COUNT-8: llvm.load %{{.*}} invariant {alignment = 16 : i64} : !llvm.ptr<1> -> vector<4xi32>
// CHECK-NOT: gpu.shuffle
// CHECK: arith.shli
// CHECK: arith.andi
// The dot product finished across the row's 8 lanes.
// CHECK: gpu.shuffle  xor %{{.*}}, %c4_i32
// CHECK: gpu.shuffle  xor %{{.*}}, %c2_i32
// CHECK: gpu.shuffle  xor %{{.*}}, %c1_i32
// CHECK: math.exp
// Then the warp's 4 row groups (lanes 8 and 16 apart) and the warps through shared memory.
// CHECK: gpu.shuffle  xor %{{.*}}, %c8_i32
// CHECK: gpu.shuffle  xor %{{.*}}, %c16_i32
// CHECK: gpu.barrier
// CHECK: gpu.func @[[COMBINE]](%{{.*}}: memref<?x64xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: index, %{{.*}}: memref<?x8x64xf32>, %{{.*}}: memref<?x8xf32>, %{{.*}}: memref<?x8xf32>) workgroup({{.*}}) kernel
// The chunks' max and sum shared by the block's 4 warps (shuffles, then one slot per warp), and
// the columns accumulated 8 chunks a step.
// CHECK: gpu.shuffle  xor %{{.*}}, %c16_i32
// CHECK: gpu.barrier
// CHECK: math.exp
// CHECK: gpu.barrier
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c8
// CHECK-COUNT-8: memref.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<?x64xf32>
// SIZE-LABEL: func.func @split_bf16
// SIZE: arith.constant 64 : index
// SIZE: arith.constant 63 : index
!q = memref<2x8x64xf32>
!p = memref<8x2x16x64xbf16>
!bt = memref<2x4xi32>
!ln = memref<2xi32>
!st = memref<2x8xf32>
func.func @split_bf16(%q: !q, %k: !p, %v: !p, %bt: !bt, %lens: !ln, %o0: !q, %m0: !st, %l0: !st,
                      %o1: !q, %m1: !st, %l1: !st, %o: !q) {
  %c0 = arith.constant 0 : index
  %s = arith.constant 21 : index
  hg.partial_attention q(%q : !q) kv(%k, %v : !p, !p) table(%bt : !bt) lens(%lens : !ln)
      range [%c0, %s) on cpu -> o(%o0 : !q) m(%m0 : !st) l(%l0 : !st) {scale = 0.125 : f32}
  hg.partial_attention q(%q : !q) kv(%k, %v : !p, !p) table(%bt : !bt) lens(%lens : !ln)
      range [%s, len) on gpu -> o(%o1 : !q) m(%m1 : !st) l(%l1 : !st) {scale = 0.125 : f32}
  hg.merge o(%o0, %o1 : !q, !q) m(%m0, %m1 : !st, !st) l(%l0, %l1 : !st, !st) into(%o : !q)
  return
}

// -----

// A GPU partial without a CPU partner, in a segment: the device part is bracketed by
// hgrt_device_begin/end(segment, 1), and without a GPU it runs as a CPU partial. f32 rows of 128
// elements take a whole warp (32 lanes of 4 floats): the dot product needs 5 shuffles (16..1);
// softcap is tanh.
// CHECK-LABEL: func.func @gpu_only_f32
// CHECK: hg.segment 7
// CHECK: scf.if
// CHECK: call @hgrt_device_begin(%c7_i64, %c1_i32)
// CHECK: gpu.launch_func async
// CHECK: gpu.launch_func async
// CHECK: gpu.wait [
// CHECK: call @hgrt_device_end(%c7_i64{{.*}}, %c1_i32{{.*}})
// CHECK-NEXT: } else {
// CHECK-NEXT: hg.partial_attention {{.*}} range [%{{.*}}, len) on cpu {{.*}} {scale = 0.0883883461 : f32, softcap = 3.000000e+01 : f32, window = 100 : i64}
// CHECK-NEXT: }
// CHECK: gpu.func @__hg_gpu_partial_f32_q32_kv8_b16_d128_{{[a-z0-9]*}}_w100_c0x41f00000(
// CHECK-SAME: workgroup(%{{.*}} : memref<2048xf32, #gpu.address_space<workgroup>>
// CHECK: gpu.shuffle  xor %{{.*}}, %c16_i32
// CHECK: gpu.shuffle  xor %{{.*}}, %c1_i32
// CHECK: math.tanh
// CHECK: gpu.barrier
!q = memref<?x32x128xf32>
!p = memref<?x8x16x128xf32>
!bt = memref<?x?xi32>
!ln = memref<?xi32>
!st = memref<?x32xf32>
func.func @gpu_only_f32(%q: !q, %k: !p, %v: !p, %bt: !bt, %lens: !ln, %o: !q, %m: !st, %l: !st) {
  hg.segment 7 {
    %c0 = arith.constant 0 : index
    hg.partial_attention q(%q : !q) kv(%k, %v : !p, !p) table(%bt : !bt) lens(%lens : !ln)
        range [%c0, len) on gpu -> o(%o : !q) m(%m : !st) l(%l : !st)
        {scale = 0.0883883461 : f32, softcap = 30.0 : f32, window = 100 : i64}
  }
  return
}

// -----

// Two layers with the same configuration share one pair of kernels; f16 rows go through an
// extf per element.
// CHECK-LABEL: func.func @shared_f16
// CHECK-COUNT-2: gpu.launch_func async [%{{.*}}] @hg_gpu_kernels::@__hg_gpu_partial_f16_q4_kv4_b32_d64_
// CHECK: gpu.module @hg_gpu_kernels
// CHECK-COUNT-1: gpu.func @__hg_gpu_partial_f16
// CHECK: llvm.bitcast %{{.*}} : vector<4xi32> to vector<8xf16>
// CHECK: arith.extf %{{.*}} : f16 to f32
// CHECK-NOT: gpu.func @__hg_gpu_partial
!q = memref<1x4x64xf32>
!p = memref<4x4x32x64xf16>
!bt = memref<1x4xi32>
!ln = memref<1xi32>
!st = memref<1x4xf32>
func.func @shared_f16(%q: !q, %k: !p, %v: !p, %bt: !bt, %lens: !ln, %o: !q, %m: !st, %l: !st) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : !q) kv(%k, %v : !p, !p) table(%bt : !bt) lens(%lens : !ln)
      range [%c0, len) on gpu -> o(%o : !q) m(%m : !st) l(%l : !st) {scale = 0.125 : f32}
  hg.partial_attention q(%q : !q) kv(%k, %v : !p, !p) table(%bt : !bt) lens(%lens : !ln)
      range [%c0, len) on gpu -> o(%o : !q) m(%m : !st) l(%l : !st) {scale = 0.125 : f32}
  return
}

// -----

// CPU partials and modules without GPU partials are left alone (no gpu.module, no container
// attribute).
// CHECK-LABEL: module {
// CHECK-LABEL: func.func @cpu_only
// CHECK: hg.partial_attention {{.*}} on cpu
// CHECK-NOT: gpu.
!q = memref<1x4x64xf32>
!p = memref<4x4x32x64xf16>
!bt = memref<1x4xi32>
!ln = memref<1xi32>
!st = memref<1x4xf32>
func.func @cpu_only(%q: !q, %k: !p, %v: !p, %bt: !bt, %lens: !ln, %o: !q, %m: !st, %l: !st) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : !q) kv(%k, %v : !p, !p) table(%bt : !bt) lens(%lens : !ln)
      range [%c0, len) on cpu -> o(%o : !q) m(%m : !st) l(%l : !st) {scale = 0.125 : f32}
  return
}

// -----

// A head_dim whose row is not a power of two of 16-byte pieces (96 f16 = 12 pieces).
!q = memref<1x4x96xf32>
!p = memref<4x4x16x96xf16>
!bt = memref<1x4xi32>
!ln = memref<1xi32>
!st = memref<1x4xf32>
func.func @bad_head_dim(%q: !q, %k: !p, %v: !p, %bt: !bt, %lens: !ln, %o: !q, %m: !st, %l: !st) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{head_dim 96 is not supported by the GPU lowering: a row must be a power of two of 16-byte pieces}}
  hg.partial_attention q(%q : !q) kv(%k, %v : !p, !p) table(%bt : !bt) lens(%lens : !ln)
      range [%c0, len) on gpu -> o(%o : !q) m(%m : !st) l(%l : !st) {scale = 0.125 : f32}
  return
}

// -----

// f32 rows of 256 elements need 64 lanes of 16 bytes: more than a warp.
!q = memref<1x4x256xf32>
!p = memref<4x4x16x256xf32>
!bt = memref<1x4xi32>
!ln = memref<1xi32>
!st = memref<1x4xf32>
func.func @row_too_wide(%q: !q, %k: !p, %v: !p, %bt: !bt, %lens: !ln, %o: !q, %m: !st, %l: !st) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{head_dim 256 is not supported by the GPU lowering}}
  hg.partial_attention q(%q : !q) kv(%k, %v : !p, !p) table(%bt : !bt) lens(%lens : !ln)
      range [%c0, len) on gpu -> o(%o : !q) m(%m : !st) l(%l : !st) {scale = 0.125 : f32}
  return
}

// -----

// A GQA group of 16 query heads per kv head does not fit one block's registers.
!q = memref<1x16x64xf32>
!p = memref<4x1x16x64xbf16>
!bt = memref<1x4xi32>
!ln = memref<1xi32>
!st = memref<1x16xf32>
func.func @group_too_big(%q: !q, %k: !p, %v: !p, %bt: !bt, %lens: !ln, %o: !q, %m: !st, %l: !st) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{GQA group 16 is not supported by the GPU lowering}}
  hg.partial_attention q(%q : !q) kv(%k, %v : !p, !p) table(%bt : !bt) lens(%lens : !ln)
      range [%c0, len) on gpu -> o(%o : !q) m(%m : !st) l(%l : !st) {scale = 0.125 : f32}
  return
}

// -----

// Sparse (top_k) attention is CPU-only: the verifier refuses it on the gpu before the pass runs.
!q = memref<1x4x64xf32>
!p = memref<4x4x16x64xbf16>
!bt = memref<1x4xi32>
!ln = memref<1xi32>
!st = memref<1x4xf32>
func.func @sparse_on_gpu(%q: !q, %k: !p, %v: !p, %bt: !bt, %lens: !ln, %o: !q, %m: !st, %l: !st) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{top_k (sparse mode) is only supported on the cpu}}
  hg.partial_attention q(%q : !q) kv(%k, %v : !p, !p) table(%bt : !bt) lens(%lens : !ln)
      range [%c0, len) on gpu -> o(%o : !q) m(%m : !st) l(%l : !st) {scale = 0.125 : f32, top_k = 8 : i64}
  return
}
