//===- CPUCodegen.h - shared helpers of the CPU attention lowering -*- C++ -*-===//
//
// The kernels are written op by op; these helpers keep the arithmetic readable and give every
// loop one way to be built (a lambda that returns the values to yield).
//
//===----------------------------------------------------------------------===//
#ifndef HYBRIDGEN_LIB_TRANSFORMS_CPU_CPUCODEGEN_H
#define HYBRIDGEN_LIB_TRANSFORMS_CPU_CPUCODEGEN_H

#include "hybridgen/Transforms/Passes.h"
#include "hybridgen/Transforms/Pipelines.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <limits>

namespace mlir::hybridgen::cpu {

/// Limits of the generated code, decode and prefill alike: q rows and output accumulators are
/// unrolled SSA vectors (per head and column slice) and a block's logits are one vector, so
/// wider rows or blocks would only bloat the code and spill.
constexpr int64_t kMaxHeadDim = 512;
constexpr int64_t kMaxBlockSize = 256;


/// What one generated partial-attention kernel is specialized for. Two ops with equal configs
/// share one kernel function.
struct KernelConfig {
  Type kvType;         // f32, f16 or bf16
  int64_t qHeads;      // query heads
  int64_t kvHeads;     // kv heads (group = qHeads / kvHeads)
  int64_t blockSize;   // tokens per KV block
  int64_t headDim;     // elements per row
  float scale;         // logit scale
  int64_t window;      // 0: no sliding window
  float softcap;       // 0: no softcap
  int64_t topK;        // 0: dense
  int64_t chunkTokens; // tokens per parallel chunk (dense)
  bool amx = false;    // emit the AMX-BF16 path where it applies (see amxApplies)
  /// Width of the target's vector registers: 512 (AVX-512: 32 zmm) or 256 (AVX2: 16 ymm). The
  /// dot width, the accumulator tiles and the heads per logit pass are sized from it, so that the
  /// loop-carried values of the hot loops fit the register file instead of spilling.
  int64_t vectorBits = 512;
  /// Width of the target's widest registers (vectorBits may be narrower on purpose, e.g. the
  /// 256-bit tiles of 16-bit KV on AMD Zen 4): 512 means 32 registers at any tile width.
  int64_t targetVectorBits = 512;
  /// Distance of the far L2 prefetch in bytes of one K stream (0: none); see farPieces.
  int64_t farPrefetchBytes = 0;
  /// The target has AVX512-BF16 dot products (vdpbf16ps) and the kernel may use them for bf16
  /// KV; where they apply is bf16DotApplies.
  bool bf16Dot = false;
  /// With bf16Dot: q and p enter the dot products rounded once to bf16 (as in a bf16 PyTorch
  /// model's attention) instead of as (hi, lo) halves: half the dot products, relative error
  /// ~1e-3 instead of ~4e-6 (docs/cpu-runs.md, "bf16 dot products with q and p rounded once").
  bool bf16DotRounded = false;
  /// K is stored transposed in each piece (one kv head's rows of one pool block): [head_dim]
  /// [block_size] instead of [block_size][head_dim] (V stays row-major). The logits are then
  /// FMAs of one column of the block's rows against a broadcast q element, with no sum trees
  /// (logitsTransposed; docs/cpu-runs.md, "K transposed per block").
  bool kTransposed = false;
  /// The target wants the transposed kernel's prefetches spread over the whole piece: see
  /// spreadPrefetch (the function) for where it applies.
  bool spreadPrefetch = false;
  /// The target wants each piece's logits computed with the previous piece's p.V: see
  /// overlapPieces (the function) for where it applies.
  bool overlapPieces = false;
  /// With overlapPieces: how many pieces p.V runs behind the logits, 1 or more. At 1 each
  /// overlapped step's p.V takes the probabilities of the softmax just before it; at 2 those of
  /// the softmax before that, so no step waits on the softmax's dependency chain (the max tree,
  /// exp, sums) however small the core's out-of-order window (walkOverlapped).
  int64_t pvLag = 1;
  /// p.V loads splatted probabilities instead of broadcasting them: see splatProbs.
  bool splatProbs = false;

