//===- ModelEmitter.cpp - norms, matmuls, residuals and RoPE as MLIR text ----------------===//
//
// Dense ops are linalg.generic on memrefs (lowered by hg-cpu-pipeline), except the matrix-vector
// products of decode, which get a small 16-wide vector kernel (see emitVectorMatmul).
//
//===----------------------------------------------------------------------===//
#include "ModelEmitter.h"

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

/// The same product as a bandwidth-bound kernel: OpenMP over output rows, each weight row read
/// once with 16-wide vector loads (bf16/f16 widened in registers, f32 accumulation) into
/// |unroll| independent accumulators, reused from L1 for every token row. Needs inCols % 16 == 0.
static void emitVectorMatmul(FunctionWriter &f, const std::string &in, int64_t inCols,
                             const std::string &w, int64_t outCols, const std::string *bias,
                             const std::string &out, const std::string &n) {
  std::ostringstream &b = f.body();
  const std::string &wt = f.weightType();
  const int64_t lanes = 16;
  int64_t unroll = inCols % (lanes * 4) == 0 ? 4 : inCols % (lanes * 2) == 0 ? 2 : 1;
  std::string vf = "vector<16xf32>", vw = "vector<16x" + wt + ">";
  std::string c0 = f.constant("0", "index"), c1 = f.constant("1", "index"),
              cO = f.constant(std::to_string(outCols), "index"),
              cK = f.constant(std::to_string(inCols), "index"),
              step = f.constant(std::to_string(lanes * unroll), "index");
  std::string zero = f.constant("dense<0.0>", vf);
  std::string zs = f.constant("0.0", "f32");
  b << "    scf.parallel (%o) = (" << c0 << ") to (" << cO << ") step (" << c1 << ") {\n";
  std::string biasValue = zs;
  if (bias) {
    b << "      %bw = memref.load " << *bias << "[%o] : " << vecType(outCols, wt) << "\n";
    biasValue = "%bw";
    if (wt != "f32") {
      b << "      %bf = arith.extf %bw : " << wt << " to f32\n";
      biasValue = "%bf";
    }
  }
  // Token rows four at a time: each widened weight vector feeds four rows' accumulators (prefill);
  // the remaining rows (all of decode's) run the single-row loop below.
  const int64_t rows = 4;
  std::string c4 = f.constant(std::to_string(rows), "index");
  b << "      %nq = arith.divui " << n << ", " << c4 << " : index\n"
    << "      %nb = arith.muli %nq, " << c4 << " : index\n"
    << "      scf.for %m0 = " << c0 << " to %nb step " << c4 << " {\n";
  for (int64_t r = 1; r < rows; ++r)
    b << "        %mo" << r << " = arith.constant " << r << " : index\n"
      << "        %m" << r << " = arith.addi %m0, %mo" << r << " : index\n";
  std::string c16 = f.constant(std::to_string(lanes), "index");
  b << "        %bacc:" << rows << " = scf.for %k = " << c0 << " to " << cK << " step " << c16
    << " iter_args(";
  for (int64_t r = 0; r < rows; ++r)
    b << (r ? ", " : "") << "%q" << r << " = " << zero;
  b << ") -> (";
  for (int64_t r = 0; r < rows; ++r)
    b << (r ? ", " : "") << vf;
  b << ") {\n          %wb = vector.load " << w << "[%o, %k] : " << matType(outCols, inCols, wt)
    << ", " << vw << "\n";
  std::string wb = "%wb";
  if (wt != "f32") {
    b << "          %wbf = arith.extf %wb : " << vw << " to " << vf << "\n";
    wb = "%wbf";
  }
  for (int64_t r = 0; r < rows; ++r)
    b << "          %xb" << r << " = vector.load " << in << "[%m" << r << ", %k] : "
      << rowType(inCols) << ", " << vf << "\n"
      << "          %rb" << r << " = vector.fma %xb" << r << ", " << wb << ", %q" << r << " : "
      << vf << "\n";
  b << "          scf.yield ";
  for (int64_t r = 0; r < rows; ++r)
    b << (r ? ", " : "") << "%rb" << r;
  b << " : ";
  for (int64_t r = 0; r < rows; ++r)
    b << (r ? ", " : "") << vf;
  b << "\n        }\n";
  for (int64_t r = 0; r < rows; ++r)
    b << "        %db" << r << " = vector.reduction <add>, %bacc#" << r << " : " << vf
      << " into f32\n        %yb" << r << " = arith.addf %db" << r << ", " << biasValue
      << " : f32\n        memref.store %yb" << r << ", " << out << "[%m" << r << ", %o] : "
      << rowType(outCols) << "\n";
  b << "      }\n";
  b << "      scf.for %m = %nb to " << n << " step " << c1 << " {\n";
  b << "        %acc:" << unroll << " = scf.for %k = " << c0 << " to " << cK << " step " << step
    << " iter_args(";
  for (int64_t u = 0; u < unroll; ++u)
    b << (u ? ", " : "") << "%s" << u << " = " << zero;
  b << ") -> (";
  for (int64_t u = 0; u < unroll; ++u)
    b << (u ? ", " : "") << vf;
  b << ") {\n";
  for (int64_t u = 0; u < unroll; ++u) {
    std::string k = "%k";
    if (u) {
      b << "          %off" << u << " = arith.constant " << u * lanes << " : index\n"
        << "          %k" << u << " = arith.addi %k, %off" << u << " : index\n";
      k = "%k" + std::to_string(u);
    }
    b << "          %x" << u << " = vector.load " << in << "[%m, " << k << "] : "
      << rowType(inCols) << ", " << vf << "\n"
      << "          %w" << u << " = vector.load " << w << "[%o, " << k << "] : "
      << matType(outCols, inCols, wt) << ", " << vw << "\n";
    std::string wv = "%w" + std::to_string(u);
    if (wt != "f32") {
      b << "          %wf" << u << " = arith.extf %w" << u << " : " << vw << " to " << vf << "\n";
      wv = "%wf" + std::to_string(u);
    }
    b << "          %r" << u << " = vector.fma %x" << u << ", " << wv << ", %s" << u << " : " << vf
      << "\n";
  }
  b << "          scf.yield ";
  for (int64_t u = 0; u < unroll; ++u)
    b << (u ? ", " : "") << "%r" << u;
  b << " : ";
  for (int64_t u = 0; u < unroll; ++u)
    b << (u ? ", " : "") << vf;
  b << "\n        }\n";
  std::string sum = "%acc#0";
  for (int64_t u = 1; u < unroll; ++u) {
    b << "        %t" << u << " = arith.addf " << sum << ", %acc#" << u << " : " << vf << "\n";
    sum = "%t" + std::to_string(u);
  }
  b << "        %dot = vector.reduction <add>, " << sum << " : " << vf << " into f32\n"
    << "        %y = arith.addf %dot, " << biasValue << " : f32\n"
    << "        memref.store %y, " << out << "[%m, %o] : " << rowType(outCols) << "\n"
    << "      }\n      scf.reduce\n    }\n";
}

