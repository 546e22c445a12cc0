// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="far-prefetch-bytes=8192" -canonicalize | FileCheck %s
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="far-prefetch-bytes=0" -canonicalize | FileCheck %s --check-prefix=OFF
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu -canonicalize | FileCheck %s --check-prefix=OFF
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="far-prefetch-bytes=2048" -canonicalize | FileCheck %s --check-prefix=ONE
// RUN: not hybridgen-opt %s -hg-lower-attention-to-cpu="far-prefetch-bytes=-2" 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not hybridgen-opt %s -hg-lower-attention-to-cpu="far-prefetch-bytes=2097152" 2>&1 | FileCheck %s --check-prefix=NEG

// The far prefetch of the dense vector kernel (docs/cpu-runs.md, "Memory behaviour on Zen 4").
// The pass's default (-1, the target's) is off: the driver turns it on by target CPU (znver4).
// Per piece (one kv head's 16 rows of one block; 16 x 64 bf16 = 2 KiB of K), the unit loop looks
// up the piece 8 KiB of K ahead in slot-major order, 4 pieces on (block = (unit index + 4) / units,
// clamped to the chunk's last block; kv head = its remainder), then the next piece (1 on) for the
// near prefetch of K into L1. While the logits are computed, each K row is preceded by the near
// prefetch of the same piece's V row and by the far prefetch of that row of K and V, all into L2:
// 2 lines per 128-byte row and stream.
// CHECK-LABEL: func.func private @__hg_cpu_dense_bf16_q8_kv2_b16_d64_{{[a-z0-9_]*}}_t1024_f8192(
// The chunk's first piece is prefetched whole before the block loop.
// CHECK: memref.prefetch %arg1[{{.*}}], read, locality<3>, data
// CHECK: memref.prefetch %arg2[{{.*}}, %c32], read, locality<2>, data
// CHECK: scf.for %[[BLK:.*]] = %{{.*}} to %[[BLKHI:.*]] step %c1 {
// CHECK-NEXT: scf.for %[[U:.*]] = %[[U0:.*]] to %{{.*}} step %c1 {
// CHECK-NEXT: %[[A:.*]] = arith.muli %[[BLK]], %[[N:.*]] : index
// CHECK-NEXT: %[[B:.*]] = arith.subi %[[U]], %[[U0]] : index
// CHECK-NEXT: %[[C:.*]] = arith.addi %[[A]], %[[B]] : index
// CHECK-NEXT: %[[LIN:.*]] = arith.addi %[[C]], %c4 : index
// CHECK-NEXT: %[[FB:.*]] = arith.divui %[[LIN]], %[[N]] : index
// CHECK-NEXT: %[[LAST:.*]] = arith.subi %[[BLKHI]], %c1 : index
// CHECK-NEXT: %[[FBC:.*]] = arith.minsi %[[FB]], %[[LAST]] : index
// CHECK-NEXT: %[[FH:.*]] = arith.remui %[[LIN]], %[[N]] : index
// CHECK-NEXT: %[[FKVH:.*]] = arith.addi %[[U0]], %[[FH]] : index
// CHECK-NEXT: %[[FPB:.*]] = memref.load %{{.*}}[%{{.*}}, %[[FBC]]] : memref<?x?xi32>
// CHECK-NEXT: %[[FAR:.*]] = arith.index_cast %[[FPB]] : i32 to index
// CHECK: arith.addi %{{.*}}, %c1 : index
// CHECK: memref.prefetch %arg2[%[[PB:.*]], %[[U]], %c0, %c0], read, locality<2>, data
// CHECK-NEXT: memref.prefetch %arg2[%[[PB]], %[[U]], %c0, %c32], read, locality<2>, data
// CHECK-NEXT: memref.prefetch %arg1[%[[FAR]], %[[FKVH]], %c0, %c0], read, locality<2>, data
// CHECK-NEXT: memref.prefetch %arg1[%[[FAR]], %[[FKVH]], %c0, %c32], read, locality<2>, data
// CHECK-NEXT: memref.prefetch %arg2[%[[FAR]], %[[FKVH]], %c0, %c0], read, locality<2>, data
// CHECK-NEXT: memref.prefetch %arg2[%[[FAR]], %[[FKVH]], %c0, %c32], read, locality<2>, data
// CHECK-NEXT: vector.load %arg1[%[[PB]], %[[U]], %c0, %c0] : memref<?x2x16x64xbf16>, vector<32xbf16>

// One piece on when the distance is at most one piece of K (here exactly one).
// ONE-LABEL: func.func private @__hg_cpu_dense_{{[a-z0-9_]*}}_f2048(
// ONE: memref.prefetch %arg2[{{.*}}, %c32], read, locality<2>, data
// ONE: scf.for
// ONE-NEXT: scf.for
// ONE-NEXT: arith.muli
// ONE-NEXT: arith.subi
// ONE-NEXT: arith.addi
// ONE-NEXT: arith.addi %{{.*}}, %c1 : index

// Off: only the near prefetch of V before each K row, and the kernel is named for the option.
// OFF-LABEL: func.func private @__hg_cpu_dense_{{[a-z0-9_]*}}_t1024(
// OFF: memref.prefetch %arg2[%[[PB:.*]], %[[U:.*]], %c0, %c0], read, locality<2>, data
// OFF-NEXT: memref.prefetch %arg2[%[[PB]], %[[U]], %c0, %c32], read, locality<2>, data
// OFF-NEXT: vector.load %arg1[%[[PB]], %[[U]], %c0, %c0] : memref<?x2x16x64xbf16>, vector<32xbf16>

// NEG: far-prefetch-bytes must be -1 (the target's default) or in [0, 1048576] (0: off)
func.func @dense_bf16(%q: memref<1x8x64xf32>, %k: memref<8x2x16x64xbf16>,
                      %v: memref<8x2x16x64xbf16>, %bt: memref<1x8xi32>, %lens: memref<1xi32>,
                      %o: memref<1x8x64xf32>, %m: memref<1x8xf32>, %l: memref<1x8xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<1x8x64xf32>) kv(%k, %v : memref<8x2x16x64xbf16>, memref<8x2x16x64xbf16>)
      table(%bt : memref<1x8xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x8x64xf32>) m(%m : memref<1x8xf32>) l(%l : memref<1x8xf32>)
      {scale = 0.125 : f32}
  return
}
