//===- PrefillKernel.cpp - the chunked-prefill CPU kernel of hg.prefill_attention ===//
//
// One scf.parallel over (sequence, kv head, query tile) runs a flash-attention online softmax:
// a query tile is |tileRows| consecutive chunk positions times the kv head's whole GQA group, and
// it walks the KV blocks its positions can see block by block. In a block each K row and each V
// row is loaded and widened to f32 once and used by every query row of the tile (all heads of the
// group, all positions), so K/V traffic is shared the way the decode kernel shares it across a
// group. Causality and the sliding window are per-row position masks on each block's logits.
//
//===----------------------------------------------------------------------===//
#include "../AttentionParams.h"
#include "PrefillKernel.h"

#include "CPUCodegen.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::hybridgen;
using namespace mlir::hybridgen::cpu;

namespace {

/// Query rows (position x head) a tile aims for: enough rows to amortize each K/V row load over
/// many dot products and FMAs, few enough that the tile's q, accumulators and logits (about
/// 2 x 32 x head_dim + 32 x block_size floats) stay in L1/L2.
constexpr int64_t kTileQueryRows = 32;

struct PrefillConfig {
  Type kvType;
  int64_t qHeads, kvHeads, blockSize, headDim;
  float scale;
  int64_t window;  // 0: none
  float softcap;   // 0: none
  bool kTransposed = false; // K pieces stored [head_dim][block_size] (KernelConfig::kTransposed)

  int64_t group() const { return qHeads / kvHeads; }
  /// Chunk positions per parallel tile.
  int64_t tileRows() const { return std::max<int64_t>(1, kTileQueryRows / group()); }
  /// Query rows of a full tile (the scratch size).
  int64_t tileQueryRows() const { return tileRows() * group(); }
  /// Lanes of one slice of a row (one FMA of a dot product or an accumulator update).
  int64_t sliceWidth() const { return headDim % 16 == 0 ? 16 : headDim; }
  /// K/V rows handled per step of the row loops: each query row's q slices (logits) or
  /// accumulators (V) are loaded once per step instead of once per row, and the step's logits
  /// come from one sum tree instead of one reduction each. Up to 4 rows, as long as the step's
  /// widened rows fit in 16 vector registers; 1 where the slice width is not a power of two.
  int64_t rowsPerStep() const {
    if (!llvm::isPowerOf2_64(sliceWidth()))
      return 1;
    int64_t slices = headDim / sliceWidth(), u = 4;
    while (u > 1 && u * slices > 16)
      u /= 2;
    return u;
  }
  std::string mangle() const { return mangleAttentionParams(*this) + (kTransposed ? "_kt" : ""); }
};

/// (q, k, v, block_table, lens, out): batch, chunk, pool blocks and table width dynamic.
SmallVector<Type> prefillArgTypes(MLIRContext *ctx, const PrefillConfig &c) {
  int64_t dyn = ShapedType::kDynamic;
  Type f32 = Float32Type::get(ctx), i32 = IntegerType::get(ctx, 32);
  auto qType = MemRefType::get({dyn, dyn, c.qHeads, c.headDim}, f32);
  auto kvType = MemRefType::get({dyn, c.kvHeads, c.blockSize, c.headDim}, c.kvType);
  return {qType, kvType, kvType, MemRefType::get({dyn, dyn}, i32), MemRefType::get({dyn}, i32),
          qType};
}

/// The f32 slices of row |row| of kv head |kvh| in pool block |pb|, widened once.
SmallVector<Value> loadRowSlices(Emitter &e, const PrefillConfig &c, Value pool, Value pb,
                                 Value kvh, Value row) {
  SmallVector<Value> slices;
  for (int64_t col = 0; col < c.headDim; col += c.sliceWidth())
    slices.push_back(e.loadRowF32(pool, {pb, kvh, row, e.idx(col)}, c.sliceWidth()));
  return slices;
}

/// The sums of |vs| (a power-of-two count n <= their common power-of-two width) as one
/// vector<n>, in order: pairs are combined by shuffling their low and high halves apart and adding
/// (each level halves the lanes per sum and doubles the sums per vector), then the last vector's
/// lanes are folded. n inputs cost n - 1 combines plus the folds instead of n full reductions.
Value sumTree(Emitter &e, SmallVector<Value> vs) {
  int64_t width = cast<VectorType>(vs[0].getType()).getDimSize(0);
  int64_t sums = 1;
  while (vs.size() > 1) {
    int64_t partials = width / sums, half = partials / 2;
    SmallVector<Value> next;
    for (size_t i = 0; i < vs.size(); i += 2) {
      SmallVector<int64_t> lo, hi;
      for (int64_t side = 0; side < 2; ++side)
        for (int64_t h = 0; h < sums; ++h)
          for (int64_t j = 0; j < half; ++j) {
            lo.push_back(side * width + h * partials + j);
            hi.push_back(side * width + h * partials + j + half);
          }
      next.push_back(e.addf(vector::ShuffleOp::create(e.b, vs[i], vs[i + 1], lo),
                            vector::ShuffleOp::create(e.b, vs[i], vs[i + 1], hi)));
    }
    vs = std::move(next);
    sums *= 2;
  }
  Value v = vs[0];
  for (int64_t partials = width / sums; partials > 1; partials /= 2) {
    SmallVector<int64_t> lo, hi;
    for (int64_t h = 0; h < sums; ++h)
      for (int64_t j = 0; j < partials / 2; ++j) {
        lo.push_back(h * partials + j);
        hi.push_back(h * partials + j + partials / 2);
      }
    v = e.addf(vector::ShuffleOp::create(e.b, v, v, lo), vector::ShuffleOp::create(e.b, v, v, hi));
  }
  return v;
}

/// Rows [r0, r1) in steps of |step| rows, then the remainder one row at a time: |body| gets the
/// first row and the (static) number of rows of its step.
void forRows(Emitter &e, Value r0, Value r1, int64_t step,
             function_ref<void(Value, int64_t)> body) {
  Value mid = r0;
  if (step > 1) {
    Value whole = e.muli(e.divi(e.subi(r1, r0), e.idx(step)), e.idx(step));
    mid = e.addi(r0, whole);
    e.forEach(r0, mid, e.idx(step), [&](Value row) { body(row, step); });
  }
  e.forEach(mid, r1, e.idx(1), [&](Value row) { body(row, 1); });
}

struct PrefillKernelBuilder {
  ImplicitLocOpBuilder &b;
  Emitter &e;
  const PrefillConfig &c;
  Value q, k, v, table, lens, out;
  Value kT; // with c.kTransposed: k seen as [blocks][kv_heads][head_dim][block_size]
  // Per-iteration scratch (stack, scoped per OpenMP iteration by scf-to-openmp).
  Value qs;     // [rows, head_dim] q scaled
  Value acc;    // [rows, head_dim] unnormalized output
  Value scores; // [rows, block_size] logits, then probabilities
  Value maxes, sums; // [rows]

