//===- HostLaunch.cpp - host side of one GPU partial: copies, chunk sizing, launches ===//
//
// Everything goes on one stream, in order, each op depending on the previous one's token only
// (gpu-to-llvm cannot lower a launch with several dependencies): device buffers, q / block table
// / lengths to the device, the partial and combine kernels; then, after the caller's CPU work,
// (o, m, l) back to the host buffers and the device buffers freed, and the caller waits.
//
//===----------------------------------------------------------------------===//
#include "GPUCodegen.h"

using namespace mlir;
using namespace mlir::hybridgen;
using namespace mlir::hybridgen::gpu_lowering;

namespace {

/// Whole waves of resident blocks the chunk count may aim at (see chunkCount).
constexpr int64_t kMaxWaves = 4;

struct StreamBuilder {
  ImplicitLocOpBuilder &b;
  Value token;

  Type tokenType() { return gpu::AsyncTokenType::get(b.getContext()); }

  /// A device buffer of |type| (dynamic sizes |sizes|).
  Value alloc(MemRefType type, ValueRange sizes) {
    auto op = gpu::AllocOp::create(b, type, tokenType(), ValueRange{token}, sizes, ValueRange{},
                                   /*hostShared=*/false);
    token = op.getAsyncToken();
    return op.getMemref();
  }
  /// A device buffer shaped like host buffer |host| (the same type, so gpu.memcpy accepts it).
  Value allocLike(Value host) {
    auto type = cast<MemRefType>(host.getType());
    SmallVector<Value> sizes;
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (type.isDynamicDim(d))
        sizes.push_back(memref::DimOp::create(b, host, d));
    return alloc(MemRefType::get(type.getShape(), type.getElementType()), sizes);
  }
  void copy(Value dst, Value src) {
    token = gpu::MemcpyOp::create(b, tokenType(), ValueRange{token}, dst, src).getAsyncToken();
  }
  void free(Value buffer) {
    token = gpu::DeallocOp::create(b, tokenType(), ValueRange{token}, buffer).getAsyncToken();
  }
  void launch(gpu::GPUFuncOp kernel, gpu::KernelDim3 grid, gpu::KernelDim3 block,
              ValueRange args) {
    auto op = gpu::LaunchFuncOp::create(b, kernel, grid, block, /*dynamicSharedMemorySize=*/Value(),
                                        args, tokenType(), ValueRange{token});
    token = op.getAsyncToken();
  }
};

/// The chunk count, from the host's copy of the lengths. The blocks of a launch run in waves of
/// smCount x residentBlocks() slots and all take about as long, so a grid of 1.1 waves takes two:
/// of the counts that fill 1..kMaxWaves waves the one whose last wave is fullest wins (the
/// fewest chunks on a tie), then no chunk under minChunkTokens, and at least one.
Value chunkCount(Emitter &e, const GpuKernelConfig &c, Value batch, Value maxSpan, int64_t smCount,
                 int64_t minChunkTokens) {
  int64_t slots = std::max<int64_t>(smCount, 1) * c.residentBlocks();
  Value work = e.muli(batch, e.idx(c.kvHeads));
  Value best, bestBlocks, bestWaves;
  for (int64_t k = 1; k <= kMaxWaves; ++k) {
    Value chunks = e.maxi(e.divi(e.idx(k * slots), work), e.idx(1));
    Value blocks = e.muli(chunks, work);
    Value waves = e.ceilDiv(blocks, slots);
    if (k == 1) {
      best = chunks, bestBlocks = blocks, bestWaves = waves;
      continue;
    }
    // blocks / waves > bestBlocks / bestWaves: this count fills its waves better.
    Value better = e.cmpi(arith::CmpIPredicate::sgt, e.muli(blocks, bestWaves),
                          e.muli(bestBlocks, waves));
    best = e.select(better, chunks, best);
    bestBlocks = e.select(better, blocks, bestBlocks);
    bestWaves = e.select(better, waves, bestWaves);
  }
  Value cap = e.ceilDiv(maxSpan, std::max<int64_t>(minChunkTokens, 1));
  return e.maxi(e.mini(best, cap), e.idx(1));
}

/// |v| cast to |type| where they differ (static host shapes to the kernel's dynamic ones).
Value castTo(ImplicitLocOpBuilder &b, Value v, Type type) {
  return v.getType() == type ? v : memref::CastOp::create(b, type, v).getResult();
}

} // namespace

Value gpu_lowering::partialEnd(ImplicitLocOpBuilder &b, PartialAttentionOp op) {
  // No end means len; larger bounds are clamped to len in the kernel.
  return op.getEnd() ? Value(op.getEnd())
                     : Value(arith::ConstantIndexOp::create(b, int64_t(1) << 62));
}

