//===- ModelCompiler.cpp - model dir -> artifact dir (model.so, .sig, metadata.json) --------===//
#include "hybridgen/Models/ModelModule.h"
#include "hybridgen/runtime/safetensors.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace hybridgen::models {
namespace {

/// "auto": the element type the checkpoint in |modelDir| stores its embedding in (so bf16 weights
/// are compiled as bf16: the same values, half the bytes per token), else config.json's
/// torch_dtype, else f32.
std::string resolveWeightDtype(const std::string &requested, const std::string &modelDir,
                               const nlohmann::json &config) {
  if (requested != "auto")
    return requested;
  auto fromName = [](const std::string &n) -> std::string {
    if (n == "BF16" || n == "bfloat16")
      return "bf16";
    if (n == "F16" || n == "float16")
      return "f16";
    return "f32";
  };
  rt::Result<std::unique_ptr<rt::Checkpoint>> ckpt = rt::Checkpoint::open(modelDir);
  if (ckpt)
    for (const std::string &name : (*ckpt)->names())
      if (name.size() >= 19 && name.compare(name.size() - 19, 19, "embed_tokens.weight") == 0)
        return fromName((*ckpt)->find(name)->dtypeName);
  for (const char *key : {"torch_dtype", "dtype"})
    if (config.contains(key) && config[key].is_string())
      return fromName(config[key].get<std::string>());
  return "f32";
}

/// Bumped whenever the generated functions' arguments or the metadata change, so cached artifacts
/// of an older compiler are rebuilt rather than misread, and when the generated code gets faster,
/// so that they are rebuilt rather than kept slow (3: the matmul's weight prefetch; 4: vector
/// softmax statistics for GQA groups that are not a power of two, e.g. SmolLM2, and the f32
/// kernel's paced prefetches on every target; 5: K stored transposed in the runner's pool; 6: the
/// far prefetch of transposed K on every target, decode's matmul rows prefetched on Intel; 7: q/k/v
/// and gate/up in one parallel loop each, RoPE's angles shared by the heads; 8: the bf16 dot
/// products on transposed K; 9: decode's matmuls with wide input rows read 8 (AVX-512) or 4
/// output rows side by side outside Intel; 10: transposed K's prefetches spread over the piece on
/// Zen 4, and with bf16_dot_rounded the logits' dot products on q rounded once; 11: transposed
/// K's far prefetch asks for V only for pieces under 4 KiB; 12: the first token group of wide-row
/// matmul tiles prefetches its weight rows on Intel; 13: the matmuls take token rows in chunks
/// whose inputs stay in L2; 14: on AVX-512 targets but Zen 4, each piece's logits overlapped with
/// the previous piece's p.V; 15: on AVX2 targets too, for f32 KV; 16: bf16 V widened by 16-element
/// halves in the overlapped kernel; 17: on AVX2 targets 16-bit KV overlapped too, the logits in
/// passes over the heads; 18: on AVX2 targets 16-bit KV addressed as offsets in flat pieces, and
/// on Zen 4 f32 KV planned as on AVX2 with the pieces overlapped; 19: on Zen 4 the spread 16-bit
/// kernel's p.V in 64-column tiles over 4 rows per iteration; 20: on Zen 5 f32 KV planned as on
/// AVX2 with the pieces overlapped, as on Zen 4).
constexpr int kGeneratorVersion = 20;

/// Whether the artifact's kernels read K transposed (see ModelCompileOptions::kTransposed): not
/// with GPU kernels, which read K row-major.
bool effectiveKTransposed(const ModelCompileOptions &options) {
  const driver::CompileOptions &c = options.compile;
  return options.kTransposed && !c.gpuKernels;
}

/// Whether |metaPath| was written by this generator version with the same attention arithmetic.
bool sameBuild(const std::filesystem::path &metaPath, const ModelCompileOptions &options) {
  std::ifstream in(metaPath);
  nlohmann::json meta = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return !meta.is_discarded() && meta.is_object() &&
         meta.value("generator", 0) == kGeneratorVersion &&
         meta.value("bf16_dot_rounded", false) == options.compile.bf16DotRounded &&
         meta.value("k_transposed", false) == effectiveKTransposed(options) &&
         meta.value("gpu_kernels", false) == options.compile.gpuKernels;
}

} // namespace

