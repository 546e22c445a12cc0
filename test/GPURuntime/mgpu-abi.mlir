// The host code that MLIR 22's gpu-to-llvm emits (module load from a global constructor, stream,
// alloc, copies, launch, dealloc, host registration) links against the runtime's mgpu* ABI alone
// and runs: on the fake driver of the runtime tests (device memory is host memory there, kernels do
// not execute) the data makes the round trip and every call reaches the driver with the emitted
// arguments; without a driver the same code prints the one-line notice and does nothing, safely.
// RUN: hybridgen-opt %s --pass-pipeline="builtin.module(gpu.module(convert-gpu-to-nvvm),gpu-module-to-binary{format=isa},convert-scf-to-cf,gpu-to-llvm,finalize-memref-to-llvm,convert-arith-to-llvm,convert-cf-to-llvm,convert-func-to-llvm,reconcile-unrealized-casts)" -o %t.mlir
// RUN: env HYBRIDGEN_CUDA_LIBRARY=%runtime_lib_dir/libhybridgen_fake_cuda.so FAKE_CUDA_TRACE=1 \
// RUN:   mlir-runner %t.mlir -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_lib_dir/libomp.so,%mlir_lib_dir/libmlir_c_runner_utils.so,%mlir_lib_dir/libmlir_runner_utils.so,%runtime_lib_dir/libhybridgen_runtime.so \
// RUN:   2>&1 | FileCheck %s
// RUN: env HYBRIDGEN_CUDA_LIBRARY=/nonexistent/libcuda.so.1 \
// RUN:   mlir-runner %t.mlir -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_lib_dir/libomp.so,%mlir_lib_dir/libmlir_c_runner_utils.so,%mlir_lib_dir/libmlir_runner_utils.so,%runtime_lib_dir/libhybridgen_runtime.so \
// RUN:   2>&1 | FileCheck %s --check-prefix=NODEV

// PTX (format=isa) goes through mgpuModuleLoadJIT: the driver JIT-compiles it, with options.
// CHECK: fake-cuda: module load, PTX text, 3 JIT options
// CHECK: fake-cuda: host register 32 bytes
// CHECK: fake-cuda: alloc 32 bytes
// CHECK: fake-cuda: copy 32 bytes
// CHECK: fake-cuda: launch grid (3, 1, 1) block (64, 1, 1) smem 0
// CHECK: fake-cuda: copy 32 bytes
// CHECK: fake-cuda: free 32 bytes
// CHECK: [0,  1,  2,  3,  4,  5,  6,  7]

// NODEV: hybridgen: no usable CUDA device (cannot load the CUDA driver '/nonexistent/libcuda.so.1'
// NODEV-NOT: hybridgen: no usable CUDA device
// NODEV: rank = 1 offset = 0 sizes = [8]

module attributes {gpu.container_module} {
  gpu.module @kernels [#nvvm.target<chip = "sm_90", features = "+ptx80">] {
    gpu.func @touch(%a: memref<8xf32>) kernel {
      gpu.return
    }
  }
  func.func private @printMemrefF32(memref<*xf32>)
  func.func @main() {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %c8 = arith.constant 8 : index
    %c64 = arith.constant 64 : index
    %h = memref.alloc() : memref<8xf32>
    %back = memref.alloc() : memref<8xf32>
    scf.for %i = %c0 to %c8 step %c1 {
      %ii = arith.index_cast %i : index to i32
      %f = arith.sitofp %ii : i32 to f32
      memref.store %f, %h[%i] : memref<8xf32>
    }
    %hu = memref.cast %h : memref<8xf32> to memref<*xf32>
    gpu.host_register %hu : memref<*xf32>
    %t0 = gpu.wait async
    %d, %t1 = gpu.alloc async [%t0] () : memref<8xf32>
    %t2 = gpu.memcpy async [%t1] %d, %h : memref<8xf32>, memref<8xf32>
    %t3 = gpu.launch_func async [%t2] @kernels::@touch blocks in (%c3, %c1, %c1) threads in (%c64, %c1, %c1) args(%d : memref<8xf32>)
    %t4 = gpu.memcpy async [%t3] %back, %d : memref<8xf32>, memref<8xf32>
    %t5 = gpu.dealloc async [%t4] %d : memref<8xf32>
    gpu.wait [%t5]
    gpu.host_unregister %hu : memref<*xf32>
    %bu = memref.cast %back : memref<8xf32> to memref<*xf32>
    call @printMemrefF32(%bu) : (memref<*xf32>) -> ()
    return
  }
}