  int64_t group() const { return qHeads / kvHeads; }
  /// f32 lanes of one vector register, and the number of vector registers.
  int64_t lanes() const { return vectorBits / 32; }
  int64_t vectorRegs() const { return vectorBits >= 512 ? 32 : 16; }
  /// Registers the target has (32 with AVX-512 whatever the tile width, else 16).
  int64_t targetRegs() const { return targetVectorBits >= 512 ? 32 : 16; }
  /// Pieces (one kv-head unit's rows of one block) between the piece in use and the one the far
  /// prefetch asks for: farPrefetchBytes in whole K pieces, at least one; 0 when off.
  int64_t farPieces() const {
    if (farPrefetchBytes <= 0)
      return 0;
    return std::max<int64_t>(1, (farPrefetchBytes + pieceBytes() - 1) / pieceBytes());
  }
  /// Bytes of one K (or V) piece: one kv head's rows of one block.
  int64_t pieceBytes() const { return blockSize * headDim * (kvType.getIntOrFloatBitWidth() / 8); }
  /// Heads of a group handled by one parallel iteration: the whole group when it is small, else
  /// the largest divisor <= 8, so the number of live vector accumulators stays bounded.
  int64_t subGroup() const;
  /// Lanes of one FMA chain in a q.k dot product.
  int64_t dotWidth() const;
  /// Lanes of one column tile of the output accumulators (see the V loop).
  int64_t accTileWidth() const;
  /// A stable name fragment that tells configurations apart.
  std::string mangle() const;
};

/// Thin arithmetic layer over an ImplicitLocOpBuilder.
struct Emitter {
  ImplicitLocOpBuilder &b;

  Type f32() { return b.getF32Type(); }
  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value cf(float v) { return arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(v)); }
  Value negInf() { return cf(-std::numeric_limits<float>::infinity()); }
  Value addi(Value x, Value y) { return arith::AddIOp::create(b, x, y); }
  Value subi(Value x, Value y) { return arith::SubIOp::create(b, x, y); }
  Value muli(Value x, Value y) { return arith::MulIOp::create(b, x, y); }
  Value divi(Value x, Value y) { return arith::DivUIOp::create(b, x, y); }
  Value remi(Value x, Value y) { return arith::RemUIOp::create(b, x, y); }
  Value mini(Value x, Value y) { return arith::MinSIOp::create(b, x, y); }
  Value maxi(Value x, Value y) { return arith::MaxSIOp::create(b, x, y); }
  Value addf(Value x, Value y) { return arith::AddFOp::create(b, x, y); }
  Value subf(Value x, Value y) { return arith::SubFOp::create(b, x, y); }
  Value mulf(Value x, Value y) { return arith::MulFOp::create(b, x, y); }
  Value divf(Value x, Value y) { return arith::DivFOp::create(b, x, y); }
  Value maxf(Value x, Value y) { return arith::MaximumFOp::create(b, x, y); }
  Value cmpi(arith::CmpIPredicate p, Value x, Value y) { return arith::CmpIOp::create(b, p, x, y); }
  Value cmpf(arith::CmpFPredicate p, Value x, Value y) { return arith::CmpFOp::create(b, p, x, y); }
  Value select(Value c, Value x, Value y) { return arith::SelectOp::create(b, c, x, y); }
  Value exp(Value x) { return math::ExpOp::create(b, x); }
  Value splat(Value scalar, int64_t n) {
    return vector::BroadcastOp::create(b, VectorType::get({n}, scalar.getType()), scalar);
  }
  Value reduce(vector::CombiningKind kind, Value v) {
    return vector::ReductionOp::create(b, kind, v);
  }
  /// Scalar i32 load widened to index (lengths, block table entries).
  Value loadIndex(Value memref, ValueRange indices) {
    Value v = memref::LoadOp::create(b, memref, indices);
    return arith::IndexCastOp::create(b, b.getIndexType(), v);
  }
  /// A row of |n| elements, widened to f32 in registers.
  Value loadRowF32(Value memref, ValueRange indices, int64_t n) {
    Type elt = cast<MemRefType>(memref.getType()).getElementType();
    Value row = vector::LoadOp::create(b, VectorType::get({n}, elt), memref, indices);
    if (elt.isF32())
      return row;
    return arith::ExtFOp::create(b, VectorType::get({n}, f32()), row);
  }
  /// |raw| (2n bf16) widened to f32 as its (even, odd) elements: viewed as n x i32, a shift
  /// gives the even elements and a mask the odd ones, 2 ops for 2n elements.
  std::pair<Value, Value> bf16EvenOdd(Value raw) {
    int64_t n = cast<VectorType>(raw.getType()).getDimSize(0) / 2;
    auto i32s = VectorType::get({n}, b.getI32Type()), f32s = VectorType::get({n}, f32());
    auto splatI32 = [&](int32_t x) {
      return arith::ConstantOp::create(b, DenseElementsAttr::get(i32s, b.getI32IntegerAttr(x)));
    };
    Value pairs = vector::BitCastOp::create(b, i32s, raw);
    Value even = arith::ShLIOp::create(b, pairs, splatI32(16));
    Value odd = arith::AndIOp::create(b, pairs, splatI32(int32_t(0xFFFF0000u)));
    return {arith::BitcastOp::create(b, f32s, even), arith::BitcastOp::create(b, f32s, odd)};
  }
  /// Alignment of the kernels' stack buffers (q, accumulators, logits, statistics): a cache
  /// line, so a 512-bit load or store of them never splits across two lines (without it they
  /// were only as aligned as LLVM's default for the element type). No speed difference was
  /// measured from it on AMD Zen 4 (bf16, SmolLM2's shape, cache-resident, 256-bit tiles).
  IntegerAttr stackAlign() { return b.getI64IntegerAttr(64); }
  /// ceil(x / d) for non-negative |x| and a constant |d| > 0.
  Value ceilDiv(Value x, int64_t d) { return divi(addi(x, idx(d - 1)), idx(d)); }

