// One OpenMP fork/join per group of products of the same input: q, k and v run in one parallel
// loop over the 4-row blocks of all three (q's 16, then k's 8, then v's 8: 32), gate and up in
// another. RoPE computes each row's cos and sin once per frequency for every head of q and k, on
// the calling thread below 8 rows (decode) and in parallel over rows from 8 (prefill)
// (docs/models.md, "OpenMP regions per layer").
// RUN: rm -rf %t && mkdir -p %t/m && cp %S/Inputs/tiny-llama.json %t/m/config.json
// RUN: hybridgen-compile %t/m -o %t/a --weight-dtype=bf16 --kv-dtypes=bf16
// RUN: FileCheck %s < %t/a/model.mlir

// CHECK-LABEL: func.func @layer_pre(
// CHECK: memref.collapse_shape %{{.*}} {{\[\[}}0, 1]] : memref<64x64xbf16> into memref<4096xbf16>
// CHECK: memref.collapse_shape %{{.*}} {{\[\[}}0, 1]] : memref<32x64xbf16> into memref<2048xbf16>
// CHECK: memref.collapse_shape %{{.*}} {{\[\[}}0, 1]] : memref<32x64xbf16> into memref<2048xbf16>
// CHECK: %[[ALL:.*]] = arith.constant 32 : index
// Token rows in chunks of 2048 (512 KiB of 64-wide f32 inputs) around the parallel loop.
// CHECK-NEXT: %[[CH:.*]] = arith.constant 2048 : index
// CHECK: scf.for %tci = %{{.*}} to %{{.*}} step
// CHECK-NEXT: %tlo = arith.muli %tci, %[[CH]] : index
// CHECK: %thi = arith.minui
// CHECK: %tlast = arith.cmpi eq
// CHECK-NEXT: scf.parallel (%ob) = (%{{.*}}) to (%[[ALL]]) step
// CHECK-NEXT: %sel0 = arith.cmpi ult, %ob, %[[QBLOCKS:.*]] : index
// CHECK-NEXT: scf.if %sel0 {
// CHECK: vector.load %{{.*}} : memref<64x64xbf16>, vector<16xbf16>
// CHECK: %ob1 = arith.subi %ob, %[[QBLOCKS]] : index
// CHECK-NEXT: %sel1 = arith.cmpi ult, %ob1, %[[KBLOCKS:.*]] : index
// CHECK-NEXT: scf.if %sel1 {
// CHECK: vector.load %{{.*}} : memref<32x64xbf16>, vector<16xbf16>
// CHECK: %ob2 = arith.subi %ob1, %[[KBLOCKS]] : index
// CHECK: vector.load %{{.*}} : memref<32x64xbf16>, vector<16xbf16>
// CHECK-NOT: scf.parallel (%ob)
// CHECK: memref.get_global @rope_inv_freq
// Half the head dim (8), the head dim (16), then the fewest rows that run in parallel (8).
// CHECK: arith.constant 16 : index
// CHECK-NEXT: %[[MIN:.*]] = arith.constant 8 : index
// CHECK-NEXT: %[[WIDE:.*]] = arith.cmpi uge, %{{.*}}, %[[MIN]] : index
// CHECK-NEXT: scf.if %[[WIDE]] {
// CHECK-NEXT: scf.parallel (%r) =
// CHECK: scf.for %i =
// CHECK: math.cos
// CHECK-NOT: math.cos
// CHECK: scf.for %h = {{.*}} {
// CHECK: memref<?x64xf32>
// CHECK-NOT: math.cos
// CHECK: scf.for %h = {{.*}} {
// CHECK: memref<?x32xf32>
// CHECK: } else {
// CHECK-NEXT: scf.for %r =
// CHECK-NOT: scf.parallel
// CHECK-LABEL: func.func @layer_decode_bf16(
// Gate and up: 32 blocks each, 64 in all.
// CHECK: memref.collapse_shape %{{.*}} {{\[\[}}0, 1]] : memref<128x64xbf16> into memref<8192xbf16>
// CHECK: memref.collapse_shape %{{.*}} {{\[\[}}0, 1]] : memref<128x64xbf16> into memref<8192xbf16>
// CHECK: %[[BOTH:.*]] = arith.constant 64 : index
// CHECK: %tlast = arith.cmpi eq
// CHECK-NEXT: scf.parallel (%ob) = (%{{.*}}) to (%[[BOTH]]) step
// CHECK-NEXT: %sel0 = arith.cmpi ult, %ob, %[[GATE:.*]] : index
// CHECK: %ob1 = arith.subi %ob, %[[GATE]] : index
// CHECK-NOT: %sel1
// CHECK: math.exp
// CHECK-LABEL: func.func @layer_prefill_bf16(