  int64_t nslices() const { return c.headDim / c.sliceWidth(); }
  VectorType sliceType() { return VectorType::get({c.sliceWidth()}, e.f32()); }
  Value sliceAt(Value buf, Value r, int64_t j) {
    return vector::LoadOp::create(b, sliceType(), buf, ValueRange{r, e.idx(j * c.sliceWidth())});
  }
  void storeSlice(Value x, Value buf, Value r, int64_t j) {
    vector::StoreOp::create(b, x, buf, ValueRange{r, e.idx(j * c.sliceWidth())});
  }

  /// Logits of rows [r0, r1) of block |pb| for the tile's |nr| query rows into |scores|: a step
  /// of K rows is loaded and widened once for all query rows.
  void logits(Value pb, Value kvh, Value r0, Value r1, Value nr) {
    if (c.kTransposed)
      return logitsTransposed(pb, kvh, nr);
    forRows(e, r0, r1, c.rowsPerStep(), [&](Value row0, int64_t n) {
      SmallVector<SmallVector<Value>> kRows;
      for (int64_t i = 0; i < n; ++i)
        kRows.push_back(loadRowSlices(e, c, k, pb, kvh, e.addi(row0, e.idx(i))));
      e.forEach(e.idx(0), nr, e.idx(1), [&](Value r) {
        SmallVector<Value> qr;
        for (int64_t j = 0; j < nslices(); ++j)
          qr.push_back(sliceAt(qs, r, j));
        SmallVector<Value> dots;
        for (int64_t i = 0; i < n; ++i) {
          Value dot = e.mulf(qr[0], kRows[i][0]);
          for (int64_t j = 1; j < nslices(); ++j)
            dot = vector::FMAOp::create(b, qr[j], kRows[i][j], dot);
          dots.push_back(dot);
        }
        if (n == 1)
          memref::StoreOp::create(b, e.reduce(vector::CombiningKind::ADD, dots[0]), scores,
                                  ValueRange{r, row0});
        else
          vector::StoreOp::create(b, sumTree(e, dots), scores, ValueRange{r, row0});
      });
    });
  }

