// hg.prefill_attention through the whole CPU pipeline: LLVM dialect only, the kernel's parallel
// loop on OpenMP, exp and tanh expanded (no libm call), the segment and device brackets kept.
// RUN: hybridgen-opt %s -hg-cpu-pipeline | FileCheck %s

// CHECK-DAG: llvm.func @hgrt_segment_begin(i64)
// CHECK-DAG: llvm.func @hgrt_device_begin(i64, i32)
// CHECK-LABEL: llvm.func @prefill(
// CHECK: llvm.call @hgrt_segment_begin
// CHECK: llvm.call @hgrt_device_begin
// CHECK: llvm.call @__hg_cpu_prefill_bf16
// CHECK: llvm.call @hgrt_device_end
// CHECK: llvm.call @hgrt_segment_end
// CHECK: llvm.func @_mlir_ciface_prefill
// CHECK: llvm.func @__hg_cpu_prefill_bf16{{.*}}sym_visibility = "private"
// CHECK: omp.parallel
// CHECK: omp.wsloop
// CHECK-NOT: @expf
// CHECK-NOT: @tanhf
// CHECK-NOT: hg.
func.func @prefill(%layer: index, %q: memref<?x?x8x64xf32>, %k: memref<?x2x16x64xbf16>,
                   %v: memref<?x2x16x64xbf16>, %bt: memref<?x?xi32>, %lens: memref<?xi32>,
                   %o: memref<?x?x8x64xf32>) {
  hg.segment dynamic(%layer) {
    hg.prefill_attention q(%q : memref<?x?x8x64xf32>)
        kv(%k, %v : memref<?x2x16x64xbf16>, memref<?x2x16x64xbf16>)
        table(%bt : memref<?x?xi32>) lens(%lens : memref<?xi32>) out(%o : memref<?x?x8x64xf32>)
        {scale = 0.125 : f32, window = 100, softcap = 5.0 : f32}
  }
  return
}
