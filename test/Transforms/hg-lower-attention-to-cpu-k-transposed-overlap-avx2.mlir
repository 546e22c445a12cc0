// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="vector-bits=256 k-transposed=true far-prefetch-bytes=8192 overlap-pieces=true" | FileCheck %s

// The overlapped kernel on AVX2 (16 ymm registers): p.V's tile is 4 heads x 16 lanes (8 x
// vector<8xf32>), so the logits go in passes over the heads, each pass over an equal share of
// p.V's 8 tiles (overlapLogitPasses), leaving 4 registers for the loads and broadcasts. 16-bit
// KV: 2 passes of 2 heads (2 x vector<16xf32> carried, one FMA chain per head), each pass's
// logits stored after its 4th tile and the next pass started from zeros; f32 KV: one head per
// pass (an f32 column costs only its loads to read again), 2 chains, summed and stored after
// every 2nd tile. Two rows per iteration, one for f16 (at two, LLVM hoisted the rows' column
// conversions from memory and spilled them).
// CHECK-LABEL: func.func private @__hg_cpu_dense_f16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_v256_{{[a-z0-9_]*}}_kt_ov(
// CHECK: %[[L1:[0-9]+]]:10 = scf.for {{.*}} step %c1{{(_[0-9]+)?}} iter_args({{.*}}, %{{[a-z0-9]+}} = %[[Z:[0-9]+]], %{{[a-z0-9]+}} = %[[Z]]) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<16xf32>, vector<16xf32>)
// Every step asks for its line of this piece's V and of the far piece's K (each line twice).
// CHECK: memref.prefetch %{{.*}}, read, locality<2>
// CHECK-NEXT: memref.prefetch %{{.*}}, read, locality<2>
// CHECK-NOT: memref.prefetch
// CHECK: vector.fma
// CHECK-NOT: memref<4x16xf32>, vector<16xf32>
// CHECK: %[[L2:[0-9]+]]:10 = scf.for {{.*}} = %[[L1]]#8, %{{[a-z0-9]+}} = %[[L1]]#9)
// CHECK-NOT: memref<4x16xf32>, vector<16xf32>
// CHECK: %[[L3:[0-9]+]]:10 = scf.for {{.*}} = %[[L2]]#8, %{{[a-z0-9]+}} = %[[L2]]#9)
// CHECK-NOT: memref<4x16xf32>, vector<16xf32>
// CHECK: %[[L4:[0-9]+]]:10 = scf.for {{.*}} = %[[L3]]#8, %{{[a-z0-9]+}} = %[[L3]]#9)
// CHECK: vector.store %[[L4]]#8, %[[S:[0-9]+]][%c0{{.*}}, %c0{{.*}}] : memref<4x16xf32>, vector<16xf32>
// CHECK: vector.store %[[L4]]#9, %[[S]][%c1{{.*}}, %c0{{.*}}] : memref<4x16xf32>, vector<16xf32>
// CHECK: %[[L5:[0-9]+]]:10 = scf.for {{.*}} = %[[Z]], %{{[a-z0-9]+}} = %[[Z]])
// CHECK: %[[L8:[0-9]+]]:10 = scf.for {{.*}} step %c1{{(_[0-9]+)?}} iter_args
// CHECK: %[[L8:[0-9]+]]:10 = scf.for {{.*}} step %c1{{(_[0-9]+)?}} iter_args
// CHECK: %[[L8:[0-9]+]]:10 = scf.for {{.*}} step %c1{{(_[0-9]+)?}} iter_args
// CHECK: vector.store %[[L8]]#8, %[[S]][%c2{{.*}}, %c0{{.*}}] : memref<4x16xf32>, vector<16xf32>
// CHECK: vector.store %[[L8]]#9, %[[S]][%c3{{.*}}, %c0{{.*}}] : memref<4x16xf32>, vector<16xf32>
// CHECK-LABEL: func.func private @__hg_cpu_dense_f32_q32_kv8_b16_d128_{{[a-z0-9_]*}}_v256_{{[a-z0-9_]*}}_kt_ov(
// CHECK: %[[F1:[0-9]+]]:10 = scf.for {{.*}} step %c2{{(_[0-9]+)?}} iter_args({{.*}}, %{{[a-z0-9]+}} = %[[FZ:[0-9]+]], %{{[a-z0-9]+}} = %[[FZ]]) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<16xf32>, vector<16xf32>)
// CHECK: %[[F2:[0-9]+]]:10 = scf.for {{.*}} = %[[F1]]#8, %{{[a-z0-9]+}} = %[[F1]]#9)
// CHECK: %[[H0:[0-9]+]] = arith.addf %[[F2]]#8, %[[F2]]#9 : vector<16xf32>
// CHECK: vector.store %[[H0]], %[[FS:[0-9]+]][%c0{{.*}}, %c0{{.*}}] : memref<4x16xf32>, vector<16xf32>
// CHECK: scf.for {{.*}} = %[[FZ]], %{{[a-z0-9]+}} = %[[FZ]])
// CHECK: %[[F4:[0-9]+]]:10 = scf.for
// CHECK: %[[H1:[0-9]+]] = arith.addf %[[F4]]#8, %[[F4]]#9 : vector<16xf32>
// CHECK: vector.store %[[H1]], %[[FS]][%c1{{.*}}, %c0{{.*}}] : memref<4x16xf32>, vector<16xf32>
// CHECK: scf.for {{.*}} = %[[FZ]], %{{[a-z0-9]+}} = %[[FZ]])
// CHECK: %[[F6:[0-9]+]]:10 = scf.for
// CHECK: %[[H2:[0-9]+]] = arith.addf %[[F6]]#8, %[[F6]]#9 : vector<16xf32>
// CHECK: vector.store %[[H2]], %[[FS]][%c2{{.*}}, %c0{{.*}}] : memref<4x16xf32>, vector<16xf32>
// CHECK: scf.for {{.*}} = %[[FZ]], %{{[a-z0-9]+}} = %[[FZ]])
// CHECK: %[[F8:[0-9]+]]:10 = scf.for
// CHECK: %[[H3:[0-9]+]] = arith.addf %[[F8]]#8, %[[F8]]#9 : vector<16xf32>
// CHECK: vector.store %[[H3]], %[[FS]][%c3{{.*}}, %c0{{.*}}] : memref<4x16xf32>, vector<16xf32>
func.func @llama_f16(%q: memref<1x32x128xf32>, %k: memref<64x8x16x128xf16>,
                       %v: memref<64x8x16x128xf16>, %bt: memref<1x64xi32>,
                       %lens: memref<1xi32>, %o: memref<1x32x128xf32>, %m: memref<1x32xf32>,
                       %l: memref<1x32xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<1x32x128xf32>)
      kv(%k, %v : memref<64x8x16x128xf16>, memref<64x8x16x128xf16>)
      table(%bt : memref<1x64xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x32x128xf32>) m(%m : memref<1x32xf32>) l(%l : memref<1x32xf32>)
      {scale = 0.0883883461 : f32}
  return
}
func.func @llama_f32(%q: memref<1x32x128xf32>, %k: memref<64x8x16x128xf32>,
                       %v: memref<64x8x16x128xf32>, %bt: memref<1x64xi32>,
                       %lens: memref<1xi32>, %o: memref<1x32x128xf32>, %m: memref<1x32xf32>,
                       %l: memref<1x32xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<1x32x128xf32>)
      kv(%k, %v : memref<64x8x16x128xf32>, memref<64x8x16x128xf32>)
      table(%bt : memref<1x64xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x32x128xf32>) m(%m : memref<1x32xf32>) l(%l : memref<1x32xf32>)
      {scale = 0.0883883461 : f32}
  return
}
