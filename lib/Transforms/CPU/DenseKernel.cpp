//===- DenseKernel.cpp - the flash-decoding CPU kernel of hg.partial_attention ===//
//
// One scf.parallel over (sequence, kv-head unit group, token chunk) runs an online softmax per
// chunk and kv-head unit into scratch; a second scf.parallel merges the chunks of each (sequence,
// query head) by log-sum-exp. Inside a chunk the kernel walks the KV blocks it overlaps, and in
// each block its kv heads, so every K and V row of a kv-head is read once for all query heads of
// its group.
//
//===----------------------------------------------------------------------===//
#include "CPUCodegen.h"
#include "../AttentionParams.h"

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

int64_t KernelConfig::dotWidth() const { return headDim % lanes() == 0 ? lanes() : headDim; }

int64_t KernelConfig::accTileWidth() const {
  // At most 8 registers of live f32 accumulators: 128 lanes in 8 zmm on AVX-512, 64 in 8 ymm on
  // AVX2. On AVX-512, 256 lanes (16 zmm, fewer passes over each V row) measured 5-15% slower for
  // groups 2-8: the unrolled rows' V slices and broadcasts then no longer fit next to the
  // accumulators. On AVX2 (16 ymm), 128 lanes filled the whole register file: 6 of the 16
  // accumulators were reloaded and stored back around every FMA (callgrind on an x86-64-v3
  // build, f32: 0.41 instructions per KV byte, a third of them stack moves).
  // The bf16 dot-product path (bf16DotApplies; AVX-512 targets, 32 registers at any width) takes
  // 16: at 8 (4 heads x 2 registers) each accumulator's vdpbf16ps chain waited on its ~6-cycle
  // latency, p.V ran 1.2 of 2 dot products per cycle on Zen 4.
  int64_t gs = subGroup(), l = lanes();
  // So does interleavedFma (16-bit tiles narrower than a 32-register target), and Zen 4's spread
  // 16-bit kernel, where 16 measured faster (widePvTile).
  bool wide = targetRegs() == 32 && ((bf16Dot && kvType.isBF16()) ||
                                     (!kvType.isF32() && vectorBits < targetVectorBits));
  int64_t budget = wide || cpu::widePvTile(*this) ? 16 : 8;
  for (int64_t tw = headDim; tw >= l; --tw)
    if (headDim % tw == 0 && tw % l == 0 && gs * tw <= budget * l)
      return tw;
  return headDim % l == 0 ? l : headDim;
}

std::string KernelConfig::mangle() const {
  return mangleAttentionParams(*this) +
         llvm::formatv("_k{0}_t{1}{2}", topK, chunkTokens, amxApplies(*this) ? "_amx" : "").str() +
         (vectorBits == 512 ? "" : "_v" + std::to_string(vectorBits)) +
         (farPrefetchBytes == 0 ? "" : "_f" + std::to_string(farPrefetchBytes)) +
         (bf16DotApplies(*this) ? (bf16DotRounded ? "_dr" : "_dp") : "") +
         (bf16DotLogits(*this) ? "q" : "") +
         (interleavedFma(*this) ? "_il" : "") + (kTransposed ? "_kt" : "") +
         (cpu::spreadPrefetch(*this) ? "_sp" : "") + (cpu::overlapPieces(*this) ? "_ov" : "") +
         (cpu::overlapPieces(*this) && pvLag > 1 ? "_lag" + std::to_string(pvLag) : "") +
         (cpu::splatProbs(*this) ? "_ps" : "");
}

