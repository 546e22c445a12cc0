//===- AmxKernel.cpp - the AMX-BF16 chunk loop of the dense CPU kernel ----===//
//
// For bf16 KV on CPUs with AMX, the dense kernel (DenseKernel.cpp) runs this chunk loop instead
// of its vector one; the runtime says at each call whether AMX may be used (hgrt_amx_available),
// so the same code still runs, on the vector path, where the OS refuses the tile state.
//
// Why: the vector kernel spends ~2 cycles of FMA/shuffle ports per byte of bf16 KV and reaches
// only ~20 GB/s with the data in cache, so at DRAM speed its math and its memory traffic add up
// instead of overlapping. One tdpbf16ps does 16x16x32 multiply-adds, which takes the math below
// ~170 ns per 16 tokens x 8 kv heads.
//
// How, per 16-token "slot" of one kv head (one K and one V tile, 16 rows of 32 bf16 each):
// - q.k: C[token][col] += K[token][dims] . Bq[dims][col], with the columns of Bq being each query
//   head of the sub-group twice: rounded to bf16 (hi) and the bf16 rounding of its remainder
//   (lo), so q keeps ~16 bits of mantissa and the logit is C[t][h] + C[t][gs + h].
// - p.V: V rows are read as they lie in the pool (token-major), which is not the pair-interleaved
//   layout tdpbf16ps expects of its B operand; so each A row holds one head's probabilities in
//   the even (or odd) bf16 of every pair and zeros in the other: row (h, par) of A times V gives
//   sum_t p[h][t] * V[t][2n + par]. Four rows per head (even/odd x hi/lo parts of p) fill a
//   16-row tile for a group of 4 and keep p at ~16 bits too.
// - The online softmax keeps a reference max per head and rescales the accumulators (in memory)
//   only when a logit exceeds it by more than kRescaleSlack, so probabilities stay <= e^8 and the
//   accumulators stay in tile registers over a whole step of kStepSlots slots.
// - Memory order: the K pass of a step walks slot-major (all kv heads of a slot, i.e. whole
//   contiguous blocks of the pool) so the hardware prefetchers see long streams; per kv head 4 KiB
//   pieces 32 KiB apart measured ~20% slower even as a plain sum.
// - Software prefetch into L2, spread evenly: each tile load is paired with prefetches of 16
//   consecutive lines (prefetchPart), of the K piece kKAhead slots on during q.k and, during
//   p.V, of the V piece the next unit reads (the next kv head's, or the next step's first), so
//   every line is prefetched once, a little ahead. Earlier schemes lost: whole pieces prefetched
//   into L1 (their lines took the line-fill buffers the tile loads need), or in bursts (all of a
//   step's V during its q.k).
// - Parallel over (sequence, kv-head group, chunk): like the vector loop, the kernel splits the kv
//   heads into groups when (sequence, chunk) pairs are fewer than two per OpenMP thread, so one
//   short sequence still spreads over many cores. A group's pieces of a block are contiguous (kv
//   heads lie together in a block), and a unit's arithmetic does not depend on its group, so
//   results are bit-identical for any thread count.
// - Slots not entirely inside the chunk's token range (at most two per chunk) run one at a time,
//   with their valid V rows copied into a zeroed scratch tile: 0 * NaN is NaN in a tile multiply,
//   and rows outside the range may hold anything. Their logits are masked by position.
//
//===----------------------------------------------------------------------===//
#include "CPUCodegen.h"

#include "mlir/Dialect/AMX/AMXDialect.h"

using namespace mlir;
using namespace mlir::hybridgen;
using namespace mlir::hybridgen::cpu;

namespace {

constexpr int64_t kSlot = 16;           // tokens per K/V tile (tile rows)
constexpr int64_t kSlice = 32;          // head-dim elements per tile row (64 bytes of bf16)
constexpr int64_t kStepSlots = 8;       // slots whose p.V products share one accumulator load
constexpr int64_t kAccTilesPerPass = 2; // output tiles live at once (see the p.V loop)
constexpr float kRescaleSlack = 8.0f;   // probabilities stay <= e^8 between rescales
// Slots ahead whose K pieces q.k prefetches (see prefetchPart). Interleaved A/B runs at 64K and
// 128K tokens (batch 1 and 8, 1 and 2 threads, slow-mode runs left out), mean ratio to the roof:
// 1 slot 0.755, 2 slots 0.783, 4 slots 0.782, against 0.756 for what this replaced (touching the
// first 2 lines of each K and V piece 2 slots on); 8 and 16 slots (one and two steps) lost.
constexpr int64_t kKAhead = 2;

struct AmxChunks {
  AmxChunks(Emitter &e, const KernelConfig &c, const KernelArgs &a, Value capacity, Value numChunks,
            Value kvGroups, Value so, Value sm, Value sl)
      : e(e), c(c), a(a), capacity(capacity), numChunks(numChunks), kvGroups(kvGroups), so(so),
        sm(sm), sl(sl) {}

