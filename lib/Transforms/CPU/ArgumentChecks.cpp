//===- ArgumentChecks.cpp - the kernels' guard against reads outside the pool -------------===//
//
// Compiled attention is reachable without the driver's validation (raw MLIR through the JIT, AOT
// libraries, whole models), so every kernel checks what it is about to read: the rows of its
// per-sequence buffers, each length against the block table and each block id of its token
// range against the pool. The check runs once per call on the calling thread, before the
// parallel loops: one branch-free compare per block (the scan vectorizes), so it costs
// nothing next to reading the block itself. A violation is reported to the runtime
// (hgrt_kernel_argument_error, which the caller takes after the call) and the kernel then
// reads nothing and writes the empty partial.
//
//===----------------------------------------------------------------------===//
#include "CPUCodegen.h"

#include "hybridgen/runtime/c_api.h"

using namespace mlir;
using namespace mlir::hybridgen;
using namespace mlir::hybridgen::cpu;

namespace {

/// Kernel argument positions (kernelArgTypes order), reported as the "index" of a batch error.
enum KernelArgIndex : int64_t { kTable = 3, kLens = 4, kOut = 7, kMax = 8, kSum = 9 };

struct Checks {
  Emitter &e;
  ModuleOp module;
  const KernelConfig &c;
  const KernelArgs &a;

  void report(int32_t kind, Value seq, Value index, Value value, Value limit) {
    emitArgumentError(e, module, kind, seq, index, value, limit);
  }

  Value notOf(Value cond) {
    return arith::XOrIOp::create(e.b, cond, arith::ConstantIntOp::create(e.b, 1, 1));
  }

  /// The raw length of sequence |s| (sign-extended, not clamped) and whether it is outside
  /// [0, capacity].
  std::pair<Value, Value> rawLength(Value s, Value capacity) {
    Value raw = e.loadIndex(a.lens, {s});
    Value bad = arith::OrIOp::create(e.b, e.cmpi(arith::CmpIPredicate::slt, raw, e.idx(0)),
                                     e.cmpi(arith::CmpIPredicate::sgt, raw, capacity));
    return {raw, bad};
  }

  /// The blocks [blkLo, blkHi) that the kernel reads for sequence |s| (its clamped range).
  std::pair<Value, Value> blocksRead(Value s, Value capacity) {
    std::pair<Value, Value> range = clampedRange(e, c, a.lens, capacity, s, a.begin, a.end);
    Value lo = range.first, hi = range.second;
    Value blkLo = e.divi(lo, e.idx(c.blockSize));
    Value blkHi =
        e.select(e.cmpi(arith::CmpIPredicate::slt, lo, hi), e.ceilDiv(hi, c.blockSize), blkLo);
    return {blkLo, blkHi};
  }

  /// i1: some length or block id of the batch is bad. Branch-free: lengths and ids are
  /// or-ed into one flag (an unsigned compare catches negative ids too).
  Value anyBadContent(Value batch, Value capacity, Value numBlocks) {
    Value f = arith::ConstantIntOp::create(e.b, 0, 1);
    return e.loop(e.idx(0), batch, e.idx(1), {f}, [&](Value s, ValueRange acc) {
      Value lenBad = rawLength(s, capacity).second;
      std::pair<Value, Value> blocks = blocksRead(s, capacity);
      Value idBad = e.loop(blocks.first, blocks.second, e.idx(1), {f},
                           [&](Value blk, ValueRange inner) {
                             Value id = e.loadIndex(a.table, {s, blk});
                             Value bad = e.cmpi(arith::CmpIPredicate::uge, id, numBlocks);
                             return SmallVector<Value>{arith::OrIOp::create(e.b, inner[0], bad)};
                           })[0];
      Value bad = arith::OrIOp::create(e.b, lenBad, idBad);
      return SmallVector<Value>{arith::OrIOp::create(e.b, acc[0], bad)};
    })[0];
  }

  /// The cold path: reports every bad length and block id (the runtime keeps the first).
  void reportBadContent(Value batch, Value capacity, Value numBlocks) {
    e.forEach(e.idx(0), batch, e.idx(1), [&](Value s) {
      std::pair<Value, Value> len = rawLength(s, capacity);
      e.ifThenElse(
          len.second,
          [&] { report(HGRT_ARG_LENGTH, s, e.idx(-1), len.first, capacity); },
          [&] {
            std::pair<Value, Value> blocks = blocksRead(s, capacity);
            e.forEach(blocks.first, blocks.second, e.idx(1), [&](Value blk) {
              Value id = e.loadIndex(a.table, {s, blk});
              e.ifThenElse(e.cmpi(arith::CmpIPredicate::uge, id, numBlocks),
                           [&] { report(HGRT_ARG_BLOCK_ID, s, blk, id, numBlocks); });
            });
          });
    });
  }
};

} // namespace

