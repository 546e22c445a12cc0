//===- ModelEmitter.h - text emitters for the dense ops of generated models (internal) -*- C++ -*-===//
//
// FunctionWriter collects one func.func's arguments and body; the emitters append the ops of
// norms, matmuls, residuals and RoPE to it. Used by ModelModule.cpp only.
//
//===----------------------------------------------------------------------===//
#ifndef HYBRIDGEN_LIB_MODELS_MODELEMITTER_H
#define HYBRIDGEN_LIB_MODELS_MODELEMITTER_H

#include "hybridgen/runtime/model/config.h"

#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace hybridgen::models::detail {

using rt::model::ModelConfig;

/// A float literal the MLIR parser reads back exactly (it rejects bare integers).
std::string floatLiteral(double value);
/// memref<?xCOLSxELT>, memref<ROWSxCOLSxELT>, memref<NxELT>.
std::string rowType(int64_t cols, const std::string &elt = "f32");
std::string matType(int64_t rows, int64_t cols, const std::string &elt);
std::string vecType(int64_t n, const std::string &elt);

/// The identity map of a row-major [n, cols] buffer inside linalg.generic.
inline constexpr const char *kRowMaps2 = "affine_map<(i, j) -> (i, j)>";

/// How decode's matrix-vector products walk the weights (resolved for the target by
/// buildModelModule; see emitVectorMatmuls).
struct MatmulTuning {
  /// How far ahead (bytes) the one-row loop prefetches its weights into L2; 0: not at all.
  int64_t rowPrefetchBytes = 0;
  /// Output rows read side by side where the input row is wider than kSideBySideMinCols; 0:
  /// one row after the other.
  int64_t sideBySideRows = 0;
};

/// One function's text and its named arguments.
class FunctionWriter {
public:
  FunctionWriter(std::string name, std::string weightType, MatmulTuning tuning = {})
      : name_(std::move(name)), w_(std::move(weightType)), tuning_(tuning) {}

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
  const MatmulTuning &tuning() const { return tuning_; }
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
  MatmulTuning tuning_;
  std::vector<std::string> args_;
  std::map<std::string, std::string> types_;
  std::vector<std::string> deallocs_;
  std::ostringstream body_;
  int counter_ = 0;
};


/// One product of emitMatmuls: out[n, o] = in[n, k] . w[o, k] (+ bias[o]), o < outCols.
struct MatmulOut {
  std::string w;
  int64_t outCols;
  const std::string *bias; // nullptr: none
  std::string out;
};

/// out[n, o] = in[n, k] . w[o, k] (+ bias[o]) over the |n| rows (f32 in/out, weight-type w):
/// the vector kernel where k is a multiple of 16, else linalg.generic.
void emitMatmul(FunctionWriter &f, const std::string &in, int64_t inCols, const std::string &w,
                int64_t outCols, const std::string *bias, const std::string &out,
                const std::string &n);
/// Several products of the same input |in| (q, k, v; gate, up) in one parallel loop: one
/// OpenMP fork/join for all of them (see emitVectorMatmuls).
void emitMatmuls(FunctionWriter &f, const std::string &in, int64_t inCols,
                 const std::vector<MatmulOut> &outs, const std::string &n);
/// out = norm(in) * w (+ b): RMSNorm or LayerNorm (from |c|) over every row of |n|.
void emitNorm(FunctionWriter &f, const ModelConfig &c, const std::string &in, const std::string &n,
              const std::string &w, const std::string *bias, const std::string &out);
/// x += t over [n, cols].
void emitResidual(FunctionWriter &f, const std::string &x, const std::string &t, int64_t cols);
/// RoPE (rotate_half pairs, f64 angles) on every head of |q| [n, qHeads * head_dim] and of |k|
/// [n, kHeads * head_dim]; cos and sin once per row and frequency.
void emitRope(FunctionWriter &f, const ModelConfig &c, const std::string &q, int64_t qHeads,
              const std::string &k, int64_t kHeads, const std::string &pos, const std::string &n);
/// %r = memref.dim |buf|, d.
std::string dimOf(FunctionWriter &f, const std::string &buf, const std::string &type, int d);

} // namespace hybridgen::models::detail

#endif // HYBRIDGEN_LIB_MODELS_MODELEMITTER_H
