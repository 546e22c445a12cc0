// ModelRunner: runs a compiled model artifact (hybridgen-compile <model dir> -o <artifact>) with
// the runtime only (no MLIR): copies the weights into huge-page memory (or maps them), owns the KV pool and the split scheduler, and runs
// chunked prefill and greedy decode for a batch of sequences.
#pragma once

#include "hybridgen/runtime/model/config.h"
#include "hybridgen/runtime/model/sampler.h"
#include "hybridgen/runtime/status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hybridgen::rt::model {

struct RunnerOptions {
  /// "feedback" (default), "static:S" (S tokens of each sequence on the CPU side) or "cpu".
  std::string policy = "feedback";
  int32_t batch = 1;
  /// Tokens per sequence the KV pool is sized for (prompt + generated).
  int64_t maxContext = 4096;
  /// KV pool element type; empty = the artifact's first ("f32" in a default artifact).
  std::string kvDtype;
  /// OpenMP threads for compiled code (0: libomp's default).
  int32_t threads = 0;
  /// Weights (a directory, .safetensors or index .json); empty = the model dir the artifact was
  /// compiled from (metadata.json "weights").
  std::string weightsPath;
  /// Tokens per prefill chunk; a longer prompt runs as several chunks over the growing cache.
  int64_t prefillChunk = 512;
  /// Run on the checkpoint file's own mapping (no copy, pages shared with the page cache) instead of
  /// copying the weights into fresh huge-page memory at open. The copy costs a read of the file and
  /// its size in memory; decode reads the page cache's scattered pages at about half the rate
  /// (docs/models.md, "Weight memory").
  bool mapWeights = false;
  /// HBM budget of the GPU side, tokens per sequence and layer (0: unlimited). With an artifact
  /// compiled with GPU kernels (hybridgen-compile --gpu), a usable CUDA device and no tier config
  /// in the environment (HYBRIDGEN_TIERS / _FILE), a budget > 0 puts that many tokens' KV in the
  /// device's memory (an HBM tier) and the kernels run there, timed by CUDA events; otherwise the
  /// GPU partial runs on the CPU and its time is modelled (H200 figures).
  int64_t gpuTokens = 0;
};

/// Cumulative counters since open (or the last reset()).
struct RunnerStats {
  int64_t prefillTokens = 0; // summed over the batch
  /// Of those, the tokens copied rather than computed: a batch whose sequences held the same
  /// tokens and got the same prompt ran it once (ModelRunner::prefill).
  int64_t prefillSharedTokens = 0;
  double prefillSeconds = 0;
  int64_t decodeTokens = 0;  // summed over the batch
  double decodeSeconds = 0;
  int64_t decodeSteps = 0;
  std::vector<int64_t> splitPerLayer; // the last split the scheduler chose, per layer
  std::vector<std::string> tierNames;
  std::vector<int64_t> tierUsedBlocks, tierCapacityBlocks;
  int64_t migrations = 0;
  std::string policy;
  /// Where the GPU side ran: "cuda: <device>" (kernels on the device, CUDA-event times) or
  /// "modelled" (on the CPU, time from H200 figures).
  std::string gpuSide = "modelled";
  /// The KV pool's host memory written at open (every block batch x maxContext can use), and how
  /// long that took: page faults kept out of the prefill's time.
  uint64_t kvCommittedBytes = 0;
  double kvCommitSeconds = 0;
  double prefillTokensPerSecond() const { return prefillSeconds > 0 ? prefillTokens / prefillSeconds : 0; }
  double decodeTokensPerSecond() const { return decodeSeconds > 0 ? decodeTokens / decodeSeconds : 0; }
};

/// (tokens done, tokens total) during a long prefill.
using ProgressFn = std::function<void(int64_t done, int64_t total)>;
/// Called after each decode step with one new token per sequence.
using TokenFn = std::function<void(const std::vector<int32_t> &tokens)>;

class ModelRunner {
public:
  /// Opens |artifactDir| (metadata.json, model.so): a clear Status when a file is missing, the
  /// weights disagree with the config (naming the file and the tensor) or an option is bad.
  static Result<std::unique_ptr<ModelRunner>> open(const std::string &artifactDir,
                                                   const RunnerOptions &options = {});
  ~ModelRunner();
  ModelRunner(const ModelRunner &) = delete;
  ModelRunner &operator=(const ModelRunner &) = delete;

  const ModelConfig &config() const;
  /// The Hugging Face config.json the artifact was compiled from, as JSON text.
  const std::string &configJson() const;
  int32_t batch() const;
  const std::string &kvDtype() const;

  /// Drops every sequence's KV (and the statistics).
  Status reset();
  /// Keeps the first |length| tokens of every sequence's KV and drops the rest, so that a shared
  /// prefix (a chat's history, a long document asked several questions) is not prefilled again.
  /// Every sequence must hold at least |length| tokens; otherwise an error and nothing changes.
  Status truncate(int64_t length);
  /// Appends |T| tokens to every sequence (|ids| is [batch][T]) and fills |logits| with
  /// [batch][vocab] for the last token (or [batch][T][vocab] with |allLogits|).
  Status prefill(const int32_t *ids, int64_t T, bool allLogits, std::vector<float> &logits,
                 const ProgressFn &progress = {});
  /// One new token per sequence (|ids| is [batch]); |logits| becomes [batch][vocab].
  Status decode(const int32_t *ids, std::vector<float> &logits);
  /// Prefills |ids| ([batch][T]), then |maxNewTokens| tokens per sequence, each picked by
  /// |sampling| (greedy by default; the prompt counts for its repetition penalty).
  Result<std::vector<std::vector<int32_t>>> generate(const int32_t *ids, int64_t T,
                                                     int64_t maxNewTokens,
                                                     const SamplingOptions &sampling = {},
                                                     const TokenFn &onToken = {},
                                                     const ProgressFn &progress = {});
  /// Benchmarking only: appends |tokens| tokens of random K/V (every layer) to every sequence,
  /// without running the model, so decode can be timed at long contexts without a long prefill.
  /// Whatever decode then produces is not text.
  Status fillSyntheticKv(int64_t tokens, uint64_t seed = 1);
  /// Bytes of weights one decode step reads (every layer's, OPT's project_in and the final ones;
  /// the embedding gather's few rows not counted unless the table is also the tied lm_head).
  uint64_t weightBytesPerStep() const;
  /// Bytes of K and V one decode step reads at the current lengths (every sequence and layer).
  uint64_t kvBytesPerStep() const;
  /// Tokens in each sequence's cache.
  std::vector<int64_t> sequenceLengths() const;
  RunnerStats stats() const;
  /// The scheduler's per-segment trace as CSV (one row per layer and decode step).
  std::string traceCsv() const;

  struct Impl;

private:
  explicit ModelRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace hybridgen::rt::model
