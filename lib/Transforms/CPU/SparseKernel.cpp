//===- SparseKernel.cpp - the exact top-k CPU kernel of hg.partial_attention ===//
//
// Per (sequence, kv-head unit): one pass over K writes the logits of all heads of the unit to a
// heap scratch row; per head, the k-th largest logit is found without sorting by bisecting over
// the order-preserving int32 image of the floats (32 counting passes), ties are taken in token
// order up to k, and only the selected tokens' V rows are read. With k >= the number of tokens
// every token is selected, which is dense attention.
//
//===----------------------------------------------------------------------===//
#include "CPUCodegen.h"

using namespace mlir;
using namespace mlir::hybridgen;
using namespace mlir::hybridgen::cpu;

namespace {

/// Lanes of the counting passes.
constexpr int64_t kLanes = 16;

/// A constant of |type| (a scalar, or a vector splat) holding |value|.
Value intConst(Emitter &e, Type type, int64_t value) {
  auto vt = dyn_cast<VectorType>(type);
  Type elt = vt ? vt.getElementType() : type;
  auto attr = IntegerAttr::get(elt, value);
  if (vt)
    return arith::ConstantOp::create(e.b, DenseElementsAttr::get(vt, attr));
  return arith::ConstantOp::create(e.b, attr);
}

/// The int32 image of |x| (scalar or vector) that orders like the float: negative floats get
/// their magnitude bits flipped, so "k-th largest logit" becomes an integer bisection.
Value orderedKey(Emitter &e, Value x) {
  ImplicitLocOpBuilder &b = e.b;
  Type i32 = b.getI32Type();
  if (auto vt = dyn_cast<VectorType>(x.getType()))
    i32 = VectorType::get(vt.getShape(), i32);
  Value bits = arith::BitcastOp::create(b, i32, x);
  Value negative = e.cmpi(arith::CmpIPredicate::slt, bits, intConst(e, i32, 0));
  return e.select(negative, arith::XOrIOp::create(b, bits, intConst(e, i32, 0x7fffffff)), bits);
}

/// Number of keys in row |g| of |keys| (|nPad| of them, padding holds INT32_MIN) that compare
/// |pred| to |key|, kLanes at a time.
Value countKeys(Emitter &e, Value keys, Value g, Value nPad, arith::CmpIPredicate pred, Value key) {
  ImplicitLocOpBuilder &b = e.b;
  auto laneType = VectorType::get({kLanes}, b.getI32Type());
  Value ones = intConst(e, laneType, 1), zeros = intConst(e, laneType, 0);
  Value keySplat = e.splat(key, kLanes);
  Value acc = e.loop(e.idx(0), nPad, e.idx(kLanes), {zeros}, [&](Value i, ValueRange a) {
    Value kv = vector::LoadOp::create(b, laneType, keys, ValueRange{g, i});
    Value hit = e.cmpi(pred, kv, keySplat);
    return SmallVector<Value>{arith::AddIOp::create(b, a[0], e.select(hit, ones, zeros))};
  })[0];
  Value total = e.reduce(vector::CombiningKind::ADD, acc);
  return arith::IndexCastOp::create(b, b.getIndexType(), total);
}

} // namespace

