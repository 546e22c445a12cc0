// Hostile input and flags: the tools exit non-zero with a diagnostic, never crash (stack
// overflow, SIGFPE, LLVM fatal error) and never write an empty artifact (issue 17, items 4-5).
//
// An empty file and an all-NUL file used to become an empty .so and exit 0.
// RUN: printf '' > %t.empty.mlir
// RUN: rm -f %t.empty.so %t.nul.so
// RUN: not hybridgen-compile %t.empty.mlir -o %t.empty.so 2>&1 | FileCheck %s --check-prefix=EMPTY
// RUN: not test -e %t.empty.so
// EMPTY: empty.mlir: the module has no public function callable with memref arguments; nothing to compile
// RUN: printf '\000\000\000\000' > %t.nul.mlir
// RUN: not hybridgen-compile %t.nul.mlir -o %t.nul.so 2>&1 | FileCheck %s --check-prefix=NUL
// RUN: not test -e %t.nul.so
// RUN: not hybridgen-opt %t.nul.mlir 2>&1 | FileCheck %s --check-prefix=NUL
// NUL: nul.mlir:1:1: error: the input contains a NUL byte (not MLIR text)
//
// A bogus target used to end in an LLVM fatal error.
// RUN: not hybridgen-compile --target-cpu=bogus %s -o %t.so 2>&1 | FileCheck %s --check-prefix=CPU
// CPU: unknown target CPU 'bogus'
// RUN: not hybridgen-compile --target-features=+avx2,+bogus %s -o %t.so 2>&1 | FileCheck %s --check-prefix=FEAT
// FEAT: unknown target feature 'bogus'
//
// chunk_tokens 2^63 - 16 used to compile and return wrong attention; negative meant the default.
// RUN: not hybridgen-compile --chunk-tokens=9223372036854775792 %s -o %t.so 2>&1 | FileCheck %s --check-prefix=CHUNK
// RUN: not hybridgen-compile --chunk-tokens=-1 %s -o %t.so 2>&1 | FileCheck %s --check-prefix=CHUNK
// CHUNK: chunk_tokens must be in [0, 16777216]
// RUN: not hybridgen-compile --far-prefetch-bytes=-8 %s -o %t.so 2>&1 | FileCheck %s --check-prefix=FAR
// FAR: far_prefetch_bytes must be in [0, 1048576]
//
// 5,000 nested regions (scf.execute_region, hg.segment) and types overflowed the parser's stack.
// RUN: %python -c "n=5000; print('func.func @f() {' + 'scf.execute_region {' * n + 'scf.yield' + '} scf.yield' * (n - 1) + '} return }')" > %t.regions.mlir
// RUN: not hybridgen-opt %t.regions.mlir 2>&1 | FileCheck %s --check-prefix=DEEP
// RUN: not hybridgen-compile %t.regions.mlir -o %t.so 2>&1 | FileCheck %s --check-prefix=DEEP
// RUN: %python -c "n=5000; print('func.func @f() {' + 'hg.segment 1 {' * n + '}' * n + ' return }')" > %t.segments.mlir
// RUN: not hybridgen-opt %t.segments.mlir 2>&1 | FileCheck %s --check-prefix=DEEP
// RUN: %python -c "n=5000; print('func.func private @f(tuple<' * 1 + 'tuple<' * n + 'i32' + '>' * (n + 1) + ')')" > %t.types.mlir
// RUN: not hybridgen-opt %t.types.mlir 2>&1 | FileCheck %s --check-prefix=DEEP
// DEEP: error: nesting deeper than 512 brackets
//
// A 4G-lane vector ended in "LLVM ERROR: out of memory".
// RUN: echo 'func.func @f(%%a: vector<4294967295xi1>, %%m: memref<4xf32>) { return }' > %t.vec.mlir
// RUN: not hybridgen-compile %t.vec.mlir -o %t.so 2>&1 | FileCheck %s --check-prefix=VEC
// VEC: error: vector type 'vector<4294967295xi1>' has 4294967295 elements; at most 65536 are supported
// So did a 10^9-element constant (memref.global initializer), in LLVM's translation.
// RUN: echo 'memref.global "private" constant @g : memref<1000000000xf32> = dense<1.0>' > %t.glob.mlir
// RUN: echo 'func.func @f(%%m: memref<4xf32>) { return }' >> %t.glob.mlir
// RUN: not hybridgen-compile %t.glob.mlir -o %t.so 2>&1 | FileCheck %s --check-prefix=GLOBAL
// GLOBAL: error: constant of type 'tensor<1000000000xf32>' has too many elements; at most 16777216 are supported
//
// Numeric flags of hybridgen-run are range-checked (--end=INT64_MAX overflowed and exited 0).
// RUN: not hybridgen-run --end=9223372036854775807 2>&1 | FileCheck %s --check-prefix=RUNEND
// RUNEND: --end=9223372036854775807 is not an integer in [1, 16777216]
// RUN: not hybridgen-run --steps=12x 2>&1 | FileCheck %s --check-prefix=RUNSTEPS
// RUNSTEPS: --steps=12x is not an integer in [1, 1000000]
// RUN: not hybridgen-run --gpu-tokens=-1 2>&1 | FileCheck %s --check-prefix=RUNGPU
// RUNGPU: --gpu-tokens=-1 is not an integer in [0, 16777216]

func.func @copy(%a: memref<16xf32>, %b: memref<16xf32>) {
  memref.copy %a, %b : memref<16xf32> to memref<16xf32>
  return
}