  Emitter &e;
  const KernelConfig &c;
  const KernelArgs &a;
  Value capacity, numChunks, kvGroups, so, sm, sl;

  int64_t gs = amxSubGroup(c);
  int64_t nsub = c.group() / gs;
  int64_t units = c.kvHeads * nsub;
  int64_t nsl = c.headDim / kSlice;
  int64_t rowsM = 4 * gs; // p.V A rows: (head, hi/lo, even/odd)
  int64_t cols = 2 * gs;  // q.k B columns: (hi/lo, head)
  int64_t slotsPerBlock = c.blockSize / kSlot;

  // Per sequence: q as B tiles, [batch][unit][slice][16 * 4gs] bf16 (row k = dim pair k).
  Value qt;
  // Per parallel iteration: its kv heads [kvh0, kvh1) and their units [u0, u1); on the stack,
  // buffers indexed by unit (sized for all units, used for the iteration's).
  Value kvh0, kvh1, u0, u1;
  Value acc;  // [unit][slice][rowsM * 16] f32: unnormalized outputs as p.V tiles
  Value lacc; // [unit][head][16] f32: probability sums, lane-wise
  Value mref; // [unit][head] f32: the reference max the probabilities are relative to
  Value mmax; // [unit][head] f32: the true running max (what the partial reports)
  Value lg;   // [step slot][unit][16 * cols] f32: q.k tiles
  Value pbuf; // [step slot][rowsM * 32] bf16: p as A tiles of one unit
  Value vscr; // [16][head_dim] bf16: the valid rows of a partial slot, zeros elsewhere

  ImplicitLocOpBuilder &b() { return e.b; }
  Type bf16() { return b().getBF16Type(); }
  Type i32() { return b().getI32Type(); }
  VectorType vec(int64_t n, Type t) { return VectorType::get({n}, t); }
  amx::TileType tile(int64_t rows, int64_t colsN, Type t) {
    return amx::TileType::get({rows, colsN}, t);
  }
  Value splatI32(int64_t n, int32_t x) {
    return arith::ConstantOp::create(
        b(), DenseElementsAttr::get(vec(n, i32()), b().getI32IntegerAttr(x)));
  }
  Value shuffle(Value x, Value y, ArrayRef<int64_t> mask) {
    return vector::ShuffleOp::create(b(), x, y, mask);
  }
  /// The f32 lanes of |x| rounded to bf16, as i32 bit patterns with the low 16 bits clear.
  Value roundToBf16Bits(Value x) {
    int64_t n = cast<VectorType>(x.getType()).getNumElements();
    Value bits = arith::BitcastOp::create(b(), vec(n, i32()), x);
    Value up = arith::AddIOp::create(b(), bits, splatI32(n, 0x8000));
    return arith::AndIOp::create(b(), up, splatI32(n, int32_t(0xFFFF0000u)));
  }
  /// (hi, lo) bf16 bit patterns of |x| = hi + lo + O(2^-16 |x|).
  std::pair<Value, Value> splitBf16(Value x) {
    int64_t n = cast<VectorType>(x.getType()).getNumElements();
    Value hi = roundToBf16Bits(x);
    Value rest = e.subf(x, arith::BitcastOp::create(b(), vec(n, e.f32()), hi));
    return {hi, roundToBf16Bits(rest)};
  }
  Value shrui16(Value x) {
    int64_t n = cast<VectorType>(x.getType()).getNumElements();
    return arith::ShRUIOp::create(b(), x, splatI32(n, 16));
  }
  Value asBf16(Value i32s) {
    int64_t n = cast<VectorType>(i32s.getType()).getNumElements();
    return vector::BitCastOp::create(b(), vec(2 * n, bf16()), i32s);
  }
  /// The lanes t of a slot with r0 <= t < r1.
  Value positionMask(Value r0, Value r1) {
    SmallVector<int32_t> lanes(kSlot);
    for (int64_t i = 0; i < kSlot; ++i)
      lanes[i] = int32_t(i);
    Value iota =
        arith::ConstantOp::create(b(), DenseElementsAttr::get(vec(kSlot, i32()), ArrayRef(lanes)));
    auto splatIdx = [&](Value x) {
      return e.splat(arith::IndexCastOp::create(b(), i32(), x), kSlot);
    };
    return arith::AndIOp::create(b(), e.cmpi(arith::CmpIPredicate::sge, iota, splatIdx(r0)),
                                 e.cmpi(arith::CmpIPredicate::slt, iota, splatIdx(r1)));
  }

  //===--- q as B tiles -----------------------------------------------------===//