void cpu::emitArgumentError(Emitter &e, ModuleOp module, int32_t kind, Value seq, Value index,
                            Value value, Value limit) {
  Type i64 = e.b.getI64Type();
  func::FuncOp fn = declareFunction(module, "hgrt_kernel_argument_error",
                                    {e.b.getI32Type(), i64, i64, i64, i64});
  auto cast = [&](Value v) { return arith::IndexCastOp::create(e.b, i64, v).getResult(); };
  Value kindValue = arith::ConstantIntOp::create(e.b, kind, 32);
  func::CallOp::create(e.b, fn,
                       ValueRange{kindValue, cast(seq), cast(index), cast(value), cast(limit)});
}

void cpu::emitEmptyPartial(Emitter &e, const KernelConfig &c, Value o, Value m, Value l,
                           Value rows) {
  ImplicitLocOpBuilder &b = e.b;
  e.forEach(e.idx(0), rows, e.idx(1), [&](Value s) {
    e.forEach(e.idx(0), e.idx(c.qHeads), e.idx(1), [&](Value h) {
      vector::StoreOp::create(b, e.splat(e.cf(0.0f), c.headDim), o, ValueRange{s, h, e.idx(0)});
      memref::StoreOp::create(b, e.negInf(), m, ValueRange{s, h});
      memref::StoreOp::create(b, e.cf(0.0f), l, ValueRange{s, h});
    });
  });
}

scf::IfOp cpu::emitArgumentGuard(Emitter &e, ModuleOp module, const KernelConfig &c,
                                 const KernelArgs &a) {
  ImplicitLocOpBuilder &b = e.b;
  Checks checks{e, module, c, a};
  Value batch = memref::DimOp::create(b, a.q, 0);
  Value capacity = e.muli(memref::DimOp::create(b, a.table, 1), e.idx(c.blockSize));
  // K and V may both be dynamic in the pool dimension: the smaller bounds every read.
  Value numBlocks = e.mini(memref::DimOp::create(b, a.k, 0), memref::DimOp::create(b, a.v, 0));

  // Per-sequence buffers with fewer rows than q would be read or written past their end.
  Value rowsOk = arith::ConstantIntOp::create(b, 1, 1);
  Value outRows = batch;
  for (auto entry : {std::pair{kTable, a.table}, std::pair{kLens, a.lens}, std::pair{kOut, a.o},
                     std::pair{kMax, a.m}, std::pair{kSum, a.l}}) {
    int64_t index = entry.first;
    Value buffer = entry.second;
    Value rows = memref::DimOp::create(b, buffer, 0);
    Value shortRows = e.cmpi(arith::CmpIPredicate::slt, rows, batch);
    e.ifThenElse(shortRows, [&] {
      checks.report(HGRT_ARG_BATCH, e.idx(-1), e.idx(index), rows, batch);
    });
    rowsOk = arith::AndIOp::create(b, rowsOk, checks.notOf(shortRows));
    if (index >= kOut)
      outRows = e.mini(outRows, rows);
  }
  auto contentOk = scf::IfOp::create(b, TypeRange{b.getI1Type()}, rowsOk, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(contentOk.thenBlock());
    Value bad = checks.anyBadContent(batch, capacity, numBlocks);
    e.ifThenElse(bad, [&] { checks.reportBadContent(batch, capacity, numBlocks); });
    scf::YieldOp::create(b, checks.notOf(bad));
    b.setInsertionPointToStart(contentOk.elseBlock());
    scf::YieldOp::create(b, arith::ConstantIntOp::create(b, 0, 1).getResult());
  }

  auto guard = scf::IfOp::create(b, TypeRange{}, contentOk.getResult(0), /*withElse=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(guard.elseBlock()->getTerminator());
    // Refused: the outputs still get a defined value (the empty partial) where they exist.
    emitEmptyPartial(e, c, a.o, a.m, a.l, outRows);
  }
  b.setInsertionPoint(guard.thenBlock()->getTerminator());
  return guard;
}
