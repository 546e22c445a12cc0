// Sampler: picks each sequence's next token from the model's logits: greedy (argmax), or a seeded
// draw after temperature, top-k, top-p (nucleus) and min-p, with Hugging Face's repetition
// penalty. One implementation for hybridgen-run, ModelRunner::generate and Python's
// hybridgen.Model (docs/models.md, "Sampling").
#pragma once

#include "hybridgen/runtime/status.h"

#include <cstdint>
#include <random>
#include <unordered_set>
#include <utility>
#include <vector>

namespace hybridgen::rt::model {

struct SamplingOptions {
  /// 0: greedy (the first of the largest logits); > 0: draw from softmax(logits / temperature).
  double temperature = 0;
  /// Draw among the k largest logits only (0: all). Ignored when greedy.
  int64_t topK = 0;
  /// Nucleus: draw among the most likely tokens whose probabilities first sum to >= topP, in (0, 1].
  double topP = 1;
  /// Drop tokens less likely than minP x the most likely one's probability, in [0, 1].
  double minP = 0;
  /// Hugging Face's: a token already in the sequence (prompt or generated) has its logit divided
  /// by this when positive, multiplied when negative; 1 is off. Applies when greedy too.
  double repetitionPenalty = 1;
  /// Sequence b draws from its own stream, seeded by (seed, b): runs repeat exactly.
  uint64_t seed = 0;

  bool greedy() const { return temperature == 0; }
  /// Names the first option out of range (NaN included).
  Status validate() const;
};

class Sampler {
public:
  /// A sampler for |batch| sequences over |vocab| logits each; invalid options are an error.
  static Result<Sampler> create(const SamplingOptions &options, int64_t batch, int64_t vocab);

  /// Adds |n| tokens (the prompt) to sequence |seq|'s history, which the repetition penalty reads.
  Status observe(int64_t seq, const int32_t *ids, int64_t n);
  /// One token per sequence from |logits| ([batch][vocab]); each joins its sequence's history. A
  /// NaN or +inf logit, or a row with no finite logit, is an error naming the sequence.
  Result<std::vector<int32_t>> next(const float *logits);
  /// The tokens a draw for sequence |seq| from its logits |row| ([vocab]) can reach, in id order,
  /// with their probabilities (greedy: the one token it picks, 1). Draws nothing, records nothing.
  Result<std::vector<std::pair<int32_t, double>>> distribution(int64_t seq, const float *row);

  const SamplingOptions &options() const { return options_; }
  int64_t batch() const { return batch_; }
  int64_t vocab() const { return vocab_; }

private:
  Sampler(const SamplingOptions &options, int64_t batch, int64_t vocab);
  /// Leaves in order_ the tokens a draw can reach (id order), in scratch_ their weights; returns
  /// the weights' sum.
  Result<double> filter(int64_t seq, const float *row);
  Result<int32_t> pick(int64_t seq, const float *row);

  SamplingOptions options_;
  int64_t batch_ = 0, vocab_ = 0;
  std::vector<std::mt19937_64> streams_;
  std::vector<std::unordered_set<int32_t>> seen_;
  std::vector<double> scratch_;    // the row's adjusted logits
  std::vector<int32_t> order_;     // candidate token ids, in id order
  std::vector<int32_t> work_;      // a copy that selection reorders
};

} // namespace hybridgen::rt::model
