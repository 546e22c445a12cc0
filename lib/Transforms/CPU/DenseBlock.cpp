//===- DenseBlock.cpp - one KV block of the dense CPU attention kernel -----===//
//
// The code the dense kernel (DenseKernel.cpp) emits for one KV block of one kv-head unit in a
// (sequence, chunk) iteration: q.k logits of the sub-group's heads, the online-softmax update and
// the V accumulation, plus the software prefetch of the rows it reads next.
//
//===----------------------------------------------------------------------===//
#include "CPUCodegen.h"

#include "mlir/Dialect/X86Vector/X86VectorDialect.h"

using namespace mlir;
using namespace mlir::hybridgen;
using namespace mlir::hybridgen::cpu;

namespace {

/// Sums a stream of equal-width vectors into one vector holding one sum per input, with a
/// transpose-add tree: two vectors of |heads| sums-in-progress (|partials| lanes each) are
/// shuffled into their low and high halves and added, so every level halves the partials and
/// doubles the sums per vector. n inputs of w lanes cost n-1 shuffle pairs + adds plus the final
/// folds, instead of log2(w) shuffles and adds per input for separate reductions; and the result
/// is a vector that is stored with one instruction. Inputs are combined as they arrive (like a
/// binary counter), so at most log2(n)+1 vectors are live per stream. Needs a power-of-two count
/// <= w of power-of-two-wide vectors.
struct SumTree {
  Emitter *e;
  int64_t width;
  bool max = false; // maximumf instead of addf (the softmax's block maxima)
  SmallVector<std::pair<Value, int64_t>> stack; // (vector, sums it holds)

  Value op(Value x, Value y) { return max ? e->maxf(x, y) : e->addf(x, y); }

  Value combine(Value x, Value y, int64_t heads) {
    int64_t partials = width / heads, half = partials / 2;
    SmallVector<int64_t> lo, hi;
    for (int64_t side = 0; side < 2; ++side)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
          int64_t base = side * width + h * partials + i;
          lo.push_back(base);
          hi.push_back(base + half);
        }
    return op(vector::ShuffleOp::create(e->b, x, y, lo), vector::ShuffleOp::create(e->b, x, y, hi));
  }
  void push(Value v) {
    int64_t heads = 1;
    while (!stack.empty() && stack.back().second == heads) {
      v = combine(stack.pop_back_val().first, v, heads);
      heads *= 2;
    }
    stack.push_back({v, heads});
  }
  /// vector<n> of the n pushed vectors' sums, in push order.
  Value finish() {
    assert(stack.size() == 1 && "push a power-of-two count of vectors");
    auto [v, heads] = stack.pop_back_val();
    for (int64_t partials = width / heads; partials > 1; partials /= 2) {
      SmallVector<int64_t> lo, hi;
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < partials / 2; ++i) {
          lo.push_back(h * partials + i);
          hi.push_back(h * partials + i + partials / 2);
        }
      v = op(vector::ShuffleOp::create(e->b, v, v, lo), vector::ShuffleOp::create(e->b, v, v, hi));
    }
    return v;
  }
};

} // namespace

/// Rows of a block whose logits one sum tree produces: the largest power of two <= the dot width
/// dividing the block size; 0 when the dot width is not a power of two (odd head dims), where the
/// row-by-row path is used.
int64_t cpu::treeRows(const KernelConfig &c) {
  int64_t w = c.dotWidth();
  if (!llvm::isPowerOf2_64(w))
    return 0;
  int64_t r = w;
  while (c.blockSize % r != 0)
    r /= 2;
  return r;
}

/// Whether bf16 rows are widened two registers at a time as (even, odd) halves: one full-register
/// load (64 bytes on AVX-512, 32 on AVX2) viewed as lanes x i32, a shift gives the even elements
/// as f32 and a mask the odd ones (2 ops per 2 x lanes elements instead of a widening shuffle
/// plus a shift per register). The element order is then
/// permuted: q is permuted alike (a dot product does not care), and the V accumulators keep the
/// permuted order until they are written out.
bool cpu::bf16Pairs(const KernelConfig &c) {
  // Not in the overlapped kernel on 512-bit tiles: there p.V widening each V row's tile from two
  // 32-byte loads read 0.01-0.03 more of the roof from DRAM in all six cells measured (bf16,
  // Emerald Rapids, 128K x 1, 32K x 8, 128K x 8, 1 and 2 threads), though it computes ~4% slower
  // cache-resident (docs/cpu-runs.md, "bf16 V widened by halves in the overlapped kernel").
  if (c.vectorBits == 512 && overlapPieces(c))
    return false;
  int64_t pair = 2 * c.lanes();
  return c.kvType.isBF16() && c.dotWidth() == c.lanes() && c.headDim % pair == 0 &&
         c.accTileWidth() % pair == 0;
}

/// Whether the softmax statistics of the |gs| heads are carried as two vector<gs> (max, sum):
/// needs a power-of-two block no narrower than gs rounded up to a power of two, the rows of the
/// max tree. A group that is not a power of two (SmolLM2's 9/3 heads) pads the tree with -inf
/// rows, on the interleaved 16-bit kernel of Zen 4 only: there it read +10-48% from DRAM (bf16,
/// head dim 64, group 3, 16K/64K tokens, batch 1/4, 1/2 threads), while the AVX2 kernels did not
/// change and f32 read a little less (0.58 -> 0.56 at 64K; docs/cpu-runs.md, "Groups that are
/// not a power of two").
bool cpu::vectorStats(const KernelConfig &c) {
  int64_t gs = c.subGroup(), bs = c.blockSize;
  if (gs < 2 || !llvm::isPowerOf2_64(bs) || int64_t(llvm::PowerOf2Ceil(gs)) > bs)
    return false;
  // K transposed (16-bit) takes them too: its group-3 kernel read 20.0-20.4 GB/s from DRAM with
  // them against 18.5-19.7 without (bf16, 64K tokens, one thread).
  return llvm::isPowerOf2_64(gs) || interleavedFma(c) || (c.kTransposed && !c.kvType.isF32());
}

bool cpu::bf16DotApplies(const KernelConfig &c) {
  int64_t pair = 2 * c.lanes();
  return c.bf16Dot && c.kvType.isBF16() && c.topK == 0 &&
         c.vectorBits >= 256 && c.dotWidth() == c.lanes() && c.headDim % pair == 0 &&
         treeRows(c) > 0 &&
         c.blockSize % 2 == 0 && c.accTileWidth() % pair == 0;
}

int64_t cpu::bf16DotHalves(const KernelConfig &c) { return c.bf16DotRounded ? 1 : 2; }

/// Pieces (one kv head's rows of one block, K or V) under this size need their V rows asked for
/// a far piece ahead, from the logits: the near V prefetch, issued with the same piece's logits,
/// comes too late for them (SmolLM2's 2 KiB 16-bit pieces), and spreading it into p.V read ~4%
/// less on Zen 4.
constexpr int64_t kSmallPieceBytes = 4096;

bool cpu::widePvTile(const KernelConfig &c) {
  // 32 registers and no bf16 dot products first: those decide accTileWidth, which
  // spreadPrefetch reaches through bf16DotLogits.
  return c.targetRegs() == 32 && !c.kvType.isF32() && !(c.bf16Dot && c.kvType.isBF16()) &&
         spreadPrefetch(c);
}

bool cpu::splatProbs(const KernelConfig &c) { return c.splatProbs && !bf16DotApplies(c); }

Value cpu::allocScores(Emitter &e, const KernelConfig &c) {
  int64_t gs = c.subGroup(), bs = c.blockSize, splats = splatProbs(c) ? bs * c.dotWidth() : 0;
  Value scores = memref::AllocaOp::create(e.b, MemRefType::get({gs, bs + splats}, e.f32()),
                                          e.stackAlign());
  // Lanes outside a block's valid rows are masked, but never leave them uninitialized.
  for (int64_t g = 0; g < gs; ++g) {
    vector::StoreOp::create(e.b, e.splat(e.negInf(), bs), scores, ValueRange{e.idx(g), e.idx(0)});
    if (splats > 0)
      vector::StoreOp::create(e.b, e.splat(e.cf(0.0f), splats), scores,
                              ValueRange{e.idx(g), e.idx(bs)});
  }
  return scores;
}

