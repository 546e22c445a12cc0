//===- LowerAttentionToGPU.cpp - hg-lower-attention-to-gpu: kernels and host orchestration ===//
//
// Each GPU hg.partial_attention becomes, under `scf.if gpu usable`, the asynchronous device part
// of HostLaunch.cpp; the CPU partial of the same split (the one ending where the GPU's begins) is
// moved between the launch and the wait, so the host threads work while the kernels run. The
// else branch is the documented no-GPU fallback: the CPU partial takes every token and the GPU
// partial is empty, or, without a CPU partner, the GPU partial runs as a CPU partial. The CPU
// partials are left as hg ops for hg-lower-attention-to-cpu.
//
//===----------------------------------------------------------------------===//
#include "../AttentionParams.h"
#include "GPUCodegen.h"

#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::hybridgen {
#define GEN_PASS_DEF_HGLOWERATTENTIONTOGPU
#include "hybridgen/Transforms/Passes.h.inc"
} // namespace mlir::hybridgen

using namespace mlir;
using namespace mlir::hybridgen;
using namespace mlir::hybridgen::gpu_lowering;

/// The gpu.module every generated kernel goes into.
static constexpr llvm::StringLiteral kKernelModule = "hg_gpu_kernels";

func::FuncOp gpu_lowering::declareExternal(ModuleOp module, StringRef name, TypeRange inputs,
                                           TypeRange results) {
  if (auto existing = module.lookupSymbol<func::FuncOp>(name))
    return existing;
  OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
  auto fn = func::FuncOp::create(b, module.getLoc(), name, b.getFunctionType(inputs, results));
  fn.setPrivate();
  return fn;
}

namespace {


/// The CPU partial of the same split as |gpuOp|: an earlier op of its block over the same
/// buffers whose range ends where |gpuOp|'s begins, with nothing in between that could touch
/// memory (only allocations and constants), so it may move past them.
PartialAttentionOp findCpuPartner(PartialAttentionOp gpuOp) {
  for (Operation *op = gpuOp->getPrevNode(); op; op = op->getPrevNode()) {
    if (auto cpuOp = dyn_cast<PartialAttentionOp>(op)) {
      bool same = cpuOp.getDevice() == Device::cpu && cpuOp.getEnd() == gpuOp.getBegin() &&
                  cpuOp.getQ() == gpuOp.getQ() && cpuOp.getKPool() == gpuOp.getKPool() &&
                  cpuOp.getVPool() == gpuOp.getVPool() &&
                  cpuOp.getBlockTable() == gpuOp.getBlockTable() &&
                  cpuOp.getSeqLens() == gpuOp.getSeqLens();
      return same ? cpuOp : PartialAttentionOp();
    }
    if (!isMemoryEffectFree(op) && !isa<memref::AllocOp>(op))
      return {};
  }
  return {};
}

struct LowerAttentionToGPUPass
    : hybridgen::impl::HGLowerAttentionToGPUBase<LowerAttentionToGPUPass> {
  using Base::Base;

  llvm::StringMap<GpuKernels> kernels;
  gpu::GPUModuleOp kernelModule;

  FailureOr<GpuKernelConfig> configFor(PartialAttentionOp op) {
    if (op.getTopK())
      return op.emitOpError("top_k (sparse mode) is CPU-only; the GPU lowering runs dense "
                            "attention only");
    GpuKernelConfig c;
    readAttentionParams(op, c);
    for (int64_t d : {c.qHeads, c.kvHeads, c.blockSize, c.headDim})
      if (ShapedType::isDynamic(d))
        return op.emitOpError("the GPU lowering needs static heads, block size and head_dim");
    std::string why = unsupportedReason(c);
    if (!why.empty())
      return op.emitOpError(why);
    c.tuning = {unroll, piecesPerLane, asyncStages, residentBlocks};
    if (std::string bad = tuningError(c); !bad.empty())
      return op.emitOpError(bad);
    if (failed(requireIdentityLayouts(op, op->getOperands(), "GPU")))
      return failure();
    return c;
  }

  GpuKernels kernelsFor(ModuleOp module, const GpuKernelConfig &c, Location loc) {
    std::string key = c.mangle();
    auto it = kernels.find(key);
    if (it != kernels.end())
      return it->second;
    if (!kernelModule) {
      kernelModule = module.lookupSymbol<gpu::GPUModuleOp>(kKernelModule);
      if (!kernelModule) {
        OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
        kernelModule = gpu::GPUModuleOp::create(b, loc, kKernelModule);
      }
    }
    SymbolTable symbols(kernelModule);
    auto unique = [&](std::string name) {
      std::string base = name;
      for (int i = 0; symbols.lookup(name); ++i)
        name = base + "_" + std::to_string(i);
      return name;
    };
    GpuKernels k;
    k.partial = buildPartialKernel(kernelModule, unique("__hg_gpu_partial_" + key), c, loc);
    k.combine = buildCombineKernel(kernelModule, unique("__hg_gpu_combine_" + key), c, loc);
    kernels[key] = k;
    return k;
  }

  /// The host address of |buffer|'s first element as an !llvm.ptr.
  Value hostPointer(ImplicitLocOpBuilder &b, Value buffer) {
    auto ptrType = LLVM::LLVMPointerType::get(b.getContext());
    auto meta = memref::ExtractStridedMetadataOp::create(b, buffer);
    Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, buffer);
    Type elt = cast<MemRefType>(buffer.getType()).getElementType();
    Emitter e{b};
    Value addr = e.addi(base, e.muli(meta.getOffset(), e.idx(elt.getIntOrFloatBitWidth() / 8)));
    return LLVM::IntToPtrOp::create(
        b, ptrType, arith::IndexCastOp::create(b, b.getI64Type(), addr).getResult());
  }