Value gpu_lowering::emitMaxSpan(ImplicitLocOpBuilder &b, PartialAttentionOp op,
                                const GpuKernelConfig &c) {
  Emitter e{b};
  Value begin = op.getBegin(), end = partialEnd(b, op);
  Value batch = memref::DimOp::create(b, op.getSeqLens(), 0);
  Value capacity = e.muli(memref::DimOp::create(b, op.getBlockTable(), 1), e.idx(c.blockSize));
  return e.loop(e.idx(0), batch, e.idx(1), {e.idx(0)}, [&](Value s, ValueRange acc) {
    std::pair<Value, Value> r = clampedRange(e, c, op.getSeqLens(), capacity, s, begin, end);
    return SmallVector<Value>{e.maxi(acc[0], e.subi(r.second, r.first))};
  })[0];
}

DeviceLaunch gpu_lowering::emitDeviceLaunch(ImplicitLocOpBuilder &b, PartialAttentionOp op,
                                            const GpuKernelConfig &c, const GpuKernels &kernels,
                                            Value kAddr, Value vAddr, Value maxSpan,
                                            int64_t smCount, int64_t minChunkTokens) {
  Emitter e{b};
  Value begin = op.getBegin();
  Value end = partialEnd(b, op);
  Value batch = memref::DimOp::create(b, op.getQ(), 0);

  Value chunks = chunkCount(e, c, batch, maxSpan, smCount, minChunkTokens);
  // Whole loop steps per chunk, so only a chunk's last step has masked rows.
  Value chunkTokens = e.muli(e.ceilDiv(e.divi(e.addi(maxSpan, e.subi(chunks, e.idx(1))), chunks),
                                       c.rowsPerStep()),
                             e.idx(c.rowsPerStep()));
  chunkTokens = e.maxi(chunkTokens, e.idx(c.rowsPerStep()));

  StreamBuilder st{b, gpu::WaitOp::create(b, gpu::AsyncTokenType::get(b.getContext()),
                                          ValueRange{})
                          .getAsyncToken()};
  Value qd = st.allocLike(op.getQ());
  st.copy(qd, op.getQ());
  Value tableD = st.allocLike(op.getBlockTable());
  st.copy(tableD, op.getBlockTable());
  Value lensD = st.allocLike(op.getSeqLens());
  st.copy(lensD, op.getSeqLens());
  Value od = st.allocLike(op.getO()), md = st.allocLike(op.getM()), ld = st.allocLike(op.getL());
  Value rows = e.muli(e.muli(batch, e.idx(c.qHeads)), chunks);
  Value so = st.alloc(MemRefType::get({ShapedType::kDynamic, c.headDim}, e.f32()), rows);
  auto statType = MemRefType::get({ShapedType::kDynamic}, e.f32());
  Value sm = st.alloc(statType, rows), sl = st.alloc(statType, rows);

  SmallVector<Type> pTypes = partialKernelArgTypes(b.getContext(), c);
  Value numBlocks = memref::DimOp::create(b, op.getKPool(), 0);
  SmallVector<Value> pArgs{castTo(b, qd, pTypes[0]),     kAddr, vAddr, numBlocks,
                           castTo(b, tableD, pTypes[4]), castTo(b, lensD, pTypes[5]),
                           begin,                        end,   chunkTokens,
                           so,                           sm,    sl};
  st.launch(kernels.partial, {chunks, e.idx(c.kvHeads), batch},
            {e.idx(kWarps * kWarpSize), e.idx(1), e.idx(1)}, pArgs);
  SmallVector<Type> cTypes = combineKernelArgTypes(b.getContext(), c);
  SmallVector<Value> cArgs{so, sm, sl, chunks, castTo(b, od, cTypes[4]), castTo(b, md, cTypes[5]),
                           castTo(b, ld, cTypes[6])};
  st.launch(kernels.combine, {e.idx(c.qHeads), batch, e.idx(1)},
            {e.idx(kCombineThreads), e.idx(1), e.idx(1)}, cArgs);

  DeviceLaunch launch;
  launch.token = st.token;
  launch.o = od;
  launch.m = md;
  launch.l = ld;
  launch.buffers = {qd, tableD, lensD, od, md, ld, so, sm, sl};
  return launch;
}

Value gpu_lowering::emitDeviceFinish(ImplicitLocOpBuilder &b, PartialAttentionOp op,
                                     const DeviceLaunch &launch) {
  StreamBuilder st{b, launch.token};
  // Only the normalized partial crosses back. A copy into pageable host memory returns only
  // when it is done, and cuMemFree waits for the device: both come after the host's own work.
  st.copy(op.getO(), launch.o);
  st.copy(op.getM(), launch.m);
  st.copy(op.getL(), launch.l);
  for (Value buffer : launch.buffers)
    st.free(buffer);
  return st.token;
}
