// RUN: hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu="amx=true" | FileCheck %s
// RUN: hybridgen-opt %s -split-input-file -hg-lower-attention-to-cpu="amx=true" -hg-cpu-pipeline="amx=true" | FileCheck %s --check-prefix=LLVM

// bf16 KV with amx=true: the dense kernel asks the runtime whether the tile state is granted
// and runs either the AMX chunk loop (one scf.parallel over sequence x kv-head group x chunk after
// one that lays q out as B tiles) or the vector loop (sequence x kv-head unit group x chunk); both
// size their groups from the OpenMP thread count. q.k is a 16x32 K tile
// (tokens x dims) times a 16x16 q tile (dim pairs x 4 heads hi/lo), p.V a 16x32 p tile (4 heads x
// hi/lo x even/odd rows) times a 16x32 V tile read straight from the pool.
// CHECK: func.func private @hgrt_amx_available() -> i32
// CHECK-LABEL: func.func @dense_bf16
// CHECK: call @[[KERNEL:__hg_cpu_dense_[a-z0-9_]*_amx]](
// CHECK: func.func private @[[KERNEL]]
// CHECK: call @omp_get_max_threads()
// CHECK: %[[OK:.*]] = {{(func\.)?}}call @hgrt_amx_available() : () -> i32
// CHECK: %[[YES:.*]] = arith.cmpi ne, %[[OK]], %{{.*}} : i32
// CHECK: scf.if %[[YES]] {
// CHECK: memref.alloc(%{{.*}}) : memref<?x2x2x256xbf16>
// CHECK: scf.parallel (%{{.*}}, %{{.*}}) =
// CHECK: vector.store %{{.*}} : memref<?x2x2x256xbf16>, vector<256xbf16>
// CHECK: scf.parallel (%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}) =
// q.k two slots at a time: two accumulator chains sharing each q tile.
// CHECK: %[[C0:.*]] = amx.tile_zero : !amx.tile<16x8xf32>
// CHECK-NEXT: %[[C1:.*]] = amx.tile_zero : !amx.tile<16x8xf32>
// CHECK: %[[Q:.*]] = amx.tile_load %{{.*}} : memref<?x2x2x256xbf16> into !amx.tile<16x16xbf16>
// CHECK: %[[K0:.*]] = amx.tile_load %{{.*}} : memref<?x2x16x64xbf16> into !amx.tile<16x32xbf16>
// Beside each tile load, consecutive lines of the K piece two slots on are prefetched into L2
// (at head dim 64 a row is two lines: columns 0 and 32 of a row, then the next row).
// CHECK: %[[ROW0:.*]] = arith.addi %[[FIRST:.*]], %c0{{[_0-9]*}} : index
// CHECK: memref.prefetch %arg1[%[[PB:[^,]*]], %[[KVH:[^,]*]], %[[ROW0]], %c0{{[_0-9]*}}], read, locality<2>, data
// CHECK: %[[ROW1:.*]] = arith.addi %[[FIRST]], %c0{{[_0-9]*}} : index
// CHECK: memref.prefetch %arg1[%[[PB]], %[[KVH]], %[[ROW1]], %c32{{[_0-9]*}}], read, locality<2>, data
// CHECK: %[[ROW2:.*]] = arith.addi %[[FIRST]], %c1{{[_0-9]*}} : index
// CHECK: memref.prefetch %arg1[%[[PB]], %[[KVH]], %[[ROW2]], %c0{{[_0-9]*}}], read, locality<2>, data
// CHECK: amx.tile_mulf %[[K0]], %[[Q]], %[[C0]] : !amx.tile<16x32xbf16>, !amx.tile<16x16xbf16>, !amx.tile<16x8xf32>
// CHECK: %[[K1:.*]] = amx.tile_load %{{.*}} : memref<?x2x16x64xbf16> into !amx.tile<16x32xbf16>
// CHECK: amx.tile_mulf %[[K1]], %[[Q]], %[[C1]] : !amx.tile<16x32xbf16>, !amx.tile<16x16xbf16>, !amx.tile<16x8xf32>
// CHECK: amx.tile_store %{{.*}} : memref<8x2x128xf32>, !amx.tile<16x8xf32>
// CHECK: amx.tile_store %{{.*}} : memref<8x2x128xf32>, !amx.tile<16x8xf32>
// p.V: beside each V tile load, the V piece the next unit reads: the next kv head's of the same
// slot, or for the last unit the first kv head's of the next step's slot.
// CHECK: %[[LAST:.*]] = arith.cmpi eq, %{{.*}}, %{{.*}} : index
// CHECK: %[[AKVH:.*]] = arith.select %[[LAST]], %{{.*}}, %{{.*}} : index
// CHECK-NEXT: %[[APB:.*]] = arith.select %[[LAST]], %{{.*}}, %{{.*}} : index
// CHECK-NEXT: %[[AROW:.*]] = arith.select %[[LAST]], %{{.*}}, %{{.*}} : index
// CHECK: amx.tile_load %arg2[{{.*}}] : memref<?x2x16x64xbf16> into !amx.tile<16x32xbf16>
// CHECK: %[[PROW:.*]] = arith.addi %[[AROW]], %c0{{[_0-9]*}} : index
// CHECK: memref.prefetch %arg2[%[[APB]], %[[AKVH]], %[[PROW]], %c0{{[_0-9]*}}], read, locality<2>, data : memref<?x2x16x64xbf16>
// CHECK: amx.tile_mulf %{{.*}}, %{{.*}}, %{{.*}} : !amx.tile<16x32xbf16>, !amx.tile<16x32xbf16>, !amx.tile<16x16xf32>
// CHECK: } else {
// CHECK: scf.parallel (%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}) =
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<4x16xf32>
// The chunk merge is shared by both paths.
// CHECK: scf.parallel (%{{.*}}, %{{.*}}) =

// The LLVM lowering keeps the tile intrinsics.
// LLVM-LABEL: llvm.func @dense_bf16
// LLVM: llvm.call_intrinsic "llvm.x86.tdpbf16ps.internal"
// LLVM: llvm.call_intrinsic "llvm.x86.tileloadd64.internal"

!q = memref<1x8x64xf32>
!kv = memref<8x2x16x64xbf16>
!st = memref<1x8xf32>
func.func @dense_bf16(%q: !q, %k: !kv, %v: !kv, %bt: memref<1x8xi32>, %lens: memref<1xi32>,
                      %o: !q, %m: !st, %l: !st) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : !q) kv(%k, %v : !kv, !kv) table(%bt : memref<1x8xi32>)
      lens(%lens : memref<1xi32>) range [%c0, len) on cpu -> o(%o : !q) m(%m : !st) l(%l : !st)
      {scale = 0.125 : f32}
  return
}

// -----

// f32 KV (and f16, and head dims that are not a multiple of 32) keep the vector kernel only.
// CHECK-LABEL: func.func @dense_f32
// CHECK: func.func private @__hg_cpu_dense_f32
// CHECK-NOT: amx.
// CHECK-NOT: hgrt_amx_available
// CHECK: return
!q = memref<1x8x64xf32>
!kv = memref<8x2x16x64xf32>
!st = memref<1x8xf32>
func.func @dense_f32(%q: !q, %k: !kv, %v: !kv, %bt: memref<1x8xi32>, %lens: memref<1xi32>,
                     %o: !q, %m: !st, %l: !st) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : !q) kv(%k, %v : !kv, !kv) table(%bt : memref<1x8xi32>)
      lens(%lens : memref<1xi32>) range [%c0, len) on cpu -> o(%o : !q) m(%m : !st) l(%l : !st)
      {scale = 0.125 : f32}
  return
}
