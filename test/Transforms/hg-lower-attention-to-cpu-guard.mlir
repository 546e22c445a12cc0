// The argument guard of every CPU kernel (dense, sparse, AMX): before any parallel loop, one
// branch-free scan compares each block id of each sequence's range against the pool and each
// length against the block table; a violation is reported to the runtime and the kernel then
// writes the empty partial instead of reading.
// RUN: hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu | FileCheck %s
// RUN: hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu="amx=true" | FileCheck %s --check-prefix=AMX

!q = memref<1x8x64xf32>
!kv = memref<8x2x16x64xbf16>
!st = memref<1x8xf32>

// The dense kernel: pool size from both pools, rows of every per-sequence buffer, then the scan.
// CHECK-LABEL: func.func private @__hg_cpu_dense_
// CHECK-SAME: (%[[Q:[^:]*]]: memref<?x8x64xf32>, %[[K:[^:]*]]: memref<?x2x16x64xbf16>, %[[V:[^:]*]]: memref<?x2x16x64xbf16>, %[[T:[^:]*]]: memref<?x?xi32>, %[[L:[^:]*]]: memref<?xi32>
// CHECK: %[[BATCH:.*]] = memref.dim %[[Q]], %{{.*}} : memref<?x8x64xf32>
// CHECK: %[[NK:.*]] = memref.dim %[[K]], %{{.*}} : memref<?x2x16x64xbf16>
// CHECK: %[[NV:.*]] = memref.dim %[[V]], %{{.*}} : memref<?x2x16x64xbf16>
// CHECK: %[[NBLOCKS:.*]] = arith.minsi %[[NK]], %[[NV]] : index
// CHECK: %[[TROWS:.*]] = memref.dim %[[T]], %{{.*}} : memref<?x?xi32>
// CHECK: arith.cmpi slt, %[[TROWS]], %[[BATCH]] : index
// CHECK: func.call @hgrt_kernel_argument_error
// CHECK: %[[OK:.*]] = scf.if %{{.*}} -> (i1) {
// CHECK: scf.for %[[S:[^ ]*]] = %{{.*}} to %[[BATCH]] {{.*}} -> (i1) {
// CHECK: memref.load %[[L]][%[[S]]] : memref<?xi32>
// CHECK: scf.for %[[B:[^ ]*]] = {{.*}} -> (i1) {
// CHECK-NEXT: %[[ID32:.*]] = memref.load %[[T]][%[[S]], %[[B]]] : memref<?x?xi32>
// CHECK-NEXT: %[[ID:.*]] = arith.index_cast %[[ID32]] : i32 to index
// CHECK-NEXT: %[[BAD:.*]] = arith.cmpi uge, %[[ID]], %[[NBLOCKS]] : index
// CHECK-NEXT: arith.ori %{{.*}}, %[[BAD]] : i1
// CHECK-NEXT: scf.yield
// The cold path names the first bad length (kind 2) or block (kind 1).
// CHECK: %[[C2:.*]] = arith.constant 2 : i32
// CHECK: func.call @hgrt_kernel_argument_error(%[[C2]],
// CHECK: %[[C1:.*]] = arith.constant 1 : i32
// CHECK: func.call @hgrt_kernel_argument_error(%[[C1]],
// Only a clean call reaches the parallel loops; a refused one writes the empty partial.
// CHECK: scf.if %[[OK]] {
// CHECK: scf.parallel
// CHECK: } else {
// CHECK: memref.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : memref<?x8xf32>
// CHECK: return
// The AMX path sits inside the same guard: the scan runs before hgrt_amx_available.
// AMX-LABEL: func.func private @__hg_cpu_dense_{{.*}}_amx
// AMX: arith.cmpi uge
// AMX: func.call @hgrt_kernel_argument_error
// AMX: scf.if %{{.*}} {
// AMX: call @hgrt_amx_available()
func.func @dense_bf16(%q: !q, %k: !kv, %v: !kv, %bt: memref<1x8xi32>, %lens: memref<1xi32>,
                      %o: !q, %m: !st, %l: !st) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : !q) kv(%k, %v : !kv, !kv) table(%bt : memref<1x8xi32>)
      lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : !q) m(%m : !st) l(%l : !st) {scale = 0.125 : f32}
  return
}

