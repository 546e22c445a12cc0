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
    Option<"vectorBits", "vector-bits", "int64_t", /*default=*/"512",
           "Vector register width of the target (512: AVX-512, 256: AVX2, 128: SSE); sizes "
           "the kernels' register tiles">,
    Option<"vectorBits16", "vector-bits-16bit-kv", "int64_t", /*default=*/"0",
           "Vector width for the kernels of bf16/f16 KV (0: vector-bits; at most vector-bits)">,
    Option<"vectorBitsF32", "vector-bits-f32-kv", "int64_t", /*default=*/"0",
           "The kernels of f32 KV planned as for a target of this vector width, its lanes and "
           "its register count (0: vector-bits; at most vector-bits)">,
    Option<"farPrefetchBytes", "far-prefetch-bytes", "int64_t", /*default=*/"-1",
           "How far ahead of the piece in use the dense vector kernel asks for K and V lines "
           "into L2, in bytes of one K stream (0: off; whole pieces, at least one; -1: the "
           "target's default, which the driver resolves by CPU and the pass alone takes as off)">,
    Option<"bf16Dot", "bf16-dot", "bool", /*default=*/"false",
           "The target has AVX512-BF16: bf16 KV kernels compute with bf16 dot products "
           "(vdpbf16ps; q and p as hi + lo bf16 halves)">,
    Option<"bf16DotRounded", "bf16-dot-rounded", "bool", /*default=*/"false",
           "As bf16-dot, with q and p rounded once to bf16 (half the dot products, relative "
           "error ~1e-3, as a bf16 model's attention)">,
    Option<"kTransposed", "k-transposed", "bool", /*default=*/"false",
           "The K pools hold each (block, kv head) piece transposed, [head_dim][block_size] "
           "(V stays row-major): the dense kernel computes the logits column by column, without "
           "sum trees. The sparse kernel and the GPU lowering do not support it">,
    Option<"spreadPrefetch", "spread-prefetch", "bool", /*default=*/"false",
           "With k-transposed and the far prefetch: ask for the far V rows in p.V and for the "
           "next piece's K rows into L1 there, instead of all in the logits (the driver turns it "
           "on for znver4)">,
    Option<"spreadPrefetch16", "spread-prefetch-16bit-kv", "int64_t", /*default=*/"-1",
           "spread-prefetch for the kernels of bf16/f16 KV (-1: as spread-prefetch, 0 off, 1 "
           "on; the driver sets it on znver4, where f32 KV takes the overlapped pieces)">,
    Option<"overlapPieces", "overlap-pieces", "bool", /*default=*/"false",
           "With k-transposed: each piece's logits are computed in one loop with the previous "
           "piece's p.V, so K and V stream together (where spread-prefetch does not apply; the "
           "driver turns it on except on znver4)">,
    Option<"overlapPieces16", "overlap-pieces-16bit-kv", "int64_t", /*default=*/"-1",
           "overlap-pieces for the kernels of bf16/f16 KV (-1: as overlap-pieces, 0 off, 1 "
           "on; the driver leaves it at -1)">,
    Option<"overlapPvLag", "overlap-pv-lag", "int64_t", /*default=*/"1",
           "With overlap-pieces: how many pieces p.V runs behind the logits (1 to 4; at 2 no "
           "overlapped step reads the probabilities of the softmax just before it)">,
    Option<"splatProbs", "splat-probs", "bool", /*default=*/"false",
           "The dense kernel's p.V loads each probability as a copy splatted across the lanes "
           "(written once per piece by the softmax) instead of broadcasting it at every use; "
           "not with the bf16 dot products">,
  ];
  let dependentDialects = [
    "::mlir::amx::AMXDialect", "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::math::MathDialect", "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect", "::mlir::x86vector::X86VectorDialect"
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

def HGLowerAttentionToGPU : Pass<"hg-lower-attention-to-gpu", "::mlir::ModuleOp"> {
  let summary = "Lower GPU partial attention to split-KV flash-decoding gpu.func kernels";
  let description = [{
    Each `hg.partial_attention ... on gpu` becomes host code that, when `hgrt_gpu_available()`
    says so and the runtime aliases both KV pools on the device (`hgrt_gpu_alias`), copies q, the
    block table and the lengths to the device, launches two kernels of the `gpu.module`
    `@hg_gpu_kernels` on one stream and copies only (o, m, l) back:
    - `__hg_gpu_partial_*`: grid (chunks, kv_heads, batch); a block runs an online softmax over one
      token chunk for all query heads of a GQA group (each K/V row read once), 16-byte loads of
      K/V rows through the block table, warp-shuffle dot products; writes the chunk partial.
    - `__hg_gpu_combine_*`: grid (q_heads, batch); log-sum-exp over the chunk partials.
    The chunk count is sized at run time from batch, kv heads and the longest range so that one
    sequence fills `sm-count` multiprocessors. A CPU partial over the tokens just before the GPU's
    (the other half of a split) runs on the host between the launch and the wait. Where the GPU
    is not usable the split is clamped: the CPU partial takes every token and the GPU partial is
    empty (m = -inf, l = 0, o = 0); a GPU partial with no CPU partner runs as a CPU partial then.

    Before: `hg.partial_attention ... range [%s, len) on gpu -> o(%o) m(%m) l(%l) {...}`
    After (sketch):
    ```mlir
    scf.if %gpu_ok {
      %t0 = gpu.wait async
      %qd, %t1 = gpu.alloc async [%t0] () : memref<1x8x64xf32>
      ...
      %t5 = gpu.launch_func async [%t4] @hg_gpu_kernels::@__hg_gpu_partial_... blocks in (%chunks,
            %c2, %batch) threads in (%c128, %c1, %c1) args(...)
      %t6 = gpu.launch_func async [%t5] @hg_gpu_kernels::@__hg_gpu_combine_... ...
      ...  // the CPU partial of the split
      gpu.wait [%t9]
    } else { ... CPU fallback ... }
    ```
  }];
  let options = [
    Option<"smCount", "sm-count", "int64_t", /*default=*/"132",
           "Multiprocessors to fill (132: H200); sizes the chunk count with batch and kv heads">,
    Option<"minChunkTokens", "min-chunk-tokens", "int64_t", /*default=*/"256",
           "Fewest tokens a chunk gets (more chunks than that buys only combine work)">,
    Option<"unroll", "unroll", "int64_t", /*default=*/"0",
           "Row groups per warp step of the partial kernel (0: 4, or 2 for GQA groups of 8)">,
    Option<"piecesPerLane", "pieces-per-lane", "int64_t", /*default=*/"1",
           "16-byte pieces of a K/V row each lane loads (power of two, clamped to the row)">,
    Option<"asyncStages", "async-stages", "int64_t", /*default=*/"0",
           "Stages of a cp.async shared-memory ring (0: next step's loads in registers; 2..8)">,
    Option<"residentBlocks", "resident-blocks", "int64_t", /*default=*/"0",
           "Blocks per multiprocessor the kernel is built and the grid sized for (0: 2; 1..8)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect", "::mlir::gpu::GPUDialect",
    "::mlir::LLVM::LLVMDialect", "::mlir::math::MathDialect", "::mlir::memref::MemRefDialect",
    "::mlir::NVVM::NVVMDialect", "::mlir::scf::SCFDialect"
  ];
}

#endif // HYBRIDGEN_TRANSFORMS_PASSES_TD