bool cpu::spreadPrefetch(const KernelConfig &c) {
  return c.spreadPrefetch && c.kTransposed && c.farPieces() > 0 && treeRows(c) > 0 &&
         (c.pieceBytes() >= kSmallPieceBytes || bf16DotLogits(c));
}

/// Whether the transposed logits ask for the far piece's V rows: only for small pieces. From 4 KiB
/// on the near prefetch of this piece's V rows is early enough, and the far one only costs
/// instructions and line-fill buffers. Emerald Rapids, Llama-3-8B shape (4 KiB bf16/f16 pieces,
/// 8 KiB f32), 3 interleaved rounds of 128K x 1 and 32K/128K x 8: mean of 24 medians 0.783 ->
/// 0.809 of the roof (f16 0.733 -> 0.765 at 128K x 1, f32 0.832 -> 0.862; bf16 level on one
/// thread), the x86-64-v3 code 0.688 -> 0.757; SmolLM2's 2 KiB bf16 pieces read 0.72-0.77 ->
/// 0.69-0.72 without it (docs/cpu-runs.md, "The far prefetch asks for K only"). With
/// spreadPrefetch p.V asks for them instead.
static bool farVInLogits(const KernelConfig &c) {
  return !spreadPrefetch(c) && c.pieceBytes() < kSmallPieceBytes;
}

bool cpu::bf16DotLogits(const KernelConfig &c) {
  return c.kTransposed && bf16DotApplies(c) && c.bf16DotRounded &&
         transposedRowTile(c) % c.lanes() == 0 && c.headDim % 8 == 0;
}

bool cpu::interleavedFma(const KernelConfig &c) {
  return !bf16DotApplies(c) && !c.kTransposed && !c.kvType.isF32() && c.topK == 0 &&
         c.targetRegs() == 32 && c.vectorBits < c.targetVectorBits && c.dotWidth() == c.lanes() &&
         treeRows(c) >= 4;
}

bool cpu::pacedPrefetch(const KernelConfig &c) {
  return c.targetRegs() == 16 || c.kvType.isF32();
}

bool cpu::qAtUse(const KernelConfig &c) { return c.targetRegs() == 16; }

int64_t cpu::dotPairColumn(int64_t i, int64_t lanes) {
  int64_t half = i / lanes, lane = i % lanes;
  return (lane / 4) * 8 + half * 4 + lane % 4;
}

/// Asks for the K and V rows of kv head |kvh| in pool block |pb|.
void DenseBlock::prefetchPiece(Value pb, Value kvh) {
  e.forEach(e.idx(0), e.idx(c.blockSize), e.idx(1), [&](Value r) {
    prefetchRow(k, pb, kvh, r, /*locality=*/3);
    prefetchRow(v, pb, kvh, r, /*locality=*/2);
  });
}

/// The cache lines of row |r| of kv head |kvh| in pool block |pb| of |pool| (K or V), with
/// |locality| as llvm.prefetch takes it (3: prefetcht0, 2: prefetcht1). The near prefetches take
/// K rows into L1 (prefetcht0), V rows into L2 (prefetcht1). V is prefetched while the same piece's
/// logits are computed, and L1 then holds the K piece in use and the next one's prefetched rows;
/// leaving V in L2 keeps those from being evicted, and the V loads still find their lines close.
/// Measured f32 (64K and 128K tokens, batch 1 and 8, 1 and 2 threads, three interleaved A/B runs
/// of 3 repeats): both into L1 mean 0.800, 0.828, 0.837 of the roof; V into L2 0.848, 0.865,
/// 0.844; both into L2 0.806, 0.832; only every other line (the adjacent-line prefetcher fetching
/// the rest) 0.68; V of the next piece instead of this one, into L2, 0.767. The bf16 vector kernel
/// is bound by its math and did not change (0.642 -> 0.645).
void DenseBlock::prefetchRow(Value pool, Value pb, Value kvh, Value r, int32_t locality) {
  if (prefetchAfter) {
    // Row 0 instead of row r if the previous row's result is NaN: either address is correct (a
    // prefetch changes no result), but LLVM cannot prove the address independent of that row,
    // so instruction selection keeps the prefetches after it. Without this it hoisted all of a
    // block's ~300 prefetches (V, far K and V of 16 rows) to the top of the block: a burst that
    // fills the core's L1 miss buffers while the math waits behind it.
    Value nan = e.cmpf(arith::CmpFPredicate::UNO, prefetchAfter, prefetchAfter);
    r = e.select(nan, e.idx(0), r);
  }
  int64_t eltBytes = c.kvType.getIntOrFloatBitWidth() / 8;
  int64_t perLine = std::max<int64_t>(1, 64 / eltBytes);
  for (int64_t col = 0; col < c.headDim; col += perLine)
    prefetchLine(pool, pb, kvh, r, e.idx(col), locality);
}

void DenseBlock::prefetchLine(Value pool, Value pb, Value kvh, Value r, Value col,
                              int32_t locality) {
  memref::PrefetchOp::create(e.b, pool, ValueRange{pb, kvh, r, col}, /*isWrite=*/false, locality,
                             /*isDataCache=*/true);
}

void DenseBlock::prefetchPieceLine(Value pieces, Value pb, Value kvh, Value at) {
  memref::PrefetchOp::create(e.b, pieces, ValueRange{pb, kvh, at}, /*isWrite=*/false,
                             /*localityHint=*/2, /*isDataCache=*/true);
}

void DenseBlock::rowTimesV(Value probs, Value pb, Value kvh, Value r, int64_t col,
                           MutableArrayRef<Value> tile, Value vAt) {
  int64_t w = c.dotWidth(), np = c.accTileWidth() / w;
  SmallVector<Value> vs = loadSlices(vAt ? vPieces : v, pb, kvh, r, col, c.accTileWidth(), vAt);
  for (int64_t g = 0; g < c.subGroup(); ++g) {
    // A scalar load splat from memory becomes one broadcast load; with splatProbs a plain load
    // of the copy the softmax wrote.
    Value pg =
        splatProbs(c)
            ? vector::LoadOp::create(
                  e.b, VectorType::get({w}, e.f32()), probs,
                  ValueRange{e.idx(g), e.addi(e.idx(c.blockSize), e.muli(r, e.idx(w)))})
                  .getResult()
            : e.splat(memref::LoadOp::create(e.b, probs, ValueRange{e.idx(g), r}), w);
    for (int64_t i = 0; i < np; ++i)
      tile[g * np + i] = vector::FMAOp::create(e.b, pg, vs[i], tile[g * np + i]);
  }
}

/// Columns [col, col + width) of row |r| as dot-width f32 slices, in the (even, odd) order of
/// bf16Pairs when it applies.
SmallVector<Value> DenseBlock::loadSlices(Value pool, Value pb, Value kvh, Value r, int64_t col,
                                          int64_t width, Value pieceAt) {
  ImplicitLocOpBuilder &b = e.b;
  int64_t w = c.dotWidth();
  auto at = [&](int64_t j) -> SmallVector<Value> {
    if (pieceAt)
      return {pb, kvh, e.addi(pieceAt, e.idx(j))};
    return {pb, kvh, r, e.idx(col + j)};
  };
  SmallVector<Value> slices;
  if (!bf16Pairs(c)) {
    for (int64_t j = 0; j < width; j += w)
      slices.push_back(e.loadRowF32(pool, at(j), w));
    return slices;
  }
  for (int64_t j = 0; j < width; j += 2 * w) {
    Value raw =
        vector::LoadOp::create(b, VectorType::get({2 * w}, c.kvType), pool, at(j));
    auto [even, odd] = e.bf16EvenOdd(raw);
    slices.append({even, odd});
  }
  return slices;
}

