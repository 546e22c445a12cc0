//===- DenseKernel.cpp - the flash-decoding CPU kernel of hg.partial_attention ===//
//
// One scf.parallel over (sequence, kv-head unit, token chunk) runs an online softmax per chunk
// into scratch; a second scf.parallel merges the chunks of each (sequence, query head) by
// log-sum-exp. Inside a chunk the kernel walks the KV blocks it overlaps, so every K and V row of
// a kv-head is read once for all query heads of its group.
//
//===----------------------------------------------------------------------===//
#include "CPUCodegen.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::hybridgen;
using namespace mlir::hybridgen::cpu;

int64_t KernelConfig::subGroup() const {
  int64_t g = group();
  for (int64_t d = std::min<int64_t>(g, 8); d > 1; --d)
    if (g % d == 0)
      return d;
  return 1;
}

int64_t KernelConfig::dotWidth() const { return headDim % 16 == 0 ? 16 : headDim; }

int64_t KernelConfig::accTileWidth() const {
  // At most 128 live f32 accumulator lanes: 8 zmm on AVX-512, 16 ymm on AVX2.
  int64_t gs = subGroup();
  for (int64_t tw = headDim; tw >= 16; --tw)
    if (headDim % tw == 0 && tw % 16 == 0 && gs * tw <= 128)
      return tw;
  return headDim % 16 == 0 ? 16 : headDim;
}

std::string KernelConfig::mangle() const {
  std::string type;
  llvm::raw_string_ostream os(type);
  os << kvType;
  return llvm::formatv("{0}_q{1}_kv{2}_b{3}_d{4}_s{5:x}_w{6}_c{7:x}_k{8}_t{9}", type, qHeads,
                       kvHeads, blockSize, headDim, llvm::bit_cast<uint32_t>(scale), window,
                       llvm::bit_cast<uint32_t>(softcap), topK, chunkTokens)
      .str();
}

SmallVector<Type> cpu::kernelArgTypes(MLIRContext *ctx, const KernelConfig &c) {
  int64_t dyn = ShapedType::kDynamic;
  Type f32 = Float32Type::get(ctx), i32 = IntegerType::get(ctx, 32), index = IndexType::get(ctx);
  auto qType = MemRefType::get({dyn, c.qHeads, c.headDim}, f32);
  auto kvType = MemRefType::get({dyn, c.kvHeads, c.blockSize, c.headDim}, c.kvType);
  auto tableType = MemRefType::get({dyn, dyn}, i32);
  auto lensType = MemRefType::get({dyn}, i32);
  auto statType = MemRefType::get({dyn, c.qHeads}, f32);
  return {qType, kvType, kvType, tableType, lensType, index, index, qType, statType, statType};
}

std::pair<Value, Value> cpu::clampedRange(Emitter &e, const KernelConfig &config, Value lens,
                                          Value capacity, Value s, Value begin, Value end) {
  // A length beyond the block table would read past it: treat the table as the limit.
  Value len = e.mini(e.maxi(e.loadIndex(lens, {s}), e.idx(0)), capacity);
  Value lo = e.mini(e.maxi(begin, e.idx(0)), len);
  if (config.window > 0)
    lo = e.maxi(lo, e.subi(len, e.idx(config.window)));
  Value hi = e.mini(e.maxi(end, e.idx(0)), len);
  // An empty range keeps lo == hi so that every loop below runs zero times.
  hi = e.maxi(hi, lo);
  return {lo, hi};
}

