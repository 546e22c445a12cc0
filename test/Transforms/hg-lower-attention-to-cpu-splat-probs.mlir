// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="vector-bits=256 k-transposed=true far-prefetch-bytes=8192 overlap-pieces=true splat-probs=true" | FileCheck %s
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="vector-bits=256 k-transposed=true far-prefetch-bytes=8192 overlap-pieces=true" | FileCheck %s --check-prefix=OFF

// splat-probs: the softmax writes each row's probability across the 8 lanes, after the 16
// probabilities of each head (scores memref<4 x 16 + 16*8>, the copies zeroed at allocation), and
// p.V loads the copy (vector<8xf32>) instead of broadcasting a scalar load at every tile. Both
// scores buffers of the overlapped walk have the same layout.
// CHECK-LABEL: func.func private @__hg_cpu_dense_f16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt_ov_ps(
// CHECK: %[[A:[a-z0-9_]+]] = memref.alloca() {alignment = 64 : i64} : memref<4x144xf32>
// CHECK: vector.store %{{.*}}, %[[A]][%c0{{[_0-9]*}}, %c0{{[_0-9]*}}] : memref<4x144xf32>, vector<16xf32>
// CHECK-NEXT: arith.constant 0.000000e+00 : f32
// CHECK: vector.store %{{.*}}, %[[A]][%c0{{[_0-9]*}}, %c16{{[_0-9]*}}] : memref<4x144xf32>, vector<128xf32>
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<4x144xf32>
// p.V of the previous piece, in the overlapped loop: a load of the copy at 16 + 8 r.
// CHECK: %[[M:[0-9]+]] = arith.muli %{{[0-9]+}}, %c8{{[_0-9]*}} : index
// CHECK-NEXT: %[[I:[0-9]+]] = arith.addi %c16{{[_0-9]*}}, %[[M]] : index
// CHECK-NEXT: %[[P:[0-9]+]] = vector.load %{{[0-9]+}}[%c0{{[_0-9]*}}, %[[I]]] : memref<4x144xf32>, vector<8xf32>
// CHECK-NEXT: vector.fma %[[P]], %{{[0-9]+}}, %{{.*}} : vector<8xf32>
// CHECK-NOT: memref.load %{{.*}} : memref<4x144xf32>
// The softmax: each head's 16 probabilities, then row r's copy at 16 + 8 r.
// CHECK: vector.store %[[PR:[0-9]+]], %[[S:[0-9]+]][%c0{{[_0-9]*}}, %c0{{[_0-9]*}}] : memref<4x144xf32>, vector<16xf32>
// CHECK-NEXT: %[[E0:[0-9]+]] = vector.extract %[[PR]][0] : f32 from vector<16xf32>
// CHECK-NEXT: %[[B0:[0-9]+]] = vector.broadcast %[[E0]] : f32 to vector<8xf32>
// CHECK: vector.store %[[B0]], %[[S]][%c0{{[_0-9]*}}, %c16{{[_0-9]*}}] : memref<4x144xf32>, vector<8xf32>
// CHECK: %[[E15:[0-9]+]] = vector.extract %[[PR]][15] : f32 from vector<16xf32>
// CHECK-NEXT: %[[B15:[0-9]+]] = vector.broadcast %[[E15]] : f32 to vector<8xf32>
// CHECK: vector.store %[[B15]], %[[S]][%c0{{[_0-9]*}}, %c136{{[_0-9]*}}] : memref<4x144xf32>, vector<8xf32>

// Off (the default): scores memref<4x16>, p broadcast from scalar loads.
// OFF-LABEL: func.func private @__hg_cpu_dense_f16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt_ov(
// OFF-NOT: memref<4x144xf32>
// OFF: memref.load %{{.*}} : memref<4x16xf32>
// OFF-NEXT: vector.broadcast %{{[0-9]+}} : f32 to vector<8xf32>

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