/// Per-head partial dot products of row |r| with q: one FMA chain per head over w-wide
/// slices, each K slice loaded and widened once for all heads in [g0, g1); q from |qv|, or from
/// |qs| where it is used when |qv| is empty (qAtUse).
SmallVector<Value> DenseBlock::rowPartials(Value pb, Value kvh, Value r, ArrayRef<Value> qv,
                                           int64_t g0, int64_t g1) {
  int64_t nw = c.headDim / c.dotWidth();
  SmallVector<Value> part(g1 - g0);
  SmallVector<Value> ks = loadSlices(k, pb, kvh, r, 0, c.headDim);
  for (int64_t j = 0; j < nw; ++j) {
    Value kj = ks[j];
    for (int64_t g = g0; g < g1; ++g) {
      Value q;
      if (qv.empty()) {
        Value h = e.addi(e.muli(unit, e.idx(c.subGroup())), e.idx(g));
        q = vector::LoadOp::create(e.b, VectorType::get({c.dotWidth()}, e.f32()), qs,
                                   ValueRange{h, e.idx(j * c.dotWidth())});
      } else {
        q = qv[g * nw + j];
      }
      part[g - g0] =
          j == 0 ? e.mulf(q, kj) : Value(vector::FMAOp::create(e.b, q, kj, part[g - g0]));
    }
  }
  return part;
}

/// rowPartials for |rows| rows at once with bf16 dot products (bf16DotApplies): K rows as 2w-wide
/// bf16 slices in natural order against q's (hi, lo) halves, both into one chain per row and
/// head. The dot products are emitted slice by slice across all rows and heads, so that rows x
/// heads (16) independent chains alternate: vdpbf16ps has a latency of ~6 cycles at 2 per cycle
/// (AMD Zen 4).
SmallVector<SmallVector<Value>> DenseBlock::rowsPartialsDot(Value pb, Value kvh,
                                                            ArrayRef<Value> rows, int64_t g0,
                                                            int64_t g1) {
  int64_t w = c.dotWidth(), ns = c.headDim / (2 * w), nr = rows.size(), nh = g1 - g0;
  auto sliceType = VectorType::get({2 * w}, c.kvType);
  Value zero = e.splat(e.cf(0.0f), w);
  SmallVector<SmallVector<Value>> part(nr, SmallVector<Value>(nh, zero));
  for (int64_t j = 0; j < ns; ++j) {
    SmallVector<Value> kj;
    for (Value r : rows)
      kj.push_back(
          vector::LoadOp::create(e.b, sliceType, k, ValueRange{pb, kvh, r, e.idx(j * 2 * w)}));
    for (int64_t half = 0; half < bf16DotHalves(c); ++half) {
      // q's halves are loaded where they are used: loaded once per block as values, LLVM copied
      // all of them to spill slots at the top of every block.
      SmallVector<Value> qj;
      for (int64_t g = g0; g < g1; ++g) {
        Value h = e.addi(e.muli(unit, e.idx(c.subGroup())), e.idx(g));
        qj.push_back(vector::LoadOp::create(e.b, sliceType, qs,
                                            ValueRange{h, e.idx(half), e.idx(j * 2 * w)}));
      }
      for (int64_t i = 0; i < nr; ++i)
        for (int64_t g = g0; g < g1; ++g)
          part[i][g - g0] =
              x86vector::DotBF16Op::create(e.b, part[i][g - g0], qj[g - g0], kj[i]);
    }
  }
  return part;
}

/// The f32-FMA counterpart of rowsPartialsDot (interleavedFma): for each column step (one load:
/// 2w bf16 as (even, odd) slices, or w f16), the rows' K slices times every head's q slice, q
/// loaded from the stack where it is used. Row by row, each row's chains waited on the FMA latency
/// and the 2-head passes' hoisted q slices were spilled; this way the compute rate from cache
/// went 14.6-14.9 -> 18.8-19.7 GB/s (Zen 4, one thread, 16K tokens).
SmallVector<SmallVector<Value>> DenseBlock::rowsPartialsFma(Value pb, Value kvh,
                                                            ArrayRef<Value> rows, int64_t g0,
                                                            int64_t g1) {
  int64_t w = c.dotWidth(), nr = rows.size(), nh = g1 - g0;
  int64_t step = bf16Pairs(c) ? 2 * w : w;
  auto sliceType = VectorType::get({w}, e.f32());
  SmallVector<SmallVector<Value>> part(nr, SmallVector<Value>(nh));
  for (int64_t col = 0; col < c.headDim; col += step) {
    for (int64_t i = 0; i < nr; ++i) {
      SmallVector<Value> ks = loadSlices(k, pb, kvh, rows[i], col, step);
      for (int64_t sl = 0; sl < int64_t(ks.size()); ++sl)
        for (int64_t g = g0; g < g1; ++g) {
          Value h = e.addi(e.muli(unit, e.idx(c.subGroup())), e.idx(g));
          Value q = vector::LoadOp::create(e.b, sliceType, qs, ValueRange{h, e.idx(col + sl * w)});
          Value &a = part[i][g - g0];
          a = a ? Value(vector::FMAOp::create(e.b, q, ks[sl], a)) : e.mulf(q, ks[sl]);
        }
    }
  }
  return part;
}

/// Logits of every row of the block into |scores|. Rows outside the token range are computed
/// too (they are in the block, so in bounds) and masked by position afterwards: their values
/// never reach the softmax, and the row groups stay static and fully unrolled.
void DenseBlock::logitsByTree(Value pb, Value kvh, ArrayRef<Value> qv) {
  int64_t gs = c.subGroup(), bs = c.blockSize, rows = treeRows(c);
  // Heads per pass over the group's rows: each head keeps up to log2(rows)+1 tree vectors
  // live, so 4 heads plus the K slice stay within the 32 zmm of AVX-512. f32 rows are used as
  // loaded, so there the pass is also sized to keep its q slices in registers (<= 16 zmm): for
  // head dim 128 that is 2 heads, measured cache-resident 31 -> 33-36 GB/s, and at 64K tokens from
  // within noise to +5% of the roof. bf16/f16 rows are widened once per pass, which 2-head passes
  // double (measured 5-10% slower), so they keep 4.
  // With AVX2's 16 ymm the same budgets halve: 2 heads, q slices in <= 8 registers.
  int64_t regs = c.vectorRegs();
  int64_t hb = std::min<int64_t>(gs, regs / 8);
  if (c.kvType.isF32())
    hb = std::clamp<int64_t>((regs / 2) / (c.headDim / c.dotWidth()), 1, hb);
  // The bf16 dot products read K as it is stored (no widening), so a pass takes all heads (up to
  // 8) and as many rows at a time as keep <= 16 chains: with 2-head passes LLVM kept the first
  // pass's K slices for the second and spilled them.
  bool dot = bf16DotApplies(c);
  if (dot)
    hb = std::min<int64_t>(gs, 8);
  // Rows per group: a power of two, so that groups tile the tree's rows (a power of two >= 4
  // wherever a group path applies). interleavedFma: 4 rows x the pass's heads (2 measured
  // slower).
  bool grouped = dot || interleavedFma(c);
  int64_t groupRows =
      dot ? int64_t(llvm::bit_floor(uint64_t(std::clamp<int64_t>(16 / hb, 1, std::min<int64_t>(4, rows)))))
          : 4;
  e.loop(e.idx(0), e.idx(bs), e.idx(rows), {}, [&](Value r0, ValueRange) {
    for (int64_t g0 = 0; g0 < gs; g0 += hb) {
      int64_t g1 = std::min(gs, g0 + hb);
      SmallVector<SumTree> trees(g1 - g0, SumTree{&e, c.dotWidth(), false, {}});
      SmallVector<Value> group;
      for (int64_t i = 0; i < rows; ++i) {
        Value r = e.addi(r0, e.idx(i));
        if (g0 == 0) {
          prefetchRow(v, pb, kvh, r, /*locality=*/2);
          // The far prefetch: the same row of K and V of the piece c.farPieces() ahead, into L2.
          // The near prefetches alone leave each piece's lines to arrive just in time, and on
          // the Zen 4 guest (docs/cpu-runs.md, "Memory behaviour on Zen 4") the kernel then
          // read 0.19-0.24 of the roof for bf16 and 0.33-0.42 for f32 on one thread; with this
          // 0.30-0.35 and 0.38-0.44 (16K and 64K tokens, batch 1 and 8; 2 threads gained too).
          // The far prefetch alone, without the near ones, measured no better than none.
          if (pbFar) {
            prefetchRow(k, pbFar, kvhFar, r, /*locality=*/2);
            prefetchRow(v, pbFar, kvhFar, r, /*locality=*/2);
          }
        }
        if (grouped) {
          // Groups of groupRows rows, pushed in row order.
          group.push_back(r);
          if (int64_t(group.size()) == groupRows) {
            SmallVector<SmallVector<Value>> parts =
                dot ? rowsPartialsDot(pb, kvh, group, g0, g1)
                    : rowsPartialsFma(pb, kvh, group, g0, g1);
            if (g0 == 0 && pacedPrefetch(c))
              prefetchAfter = vector::ExtractOp::create(e.b, parts.back()[0], 0);
            for (ArrayRef<Value> part : parts)
              for (int64_t g = g0; g < g1; ++g)
                trees[g - g0].push(part[g - g0]);
            group.clear();
          }
          continue;
        }
        SmallVector<Value> part = rowPartials(pb, kvh, r, qv, g0, g1);
        if (g0 == 0 && pacedPrefetch(c))
          prefetchAfter = vector::ExtractOp::create(e.b, part[0], 0);
        for (int64_t g = g0; g < g1; ++g)
          trees[g - g0].push(part[g - g0]);
      }
      for (int64_t g = g0; g < g1; ++g)
        vector::StoreOp::create(e.b, trees[g - g0].finish(), scores, ValueRange{e.idx(g), r0});
    }
    prefetchAfter = Value();
    return SmallVector<Value>{};
  });
}

