// hg-hybrid-pipeline: the GPU half of a split becomes an embedded kernel binary launched on a
// stream (mgpu* calls), the CPU half's kernel is called right after the launches (nothing that
// blocks the host in between), then the copies back, frees and the stream's synchronize; the
// else branch (no GPU) calls the CPU kernel over every token.
// RUN: hybridgen-opt %s -hg-hybrid-pipeline="format=isa" | FileCheck %s
// RUN: hybridgen-opt %s -hg-hybrid-pipeline="all-devices=1" | FileCheck %s --check-prefix=CPU
// RUN: hybridgen-opt %s -hg-hybrid-pipeline="format=isa" | mlir-translate --mlir-to-llvmir | FileCheck %s --check-prefix=LLVM

// CHECK-NOT: hg.
// CHECK-LABEL: llvm.func @hybrid(
// CHECK: llvm.call @hgrt_segment_begin
// CHECK: llvm.call @hgrt_split_point
// CHECK: llvm.call @hgrt_gpu_available()
// CHECK: llvm.call @hgrt_gpu_alias
// CHECK: llvm.call @hgrt_gpu_alias
// CHECK: llvm.call @hgrt_gpu_check_batch
// CHECK: llvm.call @hgrt_device_begin
// CHECK: %[[S:.*]] = llvm.call @mgpuStreamCreate()
// CHECK: llvm.call @mgpuMemcpy
// CHECK: gpu.launch_func <%[[S]] : !llvm.ptr> @hg_gpu_kernels::@__hg_gpu_partial_
// CHECK: gpu.launch_func <%[[S]] : !llvm.ptr> @hg_gpu_kernels::@__hg_gpu_combine_
// CHECK-NOT: llvm.call @mgpu
// CHECK: llvm.call @hgrt_device_begin
// CHECK-NEXT: llvm.call @[[KERNEL:__hg_cpu_dense_[a-z0-9_]*]](
// CHECK-NEXT: llvm.call @hgrt_device_end
// CHECK: llvm.call @mgpuMemcpy
// CHECK: llvm.call @mgpuMemFree
// CHECK: llvm.call @mgpuStreamSynchronize(%[[S]])
// CHECK-NEXT: llvm.call @mgpuStreamDestroy(%[[S]])
// CHECK: llvm.call @hgrt_device_end
// CHECK: llvm.call @[[KERNEL]](
// CHECK: llvm.call @hgrt_segment_end
// CHECK: gpu.binary @hg_gpu_kernels [#gpu.object<#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">, {{.*}}assembly = "

// CPU-NOT: gpu.
// CPU-NOT: mgpu
// CPU: llvm.call @__hg_cpu_dense_
// CPU: llvm.call @__hg_cpu_dense_

// The PTX is embedded and loaded when the library loads (JIT-compiled by the driver).
// LLVM: @llvm.global_ctors = appending global {{.*}} @hg_gpu_kernels_load
// LLVM: call void @mgpuLaunchKernel(
// LLVM: call ptr @mgpuModuleLoadJIT(ptr @hg_gpu_kernels_binary

!q = memref<?x8x64xf32>
!p = memref<?x2x16x64xf16>
func.func @hybrid(%q: !q, %k: !p, %v: !p, %bt: memref<?x?xi32>, %lens: memref<?xi32>, %o: !q) {
  hg.segment 3 {
    hg.attention q(%q : !q) kv(%k, %v : !p, !p) table(%bt : memref<?x?xi32>)
        lens(%lens : memref<?xi32>) out(%o : !q)
        {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], point = runtime, merge = lse, dense>}
  }
  return
}