  /// scf.for over [lb, ub) whose body returns the values to yield.
  SmallVector<Value> loop(Value lb, Value ub, Value step, ValueRange init,
                          function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    auto op = scf::ForOp::create(
        b, lb, ub, step, init, [&](OpBuilder &nb, Location, Value iv, ValueRange args) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          SmallVector<Value> results = body(iv, args);
          scf::YieldOp::create(b, results);
        });
    return SmallVector<Value>(op.getResults());
  }

  /// scf.for over [lb, ub) without loop-carried values.
  void forEach(Value lb, Value ub, Value step, function_ref<void(Value)> body) {
    loop(lb, ub, step, {}, [&](Value iv, ValueRange) {
      body(iv);
      return SmallVector<Value>{};
    });
  }

  /// scf.if without results; |elseBody| may be null.
  void ifThenElse(Value cond, function_ref<void()> thenBody,
                  function_ref<void()> elseBody = nullptr) {
    auto region = [&](function_ref<void()> body) {
      return [&, body](OpBuilder &nb, Location) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
        body();
        scf::YieldOp::create(b);
      };
    };
    if (elseBody)
      scf::IfOp::create(b, cond, region(thenBody), region(elseBody));
    else
      scf::IfOp::create(b, cond, region(thenBody));
  }

  /// Part |i| of [0, n) split into |parts| near-equal contiguous ranges: [i*n/parts,
  /// (i+1)*n/parts).
  std::pair<Value, Value> part(Value i, Value n, Value parts) {
    return {divi(muli(i, n), parts), divi(muli(addi(i, idx(1)), n), parts)};
  }

  /// scf.parallel over [0, ubs) with unit steps.
  void parallel(ValueRange ubs, function_ref<void(ValueRange)> body) {
    SmallVector<Value> lbs(ubs.size(), idx(0)), steps(ubs.size(), idx(1));
    scf::ParallelOp::create(b, lbs, ubs, steps, [&](OpBuilder &nb, Location, ValueRange ivs) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
      body(ivs);
    });
  }
};

//===- Per-block code of the dense kernel (DenseBlock.cpp) ------------------===//

/// The column that lane |i| of the bf16 dot-product V accumulators holds, within a group of
/// 2 x |lanes| columns: the accumulator pair (lo, hi) of a group comes from unpacking two rows'
/// 2 x lanes bf16 within each 128-bit lane (vpunpcklwd / vpunpckhwd), so lo lane i holds column
/// (i / 4) * 8 + i % 4 and hi lane i the same + 4; |i| in [0, 2 x lanes) counts lo then hi.
int64_t dotPairColumn(int64_t i, int64_t lanes);

/// Rows of a block whose logits one sum tree produces: the largest power of two <= the dot width
/// dividing the block size; 0 when the dot width is not a power of two (odd head dims), where the
/// row-by-row path is used.
int64_t treeRows(const KernelConfig &c);

/// Whether bf16 rows are widened 32 elements at a time as (even, odd) halves: one 64-byte load
/// viewed as 16 x i32, a shift gives the even elements as f32 and a mask the odd ones (2 ops per
/// 32 elements instead of a widening shuffle plus a shift per 16). The element order is then
/// permuted: q is permuted alike (a dot product does not care), and the V accumulators keep the
/// permuted order until they are written out.
bool bf16Pairs(const KernelConfig &c);