int64_t cpu::transposedRowTile(const KernelConfig &c) {
  int64_t most = 2 * c.lanes(), bs = c.blockSize;
  for (int64_t t = std::min(bs, most); t > 1; --t)
    if (bs % t == 0)
      return t;
  return 1;
}

void DenseBlock::logitsTransposed(Value pb, Value kvh) {
  int64_t gs = c.subGroup(), bs = c.blockSize, hd = c.headDim, tile = transposedRowTile(c);
  // With bf16DotLogits each accumulator is one register of |lanes| rows (vdpbf16ps's f32 lanes),
  // |subs| of them per tile; the f32 FMAs take the tile as one vector.
  bool dot = bf16DotLogits(c), farV = farVInLogits(c);
  // bf16 K whose tile is two registers of rows (AVX2: 16 rows of 8 lanes): one load of a
  // column's 2 x lanes rows viewed as lanes x i32 gives the even rows as f32 by a shift and the
  // odd rows by a mask (p.V widens V rows alike, bf16Pairs), instead of two widening loads and
  // two shifts; even and odd rows keep their own accumulators, zipped back into row order once
  // per tile.
  int64_t l = c.lanes();
  bool halves = !dot && c.kvType.isBF16() && tile == 2 * l;
  int64_t subs = dot ? tile / l : halves ? 2 : 1, width = dot || halves ? l : tile;
  // Two chains per head halve the FMA latency each waits on; 2 x 4 heads x 2 registers per tile
  // is half the 32 registers of AVX-512 (on 16-register targets: 2 heads).
  int64_t chains = gs * 2 * 2 <= c.vectorRegs() / 2 ? 2 : 1;
  // Columns per loop iteration: a loop, not the whole head dim unrolled, since straight-line
  // code of 128 columns x 4 heads (Llama-3-8B) let LLVM's scheduler hoist the column loads and
  // spill them (0.33 of the roof against 0.53 row-major, AMD Zen 4, one thread).
  int64_t unroll = hd % 8 == 0 ? 8 : 4;
  // The block's V rows are prefetched as the columns go: |perStep| rows per iteration.
  int64_t perStep = std::max<int64_t>(1, (unroll * bs + hd - 1) / hd);
  // Interleaves two columns' |l| rows into the (column 2j, column 2j+1) pairs of each row.
  SmallVector<int64_t> interleave;
  for (int64_t i = 0; i < l; ++i)
    interleave.append({i, l + i});
  auto colType = VectorType::get({l}, c.kvType);
  auto pairType = VectorType::get({2 * l}, c.kvType);
  for (int64_t rt = 0; rt < bs; rt += tile) {
    SmallVector<Value> zeros(gs * chains * subs, e.splat(e.cf(0.0f), width));
    SmallVector<Value> acc = e.loop(e.idx(0), e.idx(hd), e.idx(unroll), zeros,
                                    [&](Value c0, ValueRange carried) {
      SmallVector<Value> a(carried);
      if (rt == 0) {
        Value first = e.divi(e.muli(c0, e.idx(bs)), e.idx(hd));
        for (int64_t i = 0; i < perStep; ++i) {
          Value r = e.mini(e.addi(first, e.idx(i)), e.idx(bs - 1));
          prefetchRow(v, pb, kvh, r, /*locality=*/2);
          if (pbFar) {
            prefetchRow(k, pbFar, kvhFar, r, /*locality=*/2);
            if (farV)
              prefetchRow(v, pbFar, kvhFar, r, /*locality=*/2);
          }
        }
      }
      if (dot) {
        for (int64_t u = 0; u < unroll; u += 2) {
          Value col = e.addi(c0, e.idx(u)), colOdd = e.addi(col, e.idx(1));
          Value pairIndex = e.divi(col, e.idx(2));
          SmallVector<Value> qp;
          for (int64_t g = 0; g < gs; ++g) {
            // One i32 of two bf16 q elements, broadcast: vpbroadcastd from memory.
            Value h = e.addi(e.muli(unit, e.idx(gs)), e.idx(g));
            Value pair = memref::LoadOp::create(e.b, qs, ValueRange{h, pairIndex});
            qp.push_back(vector::BitCastOp::create(e.b, pairType, e.splat(pair, l)));
          }
          for (int64_t sub = 0; sub < subs; ++sub) {
            Value row = e.idx(rt + sub * l);
            Value even = vector::LoadOp::create(e.b, colType, kT, ValueRange{pb, kvh, col, row});
            Value odd = vector::LoadOp::create(e.b, colType, kT, ValueRange{pb, kvh, colOdd, row});
            Value kp = vector::ShuffleOp::create(e.b, even, odd, interleave);
            for (int64_t g = 0; g < gs; ++g) {
              Value &x = a[(g * chains + (u / 2) % chains) * subs + sub];
              x = x86vector::DotBF16Op::create(e.b, x, kp, qp[g]);
            }
          }
        }
        return a;
      }
      for (int64_t u = 0; u < unroll; ++u)
        columnLogits(pb, kvh, e.addi(c0, e.idx(u)), rt, tile, chains, u % chains, a, 0, gs);
      return a;
    });
    storeColumnLogits(acc, rt, chains, subs, width, halves, 0, gs);
  }
}

