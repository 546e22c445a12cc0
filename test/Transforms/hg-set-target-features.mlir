// RUN: hybridgen-opt %s -split-input-file -hg-set-target-features="cpu=znver4 features=+avx2,+fma" | FileCheck %s --check-prefix=EXPLICIT
// RUN: hybridgen-opt %s -split-input-file -hg-set-target-features="cpu=haswell" | FileCheck %s --check-prefix=CPU-ONLY
// RUN: hybridgen-opt %s -split-input-file -hg-set-target-features | FileCheck %s --check-prefix=HOST

// Definitions get the CPU and its features; declarations (external calls) are left alone.
// EXPLICIT-LABEL: llvm.func @kernel
// EXPLICIT-SAME: target_cpu = "znver4"
// EXPLICIT-SAME: target_features = #llvm.target_features<["+avx2", "+fma"]>
// EXPLICIT: llvm.func @hgrt_segment_begin(i64)
// EXPLICIT-NOT: target_cpu
// CPU-ONLY-LABEL: llvm.func @kernel
// CPU-ONLY-SAME: target_cpu = "haswell"
// CPU-ONLY-NOT: target_features
// HOST-LABEL: llvm.func @kernel
// HOST-SAME: target_cpu = "{{[a-z0-9-]+}}"
// HOST-SAME: target_features = #llvm.target_features<[{{.*}}"+sse2"
llvm.func @kernel() {
  llvm.return
}
llvm.func @hgrt_segment_begin(i64)

// -----

// Functions nested in other ops are reached too.
// EXPLICIT-LABEL: llvm.func @inner
// EXPLICIT-SAME: target_cpu = "znver4"
module @nested {
  llvm.func @inner() {
    llvm.return
  }
}