/// |pool| (memref<blocks x kv_heads x block_size x head_dim>) viewed as memref<blocks x kv_heads x
/// inner...>, the same bytes of each piece in a row-major shape of its own.
static Value pieceShapedView(ImplicitLocOpBuilder &b, Value pool, ArrayRef<int64_t> inner) {
  auto type = cast<MemRefType>(pool.getType());
  int64_t kvHeads = type.getDimSize(1), piece = type.getDimSize(2) * type.getDimSize(3);
  SmallVector<int64_t> shape{ShapedType::kDynamic, kvHeads};
  shape.append(inner.begin(), inner.end());
  SmallVector<OpFoldResult> sizes{OpFoldResult(memref::DimOp::create(b, pool, 0).getResult())};
  SmallVector<OpFoldResult> strides(shape.size());
  int64_t stride = 1;
  for (int64_t i = int64_t(shape.size()) - 1; i >= 1; --i) {
    strides[i] = b.getIndexAttr(stride);
    stride *= shape[i];
  }
  strides[0] = b.getIndexAttr(kvHeads * piece);
  for (size_t i = 1; i < shape.size(); ++i)
    sizes.push_back(b.getIndexAttr(shape[i]));
  return memref::ReinterpretCastOp::create(b, MemRefType::get(shape, type.getElementType()),
                                           pool, /*offset=*/b.getIndexAttr(0), sizes, strides);
}

Value cpu::transposedKView(ImplicitLocOpBuilder &b, Value k) {
  auto type = cast<MemRefType>(k.getType());
  return pieceShapedView(b, k, {type.getDimSize(3), type.getDimSize(2)});
}

Value cpu::pieceView(ImplicitLocOpBuilder &b, Value pool) {
  auto type = cast<MemRefType>(pool.getType());
  return pieceShapedView(b, pool, {type.getDimSize(2) * type.getDimSize(3)});
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

std::pair<func::FuncOp, KernelArgs>
cpu::createKernelFunction(ImplicitLocOpBuilder &b, StringRef name, const KernelConfig &c) {
  MLIRContext *ctx = b.getContext();
  auto fn =
      func::FuncOp::create(b, name, FunctionType::get(ctx, kernelArgTypes(ctx, c), TypeRange{}));
  fn.setPrivate();
  b.setInsertionPointToStart(fn.addEntryBlock());
  auto a = fn.getArguments();
  KernelArgs args{a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9]};
  func::ReturnOp::create(b);
  b.setInsertionPointToStart(&fn.front());
  Emitter e{b};
  emitArgumentGuard(e, fn->getParentOfType<ModuleOp>(), c, args);
  return {fn, args};
}