  /// Writes qt[s][u]: for each slice, a [16][cols] matrix of bf16 pairs (dims 2k, 2k+1) whose
  /// column col is head col % gs, hi part for col < gs and lo part otherwise; q is pre-scaled.
  void prepareQ(Value s, Value u) {
    SmallVector<int64_t> evens, odds;
    for (int64_t i = 0; i < 16; ++i) {
      evens.push_back(2 * i);
      odds.push_back(2 * i + 1);
    }
    Value h0 = e.muli(u, e.idx(gs));
    Value scale = e.splat(e.cf(c.scale), kSlice);
    for (int64_t t = 0; t < nsl; ++t) {
      SmallVector<Value> hiCols, loCols;
      for (int64_t h = 0; h < gs; ++h) {
        Value x = vector::LoadOp::create(b(), vec(kSlice, e.f32()), a.q,
                                         ValueRange{s, e.addi(h0, e.idx(h)), e.idx(t * kSlice)});
        auto [hi, lo] = splitBf16(e.mulf(x, scale));
        for (auto [bits, out] : {std::pair{hi, &hiCols}, std::pair{lo, &loCols}}) {
          // One i32 per dim pair: the even element's bf16 in the low half, the odd one's above.
          Value even = shrui16(shuffle(bits, bits, evens));
          out->push_back(arith::OrIOp::create(b(), even, shuffle(bits, bits, odds)));
        }
      }
      SmallVector<Value> parts(hiCols);
      parts.append(loCols);
      // Concatenate the columns, then transpose [col][k] into [k][col] with one shuffle.
      while (parts.size() > 1) {
        SmallVector<Value> next;
        for (size_t i = 0; i < parts.size(); i += 2) {
          int64_t n = cast<VectorType>(parts[i].getType()).getNumElements();
          SmallVector<int64_t> all(2 * n);
          for (int64_t j = 0; j < 2 * n; ++j)
            all[j] = j;
          next.push_back(shuffle(parts[i], parts[i + 1], all));
        }
        parts = next;
      }
      SmallVector<int64_t> transpose;
      for (int64_t k = 0; k < 16; ++k)
        for (int64_t col = 0; col < cols; ++col)
          transpose.push_back(col * 16 + k);
      Value rows = shuffle(parts[0], parts[0], transpose);
      vector::StoreOp::create(b(), asBf16(rows), qt, ValueRange{s, u, e.idx(t), e.idx(0)});
    }
  }

  //===--- one step: kStepSlots whole slots, or one partial slot --------------===//

  struct Slot {
    Value pb, row0; // pool block and first row of the slot
  };
  Slot slotAt(Value s, Value slot) {
    Value blk = e.divi(slot, e.idx(slotsPerBlock));
    Value row0 = e.muli(e.remi(slot, e.idx(slotsPerBlock)), e.idx(kSlot));
    return {e.loadIndex(a.table, {s, blk}), row0};
  }

  /// Prefetches part |t| (of nsl) of |slot|'s piece of |pool| for |kvh| into L2: 16 consecutive
  /// 64-byte lines, so that nsl calls, one beside each tile load, cover the piece in address
  /// order. The rows a tile load reads instead (every nsl-th line): 0.783 against 0.798 of the
  /// roof (five interleaved runs, within noise).
  void prefetchPart(Slot slot, Value pool, Value kvh, int64_t t) {
    for (int64_t line = 16 * t; line < 16 * (t + 1); ++line) {
      Value row = e.addi(slot.row0, e.idx(line / nsl));
      memref::PrefetchOp::create(b(), pool,
                                 ValueRange{slot.pb, kvh, row, e.idx(line % nsl * kSlice)},
                                 /*isWrite=*/false, /*localityHint=*/2, /*isDataCache=*/true);
    }
  }

  /// Logits of unit |u| for |slots| (one or two) of the step, slot i into lg[j0 + i][u] (16
  /// tokens x cols). Each slot is a chain of nsl multiplies into one accumulator, each waiting
  /// for the one before; two slots run as two independent chains that share each q tile load.
  /// Measured cache-resident (Llama shapes, one thread, five interleaved runs): one chain per
  /// slot 33-35 GB/s (batch 1) and 29-35 (batch 8), two 36-37 and 35-41; at DRAM speed within
  /// noise. The kernel's tiles come in two shapes (16 x 64 bytes for K, V, p and the p.V
  /// accumulators; 16 x 32 bytes for q and these logits), and one tile configuration gives each
  /// of the 8 registers one shape: 3 narrow registers here (two accumulators, q) leave the 5
  /// wide ones p.V needs. Beside the K tile loads of slot i, the K piece of ahead[i] is
  /// prefetched (|ahead| empty: none).
  void qkTiles(Value s, Value u, Value kvh, ArrayRef<Slot> slots, ArrayRef<Slot> ahead,
               int64_t j0) {
    auto cType = tile(kSlot, cols, e.f32());
    SmallVector<Value> cTiles;
    for (size_t i = 0; i < slots.size(); ++i)
      cTiles.push_back(amx::TileZeroOp::create(b(), cType));
    for (int64_t t = 0; t < nsl; ++t) {
      Value qTile = amx::TileLoadOp::create(b(), tile(kSlot, 2 * cols, bf16()), qt,
                                            ValueRange{s, u, e.idx(t), e.idx(0)}, e.idx(2 * cols));
      for (auto [i, slot] : llvm::enumerate(slots)) {
        Value kTile = amx::TileLoadOp::create(
            b(), tile(kSlot, kSlice, bf16()), a.k,
            ValueRange{slot.pb, kvh, slot.row0, e.idx(t * kSlice)});
        if (!ahead.empty())
          prefetchPart(ahead[i], a.k, kvh, t);
        cTiles[i] = amx::TileMulFOp::create(b(), cType, kTile, qTile, cTiles[i]);
      }
    }
    for (auto [i, cTile] : llvm::enumerate(cTiles))
      amx::TileStoreOp::create(b(), lg, ValueRange{e.idx(j0 + int64_t(i)), u, e.idx(0)}, cTile,
                               e.idx(cols));
  }