// -----

!q = memref<1x8x64xf32>
!kv = memref<8x2x16x64xf32>
!st = memref<1x8xf32>

// The sparse kernel takes the same guard before its parallel loop.
// CHECK-LABEL: func.func private @__hg_cpu_sparse_
// CHECK: %[[OK:.*]] = scf.if %{{.*}} -> (i1) {
// CHECK: memref.load %{{.*}} : memref<?x?xi32>
// CHECK: arith.cmpi uge
// CHECK: func.call @hgrt_kernel_argument_error
// CHECK: scf.if %[[OK]] {
// CHECK: scf.parallel
func.func @sparse(%q: !q, %k: !kv, %bt: memref<1x8xi32>, %lens: memref<1xi32>, %o: !q, %m: !st,
                  %l: !st) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : !q) kv(%k, %k : !kv, !kv) table(%bt : memref<1x8xi32>)
      lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : !q) m(%m : !st) l(%l : !st) {scale = 0.125 : f32, top_k = 4 : i64}
  return
}

// -----

// chunk-tokens outside [0, 2^24] is refused (2^63 - 16 overflowed the rounding to whole blocks
// and returned wrong attention; negative values silently meant the default).
// RUN: not hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu="chunk-tokens=9223372036854775792" 2>&1 | FileCheck %s --check-prefix=HUGE
// RUN: not hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu="chunk-tokens=-5" 2>&1 | FileCheck %s --check-prefix=NEG
// HUGE: error: chunk-tokens must be in [0, 16777216] (0: the default), got 9223372036854775792
// NEG: error: chunk-tokens must be in [0, 16777216] (0: the default), got -5
func.func @chunk_option(%q: memref<1x8x64xf32>, %k: memref<8x2x16x64xf32>, %bt: memref<1x8xi32>,
                        %lens: memref<1xi32>, %o: memref<1x8x64xf32>, %m: memref<1x8xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<1x8x64xf32>) kv(%k, %k : memref<8x2x16x64xf32>, memref<8x2x16x64xf32>)
      table(%bt : memref<1x8xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x8x64xf32>) m(%m : memref<1x8xf32>) l(%m : memref<1x8xf32>) {scale = 0.125 : f32}
  return
}

// -----

// hg.merge compares at run time the dimensions the verifier could not (dynamic on either side):
// on a mismatch it reports kind 4 and skips the merge; static dimensions get no compare.
// CHECK-LABEL: func.func @merge_dynamic
// CHECK-SAME: (%[[O:[^:]*]]: memref<?x8x64xf32>, %{{.*}}, %{{.*}}, %[[OUT:[^:]*]]: memref<2x8x64xf32>)
// CHECK: %[[GOT:.*]] = memref.dim %[[O]], %{{.*}} : memref<?x8x64xf32>
// CHECK: %[[WANT:.*]] = memref.dim %[[OUT]], %{{.*}} : memref<2x8x64xf32>
// CHECK: %[[BAD:.*]] = arith.cmpi ne, %[[GOT]], %[[WANT]] : index
// CHECK: scf.if %[[BAD]] {
// CHECK: %[[C4:.*]] = arith.constant 4 : i32
// CHECK: func.call @hgrt_kernel_argument_error(%[[C4]],
// CHECK-NOT: memref.dim %[[O]]
// CHECK: scf.if %{{.*}} {
// CHECK: scf.parallel
func.func @merge_dynamic(%o: memref<?x8x64xf32>, %m: memref<?x8xf32>, %l: memref<?x8xf32>,
                         %out: memref<2x8x64xf32>) {
  hg.merge o(%o : memref<?x8x64xf32>) m(%m : memref<?x8xf32>) l(%l : memref<?x8xf32>)
      into(%out : memref<2x8x64xf32>)
  return
}
