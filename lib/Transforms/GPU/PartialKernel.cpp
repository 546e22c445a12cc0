//===- PartialKernel.cpp - the split-KV flash-decoding kernel of hg.partial_attention on gpu ===//
//
// Grid (chunks, kv_heads, batch), 4 warps a block. A block runs the online softmax of every query
// head of one GQA group over one token chunk of one sequence, so each K and V row is read from
// memory once for the whole group. A row is split over lanesPerRow lanes, each holding one 16-byte
// piece (4 f32 or 8 f16/bf16 elements; piecesPerLane() adjacent pieces where asked) loaded
// with vectorized global loads; the per-head dot products are finished with xor shuffles inside
// those lanes. Every warp streams its own rows (unroll() row groups a step, software-pipelined:
// the next step's loads are issued before this step's arithmetic, into registers or, with
// asyncStages(), by cp.async into a shared-memory ring S-1 steps ahead), then the row groups of a
// warp are merged with shuffles and the warps through shared memory. The kernel asks ptxas for
// residentBlocks() blocks per multiprocessor (nvvm.minctasm), which the host's chunk count fills
// in whole waves. The chunk's unnormalized output and its (m, l) go to scratch for the combine
// kernel.
//
//===----------------------------------------------------------------------===//
#include "GPUCodegen.h"
#include "../AttentionParams.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::hybridgen;
using namespace mlir::hybridgen::gpu_lowering;

std::string GpuKernelConfig::mangle() const { return mangleAttentionParams(*this); }

std::string gpu_lowering::unsupportedReason(const GpuKernelConfig &c) {
  int64_t rowBytes = c.headDim * c.eltBytes();
  if (rowBytes % kLoadBytes != 0)
    return llvm::formatv("head_dim {0} is not supported by the GPU lowering: a row of {1} bytes "
                         "is not a whole number of 16-byte loads",
                         c.headDim, rowBytes);
  int64_t pieces = rowBytes / kLoadBytes;
  if (pieces > kWarpSize || !llvm::isPowerOf2_64(pieces))
    return llvm::formatv("head_dim {0} is not supported by the GPU lowering: a row must be a "
                         "power of two of 16-byte pieces, at most 32 (512 bytes)",
                         c.headDim);
  if (c.group() > 8)
    return llvm::formatv("GQA group {0} is not supported by the GPU lowering (at most 8 query "
                         "heads per kv head live in one block's registers)",
                         c.group());
  return "";
}

std::string gpu_lowering::tuningError(const GpuKernelConfig &c) {
  const GPUKernelTuning &t = c.tuning;
  if (t.unroll < 0 || t.unroll > 8)
    return llvm::formatv("GPU kernel option unroll={0} is out of range (0 = auto, 1..8)", t.unroll);
  if (t.piecesPerLane < 1 || t.piecesPerLane > kWarpSize || !llvm::isPowerOf2_64(t.piecesPerLane))
    return llvm::formatv("GPU kernel option pieces-per-lane={0} must be a power of two in 1..32",
                         t.piecesPerLane);
  if (t.asyncStages < 0 || t.asyncStages == 1 || t.asyncStages > 8)
    return llvm::formatv("GPU kernel option async-stages={0} is out of range (0 = off, 2..8)",
                         t.asyncStages);
  if (t.residentBlocks < 0 || t.residentBlocks > 8)
    return llvm::formatv("GPU kernel option resident-blocks={0} is out of range (0 = auto, 1..8)",
                         t.residentBlocks);
  if (c.sharedBytes() > kMaxStaticSharedBytes)
    return llvm::formatv("the GPU kernel would need {0} bytes of shared memory (async-stages={1}, "
                         "unroll={2}, pieces-per-lane={3}, group {4}, head_dim {5}); at most {6} "
                         "fit: use fewer stages or a smaller unroll",
                         c.sharedBytes(), t.asyncStages, c.unroll(), c.piecesPerLane(), c.group(),
                         c.headDim, kMaxStaticSharedBytes);
  return "";
}