  /// Head |h|'s 16 logits of slot |j| from lg[j][u]: hi + lo column, gathered by a shuffle tree.
  SmallVector<Value> logitsOf(Value u, int64_t j) {
    int64_t n = kSlot * cols / 16, perVec = 16 / cols; // source vectors, tokens per vector
    SmallVector<Value> folded;
    SmallVector<int64_t> swapHalves;
    for (int64_t l = 0; l < 16; ++l)
      swapHalves.push_back(l ^ gs);
    for (int64_t i = 0; i < n; ++i) {
      Value v =
          vector::LoadOp::create(b(), vec(16, e.f32()), lg, ValueRange{e.idx(j), u, e.idx(16 * i)});
      folded.push_back(e.addf(v, shuffle(v, v, swapHalves)));
    }
    SmallVector<Value> heads;
    for (int64_t h = 0; h < gs; ++h) {
      // Each part: (vector, lane of token t or -1). Token t ends in lane t.
      SmallVector<std::pair<Value, SmallVector<int64_t>>> parts;
      for (int64_t i = 0; i < n; ++i) {
        SmallVector<int64_t> lane(kSlot, -1);
        for (int64_t k = 0; k < perVec; ++k)
          lane[i * perVec + k] = k * cols + h;
        parts.push_back({folded[i], lane});
      }
      while (parts.size() > 1) {
        SmallVector<std::pair<Value, SmallVector<int64_t>>> next;
        for (size_t i = 0; i < parts.size(); i += 2) {
          auto &[x, lx] = parts[i];
          auto &[y, ly] = parts[i + 1];
          SmallVector<int64_t> mask(kSlot, 0), lane(kSlot, -1);
          for (int64_t t = 0; t < kSlot; ++t) {
            if (lx[t] >= 0)
              mask[t] = lx[t];
            else if (ly[t] >= 0)
              mask[t] = 16 + ly[t];
            if (lx[t] >= 0 || ly[t] >= 0)
              lane[t] = t;
          }
          next.push_back({shuffle(x, y, mask), lane});
        }
        parts = next;
      }
      Value lgv = parts[0].first;
      if (c.softcap > 0) {
        Value cap = e.splat(e.cf(c.softcap), kSlot);
        lgv = e.mulf(cap, math::TanhOp::create(b(), e.divf(lgv, cap)));
      }
      heads.push_back(lgv);
    }
    return heads;
  }

  /// Copies the valid rows [r0, r1) of the slot's V rows of |kvh| into vscr, zeros elsewhere.
  void sanitizeV(Slot slot, Value kvh, Value r0, Value r1) {
    auto rowType = vec(c.headDim, bf16());
    Value zeros =
        arith::ConstantOp::create(b(), DenseElementsAttr::get(rowType, b().getZeroAttr(bf16())));
    for (int64_t r = 0; r < kSlot; ++r) {
      Value row = vector::LoadOp::create(
          b(), rowType, a.v, ValueRange{slot.pb, kvh, e.addi(slot.row0, e.idx(r)), e.idx(0)});
      Value ok = arith::AndIOp::create(b(), e.cmpi(arith::CmpIPredicate::sle, r0, e.idx(r)),
                                       e.cmpi(arith::CmpIPredicate::sgt, r1, e.idx(r)));
      vector::StoreOp::create(b(), e.select(ok, row, zeros), vscr, ValueRange{e.idx(r), e.idx(0)});
    }
  }