  /// The device address the runtime gives host pool |pool| (0 when it has none), as i64.
  Value deviceAlias(ImplicitLocOpBuilder &b, ModuleOp module, Value pool) {
    auto ptrType = LLVM::LLVMPointerType::get(b.getContext());
    func::FuncOp alias = declareExternal(module, "hgrt_gpu_alias", {ptrType}, {ptrType});
    Value devPtr = func::CallOp::create(b, alias, ValueRange{hostPointer(b, pool)}).getResult(0);
    return LLVM::PtrToIntOp::create(b, b.getI64Type(), devPtr);
  }

  /// hgrt_gpu_check_batch(table, lens, batch, max_blocks, block_size, begin) != 0: the runtime
  /// refuses lengths beyond the table and block ids outside the pool (or not on the device)
  /// before anything is launched; the CPU path then runs, which clamps to the table itself.
  Value batchChecked(ImplicitLocOpBuilder &b, ModuleOp module, PartialAttentionOp op,
                     const GpuKernelConfig &c) {
    auto ptrType = LLVM::LLVMPointerType::get(b.getContext());
    Type i64 = b.getI64Type();
    func::FuncOp check = declareExternal(module, "hgrt_gpu_check_batch",
                                         {ptrType, ptrType, i64, i64, i64, i64}, {b.getI32Type()});
    auto toI64 = [&](Value index) {
      return arith::IndexCastOp::create(b, i64, index).getResult();
    };
    Value batch = memref::DimOp::create(b, op.getSeqLens(), 0);
    Value maxBlocks = memref::DimOp::create(b, op.getBlockTable(), 1);
    Value ok = func::CallOp::create(
                   b, check,
                   ValueRange{hostPointer(b, op.getBlockTable()), hostPointer(b, op.getSeqLens()),
                              toI64(batch), toI64(maxBlocks),
                              arith::ConstantIntOp::create(b, c.blockSize, 64),
                              toI64(op.getBegin())})
                   .getResult(0);
    return arith::CmpIOp::create(b, arith::CmpIPredicate::ne, ok,
                                 arith::ConstantIntOp::create(b, 0, 32));
  }

  /// Writes the empty partial (m = -inf, l = 0, o = 0) into |op|'s outputs on the host.
  void emitEmptyPartial(ImplicitLocOpBuilder &b, PartialAttentionOp op) {
    Emitter e{b};
    Value batch = memref::DimOp::create(b, op.getO(), 0);
    auto oType = cast<MemRefType>(op.getO().getType());
    e.forEach(e.idx(0), batch, e.idx(1), [&](Value s) {
      e.forEach(e.idx(0), e.idx(oType.getDimSize(1)), e.idx(1), [&](Value h) {
        memref::StoreOp::create(b, e.negInf(), op.getM(), ValueRange{s, h});
        memref::StoreOp::create(b, e.cf(0.0f), op.getL(), ValueRange{s, h});
        e.forEach(e.idx(0), e.idx(oType.getDimSize(2)), e.idx(1), [&](Value j) {
          memref::StoreOp::create(b, e.cf(0.0f), op.getO(), ValueRange{s, h, j});
        });
      });
    });
  }

