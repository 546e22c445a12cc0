// The GPU kernels lowered to NVVM and serialized as PTX for sm_90 and sm_80: K/V rows are read
// with 16-byte non-coherent global loads and the reductions are warp shuffles; libdevice is
// linked (no __nv_ call is left for ptxas to resolve).
// RUN: hybridgen-opt %s -hg-lower-attention-to-gpu -hg-gpu-to-nvvm="chip=sm_90 features=+ptx80 format=isa" | %extract_gpu_object %t.sm90.ptx
// RUN: FileCheck %s --check-prefixes=PTX,SM90 < %t.sm90.ptx
// RUN: hybridgen-opt %s -hg-lower-attention-to-gpu -hg-gpu-to-nvvm="chip=sm_80 features=+ptx80 format=isa" | %extract_gpu_object %t.sm80.ptx
// RUN: FileCheck %s --check-prefixes=PTX,SM80 < %t.sm80.ptx
// RUN: hybridgen-opt %s -hg-lower-attention-to-gpu -hg-gpu-to-nvvm="format=isa" | FileCheck %s --check-prefix=IR

// SM90: .target sm_90
// SM80: .target sm_80
// PTX-NOT: __nv_
// PTX-LABEL: .visible .entry __hg_gpu_partial_bf16_q32_kv8_b16_d128_
// PTX: ld.global.nc.v4.b32
// PTX: shfl.sync.bfly.b32
// PTX: ex2.approx
// PTX: bar.sync
// PTX-LABEL: .visible .entry __hg_gpu_combine_bf16_q32_kv8_b16_d128_
// PTX-LABEL: .visible .entry __hg_gpu_partial_f16_q8_kv8_b16_d64_
// PTX: ld.global.nc.v4.b32
// PTX: cvt.f32.f16
// PTX: shfl.sync.bfly.b32
// PTX-LABEL: .visible .entry __hg_gpu_partial_f32_q32_kv4_b32_d128_
// PTX: ld.global.nc.v4.b32
// PTX: shfl.sync.bfly.b32

// The host keeps the launches; the kernels are now one gpu.binary with the PTX as its object.
// IR: module attributes {gpu.container_module}
// IR-COUNT-6: gpu.launch_func
// IR-NOT: gpu.module
// IR: gpu.binary @hg_gpu_kernels [#gpu.object<#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">, {{.*}}assembly = "

// Llama-3-8B's attention shape in bf16 (group 4, d 128).
func.func @llama_bf16(%q: memref<?x32x128xf32>, %k: memref<?x8x16x128xbf16>,
                      %v: memref<?x8x16x128xbf16>, %bt: memref<?x?xi32>, %lens: memref<?xi32>,
                      %o: memref<?x32x128xf32>, %m: memref<?x32xf32>, %l: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<?x32x128xf32>)
      kv(%k, %v : memref<?x8x16x128xbf16>, memref<?x8x16x128xbf16>)
      table(%bt : memref<?x?xi32>) lens(%lens : memref<?xi32>) range [%c0, len) on gpu
      -> o(%o : memref<?x32x128xf32>) m(%m : memref<?x32xf32>) l(%l : memref<?x32xf32>)
      {scale = 0.0883883461 : f32}
  return
}
// MHA (group 1) in f16 with head_dim 64, windowed.
func.func @mha_f16(%q: memref<?x8x64xf32>, %k: memref<?x8x16x64xf16>, %v: memref<?x8x16x64xf16>,
                   %bt: memref<?x?xi32>, %lens: memref<?xi32>, %o: memref<?x8x64xf32>,
                   %m: memref<?x8xf32>, %l: memref<?x8xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<?x8x64xf32>)
      kv(%k, %v : memref<?x8x16x64xf16>, memref<?x8x16x64xf16>)
      table(%bt : memref<?x?xi32>) lens(%lens : memref<?xi32>) range [%c0, len) on gpu
      -> o(%o : memref<?x8x64xf32>) m(%m : memref<?x8xf32>) l(%l : memref<?x8xf32>)
      {scale = 0.125 : f32, window = 512 : i64}
  return
}
// Group 8 in f32 with blocks of 32 tokens and a softcap.
func.func @gqa8_f32(%q: memref<?x32x128xf32>, %k: memref<?x4x32x128xf32>,
                    %v: memref<?x4x32x128xf32>, %bt: memref<?x?xi32>, %lens: memref<?xi32>,
                    %o: memref<?x32x128xf32>, %m: memref<?x32xf32>, %l: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  hg.partial_attention q(%q : memref<?x32x128xf32>)
      kv(%k, %v : memref<?x4x32x128xf32>, memref<?x4x32x128xf32>)
      table(%bt : memref<?x?xi32>) lens(%lens : memref<?xi32>) range [%c0, len) on gpu
      -> o(%o : memref<?x32x128xf32>) m(%m : memref<?x32xf32>) l(%l : memref<?x32xf32>)
      {scale = 0.0883883461 : f32, softcap = 50.0 : f32}
  return
}