/// Whether the softmax statistics of the |gs| heads are carried as two vector<gs> (max, sum):
/// power-of-two groups, and other groups on the interleaved 16-bit kernel (the max tree padded).
bool vectorStats(const KernelConfig &c);

/// Whether the f32-FMA logits of 16-bit KV take rows in groups of 4, interleaved (rowsPartialsFma),
/// and p.V 16-register accumulator tiles: 16-bit tiles narrower than a 32-register target (AMD
/// Zen 4's 256-bit tiles for bf16/f16). Measured there 0.42 -> 0.50 of the roof on one thread;
/// on AVX2's 16 registers and for f32 it measured no better, so those keep the row-by-row code.
bool interleavedFma(const KernelConfig &c);

/// Whether each row's prefetches are tied to the previous row's result (prefetchRow), so that
/// code generation keeps them beside the rows they were emitted with instead of hoisting a
/// block's ~300 into one burst: AVX2-only targets (16 registers; Zen 3 0.38 -> 0.49 of the roof)
/// and f32 KV on every target (Zen 4, 512-bit tiles: 0.43 -> 0.65; Sapphire Rapids: neutral).
/// Zen 4's interleaved 16-bit kernel read less with it (0.53 -> 0.51 on one thread).
bool pacedPrefetch(const KernelConfig &c);

/// Whether the row-by-row logits load q's slices where they use them instead of holding them as
/// values for the whole block: on 16 registers the slices of even one head do not fit, and LLVM
/// copied all of them to spill slots at the top of every block.
bool qAtUse(const KernelConfig &c);

/// Whether the dense vector kernel computes with bf16 dot products (x86vector.avx512.dot, i.e.
/// vdpbf16ps: 2 bf16 products per f32 lane and instruction, no widening): bf16 KV on a target
/// with AVX512-BF16, tree logits, whole pairs of rows and register pairs. q and p enter as two
/// bf16 halves each (hi, and the bf16 rounding of the rest), so both keep ~2^-17: as many
/// multiply-adds as f32 FMAs, without the widening; with bf16DotRounded only the hi halves.
bool bf16DotApplies(const KernelConfig &c);

/// The K pool |k| (memref<blocks x kv_heads x block_size x head_dim>) seen as KernelConfig::
/// kTransposed stores it, memref<blocks x kv_heads x head_dim x block_size>: the same memory,
/// no copy.
Value transposedKView(ImplicitLocOpBuilder &b, Value k);
/// A K or V pool viewed as memref<blocks x kv_heads x (block_size * head_dim)>: a piece's elements
/// in one dimension, so that a cache line's address is its index times the line's elements.
Value pieceView(ImplicitLocOpBuilder &b, Value pool);

/// Rows per accumulator vector of logitsTransposed: the whole block where it fits in two
/// registers, else the largest divisor of the block size that does.
int64_t transposedRowTile(const KernelConfig &c);

/// How many bf16 halves of q and p the dot-product kernel takes: 2 (hi, lo), or 1 (rounded once).
int64_t bf16DotHalves(const KernelConfig &c);

/// Whether the transposed kernel (kTransposed, far prefetch on) spreads its prefetches over the
/// whole piece instead of issuing them all in the logits: the far V rows are asked for in p.V
/// (the far K rows stay in the logits), and p.V asks for the next piece's K rows into L1 as the
/// row-major kernel does. On AMD Zen 4 the logits' burst (K and V of the far piece, V of this
/// one) kept the core waiting on its miss buffers while p.V's memory stood idle: Llama-3-8B's
/// shape read 0.49-0.57 -> 0.61-0.71 of the roof exact, 0.56 -> 0.72-0.80 with bf16 dot
/// products (64K tokens, one thread). Pieces of 4 KiB and more, or the dot-product logits: the
/// exact kernels of SmolLM2's 2 KiB pieces read ~4% less with it (docs/cpu-runs.md, "Prefetches
/// spread over the piece").
bool spreadPrefetch(const KernelConfig &c);

/// Whether p.V of the spread 16-bit kernel (spreadPrefetch, 16-bit KV, 32 registers: AMD Zen 4's
/// default for bf16/f16) takes 64-column tiles, 16 accumulators of 4 heads, over 4 rows per
/// iteration, instead of 32-column tiles (8 accumulators) over 8 rows. Each probability broadcast
/// then feeds 4 FMAs instead of 2, and LLVM no longer hoists 32 broadcasts to the top of the
/// iteration and spills them. On Zen 4 a zmm broadcast load beside every other FMA is free but
/// one per FMA is not, and this kernel is bound by its multiply-adds on one core: it computes
/// 22.8-23.0 GB/s cache-resident against 19.6-20.8 (f16; bf16 level to +7%) and reads 0.69-0.72
/// of the roof from DRAM on one thread against 0.61-0.67 (docs/cpu-runs.md, "Zen 4: wider p.V
/// tiles for the spread 16-bit kernel").
bool widePvTile(const KernelConfig &c);