  /// logits from K stored transposed: every row of the block (the softmax masks the rows
  /// outside [r0, r1) by position), up to 4 query rows at a time, each column of the block's
  /// rows loaded and widened once for them and multiplied by each query row's broadcast q
  /// element: no sum trees.
  void logitsTransposed(Value pb, Value kvh, Value nr) {
    int64_t bs = c.blockSize;
    forRows(e, e.idx(0), nr, 4, [&](Value q0, int64_t n) {
      SmallVector<Value> dots(n);
      for (int64_t col = 0; col < c.headDim; ++col) {
        Value kc = e.loadRowF32(kT, {pb, kvh, e.idx(col), e.idx(0)}, bs);
        for (int64_t i = 0; i < n; ++i) {
          Value qe = e.splat(
              memref::LoadOp::create(b, qs, ValueRange{e.addi(q0, e.idx(i)), e.idx(col)}), bs);
          dots[i] = dots[i] ? Value(vector::FMAOp::create(b, qe, kc, dots[i])) : e.mulf(qe, kc);
        }
      }
      for (int64_t i = 0; i < n; ++i)
        vector::StoreOp::create(b, dots[i], scores, ValueRange{e.addi(q0, e.idx(i)), e.idx(0)});
    });
  }

  /// The online-softmax update of each query row for one block starting at token |start| whose
  /// rows [r0, r1) were computed: masks by position, turns logits into probabilities in place
  /// and rescales the row's accumulators.
  void softmax(Value start, Value r0, Value r1, Value nr, Value t0, Value base) {
    int64_t bs = c.blockSize;
    SmallVector<int32_t> lanes(bs);
    for (int64_t i = 0; i < bs; ++i)
      lanes[i] = static_cast<int32_t>(i);
    auto posType = VectorType::get({bs}, b.getI32Type());
    Value iota = arith::ConstantOp::create(b, DenseElementsAttr::get(posType, ArrayRef(lanes)));
    auto toI32 = [&](Value x) { return arith::IndexCastOp::create(b, b.getI32Type(), x); };
    // Positions of the block's lanes relative to its start: compare lanes, not positions, so the
    // i32 vector never holds a large token index.
    Value rowsLo = e.splat(toI32(r0), bs), rowsHi = e.splat(toI32(r1), bs);
    Value computed = arith::AndIOp::create(b, e.cmpi(arith::CmpIPredicate::sge, iota, rowsLo),
                                           e.cmpi(arith::CmpIPredicate::slt, iota, rowsHi));
    auto rowType = VectorType::get({bs}, e.f32());
    Value negInfs = e.splat(e.negInf(), bs), zeros = e.splat(e.cf(0.0f), bs);
    e.forEach(e.idx(0), nr, e.idx(1), [&](Value r) {
      // Row r is chunk position t0 + r / group, at sequence position p = base + that.
      Value p = e.addi(base, e.addi(t0, e.divi(r, e.idx(c.group()))));
      // Lane i (token start + i) is visible when lo <= start + i <= p, i.e. lo - start <= i <=
      // p - start; both bounds clamped to [-1, bs] before narrowing.
      Value hiLane = e.maxi(e.mini(e.subi(p, start), e.idx(bs)), e.idx(-1));
      Value mask = arith::AndIOp::create(
          b, computed, e.cmpi(arith::CmpIPredicate::sle, iota, e.splat(toI32(hiLane), bs)));
      if (c.window > 0) {
        Value lo = e.subi(p, e.idx(c.window - 1));
        Value loLane = e.maxi(e.mini(e.subi(lo, start), e.idx(bs)), e.idx(-1));
        mask = arith::AndIOp::create(
            b, mask, e.cmpi(arith::CmpIPredicate::sge, iota, e.splat(toI32(loLane), bs)));
      }
      Value lg = vector::LoadOp::create(b, rowType, scores, ValueRange{r, e.idx(0)});
      if (c.softcap > 0) {
        Value cap = e.splat(e.cf(c.softcap), bs);
        lg = e.mulf(cap, math::TanhOp::create(b, e.divf(lg, cap)));
      }
      lg = e.select(mask, lg, negInfs);
      Value mOld = memref::LoadOp::create(b, maxes, ValueRange{r});
      Value mNew = e.maxf(mOld, e.reduce(vector::CombiningKind::MAXIMUMF, lg));
      // Nothing seen yet: nothing to rescale (and exp(-inf - -inf) would be NaN).
      Value wasEmpty = e.cmpf(arith::CmpFPredicate::OEQ, mOld, e.negInf());
      Value alpha = e.select(wasEmpty, e.cf(0.0f), e.exp(e.subf(mOld, mNew)));
      // Masked lanes are zero by selection, whatever exp makes of them.
      Value prob = e.select(mask, e.exp(e.subf(lg, e.splat(mNew, bs))), zeros);
      vector::StoreOp::create(b, prob, scores, ValueRange{r, e.idx(0)});
      Value sOld = memref::LoadOp::create(b, sums, ValueRange{r});
      memref::StoreOp::create(b, e.addf(e.mulf(sOld, alpha), e.reduce(vector::CombiningKind::ADD, prob)),
                              sums, ValueRange{r});
      memref::StoreOp::create(b, mNew, maxes, ValueRange{r});
      Value alphas = e.splat(alpha, c.sliceWidth());
      for (int64_t j = 0; j < nslices(); ++j)
        storeSlice(e.mulf(sliceAt(acc, r, j), alphas), acc, r, j);
    });
  }