  LogicalResult lower(ModuleOp module, PartialAttentionOp op) {
    FailureOr<GpuKernelConfig> config = configFor(op);
    if (failed(config))
      return failure();
    GpuKernels k = kernelsFor(module, *config, op.getLoc());
    PartialAttentionOp partner = findCpuPartner(op);

    ImplicitLocOpBuilder b(op.getLoc(), op);
    Emitter e{b};
    func::FuncOp available = declareExternal(module, "hgrt_gpu_available", {}, {b.getI32Type()});
    Value avail = func::CallOp::create(b, available, ValueRange{}).getResult(0);
    Value kAddr = deviceAlias(b, module, op.getKPool());
    Value vAddr = deviceAlias(b, module, op.getVPool());
    Value zero64 = arith::ConstantIntOp::create(b, 0, 64);
    Value usable = arith::AndIOp::create(
        b,
        arith::CmpIOp::create(b, arith::CmpIPredicate::ne, avail,
                              arith::ConstantIntOp::create(b, 0, 32)),
        arith::AndIOp::create(b, e.cmpi(arith::CmpIPredicate::ne, kAddr, zero64),
                              e.cmpi(arith::CmpIPredicate::ne, vAddr, zero64)));
    // No tokens on the GPU side (e.g. the scheduler gave the CPU everything): the fallback
    // branch writes the same result without a stream, allocations or launches.
    Value maxSpan = emitMaxSpan(b, op, *config);
    usable = arith::AndIOp::create(b, usable,
                                   e.cmpi(arith::CmpIPredicate::sgt, maxSpan, e.idx(0)));
    // Only asked when the GPU is there (it would print a reason for a batch the CPU runs).
    auto checked = scf::IfOp::create(b, TypeRange{b.getI1Type()}, usable, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(checked.thenBlock());
      scf::YieldOp::create(b, batchChecked(b, module, op, *config));
      b.setInsertionPointToStart(checked.elseBlock());
      scf::YieldOp::create(b, usable);
    }
    usable = checked.getResult(0);

    auto segment = op->getParentOfType<SegmentOp>();
    auto deviceMark = [&](StringRef fnName) {
      if (!segment)
        return;
      func::FuncOp fn = declareExternal(module, fnName, {b.getI64Type(), b.getI32Type()});
      func::CallOp::create(b, fn,
                           ValueRange{segment.buildIdValue(b, b.getLoc()),
                                      arith::ConstantIntOp::create(b, 1, 32)});
    };

    auto ifOp = scf::IfOp::create(b, usable, /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
      deviceMark("hgrt_device_begin");
      DeviceLaunch launch =
          emitDeviceLaunch(b, op, *config, k, kAddr, vAddr, maxSpan, smCount, minChunkTokens);
      // The host's share runs while the kernels do.
      if (partner)
        partner->moveBefore(b.getInsertionBlock(), b.getInsertionPoint());
      Value token = emitDeviceFinish(b, op, launch);
      gpu::WaitOp::create(b, Type(), ValueRange{token});
      deviceMark("hgrt_device_end");

      b.setInsertionPoint(ifOp.elseBlock()->getTerminator());
      if (partner) {
        // The split clamped to the CPU: [0, len) there, nothing on the GPU side.
        auto all = cast<PartialAttentionOp>(b.clone(*partner));
        all.getEndMutable().clear();
        emitEmptyPartial(b, op);
      } else {
        auto onCpu = cast<PartialAttentionOp>(b.clone(*op));
        onCpu.setDevice(Device::cpu);
      }
    }
    op.erase();
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    kernels.clear();
    kernelModule = {};
    SmallVector<PartialAttentionOp> gpuOps;
    module.walk([&](PartialAttentionOp op) {
      if (op.getDevice() == Device::gpu)
        gpuOps.push_back(op);
    });
    if (gpuOps.empty())
      return;
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), UnitAttr::get(&getContext()));
    bool failedAny = false;
    for (PartialAttentionOp op : gpuOps)
      failedAny |= failed(lower(module, op));
    if (failedAny)
      signalPassFailure();
  }
};

} // namespace