/// Whether p.V takes each probability as a full-width load of a copy splatted across the lanes
/// (written once per piece by the softmax, next to the probabilities in |scores|) instead of a
/// broadcast load per use (one per column tile): asked for (KernelConfig::splatProbs), and not
/// with the bf16 dot products, whose p.V broadcasts pairs. LLVM's scheduling models put a
/// broadcast load on FP1/FP2 of Zen 3 (ymm) and on FP1 of Zen 4 (zmm), beside the FMAs, where a
/// plain load takes no FP pipe; on Intel both are load-port only (docs/cpu-runs.md, "Predicted
/// core cycles for a CPU not at hand"). Off by default: not measured on an AMD CPU yet.
bool splatProbs(const KernelConfig &c);

/// A piece's logits, then probabilities, on the stack: memref<gs x n x f32> with n =
/// block_size, plus block_size x dot-width splatted copies with splatProbs; the logits lanes
/// start at -inf, the copies at 0.
Value allocScores(Emitter &e, const KernelConfig &c);

/// Whether the transposed logits (kTransposed) take bf16 dot products too: with bf16DotRounded,
/// q rounded once to bf16 and K's columns (2j, 2j+1) interleaved in registers into the pairs
/// vdpbf16ps multiplies, half the instructions of the widened f32 FMAs. Without it the
/// transposed logits stay f32 FMAs on an unrounded q and only p.V takes dot products.
bool bf16DotLogits(const KernelConfig &c);

/// Emits one block's logits, online-softmax update and V accumulation for the |gs| heads of one
/// kv-head unit; the unit's scaled q, accumulators and statistics live on the stack, at index
/// |unit|, between blocks.
struct DenseBlock {
  Emitter &e;
  const KernelConfig &c;
  Value k, v, table;
  /// With kTransposed: k viewed as memref<blocks x kv_heads x head_dim x block_size>.
  Value kT;
  Value scores; // memref<gs x block_size x f32>: logits, then probabilities (allocScores;
                // with splatProbs each row's probability splatted across the lanes follows)
  Value acc;    // memref<units x gs x head_dim x f32>: unnormalized outputs
  Value qs;     // memref<q_heads x head_dim x f32>: q scaled, as slices (see the dense kernel)
                // with bf16DotApplies: memref<q_heads x halves x head_dim x bf16>, q scaled as
                // (hi, lo) bf16 halves (bf16DotHalves: hi only when rounded) in natural order;
                // with bf16DotLogits: memref<q_heads x head_dim/2 x i32>, q scaled and rounded
                // to bf16, as pairs of columns (2j, 2j+1), the operands the logits broadcast
  Value probs;  // with bf16DotApplies: memref<halves x gs x block_size/2 x i32>, the
                // probabilities' bf16 halves as pairs of rows (2r, 2r+1), the operands p.V
                // broadcasts
  Value maxes;  // memref<units x gs x f32>: running maxima
  Value sums;   // memref<units x gs x f32>: running probability sums
  Value unit;   // the kv-head unit the block updates
  /// The piece (pool block, kv head) c.farPieces() after this one in slot-major order, whose K
  /// and V rows the logits prefetch into L2 (with K transposed: its V rows only for pieces under
  /// 4 KiB, or in p.V with spreadPrefetch); null when the far prefetch is off.
  Value pbFar, kvhFar;
  /// With pacedPrefetch: an f32 result of the row computed last, which prefetchRow makes the
  /// next prefetch addresses depend on (null: none yet).
  Value prefetchAfter;
  /// With overlapPieces, 16-bit KV and 16 vector registers: k and v as pieceViews. The
  /// overlapped step addresses its K columns, V rows and prefetched lines by element offsets in
  /// them, one base per loop iteration plus constants, which x86 takes as displacements (as 4-D
  /// indices LLVM computed each address from the row index again: `lea`, `shl` per load).
  Value kPieces, vPieces;

