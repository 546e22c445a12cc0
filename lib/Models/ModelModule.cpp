//===- ModelModule.cpp - MLIR text of one decoder architecture shape ---------------------===//
//
// Emits the functions of ModelModule.h as MLIR text (the driver parses, verifies and lowers it;
// a text generator keeps every op visible in one place, as in lib/Driver/AttentionModule.cpp).
// Dense ops are linalg.generic on memrefs (matmuls against HF's [out, in] weights, norms,
// activations, residuals); RoPE and the embedding gather are scf loops; attention is hg.
//
//===----------------------------------------------------------------------===//
#include "hybridgen/Models/ModelModule.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace hybridgen::models {
namespace {

using rt::model::Family;
using rt::model::ModelConfig;
using rt::model::NormKind;

std::string floatLiteral(double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", value);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos)
    s += ".0";
  return s;
}

std::string rowType(int64_t cols, const std::string &elt = "f32") {
  return "memref<?x" + std::to_string(cols) + "x" + elt + ">";
}
std::string matType(int64_t rows, int64_t cols, const std::string &elt) {
  return "memref<" + std::to_string(rows) + "x" + std::to_string(cols) + "x" + elt + ">";
}
std::string vecType(int64_t n, const std::string &elt) {
  return "memref<" + std::to_string(n) + "x" + elt + ">";
}

/// One function's text and its named arguments.
class FunctionWriter {
public:
  FunctionWriter(std::string name, std::string weightType)
      : name_(std::move(name)), w_(std::move(weightType)) {}

  /// Declares an argument; returns its SSA name.
  std::string arg(const std::string &argName, const std::string &type) {
    std::string ssa = "%arg" + std::to_string(args_.size());
    args_.push_back(argName);
    sig_ += (sig_.empty() ? "" : ", ") + ssa + ": " + type;
    types_[ssa] = type;
    return ssa;
  }
  std::string fresh() { return "%v" + std::to_string(counter_++); }
  std::ostringstream &body() { return body_; }
  const std::string &weightType() const { return w_; }
  const std::vector<std::string> &argNames() const { return args_; }

  /// Converts a scalar of the weight type to f32 inside a linalg body.
  std::string toF32(const std::string &v) {
    if (w_ == "f32")
      return v;
    std::string r = fresh();
    body_ << "      " << r << " = arith.extf " << v << " : " << w_ << " to f32\n";
    return r;
  }

  std::string alloc(const std::string &type, const std::string &dyn) {
    std::string r = fresh();
    body_ << "    " << r << " = memref.alloc(" << dyn << ") : " << type << "\n";
    deallocs_.push_back(r + " : " + type);
    return r;
  }
  std::string constant(const std::string &text, const std::string &type) {
    std::string r = fresh();
    body_ << "    " << r << " = arith.constant " << text << " : " << type << "\n";
    return r;
  }

