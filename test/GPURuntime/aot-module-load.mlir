// An ahead-of-time --gpu library loads its GPU module when it is opened: the global constructor
// that calls mgpuModuleLoad must be in .init_array (the legacy .ctors section of a shared object
// is not run by today's crtbeginS.o, which left every kernel launch with a null function).
// RUN: hybridgen-compile --gpu %s -o %t.so
// RUN: llvm-readelf -S %t.so | FileCheck %s --check-prefix=SECTIONS
// SECTIONS: .init_array
// SECTIONS-NOT: .ctors
// RUN: env LD_LIBRARY_PATH=%runtime_lib_dir:%mlir_lib_dir \
// RUN:   HYBRIDGEN_CUDA_LIBRARY=%runtime_lib_dir/libhybridgen_fake_cuda.so FAKE_CUDA_TRACE=1 \
// RUN:   python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1]); print('opened')" %t.so 2>&1 \
// RUN:   | FileCheck %s
// CHECK: fake-cuda: module load
// CHECK: opened
func.func @attn(%q: memref<?x8x64xf32>, %k: memref<?x2x16x64xbf16>, %v: memref<?x2x16x64xbf16>,
                %bt: memref<?x?xi32>, %n: memref<?xi32>, %o: memref<?x8x64xf32>) {
  hg.segment 1 {
    hg.attention q(%q : memref<?x8x64xf32>)
      kv(%k, %v : memref<?x2x16x64xbf16>, memref<?x2x16x64xbf16>)
      table(%bt : memref<?x?xi32>) lens(%n : memref<?xi32>) out(%o : memref<?x8x64xf32>)
      {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], point = runtime, merge = lse, dense>}
  }
  return
}
