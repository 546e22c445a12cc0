// ptxas accepts the kernels' PTX for sm_80 and sm_90 and reports no local-memory spills for any
// kernel (register pressure is the risk of keeping a whole GQA group's q and accumulators in
// registers). Then the fatbin format (ptxas + fatbinary) and `auto`, which picks fatbin when
// the toolkit has ptxas.
// REQUIRES: ptxas
// RUN: hybridgen-opt %S/hg-gpu-to-nvvm.mlir -hg-lower-attention-to-gpu -hg-gpu-to-nvvm="chip=sm_90 features=+ptx80 format=isa" | %extract_gpu_object %t.sm90.ptx
// RUN: %ptxas -v -arch=sm_90 %t.sm90.ptx -o %t.sm90.cubin > %t.sm90.log 2>&1
// RUN: FileCheck %s < %t.sm90.log
// RUN: not grep -E "[1-9][0-9]* bytes (spill|stack)" %t.sm90.log
// RUN: hybridgen-opt %S/hg-gpu-to-nvvm.mlir -hg-lower-attention-to-gpu -hg-gpu-to-nvvm="chip=sm_80 features=+ptx80 format=isa" | %extract_gpu_object %t.sm80.ptx
// RUN: %ptxas -v -arch=sm_80 %t.sm80.ptx -o %t.sm80.cubin > %t.sm80.log 2>&1
// RUN: FileCheck %s < %t.sm80.log
// RUN: not grep -E "[1-9][0-9]* bytes (spill|stack)" %t.sm80.log
// The tuning options' variants (docs/gpu-path.md "Kernel tuning") assemble without spills too:
// the cp.async ring (PTX cp.async, 4 blocks of 128 registers) and two pieces per lane.
// RUN: hybridgen-opt %S/hg-gpu-to-nvvm.mlir -hg-lower-attention-to-gpu="async-stages=3 unroll=2 resident-blocks=4" -hg-gpu-to-nvvm="chip=sm_90 features=+ptx80 format=isa" | %extract_gpu_object %t.ring.ptx
// RUN: FileCheck %s --check-prefix=RING < %t.ring.ptx
// RUN: %ptxas -v -arch=sm_90 %t.ring.ptx -o %t.ring.cubin > %t.ring.log 2>&1
// RUN: FileCheck %s < %t.ring.log
// RUN: not grep -E "[1-9][0-9]* bytes (spill|stack)" %t.ring.log
// RUN: hybridgen-opt %S/hg-gpu-to-nvvm.mlir -hg-lower-attention-to-gpu="pieces-per-lane=2" -hg-gpu-to-nvvm="chip=sm_90 features=+ptx80 format=isa" | %extract_gpu_object %t.pieces.ptx
// RUN: %ptxas -v -arch=sm_90 %t.pieces.ptx -o %t.pieces.cubin > %t.pieces.log 2>&1
// RUN: FileCheck %s < %t.pieces.log
// RUN: not grep -E "[1-9][0-9]* bytes (spill|stack)" %t.pieces.log
// RUN: hybridgen-opt %S/hg-gpu-to-nvvm.mlir -hg-lower-attention-to-gpu -hg-gpu-to-nvvm="chip=sm_90 features=+ptx80 format=fatbin" | FileCheck %s --check-prefix=FATBIN
// RUN: hybridgen-opt %S/hg-gpu-to-nvvm.mlir -hg-lower-attention-to-gpu -hg-gpu-to-nvvm="chip=sm_90 features=+ptx80" | FileCheck %s --check-prefix=FATBIN

// Six entries (partial + combine for three configurations), each with its properties line;
// the greps above find no non-zero stack frame or spill anywhere in the report.
// CHECK-COUNT-6: Compiling entry function '__hg_gpu_{{(partial|combine)}}_{{.*}}' for 'sm_{{[89]}}0'
// CHECK: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

// RING: .shared .align 16 .b8 __wg___hg_gpu_partial_bf16_{{.*}}[24576];
// RING: .minnctapersm 4
// RING: cp.async.cg.shared.global [%{{.*}}], [%{{.*}}], 16;
// RING: cp.async.wait_group 2;
// RING: ld.shared.v4.b32

// A fatbin object starts with the fatbin magic 0xBA55ED50 (little endian).
// FATBIN: gpu.binary @hg_gpu_kernels [#gpu.object<#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">, properties = {ISAToBinaryTimeInMs = {{.*}}}, "P\EDU\BA