SmallVector<Type> gpu_lowering::partialKernelArgTypes(MLIRContext *ctx,
                                                      const GpuKernelConfig &c) {
  int64_t dyn = ShapedType::kDynamic;
  Type f32 = Float32Type::get(ctx), i32 = IntegerType::get(ctx, 32),
       i64 = IntegerType::get(ctx, 64), index = IndexType::get(ctx);
  return {MemRefType::get({dyn, c.qHeads, c.headDim}, f32),
          i64,
          i64,
          index,
          MemRefType::get({dyn, dyn}, i32),
          MemRefType::get({dyn}, i32),
          index,
          index,
          index,
          MemRefType::get({dyn, c.headDim}, f32),
          MemRefType::get({dyn}, f32),
          MemRefType::get({dyn}, f32)};
}

std::pair<Value, Value> gpu_lowering::clampedRange(Emitter &e, const GpuKernelConfig &c,
                                                   Value lens, Value capacity, Value s,
                                                   Value begin, Value end) {
  // A length beyond the block table would read past it: the table is the limit, as on the CPU.
  Value len = e.mini(e.maxi(e.loadIndex(lens, {s}), e.idx(0)), capacity);
  Value lo = e.mini(e.maxi(begin, e.idx(0)), len);
  if (c.window > 0)
    lo = e.maxi(lo, e.subi(len, e.idx(c.window)));
  Value hi = e.maxi(e.mini(e.maxi(end, e.idx(0)), len), lo);
  return {lo, hi};
}

namespace {

/// Per-lane state of the online softmax of one query head: running max, sum and the lane's
/// slice of the unnormalized output.
struct HeadState {
  Value m, l;
  SmallVector<Value> acc;
};

struct PartialKernelBuilder {
  ImplicitLocOpBuilder &b;
  Emitter e;
  const GpuKernelConfig &c;
  int64_t G, E, P, lpr, rpw, U, D;

  PartialKernelBuilder(ImplicitLocOpBuilder &b, const GpuKernelConfig &c)
      : b(b), e{b}, c(c), G(c.group()), E(c.lanesElems()), P(c.piecesPerLane()), lpr(c.lanesPerRow()),
        rpw(c.rowsPerWarp()), U(c.unroll()), D(c.headDim) {}

  Value i64(Value index) { return arith::IndexCastOp::create(b, b.getI64Type(), index); }
  Value shuffleXor(Value v, int64_t offset) {
    return gpu::ShuffleOp::create(b, v, static_cast<int32_t>(offset),
                                  static_cast<int32_t>(kWarpSize), gpu::ShuffleMode::XOR)
        .getShuffleResult();
  }
  /// max(x, y) for values that are never NaN (-inf at most): PTX max.f32.
  Value maxf(Value x, Value y) { return arith::MaxNumFOp::create(b, x, y); }
  /// The max to subtract: 0 where every logit so far is -inf, so exp(-inf - 0) = 0, not NaN.
  Value safeMax(Value mx) {
    return e.select(e.cmpf(arith::CmpFPredicate::OEQ, mx, e.negInf()), e.cf(0.0f), mx);
  }

  /// The lane's 16-byte piece of a K or V row at byte offset |byteOff| from |base|, as 4 words.
  Value loadWords(Value base, Value byteOff) {
    auto ptrType = LLVM::LLVMPointerType::get(b.getContext(), /*addressSpace=*/1);
    Value ptr = LLVM::GEPOp::create(b, ptrType, b.getI8Type(), base, ValueRange{byteOff});
    // K and V are read-only while the kernel runs: invariant loads become ld.global.nc.
    Value words = LLVM::LoadOp::create(b, wordsType(), ptr, /*alignment=*/kLoadBytes,
                                       /*isVolatile=*/false, /*isNonTemporal=*/false,
                                       /*isInvariant=*/true);
    // LLVM's vector-combine would split a load used only by extractelements into scalar loads,
    // dropping !invariant.load; the backend re-vectorizes them without .nc. A freeze (free in
    // PTX) keeps the load whole.
    return LLVM::FreezeOp::create(b, words);
  }
  Type wordsType() { return VectorType::get({4}, b.getI32Type()); }
  /// |byteOff| (i64) + |n|.
  Value addBytes(Value byteOff, int64_t n) {
    return n ? arith::AddIOp::create(b, byteOff, arith::ConstantIntOp::create(b, n, 64)).getResult()
             : byteOff;
  }