double compileModelDir(const std::string &modelDir, const std::string &artifactDir,
                       const ModelCompileOptions &options) {
  namespace fs = std::filesystem;
  std::string configPath = (fs::path(modelDir) / "config.json").string();
  std::ifstream in(configPath);
  if (!in)
    throw driver::ArgumentError("cannot read " + configPath + " (is " + modelDir +
                                " a Hugging Face model directory?)");
  std::stringstream text;
  text << in.rdbuf();
  rt::Result<rt::model::ModelConfig> config = rt::model::parseModelConfig(text.str(), configPath);
  if (!config)
    throw driver::ArgumentError(config.status().message());

  auto start = std::chrono::steady_clock::now();
  ModelCompileOptions resolved = options;
  resolved.weightDtype =
      resolveWeightDtype(options.weightDtype, modelDir, nlohmann::json::parse(text.str()));
  ModelModule module = buildModelModule(*config, resolved);
  std::error_code ec;
  fs::create_directories(artifactDir, ec);
  if (ec)
    throw driver::CompileError("cannot create " + artifactDir + ": " + ec.message());
  driver::CompileOptions compile = options.compile;
  compile.sourceName = configPath + " (generated model module)";
  compile.kTransposed = effectiveKTransposed(options);
  std::string libPath = (fs::path(artifactDir) / "model.so").string();
  driver::compileToSharedLibrary(module.mlir, libPath, compile);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  nlohmann::json meta;
  meta["format"] = "hybridgen-model";
  meta["version"] = 1;
  meta["generator"] = kGeneratorVersion;
  meta["library"] = "model.so";
  meta["weights"] = fs::absolute(modelDir).lexically_normal().string();
  meta["weight_dtype"] = resolved.weightDtype;
  meta["kv_dtypes"] = options.kvDtypes;
  meta["block_size"] = options.blockSize;
  meta["prefill"] = options.prefill;
  meta["dynamic_segments"] = options.dynamicSegments;
  meta["target_cpu"] = compile.targetCpu;
  // Asked for; the kernels take it where the target has AVX512-BF16 (docs/models.md).
  meta["bf16_dot_rounded"] = compile.bf16DotRounded;
  // The runner's pool stores K pieces [head_dim][block_size] when this is true.
  meta["k_transposed"] = compile.kTransposed;
  // The attention's GPU partial is CUDA kernels (runnable on a device HBM tier by the runner).
  meta["gpu_kernels"] = compile.gpuKernels;
  // How decode's matrix-vector products walk the weights (docs/models.md, "Matmul prefetch"
  // and "Wide input rows").
  meta["matmul_row_prefetch_bytes"] = module.matmulRowPrefetchBytes;
  meta["matmul_side_by_side_rows"] = module.matmulSideBySideRows;
  meta["compile_seconds"] = seconds;
  meta["config"] = nlohmann::json::parse(text.str());
  meta["functions"] = module.functionArguments;
  std::ofstream out(fs::path(artifactDir) / "metadata.json");
  out << meta.dump(2) << "\n";
  if (!out)
    throw driver::CompileError("cannot write " + artifactDir + "/metadata.json");
  // The MLIR next to the library: what was compiled, for people and for lit.
  std::ofstream(fs::path(artifactDir) / "model.mlir") << module.mlir;
  return seconds;
}

std::string ensureArtifact(const std::string &modelDir, std::string artifactDir,
                           const ModelCompileOptions &options, bool *compiled) {
  namespace fs = std::filesystem;
  if (compiled)
    *compiled = false;
  fs::path config = fs::path(modelDir) / "config.json";
  if (artifactDir.empty()) {
    std::string key = fs::absolute(modelDir).lexically_normal().string();
    for (char &ch : key)
      if (!std::isalnum(static_cast<unsigned char>(ch)))
        ch = '_';
    key += "_w" + options.weightDtype;
    for (const std::string &kv : options.kvDtypes)
      key += "_" + kv;
    if (options.compile.bf16DotRounded)
      key += "_dr";
    if (!effectiveKTransposed(options))
      key += "_krows";
    artifactDir = (fs::temp_directory_path() / "hybridgen-artifacts" / key).string();
  }
  fs::path meta = fs::path(artifactDir) / "metadata.json";
  std::error_code ec1, ec2;
  bool fresh = fs::exists(meta) && fs::exists(fs::path(artifactDir) / "model.so") &&
               fs::last_write_time(meta, ec1) >= fs::last_write_time(config, ec2) && !ec1 && !ec2 &&
               sameBuild(meta, options);
  if (!fresh) {
    compileModelDir(modelDir, artifactDir, options);
    if (compiled)
      *compiled = true;
  }
  return artifactDir;
}

} // namespace hybridgen::models