  /// Asks for the K and V rows of kv head |kvh| in pool block |pb|.
  void prefetchPiece(Value pb, Value kvh);
  /// The cache lines of row |r| of kv head |kvh| in pool block |pb| of |pool| (K or V), with
  /// |locality| 3 (L1) or 2 (L2).
  void prefetchRow(Value pool, Value pb, Value kvh, Value r, int32_t locality);
  /// The cache line at (row |r|, column |col|) of that piece, with |locality|.
  void prefetchLine(Value pool, Value pb, Value kvh, Value r, Value col, int32_t locality);
  /// The cache line at element |at| of that piece in |pieces| (a pieceView), into L2.
  void prefetchPieceLine(Value pieces, Value pb, Value kvh, Value at);
  /// p.V of one row: row |r| of V in pool block |pb|, kv head |kvh|, columns [col, col +
  /// accTileWidth), times each head's probability of that row in |probs|, into |tile|
  /// (head-major, dot-width pieces).
  /// |vAt|: the element offset of (r, col) in vPieces, which the row is then loaded from.
  void rowTimesV(Value probs, Value pb, Value kvh, Value r, int64_t col,
                 MutableArrayRef<Value> tile, Value vAt = {});
  /// Columns [col, col + width) of row |r| as dot-width f32 slices, in the (even, odd) order of
  /// bf16Pairs when it applies.
  /// |pieceAt|: |pool| is a pieceView and (r, col) is element |pieceAt| of the piece.
  SmallVector<Value> loadSlices(Value pool, Value pb, Value kvh, Value r, int64_t col,
                                int64_t width, Value pieceAt = {});
  /// Per-head partial dot products of row |r| with q: one FMA chain per head over w-wide
  /// slices, each K slice loaded and widened once for all heads in [g0, g1). q's slices come
  /// from |qv|, or, when it is empty (qAtUse), from |qs| where each FMA uses them.
  SmallVector<Value> rowPartials(Value pb, Value kvh, Value r, ArrayRef<Value> qv, int64_t g0,
                                 int64_t g1);
  /// rowPartials of several rows with bf16 dot products (bf16DotApplies), interleaved across
  /// rows and heads; [row][head - g0].
  SmallVector<SmallVector<Value>> rowsPartialsDot(Value pb, Value kvh, ArrayRef<Value> rows,
                                                  int64_t g0, int64_t g1);
  /// rowPartials of several rows with f32 FMAs (interleavedFma), slice by slice across the rows
  /// and heads, q loaded where it is used; [row][head - g0].
  SmallVector<SmallVector<Value>> rowsPartialsFma(Value pb, Value kvh, ArrayRef<Value> rows,
                                                  int64_t g0, int64_t g1);
  /// Logits of every row of the block into |scores|. Rows outside the token range are computed
  /// too (they are in the block, so in bounds) and masked by position afterwards: their values
  /// never reach the softmax, and the row groups stay static and fully unrolled.
  /// Meanwhile it prefetches the block's V rows, one row per row computed.
  void logitsByTree(Value pb, Value kvh, ArrayRef<Value> qv);
  /// Logits of every row of the block into |scores| from K stored transposed (kTransposed):
  /// column by column, the block's rows (in tiles of transposedRowTile) times each head's
  /// broadcast q element, two FMA chains per head (even and odd columns) when they fit.
  /// Prefetches the block's V rows, spread over the columns.
  void logitsTransposed(Value pb, Value kvh);
  /// The transposed logits' FMAs of column |col| for rows [rt, rt + tile): the column loaded
  /// and widened once (bf16 rows of two registers as (even, odd) halves), times each head's
  /// broadcast q element, into chain |chain| of |acc| (head-major: heads x chains x halves).
  /// Heads [g0, g1) of the unit, whose accumulators |acc| holds from g0 on.
  /// |kAt|: the element offset of (col, rt) in kPieces, which the column is then loaded from.
  void columnLogits(Value pb, Value kvh, Value col, int64_t rt, int64_t tile, int64_t chains,
                    int64_t chain, MutableArrayRef<Value> acc, int64_t g0, int64_t g1,
                    Value kAt = {});
  /// Each head's chains of |acc| summed (|subs| vectors of |width| rows each; |halves|: the
  /// (even, odd) rows zipped back into order) and stored as rows [rt, ..) of |scores|; heads
  /// [g0, g1) as columnLogits.
  void storeColumnLogits(ArrayRef<Value> acc, int64_t rt, int64_t chains, int64_t subs,
                         int64_t width, bool halves, int64_t g0, int64_t g1);
  /// Logits of rows [r0, r1) one row at a time (dot widths that are not a power of two).
  void logitsByRow(Value pb, Value kvh, Value r0, Value r1, ArrayRef<Value> qv);
  /// acc[g, tile] = acc[g, tile] * alpha[g] + sum over rows [lb, ub) of p[g, r] * V[r, tile], for
  /// each column tile, |unroll| rows per loop iteration. Tiling the columns keeps one tile's
  /// accumulators of all heads in registers; each tile reads its own part of the V rows, so V
  /// still comes from memory (L1 after the first tile) once. With |pbNext|, the first tile
  /// prefetches the K rows of kv head |kvhNext| in pool block |pbNext|, one row per row.
  void accumulateV(Value pb, Value kvh, Value lb, Value ub, int64_t unroll, ArrayRef<Value> alpha,
                   Value pbNext, Value kvhNext);
  /// accumulateV with bf16 dot products (bf16DotApplies): rows in pairs, the two rows' V slices
  /// interleaved (unpack order, see dotPairColumn) against the broadcast pair of probabilities.
  /// With |r0|, |r1| set (a partial block), rows outside [r0, r1) are zeroed before use, since
  /// their garbage times p = 0 could be NaN.
  void accumulateVDot(Value pb, Value kvh, Value lb, Value ub, int64_t pairs,
                      ArrayRef<Value> alpha, Value pbNext, Value kvhNext, Value r0, Value r1);
  /// The accumulators of columns [col, col + accTileWidth) of every head of the unit, scaled by
  /// the heads' |alpha| (head-major, dot-width pieces), and their store back.
  /// Of unit |u| when given (else |unit|).
  SmallVector<Value> loadTile(int64_t col, ArrayRef<Value> alpha, Value u = {});
  void storeTile(ArrayRef<Value> tile, int64_t col, Value u = {});
  /// The online-softmax update of unit |unit| for the logits in |scores| (rows outside [r0, r1)
  /// masked): updates maxes and sums, leaves the probabilities in |scores| (and |probs|), and
  /// returns each head's rescale factor of the accumulators.
  SmallVector<Value> softmax(Value r0, Value r1);
  /// p.V of the block's rows [r0, r1) into acc[unit] rescaled by |alpha|: a whole block with
  /// unrolled rows, a partial one row by row (only its valid V rows are read).
  void accumulate(Value pb, Value kvh, Value r0, Value r1, ArrayRef<Value> alpha, Value nextK,
                  Value kvhNext);
  /// With overlapPieces: p.V of the previous piece (|prevPb|, |prevKvh|, unit |prevUnit|, its
  /// probabilities in |prevScores| and rescale factors |prevAlpha|; a whole block) in one loop
  /// with the transposed logits of this piece (|pb|, |kvh|, |unit|, into |scores|): every row
  /// step of p.V computes an equal share of the logit columns and asks for an equal share of
  /// this piece's V lines and of the far piece's K lines, so that both streams and the math are
  /// spread evenly over the step instead of K's burst in the logits and V's in p.V.
  void overlappedStep(Value prevPb, Value prevKvh, Value prevUnit, Value prevScores,
                      ArrayRef<Value> prevAlpha, Value pb, Value kvh);
  /// One block of unit |unit| (kv head |kvh|): updates acc, maxes and sums at |unit|.
  /// (|pbNext|, |kvhNext|) is the piece (pool block, kv head) the caller computes next, whose K
  /// rows it prefetches.
  void block(Value s, Value kvh, Value blk, Value t0, Value t1, Value pbNext, Value kvhNext);
};

