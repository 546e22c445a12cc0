// hybridgen-compile --gpu takes the GPU partial kernel's tuning (--gpu-unroll,
// --gpu-pieces-per-lane, --gpu-async-stages, --gpu-resident-blocks) to the lowering: a valid set
// compiles (the embedded kernels are cp.async ones), a bad value is an error naming the option and
// leaves no output.
// RUN: rm -f %t.so %t.bad.so
// RUN: hybridgen-compile %s -o %t.so --target-cpu=x86-64-v3 --gpu --gpu-format=isa --gpu-async-stages=3 --gpu-unroll=2 --gpu-resident-blocks=4
// RUN: grep -c "cp.async.cg.shared.global" %t.so | FileCheck %s --check-prefix=RING
// RUN: not hybridgen-compile %s -o %t.bad.so --target-cpu=x86-64-v3 --gpu --gpu-format=isa --gpu-pieces-per-lane=3 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not test -e %t.bad.so

// RING: {{[1-9]}}
// BAD: error: 'hg.partial_attention' op GPU kernel option pieces-per-lane=3 must be a power of two in 1..32
func.func @hg_attention(%q: memref<?x32x128xf32>, %k: memref<?x8x16x128xbf16>, %v: memref<?x8x16x128xbf16>,
                        %bt: memref<?x?xi32>, %n: memref<?xi32>, %o: memref<?x32x128xf32>) {
  hg.segment 1 {
    hg.attention q(%q : memref<?x32x128xf32>) kv(%k, %v : memref<?x8x16x128xbf16>, memref<?x8x16x128xbf16>)
        table(%bt : memref<?x?xi32>) lens(%n : memref<?xi32>) out(%o : memref<?x32x128xf32>)
        {scale = 0.0883883461 : f32, split = #hg.split<[cpu, gpu], point = runtime, merge = lse, dense>}
  }
  return
}