namespace {

constexpr int64_t kPrefetchDistance = 2;

/// Sums of each of |parts| (equal-width vectors). For a power-of-two count of power-of-two-wide
/// vectors, halves are added pairwise across heads (x's and y's halves shuffled into one vector)
/// until each lane holds one head's sum: about half the shuffles and adds of one reduction tree
/// per head, which dominate the q.k loop otherwise.
SmallVector<Value> reduceHeads(Emitter &e, ArrayRef<Value> parts) {
  int64_t n = parts.size();
  int64_t w = cast<VectorType>(parts[0].getType()).getNumElements();
  if (n < 2 || !llvm::isPowerOf2_64(n) || !llvm::isPowerOf2_64(w) || n > w) {
    SmallVector<Value> sums;
    for (Value p : parts)
      sums.push_back(e.reduce(vector::CombiningKind::ADD, p));
    return sums;
  }
  ImplicitLocOpBuilder &b = e.b;
  // Every vector holds |heads| heads of |partials| lanes each, head-major.
  SmallVector<Value> vecs(parts);
  int64_t heads = 1, partials = w;
  auto halves = [&](Value x, Value y, int64_t xOffset) {
    int64_t half = partials / 2;
    SmallVector<int64_t> lo, hi;
    for (int64_t side = 0; side < 2; ++side)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
          int64_t base = (side ? xOffset : 0) + h * partials + i;
          lo.push_back(base);
          hi.push_back(base + half);
        }
    return e.addf(vector::ShuffleOp::create(b, x, y, lo), vector::ShuffleOp::create(b, x, y, hi));
  };
  while (vecs.size() > 1) {
    SmallVector<Value> next;
    for (size_t i = 0; i < vecs.size(); i += 2)
      next.push_back(halves(vecs[i], vecs[i + 1], heads * partials));
    vecs = next;
    heads *= 2;
    partials /= 2;
  }
  // One vector of n heads: fold its own halves until one lane per head remains.
  Value v = vecs[0];
  while (partials > 1) {
    SmallVector<int64_t> lo, hi;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < partials / 2; ++i) {
        lo.push_back(h * partials + i);
        hi.push_back(h * partials + i + partials / 2);
      }
    v = e.addf(vector::ShuffleOp::create(b, v, v, lo), vector::ShuffleOp::create(b, v, v, hi));
    partials /= 2;
  }
  SmallVector<Value> sums;
  for (int64_t h = 0; h < n; ++h)
    sums.push_back(vector::ExtractOp::create(b, v, h));
  return sums;
}

/// Emits the scaled, soft-capped logits of one block's valid rows and updates the running
/// softmax state; returns the new (acc..., max..., sum...) of the |gs| heads.
struct ChunkBody {
  Emitter &e;
  const KernelConfig &c;
  Value k, v, table;
  Value scores; // memref<gs x block_size x f32> on the stack of the parallel iteration

  /// Asks for block |blk|'s rows of this kv-head in K and V. Each block is a separate 4 KiB-ish
  /// piece of the pool (pages apart), which hardware prefetchers do not follow across.
  void prefetchBlock(Value s, Value kvh, Value blk) {
    ImplicitLocOpBuilder &b = e.b;
    Value pb = e.loadIndex(table, {s, blk});
    int64_t eltBytes = c.kvType.getIntOrFloatBitWidth() / 8;
    int64_t perLine = std::max<int64_t>(1, 64 / eltBytes);
    e.loop(e.idx(0), e.idx(c.blockSize), e.idx(1), {}, [&](Value r, ValueRange) {
      for (Value pool : {k, v})
        for (int64_t col = 0; col < c.headDim; col += perLine)
          memref::PrefetchOp::create(b, pool, ValueRange{pb, kvh, r, e.idx(col)},
                                     /*isWrite=*/false, /*localityHint=*/3, /*isDataCache=*/true);
      return SmallVector<Value>{};
    });
  }

