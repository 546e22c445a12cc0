//===- ModelEmitter.cpp - norms, matmuls, residuals and RoPE as MLIR text ----------------===//
//
// Dense ops are linalg.generic on memrefs (lowered by hg-cpu-pipeline), except the matrix-vector
// products of decode, which get a small 16-wide vector kernel (see emitVectorMatmuls).
//
//===----------------------------------------------------------------------===//
#include "ModelEmitter.h"

#include "hybridgen/Models/ModelModule.h"

#include <algorithm>
#include <cstdio>

namespace hybridgen::models::detail {

using rt::model::NormKind;

std::string floatLiteral(double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", value);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos)
    s += ".0";
  return s;
}

std::string rowType(int64_t cols, const std::string &elt) {
  return "memref<?x" + std::to_string(cols) + "x" + elt + ">";
}
std::string matType(int64_t rows, int64_t cols, const std::string &elt) {
  return "memref<" + std::to_string(rows) + "x" + std::to_string(cols) + "x" + elt + ">";
}
std::string vecType(int64_t n, const std::string &elt) {
  return "memref<" + std::to_string(n) + "x" + elt + ">";
}



/// out[n, o] = in[n, k] . w[o, k] (+ bias[o]); |in| and |out| f32, |w| and |bias| weight type.
/// The portable form: one linalg.generic (lowered to parallel loops by hg-cpu-pipeline).
static void emitLinalgMatmul(FunctionWriter &f, const std::string &in, int64_t inCols,
                             const std::string &w, int64_t outCols, const std::string *bias,
                             const std::string &out) {
  std::ostringstream &b = f.body();
  const std::string &wt = f.weightType();
  if (bias) {
    b << "    linalg.generic {indexing_maps = [affine_map<(i, j) -> (j)>, " << kRowMaps2
      << "], iterator_types = [\"parallel\", \"parallel\"]} ins(" << *bias << " : "
      << vecType(outCols, wt) << ") outs(" << out << " : " << rowType(outCols) << ") {\n"
      << "    ^bb0(%bi: " << wt << ", %o: f32):\n";
    std::string v = f.toF32("%bi");
    b << "      linalg.yield " << v << " : f32\n    }\n";
  } else {
    std::string zero = f.constant("0.0", "f32");
    b << "    linalg.fill ins(" << zero << " : f32) outs(" << out << " : " << rowType(outCols)
      << ")\n";
  }
  b << "    linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, "
       "affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>], iterator_types = "
       "[\"parallel\", \"parallel\", \"reduction\"]} ins("
    << in << ", " << w << " : " << rowType(inCols) << ", " << matType(outCols, inCols, wt)
    << ") outs(" << out << " : " << rowType(outCols) << ") {\n"
    << "    ^bb0(%x: f32, %wv: " << wt << ", %acc: f32):\n";
  std::string wf = f.toF32("%wv");
  b << "      %p = arith.mulf %x, " << wf << " : f32\n"
    << "      %s = arith.addf %acc, %p : f32\n"
    << "      linalg.yield %s : f32\n    }\n";
}

/// Joins |count| items made by |item(i)| with ", ".
template <typename F> static std::string joined(int64_t count, F item) {
  std::string s;
  for (int64_t i = 0; i < count; ++i)
    s += (i ? ", " : "") + item(i);
  return s;
}

/// The weights of one product of a fused matmul, their prefetch constants and block count.
struct MatmulPlan {
  const MatmulOut *spec;
  int64_t cols = 1;        // output rows per parallel block
  bool sideBySide = false; // decode reads the block's rows side by side (MatmulTuning)
  std::string cB, cC;      // blocks; rows per block
  std::string wFlat, cAhead, cLast, cRowAhead;
};

/// The same products as a vector kernel: OpenMP over blocks of |kOutTile| output rows (one row
/// where the output width is not a multiple of it), each weight row read from memory once with
/// 16-wide loads (bf16/f16 widened in registers, f32 accumulation) and reused from L1 for every
/// token row of the call. Token rows go four at a time through a 4 x kOutTile register tile of
/// accumulators (prefill, >= 16 rows): per 16 columns 4 weight and 4 input loads feed 16 FMAs, and
/// the input rows are read once per block of output rows instead of once per output row. The
/// remaining rows (all of decode's) take a single-row loop with |unroll| independent
/// accumulators, bound by the bandwidth of the weights; where an input row does not fit L1
/// (MatmulTuning::sideBySideRows), blocks of that many output rows read them side by side
/// instead, one accumulator each, so that every load of the input feeds all of them. Needs
/// inCols % 16 == 0.
///
/// Several products of the same input (q, k and v; gate and up) share one parallel loop over
/// the blocks of all of them, each block picking its matrix by its index: one OpenMP fork/join
/// instead of one per matrix, and the threads' static shares cover the products together.
static void emitVectorMatmuls(FunctionWriter &f, const std::string &in, int64_t inCols,
                              const std::vector<MatmulOut> &specs, const std::string &n) {
  std::ostringstream &b = f.body();
  const std::string &wt = f.weightType();
  const int64_t lanes = 16, rows = 4;
  // 4 x 4 tiles: 16 accumulators + 4 widened weight vectors + an input vector fit AVX-512's 32
  // registers. Measured SmolLM2 prefill (docs/models.md).
  constexpr int64_t kOutTile = 4;
  int64_t unroll = inCols % (lanes * 4) == 0 ? 4 : inCols % (lanes * 2) == 0 ? 2 : 1;
  std::string vf = "vector<16xf32>", vw = "vector<16x" + wt + ">";
  std::string xType = rowType(inCols);
  std::string c0 = f.constant("0", "index"), c1 = f.constant("1", "index"),
              cK = f.constant(std::to_string(inCols), "index"),
              c16 = f.constant(std::to_string(lanes), "index"),
              c4 = f.constant(std::to_string(rows), "index"),
              step = f.constant(std::to_string(lanes * unroll), "index");
  std::string zero = f.constant("dense<0.0>", vf);
  std::string zs = f.constant("0.0", "f32");
  // The token tiles ask for the weights kPrefetchBytes ahead in memory order, into L2, where the
  // rows are short: a tile reads 4 rows side by side, and rows of a few cache lines end before the
  // hardware prefetchers have caught on to their streams (bench/models/matvec_walk.c, 4 rows of
  // 576 bf16 side by side: 0.35-0.41 of the roof, 0.77-0.80 with this; rows of 4096: 0.63-0.73
  // either way). Measured in the model (docs/models.md, "Matmul prefetch"): SmolLM2 batch-4 decode
  // +10-25% and prefill +3-10%; the Llama-3-8B shape's 4096-wide prefill 10% slower with it, so
  // wide rows go without it (their first token group takes the row prefetch instead: tilePf).
  constexpr int64_t kPrefetchBytes = 8192, kPrefetchMaxCols = 2048;
  const bool prefetch = inCols < kPrefetchMaxCols;
  // The decode row loop reads one row after the other, one stream: on AMD Zen 4 at the roof
  // already (the same prefetch there measured slower, 0.76 against 0.89-0.98 of the roof), on
  // Intel Emerald Rapids at 0.59-0.64 of it, 0.88-0.93 with a prefetch 4 KiB ahead into L2
  // (matvec_walk.c mode 2, rows of 576-4096 bf16). So it prefetches where the target asks
  // (rowPrefetchBytes, resolved by buildModelModule from the target CPU; docs/models.md).
  const int64_t rowAhead = f.tuning().rowPrefetchBytes;
  // An input row wider than half of a 32 KiB L1 comes from L2 again for every output row of the
  // row loop: on AMD Zen 4, rows of 6144-14336 bf16 read 0.39-0.49 of the roof one after the
  // other and 0.78-0.82 eight side by side (matvec_walk.c, docs/models.md "Wide input rows").
  const int64_t side = inCols > kSideBySideMinCols ? f.tuning().sideBySideRows : 0;
  const int64_t eltBytes = wt == "f32" ? 4 : 2;
  std::vector<MatmulPlan> plans;
  int64_t totalBlocks = 0;
  for (const MatmulOut &spec : specs) {
    MatmulPlan p;
    p.spec = &spec;
    p.sideBySide = side > 1 && spec.outCols % side == 0;
    p.cols = p.sideBySide ? side : spec.outCols % kOutTile == 0 ? kOutTile : 1;
    p.cB = f.constant(std::to_string(spec.outCols / p.cols), "index");
    p.cC = f.constant(std::to_string(p.cols), "index");
    const int64_t elems = spec.outCols * inCols;
    if (prefetch || rowAhead > 0) {
      p.wFlat = f.fresh();
      b << "    " << p.wFlat << " = memref.collapse_shape " << spec.w << " [[0, 1]] : "
        << matType(spec.outCols, inCols, wt) << " into " << vecType(elems, wt) << "\n";
      if (prefetch)
        p.cAhead = f.constant(std::to_string(kPrefetchBytes / eltBytes), "index");
      p.cLast = f.constant(std::to_string(elems - 1), "index");
    }
    if (rowAhead > 0)
      p.cRowAhead = f.constant(std::to_string(rowAhead / eltBytes), "index");
    totalBlocks += spec.outCols / p.cols;
    plans.push_back(p);
  }
  std::string cTotal = f.constant(std::to_string(totalBlocks), "index");

  // One block |blk| of the product |p|: its output rows for every token row.
  auto emitBlock = [&](const MatmulPlan &p, const std::string &blk) {
    const std::string &w = p.spec->w, &out = p.spec->out;
    const std::string *bias = p.spec->bias;
    const int64_t outCols = p.spec->outCols, cols = p.cols;
    const std::string wType = matType(outCols, inCols, wt);
    const std::string flatType = vecType(outCols * inCols, wt);
    const std::string &wFlat = p.wFlat, &cAhead = p.cAhead, &cLast = p.cLast,
                      &cRowAhead = p.cRowAhead, &cC = p.cC;
    b << "      %o0 = arith.muli " << blk << ", " << cC << " : index\n";
    for (int64_t j = 1; j < cols; ++j)
      b << "      %oc" << j << " = arith.constant " << j << " : index\n"
        << "      %o" << j << " = arith.addi %o0, %oc" << j << " : index\n";
    // The bias of output row |o| as f32 (|tag| names its SSA values), or 0.
    auto biasOf = [&](const std::string &o, const std::string &tag, const char *indent) {
      if (!bias)
        return zs;
      b << indent << "%bw" << tag << " = memref.load " << *bias << "[" << o << "] : "
        << vecType(outCols, wt) << "\n";
      if (wt == "f32")
        return "%bw" + tag;
      b << indent << "%bf" << tag << " = arith.extf %bw" << tag << " : " << wt << " to f32\n";
      return "%bf" + tag;
    };
    auto widened = [&](const std::string &name, const char *indent) {
      if (wt == "f32")
        return name;
      b << indent << name << "f = arith.extf " << name << " : " << vw << " to " << vf << "\n";
      return name + "f";
    };
    b << "      %nq = arith.divui " << n << ", " << c4 << " : index\n"
      << "      %nb = arith.muli %nq, " << c4 << " : index\n";
    // Whole groups of 4 token rows [0, nb) times the output rows |outs| (biases |biases|), one
    // register tile of rows x outs.size() accumulators per group.
    auto tokenTiles = [&](const std::vector<std::string> &outs,
                          const std::vector<std::string> &biases) {
      int64_t nc = static_cast<int64_t>(outs.size()), tile = rows * nc;
      auto accName = [&](int64_t i) {
        return std::to_string(i / nc) + "_" + std::to_string(i % nc);
      };
      b << "      scf.for %m0 = %tlo to %thi step " << c4 << " {\n";
      for (int64_t r = 1; r < rows; ++r)
        b << "        %mo" << r << " = arith.constant " << r << " : index\n"
          << "        %m" << r << " = arith.addi %m0, %mo" << r << " : index\n";
      // Wide rows (no |prefetch|) on targets that ask for the row prefetch: the first group of
      // token rows asks for each weight row rowAhead bytes ahead into L2, as decode's row loop
      // does (the later groups find the rows in cache). Emerald Rapids, the 2-layer Llama-3-8B
      // shape (rows of 4096 and 14336 bf16), batch-4 decode at 1K-64K, 1 and 2 threads, 3
      // rounds in turn: +4-27% tokens/s, 0.56-0.70 -> 0.71-0.75 of the roof; 512-token prefill
      // level (docs/models.md, "Matmul prefetch").
      const bool tilePf = !prefetch && rowAhead > 0;
      if (tilePf)
        b << "        %tfirst = arith.cmpi eq, %m0, %tlo : index\n";
      b << "        %bacc:" << tile << " = scf.for %k = " << c0 << " to " << cK << " step " << c16
        << " iter_args("
        << joined(tile, [&](int64_t i) { return "%q" + accName(i) + " = " + zero; })
        << ") -> (" << joined(tile, [&](int64_t) { return vf; }) << ") {\n";
      std::vector<std::string> wv;
      for (int64_t j = 0; j < nc; ++j) {
        if (prefetch) {
          // Clamped to the last element: past the end the address would be out of bounds.
          std::string t = std::to_string(j);
          b << "          %pa" << t << " = arith.muli " << outs[j] << ", " << cK << " : index\n"
            << "          %pb" << t << " = arith.addi %pa" << t << ", %k : index\n"
            << "          %pc" << t << " = arith.addi %pb" << t << ", " << cAhead << " : index\n"
            << "          %pd" << t << " = arith.minui %pc" << t << ", " << cLast << " : index\n"
            << "          memref.prefetch " << wFlat << "[%pd" << t
            << "], read, locality<2>, data : "
            << flatType << "\n";
        }
        if (tilePf) {
          std::string t = std::to_string(j);
          b << "          scf.if %tfirst {\n"
            << "          %tpa" << t << " = arith.muli " << outs[j] << ", " << cK << " : index\n"
            << "          %tpb" << t << " = arith.addi %tpa" << t << ", %k : index\n"
            << "          %tpc" << t << " = arith.addi %tpb" << t << ", " << cRowAhead << " : index\n"
            << "          %tpd" << t << " = arith.minui %tpc" << t << ", " << cLast << " : index\n"
            << "          memref.prefetch " << wFlat << "[%tpd" << t
            << "], read, locality<2>, data : " << flatType << "\n          }\n";
        }
        std::string name = "%wb" + std::to_string(j);
        b << "          " << name << " = vector.load " << w << "[" << outs[j] << ", %k] : " << wType
          << ", " << vw << "\n";
        wv.push_back(widened(name, "          "));
      }
      for (int64_t r = 0; r < rows; ++r) {
        b << "          %xb" << r << " = vector.load " << in << "[%m" << r << ", %k] : " << xType
          << ", " << vf << "\n";
        for (int64_t j = 0; j < nc; ++j)
          b << "          %rb" << accName(r * nc + j) << " = vector.fma %xb" << r << ", " << wv[j]
            << ", %q" << accName(r * nc + j) << " : " << vf << "\n";
      }
      b << "          scf.yield " << joined(tile, [&](int64_t i) { return "%rb" + accName(i); })
        << " : " << joined(tile, [&](int64_t) { return vf; }) << "\n        }\n";
      for (int64_t i = 0; i < tile; ++i) {
        std::string a = accName(i);
        b << "        %db" << a << " = vector.reduction <add>, %bacc#" << i << " : " << vf
          << " into f32\n        %yb" << a << " = arith.addf %db" << a << ", " << biases[i % nc]
          << " : f32\n        memref.store %yb" << a << ", " << out << "[%m" << i / nc << ", "
          << outs[i % nc] << "] : " << rowType(outCols) << "\n";
      }
      b << "      }\n";
    };
    // Prefill-sized calls (>= kTileRowsMin rows) take the 4 x cols tile. Fewer rows (decode with a
    // batch) are bound by the weights' bandwidth, and there reading |cols| weight rows side by side
    // measured slower than one after the other while the 4 input rows stay in L1 (SmolLM2, inputs
    // 576 and 1536 wide, batch 4: 104-112 -> 79-83 tokens/s on 1 thread), so they take 4 x 1
    // tiles, output row by output row. Where 4 input rows fill an L1 (>= 2048 f32 each) they would
    // come from L2 again for every output row, and the 4 x cols tile wins at any batch (Llama-3-8B
    // shape, inputs 4096 and 14336 wide, batch 4: 13.3-13.7 -> 24.0-25.7 tokens/s on 1 thread;
    // batch 8: 16.7-17.7 -> 35.8-36.8).
    constexpr int64_t kTileRowsMin = 16, kTileAlwaysCols = 2048;
    // 4 x cols tiles over the whole block of output rows, at most kOutTile of them per tile
    // (side-by-side blocks hold more). Returns the block's biases (SSA values in scope where
    // it was called).
    auto blockTiles = [&] {
      std::vector<std::string> outs, biases;
      for (int64_t j = 0; j < cols; ++j) {
        outs.push_back("%o" + std::to_string(j));
        biases.push_back(biasOf(outs.back(), std::to_string(j), "      "));
      }
      for (int64_t j0 = 0; j0 < cols; j0 += kOutTile) {
        int64_t j1 = std::min(cols, j0 + kOutTile);
        tokenTiles({outs.begin() + j0, outs.begin() + j1},
                   {biases.begin() + j0, biases.begin() + j1});
      }
      return biases;
    };
    // Side-by-side blocks only come with inputs wider than kSideBySideMinCols, so they take the
    // unconditional blockTiles below, whose biases the side-by-side row loop reuses.
    static_assert(kSideBySideMinCols >= kTileAlwaysCols);
    std::vector<std::string> blockBiases;
    if (cols > 1 && inCols < kTileAlwaysCols) {
      std::string cMin = f.constant(std::to_string(kTileRowsMin), "index");
      b << "      %wide = arith.cmpi uge, " << n << ", " << cMin << " : index\n"
        << "      scf.if %wide {\n";
      blockTiles();
      b << "      } else {\n"
        << "      scf.for %oj = " << c0 << " to " << cC << " step " << c1 << " {\n"
        << "      %o = arith.addi %o0, %oj : index\n";
      tokenTiles({"%o"}, {biasOf("%o", "", "      ")});
      b << "      }\n      }\n";
    } else {
      blockBiases = blockTiles();
    }

    // The remaining rows (n % 4 of them; all of decode's rows when n < 4) once, with the last
    // chunk of token rows.
    b << "      scf.if %tlast {\n";
    if (p.sideBySide) {
      // The remaining rows, the block's output rows side by side: per 16 columns one input
      // load and |cols| weight loads into one accumulator per output row (named %sb*).
      b << "      scf.for %m = %nb to " << n << " step " << c1 << " {\n";
      auto acc = [](int64_t j) { return "%sb" + std::to_string(j); };
      b << "        %sbacc:" << cols << " = scf.for %k = " << c0 << " to " << cK << " step " << c16
        << " iter_args(" << joined(cols, [&](int64_t j) { return acc(j) + " = " + zero; })
        << ") -> (" << joined(cols, [&](int64_t) { return vf; }) << ") {\n"
        << "          %sbx = vector.load " << in << "[%m, %k] : " << xType << ", " << vf << "\n";
      for (int64_t j = 0; j < cols; ++j) {
        std::string t = std::to_string(j), wname = "%sbw" + t;
        b << "          " << wname << " = vector.load " << w << "[%o" << t << ", %k] : " << wType
          << ", " << vw << "\n";
        std::string wf = widened(wname, "          ");
        b << "          %sbr" << t << " = vector.fma %sbx, " << wf << ", " << acc(j) << " : " << vf
          << "\n";
      }
      b << "          scf.yield " << joined(cols, [&](int64_t j) { return "%sbr" + std::to_string(j); })
        << " : " << joined(cols, [&](int64_t) { return vf; }) << "\n        }\n";
      for (int64_t j = 0; j < cols; ++j) {
        std::string t = std::to_string(j);
        b << "        %sbd" << t << " = vector.reduction <add>, %sbacc#" << j << " : " << vf
          << " into f32\n        %sby" << t << " = arith.addf %sbd" << t << ", " << blockBiases[j]
          << " : f32\n        memref.store %sby" << t << ", " << out << "[%m, %o" << t << "] : "
          << rowType(outCols) << "\n";
      }
      b << "      }\n      }\n";
      return;
    }

    // The remaining rows, one output row of the block at a time.
    b << "      scf.for %oj = " << c0 << " to " << cC << " step " << c1 << " {\n"
      << "      %o = arith.addi %o0, %oj : index\n";
    std::string biasValue = biasOf("%o", "", "      ");
    b << "      scf.for %m = %nb to " << n << " step " << c1 << " {\n";
    b << "        %acc:" << unroll << " = scf.for %k = " << c0 << " to " << cK << " step " << step
      << " iter_args("
      << joined(unroll, [&](int64_t u) { return "%s" + std::to_string(u) + " = " + zero; })
      << ") -> (" << joined(unroll, [&](int64_t) { return vf; }) << ") {\n";
    if (rowAhead > 0) {
      // One prefetch per cache line of the iteration's weights, in memory order, clamped to the
      // matrix's last element (named %rp* so that tests can tell them from the token tiles').
      b << "          %rpa = arith.muli %o, " << cK << " : index\n"
        << "          %rpb = arith.addi %rpa, %k : index\n"
        << "          %rpc = arith.addi %rpb, " << cRowAhead << " : index\n";
      for (int64_t off = 0; off < lanes * unroll * eltBytes; off += 64) {
        std::string t = std::to_string(off);
        b << "          %rpo" << t << " = arith.constant " << off / eltBytes << " : index\n"
          << "          %rpe" << t << " = arith.addi %rpc, %rpo" << t << " : index\n"
          << "          %rpf" << t << " = arith.minui %rpe" << t << ", " << cLast << " : index\n"
          << "          memref.prefetch " << wFlat << "[%rpf" << t
          << "], read, locality<2>, data : " << flatType << "\n";
      }
    }
    for (int64_t u = 0; u < unroll; ++u) {
      std::string k = "%k";
      if (u) {
        b << "          %off" << u << " = arith.constant " << u * lanes << " : index\n"
          << "          %k" << u << " = arith.addi %k, %off" << u << " : index\n";
        k = "%k" + std::to_string(u);
      }
      std::string wname = "%w" + std::to_string(u);
      b << "          %x" << u << " = vector.load " << in << "[%m, " << k << "] : " << xType << ", "
        << vf << "\n"
        << "          " << wname << " = vector.load " << w << "[%o, " << k << "] : " << wType
        << ", " << vw << "\n";
      std::string wf = widened(wname, "          ");
      b << "          %r" << u << " = vector.fma %x" << u << ", " << wf << ", %s" << u << " : "
        << vf << "\n";
    }
    b << "          scf.yield "
      << joined(unroll, [&](int64_t u) { return "%r" + std::to_string(u); })
      << " : " << joined(unroll, [&](int64_t) { return vf; }) << "\n        }\n";
    std::string sum = "%acc#0";
    for (int64_t u = 1; u < unroll; ++u) {
      b << "        %t" << u << " = arith.addf " << sum << ", %acc#" << u << " : " << vf << "\n";
      sum = "%t" + std::to_string(u);
    }
    b << "        %dot = vector.reduction <add>, " << sum << " : " << vf << " into f32\n"
      << "        %y = arith.addf %dot, " << biasValue << " : f32\n"
      << "        memref.store %y, " << out << "[%m, %o] : " << rowType(outCols) << "\n"
      << "      }\n      }\n      }\n";
  };

  // Token rows in chunks whose input rows stay in L2 (kChunkInputBytes of f32), the parallel
  // loop over the blocks of output rows inside: every block reads the chunk's input rows from L2
  // instead of all rows from L3 or memory, and the weights are read once per chunk. SmolLM2
  // prefill on Emerald Rapids (one thread, 1024 tokens) ran 229 tokens/s in 512-token calls and
  // 263 in 128-token ones, batch 4 167 against 230-237 (docs/models.md, "Token chunks").
  constexpr int64_t kChunkInputBytes = 512 * 1024;
  const int64_t chunkRows = std::max<int64_t>(16, kChunkInputBytes / (inCols * 4) / rows * rows);
  std::string cCh = f.constant(std::to_string(chunkRows), "index");
  std::string nq = f.fresh(), nbAll = f.fresh(), nch = f.fresh(), cnt = f.fresh();
  b << "    " << nq << " = arith.divui " << n << ", " << c4 << " : index\n"
    << "    " << nbAll << " = arith.muli " << nq << ", " << c4 << " : index\n"
    << "    " << nch << " = arith.ceildivui " << nbAll << ", " << cCh << " : index\n"
    << "    " << cnt << " = arith.maxui " << nch << ", " << c1 << " : index\n"
    << "    scf.for %tci = " << c0 << " to " << cnt << " step " << c1 << " {\n"
    << "    %tlo = arith.muli %tci, " << cCh << " : index\n"
    << "    %tend = arith.addi %tlo, " << cCh << " : index\n"
    << "    %thi = arith.minui %tend, " << nbAll << " : index\n"
    << "    %tci1 = arith.addi %tci, " << c1 << " : index\n"
    << "    %tlast = arith.cmpi eq, %tci1, " << cnt << " : index\n";
  b << "    scf.parallel (%ob) = (" << c0 << ") to (" << cTotal << ") step (" << c1 << ") {\n";
  // Block %ob of the concatenated products: the first product's blocks, then the second's, ...
  std::string blk = "%ob";
  for (size_t i = 0; i + 1 < plans.size(); ++i) {
    std::string t = std::to_string(i);
    b << "      %sel" << t << " = arith.cmpi ult, " << blk << ", " << plans[i].cB << " : index\n"
      << "      scf.if %sel" << t << " {\n";
    emitBlock(plans[i], blk);
    std::string next = "%ob" + std::to_string(i + 1);
    b << "      } else {\n      " << next << " = arith.subi " << blk << ", " << plans[i].cB
      << " : index\n";
    blk = next;
  }
  emitBlock(plans.back(), blk);
  for (size_t i = 0; i + 1 < plans.size(); ++i)
    b << "      }\n";
  b << "      scf.reduce\n    }\n    }\n";
}

void emitMatmuls(FunctionWriter &f, const std::string &in, int64_t inCols,
                 const std::vector<MatmulOut> &outs, const std::string &n) {
  if (inCols % 16 == 0) {
    emitVectorMatmuls(f, in, inCols, outs, n);
    return;
  }
  for (const MatmulOut &o : outs)
    emitLinalgMatmul(f, in, inCols, o.w, o.outCols, o.bias, o.out);
}

void emitMatmul(FunctionWriter &f, const std::string &in, int64_t inCols, const std::string &w,
                int64_t outCols, const std::string *bias, const std::string &out,
                const std::string &n) {
  emitMatmuls(f, in, inCols, {MatmulOut{w, outCols, bias, out}}, n);
}

/// out = norm(in) * w (+ b): RMSNorm or LayerNorm over the |cols| of every row.
void emitNorm(FunctionWriter &f, const ModelConfig &c, const std::string &in, const std::string &n,
              const std::string &w, const std::string *bias, const std::string &out) {
  std::ostringstream &b = f.body();
  int64_t H = c.hidden;
  const std::string &wt = f.weightType();
  std::string rt = rowType(H), st = "memref<?xf32>";
  std::string zero = f.constant("0.0", "f32");
  std::string hf = f.constant(floatLiteral(double(H)), "f32");
  std::string eps = f.constant(floatLiteral(c.normEps), "f32");
  const char *reduceMaps = "indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> "
                           "(i)>], iterator_types = [\"parallel\", \"reduction\"]";
  std::string mean;
  if (c.norm == NormKind::kLayer) {
    mean = f.alloc(st, n);
    b << "    linalg.fill ins(" << zero << " : f32) outs(" << mean << " : " << st << ")\n"
      << "    linalg.generic {" << reduceMaps << "} ins(" << in << " : " << rt << ") outs(" << mean
      << " : " << st << ") {\n    ^bb0(%x: f32, %acc: f32):\n"
      << "      %s = arith.addf %acc, %x : f32\n      linalg.yield %s : f32\n    }\n"
      << "    linalg.generic {indexing_maps = [affine_map<(i) -> (i)>], iterator_types = "
         "[\"parallel\"]} outs("
      << mean << " : " << st << ") {\n    ^bb0(%s: f32):\n      %m = arith.divf %s, " << hf
      << " : f32\n      linalg.yield %m : f32\n    }\n";
  }
  // Sum of squares (of x - mean for LayerNorm).
  std::string ss = f.alloc(st, n);
  b << "    linalg.fill ins(" << zero << " : f32) outs(" << ss << " : " << st << ")\n";
  if (c.norm == NormKind::kLayer)
    b << "    linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> "
         "(i)>, affine_map<(i, j) -> (i)>], iterator_types = [\"parallel\", \"reduction\"]} ins("
      << in << ", " << mean << " : " << rt << ", " << st << ") outs(" << ss << " : " << st
      << ") {\n    ^bb0(%x: f32, %mu: f32, %acc: f32):\n"
      << "      %d = arith.subf %x, %mu : f32\n      %q = arith.mulf %d, %d : f32\n"
      << "      %s = arith.addf %acc, %q : f32\n      linalg.yield %s : f32\n    }\n";
  else
    b << "    linalg.generic {" << reduceMaps << "} ins(" << in << " : " << rt << ") outs(" << ss
      << " : " << st << ") {\n    ^bb0(%x: f32, %acc: f32):\n"
      << "      %q = arith.mulf %x, %x : f32\n      %s = arith.addf %acc, %q : f32\n"
      << "      linalg.yield %s : f32\n    }\n";

  // out = (x - mean) * rsqrt(ss / H + eps) * w (+ b)
  std::string ins = in + ", " + ss + (mean.empty() ? "" : ", " + mean) + ", " + w +
                    (bias ? ", " + *bias : "");
  std::string insTypes = rt + ", " + st + (mean.empty() ? "" : ", " + st) + ", " +
                         vecType(H, wt) + (bias ? ", " + vecType(H, wt) : "");
  std::string maps = std::string(kRowMaps2) + ", affine_map<(i, j) -> (i)>" +
                     (mean.empty() ? "" : ", affine_map<(i, j) -> (i)>") +
                     ", affine_map<(i, j) -> (j)>" + (bias ? ", affine_map<(i, j) -> (j)>" : "") +
                     ", " + kRowMaps2;
  b << "    linalg.generic {indexing_maps = [" << maps
    << "], iterator_types = [\"parallel\", \"parallel\"]} ins(" << ins << " : " << insTypes
    << ") outs(" << out << " : " << rt << ") {\n    ^bb0(%x: f32, %ss: f32, "
    << (mean.empty() ? "" : "%mu: f32, ") << "%w: " << wt << (bias ? ", %b: " + wt : "")
    << ", %o: f32):\n";
  std::string centered = "%x";
  if (!mean.empty()) {
    b << "      %xc = arith.subf %x, %mu : f32\n";
    centered = "%xc";
  }
  b << "      %var = arith.divf %ss, " << hf << " : f32\n"
    << "      %ve = arith.addf %var, " << eps << " : f32\n"
    << "      %r = math.rsqrt %ve : f32\n"
    << "      %y = arith.mulf " << centered << ", %r : f32\n";
  std::string wf = f.toF32("%w");
  b << "      %yw = arith.mulf %y, " << wf << " : f32\n";
  std::string result = "%yw";
  if (bias) {
    std::string bf = f.toF32("%b");
    b << "      %yb = arith.addf %yw, " << bf << " : f32\n";
    result = "%yb";
  }
  b << "      linalg.yield " << result << " : f32\n    }\n";
}

/// x += t, row-wise over |cols| columns.
void emitResidual(FunctionWriter &f, const std::string &x, const std::string &t, int64_t cols) {
  f.body() << "    linalg.generic {indexing_maps = [" << kRowMaps2 << ", " << kRowMaps2
           << "], iterator_types = [\"parallel\", \"parallel\"]} ins(" << t << " : "
           << rowType(cols) << ") outs(" << x << " : " << rowType(cols)
           << ") {\n    ^bb0(%t: f32, %x: f32):\n      %s = arith.addf %x, %t : f32\n"
           << "      linalg.yield %s : f32\n    }\n";
}

/// Rotates pairs (i, i + D/2) of every head of |q| [n, qHeads * D] and |k| [n, kHeads * D] by
/// pos * inv_freq[i] (the rotate_half convention of Hugging Face's Llama). Angles in f64: exact
/// up to long contexts. Each row's cos and sin are computed once per frequency for all heads of q
/// and k. Rows run in parallel where there are kParallelRows or more (prefill); decode's few rows
/// run on the calling thread, where a fork/join would cost more than the rotations.
void emitRope(FunctionWriter &f, const ModelConfig &c, const std::string &q, int64_t qHeads,
              const std::string &k, int64_t kHeads, const std::string &pos, const std::string &n) {
  constexpr int64_t kParallelRows = 8;
  std::ostringstream &b = f.body();
  int64_t D = c.headDim, half = D / 2;
  std::string inv = f.fresh();
  b << "    " << inv << " = memref.get_global @rope_inv_freq : " << vecType(half, "f64") << "\n";
  std::string c0 = f.constant("0", "index"), c1 = f.constant("1", "index"),
              cHalf = f.constant(std::to_string(half), "index"),
              cD = f.constant(std::to_string(D), "index"),
              cMin = f.constant(std::to_string(kParallelRows), "index");
  // Rotates every head of |buf| by the row's (%cs, %sn) at frequency %i.
  auto rotateHeads = [&](const std::string &buf, int64_t heads) {
    std::string t = rowType(heads * D), ch = f.fresh();
    b << "          " << ch << " = arith.constant " << heads << " : index\n"
      << "          scf.for %h = " << c0 << " to " << ch << " step " << c1 << " {\n"
      << "            %hb = arith.muli %h, " << cD << " : index\n"
      << "            %i1 = arith.addi %hb, %i : index\n"
      << "            %i2 = arith.addi %i1, " << cHalf << " : index\n"
      << "            %x1 = memref.load " << buf << "[%r, %i1] : " << t << "\n"
      << "            %x2 = memref.load " << buf << "[%r, %i2] : " << t << "\n"
      << "            %a1 = arith.mulf %x1, %cs : f32\n"
      << "            %b1 = arith.mulf %x2, %sn : f32\n"
      << "            %y1 = arith.subf %a1, %b1 : f32\n"
      << "            %a2 = arith.mulf %x2, %cs : f32\n"
      << "            %b2 = arith.mulf %x1, %sn : f32\n"
      << "            %y2 = arith.addf %a2, %b2 : f32\n"
      << "            memref.store %y1, " << buf << "[%r, %i1] : " << t << "\n"
      << "            memref.store %y2, " << buf << "[%r, %i2] : " << t << "\n"
      << "          }\n";
  };
  auto row = [&] {
    b << "      %p32 = memref.load " << pos << "[%r] : memref<?xi32>\n"
      << "      %pf = arith.sitofp %p32 : i32 to f64\n"
      << "      scf.for %i = " << c0 << " to " << cHalf << " step " << c1 << " {\n"
      << "          %fr = memref.load " << inv << "[%i] : " << vecType(half, "f64") << "\n"
      << "          %ang = arith.mulf %pf, %fr : f64\n"
      << "          %cd = math.cos %ang : f64\n          %sd = math.sin %ang : f64\n"
      << "          %cs = arith.truncf %cd : f64 to f32\n"
      << "          %sn = arith.truncf %sd : f64 to f32\n";
    rotateHeads(q, qHeads);
    rotateHeads(k, kHeads);
    b << "      }\n";
  };
  std::string wide = f.fresh();
  b << "    " << wide << " = arith.cmpi uge, " << n << ", " << cMin << " : index\n"
    << "    scf.if " << wide << " {\n"
    << "    scf.parallel (%r) = (" << c0 << ") to (" << n << ") step (" << c1 << ") {\n";
  row();
  b << "      scf.reduce\n    }\n    } else {\n"
    << "    scf.for %r = " << c0 << " to " << n << " step " << c1 << " {\n";
  row();
  b << "    }\n    }\n";
}

std::string dimOf(FunctionWriter &f, const std::string &buf, const std::string &type, int d) {
  std::string c = f.constant(std::to_string(d), "index");
  std::string r = f.fresh();
  f.body() << "    " << r << " = memref.dim " << buf << ", " << c << " : " << type << "\n";
  return r;
}

} // namespace hybridgen::models::detail