/// Whether the dense kernel overlaps each piece's logits with the previous piece's p.V
/// (DenseBlock::overlappedStep): asked for (KernelConfig::overlapPieces), K transposed, the
/// exact dense kernel without spreadPrefetch, a row tile of the whole block, and a head dim and
/// piece that split evenly over p.V's row steps. On Emerald Rapids the Llama-3-8B shape's 16-bit
/// kernels read 0.72-0.77 -> 0.77-0.88 of the roof with it (docs/cpu-runs.md, "Each piece's
/// logits with the previous piece's p.V").
bool overlapPieces(const KernelConfig &c);
/// Rows per iteration of the overlapped loop.
int64_t overlapUnroll(const KernelConfig &c);
/// (passes, chains) of the overlapped loop's logits: the fewest passes over the columns, each
/// for an equal share of the unit's heads (a pass per equal share of p.V's tiles), and FMA chains
/// per head (2 where they fit), such that the pass's logit accumulators and p.V's tile leave 4
/// registers for the loads and broadcasts.
std::pair<int64_t, int64_t> overlapLogitPasses(const KernelConfig &c);

/// Emits the kernel function for |config| named |name| at the end of |module|. The signature is
/// (q, k, v, block_table, lens, begin, end, o, m, l) with the memref types of kernelArgTypes.
func::FuncOp buildDenseKernel(ModuleOp module, StringRef name, const KernelConfig &config,
                              Location loc);
