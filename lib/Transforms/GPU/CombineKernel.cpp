//===- CombineKernel.cpp - log-sum-exp over the chunk partials of the GPU kernel ===//
//
// Grid (q_heads, batch), one thread per output column. Every thread reads the chunks' (m, l)
// (a few hundred bytes, cached), so no barrier is needed; the chunk outputs are read coalesced
// by column. Writes the normalized partial (o, m, l) of docs/interfaces.md, with the empty-range
// convention m = -inf, l = 0, o = 0 where no chunk holds a token.
//
//===----------------------------------------------------------------------===//
#include "GPUCodegen.h"

using namespace mlir;
using namespace mlir::hybridgen;
using namespace mlir::hybridgen::gpu_lowering;

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
  auto fn = gpu::GPUFuncOp::create(
      b, name, FunctionType::get(ctx, combineKernelArgTypes(ctx, c), TypeRange{}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr({int32_t(kCombineThreads), 1, 1}));
  b.setInsertionPointToStart(&fn.getBody().front());
  Emitter e{b};
  auto args = fn.getBody().front().getArguments();
  Value so = args[0], sm = args[1], sl = args[2], numChunks = args[3], o = args[4], m = args[5],
        l = args[6];

  Value h = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value s = gpu::BlockIdOp::create(b, gpu::Dimension::y);
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value base = e.muli(e.addi(e.muli(s, e.idx(c.qHeads)), h), numChunks);

  Value mx = e.loop(e.idx(0), numChunks, e.idx(1), {e.negInf()}, [&](Value ci, ValueRange a) {
    Value mc = memref::LoadOp::create(b, sm, ValueRange{e.addi(base, ci)});
    return SmallVector<Value>{arith::MaxNumFOp::create(b, a[0], mc).getResult()};
  })[0];
  // Chunks without tokens have m = -inf and weigh exp(-inf) = 0; if every chunk is empty the
  // reference max is 0 so that nothing computes -inf - -inf.
  Value ms = e.select(e.cmpf(arith::CmpFPredicate::OEQ, mx, e.negInf()), e.cf(0.0f), mx);
  Value total = e.loop(e.idx(0), numChunks, e.idx(1), {e.cf(0.0f)}, [&](Value ci, ValueRange a) {
    Value row = e.addi(base, ci);
    Value w = e.exp(e.subf(memref::LoadOp::create(b, sm, ValueRange{row}), ms));
    return SmallVector<Value>{
        math::FmaOp::create(b, w, memref::LoadOp::create(b, sl, ValueRange{row}), a[0])
            .getResult()};
  })[0];
  Value nonEmpty = e.cmpf(arith::CmpFPredicate::OGT, total, e.cf(0.0f));
  Value inv = e.select(nonEmpty, e.divf(e.cf(1.0f), total), e.cf(0.0f));

  e.forEach(tid, e.idx(c.headDim), e.idx(kCombineThreads), [&](Value col) {
    Value acc = e.loop(e.idx(0), numChunks, e.idx(1), {e.cf(0.0f)}, [&](Value ci, ValueRange a) {
      Value row = e.addi(base, ci);
      Value w = e.exp(e.subf(memref::LoadOp::create(b, sm, ValueRange{row}), ms));
      return SmallVector<Value>{
          math::FmaOp::create(b, w, memref::LoadOp::create(b, so, ValueRange{row, col}), a[0])
              .getResult()};
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
