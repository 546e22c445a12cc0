//===- MergeLowering.cpp - hg.merge as parallel, vectorized loops -------===//
//
// The exact log-sum-exp merge of docs/interfaces.md: weights are taken relative to the largest
// maximum, empty partials (l = 0) weigh exactly 0 whatever their m and o hold, and an output with
// no non-empty partial is written as zeros.
//
// Dimensions the verifier could not compare (dynamic on either side) are compared at run time:
// on a mismatch the merge reports it (hgrt_kernel_argument_error) and writes nothing, rather than
// reading past a smaller partial.
//
//===----------------------------------------------------------------------===//
#include "CPUCodegen.h"

#include "hybridgen/runtime/c_api.h"

using namespace mlir;
using namespace mlir::hybridgen;
using namespace mlir::hybridgen::cpu;

void cpu::emitMerge(ImplicitLocOpBuilder &b, ValueRange os, ValueRange ms, ValueRange ls,
                    Value out) {
  Emitter e{b};
  auto outType = cast<MemRefType>(out.getType());
  Value batch = memref::DimOp::create(b, out, 0);
  Value heads = memref::DimOp::create(b, out, 1);
  int64_t d = outType.getDimSize(2);
  size_t n = os.size();

  auto module = b.getInsertionBlock()->getParentOp()->getParentOfType<ModuleOp>();
  Value shapesOk = arith::ConstantIntOp::create(b, 1, 1);
  for (ValueRange group : {os, ms, ls})
    for (Value partial : group) {
      auto type = cast<MemRefType>(partial.getType());
      for (int64_t r = 0; r < type.getRank(); ++r) {
        if (!type.isDynamicDim(r) && !outType.isDynamicDim(r))
          continue; // equal: the verifier checked it
        Value got = memref::DimOp::create(b, partial, r);
        Value want = memref::DimOp::create(b, out, r);
        Value bad = e.cmpi(arith::CmpIPredicate::ne, got, want);
        e.ifThenElse(bad, [&] {
          emitArgumentError(e, module, HGRT_ARG_SHAPE, e.idx(-1), e.idx(r), got, want);
        });
        shapesOk = arith::AndIOp::create(
            b, shapesOk, arith::XOrIOp::create(b, bad, arith::ConstantIntOp::create(b, 1, 1)));
      }
    }
  auto guard = scf::IfOp::create(b, TypeRange{}, shapesOk, /*withElse=*/false);
  OpBuilder::InsertionGuard insertion(b);
  b.setInsertionPoint(guard.thenBlock()->getTerminator());

  e.parallel({batch, heads}, [&](ValueRange ivs) {
    Value s = ivs[0], h = ivs[1];
    SmallVector<Value> mi, li, wi;
    Value mAll = e.negInf();
    for (size_t i = 0; i < n; ++i) {
      mi.push_back(memref::LoadOp::create(b, ms[i], ValueRange{s, h}));
      li.push_back(memref::LoadOp::create(b, ls[i], ValueRange{s, h}));
      // Only non-empty partials set the reference maximum, whatever an empty one's m holds.
      Value nonEmpty = e.cmpf(arith::CmpFPredicate::OGT, li.back(), e.cf(0.0f));
      mAll = e.maxf(mAll, e.select(nonEmpty, mi.back(), e.negInf()));
    }
    Value total = e.cf(0.0f);
    for (size_t i = 0; i < n; ++i) {
      // select, not multiply: exp(-inf - -inf) is NaN for an empty partial.
      Value nonEmpty = e.cmpf(arith::CmpFPredicate::OGT, li[i], e.cf(0.0f));
      wi.push_back(e.select(nonEmpty, e.mulf(li[i], e.exp(e.subf(mi[i], mAll))), e.cf(0.0f)));
      total = e.addf(total, wi.back());
    }
    Value anyWeight = e.cmpf(arith::CmpFPredicate::OGT, total, e.cf(0.0f));
    Value inv = e.select(anyWeight, e.divf(e.cf(1.0f), total), e.cf(0.0f));
    SmallVector<Value> coef;
    for (size_t i = 0; i < n; ++i)
      coef.push_back(e.mulf(wi[i], inv));

    if (!ShapedType::isDynamic(d)) {
      auto rowType = VectorType::get({d}, e.f32());
      Value acc = e.splat(e.cf(0.0f), d);
      for (size_t i = 0; i < n; ++i) {
        Value oi = vector::LoadOp::create(b, rowType, os[i], ValueRange{s, h, e.idx(0)});
        // A zero weight must not turn a garbage (NaN) row of an empty partial into NaN.
        Value contrib = e.select(e.cmpf(arith::CmpFPredicate::OGT, wi[i], e.cf(0.0f)),
                                 e.mulf(e.splat(coef[i], d), oi), e.splat(e.cf(0.0f), d));
        acc = e.addf(acc, contrib);
      }
      vector::StoreOp::create(b, acc, out, ValueRange{s, h, e.idx(0)});
      return;
    }
    // A dynamic head_dim has no vector width to pick at compile time: scalar loop.
    Value dim = memref::DimOp::create(b, out, 2);
    e.loop(e.idx(0), dim, e.idx(1), {}, [&](Value j, ValueRange) {
      Value acc = e.cf(0.0f);
      for (size_t i = 0; i < n; ++i) {
        Value oi = memref::LoadOp::create(b, os[i], ValueRange{s, h, j});
        Value contrib = e.select(e.cmpf(arith::CmpFPredicate::OGT, wi[i], e.cf(0.0f)),
                                 e.mulf(coef[i], oi), e.cf(0.0f));
        acc = e.addf(acc, contrib);
      }
      memref::StoreOp::create(b, acc, out, ValueRange{s, h, j});
      return SmallVector<Value>{};
    });
  });
}