func::FuncOp buildSparseKernel(ModuleOp module, StringRef name, const KernelConfig &config,
                               Location loc);
/// The kernel's argument types: leading (batch, num_blocks, max_blocks) dims dynamic.
SmallVector<Type> kernelArgTypes(MLIRContext *ctx, const KernelConfig &config);

/// The arguments of a generated kernel, named (in kernelArgTypes order).
struct KernelArgs {
  Value q, k, v, table, lens, begin, end, o, m, l;
};

/// Declares the private kernel |name| with the kernelArgTypes signature at |b|'s insertion point,
/// emits the argument guard (emitArgumentGuard) and the return, and leaves |b| where the kernel
/// body goes (inside the guard); the dense and sparse kernels share this prologue.
std::pair<func::FuncOp, KernelArgs> createKernelFunction(ImplicitLocOpBuilder &b, StringRef name,
                                                         const KernelConfig &config);

//===- The argument guard of every kernel (ArgumentChecks.cpp) ---------------===//

/// Emits the checks of the kernel's arguments at |e|'s insertion point: per-sequence buffers with
/// at least batch rows, every length in [0, table capacity], every block id of each sequence's
/// token range inside the pool. Violations are reported with hgrt_kernel_argument_error. Returns
/// the scf.if that runs the kernel (its then-block, where |e|'s builder is left) only when all
/// hold; its else-block writes the empty partial.
scf::IfOp emitArgumentGuard(Emitter &e, ModuleOp module, const KernelConfig &config,
                            const KernelArgs &args);
/// Emits a call hgrt_kernel_argument_error(kind, seq, index, value, limit) (index operands).
void emitArgumentError(Emitter &e, ModuleOp module, int32_t kind, Value seq, Value index,
                       Value value, Value limit);
/// Writes the empty partial (o = 0, m = -inf, l = 0) for sequences [0, rows).
void emitEmptyPartial(Emitter &e, const KernelConfig &config, Value o, Value m, Value l,
                      Value rows);

//===- The AMX-BF16 chunk loop of the dense kernel (AmxKernel.cpp) ----------===//

/// Whether the dense kernel for |c| gets the AMX path: asked for, bf16 KV, dense, head_dim a
/// multiple of 32 and blocks a multiple of 16 tokens.
bool amxApplies(const KernelConfig &c);
/// Query heads per AMX unit: the largest of 4, 2, 1 dividing the group (4 heads x 4 rows fill
/// one 16-row tile).
int64_t amxSubGroup(const KernelConfig &c);
/// The private declaration of the external function |name| in |module| (created at the top of the
/// module on first use): how generated code reaches the runtime's C ABI.
func::FuncOp declareFunction(ModuleOp module, StringRef name, TypeRange inputs,
                             TypeRange results = {});
/// Emits `hgrt_amx_available() != 0` (declaring the runtime function in |module| if needed).
Value amxAvailable(ImplicitLocOpBuilder &b, ModuleOp module);
/// Emits the AMX chunk loop: a parallel loop over (sequence, kv-head group, chunk), |kvGroups|
/// groups of whole kv heads, that writes the same chunk partials (so, sm, sl), in the same row
/// layout, as the dense kernel's vector loop.
void emitAmxChunks(Emitter &e, const KernelConfig &c, const KernelArgs &args, Value batch,
                   Value capacity, Value numChunks, Value kvGroups, Value so, Value sm, Value sl);

/// Emits, at |b|'s insertion point, the loops that merge N partials into |out| (hg.merge).
void emitMerge(ImplicitLocOpBuilder &b, ValueRange os, ValueRange ms, ValueRange ls, Value out);

/// Shared by the kernels: the token range [begin, end) of sequence |s| clamped to [0, len], the
/// block table's capacity and the sliding window.
std::pair<Value, Value> clampedRange(Emitter &e, const KernelConfig &config, Value lens,
                                     Value capacity, Value s, Value begin, Value end);

} // namespace mlir::hybridgen::cpu

#endif // HYBRIDGEN_LIB_TRANSFORMS_CPU_CPUCODEGEN_H
