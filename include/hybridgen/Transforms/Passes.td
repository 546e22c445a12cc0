//===- Passes.td - hybridgen passes -------------------------*- tablegen -*-===//
#ifndef HYBRIDGEN_TRANSFORMS_PASSES_TD
#define HYBRIDGEN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def HGSplitAttention : Pass<"hg-split-attention"> {
  let summary = "Split annotated attention into per-device partials and an exact merge";
  let description = [{
    Each `hg.attention` becomes one `hg.partial_attention` per device of its `#hg.split` annotation,
    over disjoint token ranges, plus an `hg.merge` of their (o, m, l) partials into the original
    output. Without an annotation the whole range goes to the CPU. With `point = runtime` the split
    point is read by an `hg.split_point` of the enclosing segment.

    Before:
    ```mlir
    hg.attention q(%q : ...) kv(%k, %v : ...) table(%bt : ...) lens(%n : ...) out(%o : ...)
        {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], point = 64, merge = lse, dense>}
    ```
    After:
    ```mlir
    %c0 = arith.constant 0 : index
    %s = arith.constant 64 : index
    %o0 = memref.alloc() ... %m0 = ... %l0 = ...
    hg.partial_attention ... range [%c0, %s) on cpu -> o(%o0 : ...) m(%m0 : ...) l(%l0 : ...)
    hg.partial_attention ... range [%s, len) on gpu -> o(%o1 : ...) m(%m1 : ...) l(%l1 : ...)
    hg.merge o(%o0, %o1 : ...) m(%m0, %m1 : ...) l(%l0, %l1 : ...) into(%o : ...)
    memref.dealloc ...
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::memref::MemRefDialect"];
}

def HGLowerRuntimeCalls : Pass<"hg-lower-runtime-calls", "::mlir::ModuleOp"> {
  let summary = "Lower segments and split points to calls into the hybridgen runtime C ABI";
  let description = [{
    `hg.segment` is inlined between calls to `hgrt_segment_begin(id)` and `hgrt_segment_end(id)`;
    `hg.split_point` becomes `hgrt_split_point(id)` clamped at 0. The callees are the C ABI of
    runtime/include/hybridgen/runtime/c_api.h.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::func::FuncDialect"];
}

def HGLowerAttentionToCPU : Pass<"hg-lower-attention-to-cpu", "::mlir::ModuleOp"> {
  let summary = "Lower CPU partial attention and merges to vectorized, OpenMP-parallel loops";
  let description = [{
    Flash-decoding on the CPU: each `hg.partial_attention ... on cpu` becomes a call to a generated
    kernel function that is parallel over (sequence, kv-head group, token chunk) with
    `scf.parallel`, runs an online softmax per chunk in vector-dialect code with f32 accumulation
    (all query heads of a GQA group together, so each K/V row is read once per kv-head), and merges
    chunk partials by log-sum-exp. `hg.merge` becomes vector loops. With `all-devices`, partials
    placed on other devices are lowered to CPU code too (the no-GPU fallback).
    Each `hg.prefill_attention` becomes a call to a chunked-prefill kernel, parallel over
    (sequence, kv head, query tile), with causal and window masks per query row.
  }];
  let options = [
    Option<"allDevices", "all-devices", "bool", /*default=*/"false",
           "Lower partials of every device to CPU code (no-GPU fallback)">,
    Option<"chunkTokens", "chunk-tokens", "int64_t", /*default=*/"0",
           "Tokens per parallel chunk (0 = 1024, or 4096 on the AMX path)">,
    Option<"amx", "amx", "bool", /*default=*/"false",
           "Also emit the AMX-BF16 path for bf16 KV, taken when hgrt_amx_available() says so">,
  ];
  let dependentDialects = [
    "::mlir::amx::AMXDialect", "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::math::MathDialect", "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect"
  ];
}

def HGSetTargetFeatures : Pass<"hg-set-target-features", "::mlir::ModuleOp"> {
  let summary = "Set the CPU and its features on every llvm.func (ahead-of-time code)";
  let description = [{
    Ahead-of-time objects otherwise default to baseline x86-64 without ymm/zmm registers. Sets
    `target_cpu` and `target_features` on each `llvm.func` from the options (default: the host).
  }];
  let options = [
    Option<"cpu", "cpu", "std::string", /*default=*/"\"host\"", "Target CPU name (or 'host')">,
    Option<"features", "features", "std::string", /*default=*/"\"\"",
           "Target features, e.g. '+avx512f,+avx512bw' (empty: those of the CPU)">,
  ];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

def HGExpandMath : Pass<"hg-expand-math"> {
  let summary = "Replace math.exp/tanh/... on f32 by polynomial approximations";
  let description = [{
    Without this, vector `math.exp` in the attention kernels becomes one scalar `expf` libm call
    per lane. Runs MLIR's polynomial approximation patterns (scalar and vector f32).

    Before: `%p = math.exp %x : vector<16xf32>`; after: only arith/vector ops (and math.fma).
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
                           "::mlir::vector::VectorDialect"];
}

def HGEmitCInterface : Pass<"hg-emit-c-interface", "::mlir::ModuleOp"> {
  let summary = "Mark every public func.func with llvm.emit_c_interface";
  let description = [{
    Callers (the driver, tests, Python) call compiled entry points as `_mlir_ciface_<name>` with
    memref descriptors passed by pointer; func-to-llvm emits those wrappers only for functions
    carrying `llvm.emit_c_interface`. Private functions (generated kernels, runtime callees) are
    left alone.
  }];
}

#endif // HYBRIDGEN_TRANSFORMS_PASSES_TD