  /// acc[r] += p[r, row] * V[row] for rows [r0, r1) of block |pb|: a step of V rows is loaded
  /// and widened once for all query rows, and each query row's accumulators are loaded and
  /// stored once per step.
  void accumulateV(Value pb, Value kvh, Value r0, Value r1, Value nr) {
    forRows(e, r0, r1, c.rowsPerStep(), [&](Value row0, int64_t n) {
      SmallVector<SmallVector<Value>> vRows;
      for (int64_t i = 0; i < n; ++i)
        vRows.push_back(loadRowSlices(e, c, v, pb, kvh, e.addi(row0, e.idx(i))));
      e.forEach(e.idx(0), nr, e.idx(1), [&](Value r) {
        SmallVector<Value> probs;
        for (int64_t i = 0; i < n; ++i)
          probs.push_back(e.splat(
              memref::LoadOp::create(b, scores, ValueRange{r, e.addi(row0, e.idx(i))}),
              c.sliceWidth()));
        for (int64_t j = 0; j < nslices(); ++j) {
          Value a = sliceAt(acc, r, j);
          for (int64_t i = 0; i < n; ++i)
            a = vector::FMAOp::create(b, probs[i], vRows[i][j], a);
          storeSlice(a, acc, r, j);
        }
      });
    });
  }

