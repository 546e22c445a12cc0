//===- Pipelines.cpp - hg-cpu-pipeline: hg dialect to LLVM dialect on the CPU ===//
//
// One place fixes the order of the CPU lowering, shared by hybridgen-opt (textual pipeline) and
// the driver library (buildCPUPipeline). Order constraints worth knowing (docs in
// shared/TOOLCHAIN.md): polynomial math before any LLVM conversion, finalize-memref-to-llvm before
// convert-scf-to-cf (memref.alloca_scope from scf-to-openmp), ub-to-llvm after vector-to-llvm.
//
//===----------------------------------------------------------------------===//
#include "hybridgen/Transforms/Pipelines.h"
#include "hybridgen/Transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

namespace mlir::hybridgen {
#define GEN_PASS_DEF_HGEMITCINTERFACE
#include "hybridgen/Transforms/Passes.h.inc"
} // namespace mlir::hybridgen

using namespace mlir;
using namespace mlir::hybridgen;

namespace {

struct EmitCInterfacePass : hybridgen::impl::HGEmitCInterfaceBase<EmitCInterfacePass> {
  void runOnOperation() override {
    UnitAttr unit = UnitAttr::get(&getContext());
    for (auto fn : getOperation().getOps<func::FuncOp>())
      if (fn.isPublic() && !fn.isExternal())
        fn->setAttr("llvm.emit_c_interface", unit);
  }
};

struct CPUPipelineCLOptions : PassPipelineOptions<CPUPipelineCLOptions> {
  Option<bool> allDevices{*this, "all-devices",
                          llvm::cl::desc("Lower partials of every device to CPU code"),
                          llvm::cl::init(true)};
  Option<int64_t> chunkTokens{*this, "chunk-tokens",
                              llvm::cl::desc("Tokens per parallel chunk "
                                             "(0 = 1024, or 4096 on the AMX path)"),
                              llvm::cl::init(0)};
  Option<bool> amx{*this, "amx",
                   llvm::cl::desc("Also emit the AMX-BF16 path for bf16 KV (target needs AMX)"),
                   llvm::cl::init(false)};
  Option<int64_t> vectorBits{*this, "vector-bits",
                             llvm::cl::desc("Vector register width the kernels are sized for "
                                            "(512 AVX-512, 256 AVX2, 128 SSE)"),
                             llvm::cl::init(512)};
  Option<int64_t> vectorBits16{
      *this, "vector-bits-16bit-kv",
      llvm::cl::desc("Vector width of the bf16/f16 KV kernels (0: vector-bits)"),
      llvm::cl::init(0)};
  Option<int64_t> vectorBitsF32{
      *this, "vector-bits-f32-kv",
      llvm::cl::desc("f32 KV kernels planned as for a target of this width (0: vector-bits)"),
      llvm::cl::init(0)};
  Option<int64_t> farPrefetchBytes{
      *this, "far-prefetch-bytes",
      llvm::cl::desc("Far L2 prefetch distance of the dense vector kernel, bytes (0: off; "
                     "-1: the target's default, off here; the driver turns it on for znver4)"),
      llvm::cl::init(kTargetFarPrefetchBytes)};
  Option<bool> bf16Dot{*this, "bf16-dot",
                       llvm::cl::desc("bf16 KV kernels use AVX512-BF16 dot products "
                                      "(target needs avx512bf16 and avx512vl)"),
                       llvm::cl::init(false)};
  Option<bool> bf16DotRounded{
      *this, "bf16-dot-rounded",
      llvm::cl::desc("As bf16-dot (implied), with q and p rounded once to bf16 (half the "
                     "dot products)"),
      llvm::cl::init(false)};
  Option<bool> kTransposed{
      *this, "k-transposed",
      llvm::cl::desc("K pool pieces stored transposed, [head_dim][block_size]"),
      llvm::cl::init(false)};
  Option<bool> spreadPrefetch{
      *this, "spread-prefetch",
      llvm::cl::desc("With k-transposed: far V and next K prefetches in p.V, not the logits"),
      llvm::cl::init(false)};
  Option<bool> overlapPieces{
      *this, "overlap-pieces",
      llvm::cl::desc("With k-transposed: each piece's logits in one loop with the previous p.V"),
      llvm::cl::init(false)};
  Option<int64_t> spreadPrefetch16{
      *this, "spread-prefetch-16bit-kv",
      llvm::cl::desc("spread-prefetch for bf16/f16 KV (-1: as spread-prefetch, 0 off, 1 on)"),
      llvm::cl::init(-1)};
  Option<int64_t> overlapPieces16{
      *this, "overlap-pieces-16bit-kv",
      llvm::cl::desc("overlap-pieces for bf16/f16 KV (-1: as overlap-pieces, 0 off, 1 on)"),
      llvm::cl::init(-1)};
  Option<int64_t> overlapPvLag{
      *this, "overlap-pv-lag",
      llvm::cl::desc("With overlap-pieces: pieces p.V runs behind the logits (1 to 4)"),
      llvm::cl::init(1)};
  Option<bool> splatProbs{*this, "splat-probs",
                          llvm::cl::desc("p.V loads splatted probabilities, not broadcasts"),
                          llvm::cl::init(false)};
  Option<bool> aot{*this, "aot", llvm::cl::desc("Set target CPU and features on every llvm.func"),
                   llvm::cl::init(false)};
  Option<std::string> targetCpu{*this, "target-cpu", llvm::cl::desc("CPU for aot ('host')"),
                                llvm::cl::init("host")};
  Option<std::string> targetFeatures{*this, "target-features",
                                     llvm::cl::desc("Features for aot (empty: the CPU's)"),
                                     llvm::cl::init("")};
};

} // namespace