  /// The softmax of unit |u| over a step's logits ([slot][head]; |mask|: the valid lanes of a
  /// partial slot, null for whole slots): running maxima, the rare rescale, and the probabilities
  /// as A tiles in pbuf (rows: head, hi/lo, even/odd) with their sums added to lacc.
  void softmaxStep(Value u, ArrayRef<SmallVector<Value>> logits, Value mask) {
    int64_t nSlots = logits.size();
    Value zeros = e.splat(e.cf(0.0f), kSlot);
    // Per head: the step's max (maxnum: lanes outside the range are -inf, never NaN, and a NaN
    // logit in range is garbage in any case) updates the true running max, which the partial
    // reports; the accumulators are rescaled only when it exceeds the reference by more than
    // the slack.
    auto loadRef = [&](int64_t h) {
      return memref::LoadOp::create(b(), mref, ValueRange{u, e.idx(h)}).getResult();
    };
    SmallVector<Value> stepMax;
    Value over;
    for (int64_t h = 0; h < gs; ++h) {
      Value slotMax = logits[0][h];
      for (int64_t j = 1; j < nSlots; ++j)
        slotMax = arith::MaxNumFOp::create(b(), slotMax, logits[j][h]);
      stepMax.push_back(e.reduce(vector::CombiningKind::MAXNUMF, slotMax));
      Value at[] = {u, e.idx(h)};
      Value mTrue = memref::LoadOp::create(b(), mmax, at);
      memref::StoreOp::create(b(), arith::MaxNumFOp::create(b(), mTrue, stepMax[h]), mmax, at);
      Value gt =
          e.cmpf(arith::CmpFPredicate::OGT, stepMax[h], e.addf(loadRef(h), e.cf(kRescaleSlack)));
      over = over ? arith::OrIOp::create(b(), over, gt).getResult() : gt;
    }
    e.ifThenElse(over, [&] {
      for (int64_t h = 0; h < gs; ++h) {
        Value mOld = loadRef(h);
        Value mx = arith::MaxNumFOp::create(b(), mOld, stepMax[h]);
        Value wasEmpty = e.cmpf(arith::CmpFPredicate::OEQ, mOld, e.negInf());
        Value alpha = e.select(wasEmpty, e.cf(0.0f), e.exp(e.subf(mOld, mx)));
        memref::StoreOp::create(b(), mx, mref, ValueRange{u, e.idx(h)});
        Value a16 = e.splat(alpha, 16);
        auto scaleRow = [&](Value buf, ValueRange at) {
          Value row = vector::LoadOp::create(b(), vec(16, e.f32()), buf, at);
          vector::StoreOp::create(b(), e.mulf(row, a16), buf, at);
        };
        scaleRow(lacc, ValueRange{u, e.idx(h), e.idx(0)});
        for (int64_t t = 0; t < nsl; ++t)
          for (int64_t r = 0; r < 4; ++r)
            scaleRow(acc, ValueRange{u, e.idx(t), e.idx((4 * h + r) * 16)});
      }
    });
    // Probabilities, their sums, and p as A tiles (rows: head, hi/lo, even/odd).
    for (int64_t h = 0; h < gs; ++h) {
      Value mh = e.splat(loadRef(h), kSlot);
      Value psum;
      for (int64_t j = 0; j < nSlots; ++j) {
        Value p = e.exp(e.subf(logits[j][h], mh));
        if (mask)
          p = e.select(mask, p, zeros);
        psum = psum ? e.addf(psum, p) : p;
        auto [hi, lo] = splitBf16(p);
        Value rowsOfHead[4] = {shrui16(hi), hi, shrui16(lo), lo};
        for (int64_t r = 0; r < 4; ++r)
          vector::StoreOp::create(b(), asBf16(rowsOfHead[r]), pbuf,
                                  ValueRange{e.idx(j), e.idx((4 * h + r) * kSlice)});
      }
      Value at[] = {u, e.idx(h), e.idx(0)};
      Value l = vector::LoadOp::create(b(), vec(16, e.f32()), lacc, at);
      vector::StoreOp::create(b(), e.addf(l, psum), lacc, at);
    }
  }

