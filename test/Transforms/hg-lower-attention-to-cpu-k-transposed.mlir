// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true" | FileCheck %s
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu | FileCheck %s --check-prefix=ROWS
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true vector-bits=256" | FileCheck %s --check-prefix=AVX2

// k-transposed: each (block, kv head) piece of the K pool is stored [head_dim][block_size]. The
// kernel (named _kt) views the pool that way without a copy, and computes the logits column by
// column in a loop of 8 columns per iteration: one vector of the block's 16 rows per column,
// widened once, times each head's q element broadcast from the scaled q on the stack (natural
// column order, no bf16 (even, odd) shuffle), into two chains per head (6 vector<16> carried).
// No sum tree combines rows: the logits of a head are the sum of its two chains, stored as the
// block's scores. V is read row-major as before.
// CHECK-LABEL: func.func private @__hg_cpu_dense_bf16_q9_kv3_{{[a-z0-9_]*}}_kt(
// CHECK-SAME: %[[K:[a-z0-9]+]]: memref<?x3x16x64xbf16>
// CHECK: %[[KT:.*]] = memref.reinterpret_cast %[[K]] to offset: [0], sizes: [%{{.*}}, 3, 64, 16], strides: [3072, 1024, 16, 1] : memref<?x3x16x64xbf16> to memref<?x3x64x16xbf16>
// CHECK: %[[LG:.*]]:6 = scf.for %[[C0:.*]] = %{{.*}} to %c64 step %c8 iter_args(%[[A0:.*]] = %{{.*}}, %[[A1:.*]] = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// CHECK: memref.prefetch
// CHECK: %[[COL:.*]] = vector.load %[[KT]][%{{.*}}, %{{.*}}, %{{.*}}, %c0{{.*}}] : memref<?x3x64x16xbf16>, vector<16xbf16>
// CHECK: %[[W:.*]] = arith.extf %[[COL]] : vector<16xbf16> to vector<16xf32>
// CHECK: %[[QE:.*]] = memref.load %{{.*}} : memref<9x64xf32>
// CHECK: %[[QB:.*]] = vector.broadcast %[[QE]] : f32 to vector<16xf32>
// CHECK: vector.fma %[[QB]], %[[W]], %[[A0]] : vector<16xf32>
// CHECK: scf.yield
// CHECK: %[[SUM:.*]] = arith.addf %[[LG]]#0, %[[LG]]#1 : vector<16xf32>
// CHECK: vector.store %[[SUM]], %{{.*}} : memref<3x16xf32>, vector<16xf32>
// On 256-bit vectors (AVX2) a column's 16 rows are one 32-byte load viewed as 8 x i32: a shift
// gives the even rows as f32 and a mask the odd rows (no arith.extf of K), each with its own
// accumulator per head (6 vector<8> carried for 3 heads); after the loop the two are zipped back
// into row order and stored as the block's 16 scores.
// AVX2-LABEL: func.func private @__hg_cpu_dense_bf16_q9_kv3_{{[a-z0-9_]*}}_kt(
// AVX2: %[[KT:.*]] = memref.reinterpret_cast
// AVX2: %[[LG:.*]]:6 = scf.for %{{.*}} = %{{.*}} to %c64 step %c8 iter_args({{.*}}) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
// AVX2: %[[COL:.*]] = vector.load %[[KT]][{{.*}}] : memref<?x3x64x16xbf16>, vector<16xbf16>
// AVX2-NEXT: %[[PAIRS:.*]] = vector.bitcast %[[COL]] : vector<16xbf16> to vector<8xi32>
// AVX2-NOT: arith.extf
// AVX2: %[[EVEN:.*]] = arith.shli %[[PAIRS]], %{{.*}} : vector<8xi32>
// AVX2-NOT: arith.extf
// AVX2: %[[ODD:.*]] = arith.andi %[[PAIRS]], %{{.*}} : vector<8xi32>
// AVX2: %[[EF:.*]] = arith.bitcast %[[EVEN]] : vector<8xi32> to vector<8xf32>
// AVX2: %[[OF:.*]] = arith.bitcast %[[ODD]] : vector<8xi32> to vector<8xf32>
// AVX2: %[[QB:.*]] = vector.broadcast %{{.*}} : f32 to vector<8xf32>
// AVX2-NEXT: vector.fma %[[QB]], %[[EF]], %{{.*}} : vector<8xf32>
// AVX2-NEXT: vector.fma %[[QB]], %[[OF]], %{{.*}} : vector<8xf32>
// AVX2: scf.yield
// AVX2: %[[ZIP:.*]] = vector.shuffle %[[LG]]#0, %[[LG]]#1 [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15] : vector<8xf32>, vector<8xf32>
// AVX2: vector.store %[[ZIP]], %{{.*}} : memref<3x16xf32>, vector<16xf32>
// ROWS-LABEL: func.func private @__hg_cpu_dense_bf16_q9_kv3_
// ROWS-NOT: _kt
// ROWS-NOT: memref.reinterpret_cast
// ROWS: return
func.func @kt(%q: memref<1x9x64xf32>, %k: memref<8x3x16x64xbf16>,
              %v: memref<8x3x16x64xbf16>, %bt: memref<1x8xi32>, %lens: memref<1xi32>,
              %o: memref<1x9x64xf32>, %m: memref<1x9xf32>, %l: memref<1x9xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<1x9x64xf32>) kv(%k, %v : memref<8x3x16x64xbf16>, memref<8x3x16x64xbf16>)
      table(%bt : memref<1x8xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x9x64xf32>) m(%m : memref<1x9xf32>) l(%l : memref<1x9xf32>)
      {scale = 0.125 : f32}
  return
}
