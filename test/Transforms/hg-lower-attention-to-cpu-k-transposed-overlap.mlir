// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true far-prefetch-bytes=8192 overlap-pieces=true" | FileCheck %s
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true far-prefetch-bytes=8192 overlap-pieces=true spread-prefetch=true" | FileCheck %s --check-prefix=SPREAD
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true far-prefetch-bytes=8192 overlap-pieces=true overlap-pieces-16bit-kv=0" | FileCheck %s --check-prefix=NO16
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true overlap-pieces=false overlap-pieces-16bit-kv=1" | FileCheck %s --check-prefix=ONLY16
// RUN: not hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true overlap-pieces-16bit-kv=2" 2>&1 | FileCheck %s --check-prefix=BAD16
// RUN: hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true far-prefetch-bytes=8192 overlap-pieces=true overlap-pv-lag=2" | FileCheck %s --check-prefix=LAG2
// RUN: not hybridgen-opt %s -hg-lower-attention-to-cpu="k-transposed=true overlap-pieces=true overlap-pv-lag=0" 2>&1 | FileCheck %s --check-prefix=BADLAG

// overlap-pieces (the driver's default except on AMD Zen 4): the transposed kernel computes each
// piece's logits in one loop with the previous piece's p.V. The walk keeps two probability
// buffers and two rows of rescale factors (the pending piece's and this one's) and the pending
// piece (7 fields: pending, pool block, kv head, unit, rows, buffer) with the next piece's buffer
// in a stack buffer; a whole pending block runs overlapped, a partial one runs its p.V alone
// before this piece's logits; the walk's last piece runs its p.V alone afterwards. In the
// overlapped loop (4 rows per iteration on AVX-512) every row step asks for one line of this
// piece's V and of the far piece's K (and, for pieces under 4 KiB, V) and carries p.V's tile
// (8 accumulators) and the logits' chains (4 heads x 2) together. Kernels end in _kt_ov.
// CHECK-LABEL: func.func private @__hg_cpu_dense_f16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt_ov(
// CHECK-SAME: %[[K:[a-z0-9]+]]: memref<?x8x16x128xf16>, %[[V:[a-z0-9]+]]: memref<?x8x16x128xf16>
// CHECK: %[[S0:.*]] = memref.alloca() {alignment = 64 : i64} : memref<4x16xf32>
// CHECK: %[[S1:.*]] = memref.alloca() {alignment = 64 : i64} : memref<4x16xf32>
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<2x4xf32>
// CHECK: memref.alloca() : memref<8xindex>
// CHECK: scf.for
// CHECK: scf.for
// CHECK: arith.select %{{.*}}, %[[S0]], %[[S1]] : memref<4x16xf32>
// CHECK: scf.if
// CHECK: arith.select %{{.*}}, %[[S0]], %[[S1]] : memref<4x16xf32>
// CHECK: scf.for %{{.*}} = %{{.*}} to %c16{{.*}} step %c4{{.*}} iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// CHECK: memref.prefetch %[[V]][{{.*}}], read, locality<2>
// CHECK-NEXT: memref.prefetch %[[K]][{{.*}}], read, locality<2>
// CHECK-NOT: memref.prefetch
// CHECK: vector.fma
// CHECK: } else {
// CHECK: scf.for %{{.*}} = %{{.*}} to %c128 step %c8
// The walk's last piece: its p.V alone, 8 rows per iteration, no prefetch.
// CHECK: memref.load %{{.*}} : memref<8xindex>
// CHECK: scf.if
// CHECK: scf.for %{{.*}} = %{{.*}} to %c16{{.*}} step %c8
// CHECK-NOT: memref.prefetch
// CHECK: vector.fma
// CHECK-LABEL: func.func private @__hg_cpu_dense_f16_q9_kv3_b16_d64_{{[a-z0-9_]*}}_kt_ov(
// CHECK-SAME: %[[K2:[a-z0-9]+]]: memref<?x3x16x64xf16>, %[[V2:[a-z0-9]+]]: memref<?x3x16x64xf16>
// CHECK: scf.for %{{.*}} = %{{.*}} to %c16{{.*}} step %c4{{.*}} iter_args
// CHECK: memref.prefetch %[[V2]][{{.*}}], read, locality<2>
// CHECK-NEXT: memref.prefetch %[[K2]][{{.*}}], read, locality<2>
// CHECK-NEXT: memref.prefetch %[[V2]][{{.*}}], read, locality<2>
// With the spread prefetch (Zen 4's) the kernel is the spread one, not overlapped.
// SPREAD: func.func private @__hg_cpu_dense_f16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt_sp(
// SPREAD-NOT: memref<8xindex>
// SPREAD: func.func private @__hg_cpu_dense_f16_q9_kv3_b16_d64_{{[a-z0-9_]*}}_kt_ov(
// overlap-pieces-16bit-kv decides for bf16/f16 KV alone (an A/B switch; the driver leaves it at
// -1, as overlap-pieces): 0 keeps these f16 kernels plain under overlap-pieces, 1 overlaps them
// without it; anything else is an error.
// NO16: func.func private @__hg_cpu_dense_f16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt(
// NO16: func.func private @__hg_cpu_dense_f16_q9_kv3_b16_d64_{{[a-z0-9_]*}}_kt(
// ONLY16: func.func private @__hg_cpu_dense_f16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt_ov(
// ONLY16: func.func private @__hg_cpu_dense_f16_q9_kv3_b16_d64_{{[a-z0-9_]*}}_kt_ov(
// BAD16: overlap-pieces-16bit-kv must be -1 (as overlap-pieces), 0 or 1, got 2
// overlap-pv-lag=2: p.V two pieces behind the logits, so no overlapped step reads the
// probabilities of the softmax just before it. Three probability buffers and three rows of
// rescale factors, two pending pieces (oldest first) and the next buffer, taken in turn; the
// overlapped step takes the oldest's buffer (picked among the three); after the walk both
// pending pieces run their p.V alone, oldest first. Kernels end in _kt_ov_lag2.
// LAG2-LABEL: func.func private @__hg_cpu_dense_f16_q32_kv8_b16_d128_{{[a-z0-9_]*}}_kt_ov_lag2(
// LAG2: %[[S0:.*]] = memref.alloca() {alignment = 64 : i64} : memref<4x16xf32>
// LAG2: %[[S1:.*]] = memref.alloca() {alignment = 64 : i64} : memref<4x16xf32>
// LAG2: %[[S2:.*]] = memref.alloca() {alignment = 64 : i64} : memref<4x16xf32>
// LAG2: memref.alloca() {alignment = 64 : i64} : memref<3x4xf32>
// LAG2: %[[Q:.*]] = memref.alloca() : memref<15xindex>
// LAG2: scf.for
// LAG2: scf.for
// LAG2: memref.load %[[Q]][%c14{{.*}}] : memref<15xindex>
// LAG2: %[[PICK:.*]] = arith.select %{{.*}}, %[[S1]], %[[S2]] : memref<4x16xf32>
// LAG2: arith.select %{{.*}}, %[[S0]], %[[PICK]] : memref<4x16xf32>
// LAG2: scf.if
// LAG2: memref.load %[[Q]][%c6{{.*}}] : memref<15xindex>
// LAG2: scf.for %{{.*}} = %{{.*}} to %c16{{.*}} step %c4{{.*}} iter_args
// LAG2: memref.prefetch
// The queue moves up: entry 1's seven fields into entry 0, this piece into entry 1.
// LAG2: %[[F7:.*]] = memref.load %[[Q]][%c7{{.*}}] : memref<15xindex>
// LAG2-NEXT: %[[C0:.*]] = arith.constant 0 : index
// LAG2-NEXT: memref.store %[[F7]], %[[Q]][%[[C0]]] : memref<15xindex>
// LAG2: memref.store %{{.*}}, %[[Q]][%c13{{.*}}] : memref<15xindex>
// LAG2: memref.store %{{.*}}, %[[Q]][%c14{{.*}}] : memref<15xindex>
// After the walk: entry 0's p.V alone, then entry 1's.
// LAG2: memref.load %[[Q]][%c0{{.*}}] : memref<15xindex>
// LAG2: scf.if
// LAG2: scf.for %{{.*}} = %{{.*}} to %c16{{.*}} step %c8
// LAG2: memref.load %[[Q]][%c7{{.*}}] : memref<15xindex>
// LAG2: scf.if
// LAG2: scf.for %{{.*}} = %{{.*}} to %c16{{.*}} step %c8
// LAG2-LABEL: func.func private @__hg_cpu_dense_f16_q9_kv3_b16_d64_{{[a-z0-9_]*}}_kt_ov_lag2(
// BADLAG: overlap-pv-lag must be in [1, 4], got 0
func.func @llama_shape(%q: memref<1x32x128xf32>, %k: memref<64x8x16x128xf16>,
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

func.func @smollm2_shape(%q: memref<1x9x64xf32>, %k: memref<8x3x16x64xf16>,
                         %v: memref<8x3x16x64xf16>, %bt: memref<1x8xi32>, %lens: memref<1xi32>,
                         %o: memref<1x9x64xf32>, %m: memref<1x9xf32>, %l: memref<1x9xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<1x9x64xf32>) kv(%k, %v : memref<8x3x16x64xf16>, memref<8x3x16x64xf16>)
      table(%bt : memref<1x8xi32>) lens(%lens : memref<1xi32>) range [%c0, len) on cpu
      -> o(%o : memref<1x9x64xf32>) m(%m : memref<1x9xf32>) l(%l : memref<1x9xf32>)
      {scale = 0.125 : f32}
  return
}
