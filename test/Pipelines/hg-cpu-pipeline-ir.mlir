// The IR hg-cpu-pipeline leaves: LLVM dialect only, OpenMP for the parallel loops, no libm call
// in the kernels, C interfaces for public functions, and target attributes with aot.
// RUN: hybridgen-opt %s -hg-cpu-pipeline | FileCheck %s
// RUN: hybridgen-opt %s -hg-cpu-pipeline="aot=true target-cpu=x86-64-v3 target-features=+avx2,+fma" | FileCheck %s --check-prefix=AOT
// RUN: hybridgen-opt %s -hg-cpu-pipeline="all-devices=false" | FileCheck %s --check-prefix=GPU

// A bf16, GQA-4, sliding-window, soft-capped split attention inside a segment.
// CHECK-DAG: llvm.func @hgrt_segment_begin(i64)
// CHECK-DAG: llvm.func @hgrt_device_begin(i64, i32)
// CHECK-DAG: llvm.func @hgrt_split_point(i64) -> i64
// CHECK-LABEL: llvm.func @attn(
// CHECK: llvm.call @hgrt_segment_begin
// CHECK: llvm.call @hgrt_split_point
// CHECK: llvm.call @__hg_cpu_dense
// CHECK: omp.parallel
// CHECK: llvm.call @hgrt_segment_end
// CHECK-LABEL: llvm.func @_mlir_ciface_attn(
// CHECK-LABEL: llvm.func @__hg_cpu_dense
// CHECK: omp.parallel
// CHECK: omp.wsloop
// CHECK: llvm.intr.vector.reduce.fadd
// CHECK-NOT: @expf
// CHECK-NOT: @tanhf
// CHECK-NOT: {{[ "](math|scf|vector|memref|arith)\.}}
// AOT: llvm.func @attn({{.*}} target_cpu = "x86-64-v3"
// AOT-SAME: target_features = #llvm.target_features<["+avx2", "+fma"]>
// GPU: hg.partial_attention {{.*}} on gpu
func.func @attn(%q: memref<2x32x128xf32>, %k: memref<64x8x16x128xbf16>,
                %v: memref<64x8x16x128xbf16>, %bt: memref<2x32xi32>, %lens: memref<2xi32>,
                %o: memref<2x32x128xf32>) {
  hg.segment 1 {
    hg.attention q(%q : memref<2x32x128xf32>)
        kv(%k, %v : memref<64x8x16x128xbf16>, memref<64x8x16x128xbf16>)
        table(%bt : memref<2x32xi32>) lens(%lens : memref<2xi32>) out(%o : memref<2x32x128xf32>)
        {scale = 0.0883883 : f32, window = 4096, softcap = 50.0 : f32,
         split = #hg.split<[cpu, gpu], point = runtime, merge = lse, dense>}
  }
  return
}