  /// One (sequence |s|, kv head |kvh|, tile |tile|) iteration.
  void tile(Value s, Value kvh, Value tileIdx, Value chunk, Value capacity, Value numBlocks) {
    int64_t rowsMax = c.tileQueryRows(), d = c.headDim, bs = c.blockSize, g = c.group();
    qs = memref::AllocaOp::create(b, MemRefType::get({rowsMax, d}, e.f32()), e.stackAlign());
    acc = memref::AllocaOp::create(b, MemRefType::get({rowsMax, d}, e.f32()), e.stackAlign());
    scores = memref::AllocaOp::create(b, MemRefType::get({rowsMax, bs}, e.f32()), e.stackAlign());
    maxes = memref::AllocaOp::create(b, MemRefType::get({rowsMax}, e.f32()), e.stackAlign());
    sums = memref::AllocaOp::create(b, MemRefType::get({rowsMax}, e.f32()), e.stackAlign());

    Value t0 = e.muli(tileIdx, e.idx(c.tileRows()));
    Value nt = e.mini(e.idx(c.tileRows()), e.subi(chunk, t0));
    Value nr = e.muli(nt, e.idx(g));
    // A length beyond the block table would read past it: the table is the limit (as in
    // decode). base is the position of chunk row 0; it is negative when len < chunk, an
    // argument error whose rows then see no token and get zeros.
    Value len = e.mini(e.maxi(e.loadIndex(lens, {s}), e.idx(0)), capacity);
    Value base = e.subi(len, chunk);

    Value scaleW = e.splat(e.cf(c.scale), c.sliceWidth());
    e.forEach(e.idx(0), nr, e.idx(1), [&](Value r) {
      Value t = e.addi(t0, e.divi(r, e.idx(g)));
      Value h = e.addi(e.muli(kvh, e.idx(g)), e.remi(r, e.idx(g)));
      for (int64_t j = 0; j < nslices(); ++j) {
        Value qj = vector::LoadOp::create(b, sliceType(), q,
                                          ValueRange{s, t, h, e.idx(j * c.sliceWidth())});
        storeSlice(e.mulf(qj, scaleW), qs, r, j);
        storeSlice(e.splat(e.cf(0.0f), c.sliceWidth()), acc, r, j);
      }
      vector::StoreOp::create(b, e.splat(e.negInf(), bs), scores, ValueRange{r, e.idx(0)});
      memref::StoreOp::create(b, e.negInf(), maxes, ValueRange{r});
      memref::StoreOp::create(b, e.cf(0.0f), sums, ValueRange{r});
    });

    // Tokens any row of the tile sees: [lo, hi), the first row's window start to the last row.
    Value hi = e.maxi(e.mini(e.addi(base, e.addi(t0, nt)), len), e.idx(0));
    Value lo = e.idx(0);
    if (c.window > 0)
      lo = e.maxi(e.subi(e.addi(base, t0), e.idx(c.window - 1)), e.idx(0));
    lo = e.mini(lo, hi);
    Value blkLo = e.divi(lo, e.idx(bs));
    Value blkHi = e.select(e.cmpi(arith::CmpIPredicate::slt, lo, hi), e.ceilDiv(hi, bs), blkLo);
    e.forEach(blkLo, blkHi, e.idx(1), [&](Value blk) {
      Value pb = e.loadIndex(table, {s, blk});
      // A block id outside the pool would read outside it: such a block is skipped.
      Value inPool = arith::AndIOp::create(b, e.cmpi(arith::CmpIPredicate::sge, pb, e.idx(0)),
                                           e.cmpi(arith::CmpIPredicate::slt, pb, numBlocks));
      e.ifThenElse(inPool, [&] {
        Value start = e.muli(blk, e.idx(bs));
        Value r0 = e.subi(e.maxi(lo, start), start);
        Value r1 = e.subi(e.mini(hi, e.addi(start, e.idx(bs))), start);
        logits(pb, kvh, r0, r1, nr);
        softmax(start, r0, r1, nr, t0, base);
        accumulateV(pb, kvh, r0, r1, nr);
      });
    });

    e.forEach(e.idx(0), nr, e.idx(1), [&](Value r) {
      Value t = e.addi(t0, e.divi(r, e.idx(g)));
      Value h = e.addi(e.muli(kvh, e.idx(g)), e.remi(r, e.idx(g)));
      Value l = memref::LoadOp::create(b, sums, ValueRange{r});
      Value inv = e.select(e.cmpf(arith::CmpFPredicate::OGT, l, e.cf(0.0f)),
                           e.divf(e.cf(1.0f), l), e.cf(0.0f));
      Value invs = e.splat(inv, c.sliceWidth());
      for (int64_t j = 0; j < nslices(); ++j)
        vector::StoreOp::create(b, e.mulf(sliceAt(acc, r, j), invs), out,
                                ValueRange{s, t, h, e.idx(j * c.sliceWidth())});
    });
  }
};

func::FuncOp buildPrefillKernel(ModuleOp module, StringRef name, const PrefillConfig &c,
                                Location loc) {
  ImplicitLocOpBuilder b = ImplicitLocOpBuilder::atBlockEnd(loc, module.getBody());
  MLIRContext *ctx = b.getContext();
  auto fn = func::FuncOp::create(
      b, name, FunctionType::get(ctx, prefillArgTypes(ctx, c), TypeRange{}));
  fn.setPrivate();
  b.setInsertionPointToStart(fn.addEntryBlock());
  auto a = fn.getArguments();
  Emitter e{b};
  PrefillKernelBuilder kb{b, e, c, a[0], a[1], a[2], a[3], a[4], a[5], {}, {}, {}, {}, {}, {}};
  if (c.kTransposed)
    kb.kT = transposedKView(b, kb.k);
  Value batch = memref::DimOp::create(b, kb.q, 0);
  Value chunk = memref::DimOp::create(b, kb.q, 1);
  Value numBlocks = memref::DimOp::create(b, kb.k, 0);
  Value capacity = e.muli(memref::DimOp::create(b, kb.table, 1), e.idx(c.blockSize));
  Value tiles = e.ceilDiv(chunk, c.tileRows());
  e.parallel({batch, e.idx(c.kvHeads), tiles}, [&](ValueRange ivs) {
    kb.tile(ivs[0], ivs[1], ivs[2], chunk, capacity, numBlocks);
  });
  func::ReturnOp::create(b);
  return fn;
}

} // namespace