func::FuncOp cpu::buildSparseKernel(ModuleOp module, StringRef name, const KernelConfig &c,
                                    Location loc) {
  ImplicitLocOpBuilder b = ImplicitLocOpBuilder::atBlockEnd(loc, module.getBody());
  auto [fn, args] = createKernelFunction(b, name, c);
  Emitter e{b};
  Value q = args.q, k = args.k, v = args.v, table = args.table, lens = args.lens,
        begin = args.begin, end = args.end, o = args.o, m = args.m, l = args.l;
  int64_t gs = c.subGroup(), nsub = c.group() / gs, d = c.headDim, bs = c.blockSize;
  auto rowVec = VectorType::get({d}, e.f32());
  Type i32 = b.getI32Type(), i64 = b.getI64Type();

  Value batch = memref::DimOp::create(b, q, 0);
  Value capacity = e.muli(memref::DimOp::create(b, table, 1), e.idx(bs));
  e.parallel({batch, e.idx(c.kvHeads * nsub)}, [&](ValueRange ivs) {
    Value s = ivs[0], u = ivs[1];
    Value kvh = e.divi(u, e.idx(nsub));
    Value h0 = e.muli(u, e.idx(gs));
    std::pair<Value, Value> range = clampedRange(e, c, lens, capacity, s, begin, end);
    Value lo = range.first, hi = range.second;
    Value n = e.subi(hi, lo);
    // Scratch sized by this range only (padded to whole lanes); freed at the end of the
    // iteration.
    Value nPad = e.muli(e.ceilDiv(n, kLanes), e.idx(kLanes));
    Value scores = memref::AllocOp::create(b, MemRefType::get({gs, ShapedType::kDynamic}, e.f32()),
                                           ValueRange{nPad});
    Value keys = memref::AllocOp::create(b, MemRefType::get({gs, ShapedType::kDynamic}, i32),
                                         ValueRange{nPad});

    // Pass 1: all logits of the unit's heads, each K row read once.
    SmallVector<Value> qv;
    Value scale = e.splat(e.cf(c.scale), d);
    for (int64_t g = 0; g < gs; ++g)
      qv.push_back(
          e.mulf(vector::LoadOp::create(b, rowVec, q, {s, e.addi(h0, e.idx(g)), e.idx(0)}), scale));
    Value blkLo = e.divi(lo, e.idx(bs));
    Value blkHi = e.select(e.cmpi(arith::CmpIPredicate::slt, lo, hi), e.ceilDiv(hi, bs), blkLo);
    e.loop(blkLo, blkHi, e.idx(1), {}, [&](Value blk, ValueRange) {
      Value pb = e.loadIndex(table, {s, blk});
      Value rowBase = e.muli(blk, e.idx(bs));
      Value r0 = e.maxi(e.subi(lo, rowBase), e.idx(0));
      Value r1 = e.mini(e.subi(hi, rowBase), e.idx(bs));
      e.loop(r0, r1, e.idx(1), {}, [&](Value r, ValueRange) {
        Value krow = e.loadRowF32(k, {pb, kvh, r, e.idx(0)}, d);
        Value slot = e.subi(e.addi(rowBase, r), lo);
        for (int64_t g = 0; g < gs; ++g) {
          Value dot = e.reduce(vector::CombiningKind::ADD, e.mulf(qv[g], krow));
          if (c.softcap > 0) {
            Value cap = e.cf(c.softcap);
            dot = e.mulf(cap, math::TanhOp::create(b, e.divf(dot, cap)));
          }
          memref::StoreOp::create(b, dot, scores, ValueRange{e.idx(g), slot});
        }
        return SmallVector<Value>{};
      });
      return SmallVector<Value>{};
    });

    // Pass 2, per head: keys, threshold, then softmax and V over the selected tokens only.
    Value kEff = e.mini(e.idx(c.topK), n);
    e.loop(e.idx(0), e.idx(gs), e.idx(1), {}, [&](Value g, ValueRange) {
      // Padding lanes get INT32_MIN, which no bisection midpoint or threshold count includes.
      SmallVector<int32_t> positions(kLanes);
      for (int64_t i = 0; i < kLanes; ++i)
        positions[i] = static_cast<int32_t>(i);
      auto laneType = VectorType::get({kLanes}, i32);
      Value iota =
          arith::ConstantOp::create(b, DenseElementsAttr::get(laneType, ArrayRef(positions)));
      Value nI32 = e.splat(arith::IndexCastOp::create(b, i32, n), kLanes);
      Value minKey = intConst(e, laneType, std::numeric_limits<int32_t>::min());
      e.loop(e.idx(0), nPad, e.idx(kLanes), {}, [&](Value i, ValueRange) {
        Value x =
            vector::LoadOp::create(b, VectorType::get({kLanes}, e.f32()), scores, ValueRange{g, i});
        Value pos =
            arith::AddIOp::create(b, iota, e.splat(arith::IndexCastOp::create(b, i32, i), kLanes));
        Value valid = e.cmpi(arith::CmpIPredicate::slt, pos, nI32);
        vector::StoreOp::create(b, e.select(valid, orderedKey(e, x), minKey), keys,
                                ValueRange{g, i});
        return SmallVector<Value>{};
      });
      // Largest key T with count(key >= T) >= k, over the whole int32 range (64-bit arithmetic).
      Value kI64 = arith::IndexCastOp::create(b, i64, kEff);
      Value lo0 = arith::ConstantIntOp::create(b, std::numeric_limits<int32_t>::min(), 64);
      Value hi0 = arith::ConstantIntOp::create(b, std::numeric_limits<int32_t>::max(), 64);
      Value one64 = arith::ConstantIntOp::create(b, 1, 64);
      SmallVector<Value> bounds =
          e.loop(e.idx(0), e.idx(32), e.idx(1), {lo0, hi0}, [&](Value, ValueRange lh) {
            Value half = arith::ShRSIOp::create(
                b, arith::AddIOp::create(b, arith::SubIOp::create(b, lh[1], lh[0]), one64), one64);
            Value mid = arith::AddIOp::create(b, lh[0], half);
            Value midKey = arith::TruncIOp::create(b, i32, mid);
            Value count = arith::IndexCastOp::create(
                b, i64, countKeys(e, keys, g, nPad, arith::CmpIPredicate::sge, midKey));
            Value enough = e.cmpi(arith::CmpIPredicate::sge, count, kI64);
            return SmallVector<Value>{
                e.select(enough, mid, lh[0]),
                e.select(enough, lh[1], arith::SubIOp::create(b, mid, one64))};
          });
      Value threshold = arith::TruncIOp::create(b, i32, bounds[0]);
      Value above = countKeys(e, keys, g, nPad, arith::CmpIPredicate::sgt, threshold);
      Value ties = e.subi(kEff, e.mini(above, kEff));

      Value mx = e.loop(e.idx(0), n, e.idx(1), {e.negInf()}, [&](Value i, ValueRange a) {
        return SmallVector<Value>{
            e.maxf(a[0], memref::LoadOp::create(b, scores, ValueRange{g, i}))};
      })[0];
      SmallVector<Value> init{e.splat(e.cf(0.0f), d), e.cf(0.0f), e.idx(0)};
      SmallVector<Value> acc = e.loop(e.idx(0), n, e.idx(1), init, [&](Value i, ValueRange a) {
        Value x = memref::LoadOp::create(b, scores, ValueRange{g, i});
        Value key = memref::LoadOp::create(b, keys, ValueRange{g, i});
        Value isTie = arith::AndIOp::create(b, e.cmpi(arith::CmpIPredicate::eq, key, threshold),
                                            e.cmpi(arith::CmpIPredicate::slt, a[2], ties));
        Value take =
            arith::OrIOp::create(b, e.cmpi(arith::CmpIPredicate::sgt, key, threshold), isTie);
        Value tiesTaken = e.addi(a[2], e.select(isTie, e.idx(1), e.idx(0)));
        auto ifOp = scf::IfOp::create(b, TypeRange{rowVec, e.f32()}, take, /*withElse=*/true);
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(&ifOp.getThenRegion().front());
          Value t = e.addi(lo, i);
          Value pb = e.loadIndex(table, {s, e.divi(t, e.idx(bs))});
          Value vrow = e.loadRowF32(v, {pb, kvh, e.remi(t, e.idx(bs)), e.idx(0)}, d);
          Value p = e.exp(e.subf(x, mx));
          scf::YieldOp::create(
              b, ValueRange{vector::FMAOp::create(b, e.splat(p, d), vrow, a[0]), e.addf(a[1], p)});
          b.setInsertionPointToStart(&ifOp.getElseRegion().front());
          scf::YieldOp::create(b, ValueRange{a[0], a[1]});
        }
        return SmallVector<Value>{ifOp.getResult(0), ifOp.getResult(1), tiesTaken};
      });
      Value h = e.addi(h0, g);
      Value total = acc[1];
      Value inv = e.select(e.cmpf(arith::CmpFPredicate::OGT, total, e.cf(0.0f)),
                           e.divf(e.cf(1.0f), total), e.cf(0.0f));
      vector::StoreOp::create(b, e.mulf(acc[0], e.splat(inv, d)), o, ValueRange{s, h, e.idx(0)});
      memref::StoreOp::create(b, mx, m, ValueRange{s, h});
      memref::StoreOp::create(b, total, l, ValueRange{s, h});
      return SmallVector<Value>{};
    });
    memref::DeallocOp::create(b, scores);
    memref::DeallocOp::create(b, keys);
  });
  return fn;
}