void DenseBlock::columnLogits(Value pb, Value kvh, Value col, int64_t rt, int64_t tile,
                              int64_t chains, int64_t chain, MutableArrayRef<Value> acc,
                              int64_t g0, int64_t g1, Value kAt) {
  int64_t l = c.lanes();
  bool halves = c.kvType.isBF16() && tile == 2 * l;
  int64_t subs = halves ? 2 : 1, width = halves ? l : tile;
  Value pool = kAt ? kPieces : kT;
  SmallVector<Value> at = kAt ? SmallVector<Value>{pb, kvh, kAt}
                              : SmallVector<Value>{pb, kvh, col, e.idx(rt)};
  SmallVector<Value> kc;
  if (halves) {
    Value raw = vector::LoadOp::create(e.b, VectorType::get({tile}, c.kvType), pool, at);
    auto [even, odd] = e.bf16EvenOdd(raw);
    kc = {even, odd};
  } else {
    kc.push_back(e.loadRowF32(pool, at, tile));
  }
  for (int64_t g = g0; g < g1; ++g) {
    Value h = e.addi(e.muli(unit, e.idx(c.subGroup())), e.idx(g));
    Value qe = e.splat(memref::LoadOp::create(e.b, qs, ValueRange{h, col}), width);
    for (int64_t sub = 0; sub < subs; ++sub) {
      Value &x = acc[((g - g0) * chains + chain) * subs + sub];
      x = vector::FMAOp::create(e.b, qe, kc[sub], x);
    }
  }
}

void DenseBlock::storeColumnLogits(ArrayRef<Value> acc, int64_t rt, int64_t chains, int64_t subs,
                                   int64_t width, bool halves, int64_t g0, int64_t g1) {
  int64_t l = c.lanes();
  for (int64_t g = g0; g < g1; ++g) {
    SmallVector<Value> sums;
    for (int64_t sub = 0; sub < subs; ++sub) {
      Value sum = acc[(g - g0) * chains * subs + sub];
      for (int64_t ch = 1; ch < chains; ++ch)
        sum = e.addf(sum, acc[((g - g0) * chains + ch) * subs + sub]);
      sums.push_back(sum);
    }
    if (halves) { // rows (0, 2, ..) and (1, 3, ..) zip back into row order
      SmallVector<int64_t> zip;
      for (int64_t i = 0; i < l; ++i)
        zip.append({i, l + i});
      sums = {vector::ShuffleOp::create(e.b, sums[0], sums[1], zip)};
    }
    for (size_t sub = 0; sub < sums.size(); ++sub)
      vector::StoreOp::create(e.b, sums[sub], scores,
                              ValueRange{e.idx(g), e.idx(rt + int64_t(sub) * width)});
  }
}

/// Logits of rows [r0, r1) one row at a time (dot widths that are not a power of two).
void DenseBlock::logitsByRow(Value pb, Value kvh, Value r0, Value r1, ArrayRef<Value> qv) {
  int64_t gs = c.subGroup();
  e.loop(r0, r1, e.idx(1), {}, [&](Value r, ValueRange) {
    SmallVector<Value> part = rowPartials(pb, kvh, r, qv, 0, gs);
    for (int64_t g = 0; g < gs; ++g)
      memref::StoreOp::create(e.b, e.reduce(vector::CombiningKind::ADD, part[g]), scores,
                              ValueRange{e.idx(g), r});
    return SmallVector<Value>{};
  });
}

/// acc[g, tile] = acc[g, tile] * alpha[g] + sum over rows [lb, ub) of p[g, r] * V[r, tile], for
/// each column tile, |unroll| rows per loop iteration. Tiling the columns keeps one tile's
/// accumulators of all heads in registers; each tile reads its own part of the V rows, so V
/// still comes from memory (L1 after the first tile) once.
void DenseBlock::accumulateV(Value pb, Value kvh, Value lb, Value ub, int64_t unroll,
                             ArrayRef<Value> alpha, Value pbNext, Value kvhNext) {
  int64_t tw = c.accTileWidth(), nt = c.headDim / tw;
  Value farV = spreadPrefetch(c) ? pbFar : Value(); // else see farVInLogits
  for (int64_t t = 0; t < nt; ++t) {
    int64_t col = t * tw;
    SmallVector<Value> tile = loadTile(col, alpha); // head-major, np pieces per head
    tile = e.loop(lb, ub, e.idx(unroll), tile, [&](Value r0, ValueRange a) {
      SmallVector<Value> next(a);
      for (int64_t u = 0; u < unroll; ++u) {
        Value r = e.addi(r0, e.idx(u));
        if (t == 0 && pbNext)
          prefetchRow(k, pbNext, kvhNext, r, /*locality=*/3);
        if (t == 0 && farV)
          prefetchRow(v, farV, kvhFar, r, /*locality=*/2);
        rowTimesV(scores, pb, kvh, r, col, next);
        if (t == 0 && pbNext && pacedPrefetch(c))
          prefetchAfter = vector::ExtractOp::create(e.b, next[0], 0);
      }
      prefetchAfter = Value();
      return next;
    });
    storeTile(tile, col);
  }
}

/// The bf16 dot-product form of accumulateV: per pair of rows (2r, 2r+1) and 2w columns, the
/// rows' bf16 slices are unpacked into (v[2r][c], v[2r+1][c]) pairs (dotPairColumn's order) and
/// each head's accumulators take one vdpbf16ps against the broadcast pair (p[g][2r],
/// p[g][2r+1]) of each half (hi, lo) of p: as many multiply-adds as widened FMAs, no widening.
void DenseBlock::accumulateVDot(Value pb, Value kvh, Value lb, Value ub, int64_t pairs,
                                ArrayRef<Value> alpha, Value pbNext, Value kvhNext, Value r0,
                                Value r1) {
  ImplicitLocOpBuilder &b = e.b;
  int64_t gs = c.subGroup(), tw = c.accTileWidth(), nt = c.headDim / tw, w = c.dotWidth();
  int64_t np = tw / w;
  auto sliceType = VectorType::get({2 * w}, c.kvType);
  SmallVector<int64_t> loMask, hiMask;
  for (int64_t i = 0; i < w; ++i) {
    int64_t lo = dotPairColumn(i, w), hi = dotPairColumn(w + i, w);
    loMask.append({lo, 2 * w + lo});
    hiMask.append({hi, 2 * w + hi});
  }
  Value zeroSlice = e.splat(arith::ConstantOp::create(b, b.getZeroAttr(c.kvType)), 2 * w);
  Value farV = spreadPrefetch(c) ? pbFar : Value(); // else see farVInLogits
  for (int64_t t = 0; t < nt; ++t) {
    int64_t col = t * tw;
    auto at = [&](int64_t off) { return e.idx(col + off); };
    SmallVector<Value> tile = loadTile(col, alpha); // head-major, np pieces per head
    tile = e.loop(lb, ub, e.idx(2 * pairs), tile, [&](Value rBase, ValueRange a) {
      SmallVector<Value> next(a);
      for (int64_t u = 0; u < pairs; ++u) {
        Value rEven = e.addi(rBase, e.idx(2 * u)), rOdd = e.addi(rEven, e.idx(1));
        if (t == 0 && pbNext) {
          prefetchRow(k, pbNext, kvhNext, rEven, /*locality=*/3);
          prefetchRow(k, pbNext, kvhNext, rOdd, /*locality=*/3);
        }
        if (t == 0 && farV) {
          prefetchRow(v, farV, kvhFar, rEven, /*locality=*/2);
          prefetchRow(v, farV, kvhFar, rOdd, /*locality=*/2);
        }
        SmallVector<Value> vs; // np pieces: (lo, hi) per 2w columns
        for (int64_t j = 0; j < tw; j += 2 * w) {
          Value even = vector::LoadOp::create(b, sliceType, v,
                                              ValueRange{pb, kvh, rEven, at(j)});
          Value odd = vector::LoadOp::create(b, sliceType, v,
                                             ValueRange{pb, kvh, rOdd, at(j)});
          if (r0) {
            // p is 0 outside [r0, r1), but 0 x garbage may be NaN: zero those rows.
            even = e.select(e.cmpi(arith::CmpIPredicate::sge, rEven, r0), even, zeroSlice);
            odd = e.select(e.cmpi(arith::CmpIPredicate::slt, rOdd, r1), odd, zeroSlice);
          }
          vs.push_back(vector::ShuffleOp::create(b, even, odd, loMask));
          vs.push_back(vector::ShuffleOp::create(b, even, odd, hiMask));
        }
        Value pairIndex = e.divi(rEven, e.idx(2));
        for (int64_t g = 0; g < gs; ++g) {
          for (int64_t half = 0; half < bf16DotHalves(c); ++half) {
            // One i32 of two bf16 probabilities (rows 2r, 2r+1), broadcast: vbroadcastss.
            Value pp = e.splat(
                memref::LoadOp::create(b, probs, ValueRange{e.idx(half), e.idx(g), pairIndex}), w);
            Value pv = vector::BitCastOp::create(b, sliceType, pp);
            for (int64_t i = 0; i < np; ++i)
              next[g * np + i] = x86vector::DotBF16Op::create(b, next[g * np + i], vs[i], pv);
          }
        }
      }
      return next;
    });
    storeTile(tile, col);
  }
}