  std::string finish() {
    std::ostringstream os;
    os << "  func.func @" << name_ << "(" << sig_ << ") {\n" << body_.str();
    for (const std::string &d : deallocs_)
      os << "    memref.dealloc " << d << "\n";
    os << "    return\n  }\n";
    return os.str();
  }

private:
  std::string name_, w_, sig_;
  std::vector<std::string> args_;
  std::map<std::string, std::string> types_;
  std::vector<std::string> deallocs_;
  std::ostringstream body_;
  int counter_ = 0;
};

const char *kRowMaps2 = "affine_map<(i, j) -> (i, j)>";

/// out[n, o] = in[n, k] . w[o, k] (+ bias[o]); |in| and |out| f32, |w| and |bias| weight type.
/// The portable form: one linalg.generic (lowered to parallel loops by hg-cpu-pipeline).
void emitLinalgMatmul(FunctionWriter &f, const std::string &in, int64_t inCols,
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
void emitVectorMatmul(FunctionWriter &f, const std::string &in, int64_t inCols,
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

/// Per-layer weight names (HF suffixes after model.layers.<i>. / model.decoder.layers.<i>.).
struct LayerNames {
  std::string ln1, ln2, q, k, v, o, gate, up, down, fc1, fc2;
};
LayerNames layerNames(const ModelConfig &c) {
  if (c.family == Family::kOpt)
    return {"self_attn_layer_norm", "final_layer_norm", "self_attn.q_proj", "self_attn.k_proj",
            "self_attn.v_proj",     "self_attn.out_proj", "", "", "", "fc1", "fc2"};
  return {"input_layernorm",   "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
          "self_attn.v_proj",  "self_attn.o_proj",         "mlp.gate_proj",    "mlp.up_proj",
          "mlp.down_proj",     "",                         ""};
}

std::string prefix(const ModelConfig &c) {
  return c.family == Family::kOpt ? "model.decoder." : "model.";
}

std::string buildEmbed(const ModelConfig &c, const std::string &wt) {
  FunctionWriter f("embed", wt);
  int64_t H = c.hidden;
  bool opt = c.family == Family::kOpt;
  std::string ids = f.arg("ids", "memref<?xi32>");
  std::string table = f.arg("tensor:" + prefix(c) + "embed_tokens.weight", matType(c.vocab, H, wt));
  std::string pos, posTable;
  if (opt) {
    pos = f.arg("positions", "memref<?xi32>");
    posTable = f.arg("tensor:model.decoder.embed_positions.weight",
                     matType(c.maxPositions + c.positionOffset, H, wt));
  }
  std::string out = f.arg("x", rowType(H));
  std::string n = dimOf(f, ids, "memref<?xi32>", 0);
  std::string c0 = f.constant("0", "index"), c1 = f.constant("1", "index"),
              cH = f.constant(std::to_string(H), "index"),
              off = f.constant(std::to_string(c.positionOffset), "index");
  std::ostringstream &b = f.body();
  b << "    scf.parallel (%r, %j) = (" << c0 << ", " << c0 << ") to (" << n << ", " << cH
    << ") step (" << c1 << ", " << c1 << ") {\n"
    << "      %id32 = memref.load " << ids << "[%r] : memref<?xi32>\n"
    << "      %id = arith.index_cast %id32 : i32 to index\n"
    << "      %e = memref.load " << table << "[%id, %j] : " << matType(c.vocab, H, wt) << "\n";
  std::string e = f.toF32("%e");
  if (opt) {
    b << "      %p32 = memref.load " << pos << "[%r] : memref<?xi32>\n"
      << "      %pi = arith.index_cast %p32 : i32 to index\n"
      << "      %po = arith.addi %pi, " << off << " : index\n"
      << "      %pe = memref.load " << posTable << "[%po, %j] : "
      << matType(c.maxPositions + c.positionOffset, H, wt) << "\n";
    std::string pe = f.toF32("%pe");
    b << "      %sum = arith.addf " << e << ", " << pe << " : f32\n";
    e = "%sum";
  }
  b << "      memref.store " << e << ", " << out << "[%r, %j] : " << rowType(H) << "\n"
    << "      scf.reduce\n    }\n";
  return f.finish();
}

std::string buildLayerPre(const ModelConfig &c, const std::string &wt,
                          std::vector<std::string> &argNames) {
  FunctionWriter f("layer_pre", wt);
  LayerNames names = layerNames(c);
  int64_t H = c.hidden, QD = c.qDim(), KD = c.kvDim();
  bool normBias = c.norm == NormKind::kLayer;
  std::string x = f.arg("x", rowType(H));
  std::string lnW = f.arg("layer:" + names.ln1 + ".weight", vecType(H, wt));
  std::string lnB = normBias ? f.arg("layer:" + names.ln1 + ".bias", vecType(H, wt)) : "";
  std::string proj[3], bias[3];
  const std::string *projNames[3] = {&names.q, &names.k, &names.v};
  int64_t dims[3] = {QD, KD, KD};
  for (int i = 0; i < 3; ++i) {
    proj[i] = f.arg("layer:" + *projNames[i] + ".weight", matType(dims[i], H, wt));
    if (c.qkvBias)
      bias[i] = f.arg("layer:" + *projNames[i] + ".bias", vecType(dims[i], wt));
  }
  std::string pos = f.arg("positions", "memref<?xi32>");
  std::string out[3] = {f.arg("q", rowType(QD)), f.arg("k", rowType(KD)), f.arg("v", rowType(KD))};
  std::string n = dimOf(f, x, rowType(H), 0);
  std::string h = f.alloc(rowType(H), n);
  emitNorm(f, c, x, n, lnW, normBias ? &lnB : nullptr, h);
  for (int i = 0; i < 3; ++i)
    emitMatmul(f, h, H, proj[i], dims[i], c.qkvBias ? &bias[i] : nullptr, out[i], n);
  if (c.rope) {
    emitRope(f, c, out[0], c.qHeads, pos, n);
    emitRope(f, c, out[1], c.kvHeads, pos, n);
  }
  argNames = f.argNames();
  return f.finish();
}

std::string splitAttr(bool prefill) {
  return prefill ? "" : ", split = #hg.split<[cpu, gpu], point = runtime, merge = lse, dense>";
}

/// layer_decode_<kv> / layer_prefill_<kv>: attention, o-proj + residual, norm, MLP + residual.
std::string buildLayerPost(const ModelConfig &c, const std::string &wt, const std::string &kv,
                           bool prefill, const ModelCompileOptions &opts,
                           std::vector<std::string> &argNames) {
  FunctionWriter f(std::string(prefill ? "layer_prefill_" : "layer_decode_") + kv, wt);
  LayerNames names = layerNames(c);
  int64_t H = c.hidden, QD = c.qDim(), D = c.headDim;
  bool opt = c.family == Family::kOpt;
  std::string qh = std::to_string(c.qHeads), d = std::to_string(D);
  std::string poolT = "memref<?x" + std::to_string(c.kvHeads) + "x" +
                      std::to_string(opts.blockSize) + "x" + d + "x" + kv + ">";
  std::string x = f.arg("x", rowType(H));
  // Prefill has no split (one device) and so no segment: it needs neither q rows nor the layer.
  std::string q = prefill ? "" : f.arg("q", rowType(QD));
  std::string kp = f.arg("k_pool", poolT), vp = f.arg("v_pool", poolT);
  std::string bt = f.arg("block_table", "memref<?x?xi32>");
  std::string lens = f.arg("seq_lens", "memref<?xi32>");
  std::string layer = prefill ? "" : f.arg("layer", "memref<1xi64>");
  std::string wo = f.arg("layer:" + names.o + ".weight", matType(H, QD, wt));
  std::string bo = c.denseBias ? f.arg("layer:" + names.o + ".bias", vecType(H, wt)) : "";
  bool normBias = c.norm == NormKind::kLayer;
  std::string ln2W = f.arg("layer:" + names.ln2 + ".weight", vecType(H, wt));
  std::string ln2B = normBias ? f.arg("layer:" + names.ln2 + ".bias", vecType(H, wt)) : "";
  int64_t I = c.intermediate;
  std::string gate, up, down, fc1, fc1b, fc2, fc2b;
  if (c.gatedMlp) {
    gate = f.arg("layer:" + names.gate + ".weight", matType(I, H, wt));
    up = f.arg("layer:" + names.up + ".weight", matType(I, H, wt));
    down = f.arg("layer:" + names.down + ".weight", matType(H, I, wt));
  } else {
    fc1 = f.arg("layer:" + names.fc1 + ".weight", matType(I, H, wt));
    if (c.denseBias)
      fc1b = f.arg("layer:" + names.fc1 + ".bias", vecType(I, wt));
    fc2 = f.arg("layer:" + names.fc2 + ".weight", matType(H, I, wt));
    if (c.denseBias)
      fc2b = f.arg("layer:" + names.fc2 + ".bias", vecType(H, wt));
  }
  std::ostringstream &b = f.body();
  std::string n = dimOf(f, x, rowType(H), 0);
  std::string scale = floatLiteral(double(1.0f / std::sqrt(float(D))));
  std::string attrs = "scale = " + scale + " : f32";
  if (c.slidingWindow)
    attrs += ", window = " + std::to_string(*c.slidingWindow) + " : i64";
  std::string attFlat;
  if (!prefill) {
    std::string q3T = "memref<?x" + qh + "x" + d + "xf32>";
    std::string q3 = f.fresh();
    b << "    " << q3 << " = memref.expand_shape " << q << " [[0], [1, 2]] output_shape [" << n
      << ", " << qh << ", " << d << "] : " << rowType(QD) << " into " << q3T << "\n";
    std::string att = f.alloc(q3T, n);
    std::string c0 = f.constant("0", "index");
    std::string lid = f.fresh(), lidx = f.fresh();
    b << "    " << lid << " = memref.load " << layer << "[" << c0 << "] : memref<1xi64>\n"
      << "    " << lidx << " = arith.index_cast " << lid << " : i64 to index\n";
    b << "    hg.segment " << (opts.dynamicSegments ? "dynamic(" + lidx + ")" : "0") << " {\n"
      << "      hg.attention q(" << q3 << " : " << q3T << ") kv(" << kp << ", " << vp << " : "
      << poolT << ", " << poolT << ") table(" << bt << " : memref<?x?xi32>) lens(" << lens
      << " : memref<?xi32>)\n          out(" << att << " : " << q3T << ") {" << attrs
      << splitAttr(false) << "}\n    }\n";
    attFlat = f.fresh();
    b << "    " << attFlat << " = memref.collapse_shape " << att << " [[0], [1, 2]] : " << q3T
      << " into " << rowType(QD) << "\n";
  } else {
    // The runner passes q and the attention output as [batch, T, q_dim] views ("q_chunks",
    // "attn_chunks") next to their [batch * T, q_dim] rows: expanding one dynamic dimension into
    // two is what memref.expand_shape's lowering cannot do here.
    std::string q4T = "memref<?x?x" + qh + "x" + d + "xf32>";
    std::string c3T = "memref<?x?x" + std::to_string(QD) + "xf32>";
    std::string qc = f.arg("q_chunks", c3T);
    std::string attRows = f.arg("attn", rowType(QD));
    std::string attChunks = f.arg("attn_chunks", c3T);
    std::string bsz = dimOf(f, qc, c3T, 0), t = dimOf(f, qc, c3T, 1);
    std::string q4 = f.fresh(), att4 = f.fresh();
    b << "    " << q4 << " = memref.expand_shape " << qc << " [[0], [1], [2, 3]] output_shape ["
      << bsz << ", " << t << ", " << qh << ", " << d << "] : " << c3T << " into " << q4T << "\n"
      << "    " << att4 << " = memref.expand_shape " << attChunks
      << " [[0], [1], [2, 3]] output_shape [" << bsz << ", " << t << ", " << qh << ", " << d
      << "] : " << c3T << " into " << q4T << "\n";
    b << "    hg.prefill_attention q(" << q4 << " : " << q4T << ") kv(" << kp << ", " << vp
      << " : " << poolT << ", " << poolT << ") table(" << bt << " : memref<?x?xi32>) lens("
      << lens << " : memref<?xi32>)\n        out(" << att4 << " : " << q4T << ") {" << attrs
      << "}\n";
    attFlat = attRows;
  }
  std::string tmp = f.alloc(rowType(H), n);
  emitMatmul(f, attFlat, QD, wo, H, c.denseBias ? &bo : nullptr, tmp, n);
  emitResidual(f, x, tmp, H);
  std::string h = f.alloc(rowType(H), n);
  emitNorm(f, c, x, n, ln2W, normBias ? &ln2B : nullptr, h);
  std::string mid = f.alloc(rowType(I), n);
  if (c.gatedMlp) {
    std::string g = f.alloc(rowType(I), n);
    emitMatmul(f, h, H, gate, I, nullptr, g, n);
    emitMatmul(f, h, H, up, I, nullptr, mid, n);
    // mid = silu(g) * up
    b << "    linalg.generic {indexing_maps = [" << kRowMaps2 << ", " << kRowMaps2
      << "], iterator_types = [\"parallel\", \"parallel\"]} ins(" << g << " : " << rowType(I)
      << ") outs(" << mid << " : " << rowType(I) << ") {\n    ^bb0(%g: f32, %u: f32):\n"
      << "      %one = arith.constant 1.0 : f32\n      %ng = arith.negf %g : f32\n"
      << "      %e = math.exp %ng : f32\n      %den = arith.addf %one, %e : f32\n"
      << "      %sg = arith.divf %g, %den : f32\n      %r = arith.mulf %sg, %u : f32\n"
      << "      linalg.yield %r : f32\n    }\n";
    emitMatmul(f, mid, I, down, H, nullptr, tmp, n);
  } else {
    emitMatmul(f, h, H, fc1, I, c.denseBias ? &fc1b : nullptr, mid, n);
    b << "    linalg.generic {indexing_maps = [" << kRowMaps2
      << "], iterator_types = [\"parallel\", \"parallel\"]} outs(" << mid << " : " << rowType(I)
      << ") {\n    ^bb0(%m: f32):\n      %z = arith.constant 0.0 : f32\n"
      << "      %r = arith.maximumf %m, %z : f32\n      linalg.yield %r : f32\n    }\n";
    emitMatmul(f, mid, I, fc2, H, c.denseBias ? &fc2b : nullptr, tmp, n);
  }
  emitResidual(f, x, tmp, H);
  (void)opt;
  argNames = f.argNames();
  return f.finish();
}

std::string buildFinal(const ModelConfig &c, const std::string &wt,
                       std::vector<std::string> &argNames) {
  FunctionWriter f("final", wt);
  int64_t H = c.hidden;
  bool opt = c.family == Family::kOpt;
  std::string normName = opt ? "model.decoder.final_layer_norm" : "model.norm";
  std::string x = f.arg("x", rowType(H));
  std::string w = f.arg("tensor:" + normName + ".weight", vecType(H, wt));
  std::string nb = c.norm == NormKind::kLayer ? f.arg("tensor:" + normName + ".bias", vecType(H, wt))
                                              : "";
  std::string head = f.arg(c.tiedEmbeddings ? "tensor:" + prefix(c) + "embed_tokens.weight"
                                            : std::string("tensor:lm_head.weight"),
                           matType(c.vocab, H, wt));
  std::string logits = f.arg("logits", rowType(c.vocab));
  std::string n = dimOf(f, x, rowType(H), 0);
  std::string h = f.alloc(rowType(H), n);
  emitNorm(f, c, x, n, w, nb.empty() ? nullptr : &nb, h);
  emitMatmul(f, h, H, head, c.vocab, nullptr, logits, n);
  argNames = f.argNames();
  return f.finish();
}

} // namespace

ModelModule buildModelModule(const ModelConfig &c, const ModelCompileOptions &opts) {
  const std::string &wt = opts.weightDtype;
  if (wt != "f32" && wt != "bf16" && wt != "f16")
    throw driver::ArgumentError("weight dtype must be f32, bf16 or f16, got '" + wt + "'");
  if (opts.blockSize <= 0)
    throw driver::ArgumentError("block size must be positive");
  for (const std::string &kv : opts.kvDtypes)
    if (kv != "f32" && kv != "bf16" && kv != "f16")
      throw driver::ArgumentError("kv dtype must be f32, bf16 or f16, got '" + kv + "'");
  ModelModule m;
  std::ostringstream os;
  os << "// " << (c.architecture.empty() ? c.modelType : c.architecture)
     << " generated by hybridgen::models::buildModelModule: " << c.layers << " layers share "
     << "these functions.\nmodule {\n";
  if (c.rope) {
    os << "  memref.global \"private\" constant @rope_inv_freq : "
       << vecType(c.headDim / 2, "f64") << " = dense<[";
    for (size_t i = 0; i < c.invFreq.size(); ++i)
      os << (i ? ", " : "") << floatLiteral(c.invFreq[i]);
    os << "]>\n";
  }
  std::vector<std::string> names;
  // embed's names are collected by hand: buildEmbed is small enough to keep self-contained.
  os << buildEmbed(c, wt);
  m.functionArguments["embed"] = {"ids", "tensor:" + prefix(c) + "embed_tokens.weight"};
  if (c.family == Family::kOpt) {
    m.functionArguments["embed"].push_back("positions");
    m.functionArguments["embed"].push_back("tensor:model.decoder.embed_positions.weight");
  }
  m.functionArguments["embed"].push_back("x");
  os << buildLayerPre(c, wt, names);
  m.functionArguments["layer_pre"] = names;
  for (const std::string &kv : opts.kvDtypes) {
    os << buildLayerPost(c, wt, kv, false, opts, names);
    m.functionArguments["layer_decode_" + kv] = names;
    if (opts.prefill) {
      os << buildLayerPost(c, wt, kv, true, opts, names);
      m.functionArguments["layer_prefill_" + kv] = names;
    }
  }
  os << buildFinal(c, wt, names);
  m.functionArguments["final"] = names;
  os << "}\n";
  m.mlir = os.str();
  return m;
}

} // namespace hybridgen::models