void emitMatmul(FunctionWriter &f, const std::string &in, int64_t inCols, const std::string &w,
                int64_t outCols, const std::string *bias, const std::string &out,
                const std::string &n) {
  if (inCols % 16 == 0)
    emitVectorMatmul(f, in, inCols, w, outCols, bias, out, n);
  else
    emitLinalgMatmul(f, in, inCols, w, outCols, bias, out);
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

/// Rotates pairs (i, i + D/2) of every head of |buf| [n, heads * D] by pos * inv_freq[i] (the
/// rotate_half convention of Hugging Face's Llama). Angles in f64: exact up to long contexts.
void emitRope(FunctionWriter &f, const ModelConfig &c, const std::string &buf, int64_t heads,
              const std::string &pos, const std::string &n) {
  std::ostringstream &b = f.body();
  int64_t D = c.headDim, half = D / 2;
  std::string t = rowType(heads * D);
  std::string inv = f.fresh(), c0 = f.fresh(), c1 = f.fresh(), ch = f.fresh(), cHalf = f.fresh(),
              cD = f.fresh();
  b << "    " << inv << " = memref.get_global @rope_inv_freq : " << vecType(half, "f64") << "\n"
    << "    " << c0 << " = arith.constant 0 : index\n    " << c1 << " = arith.constant 1 : index\n"
    << "    " << ch << " = arith.constant " << heads << " : index\n    " << cHalf
    << " = arith.constant " << half << " : index\n    " << cD << " = arith.constant " << D
    << " : index\n"
    << "    scf.parallel (%r, %h, %i) = (" << c0 << ", " << c0 << ", " << c0 << ") to (" << n
    << ", " << ch << ", " << cHalf << ") step (" << c1 << ", " << c1 << ", " << c1 << ") {\n"
    << "      %p32 = memref.load " << pos << "[%r] : memref<?xi32>\n"
    << "      %pf = arith.sitofp %p32 : i32 to f64\n"
    << "      %fr = memref.load " << inv << "[%i] : " << vecType(half, "f64") << "\n"
    << "      %ang = arith.mulf %pf, %fr : f64\n"
    << "      %cd = math.cos %ang : f64\n      %sd = math.sin %ang : f64\n"
    << "      %cs = arith.truncf %cd : f64 to f32\n      %sn = arith.truncf %sd : f64 to f32\n"
    << "      %hb = arith.muli %h, " << cD << " : index\n"
    << "      %i1 = arith.addi %hb, %i : index\n"
    << "      %i2 = arith.addi %i1, " << cHalf << " : index\n"
    << "      %x1 = memref.load " << buf << "[%r, %i1] : " << t << "\n"
    << "      %x2 = memref.load " << buf << "[%r, %i2] : " << t << "\n"
    << "      %a1 = arith.mulf %x1, %cs : f32\n      %b1 = arith.mulf %x2, %sn : f32\n"
    << "      %y1 = arith.subf %a1, %b1 : f32\n"
    << "      %a2 = arith.mulf %x2, %cs : f32\n      %b2 = arith.mulf %x1, %sn : f32\n"
    << "      %y2 = arith.addf %a2, %b2 : f32\n"
    << "      memref.store %y1, " << buf << "[%r, %i1] : " << t << "\n"
    << "      memref.store %y2, " << buf << "[%r, %i2] : " << t << "\n"
    << "      scf.reduce\n    }\n";
}

std::string dimOf(FunctionWriter &f, const std::string &buf, const std::string &type, int d) {
  std::string c = f.constant(std::to_string(d), "index");
  std::string r = f.fresh();
  f.body() << "    " << r << " = memref.dim " << buf << ", " << c << " : " << type << "\n";
  return r;
}

} // namespace hybridgen::models::detail
