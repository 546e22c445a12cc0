//===- ModelModule.h - MLIR of a decoder model, and its ahead-of-time artifact -*- C++ -*-===//
//
// One module per architecture shape: every layer runs the same functions and takes its weights as
// memref arguments, so a 32-layer model compiles as fast as a 1-layer one. The runtime owns every
// KV write (the pool decides the tier), so a layer is two calls around the pool append:
//
//   embed(ids, table, [positions, position_table], [project_in], out)      token rows -> x
//   layer_pre(x, weights..., positions, q, k, v)          norm, projections, biases, RoPE
//   [the runner writes k, v of the new tokens into the pool]
//   layer_decode_<kv>(x, q, k_pool, v_pool, table, lens, layer, weights...)   x updated in place:
//       attention in `hg.segment dynamic(layer)` with a runtime #hg.split, o-proj, residual, MLP
//   layer_prefill_<kv>(...)   the same over a chunk of T tokens per sequence (hg.prefill_attention)
//   layer_mlp(x, weights...)  post-LN models only (OPT's do_layer_norm_before false): their MLP
//       block with both norms, which layer_decode/layer_prefill then leave out
//   final(x, [norm weights...], [project_out], lm_head, logits)
//
// Every function's arguments are listed by name in the artifact's metadata (functionArguments), so
// the runner builds its calls from data instead of repeating this file's order.
//
//===----------------------------------------------------------------------===//
#ifndef HYBRIDGEN_MODELS_MODELMODULE_H
#define HYBRIDGEN_MODELS_MODELMODULE_H

#include "hybridgen/Driver/Driver.h"
#include "hybridgen/runtime/model/config.h"

#include <map>
#include <string>
#include <vector>

namespace hybridgen::models {

struct ModelCompileOptions {
  /// The weights' element type as compiled: f32 | bf16 | f16, or "auto" (compileModelDir: the
  /// checkpoint's own, so nothing is converted at load).
  std::string weightDtype = "auto";
  std::vector<std::string> kvDtypes = {"f32", "bf16"}; // one decode/prefill pair per KV dtype
  int64_t blockSize = 16;                       // tokens per KV pool block
  /// Attention in `hg.segment dynamic(%layer)` (one scheduler segment per layer); false emits
  /// `hg.segment 0` for every layer (for dialects without dynamic segments).
  bool dynamicSegments = true;
  /// Emit hg.prefill_attention (chunked prefill); false leaves the prefill functions out.
  bool prefill = true;
  /// The runner's KV pool stores each K piece transposed and the kernels read it so
  /// (driver::CompileOptions::kTransposed): compileModelDir sets compile.kTransposed from this,
  /// except with GPU kernels, which read K row-major. On by default:
  /// the pool is the runner's own, and the transposed logits measured faster (docs/models.md).
  bool kTransposed = true;
  /// How far ahead (bytes) decode's matrix-vector rows prefetch their weights into L2: 0 = not
  /// at all, -1 = the target CPU's (matmulRowPrefetchBytes).
  int64_t matmulRowPrefetchBytes = -1;
  /// How many output rows decode's matrix-vector products read side by side where an input row
  /// does not fit L1 (more than kSideBySideMinCols columns): 0 = one row after the other, -1 =
  /// the target's (matmulSideBySideRows).
  int64_t matmulSideBySideRows = -1;
  driver::CompileOptions compile;
};

/// Input rows wider than this many f32 (16 KiB) take the side-by-side rows of
/// matmulSideBySideRows in decode.
constexpr int64_t kSideBySideMinCols = 4096;

/// The largest matmulRowPrefetchBytes accepted.
constexpr int64_t kMaxMatmulRowPrefetchBytes = int64_t(1) << 20;

/// options.matmulRowPrefetchBytes resolved: -1 becomes 4096 for Intel CPUs (by the name of
/// options.compile.targetCpu, or of the host's for "" / "host"), where one row stream read
/// 0.59-0.64 of the roof without it and 0.88-0.93 with it, and 0 for AMD CPUs (Zen 4 read it
/// slower) and generic targets (x86-64-v*: not measured). Throws driver::ArgumentError outside
/// [-1, kMaxMatmulRowPrefetchBytes].
int64_t matmulRowPrefetchBytes(const ModelCompileOptions &options);

/// options.matmulSideBySideRows resolved: -1 becomes 0 where the row prefetch applies (Intel:
/// one prefetched stream measured near the roof there), else 8 on AVX-512 targets and 4 on
/// narrower ones (16 registers). Why: decode reads one weight row after the other against the
/// input row x, which comes from L1 only while it fits; wider x (Llama-3-8B's down projection:
/// 14336 f32, 56 KiB) is read again from L2 for every output row, and on AMD Zen 4 one row at a
/// time then read 0.39 of the roof, 8 rows side by side (x loaded once per 8 rows) 0.82
/// (docs/models.md, "Wide input rows"). Throws driver::ArgumentError for other than -1, 0, 2,
/// 4, 8 or 16.
int64_t matmulSideBySideRows(const ModelCompileOptions &options, int64_t rowPrefetchBytes);

/// The generated module: MLIR text, and each function's arguments by name. Names are a runtime
/// buffer ("x", "q", "k_pool", ...), "layer:<suffix>" (tensor model.layers.<i>.<suffix> of the
/// layer being run) or "tensor:<name>" (a whole-model tensor).
struct ModelModule {
  std::string mlir;
  std::map<std::string, std::vector<std::string>> functionArguments;
  /// The matmul walk the module was generated with, resolved for the target
  /// (matmulRowPrefetchBytes, matmulSideBySideRows).
  int64_t matmulRowPrefetchBytes = 0;
  int64_t matmulSideBySideRows = 0;
};

/// Throws driver::ArgumentError for options the generator does not support.
ModelModule buildModelModule(const rt::model::ModelConfig &config,
                             const ModelCompileOptions &options);

/// hybridgen-compile's model mode: reads |modelDir|/config.json, generates and compiles the module
/// into |artifactDir|/model.so (+ .sig) and writes |artifactDir|/metadata.json (format in
/// docs/models.md). Throws driver::CompileError / ArgumentError. Returns the compile seconds.
double compileModelDir(const std::string &modelDir, const std::string &artifactDir,
                       const ModelCompileOptions &options);

/// The artifact of |modelDir| for users who pass a model dir where an artifact is expected
/// (hybridgen-run, hybridgen.Model): |artifactDir| (empty: a directory under $TMPDIR named after
/// the model's absolute path) is (re)compiled when it is missing, older than the config.json or
/// written by another generator version.
/// Returns the artifact dir; sets |*compiled| when it compiled.
std::string ensureArtifact(const std::string &modelDir, std::string artifactDir,
                           const ModelCompileOptions &options, bool *compiled = nullptr);

} // namespace hybridgen::models

#endif // HYBRIDGEN_MODELS_MODELMODULE_H