  /// p.V of unit |u| (kv head |kvh|) for the step's slots; V comes from the pool, or from vscr
  /// for a partial slot. Beside the V tile loads of slot j, the V piece of ahead[j] for kv head
  /// |aheadKvh| is prefetched (|ahead| empty: none); step() picks the next unit's pieces, see
  /// there. Measured (interleaved A/B runs as for kKAhead, with the K prefetch): 0.782 -> 0.799
  /// of the roof. Lost: the unit two on instead of the next (0.795 against 0.830).
  void pvStep(Value u, Value kvh, ArrayRef<Slot> slots, ArrayRef<Slot> ahead, Value aheadKvh,
              bool partial) {
    int64_t nSlots = slots.size();
    // p.V: the accumulators of kAccTilesPerPass slices stay in tiles over the step. Measured
    // (cache-resident, Llama shapes): 2 accumulators per pass 43 GB/s; 3 or 4, which read p
    // fewer times, 30 GB/s; loading the next slot's tiles ahead (as in qkTile) 32 GB/s.
    auto accTile = tile(rowsM, 16, e.f32());
    auto loadSlot = [&](int64_t j, int64_t t0s, int64_t t1s) {
      SmallVector<Value> tiles{amx::TileLoadOp::create(
          b(), tile(rowsM, kSlice, bf16()), pbuf, ValueRange{e.idx(j), e.idx(0)}, e.idx(kSlice))};
      for (int64_t t = t0s; t < t1s; ++t) {
        auto vTile = tile(kSlot, kSlice, bf16());
        tiles.push_back(
            partial
                ? amx::TileLoadOp::create(b(), vTile, vscr, ValueRange{e.idx(0), e.idx(t * kSlice)})
                : amx::TileLoadOp::create(
                      b(), vTile, a.v,
                      ValueRange{slots[j].pb, kvh, slots[j].row0, e.idx(t * kSlice)}));
        if (!ahead.empty())
          prefetchPart(ahead[j], a.v, aheadKvh, t);
      }
      return tiles;
    };
    for (int64_t t0s = 0; t0s < nsl; t0s += kAccTilesPerPass) {
      int64_t t1s = std::min(nsl, t0s + kAccTilesPerPass);
      SmallVector<Value> accs;
      for (int64_t t = t0s; t < t1s; ++t)
        accs.push_back(amx::TileLoadOp::create(b(), accTile, acc, ValueRange{u, e.idx(t), e.idx(0)},
                                               e.idx(16)));
      for (int64_t j = 0; j < nSlots; ++j) {
        SmallVector<Value> cur = loadSlot(j, t0s, t1s);
        for (int64_t t = t0s; t < t1s; ++t)
          accs[t - t0s] =
              amx::TileMulFOp::create(b(), accTile, cur[0], cur[1 + t - t0s], accs[t - t0s]);
      }
      for (int64_t t = t0s; t < t1s; ++t)
        amx::TileStoreOp::create(b(), acc, ValueRange{u, e.idx(t), e.idx(0)}, accs[t - t0s],
                                 e.idx(16));
    }
  }

  /// One step over |nSlots| slots starting at |slot0|. |partial|: one slot, masked to [t0, t1).
  void step(Value s, Value slot0, int64_t nSlots, bool partial, Value t0, Value t1,
            Value lastSlot) {
    SmallVector<Slot> slots;
    for (int64_t j = 0; j < nSlots; ++j)
      slots.push_back(slotAt(s, e.addi(slot0, e.idx(j))));

    // q.k for every slot and unit, slot-major two slots at a time; the K pieces kKAhead slots
    // on are prefetched meanwhile (by the first unit of each kv head).
    for (int64_t j = 0; j < nSlots; j += 2) {
      ArrayRef<Slot> pair = ArrayRef(slots).slice(j, std::min<int64_t>(2, nSlots - j));
      SmallVector<Slot> ahead;
      if (!partial)
        for (size_t i = 0; i < pair.size(); ++i)
          ahead.push_back(
              slotAt(s, e.mini(e.addi(slot0, e.idx(kKAhead + j + int64_t(i))), lastSlot)));
      e.forEach(kvh0, kvh1, e.idx(1), [&](Value kvh) {
        for (int64_t sub = 0; sub < nsub; ++sub)
          qkTiles(s, e.addi(e.muli(kvh, e.idx(nsub)), e.idx(sub)), kvh, pair,
                  sub == 0 ? ArrayRef(ahead) : ArrayRef<Slot>(), j);
      });
    }

    Value r0, r1, mask;
    if (partial) {
      Value start = e.muli(slot0, e.idx(kSlot));
      r0 = e.maxi(e.subi(t0, start), e.idx(0));
      r1 = e.mini(e.subi(t1, start), e.idx(kSlot));
      mask = positionMask(r0, r1);
    }
    Value negInfs = e.splat(e.negInf(), kSlot);
    SmallVector<Slot> nextStep; // the next step's slots (clamped to the chunk)
    if (!partial)
      for (int64_t j = 0; j < nSlots; ++j)
        nextStep.push_back(slotAt(s, e.mini(e.addi(slot0, e.idx(nSlots + j)), lastSlot)));
    e.forEach(u0, u1, e.idx(1), [&](Value u) {
      Value kvh = e.divi(u, e.idx(nsub));
      // Logits, masked by position (never by value: rows outside the range may be NaN).
      SmallVector<SmallVector<Value>> logits; // [slot][head]
      for (int64_t j = 0; j < nSlots; ++j) {
        logits.push_back(logitsOf(u, j));
        if (partial)
          for (Value &lgv : logits.back())
            lgv = e.select(mask, lgv, negInfs);
      }
      softmaxStep(u, logits, mask);
      if (partial)
        sanitizeV(slots[0], kvh, r0, r1);
      // The V pieces the next unit reads: the next kv head's of these slots (this one's again
      // when units share it), and for the last unit the first kv head's of the next step's
      // slots, which nothing else prefetches. Interleaved A/B runs (64K and 128K tokens, batch 1
      // and 8, 1 and 2 threads, 3 and 5 repeats): mean of medians 0.833 -> 0.858 and 0.833 ->
      // 0.850, higher in 7 of 8 cases. (Before the 4096-token chunks, with the last unit
      // prefetching the next step on top of its own pieces again, it lost: 0.758 against 0.790.)
      SmallVector<Slot> ahead;
      Value aheadKvh;
      if (!partial) {
        Value isLast = e.cmpi(arith::CmpIPredicate::eq, u, e.subi(u1, e.idx(1)));
        aheadKvh = e.select(isLast, kvh0, e.divi(e.addi(u, e.idx(1)), e.idx(nsub)));
        for (int64_t j = 0; j < nSlots; ++j)
          ahead.push_back({e.select(isLast, nextStep[j].pb, slots[j].pb),
                           e.select(isLast, nextStep[j].row0, slots[j].row0)});
      }
      pvStep(u, kvh, slots, ahead, aheadKvh, partial);
    });
  }