/// The slot-major walk of one (sequence, unit group, chunk) iteration with overlapPieces: piece
/// j's logits run in one loop with the p.V of piece j - pvLag (DenseBlock::overlappedStep), then
/// piece j's softmax; the last pieces' p.V follows the walk. Each piece's probabilities and
/// rescale factors stay in one of pvLag + 1 buffers, taken in turn, until its p.V has run, and
/// the pending pieces' (pool block, kv head, unit, rows, buffer) wait in a small stack buffer,
/// oldest first. A partial block (the chunk's first or last) takes its p.V alone, row by row,
/// since only its valid V rows may be read; the next piece's logits then run alone too.
/// With pvLag 2 no overlapped step reads the probabilities of the softmax just before it, so the
/// softmax's dependency chain can run beside the step's FMAs on a core whose out-of-order window
/// does not reach past the step's first p.V rows (docs/cpu-runs.md, "p.V two pieces behind").
static void walkOverlapped(Emitter &e, const KernelConfig &c, DenseBlock &body, Value s,
                           Value blkLo, Value blkHi, Value u0, Value u1, int64_t nsub, Value t0,
                           Value t1, function_ref<void(Value, Value)> setFarPiece) {
  ImplicitLocOpBuilder &b = e.b;
  int64_t gs = c.subGroup(), bs = c.blockSize, lag = c.pvLag;
  SmallVector<Value> scores{body.scores};
  for (int64_t i = 0; i < lag; ++i)
    scores.push_back(allocScores(e, c));
  Value alphas =
      memref::AllocaOp::create(b, MemRefType::get({lag + 1, gs}, e.f32()), e.stackAlign());
  // Per pending piece (entry 0 the oldest) its fields, then the buffer the next piece takes.
  enum Field { kPending, kPb, kKvh, kUnit, kR0, kR1, kBuf, kFields };
  int64_t nextBufSlot = lag * kFields;
  Value state = memref::AllocaOp::create(b, MemRefType::get({nextBufSlot + 1}, b.getIndexType()));
  for (int64_t i = 0; i <= nextBufSlot; ++i)
    memref::StoreOp::create(b, e.idx(0), state, ValueRange{e.idx(i)});
  auto load = [&](int64_t slot) {
    return memref::LoadOp::create(b, state, ValueRange{e.idx(slot)}).getResult();
  };
  auto get = [&](int64_t entry, Field f) { return load(entry * kFields + f); };
  auto bufferScores = [&](Value buf) {
    Value picked = scores[lag];
    for (int64_t i = lag - 1; i >= 0; --i)
      picked = e.select(e.cmpi(arith::CmpIPredicate::eq, buf, e.idx(i)), scores[i], picked);
    return picked;
  };
  auto bufferAlpha = [&](Value buf) {
    SmallVector<Value> a;
    for (int64_t g = 0; g < gs; ++g)
      a.push_back(memref::LoadOp::create(b, alphas, ValueRange{buf, e.idx(g)}));
    return a;
  };
  // p.V of pending entry |entry| alone (a partial block, or the walk's last pieces).
  auto finishPending = [&](int64_t entry) {
    e.ifThenElse(e.cmpi(arith::CmpIPredicate::ne, get(entry, kPending), e.idx(0)), [&] {
      Value unit = body.unit, current = body.scores;
      Value buf = get(entry, kBuf);
      body.unit = get(entry, kUnit);
      body.scores = bufferScores(buf);
      body.accumulate(get(entry, kPb), get(entry, kKvh), get(entry, kR0), get(entry, kR1),
                      bufferAlpha(buf), Value(), Value());
      body.unit = unit;
      body.scores = current;
    });
  };
  e.forEach(blkLo, blkHi, e.idx(1), [&](Value blk) {
    e.forEach(u0, u1, e.idx(1), [&](Value u) {
      setFarPiece(blk, u);
      Value kvh = e.divi(u, e.idx(nsub));
      Value pb = e.loadIndex(body.table, {s, blk});
      Value rowBase = e.muli(blk, e.idx(bs));
      Value r0 = e.maxi(e.subi(t0, rowBase), e.idx(0));
      Value r1 = e.mini(e.subi(t1, rowBase), e.idx(bs));
      Value mineBuf = load(nextBufSlot);
      Value oldestWhole = arith::AndIOp::create(
          b, e.cmpi(arith::CmpIPredicate::ne, get(0, kPending), e.idx(0)),
          arith::AndIOp::create(b, e.cmpi(arith::CmpIPredicate::eq, get(0, kR0), e.idx(0)),
                                e.cmpi(arith::CmpIPredicate::eq, get(0, kR1), e.idx(bs))));
      body.unit = u;
      body.scores = bufferScores(mineBuf);
      e.ifThenElse(
          oldestWhole,
          [&] {
            Value buf = get(0, kBuf);
            body.overlappedStep(get(0, kPb), get(0, kKvh), get(0, kUnit), bufferScores(buf),
                                bufferAlpha(buf), pb, kvh);
          },
          [&] {
            finishPending(0);
            body.logitsTransposed(pb, kvh);
          });
      SmallVector<Value> alpha = body.softmax(r0, r1);
      for (int64_t g = 0; g < gs; ++g)
        memref::StoreOp::create(b, alpha[g], alphas, ValueRange{mineBuf, e.idx(g)});
      // The queue moves up one entry; this piece is the newest.
      for (int64_t entry = 0; entry + 1 < lag; ++entry)
        for (int64_t f = 0; f < kFields; ++f)
          memref::StoreOp::create(b, get(entry + 1, Field(f)), state,
                                  ValueRange{e.idx(entry * kFields + f)});
      Value newest[kFields] = {e.idx(1), pb, kvh, u, r0, r1, mineBuf};
      for (int64_t f = 0; f < kFields; ++f)
        memref::StoreOp::create(b, newest[f], state, ValueRange{e.idx((lag - 1) * kFields + f)});
      Value nextBuf = e.select(e.cmpi(arith::CmpIPredicate::eq, mineBuf, e.idx(lag)), e.idx(0),
                               e.addi(mineBuf, e.idx(1)));
      memref::StoreOp::create(b, nextBuf, state, ValueRange{e.idx(nextBufSlot)});
    });
  });
  for (int64_t entry = 0; entry < lag; ++entry)
    finishPending(entry);
  body.scores = scores[0];
}