  SmallVector<Value> block(Value s, Value kvh, Value blk, Value t0, Value t1, ArrayRef<Value> qv,
                           ValueRange state) {
    int64_t gs = c.subGroup(), bs = c.blockSize, d = c.headDim;
    ImplicitLocOpBuilder &b = e.b;
    Value pb = e.loadIndex(table, {s, blk});
    Value rowBase = e.muli(blk, e.idx(bs));
    Value r0 = e.maxi(e.subi(t0, rowBase), e.idx(0));
    Value r1 = e.mini(e.subi(t1, rowBase), e.idx(bs));

    // Logits go through a small stack buffer: inserting scalars into a vector register at a
    // dynamic lane would cost a store-forwarding stall per row. Lanes outside [r0, r1) hold stale
    // values and are masked below.
    int64_t nw = d / c.dotWidth(), w = c.dotWidth();
    e.loop(r0, r1, e.idx(1), {}, [&](Value r, ValueRange) {
      // One FMA chain per head over w-wide slices, then a single w-lane reduction: fewer
      // uops than a full-width multiply followed by a reduction tree.
      SmallVector<Value> part(gs);
      for (int64_t j = 0; j < nw; ++j) {
        Value kj = e.loadRowF32(k, {pb, kvh, r, e.idx(j * w)}, w);
        for (int64_t g = 0; g < gs; ++g)
          part[g] = j == 0 ? e.mulf(qv[g * nw + j], kj)
                           : Value(vector::FMAOp::create(b, qv[g * nw + j], kj, part[g]));
      }
      SmallVector<Value> dots = reduceHeads(e, part);
      for (int64_t g = 0; g < gs; ++g)
        memref::StoreOp::create(b, dots[g], scores, ValueRange{e.idx(g), r});
      return SmallVector<Value>{};
    });

    // Garbage rows may hold NaN/Inf: mask by position, never by value.
    SmallVector<int32_t> positions(bs);
    for (int64_t i = 0; i < bs; ++i)
      positions[i] = static_cast<int32_t>(i);
    auto posType = VectorType::get({bs}, b.getI32Type());
    Value iota = arith::ConstantOp::create(b, DenseElementsAttr::get(posType, ArrayRef(positions)));
    auto toI32 = [&](Value x) {
      return e.splat(arith::IndexCastOp::create(b, b.getI32Type(), x), bs);
    };
    Value mask = arith::AndIOp::create(b, e.cmpi(arith::CmpIPredicate::sge, iota, toI32(r0)),
                                       e.cmpi(arith::CmpIPredicate::slt, iota, toI32(r1)));
    Value zeros = e.splat(e.cf(0.0f), bs);
    Value negInfs = e.splat(e.negInf(), bs);
    auto rowType = VectorType::get({bs}, e.f32());

    // acc holds gs x nt column tiles of tw lanes each (head-major).
    int64_t tw = c.accTileWidth(), nt = d / tw;
    SmallVector<Value> acc(state.take_front(gs * nt)), mx(state.slice(gs * nt, gs)),
        sum(state.slice(gs * nt + gs, gs));
    for (int64_t g = 0; g < gs; ++g) {
      Value lg = vector::LoadOp::create(b, rowType, scores, ValueRange{e.idx(g), e.idx(0)});
      if (c.softcap > 0) {
        Value cap = e.splat(e.cf(c.softcap), bs);
        lg = e.mulf(cap, math::TanhOp::create(b, e.divf(lg, cap)));
      }
      lg = e.select(mask, lg, negInfs);
      Value mNew = e.maxf(mx[g], e.reduce(vector::CombiningKind::MAXIMUMF, lg));
      // The first block rescales nothing; exp(-inf - m) must not depend on the approximation.
      Value wasEmpty = e.cmpf(arith::CmpFPredicate::OEQ, mx[g], e.negInf());
      Value alpha = e.select(wasEmpty, e.cf(0.0f), e.exp(e.subf(mx[g], mNew)));
      Value p = e.select(mask, e.exp(e.subf(lg, e.splat(mNew, bs))), zeros);
      vector::StoreOp::create(b, p, scores, ValueRange{e.idx(g), e.idx(0)});
      sum[g] = e.addf(e.mulf(sum[g], alpha), e.reduce(vector::CombiningKind::ADD, p));
      for (int64_t t = 0; t < nt; ++t)
        acc[g * nt + t] = e.mulf(acc[g * nt + t], e.splat(alpha, tw));
      mx[g] = mNew;
    }

    // One row loop per column tile keeps the live accumulators within the register file; each
    // tile reads its own part of every V row, so V still comes from memory once.
    for (int64_t t = 0; t < nt; ++t) {
      SmallVector<Value> tile;
      for (int64_t g = 0; g < gs; ++g)
        tile.push_back(acc[g * nt + t]);
      tile = e.loop(r0, r1, e.idx(1), tile, [&](Value r, ValueRange a) {
        Value vrow = e.loadRowF32(v, {pb, kvh, r, e.idx(t * tw)}, tw);
        SmallVector<Value> next;
        for (int64_t g = 0; g < gs; ++g) {
          Value pg = memref::LoadOp::create(b, scores, ValueRange{e.idx(g), r});
          next.push_back(vector::FMAOp::create(b, e.splat(pg, tw), vrow, a[g]));
        }
        return next;
      });
      for (int64_t g = 0; g < gs; ++g)
        acc[g * nt + t] = tile[g];
    }
    SmallVector<Value> result(acc);
    result.append(mx);
    result.append(sum);
    return result;
  }
};

} // namespace

