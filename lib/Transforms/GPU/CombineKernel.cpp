//===- CombineKernel.cpp - log-sum-exp over the chunk partials of the GPU kernel ===//
//
// Grid (q_heads, batch). The block's threads share the chunks' max and sum (each thread a
// strided share, then warp shuffles and one slot per warp in shared memory); then one thread per
// output column reads the chunk outputs coalesced by column, kUnroll chunks per step so that
// several loads are in flight (a chunk at a time, the loop was a chain of L2 latencies: tens of
// microseconds over a few hundred chunks). Writes the normalized partial (o, m, l) of
// docs/interfaces.md, with the empty-range convention m = -inf, l = 0, o = 0 where no chunk
// holds a token.
//
//===----------------------------------------------------------------------===//
#include "GPUCodegen.h"

using namespace mlir;
using namespace mlir::hybridgen;
using namespace mlir::hybridgen::gpu_lowering;

namespace {
/// Chunks whose outputs a thread loads before it accumulates them.
constexpr int64_t kUnroll = 8;
constexpr int64_t kCombineWarps = kCombineThreads / kWarpSize;
} // namespace

SmallVector<Type> gpu_lowering::combineKernelArgTypes(MLIRContext *ctx,
                                                      const GpuKernelConfig &c) {
  int64_t dyn = ShapedType::kDynamic;
  Type f32 = Float32Type::get(ctx), index = IndexType::get(ctx);
  return {MemRefType::get({dyn, c.headDim}, f32), MemRefType::get({dyn}, f32),
          MemRefType::get({dyn}, f32),           index,
          MemRefType::get({dyn, c.qHeads, c.headDim}, f32),
          MemRefType::get({dyn, c.qHeads}, f32), MemRefType::get({dyn, c.qHeads}, f32)};
}

gpu::GPUFuncOp gpu_lowering::buildCombineKernel(gpu::GPUModuleOp module, StringRef name,
                                                const GpuKernelConfig &c, Location loc) {
  ImplicitLocOpBuilder b = ImplicitLocOpBuilder::atBlockEnd(loc, module.getBody());
  MLIRContext *ctx = b.getContext();
  auto workgroup = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  auto slotType = MemRefType::get({kCombineWarps}, b.getF32Type(), AffineMap(), workgroup);
  auto fn = gpu::GPUFuncOp::create(
      b, name, FunctionType::get(ctx, combineKernelArgTypes(ctx, c), TypeRange{}),
      TypeRange{slotType, slotType});
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr({int32_t(kCombineThreads), 1, 1}));
  b.setInsertionPointToStart(&fn.getBody().front());
  Emitter e{b};
  auto args = fn.getBody().front().getArguments();
  Value so = args[0], sm = args[1], sl = args[2], numChunks = args[3], o = args[4], m = args[5],
        l = args[6];
  Value slotMax = fn.getWorkgroupAttributions()[0], slotSum = fn.getWorkgroupAttributions()[1];

  Value h = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value s = gpu::BlockIdOp::create(b, gpu::Dimension::y);
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value warp = e.divi(tid, e.idx(kWarpSize)), lane = e.remi(tid, e.idx(kWarpSize));
  Value base = e.muli(e.addi(e.muli(s, e.idx(c.qHeads)), h), numChunks);
  Value threads = e.idx(kCombineThreads);

  // |v| combined over the block: xor shuffles within each warp, then the warps' slots.
  auto blockReduce = [&](Value v, Value slots, function_ref<Value(Value, Value)> op) {
    for (int64_t off = kWarpSize / 2; off >= 1; off /= 2)
      v = op(v, gpu::ShuffleOp::create(b, v, int32_t(off), int32_t(kWarpSize),
                                       gpu::ShuffleMode::XOR)
                    .getShuffleResult());
    e.ifThenElse(e.cmpi(arith::CmpIPredicate::eq, lane, e.idx(0)),
                 [&] { memref::StoreOp::create(b, v, slots, ValueRange{warp}); });
    gpu::BarrierOp::create(b);
    Value r = memref::LoadOp::create(b, slots, ValueRange{e.idx(0)});
    for (int64_t w = 1; w < kCombineWarps; ++w)
      r = op(r, memref::LoadOp::create(b, slots, ValueRange{e.idx(w)}));
    return r;
  };
  auto maxOp = [&](Value x, Value y) -> Value { return arith::MaxNumFOp::create(b, x, y); };
  auto addOp = [&](Value x, Value y) -> Value { return e.addf(x, y); };

  Value mLocal = e.loop(tid, numChunks, threads, {e.negInf()}, [&](Value ci, ValueRange a) {
    return SmallVector<Value>{
        maxOp(a[0], memref::LoadOp::create(b, sm, ValueRange{e.addi(base, ci)}))};
  })[0];
  Value mx = blockReduce(mLocal, slotMax, maxOp);
  // Chunks without tokens have m = -inf and weigh exp(-inf) = 0; if every chunk is empty the
  // reference max is 0 so that nothing computes -inf - -inf.
  Value ms = e.select(e.cmpf(arith::CmpFPredicate::OEQ, mx, e.negInf()), e.cf(0.0f), mx);
  Value lLocal = e.loop(tid, numChunks, threads, {e.cf(0.0f)}, [&](Value ci, ValueRange a) {
    Value row = e.addi(base, ci);
    Value w = e.exp(e.subf(memref::LoadOp::create(b, sm, ValueRange{row}), ms));
    return SmallVector<Value>{
        math::FmaOp::create(b, w, memref::LoadOp::create(b, sl, ValueRange{row}), a[0])
            .getResult()};
  })[0];
  Value total = blockReduce(lLocal, slotSum, addOp);
  Value nonEmpty = e.cmpf(arith::CmpFPredicate::OGT, total, e.cf(0.0f));
  Value inv = e.select(nonEmpty, e.divf(e.cf(1.0f), total), e.cf(0.0f));

  e.forEach(tid, e.idx(c.headDim), threads, [&](Value col) {
    Value acc = e.loop(e.idx(0), numChunks, e.idx(kUnroll), {e.cf(0.0f)}, [&](Value c0, ValueRange a) {
      // Chunks past the end read the last chunk (in bounds) with weight 0.
      Value last = e.subi(numChunks, e.idx(1));
      SmallVector<Value> ws, outs;
      for (int64_t u = 0; u < kUnroll; ++u) {
        Value ci = e.addi(c0, e.idx(u));
        Value row = e.addi(base, e.mini(ci, last));
        Value w = e.exp(e.subf(memref::LoadOp::create(b, sm, ValueRange{row}), ms));
        ws.push_back(e.select(e.cmpi(arith::CmpIPredicate::slt, ci, numChunks), w, e.cf(0.0f)));
        outs.push_back(memref::LoadOp::create(b, so, ValueRange{row, col}));
      }
      Value sum = a[0];
      for (int64_t u = 0; u < kUnroll; ++u)
        sum = math::FmaOp::create(b, ws[u], outs[u], sum);
      return SmallVector<Value>{sum};
    })[0];
    memref::StoreOp::create(b, e.mulf(acc, inv), o, ValueRange{s, h, col});
  });
  e.ifThenElse(e.cmpi(arith::CmpIPredicate::eq, tid, e.idx(0)), [&] {
    memref::StoreOp::create(b, mx, m, ValueRange{s, h});
    memref::StoreOp::create(b, total, l, ValueRange{s, h});
  });
  gpu::ReturnOp::create(b);
  return fn;
}