SmallVector<Value> DenseBlock::loadTile(int64_t col, ArrayRef<Value> alpha, Value u) {
  int64_t w = c.dotWidth(), np = c.accTileWidth() / w;
  u = u ? u : unit;
  auto pieceType = VectorType::get({w}, e.f32());
  SmallVector<Value> tile;
  for (int64_t g = 0; g < c.subGroup(); ++g) {
    Value a = e.splat(alpha[g], w);
    for (int64_t i = 0; i < np; ++i)
      tile.push_back(e.mulf(vector::LoadOp::create(e.b, pieceType, acc,
                                                   ValueRange{u, e.idx(g), e.idx(col + i * w)}),
                            a));
  }
  return tile;
}

void DenseBlock::storeTile(ArrayRef<Value> tile, int64_t col, Value u) {
  int64_t w = c.dotWidth(), np = c.accTileWidth() / w;
  u = u ? u : unit;
  for (int64_t g = 0; g < c.subGroup(); ++g)
    for (int64_t i = 0; i < np; ++i)
      vector::StoreOp::create(e.b, tile[g * np + i], acc,
                              ValueRange{u, e.idx(g), e.idx(col + i * w)});
}

/// One block of unit |unit|: updates acc[unit], maxes[unit] and sums[unit].
void DenseBlock::block(Value s, Value kvh, Value blk, Value t0, Value t1, Value pbNext,
                       Value kvhNext) {
  int64_t gs = c.subGroup(), bs = c.blockSize, w = c.dotWidth();
  ImplicitLocOpBuilder &b = e.b;
  bool dot = bf16DotApplies(c);
  // q's slices as values, for the row-by-row logits; the grouped ones (rowsPartialsDot/Fma) and
  // those of qAtUse load q where they use it.
  SmallVector<Value> qv;
  bool qAsValues = !dot && !interleavedFma(c) && !qAtUse(c) && !c.kTransposed;
  for (int64_t g = 0; g < gs && qAsValues; ++g) {
    Value h = e.addi(e.muli(unit, e.idx(gs)), e.idx(g));
    for (int64_t col = 0; col < c.headDim; col += w)
      qv.push_back(vector::LoadOp::create(b, VectorType::get({w}, e.f32()), qs,
                                          ValueRange{h, e.idx(col)}));
  }
  Value pb = e.loadIndex(table, {s, blk});
  Value rowBase = e.muli(blk, e.idx(bs));
  Value r0 = e.maxi(e.subi(t0, rowBase), e.idx(0));
  Value r1 = e.mini(e.subi(t1, rowBase), e.idx(bs));

  // Lanes outside [r0, r1) hold stale values (or logits of rows outside the range) and are
  // masked below.
  // Software prefetch: every line is asked for, about half a piece (one kv head's rows of one
  // block) before it is used: V rows while the logits are computed, the next piece's K rows while
  // V is accumulated, one row per row computed (a burst of a whole piece's prefetches fills the
  // line-fill buffers and stalls the math behind it). Measured with the slot-major walk (f32 and
  // bf16 vector kernel, 16K-128K tokens, 1 and 2 threads, interleaved runs): whole pieces two
  // ahead 0.59-0.86 of the roof, one ahead 0.77-0.98, this 0.82-0.98 (f32) and bf16 0.45-0.53 ->
  // 0.58-0.74. The hardware prefetchers alone reach ~0.69; every 2nd or 8th row 0.59-0.68, only
  // K 0.61-0.70; into L2 only (locality 1/2, measured on the earlier head-major walk) 0.62-0.72.
  // On this walk V into L2 and K into L1 measured best (prefetchRow).
  // With K transposed the next piece's K is not asked for: into L1 (below) it cost 2-16% of the
  // bf16 kernel's DRAM rate at SmolLM2's shape and gained ~12% at Llama-3-8B's (AMD Zen 4, 64K
  // tokens, one thread, far prefetch on; docs/cpu-runs.md, "K transposed per block").
  // With spreadPrefetch the transposed kernel asks for it again, and for the far V rows in p.V.
  Value nextK = treeRows(c) && (!c.kTransposed || spreadPrefetch(c)) ? pbNext : Value();
  if (c.kTransposed) {
    logitsTransposed(pb, kvh);
  } else if (treeRows(c)) {
    logitsByTree(pb, kvh, qv);
  } else {
    if (pbNext)
      prefetchPiece(pbNext, kvhNext);
    logitsByRow(pb, kvh, r0, r1, qv);
  }

  SmallVector<Value> alpha = softmax(r0, r1);
  accumulate(pb, kvh, r0, r1, alpha, nextK, kvhNext);
}