void mlir::hybridgen::buildCPUPipeline(OpPassManager &pm, const CPUPipelineOptions &opts) {
  // Built from factories, not from pipeline text, so that callers (the driver) need not have
  // registered any pass by name.
  pm.addPass(createHGSplitAttention());
  HGLowerAttentionToCPUOptions lowerOpts;
  lowerOpts.allDevices = opts.allDevices;
  lowerOpts.chunkTokens = opts.chunkTokens;
  lowerOpts.amx = opts.amx;
  lowerOpts.vectorBits = opts.vectorBits;
  lowerOpts.farPrefetchBytes = opts.farPrefetchBytes;
  lowerOpts.vectorBits16 = opts.vectorBits16;
  lowerOpts.vectorBitsF32 = opts.vectorBitsF32;
  lowerOpts.bf16Dot = opts.bf16Dot;
  lowerOpts.bf16DotRounded = opts.bf16DotRounded; // implies bf16-dot in the pass
  lowerOpts.kTransposed = opts.kTransposed;
  lowerOpts.spreadPrefetch = opts.spreadPrefetch;
  lowerOpts.spreadPrefetch16 = opts.spreadPrefetch16;
  lowerOpts.overlapPieces = opts.overlapPieces;
  lowerOpts.overlapPieces16 = opts.overlapPieces16;
  lowerOpts.overlapPvLag = opts.overlapPvLag;
  lowerOpts.splatProbs = opts.splatProbs;
  pm.addPass(createHGLowerAttentionToCPU(lowerOpts));
  pm.addPass(createHGLowerRuntimeCalls());
  // Dense model ops (lib/Models) that are linalg on memrefs (norms, activations, residuals: small
  // per decode step) become serial loops: an OpenMP region each would cost more in fork/join and
  // barriers than it saves. The bandwidth-bound matmuls are scf.parallel already.
  pm.addPass(createConvertLinalgToLoopsPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addPass(createHGExpandMath());
  pm.addPass(createHGEmitCInterface());
  // bf16 extf/truncf as integer shifts: no soft-float libcalls in JIT or AOT code.
  arith::ArithExpandOpsPassOptions expandOpts;
  expandOpts.includeBf16 = true;
  pm.addPass(arith::createArithExpandOpsPass(expandOpts));
  // n-D vector.print and any vector.transfer_* in user code become scf loops of 1-D ops.
  pm.addPass(createConvertVectorToSCFPass());
  pm.addPass(createConvertSCFToOpenMPPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createSCFToControlFlowPass());
  // Dot products become reduction trees, not chains of dependent adds.
  ConvertVectorToLLVMPassOptions vectorOpts;
  vectorOpts.reassociateFPReductions = true;
  vectorOpts.amx = opts.amx;
  vectorOpts.x86Vector = opts.bf16Dot || opts.bf16DotRounded;
  pm.addPass(createConvertVectorToLLVMPass(vectorOpts));
  pm.addPass(createUBToLLVMConversionPass());
  pm.addPass(createConvertOpenMPToLLVMPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createConvertIndexToLLVMPass());
  if (opts.gpuHost) {
    // After the memref/func conversions, as upstream's gpu-lower-to-nvvm-pipeline does: the
    // launches' memref operands are LLVM descriptors by then.
    pm.addPass(createGpuToLLVMConversionPass());
  }
  pm.addPass(createReconcileUnrealizedCastsPass());
  if (opts.aot) {
    HGSetTargetFeaturesOptions targetOpts;
    targetOpts.cpu = opts.targetCpu;
    targetOpts.features = opts.targetFeatures;
    pm.addPass(createHGSetTargetFeatures(targetOpts));
  }
}

void mlir::hybridgen::registerPipelines() {
  PassPipelineRegistration<CPUPipelineCLOptions>(
      "hg-cpu-pipeline",
      "Lower hg attention to the LLVM dialect for the CPU (OpenMP, vectorized, polynomial math)",
      [](OpPassManager &pm, const CPUPipelineCLOptions &cl) {
        CPUPipelineOptions opts;
        opts.allDevices = cl.allDevices;
        opts.chunkTokens = cl.chunkTokens;
        opts.amx = cl.amx;
        opts.vectorBits = cl.vectorBits;
        opts.farPrefetchBytes = cl.farPrefetchBytes;
        opts.vectorBits16 = cl.vectorBits16;
        opts.vectorBitsF32 = cl.vectorBitsF32;
        opts.bf16Dot = cl.bf16Dot;
        opts.bf16DotRounded = cl.bf16DotRounded;
        opts.kTransposed = cl.kTransposed;
        opts.spreadPrefetch = cl.spreadPrefetch;
        opts.spreadPrefetch16 = cl.spreadPrefetch16;
        opts.overlapPieces = cl.overlapPieces;
        opts.overlapPieces16 = cl.overlapPieces16;
        opts.overlapPvLag = cl.overlapPvLag;
        opts.splatProbs = cl.splatProbs;
        opts.aot = cl.aot;
        opts.targetCpu = cl.targetCpu;
        opts.targetFeatures = cl.targetFeatures;
        buildCPUPipeline(pm, opts);
      });
}
