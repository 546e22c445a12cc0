//===- LowerAttentionToCPU.cpp - hg-lower-attention-to-cpu --------------===//
//
// Replaces each CPU hg.partial_attention with a call to a generated kernel (one per distinct
// configuration, so a model's layers share code) and each hg.merge with loops. Inside an
// hg.segment the call is bracketed by hgrt_device_begin/end so the runtime can time the device.
//
//===----------------------------------------------------------------------===//
#include "../AttentionParams.h"
#include "CPUCodegen.h"
#include "PrefillKernel.h"

#include "hybridgen/Dialect/HG/HGOps.h"

#include "mlir/IR/SymbolTable.h"

namespace mlir::hybridgen {
#define GEN_PASS_DEF_HGLOWERATTENTIONTOCPU
#include "hybridgen/Transforms/Passes.h.inc"
} // namespace mlir::hybridgen

using namespace mlir;
using namespace mlir::hybridgen;
using namespace mlir::hybridgen::cpu;

namespace {

/// q of all heads lives as unrolled slices too (cpu::kMaxHeadDim, kMaxBlockSize bound the rest).
constexpr int64_t kMaxHeadElements = 16384;
/// Default tokens per parallel chunk: large enough to amortize each chunk's fixed cost, small
/// enough that one long sequence still spreads over every core. Measured here (Llama shapes, 16K
/// and 128K tokens): 1024 against 256 tokens is +5-8% of the roof for f32, +0-10% for the bf16
/// vector loop (16K at batch 1 aside, which the L3 holds), and on the AMX path the fixed
/// ~2-3 us per chunk (accumulator setup and write-out, the first rescale) falls from ~15% of a
/// chunk's time to ~4%. 2048 tokens measured no better than 1024 then, and 4096 for f32 is
/// within noise of 1024 (mean of medians 0.888 against 0.892, three interleaved runs).
constexpr int64_t kDefaultChunkTokens = 1024;
/// The AMX loop's default. Since its K and V are prefetched as the tile loads go (AmxKernel.cpp),
/// longer chunks gain: at 16K-128K tokens, batch 1 and 8, 1 and 2 threads (five interleaved runs,
/// 16K at batch 1 aside), 4096 tokens beat 1024 in nine of ten cases, mean of medians 0.829
/// against 0.793 of the roof; 2048 and 8192 measured like 4096. A chunk's first slots have no
/// earlier ones to prefetch them, and its accumulators are set up and written out once.
constexpr int64_t kDefaultAmxChunkTokens = 4096;

bool hasIdentityLayout(Value v) { return cast<MemRefType>(v.getType()).getLayout().isIdentity(); }

/// A choice with a 16-bit KV override (-1: as |all|, 0 off, 1 on) resolved for |kvType|.
bool forKv(Type kvType, bool all, int64_t only16) {
  return kvType.isF32() || only16 < 0 ? all : only16 == 1;
}

/// Whether a per-dtype vector width (0: the target's) is one the kernels take; else an error.
bool validWidth(ModuleOp module, StringRef option, int64_t bits) {
  if (bits == 0 || bits == 128 || bits == 256 || bits == 512)
    return true;
  module.emitError() << option << " must be 0, 128, 256 or 512, got " << bits;
  return false;
}

/// Whether a 16-bit KV override is -1 (as |base|), 0 or 1; else an error.
bool validOverride(ModuleOp module, StringRef option, StringRef base, int64_t value) {
  if (value >= -1 && value <= 1)
    return true;
  module.emitError() << option << " must be -1 (as " << base << "), 0 or 1, got " << value;
  return false;
}

struct LowerAttentionToCPUPass
    : hybridgen::impl::HGLowerAttentionToCPUBase<LowerAttentionToCPUPass> {
  using Base::Base;

  llvm::StringMap<func::FuncOp> kernels;

  FailureOr<KernelConfig> configFor(PartialAttentionOp op) {
    KernelConfig c;
    readAttentionParams(op, c);
    c.topK = op.getTopK().value_or(0);
    c.amx = amx;
    c.vectorBits = vectorBits;
    c.targetVectorBits = vectorBits;
    // 16-bit KV may be given narrower register tiles than the target's widest (the driver does
    // so on AMD Zen 4, where they measured faster: docs/cpu-path.md).
    if (vectorBits16 > 0 && !c.kvType.isF32())
      c.vectorBits = std::min<int64_t>(vectorBits16, vectorBits);
    // f32 KV kernels may be planned as for a narrower target, lanes and register count alike
    // (the driver: as for AVX2 on Zen 4 with K transposed and the pieces overlapped, where the
    // 16-register plan, logits in passes over the heads, read 0.92 of the roof against 0.83
    // with 256-bit tiles over 32 registers: docs/cpu-runs.md, "Zen 4 again").
    if (vectorBitsF32 > 0 && c.kvType.isF32())
      c.vectorBits = c.targetVectorBits = std::min<int64_t>(vectorBitsF32, vectorBits);
    // -1 (the target's default) is off here: the driver, which knows the CPU, resolves it.
    c.farPrefetchBytes = std::max<int64_t>(0, farPrefetchBytes);
    c.bf16Dot = bf16Dot || bf16DotRounded;
    c.bf16DotRounded = bf16DotRounded;
    c.kTransposed = kTransposed;
    c.spreadPrefetch = forKv(c.kvType, spreadPrefetch, spreadPrefetch16);
    c.overlapPieces = forKv(c.kvType, overlapPieces, overlapPieces16);
    c.pvLag = overlapPvLag;
    c.splatProbs = splatProbs;
    if (c.kTransposed && c.topK > 0)
      return op.emitOpError("k-transposed (K pool pieces stored [head_dim][block_size]) is not "
                            "supported by the top-k kernel");
    int64_t chunk = chunkTokens > 0     ? int64_t(chunkTokens)
                    : cpu::amxApplies(c) ? kDefaultAmxChunkTokens
                                         : kDefaultChunkTokens;
    // Whole blocks per chunk keep every chunk's rows contiguous in the pool.
    c.chunkTokens = std::max<int64_t>(1, (chunk + c.blockSize - 1) / c.blockSize) * c.blockSize;

    if (c.vectorBits != 128 && c.vectorBits != 256 && c.vectorBits != 512)
      return op.emitOpError("vector-bits must be 128, 256 or 512, got ") << c.vectorBits;
    if (c.headDim % 4 != 0 || c.headDim > kMaxHeadDim)
      return op.emitOpError("head_dim ")
             << c.headDim << " is not supported by the CPU lowering (needs a multiple of 4 up to "
             << kMaxHeadDim << ")";
    // The kernel keeps every head's scaled q and accumulators on each OpenMP thread's stack
    // (libomp's default worker stack is 4 MiB): 16 Ki floats of each at most (128 KiB in all;
    // Llama-3-405B's 128 heads of 128 are exactly that).
    if (c.qHeads * c.headDim > kMaxHeadElements)
      return op.emitOpError("q_heads x head_dim = ")
             << c.qHeads << " x " << c.headDim
             << " is not supported by the CPU lowering (at most " << kMaxHeadElements
             << " elements per sequence)";
    if (c.blockSize > kMaxBlockSize)
      return op.emitOpError("block size ")
             << c.blockSize << " is not supported by the CPU lowering (at most " << kMaxBlockSize
             << ")";
    if (failed(requireIdentityLayouts(op, op->getOperands(), "CPU")))
      return failure();
    return c;
  }

  func::FuncOp kernelFor(ModuleOp module, const KernelConfig &c, Location loc) {
    std::string key = c.mangle();
    auto it = kernels.find(key);
    if (it != kernels.end())
      return it->second;
    std::string name = (c.topK > 0 ? "__hg_cpu_sparse_" : "__hg_cpu_dense_") + key;
    // A user symbol of the same name would clash: uniquify by suffix.
    for (int i = 0; module.lookupSymbol(name); ++i)
      name = (c.topK > 0 ? "__hg_cpu_sparse_" : "__hg_cpu_dense_") + key + "_" + std::to_string(i);
    func::FuncOp fn = c.topK > 0 ? buildSparseKernel(module, name, c, loc)
                                 : buildDenseKernel(module, name, c, loc);
    kernels[key] = fn;
    return fn;
  }

  LogicalResult lowerPartial(ModuleOp module, PartialAttentionOp op) {
    FailureOr<KernelConfig> config = configFor(op);
    if (failed(config))
      return failure();
    func::FuncOp kernel = kernelFor(module, *config, op.getLoc());
    ImplicitLocOpBuilder b(op.getLoc(), op);
    SmallVector<Type> argTypes = kernelArgTypes(b.getContext(), *config);
    // No end means len; any bound >= len is clamped to it inside the kernel.
    Value end =
        op.getEnd() ? op.getEnd() : Value(arith::ConstantIndexOp::create(b, int64_t(1) << 62));
    SmallVector<Value> operands{op.getQ(),       op.getKPool(), op.getVPool(), op.getBlockTable(),
                                op.getSeqLens(), op.getBegin(), end,           op.getO(),
                                op.getM(),       op.getL()};
    for (auto [operand, type] : llvm::zip(operands, argTypes))
      if (operand.getType() != type)
        operand = memref::CastOp::create(b, type, operand);

    auto segment = op->getParentOfType<SegmentOp>();
    Value id, device;
    if (segment) {
      id = segment.buildIdValue(b, b.getLoc());
      device = arith::ConstantIntOp::create(b, static_cast<int64_t>(op.getDevice()), 32);
      auto begin = declareFunction(module, "hgrt_device_begin", {b.getI64Type(), b.getI32Type()});
      func::CallOp::create(b, begin, ValueRange{id, device});
    }
    func::CallOp::create(b, kernel, operands);
    if (segment) {
      auto endFn = declareFunction(module, "hgrt_device_end", {b.getI64Type(), b.getI32Type()});
      func::CallOp::create(b, endFn, ValueRange{id, device});
    }
    op.erase();
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    kernels.clear();
    // A huge chunk overflowed the rounding to whole blocks below (2^63 - 16 gave wrong
    // attention); negative values used to mean the default silently.
    if (chunkTokens < 0 || chunkTokens > kMaxChunkTokens) {
      module.emitError("chunk-tokens must be in [0, ")
          << kMaxChunkTokens << "] (0: the default), got " << int64_t(chunkTokens);
      return signalPassFailure();
    }
    if (!validWidth(module, "vector-bits-16bit-kv", vectorBits16) ||
        !validWidth(module, "vector-bits-f32-kv", vectorBitsF32) ||
        !validOverride(module, "spread-prefetch-16bit-kv", "spread-prefetch", spreadPrefetch16) ||
        !validOverride(module, "overlap-pieces-16bit-kv", "overlap-pieces", overlapPieces16))
      return signalPassFailure();
    if (overlapPvLag < 1 || overlapPvLag > kMaxOverlapPvLag) {
      module.emitError("overlap-pv-lag must be in [1, ")
          << kMaxOverlapPvLag << "], got " << int64_t(overlapPvLag);
      return signalPassFailure();
    }
    if (farPrefetchBytes < kTargetFarPrefetchBytes || farPrefetchBytes > kMaxFarPrefetchBytes) {
      module.emitError("far-prefetch-bytes must be -1 (the target's default) or in [0, ")
          << kMaxFarPrefetchBytes << "] (0: off), got " << int64_t(farPrefetchBytes);
      return signalPassFailure();
    }
    SmallVector<PartialAttentionOp> partials;
    SmallVector<MergeOp> merges;
    module.walk([&](PartialAttentionOp op) {
      if (op.getDevice() == Device::cpu || allDevices)
        partials.push_back(op);
    });
    module.walk([&](MergeOp op) { merges.push_back(op); });

    bool failedAny = false;
    for (PartialAttentionOp op : partials)
      failedAny |= failed(lowerPartial(module, op));
    SmallVector<PrefillAttentionOp> prefills;
    module.walk([&](PrefillAttentionOp op) { prefills.push_back(op); });
    for (PrefillAttentionOp op : prefills)
      failedAny |= failed(lowerPrefillAttention(module, op, kernels, kTransposed));
    for (MergeOp op : merges) {
      if (!hasIdentityLayout(op.getOut())) {
        op.emitOpError("the CPU lowering needs an identity (row-major) output layout");
        failedAny = true;
        continue;
      }
      ImplicitLocOpBuilder b(op.getLoc(), op);
      emitMerge(b, op.getPartialO(), op.getPartialM(), op.getPartialL(), op.getOut());
      op.erase();
    }
    if (failedAny)
      signalPassFailure();
  }
};

} // namespace

func::FuncOp cpu::declareFunction(ModuleOp module, StringRef name, TypeRange inputs,
                                  TypeRange results) {
  if (auto existing = module.lookupSymbol<func::FuncOp>(name))
    return existing;
  OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
  auto fn = func::FuncOp::create(b, module.getLoc(), name, b.getFunctionType(inputs, results));
  fn.setPrivate();
  return fn;
}