  //===--- one chunk ---------------------------------------------------------===//

  void chunk(Value s, Value gi, Value ci) {
    std::tie(kvh0, kvh1) = e.part(gi, e.idx(c.kvHeads), kvGroups);
    u0 = e.muli(kvh0, e.idx(nsub));
    u1 = e.muli(kvh1, e.idx(nsub));
    MemRefType f32Type = MemRefType::get({units, nsl, rowsM * 16}, e.f32());
    acc = memref::AllocaOp::create(b(), f32Type);
    lacc = memref::AllocaOp::create(b(), MemRefType::get({units, gs, 16}, e.f32()));
    mref = memref::AllocaOp::create(b(), MemRefType::get({units, gs}, e.f32()));
    mmax = memref::AllocaOp::create(b(), MemRefType::get({units, gs}, e.f32()));
    lg = memref::AllocaOp::create(b(), MemRefType::get({kStepSlots, units, kSlot * cols}, e.f32()));
    pbuf = memref::AllocaOp::create(b(), MemRefType::get({kStepSlots, rowsM * kSlice}, bf16()));
    vscr = memref::AllocaOp::create(b(), MemRefType::get({kSlot, c.headDim}, bf16()));
    Value zero16 = e.splat(e.cf(0.0f), 16);
    e.forEach(u0, u1, e.idx(1), [&](Value u) {
      for (int64_t t = 0; t < nsl; ++t)
        for (int64_t r = 0; r < rowsM; ++r)
          vector::StoreOp::create(b(), zero16, acc, ValueRange{u, e.idx(t), e.idx(r * 16)});
      for (int64_t h = 0; h < gs; ++h) {
        vector::StoreOp::create(b(), zero16, lacc, ValueRange{u, e.idx(h), e.idx(0)});
        memref::StoreOp::create(b(), e.negInf(), mref, ValueRange{u, e.idx(h)});
        memref::StoreOp::create(b(), e.negInf(), mmax, ValueRange{u, e.idx(h)});
      }
    });

    std::pair<Value, Value> range = clampedRange(e, c, a.lens, capacity, s, a.begin, a.end);
    Value lo = range.first, hi = range.second;
    int64_t bs = c.blockSize, chunkTokens = c.chunkTokens;
    Value base = e.addi(e.muli(e.divi(lo, e.idx(bs)), e.idx(bs)), e.muli(ci, e.idx(chunkTokens)));
    Value t0 = e.maxi(lo, base);
    Value t1 = e.maxi(e.mini(hi, e.addi(base, e.idx(chunkTokens))), t0);
    Value nonEmpty = e.cmpi(arith::CmpIPredicate::slt, t0, t1);
    Value slotLo = e.divi(t0, e.idx(kSlot));
    Value slotHi = e.select(nonEmpty, e.ceilDiv(t1, kSlot), slotLo);
    // Whole slots [fullLo, fullHi) run kStepSlots at a time; the rest one by one.
    Value fullLo = e.mini(e.ceilDiv(t0, kSlot), slotHi);
    Value fullHi = e.maxi(e.divi(t1, e.idx(kSlot)), fullLo);
    Value steps = e.divi(e.subi(fullHi, fullLo), e.idx(kStepSlots));
    Value mainHi = e.addi(fullLo, e.muli(steps, e.idx(kStepSlots)));
    Value lastSlot = e.subi(e.maxi(slotHi, e.idx(1)), e.idx(1));
    e.forEach(fullLo, mainHi, e.idx(kStepSlots),
              [&](Value slot) { step(s, slot, kStepSlots, false, t0, t1, lastSlot); });
    // The other slots, [slotLo, fullLo) and [mainHi, slotHi), one at a time (one loop, so the
    // single-slot code is emitted once).
    Value before = e.subi(fullLo, slotLo);
    Value singles = e.addi(before, e.subi(slotHi, mainHi));
    e.forEach(e.idx(0), singles, e.idx(1), [&](Value i) {
      Value isBefore = e.cmpi(arith::CmpIPredicate::ult, i, before);
      Value slot = e.select(isBefore, e.addi(slotLo, i), e.addi(mainHi, e.subi(i, before)));
      step(s, slot, 1, true, t0, t1, lastSlot);
    });

    // The chunk's partials into the dense kernel's scratch rows (its unit/sub-group layout).
    int64_t denseGs = c.subGroup(), denseUnits = c.kvHeads * (c.group() / denseGs);
    SmallVector<int64_t> zip;
    for (int64_t i = 0; i < 16; ++i) {
      zip.push_back(i);
      zip.push_back(16 + i);
    }
    e.forEach(u0, u1, e.idx(1), [&](Value u) {
      for (int64_t h = 0; h < gs; ++h) {
        Value qh = e.addi(e.muli(u, e.idx(gs)), e.idx(h));
        Value du = e.divi(qh, e.idx(denseGs)), dg = e.remi(qh, e.idx(denseGs));
        Value row =
            e.addi(e.muli(e.addi(e.muli(e.addi(e.muli(s, e.idx(denseUnits)), du), numChunks), ci),
                          e.idx(denseGs)),
                   dg);
        // Relative to the true max, as every partial is: o and l times exp(mref - max) <= 1.
        Value mTrue = memref::LoadOp::create(b(), mmax, ValueRange{u, e.idx(h)});
        Value nonEmpty = e.cmpf(arith::CmpFPredicate::OGT, mTrue, e.negInf());
        Value mRef = memref::LoadOp::create(b(), mref, ValueRange{u, e.idx(h)});
        Value factor = e.select(nonEmpty, e.exp(e.subf(mRef, mTrue)), e.cf(0.0f));
        Value f32s = e.splat(factor, kSlice);
        auto rowAt = [&](int64_t t, int64_t r) {
          return vector::LoadOp::create(b(), vec(16, e.f32()), acc,
                                        ValueRange{u, e.idx(t), e.idx((4 * h + r) * 16)})
              .getResult();
        };
        for (int64_t t = 0; t < nsl; ++t) {
          Value even = e.addf(rowAt(t, 0), rowAt(t, 2)), odd = e.addf(rowAt(t, 1), rowAt(t, 3));
          vector::StoreOp::create(b(), e.mulf(shuffle(even, odd, zip), f32s), so,
                                  ValueRange{row, e.idx(t * kSlice)});
        }
        Value l =
            vector::LoadOp::create(b(), vec(16, e.f32()), lacc, ValueRange{u, e.idx(h), e.idx(0)});
        memref::StoreOp::create(b(), mTrue, sm, ValueRange{row});
        memref::StoreOp::create(b(), e.mulf(e.reduce(vector::CombiningKind::ADD, l), factor), sl,
                                ValueRange{row});
      }
    });
  }