func::FuncOp cpu::buildDenseKernel(ModuleOp module, StringRef name, const KernelConfig &c,
                                   Location loc) {
  ImplicitLocOpBuilder b = ImplicitLocOpBuilder::atBlockEnd(loc, module.getBody());
  std::pair<func::FuncOp, KernelArgs> created = createKernelFunction(b, name, c);
  func::FuncOp fn = created.first;
  const KernelArgs &args = created.second;
  Emitter e{b};
  Value q = args.q, k = args.k, v = args.v, table = args.table, lens = args.lens,
        begin = args.begin, end = args.end, o = args.o, m = args.m, l = args.l;
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
  // Every range empty (e.g. the scheduler gave this device no tokens): write the empty partial
  // serially. Waking the OpenMP team for nothing costs ~0.1 ms a region on this machine.
  auto allEmpty = scf::IfOp::create(b, e.cmpi(arith::CmpIPredicate::eq, maxSpan, e.idx(0)),
                                    /*withElseRegion=*/true);
  b.setInsertionPointToStart(allEmpty.thenBlock());
  auto rowVec = VectorType::get({d}, e.f32());
  emitEmptyPartial(e, c, o, m, l, batch);
  b.setInsertionPointToStart(allEmpty.elseBlock());

  Value numChunks = e.maxi(e.ceilDiv(maxSpan, chunk), e.idx(1));
  Value units = e.idx(c.kvHeads * nsub);

  // Scratch rows: ((s * units + u) * numChunks + chunk) * gs + g.
  Value rows = e.muli(e.muli(e.muli(batch, units), numChunks), e.idx(gs));
  Value so = memref::AllocOp::create(b, MemRefType::get({ShapedType::kDynamic, d}, e.f32()),
                                     ValueRange{rows});
  auto statType = MemRefType::get({ShapedType::kDynamic}, e.f32());
  Value sm = memref::AllocOp::create(b, statType, ValueRange{rows});
  Value sl = memref::AllocOp::create(b, statType, ValueRange{rows});

  DenseBlock body{e, c, k, v, table, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  if (c.kTransposed)
    body.kT = transposedKView(b, k);
  // The overlapped step's offsets into flat pieces, for 16-bit KV on 16-register (AVX2) targets:
  // on a Zen 3 (3 interleaved rounds from DRAM, 32K and 128K tokens, batch 1 and 8, 1 and 2
  // threads) bf16 read 0.787 against 0.708 of the roof (mean of medians), f16 0.747 against
  // 0.699; f32 0.823 against 0.855, so it keeps its 4-D indices (docs/cpu-runs.md, "Zen 3
  // again, on transposed K"). AVX-512 code keeps them too: its 16-bit kernels read 0.837 of the
  // roof either way on Emerald Rapids (16 cells; "Emerald Rapids again: ...flat offsets").
  if (overlapPieces(c) && !c.kvType.isF32() && c.targetRegs() == 16) {
    body.kPieces = pieceView(b, k);
    body.vPieces = pieceView(b, v);
  }
  int64_t w = c.dotWidth(), tw = c.accTileWidth(), nw = d / w;
  // One iteration per (sequence, unit group, chunk) walks its kv-head units slot-major: block by
  // block, and in a block unit by unit, so K and V are read as whole contiguous pool blocks (all
  // kv heads of a block lie together) rather than one kv head's pieces a block stride apart. Per
  // unit the accumulators, statistics and scaled q wait on the stack. Measured against the head-major
  // order (f32, Llama shapes, three interleaved runs, the prefetch of that time): 128K tokens at
  // batch 4 0.67-0.74 -> 0.75-0.81 of the roof, other cases within noise; without software
  // prefetch 0.55 -> 0.69. It also lets the prefetch work half a piece ahead (DenseBlock::block).
  // Where (sequence, chunk) pairs are too few to give every thread two, the units are split into
  // groups [u0, u1), one more parallel dimension.
  auto vectorChunks = [&](ValueRange ivs, Value unitGroups) {
    Value s = ivs[0], gi = ivs[1], ci = ivs[2];
    Value u0, u1;
    std::tie(u0, u1) = e.part(gi, units, unitGroups);
    Value n = e.subi(u1, u0);
    // scf-to-openmp scopes each iteration's stack allocations (alloca_scope).
    body.scores = allocScores(e, c);
    body.acc = memref::AllocaOp::create(b, MemRefType::get({c.kvHeads * nsub, gs, d}, e.f32()),
                                        e.stackAlign());
    // q of every head, scaled, as the dot-width slices the block code takes (qv[g * nw + j] at
    // column j * w), in the (even, odd) order of bf16Pairs where it applies.
    bool dot = bf16DotApplies(c);
    int64_t halves = bf16DotHalves(c);
    // The transposed logits take q as f32, or (bf16DotLogits) as i32 pairs of rounded columns.
    bool qPairs = bf16DotLogits(c);
    bool qDot = dot && (!c.kTransposed || qPairs);
    MemRefType qsType = qPairs ? MemRefType::get({c.qHeads, d / 2}, b.getI32Type())
                        : qDot ? MemRefType::get({c.qHeads, halves, d}, c.kvType)
                               : MemRefType::get({c.qHeads, d}, e.f32());
    body.qs = memref::AllocaOp::create(b, qsType, e.stackAlign());
    if (dot)
      body.probs =
          memref::AllocaOp::create(b, MemRefType::get({halves, gs, bs / 2}, b.getI32Type()),
                                   e.stackAlign());
    auto statType = MemRefType::get({c.kvHeads * nsub, gs}, e.f32());
    body.maxes = memref::AllocaOp::create(b, statType, e.stackAlign());
    body.sums = memref::AllocaOp::create(b, statType, e.stackAlign());
    Value scaleW = e.splat(e.cf(c.scale), w);
    auto sliceType = VectorType::get({w}, e.f32());
    e.forEach(u0, u1, e.idx(1), [&](Value u) {
      for (int64_t g = 0; g < gs; ++g) {
        Value h = e.addi(e.muli(u, e.idx(gs)), e.idx(g));
        for (int64_t col = 0; col < d; col += tw)
          vector::StoreOp::create(b, e.splat(e.cf(0.0f), tw), body.acc,
                                  ValueRange{u, e.idx(g), e.idx(col)});
        memref::StoreOp::create(b, e.negInf(), body.maxes, ValueRange{u, e.idx(g)});
        memref::StoreOp::create(b, e.cf(0.0f), body.sums, ValueRange{u, e.idx(g)});
        if (qDot) {
          // q scaled = hi + lo, both bf16 (hi rounded to nearest, lo the rounded rest): the
          // bf16 dot products then see q to ~2^-17 relative instead of bf16's 2^-9. Rounded
          // once (bf16DotRounded), hi alone.
          auto rowType = VectorType::get({2 * w}, e.f32());
          auto halfType = VectorType::get({2 * w}, c.kvType);
          Value scale2W = e.splat(e.cf(c.scale), 2 * w);
          for (int64_t j = 0; j < d; j += 2 * w) {
            Value q32 = e.mulf(vector::LoadOp::create(b, rowType, q, ValueRange{s, h, e.idx(j)}),
                               scale2W);
            Value hi = arith::TruncFOp::create(b, halfType, q32);
            if (qPairs) {
              vector::StoreOp::create(
                  b, vector::BitCastOp::create(b, VectorType::get({w}, b.getI32Type()), hi),
                  body.qs, ValueRange{h, e.idx(j / 2)});
              continue;
            }
            vector::StoreOp::create(b, hi, body.qs, ValueRange{h, e.idx(0), e.idx(j)});
            if (halves == 2) {
              Value lo = arith::TruncFOp::create(
                  b, halfType, e.subf(q32, arith::ExtFOp::create(b, rowType, hi)));
              vector::StoreOp::create(b, lo, body.qs, ValueRange{h, e.idx(1), e.idx(j)});
            }
          }
          continue;
        }
        SmallVector<Value> slices;
        if (bf16Pairs(c) && !c.kTransposed) { // the transposed logits take q in natural order
          SmallVector<int64_t> evens, odds;
          for (int64_t i = 0; i < w; ++i) {
            evens.push_back(2 * i);
            odds.push_back(2 * i + 1);
          }
          for (int64_t j = 0; j < d; j += 2 * w) {
            Value q32 = vector::LoadOp::create(b, VectorType::get({2 * w}, e.f32()), q,
                                               ValueRange{s, h, e.idx(j)});
            slices.push_back(vector::ShuffleOp::create(b, q32, q32, evens));
            slices.push_back(vector::ShuffleOp::create(b, q32, q32, odds));
          }
        } else {
          for (int64_t j = 0; j < nw; ++j)
            slices.push_back(
                vector::LoadOp::create(b, sliceType, q, ValueRange{s, h, e.idx(j * w)}));
        }
        for (int64_t j = 0; j < nw; ++j)
          vector::StoreOp::create(b, e.mulf(slices[j], scaleW), body.qs,
                                  ValueRange{h, e.idx(j * w)});
      }
    });
    std::pair<Value, Value> range = clampedRange(e, c, lens, capacity, s, begin, end);
    Value lo = range.first, hi = range.second;
    Value base = e.addi(e.muli(e.divi(lo, e.idx(bs)), e.idx(bs)), e.muli(ci, e.idx(chunk)));
    Value t0 = e.maxi(lo, base);
    Value t1 = e.maxi(e.mini(hi, e.addi(base, e.idx(chunk))), t0);
    Value blkLo = e.divi(t0, e.idx(bs));
    Value blkHi = e.select(e.cmpi(arith::CmpIPredicate::slt, t0, t1), e.ceilDiv(t1, bs), blkLo);

    // The piece (block, kv head) computed |ahead| pieces after unit |u| of block |blk|: the next
    // one, whose K rows the block code prefetches into L1 (see DenseBlock::block), and the far
    // one of the L2 prefetch; past the chunk's end, clamped to its last block.
    auto nextPiece = [&](Value blk, Value u, int64_t ahead = 1) {
      Value lin = e.addi(e.addi(e.muli(blk, n), e.subi(u, u0)), e.idx(ahead));
      Value pblk = e.mini(e.divi(lin, n), e.subi(blkHi, e.idx(1)));
      Value pkvh = e.divi(e.addi(u0, e.remi(lin, n)), e.idx(nsub));
      return std::make_pair(pblk, pkvh);
    };
    // The first piece of a chunk has no earlier piece to prefetch it.
    e.ifThenElse(e.cmpi(arith::CmpIPredicate::slt, blkLo, blkHi), [&] {
      body.prefetchPiece(e.loadIndex(table, {s, blkLo}), e.divi(u0, e.idx(nsub)));
    });
    auto setFarPiece = [&](Value blk, Value u) {
      if (int64_t far = c.farPieces()) {
        std::pair<Value, Value> farPiece = nextPiece(blk, u, far);
        body.pbFar = e.loadIndex(table, {s, farPiece.first});
        body.kvhFar = farPiece.second;
      }
    };
    if (overlapPieces(c)) {
      walkOverlapped(e, c, body, s, blkLo, blkHi, u0, u1, nsub, t0, t1, setFarPiece);
    } else {
      e.forEach(blkLo, blkHi, e.idx(1), [&](Value blk) {
        e.forEach(u0, u1, e.idx(1), [&](Value u) {
          body.unit = u;
          setFarPiece(blk, u);
          std::pair<Value, Value> next = nextPiece(blk, u);
          body.block(s, e.divi(u, e.idx(nsub)), blk, t0, t1, e.loadIndex(table, {s, next.first}),
                     next.second);
        });
      });
    }
    e.forEach(u0, u1, e.idx(1), [&](Value u) {
      Value row0 =
          e.muli(e.addi(e.muli(e.addi(e.muli(s, units), u), numChunks), ci), e.idx(gs));
      for (int64_t g = 0; g < gs; ++g) {
        Value row = e.addi(row0, e.idx(g));
        if (dot) {
          // Back from the unpack order of the bf16 dot products (dotPairColumn) to the natural.
          SmallVector<int64_t> natural(2 * w);
          for (int64_t i = 0; i < 2 * w; ++i)
            natural[dotPairColumn(i, w)] = i;
          auto group = VectorType::get({2 * w}, e.f32());
          for (int64_t col = 0; col < d; col += 2 * w) {
            Value x = vector::LoadOp::create(b, group, body.acc, ValueRange{u, e.idx(g), e.idx(col)});
            vector::StoreOp::create(b, vector::ShuffleOp::create(b, x, x, natural), so,
                                    ValueRange{row, e.idx(col)});
          }
        } else if (bf16Pairs(c)) {
          // Back from the (even, odd) order to the natural one.
          SmallVector<int64_t> zip;
          for (int64_t i = 0; i < w; ++i) {
            zip.push_back(i);
            zip.push_back(w + i);
          }
          auto half = VectorType::get({w}, e.f32());
          for (int64_t col = 0; col < d; col += 2 * w) {
            Value even =
                vector::LoadOp::create(b, half, body.acc, ValueRange{u, e.idx(g), e.idx(col)});
            Value odd = vector::LoadOp::create(b, half, body.acc,
                                               ValueRange{u, e.idx(g), e.idx(col + w)});
            vector::StoreOp::create(b, vector::ShuffleOp::create(b, even, odd, zip), so,
                                    ValueRange{row, e.idx(col)});
          }
        } else {
          for (int64_t col = 0; col < d; col += tw) {
            Value part = vector::LoadOp::create(b, VectorType::get({tw}, e.f32()), body.acc,
                                                ValueRange{u, e.idx(g), e.idx(col)});
            vector::StoreOp::create(b, part, so, ValueRange{row, e.idx(col)});
          }
        }
        for (auto [stat, out] : {std::pair{body.maxes, sm}, std::pair{body.sums, sl}})
          memref::StoreOp::create(b, memref::LoadOp::create(b, stat, ValueRange{u, e.idx(g)}), out,
                                  ValueRange{row});
      }
    });
  };
  // Groups of units (kv heads on the AMX path): enough (sequence, group, chunk) iterations for
  // two per OpenMP thread, so a single short sequence still spreads over many cores.
  func::FuncOp maxThreads = declareFunction(module, "omp_get_max_threads", {}, {b.getI32Type()});
  Value threads = arith::IndexCastOp::create(
      b, b.getIndexType(), func::CallOp::create(b, maxThreads, ValueRange{}).getResult(0));
  Value items = e.muli(batch, numChunks);
  Value wantedGroups =
      e.maxi(e.divi(e.addi(e.muli(threads, e.idx(2)), e.subi(items, e.idx(1))), items), e.idx(1));
  auto runVectorChunks = [&] {
    Value unitGroups = e.mini(wantedGroups, units);
    e.parallel({batch, unitGroups, numChunks},
               [&](ValueRange ivs) { vectorChunks(ivs, unitGroups); });
  };
  if (amxApplies(c)) {
    // The runtime knows whether this process may use the tile registers (the OS grants them on
    // request); where it may not, the vector loop below runs instead.
    e.ifThenElse(
        amxAvailable(b, module),
        [&] {
          Value kvGroups = e.mini(wantedGroups, e.idx(c.kvHeads));
          emitAmxChunks(e, c, args, batch, capacity, numChunks, kvGroups, so, sm, sl);
        },
        [&] { runVectorChunks(); });
  } else {
    runVectorChunks();
  }

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
  return fn;
}