SmallVector<Value> DenseBlock::softmax(Value r0, Value r1) {
  int64_t gs = c.subGroup(), bs = c.blockSize;
  ImplicitLocOpBuilder &b = e.b;
  bool dot = bf16DotApplies(c);
  // The statistics: (max, sum) as two vector<gs> with vectorStats, else gs maxima then gs sums.
  SmallVector<Value> state;
  if (vectorStats(c)) {
    for (Value stat : {maxes, sums})
      state.push_back(vector::LoadOp::create(b, VectorType::get({gs}, e.f32()), stat,
                                             ValueRange{unit, e.idx(0)}));
  } else {
    for (Value stat : {maxes, sums})
      for (int64_t g = 0; g < gs; ++g)
        state.push_back(memref::LoadOp::create(b, stat, ValueRange{unit, e.idx(g)}));
  }
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

  SmallVector<Value> lgs, alpha(gs);
  for (int64_t g = 0; g < gs; ++g) {
    Value lg = vector::LoadOp::create(b, rowType, scores, ValueRange{e.idx(g), e.idx(0)});
    if (c.softcap > 0) {
      Value cap = e.splat(e.cf(c.softcap), bs);
      lg = e.mulf(cap, math::TanhOp::create(b, e.divf(lg, cap)));
    }
    lgs.push_back(e.select(mask, lg, negInfs));
  }
  auto probabilities = [&](int64_t g, Value mNew) {
    Value p = e.select(mask, e.exp(e.subf(lgs[g], e.splat(mNew, bs))), zeros);
    if (dot) {
      // p as (hi, lo) bf16 halves (p = hi + lo to ~2^-17), or hi alone when rounded once,
      // each stored as i32 pairs of rows.
      auto halfType = VectorType::get({bs}, c.kvType);
      auto pairsType = VectorType::get({bs / 2}, b.getI32Type());
      Value hi = arith::TruncFOp::create(b, halfType, p);
      SmallVector<Value, 2> halves{hi};
      if (bf16DotHalves(c) == 2)
        halves.push_back(arith::TruncFOp::create(
            b, halfType, e.subf(p, arith::ExtFOp::create(b, rowType, hi))));
      for (int64_t half = 0; half < int64_t(halves.size()); ++half)
        vector::StoreOp::create(b, vector::BitCastOp::create(b, pairsType, halves[half]), probs,
                                ValueRange{e.idx(half), e.idx(g), e.idx(0)});
      return p;
    }
    vector::StoreOp::create(b, p, scores, ValueRange{e.idx(g), e.idx(0)});
    if (splatProbs(c)) { // each row's p across the lanes, for p.V's loads
      int64_t w = c.dotWidth();
      for (int64_t r = 0; r < bs; ++r)
        vector::StoreOp::create(b, e.splat(vector::ExtractOp::create(b, p, r), w), scores,
                                ValueRange{e.idx(g), e.idx(bs + r * w)});
    }
    return p;
  };
  if (vectorStats(c)) {
    // All heads' statistics at once: block maxima and probability sums by max/sum trees
    // (a vector<gs> each), one exp for all rescale factors. The per-head scalar version below
    // spent about a quarter of the kernel's time in NaN-aware scalar max chains and exps.
    Value mx = state[0], sum = state[1];
    SumTree maxTree{&e, bs, true, {}};
    for (Value lg : lgs)
      maxTree.push(lg);
    // Groups that are not a power of two fill the tree with -inf rows and drop their lanes.
    int64_t gsPow2 = int64_t(llvm::PowerOf2Ceil(gs));
    for (int64_t g = gs; g < gsPow2; ++g)
      maxTree.push(negInfs);
    Value blockMax = maxTree.finish();
    if (gsPow2 != gs)
      blockMax = vector::ShuffleOp::create(b, blockMax, blockMax,
                                           llvm::to_vector(llvm::seq<int64_t>(0, gs)));
    Value mNew = e.maxf(mx, blockMax);
    // The first block rescales nothing; exp(-inf - m) must not depend on the approximation.
    Value wasEmpty = e.cmpf(arith::CmpFPredicate::OEQ, mx, e.splat(e.negInf(), gs));
    Value alphas = e.select(wasEmpty, e.splat(e.cf(0.0f), gs), e.exp(e.subf(mx, mNew)));
    // The probability sums use plain reductions: a sum tree would save ~1% more, but the
    // pipeline IR test (test/Pipelines/hg-cpu-pipeline-ir.mlir) expects the kernel to keep
    // a vector.reduce.fadd.
    SmallVector<Value> headSums;
    for (int64_t g = 0; g < gs; ++g) {
      headSums.push_back(e.reduce(vector::CombiningKind::ADD,
                              probabilities(g, vector::ExtractOp::create(b, mNew, g))));
      alpha[g] = vector::ExtractOp::create(b, alphas, g);
    }
    Value blockSums =
        vector::FromElementsOp::create(b, VectorType::get({gs}, e.f32()), headSums);
    vector::StoreOp::create(b, mNew, maxes, ValueRange{unit, e.idx(0)});
    vector::StoreOp::create(b, e.addf(e.mulf(sum, alphas), blockSums), sums,
                            ValueRange{unit, e.idx(0)});
  } else {
    ArrayRef<Value> mx = ArrayRef(state).take_front(gs), sum = ArrayRef(state).slice(gs, gs);
    for (int64_t g = 0; g < gs; ++g) {
      Value mNew = e.maxf(mx[g], e.reduce(vector::CombiningKind::MAXIMUMF, lgs[g]));
      Value wasEmpty = e.cmpf(arith::CmpFPredicate::OEQ, mx[g], e.negInf());
      alpha[g] = e.select(wasEmpty, e.cf(0.0f), e.exp(e.subf(mx[g], mNew)));
      Value p = probabilities(g, mNew);
      Value sumNew = e.addf(e.mulf(sum[g], alpha[g]), e.reduce(vector::CombiningKind::ADD, p));
      memref::StoreOp::create(b, mNew, maxes, ValueRange{unit, e.idx(g)});
      memref::StoreOp::create(b, sumNew, sums, ValueRange{unit, e.idx(g)});
    }
  }

  return alpha;
}

void DenseBlock::accumulate(Value pb, Value kvh, Value r0, Value r1, ArrayRef<Value> alpha,
                            Value nextK, Value kvhNext) {
  int64_t bs = c.blockSize;
  ImplicitLocOpBuilder &b = e.b;
  bool dot = bf16DotApplies(c);
  // Whole blocks (all but at most two per chunk) take static, unrolled row loops; a partial
  // block walks exactly its valid rows, so V rows outside the range are never read.
  Value full = arith::AndIOp::create(b, e.cmpi(arith::CmpIPredicate::eq, r0, e.idx(0)),
                                     e.cmpi(arith::CmpIPredicate::eq, r1, e.idx(bs)));
  // 8 rows on AVX-512; 4 with AVX2's 16 ymm, where LLVM hoists the unrolled rows' probability
  // broadcasts and spilled them at 8 (callgrind, x86-64-v3 build, 4096 tokens: bf16 143M -> 121M
  // instructions per 11 calls, f32 132M -> 111M; 2 rows gave 126M and 115M).
  int64_t unroll = 1;
  for (int64_t u = widePvTile(c) ? 4 : c.vectorRegs() / 4; u > 1; --u)
    if (bs % u == 0) {
      unroll = u;
      break;
    }
  if (dot) {
    // Pairs of rows; a partial block walks the pairs that hold its rows and zeroes the others.
    Value pairLo = e.muli(e.divi(r0, e.idx(2)), e.idx(2));
    Value pairHi = e.muli(e.ceilDiv(r1, 2), e.idx(2));
    int64_t pairs = std::max<int64_t>(1, unroll / 2);
    while (bs % (2 * pairs) != 0)
      --pairs;
    e.ifThenElse(
        full,
        [&] {
          accumulateVDot(pb, kvh, e.idx(0), e.idx(bs), pairs, alpha, nextK, kvhNext, Value(),
                         Value());
        },
        [&] { accumulateVDot(pb, kvh, pairLo, pairHi, 1, alpha, nextK, kvhNext, r0, r1); });
    return;
  }
  e.ifThenElse(
      full, [&] { accumulateV(pb, kvh, e.idx(0), e.idx(bs), unroll, alpha, nextK, kvhNext); },
      [&] { accumulateV(pb, kvh, r0, r1, 1, alpha, nextK, kvhNext); });
}

bool cpu::overlapPieces(const KernelConfig &c) {
  if (!c.overlapPieces || !c.kTransposed || c.topK != 0 || bf16DotApplies(c) ||
      spreadPrefetch(c) || transposedRowTile(c) != c.blockSize || treeRows(c) == 0 ||
      c.blockSize % overlapUnroll(c) != 0)
    return false;
  // Every p.V row step takes the same whole number of logit columns, and the prefetched lines
  // split evenly: a whole number per step, or one every few steps (a divisor of the unroll; with
  // one row per iteration every step asks for its line).
  int64_t steps = (c.headDim / c.accTileWidth()) * c.blockSize;
  int64_t lines = c.pieceBytes() / 64;
  return c.headDim % steps == 0 && c.pieceBytes() % 64 == 0 &&
         (lines % steps == 0 ||
          (steps % lines == 0 &&
           (overlapUnroll(c) % (steps / lines) == 0 || overlapUnroll(c) == 1)));
}

int64_t cpu::overlapUnroll(const KernelConfig &c) {
  // One row per iteration for f16 on 16 registers: at 2, LLVM's scheduler hoisted the rows'
  // K column conversions from memory ahead of their FMAs and spilled them (16 stack moves per
  // row), and one row read 0.02-0.07 more of the roof from DRAM (x86-64-v3 on Emerald Rapids;
  // bf16 read 0.02-0.03 less at 1, f32 the same; docs/cpu-runs.md, "Logits in passes over the
  // heads").
  if (c.kvType.isF16() && c.targetRegs() == 16)
    return 1;
  return c.vectorRegs() / 8;
}

