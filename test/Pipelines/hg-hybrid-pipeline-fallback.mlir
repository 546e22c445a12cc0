// End to end through hg-hybrid-pipeline on a machine without a GPU: the module carries the GPU
// kernels (a gpu.binary loaded through the runtime's mgpu* ABI when the library loads), the
// runtime reports no usable device, and every split point of hg-cpu-pipeline.mlir's cases (0,
// interior, len, the runtime's point in a segment) must still match that file's scalar reference:
// the CPU takes every token and the GPU partial is empty.
// REQUIRES: hgrt-mgpu
// RUN: hybridgen-opt %S/hg-cpu-pipeline.mlir -hg-hybrid-pipeline="format=isa" \
// RUN: | env HYBRIDGEN_DISABLE_CUDA=1 mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_lib_dir/libomp.so,%mlir_lib_dir/libmlir_c_runner_utils.so,%mlir_lib_dir/libmlir_runner_utils.so,%runtime_lib_dir/libhybridgen_runtime.so \
// RUN: | FileCheck %S/hg-cpu-pipeline.mlir
