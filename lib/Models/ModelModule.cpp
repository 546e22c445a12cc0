//===- ModelModule.cpp - MLIR text of one decoder architecture shape ---------------------===//
//
// Emits the functions of ModelModule.h as MLIR text (the driver parses, verifies and lowers it;
// a text generator keeps every op visible in one place, as in lib/Driver/AttentionModule.cpp).
// The dense ops come from ModelEmitter.h (linalg.generic, and a vector kernel for the matmuls);
// RoPE and the embedding gather are scf loops; attention is hg.
//
//===----------------------------------------------------------------------===//
#include "hybridgen/Models/ModelModule.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/TargetParser/Host.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "ModelEmitter.h"

namespace hybridgen::models {
namespace {

using namespace detail;
using rt::model::Family;
using rt::model::ModelConfig;
using rt::model::NormKind;

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

/// The token embedding (OPT: project_in to the hidden width when word_embed_proj_dim differs,
/// then the learned position added) into |x| [n, hidden].
std::string buildEmbed(const ModelConfig &c, const std::string &wt, const MatmulTuning &tuning,
                       std::vector<std::string> &argNames) {
  FunctionWriter f("embed", wt, tuning);
  int64_t H = c.hidden, E = c.embedDim;
  bool opt = c.family == Family::kOpt, proj = c.projectsEmbeddings();
  std::string posTableT = matType(c.maxPositions + c.positionOffset, H, wt);
  std::string ids = f.arg("ids", "memref<?xi32>");
  std::string table = f.arg("tensor:" + prefix(c) + "embed_tokens.weight", matType(c.vocab, E, wt));
  std::string pos, posTable, projIn;
  if (opt) {
    pos = f.arg("positions", "memref<?xi32>");
    posTable = f.arg("tensor:model.decoder.embed_positions.weight", posTableT);
  }
  if (proj)
    projIn = f.arg("tensor:model.decoder.project_in.weight", matType(H, E, wt));
  std::string out = f.arg("x", rowType(H));
  std::string n = dimOf(f, ids, "memref<?xi32>", 0);
  std::string c0 = f.constant("0", "index"), c1 = f.constant("1", "index"),
              cH = f.constant(std::to_string(H), "index"),
              cE = proj ? f.constant(std::to_string(E), "index") : cH,
              off = f.constant(std::to_string(c.positionOffset), "index");
  // With project_in the gathered rows are E wide and go through a matmul before the positions.
  std::string gathered = proj ? f.alloc(rowType(E), n) : out;
  std::ostringstream &b = f.body();
  auto addPosition = [&](std::string e) {
    b << "      %p32 = memref.load " << pos << "[%r] : memref<?xi32>\n"
      << "      %pi = arith.index_cast %p32 : i32 to index\n"
      << "      %po = arith.addi %pi, " << off << " : index\n"
      << "      %pe = memref.load " << posTable << "[%po, %j] : " << posTableT << "\n";
    std::string pe = f.toF32("%pe");
    b << "      %sum = arith.addf " << e << ", " << pe << " : f32\n";
    return std::string("%sum");
  };
  b << "    scf.parallel (%r, %j) = (" << c0 << ", " << c0 << ") to (" << n << ", " << cE
    << ") step (" << c1 << ", " << c1 << ") {\n"
    << "      %id32 = memref.load " << ids << "[%r] : memref<?xi32>\n"
    << "      %id = arith.index_cast %id32 : i32 to index\n"
    << "      %e = memref.load " << table << "[%id, %j] : " << matType(c.vocab, E, wt) << "\n";
  std::string e = f.toF32("%e");
  if (opt && !proj)
    e = addPosition(e);
  b << "      memref.store " << e << ", " << gathered << "[%r, %j] : " << rowType(E) << "\n"
    << "      scf.reduce\n    }\n";
  if (proj) {
    emitMatmul(f, gathered, E, projIn, H, nullptr, out, n);
    b << "    scf.parallel (%r, %j) = (" << c0 << ", " << c0 << ") to (" << n << ", " << cH
      << ") step (" << c1 << ", " << c1 << ") {\n"
      << "      %x = memref.load " << out << "[%r, %j] : " << rowType(H) << "\n";
    std::string sum = addPosition("%x");
    b << "      memref.store " << sum << ", " << out << "[%r, %j] : " << rowType(H) << "\n"
      << "      scf.reduce\n    }\n";
  }
  argNames = f.argNames();
  return f.finish();
}

std::string buildLayerPre(const ModelConfig &c, const std::string &wt, const MatmulTuning &tuning,
                          std::vector<std::string> &argNames) {
  FunctionWriter f("layer_pre", wt, tuning);
  LayerNames names = layerNames(c);
  int64_t H = c.hidden, QD = c.qDim(), KD = c.kvDim();
  bool normBias = c.norm == NormKind::kLayer;
  // Post-LN (OPT's do_layer_norm_before false): q/k/v read the residual stream itself; the
  // attention block's norm comes after its residual add (layer_decode/layer_prefill).
  bool preNorm = c.layerNormBefore;
  std::string x = f.arg("x", rowType(H));
  std::string lnW = preNorm ? f.arg("layer:" + names.ln1 + ".weight", vecType(H, wt)) : "";
  std::string lnB =
      preNorm && normBias ? f.arg("layer:" + names.ln1 + ".bias", vecType(H, wt)) : "";
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
  std::string h = x;
  if (preNorm) {
    h = f.alloc(rowType(H), n);
    emitNorm(f, c, x, n, lnW, normBias ? &lnB : nullptr, h);
  }
  std::vector<MatmulOut> qkv;
  for (int i = 0; i < 3; ++i)
    qkv.push_back({proj[i], dims[i], c.qkvBias ? &bias[i] : nullptr, out[i]});
  emitMatmuls(f, h, H, qkv, n);
  if (c.rope)
    emitRope(f, c, out[0], c.qHeads, out[1], c.kvHeads, pos, n);
  argNames = f.argNames();
  return f.finish();
}

std::string splitAttr(bool prefill) {
  return prefill ? "" : ", split = #hg.split<[cpu, gpu], point = runtime, merge = lse, dense>";
}

/// The MLP block on the residual stream |x| [n, hidden], its weights declared as arguments of
/// |f|. Pre-LN: x += mlp(norm2(x)). Post-LN (OPT's do_layer_norm_before false):
/// h = norm1(x), then x = norm2(h + mlp(h)), as in HF's OPTDecoderLayer. |scratch| is an
/// [n, hidden] buffer the block may overwrite (empty: it allocates one).
void emitMlpBlock(FunctionWriter &f, const ModelConfig &c, const std::string &x,
                  const std::string &n, std::string scratch = "") {
  LayerNames names = layerNames(c);
  const std::string &wt = f.weightType();
  int64_t H = c.hidden, I = c.intermediate;
  bool normBias = c.norm == NormKind::kLayer, postNorm = !c.layerNormBefore;
  std::string ln1W = postNorm ? f.arg("layer:" + names.ln1 + ".weight", vecType(H, wt)) : "";
  std::string ln1B =
      postNorm && normBias ? f.arg("layer:" + names.ln1 + ".bias", vecType(H, wt)) : "";
  std::string ln2W = f.arg("layer:" + names.ln2 + ".weight", vecType(H, wt));
  std::string ln2B = normBias ? f.arg("layer:" + names.ln2 + ".bias", vecType(H, wt)) : "";
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
  std::string h = f.alloc(rowType(H), n);
  std::string tmp = scratch.empty() ? f.alloc(rowType(H), n) : scratch;
  if (postNorm)
    emitNorm(f, c, x, n, ln1W, normBias ? &ln1B : nullptr, h);
  else
    emitNorm(f, c, x, n, ln2W, normBias ? &ln2B : nullptr, h);
  std::string mid = f.alloc(rowType(I), n);
  if (c.gatedMlp) {
    std::string g = f.alloc(rowType(I), n);
    emitMatmuls(f, h, H, {{gate, I, nullptr, g}, {up, I, nullptr, mid}}, n);
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
  if (postNorm) {
    emitResidual(f, h, tmp, H);
    emitNorm(f, c, h, n, ln2W, normBias ? &ln2B : nullptr, x);
  } else {
    emitResidual(f, x, tmp, H);
  }
}

/// layer_decode_<kv> / layer_prefill_<kv>: attention, o-proj + residual, then (pre-LN) the MLP
/// block.
std::string buildLayerPost(const ModelConfig &c, const std::string &wt, const std::string &kv,
                           bool prefill, const ModelCompileOptions &opts, const MatmulTuning &tuning,
                           std::vector<std::string> &argNames) {
  FunctionWriter f(std::string(prefill ? "layer_prefill_" : "layer_decode_") + kv, wt, tuning);
  LayerNames names = layerNames(c);
  int64_t H = c.hidden, QD = c.qDim(), D = c.headDim;
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
  // Post-LN layers run their MLP block as layer_mlp: with the attention block's norm after
  // its residual, one function would take more memrefs than compiled functions may (16).
  if (c.layerNormBefore)
    emitMlpBlock(f, c, x, n, tmp);
  argNames = f.argNames();
  return f.finish();
}

/// layer_mlp (post-LN architectures only): the MLP block of one layer, after layer_decode/
/// layer_prefill has added the attention output to the residual stream.
std::string buildLayerMlp(const ModelConfig &c, const std::string &wt, const MatmulTuning &tuning,
                          std::vector<std::string> &argNames) {
  FunctionWriter f("layer_mlp", wt, tuning);
  std::string x = f.arg("x", rowType(c.hidden));
  std::string n = dimOf(f, x, rowType(c.hidden), 0);
  emitMlpBlock(f, c, x, n);
  argNames = f.argNames();
  return f.finish();
}

/// The final norm (when the architecture has one), OPT's project_out, and the head.
std::string buildFinal(const ModelConfig &c, const std::string &wt, const MatmulTuning &tuning,
                       std::vector<std::string> &argNames) {
  FunctionWriter f("final", wt, tuning);
  int64_t H = c.hidden, E = c.embedDim;
  bool opt = c.family == Family::kOpt, proj = c.projectsEmbeddings();
  std::string normName = opt ? "model.decoder.final_layer_norm" : "model.norm";
  std::string x = f.arg("x", rowType(H));
  std::string w, nb, projOut;
  if (c.finalNorm) {
    w = f.arg("tensor:" + normName + ".weight", vecType(H, wt));
    if (c.norm == NormKind::kLayer)
      nb = f.arg("tensor:" + normName + ".bias", vecType(H, wt));
  }
  if (proj)
    projOut = f.arg("tensor:model.decoder.project_out.weight", matType(E, H, wt));
  std::string head = f.arg(c.tiedEmbeddings ? "tensor:" + prefix(c) + "embed_tokens.weight"
                                            : std::string("tensor:lm_head.weight"),
                           matType(c.vocab, E, wt));
  std::string logits = f.arg("logits", rowType(c.vocab));
  std::string n = dimOf(f, x, rowType(H), 0);
  std::string src = x;
  if (c.finalNorm) {
    src = f.alloc(rowType(H), n);
    emitNorm(f, c, x, n, w, nb.empty() ? nullptr : &nb, src);
  }
  if (proj) {
    std::string narrowed = f.alloc(rowType(E), n);
    emitMatmul(f, src, H, projOut, E, nullptr, narrowed, n);
    src = narrowed;
  }
  emitMatmul(f, src, E, head, c.vocab, nullptr, logits, n);
  argNames = f.argNames();
  return f.finish();
}

} // namespace

int64_t matmulRowPrefetchBytes(const ModelCompileOptions &options) {
  int64_t bytes = options.matmulRowPrefetchBytes;
  if (bytes < -1 || bytes > kMaxMatmulRowPrefetchBytes)
    throw driver::ArgumentError("matmul row prefetch must be -1 (the target's), 0 (off) or up to " +
                                std::to_string(kMaxMatmulRowPrefetchBytes) + " bytes, got " +
                                std::to_string(bytes));
  if (bytes >= 0)
    return bytes;
  const std::string &cpu = options.compile.targetCpu;
  std::string name = cpu.empty() || cpu == "host" ? llvm::sys::getHostCPUName().str() : cpu;
  llvm::StringRef n(name);
  bool generic = n.starts_with("x86-64") || n == "generic" || n.starts_with("i386") ||
                 n.starts_with("i486") || n.starts_with("i586") || n.starts_with("i686");
  bool amd = n.starts_with("znver") || n.starts_with("bdver") || n.starts_with("btver") ||
             n.starts_with("amdfam") || n.starts_with("k8") || n.starts_with("athlon") ||
             n.starts_with("opteron") || n == "barcelona" || n.starts_with("k6");
  return generic || amd ? 0 : 4096;
}

int64_t matmulSideBySideRows(const ModelCompileOptions &options, int64_t rowPrefetchBytes) {
  int64_t rows = options.matmulSideBySideRows;
  if (rows != -1 && rows != 0 && rows != 2 && rows != 4 && rows != 8 && rows != 16)
    throw driver::ArgumentError("matmul side-by-side rows must be -1 (the target's), 0 (off), 2, "
                                "4, 8 or 16, got " + std::to_string(rows));
  if (rows >= 0)
    return rows;
  if (rowPrefetchBytes > 0)
    return 0;
  return driver::targetVectorBits(options.compile) >= 512 ? 8 : 4;
}

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
  MatmulTuning tuning;
  tuning.rowPrefetchBytes = matmulRowPrefetchBytes(opts);
  tuning.sideBySideRows = matmulSideBySideRows(opts, tuning.rowPrefetchBytes);
  os << buildEmbed(c, wt, tuning, names);
  m.functionArguments["embed"] = names;
  os << buildLayerPre(c, wt, tuning, names);
  m.functionArguments["layer_pre"] = names;
  for (const std::string &kv : opts.kvDtypes) {
    os << buildLayerPost(c, wt, kv, false, opts, tuning, names);
    m.functionArguments["layer_decode_" + kv] = names;
    if (opts.prefill) {
      os << buildLayerPost(c, wt, kv, true, opts, tuning, names);
      m.functionArguments["layer_prefill_" + kv] = names;
    }
  }
  if (!c.layerNormBefore) {
    os << buildLayerMlp(c, wt, tuning, names);
    m.functionArguments["layer_mlp"] = names;
  }
  os << buildFinal(c, wt, tuning, names);
  m.functionArguments["final"] = names;
  os << "}\n";
  m.mlir = os.str();
  m.matmulRowPrefetchBytes = tuning.rowPrefetchBytes;
  m.matmulSideBySideRows = tuning.sideBySideRows;
  return m;
}

} // namespace hybridgen::models