  /// The lane's P pieces of one row (K then V words of a row group are 2P entries) as E f32.
  SmallVector<Value> widenRow(ArrayRef<Value> pieces) {
    SmallVector<Value> out;
    for (Value w : pieces)
      llvm::append_range(out, widen(w));
    return out;
  }
  /// A 16-byte piece (loadWords) as pieceElems() f32, widened in registers.
  SmallVector<Value> widen(Value words) {
    SmallVector<Value> out;
    if (c.kvType.isF16()) {
      Value halves = LLVM::BitcastOp::create(b, VectorType::get({8}, b.getF16Type()), words);
      for (int64_t i = 0; i < 8; ++i) {
        Value h = LLVM::ExtractElementOp::create(
            b, halves, arith::ConstantIntOp::create(b, i, 32).getResult());
        out.push_back(arith::ExtFOp::create(b, e.f32(), h));
      }
      return out;
    }
    for (int64_t i = 0; i < 4; ++i) {
      Value w = LLVM::ExtractElementOp::create(b, words,
                                               arith::ConstantIntOp::create(b, i, 32).getResult());
      if (c.kvType.isF32()) {
        out.push_back(arith::BitcastOp::create(b, e.f32(), w));
        continue;
      }
      // bf16 pair (little endian): element 2i in the low half, 2i+1 in the high half; a bf16 is
      // the top half of the f32 it widens to, so a shift and a mask widen both exactly.
      Value lo = arith::ShLIOp::create(b, w, arith::ConstantIntOp::create(b, 16, 32));
      Value hi = arith::AndIOp::create(
          b, w, arith::ConstantIntOp::create(b, static_cast<int32_t>(0xFFFF0000u), 32));
      out.push_back(arith::BitcastOp::create(b, e.f32(), lo));
      out.push_back(arith::BitcastOp::create(b, e.f32(), hi));
    }
    return out;
  }

  /// Merges (m, l, acc) of |o| into |s| (both relative to their own max).
  void mergeInto(HeadState &s, const HeadState &o) {
    Value mx = maxf(s.m, o.m);
    Value ms = safeMax(mx);
    Value a = e.exp(e.subf(s.m, ms)), w = e.exp(e.subf(o.m, ms));
    s.l = e.addf(e.mulf(s.l, a), e.mulf(o.l, w));
    for (int64_t i = 0; i < E; ++i)
      s.acc[i] = e.addf(e.mulf(s.acc[i], a), e.mulf(o.acc[i], w));
    s.m = mx;
  }