func::FuncOp cpu::buildDenseKernel(ModuleOp module, StringRef name, const KernelConfig &c,
                                   Location loc) {
  MLIRContext *ctx = module.getContext();
  ImplicitLocOpBuilder b = ImplicitLocOpBuilder::atBlockEnd(loc, module.getBody());
  auto fn =
      func::FuncOp::create(b, name, FunctionType::get(ctx, kernelArgTypes(ctx, c), TypeRange{}));
  fn.setPrivate();
  b.setInsertionPointToStart(fn.addEntryBlock());
  Emitter e{b};
  auto args = fn.getArguments();
  Value q = args[0], k = args[1], v = args[2], table = args[3], lens = args[4], begin = args[5],
        end = args[6], o = args[7], m = args[8], l = args[9];
  int64_t gs = c.subGroup(), nsub = c.group() / gs, d = c.headDim, bs = c.blockSize;
  int64_t chunk = c.chunkTokens;

  Value batch = memref::DimOp::create(b, q, 0);
  Value capacity = e.muli(memref::DimOp::create(b, table, 1), e.idx(bs));

  // Chunks start at the block holding each sequence's first token, so the widest range sets
  // how many chunks the parallel loop needs.
  Value maxSpan = e.loop(e.idx(0), batch, e.idx(1), {e.idx(0)}, [&](Value s, ValueRange acc) {
    std::pair<Value, Value> range = clampedRange(e, c, lens, capacity, s, begin, end);
    Value lo = range.first, hi = range.second;
    Value base = e.muli(e.divi(lo, e.idx(bs)), e.idx(bs));
    Value span = e.select(e.cmpi(arith::CmpIPredicate::slt, lo, hi), e.subi(hi, base), e.idx(0));
    return SmallVector<Value>{e.maxi(acc[0], span)};
  })[0];
  Value numChunks = e.maxi(e.ceilDiv(maxSpan, chunk), e.idx(1));
  Value units = e.idx(c.kvHeads * nsub);

  // Scratch rows: ((s * units + u) * numChunks + chunk) * gs + g.
  Value rows = e.muli(e.muli(e.muli(batch, units), numChunks), e.idx(gs));
  Value so = memref::AllocOp::create(b, MemRefType::get({ShapedType::kDynamic, d}, e.f32()),
                                     ValueRange{rows});
  auto statType = MemRefType::get({ShapedType::kDynamic}, e.f32());
  Value sm = memref::AllocOp::create(b, statType, ValueRange{rows});
  Value sl = memref::AllocOp::create(b, statType, ValueRange{rows});
  auto rowVec = VectorType::get({d}, e.f32());

  ChunkBody body{e, c, k, v, table, Value()};
  e.parallel({batch, units, numChunks}, [&](ValueRange ivs) {
    // scf-to-openmp scopes each iteration's stack allocations (alloca_scope).
    body.scores = memref::AllocaOp::create(b, MemRefType::get({gs, bs}, e.f32()));
    // Lanes outside a block's valid rows are masked, but never leave them uninitialized.
    for (int64_t g = 0; g < gs; ++g)
      vector::StoreOp::create(b, e.splat(e.negInf(), bs), body.scores,
                              ValueRange{e.idx(g), e.idx(0)});
    Value s = ivs[0], u = ivs[1], ci = ivs[2];
    Value kvh = e.divi(u, e.idx(nsub));
    Value h0 = e.muli(u, e.idx(gs));
    std::pair<Value, Value> range = clampedRange(e, c, lens, capacity, s, begin, end);
    Value lo = range.first, hi = range.second;
    Value base = e.addi(e.muli(e.divi(lo, e.idx(bs)), e.idx(bs)), e.muli(ci, e.idx(chunk)));
    Value t0 = e.maxi(lo, base);
    Value t1 = e.maxi(e.mini(hi, e.addi(base, e.idx(chunk))), t0);
    SmallVector<Value> qv, state;
    int64_t w = c.dotWidth(), tw = c.accTileWidth();
    for (int64_t g = 0; g < gs; ++g)
      for (int64_t j = 0; j < d / w; ++j)
        qv.push_back(e.mulf(vector::LoadOp::create(b, VectorType::get({w}, e.f32()), q,
                                                   {s, e.addi(h0, e.idx(g)), e.idx(j * w)}),
                            e.splat(e.cf(c.scale), w)));
    state.append(gs * (d / tw), e.splat(e.cf(0.0f), tw));
    state.append(gs, e.negInf());
    state.append(gs, e.cf(0.0f));
    Value blkLo = e.divi(t0, e.idx(bs));
    Value blkHi = e.select(e.cmpi(arith::CmpIPredicate::slt, t0, t1), e.ceilDiv(t1, bs), blkLo);
    // The first blocks of a chunk have no earlier block to prefetch them.
    for (int64_t i = 0; i < kPrefetchDistance; ++i) {
      Value first = e.addi(blkLo, e.idx(i));
      scf::IfOp::create(b, e.cmpi(arith::CmpIPredicate::slt, first, blkHi),
                        [&](OpBuilder &nb, Location) {
                          OpBuilder::InsertionGuard guard(b);
                          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
                          body.prefetchBlock(s, kvh, first);
                          scf::YieldOp::create(b);
                        });
    }
    state = e.loop(blkLo, blkHi, e.idx(1), state, [&](Value blk, ValueRange st) {
      // Prefetch two blocks ahead: a block's math takes about one memory round trip.
      Value next = e.addi(blk, e.idx(kPrefetchDistance));
      scf::IfOp::create(b, e.cmpi(arith::CmpIPredicate::slt, next, blkHi),
                        [&](OpBuilder &nb, Location) {
                          OpBuilder::InsertionGuard guard(b);
                          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
                          body.prefetchBlock(s, kvh, next);
                          scf::YieldOp::create(b);
                        });
      return body.block(s, kvh, blk, t0, t1, qv, st);
    });
    Value row0 = e.muli(e.addi(e.muli(e.addi(e.muli(s, units), u), numChunks), ci), e.idx(gs));
    int64_t nt = d / tw;
    for (int64_t g = 0; g < gs; ++g) {
      Value row = e.addi(row0, e.idx(g));
      for (int64_t t = 0; t < nt; ++t)
        vector::StoreOp::create(b, state[g * nt + t], so, ValueRange{row, e.idx(t * tw)});
      memref::StoreOp::create(b, state[gs * nt + g], sm, ValueRange{row});
      memref::StoreOp::create(b, state[gs * nt + gs + g], sl, ValueRange{row});
    }
  });

  // Log-sum-exp over the chunks; o is stored unnormalized in scratch and normalized here once.
  e.parallel({batch, e.idx(c.qHeads)}, [&](ValueRange ivs) {
    Value s = ivs[0], h = ivs[1];
    Value u = e.divi(h, e.idx(gs)), g = e.remi(h, e.idx(gs));
    auto rowOf = [&](Value ci) {
      return e.addi(e.muli(e.addi(e.muli(e.addi(e.muli(s, units), u), numChunks), ci), e.idx(gs)),
                    g);
    };
    Value mAll = e.loop(e.idx(0), numChunks, e.idx(1), {e.negInf()}, [&](Value ci, ValueRange a) {
      Value mc = memref::LoadOp::create(b, sm, ValueRange{rowOf(ci)});
      return SmallVector<Value>{e.maxf(a[0], mc)};
    })[0];
    SmallVector<Value> init{e.splat(e.cf(0.0f), d), e.cf(0.0f)};
    SmallVector<Value> merged =
        e.loop(e.idx(0), numChunks, e.idx(1), init, [&](Value ci, ValueRange a) {
          Value row = rowOf(ci);
          Value mc = memref::LoadOp::create(b, sm, ValueRange{row});
          Value lc = memref::LoadOp::create(b, sl, ValueRange{row});
          Value nonEmpty = e.cmpf(arith::CmpFPredicate::OGT, lc, e.cf(0.0f));
          Value w = e.select(nonEmpty, e.exp(e.subf(mc, mAll)), e.cf(0.0f));
          Value oc = vector::LoadOp::create(b, rowVec, so, ValueRange{row, e.idx(0)});
          return SmallVector<Value>{vector::FMAOp::create(b, e.splat(w, d), oc, a[0]),
                                    e.addf(a[1], e.mulf(w, lc))};
        });
    Value total = merged[1];
    Value nonEmpty = e.cmpf(arith::CmpFPredicate::OGT, total, e.cf(0.0f));
    Value inv = e.select(nonEmpty, e.divf(e.cf(1.0f), total), e.cf(0.0f));
    vector::StoreOp::create(b, e.mulf(merged[0], e.splat(inv, d)), o, ValueRange{s, h, e.idx(0)});
    memref::StoreOp::create(b, mAll, m, ValueRange{s, h});
    memref::StoreOp::create(b, total, l, ValueRange{s, h});
  });

  for (Value buffer : {so, sm, sl})
    memref::DeallocOp::create(b, buffer);
  func::ReturnOp::create(b);
  return fn;
}