void DenseBlock::overlappedStep(Value prevPb, Value prevKvh, Value prevUnit, Value prevScores,
                                ArrayRef<Value> prevAlpha, Value pb, Value kvh) {
  int64_t gs = c.subGroup(), bs = c.blockSize, hd = c.headDim, l = c.lanes();
  // The logits as logitsTransposed takes them for a tile of the whole block: bf16 rows of two
  // registers as (even, odd) halves, two FMA chains per head where they fit.
  bool halves = c.kvType.isBF16() && bs == 2 * l;
  int64_t subs = halves ? 2 : 1, width = halves ? l : bs;
  // p.V as accumulateV takes it: tiles of accTileWidth columns, a pass over the rows per tile.
  int64_t tw = c.accTileWidth(), nt = hd / tw, w = c.dotWidth(), np = tw / w;
  // The logits in |passes| passes over the columns, |gp| heads each (overlapLogitPasses), a pass
  // per nt / passes tiles of p.V.
  int64_t passes, chains; // not a structured binding: the row loop's lambda captures them
  std::tie(passes, chains) = overlapLogitPasses(c);
  int64_t gp = gs / passes, tilesPerPass = nt / passes;
  // Each of the nt x bs row steps of p.V computes |perStep| logit columns (of its pass's heads)
  // and asks for |linesPerStep| lines of this piece's V and of the far piece's K (and V for
  // small pieces).
  int64_t steps = nt * bs, perStep = hd / (tilesPerPass * bs);
  int64_t eltBytes = c.kvType.getIntOrFloatBitWidth() / 8, perLine = 64 / eltBytes;
  int64_t lines = c.pieceBytes() / 64;
  // |linesPerStep| lines every |stepsPerLine| steps (one of the two is 1).
  int64_t linesPerStep = std::max<int64_t>(1, lines / steps);
  int64_t stepsPerLine = std::max<int64_t>(1, steps / lines);
  bool farV = farVInLogits(c);
  // Rows per loop iteration (overlapUnroll): 4 on AVX-512 (8 let LLVM hoist the rows' loads and
  // broadcasts ahead of their FMAs and spill them: 1.32 against 1.53x the roof cache-resident,
  // bf16), 2 on AVX2, 1 for f16 there.
  int64_t unroll = overlapUnroll(c);
  int64_t nTile = gs * np;
  bool flat = bool(vPieces); // 16-bit KV (see kPieces)
  SmallVector<Value> zeros(gp * chains * subs, e.splat(e.cf(0.0f), width)), logits = zeros;
  for (int64_t t = 0; t < nt; ++t) {
    int64_t col = t * tw, g0 = t / tilesPerPass * gp, g1 = g0 + gp;
    int64_t stepBase = t % tilesPerPass * bs; // this tile's first row step within its pass
    SmallVector<Value> carried = loadTile(col, prevAlpha, prevUnit);
    carried.append(logits);
    SmallVector<Value> done =
        e.loop(e.idx(0), e.idx(bs), e.idx(unroll), carried, [&](Value rBase, ValueRange a) {
          SmallVector<Value> next(a);
          // Element offsets of the iteration's first V row (this tile's columns) and first K
          // column (of its pass) in their pieces; the rows and columns the unroll adds are
          // constants beyond them.
          Value vBase = flat ? e.muli(rBase, e.idx(hd)) : Value();
          Value kBase = flat ? e.muli(rBase, e.idx(perStep * bs)) : Value();
          for (int64_t u = 0; u < unroll; ++u) {
            Value r = e.addi(rBase, e.idx(u));
            Value step = e.addi(e.idx(t * bs), r);
            // |step| is a multiple of |stepsPerLine| exactly when |u| is (rows start at
            // multiples of the unroll, which it divides). With one row per iteration every step
            // asks for its line: each line |stepsPerLine| times, the repeats finding it on its
            // way.
            bool asks = unroll < stepsPerLine || u % stepsPerLine == 0;
            for (int64_t i = 0; i < linesPerStep && asks; ++i) {
              Value line = e.addi(
                  e.muli(e.divi(step, e.idx(stepsPerLine)), e.idx(linesPerStep)), e.idx(i));
              // In a flat piece the line's element offset is one multiply; as a (row, column)
              // pair it took a division and a remainder (12 integer instructions per row step of
              // the f16 loop on x86-64-v3, beside 16 FMAs).
              Value at, row, lc;
              if (flat) {
                at = e.muli(line, e.idx(perLine));
              } else {
                row = e.divi(line, e.idx(hd / perLine));
                lc = e.muli(e.remi(line, e.idx(hd / perLine)), e.idx(perLine));
              }
              auto ask = [&](Value pool, Value pieces, Value b, Value h) {
                if (flat)
                  return prefetchPieceLine(pieces, b, h, at);
                prefetchLine(pool, b, h, row, lc, 2);
              };
              ask(v, vPieces, pb, kvh);
              if (pbFar) {
                ask(k, kPieces, pbFar, kvhFar);
                if (farV)
                  ask(v, vPieces, pbFar, kvhFar);
              }
            }
            // p.V: row r of the previous piece, this tile's columns.
            rowTimesV(prevScores, prevPb, prevKvh, r, col, MutableArrayRef(next).take_front(nTile),
                      flat ? e.addi(vBase, e.idx(u * hd + col)) : Value());
            // Logits of heads [g0, g1): this piece's columns [passStep * perStep, (passStep +
            // 1) * perStep).
            Value passStep = e.addi(e.idx(stepBase), r);
            for (int64_t i = 0; i < perStep; ++i)
              columnLogits(pb, kvh, e.addi(e.muli(passStep, e.idx(perStep)), e.idx(i)), 0, bs,
                           chains, (u * perStep + i) % chains,
                           MutableArrayRef(next).drop_front(nTile), g0, g1,
                           flat ? e.addi(kBase, e.idx(((stepBase + u) * perStep + i) * bs))
                                : Value());
          }
          return next;
        });
    storeTile(ArrayRef(done).take_front(nTile), col, prevUnit);
    logits.assign(done.begin() + nTile, done.end());
    if ((t + 1) % tilesPerPass == 0) {
      storeColumnLogits(logits, 0, chains, subs, width, halves, g0, g1);
      logits = zeros;
    }
  }
}

std::pair<int64_t, int64_t> cpu::overlapLogitPasses(const KernelConfig &c) {
  int64_t gs = c.subGroup(), regs = c.targetRegs();
  int64_t nt = c.headDim / c.accTileWidth(), nTile = gs * (c.accTileWidth() / c.dotWidth());
  int64_t rowRegs = c.blockSize / c.lanes(); // registers of one head's logits of a block
  auto chainsFor = [&](int64_t gp) {
    return gp * 2 * 2 <= regs / 2 && gp * 2 * rowRegs + nTile <= regs - 4 ? 2 : 1;
  };
  for (int64_t passes = 1; passes <= gs; ++passes) {
    int64_t gp = gs / passes;
    if (gs % passes != 0 || nt % passes != 0 || gp * chainsFor(gp) * rowRegs + nTile > regs - 4)
      continue;
    // An f32 column costs only its loads to read again, and one head per pass leaves the
    // loads and broadcasts of both halves of the step their registers: on AVX2 (Llama-3-8B
    // shape, Emerald Rapids) 4 passes read more than 2 in 6 of 8 cells (mean 0.907 against
    // 0.894 of the roof) and computed 1.62 against 1.41x the roof cache-resident
    // (docs/cpu-runs.md, "Logits in passes over the heads"). 16-bit columns would be widened
    // again in every pass (bf16 read 0.02-0.03 less with 4).
    if (passes > 1 && c.kvType.isF32() && nt % gs == 0)
      return {gs, chainsFor(1)};
    return {passes, chainsFor(gp)};
  }
  return {1, 1};
}