  void build(gpu::GPUFuncOp fn) {
    Block &entry = fn.getBody().front();
    auto args = entry.getArguments();
    Value q = args[0], kAddr = args[1], vAddr = args[2], numBlocks = args[3], table = args[4],
          lens = args[5], begin = args[6], end = args[7], chunkTokens = args[8], so = args[9],
          sm = args[10], sl = args[11];
    Value redO = fn.getWorkgroupAttributions()[0];
    Value redM = fn.getWorkgroupAttributions()[1];
    Value redL = fn.getWorkgroupAttributions()[2];

    Value chunk = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value kvh = gpu::BlockIdOp::create(b, gpu::Dimension::y);
    Value s = gpu::BlockIdOp::create(b, gpu::Dimension::z);
    Value numChunks = gpu::GridDimOp::create(b, gpu::Dimension::x);
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value warp = e.divi(tid, e.idx(kWarpSize)), lane = e.remi(tid, e.idx(kWarpSize));
    Value sub = e.divi(lane, e.idx(lpr)), piece = e.remi(lane, e.idx(lpr));
    Value col0 = e.muli(piece, e.idx(E));

    Value capacity = e.muli(memref::DimOp::create(b, table, 1), e.idx(c.blockSize));
    std::pair<Value, Value> range = clampedRange(e, c, lens, capacity, s, begin, end);
    Value lo = range.first, hi = range.second;
    Value t0 = e.mini(e.addi(lo, e.muli(chunk, chunkTokens)), hi);
    Value t1 = e.mini(e.addi(t0, chunkTokens), hi);

    // q of the group's heads, scaled: the lane's columns only.
    SmallVector<SmallVector<Value>> qv(G);
    for (int64_t g = 0; g < G; ++g) {
      Value h = e.addi(e.muli(kvh, e.idx(G)), e.idx(g));
      for (int64_t i = 0; i < E; ++i)
        qv[g].push_back(e.mulf(
            memref::LoadOp::create(b, q, ValueRange{s, h, e.addi(col0, e.idx(i))}), e.cf(c.scale)));
    }

    auto ptrType = LLVM::LLVMPointerType::get(b.getContext(), 1);
    Value kBase = LLVM::IntToPtrOp::create(b, ptrType, kAddr);
    Value vBase = LLVM::IntToPtrOp::create(b, ptrType, vAddr);

    // Loop-carried: per head (m, l, acc[E]).
    SmallVector<Value> init;
    for (int64_t g = 0; g < G; ++g) {
      init.push_back(e.negInf());
      init.push_back(e.cf(0.0f));
      for (int64_t i = 0; i < E; ++i)
        init.push_back(e.cf(0.0f));
    }
    auto unpack = [&](ValueRange vals) {
      SmallVector<HeadState> st(G);
      for (int64_t g = 0; g < G; ++g) {
        int64_t base = g * (2 + E);
        st[g].m = vals[base];
        st[g].l = vals[base + 1];
        for (int64_t i = 0; i < E; ++i)
          st[g].acc.push_back(vals[base + 2 + i]);
      }
      return st;
    };
    auto pack = [&](ArrayRef<HeadState> st) {
      SmallVector<Value> vals;
      for (const HeadState &h : st) {
        vals.push_back(h.m);
        vals.push_back(h.l);
        vals.append(h.acc.begin(), h.acc.end());
      }
      return vals;
    };

    // Rows of a warp per step are consecutive, so a warp reads rpw * U * rowBytes contiguous
    // bytes of a pool block where the chunk allows.
    Value start = e.addi(t0, e.muli(warp, e.idx(rpw * U)));
    Value step = e.idx(c.rowsPerStep());
    // Byte offset of the lane's piece of row |t| of the chunk; rows past it use row t0 (in
    // bounds whenever the chunk is not empty; the caller masks or ignores them).
    auto rowOffset = [&](Value t) {
      Value tc = e.select(e.cmpi(arith::CmpIPredicate::slt, t, t1), t, t0);
      Value blk = e.loadIndex(table, {s, e.divi(tc, e.idx(c.blockSize))});
      // Block ids are checked by the runtime before a launch; clamping keeps a bad one inside
      // the pool anyway.
      blk = e.mini(e.maxi(blk, e.idx(0)), e.subi(numBlocks, e.idx(1)));
      Value row = e.remi(tc, e.idx(c.blockSize));
      Value elem = e.addi(
          e.muli(e.addi(e.muli(e.addi(e.muli(blk, e.idx(c.kvHeads)), kvh), e.idx(c.blockSize)), row),
                 e.idx(D)),
          col0);
      return arith::MulIOp::create(b, i64(elem), arith::ConstantIntOp::create(b, c.eltBytes(), 64))
          .getResult();
    };
    auto rowOf = [&](Value tb, int64_t u) { return e.addi(e.addi(tb, e.idx(u * rpw)), sub); };
    // The K and V words of the step at |tb| (U row groups, K then V).
    auto issueLoads = [&](Value tb) {
      SmallVector<Value> words;
      for (int64_t u = 0; u < U; ++u) {
        Value byteOff = rowOffset(rowOf(tb, u));
        for (Value base : {kBase, vBase})
          for (int64_t p = 0; p < P; ++p)
            words.push_back(loadWords(base, addBytes(byteOff, p * kLoadBytes)));
      }
      return words;
    };
    const int64_t S = c.asyncStages();
    const size_t stateSize = init.size();
    // cp.async ring (S > 0): each lane copies its own 16-byte pieces of the step S-1 ahead into
    // its slots of the warp's stage and reads back only its own slots, so a wait_group is all the
    // synchronization it needs. Copies hold no registers: more warps fit an SM and each keeps S-1
    // steps of K and V in flight.
    auto sharedPtr = LLVM::LLVMPointerType::get(b.getContext(), /*addressSpace=*/3);
    auto globalPtr = LLVM::LLVMPointerType::get(b.getContext(), /*addressSpace=*/1);
    Value ringBase;
    if (S > 0) {
      Value ring = fn.getWorkgroupAttributions()[3];
      Value ringAddr = memref::ExtractAlignedPointerAsIndexOp::create(b, ring);
      ringBase = LLVM::IntToPtrOp::create(b, sharedPtr, i64(ringAddr));
    }
    auto slot = [&](Value stage, int64_t j) {
      Value i = e.addi(
          e.muli(e.addi(e.muli(e.addi(e.muli(warp, e.idx(S)), stage), e.idx(2 * U * P)), e.idx(j)),
                 e.idx(kWarpSize)),
          lane);
      Value off = arith::MulIOp::create(b, i64(i), arith::ConstantIntOp::create(b, kLoadBytes, 64));
      return LLVM::GEPOp::create(b, sharedPtr, b.getI8Type(), ringBase, ValueRange{off}).getResult();
    };
    auto issueCopies = [&](Value tb, Value stage) {
      auto cg = NVVM::LoadCacheModifierKindAttr::get(b.getContext(), NVVM::LoadCacheModifierKind::CG);
      for (int64_t u = 0; u < U; ++u) {
        Value byteOff = rowOffset(rowOf(tb, u));
        for (int64_t kv = 0; kv < 2; ++kv)
          for (int64_t p = 0; p < P; ++p) {
            Value src = LLVM::GEPOp::create(b, globalPtr, b.getI8Type(), kv ? vBase : kBase,
                                            ValueRange{addBytes(byteOff, p * kLoadBytes)});
            NVVM::CpAsyncOp::create(b, slot(stage, (2 * u + kv) * P + p), src,
                                    b.getI32IntegerAttr(kLoadBytes), cg, Value());
          }
      }
    };
    if (S > 0) {
      // The first S-1 steps, one group each (empty groups where the warp has no rows).
      e.ifThenElse(
          e.cmpi(arith::CmpIPredicate::slt, start, t1),
          [&] {
            for (int64_t p = 0; p + 1 < S; ++p) {
              issueCopies(e.addi(start, e.muli(step, e.idx(p))), e.idx(p));
              NVVM::CpAsyncCommitGroupOp::create(b);
            }
          },
          [&] {
            for (int64_t p = 0; p + 1 < S; ++p)
              NVVM::CpAsyncCommitGroupOp::create(b);
          });
      init.push_back(e.idx(0)); // the ring stage of the loop's step
    } else {
      // Software pipeline in registers: the loop carries the next step's words, loaded before
      // this step's arithmetic, so a warp's loads are in flight while it computes (without it a
      // warp waited for every step's loads; 0.45 -> 0.57 of the copy bandwidth at 32K tokens,
      // batch 1, on the H200, with the other changes of docs/gpu-path.md "Kernel tuning"). The
      // first step's loads go before the loop, only where the warp has rows at all.
      Value zero = LLVM::ZeroOp::create(b, wordsType());
      auto first = scf::IfOp::create(
          b, e.cmpi(arith::CmpIPredicate::slt, start, t1),
          [&](OpBuilder &nb, Location) {
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
            scf::YieldOp::create(b, issueLoads(start));
          },
          [&](OpBuilder &nb, Location) {
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
            scf::YieldOp::create(b, SmallVector<Value>(2 * U * P, zero));
          });
      init.append(first.getResults().begin(), first.getResults().end());
    }
    SmallVector<Value> fin =
        e.loop(start, t1, step, init, [&](Value tb, ValueRange carried) {
          SmallVector<HeadState> st = unpack(carried.take_front(stateSize));
          SmallVector<Value> words, next;
          if (S > 0) {
            Value stage = carried[stateSize];
            // Refill the stage the previous step read with the step S-1 ahead; then wait until
            // this step's group is complete (at most S-1 newer ones pending).
            issueCopies(e.addi(tb, e.muli(step, e.idx(S - 1))),
                        e.remi(e.addi(stage, e.idx(S - 1)), e.idx(S)));
            NVVM::CpAsyncCommitGroupOp::create(b);
            NVVM::CpAsyncWaitGroupOp::create(b, b.getI32IntegerAttr(int32_t(S - 1)));
            for (int64_t j = 0; j < 2 * U * P; ++j)
              words.push_back(
                  LLVM::LoadOp::create(b, wordsType(), slot(stage, j), /*alignment=*/kLoadBytes));
            next = {e.remi(e.addi(stage, e.idx(1)), e.idx(S))};
          } else {
            words.assign(carried.begin() + stateSize, carried.end());
            next = issueLoads(e.addi(tb, step));
          }
          SmallVector<Value> valid;
          SmallVector<SmallVector<Value>> ks, vs;
          for (int64_t u = 0; u < U; ++u) {
            valid.push_back(e.cmpi(arith::CmpIPredicate::slt, rowOf(tb, u), t1));
            ks.push_back(widenRow(ArrayRef<Value>(words).slice((2 * u) * P, P)));
            vs.push_back(widenRow(ArrayRef<Value>(words).slice((2 * u + 1) * P, P)));
          }
          for (int64_t g = 0; g < G; ++g) {
            SmallVector<Value> logits;
            for (int64_t u = 0; u < U; ++u) {
              Value dot = e.mulf(qv[g][0], ks[u][0]);
              for (int64_t i = 1; i < E; ++i)
                dot = math::FmaOp::create(b, qv[g][i], ks[u][i], dot);
              for (int64_t off = lpr / 2; off >= 1; off /= 2)
                dot = e.addf(dot, shuffleXor(dot, off));
              if (c.softcap > 0.0f)
                dot = e.mulf(e.cf(c.softcap),
                             math::TanhOp::create(b, e.mulf(dot, e.cf(1.0f / c.softcap))));
              logits.push_back(e.select(valid[u], dot, e.negInf()));
            }
            HeadState &h = st[g];
            Value mx = h.m;
            for (Value x : logits)
              mx = maxf(mx, x);
            Value ms = safeMax(mx);
            Value alpha = e.exp(e.subf(h.m, ms));
            SmallVector<Value> p;
            for (Value x : logits)
              p.push_back(e.exp(e.subf(x, ms)));
            Value l = e.mulf(h.l, alpha);
            for (Value pu : p)
              l = e.addf(l, pu);
            for (int64_t i = 0; i < E; ++i) {
              Value a = e.mulf(h.acc[i], alpha);
              for (int64_t u = 0; u < U; ++u)
                a = math::FmaOp::create(b, p[u], vs[u][i], a);
              h.acc[i] = a;
            }
            h.m = mx;
            h.l = l;
          }
          SmallVector<Value> out = pack(st);
          out.append(next.begin(), next.end());
          return out;
        });
    fin.resize(stateSize);
    if (S > 0) // copies of steps past the chunk may still be in flight
      NVVM::CpAsyncWaitGroupOp::create(b, b.getI32IntegerAttr(0));
    SmallVector<HeadState> st = unpack(fin);

    // The warp's row groups: lanes lpr apart hold the same columns of different rows.
    for (int64_t off = lpr; off < kWarpSize; off *= 2)
      for (int64_t g = 0; g < G; ++g) {
        HeadState other;
        other.m = shuffleXor(st[g].m, off);
        other.l = shuffleXor(st[g].l, off);
        for (int64_t i = 0; i < E; ++i)
          other.acc.push_back(shuffleXor(st[g].acc[i], off));
        mergeInto(st[g], other);
      }

    // Row group 0 of every warp publishes its state; then every thread merges columns.
    e.ifThenElse(e.cmpi(arith::CmpIPredicate::eq, sub, e.idx(0)), [&] {
      for (int64_t g = 0; g < G; ++g) {
        Value slot = e.addi(e.muli(warp, e.idx(G)), e.idx(g));
        for (int64_t i = 0; i < E; ++i)
          memref::StoreOp::create(b, st[g].acc[i], redO,
                                  ValueRange{e.addi(e.addi(e.muli(slot, e.idx(D)), col0),
                                                    e.idx(i))});
        e.ifThenElse(e.cmpi(arith::CmpIPredicate::eq, piece, e.idx(0)), [&] {
          memref::StoreOp::create(b, st[g].m, redM, ValueRange{slot});
          memref::StoreOp::create(b, st[g].l, redL, ValueRange{slot});
        });
      }
    });
    gpu::BarrierOp::create(b);

    e.forEach(tid, e.idx(G * D), e.idx(kWarps * kWarpSize), [&](Value idx) {
      Value g = e.divi(idx, e.idx(D)), col = e.remi(idx, e.idx(D));
      SmallVector<Value> ms;
      Value mx = e.negInf();
      for (int64_t w = 0; w < kWarps; ++w) {
        ms.push_back(memref::LoadOp::create(b, redM, ValueRange{e.addi(e.idx(w * G), g)}));
        mx = maxf(mx, ms.back());
      }
      Value msafe = safeMax(mx);
      Value acc = e.cf(0.0f), l = e.cf(0.0f);
      for (int64_t w = 0; w < kWarps; ++w) {
        Value slot = e.addi(e.idx(w * G), g);
        Value wgt = e.exp(e.subf(ms[w], msafe));
        Value ow = memref::LoadOp::create(b, redO, ValueRange{e.addi(e.muli(slot, e.idx(D)), col)});
        acc = math::FmaOp::create(b, wgt, ow, acc);
        l = math::FmaOp::create(b, wgt, memref::LoadOp::create(b, redL, ValueRange{slot}), l);
      }
      Value h = e.addi(e.muli(kvh, e.idx(G)), g);
      Value row = e.addi(e.muli(e.addi(e.muli(s, e.idx(c.qHeads)), h), numChunks), chunk);
      memref::StoreOp::create(b, acc, so, ValueRange{row, col});
      e.ifThenElse(e.cmpi(arith::CmpIPredicate::eq, col, e.idx(0)), [&] {
        memref::StoreOp::create(b, mx, sm, ValueRange{row});
        memref::StoreOp::create(b, l, sl, ValueRange{row});
      });
    });
    gpu::ReturnOp::create(b);
  }
};

} // namespace