  void emit(Value batch) {
    qt = memref::AllocOp::create(
        b(), MemRefType::get({ShapedType::kDynamic, units, nsl, kSlot * 2 * cols}, bf16()),
        ValueRange{batch});
    e.parallel({batch, e.idx(units)}, [&](ValueRange ivs) { prepareQ(ivs[0], ivs[1]); });
    e.parallel({batch, kvGroups, numChunks},
               [&](ValueRange ivs) { chunk(ivs[0], ivs[1], ivs[2]); });
    memref::DeallocOp::create(b(), qt);
  }
};

} // namespace

int64_t cpu::amxSubGroup(const KernelConfig &c) {
  for (int64_t d : {4, 2})
    if (c.group() % d == 0)
      return d;
  return 1;
}

bool cpu::amxApplies(const KernelConfig &c) {
  return c.amx && c.topK == 0 && !c.kTransposed && c.kvType.isBF16() && c.headDim % kSlice == 0 &&
         c.blockSize % kSlot == 0;
}

Value cpu::amxAvailable(ImplicitLocOpBuilder &b, ModuleOp module) {
  func::FuncOp fn = declareFunction(module, "hgrt_amx_available", {}, {b.getI32Type()});
  Value flag = func::CallOp::create(b, fn, ValueRange{}).getResult(0);
  Value zero = arith::ConstantIntOp::create(b, 0, 32);
  return arith::CmpIOp::create(b, arith::CmpIPredicate::ne, flag, zero);
}

void cpu::emitAmxChunks(Emitter &e, const KernelConfig &c, const KernelArgs &args, Value batch,
                        Value capacity, Value numChunks, Value kvGroups, Value so, Value sm,
                        Value sl) {
  AmxChunks chunks(e, c, args, capacity, numChunks, kvGroups, so, sm, sl);
  chunks.emit(batch);
}