LogicalResult cpu::lowerPrefillAttention(ModuleOp module, PrefillAttentionOp op,
                                         llvm::StringMap<func::FuncOp> &kernels,
                                         bool kTransposed) {
  auto kType = cast<MemRefType>(op.getKPool().getType());
  auto qType = cast<MemRefType>(op.getQ().getType());
  int64_t window = static_cast<int64_t>(op.getWindow().value_or(0));
  PrefillConfig c{kType.getElementType(),
                  qType.getDimSize(2),
                  kType.getDimSize(1),
                  kType.getDimSize(2),
                  kType.getDimSize(3),
                  op.getScale().convertToFloat(),
                  // A window no int32 length can exceed is no window (and keeps the position
                  // arithmetic far from overflow).
                  window >= (int64_t(1) << 31) ? 0 : window,
                  op.getSoftcap() ? op.getSoftcap()->convertToFloat() : 0.0f,
                  kTransposed};
  if (c.headDim % 4 != 0 || c.headDim > kMaxHeadDim)
    return op.emitOpError("head_dim ")
           << c.headDim << " is not supported by the CPU lowering (needs a multiple of 4 up to "
           << kMaxHeadDim << ")";
  if (c.blockSize > kMaxBlockSize)
    return op.emitOpError("block size ")
           << c.blockSize << " is not supported by the CPU lowering (at most " << kMaxBlockSize
           << ")";
  if (failed(requireIdentityLayouts(op, op->getOperands(), "CPU")))
    return failure();

  std::string key = "prefill_" + c.mangle();
  func::FuncOp kernel = kernels.lookup(key);
  if (!kernel) {
    std::string name = "__hg_cpu_prefill_" + c.mangle();
    for (int i = 0; module.lookupSymbol(name); ++i)
      name = "__hg_cpu_prefill_" + c.mangle() + "_" + std::to_string(i);
    kernel = buildPrefillKernel(module, name, c, op.getLoc());
    kernels[key] = kernel;
  }

  ImplicitLocOpBuilder b(op.getLoc(), op);
  SmallVector<Value> operands{op.getQ(),         op.getKPool(),   op.getVPool(),
                              op.getBlockTable(), op.getSeqLens(), op.getOut()};
  for (auto [operand, type] : llvm::zip(operands, prefillArgTypes(b.getContext(), c)))
    if (operand.getType() != type)
      operand = memref::CastOp::create(b, type, operand);

  auto segment = op->getParentOfType<SegmentOp>();
  Value id, device;
  if (segment) {
    id = segment.buildIdValue(b, b.getLoc());
    device = arith::ConstantIntOp::create(b, static_cast<int64_t>(Device::cpu), 32);
    auto beginFn = declareFunction(module, "hgrt_device_begin", {b.getI64Type(), b.getI32Type()});
    func::CallOp::create(b, beginFn, ValueRange{id, device});
  }
  func::CallOp::create(b, kernel, operands);
  if (segment) {
    auto endFn = declareFunction(module, "hgrt_device_end", {b.getI64Type(), b.getI32Type()});
    func::CallOp::create(b, endFn, ValueRange{id, device});
  }
  op.erase();
  return success();
}