gpu::GPUFuncOp gpu_lowering::buildPartialKernel(gpu::GPUModuleOp module, StringRef name,
                                                const GpuKernelConfig &c, Location loc) {
  ImplicitLocOpBuilder b = ImplicitLocOpBuilder::atBlockEnd(loc, module.getBody());
  MLIRContext *ctx = b.getContext();
  auto workgroup = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  Type f32 = b.getF32Type();
  int64_t slots = kWarps * c.group();
  SmallVector<Type> shared{MemRefType::get({slots * c.headDim}, f32, AffineMap(), workgroup),
                           MemRefType::get({slots}, f32, AffineMap(), workgroup),
                           MemRefType::get({slots}, f32, AffineMap(), workgroup)};
  if (c.asyncStages() > 0) // 16-byte elements: the ring is 16-byte aligned for cp.async
    shared.push_back(MemRefType::get({c.ringBytes() / kLoadBytes},
                                     VectorType::get({4}, b.getI32Type()), AffineMap(), workgroup));
  auto fn = gpu::GPUFuncOp::create(
      b, name, FunctionType::get(ctx, partialKernelArgTypes(ctx, c), TypeRange{}), shared);
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr({int32_t(kWarps * kWarpSize), 1, 1}));
  // The chunk count assumes residentBlocks() blocks per multiprocessor: ptxas keeps the
  // registers within what that needs.
  fn->setAttr("nvvm.minctasm", b.getI32IntegerAttr(int32_t(c.residentBlocks())));
  b.setInsertionPointToStart(&fn.getBody().front());
  PartialKernelBuilder(b, c).build(fn);
  return fn;
}
