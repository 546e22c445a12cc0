// ModelConfig: the decoder shape read from a Hugging Face config.json. The compiler (lib/Models)
// and the runner both read it through this one parser, so they can never disagree on a field.
#pragma once

#include "hybridgen/runtime/status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hybridgen::rt::model {

/// The architecture families the compiler emits code for.
enum class Family { kLlama, kOpt };

enum class NormKind { kRms, kLayer };
enum class Activation { kSilu, kRelu };

struct ModelConfig {
  std::string architecture; // e.g. "LlamaForCausalLM"
  std::string modelType;    // e.g. "llama"
  Family family = Family::kLlama;
  int64_t hidden = 0;       // hidden_size
  int64_t intermediate = 0; // intermediate_size (OPT: ffn_dim)
  int64_t layers = 0;       // num_hidden_layers
  int64_t qHeads = 0;       // num_attention_heads
  int64_t kvHeads = 0;      // num_key_value_heads (MHA: = qHeads)
  int64_t headDim = 0;      // head_dim, default hidden / heads
  int64_t vocab = 0;        // vocab_size
  int64_t maxPositions = 0; // max_position_embeddings
  double normEps = 1e-5;    // rms_norm_eps (Llama family); 1e-5 for OPT's LayerNorm
  NormKind norm = NormKind::kRms;
  Activation activation = Activation::kSilu;
  bool gatedMlp = true;     // SwiGLU (gate, up, down) vs fc1/fc2
  bool qkvBias = false;     // Qwen2, OPT
  bool denseBias = false;   // OPT: o-proj and MLP biases too (and LayerNorm biases)
  bool tiedEmbeddings = false;
  bool layerNormBefore = true; // OPT's do_layer_norm_before (false: post-LN, as opt-350m)
  /// The decoder's norm before the head: the Llama family always; OPT only when pre-LN and not
  /// _remove_final_layer_norm (HF's OPTDecoder builds none otherwise).
  bool finalNorm = true;
  /// Width of the token embedding and the head's input: hidden_size, except OPT's
  /// word_embed_proj_dim, which adds project_in [hidden, dim] after the embedding and
  /// project_out [dim, hidden] before the head (no biases).
  int64_t embedDim = 0;
  int64_t positionOffset = 0;  // OPT's learned positions start at row 2
  bool rope = true;            // Llama family; OPT has learned positions
  std::optional<int64_t> slidingWindow; // Mistral
  /// Per-pair RoPE inverse frequencies (head_dim / 2 of them), rope_theta and rope_scaling
  /// (llama3, linear) already applied.
  std::vector<double> invFreq;
  std::string ropeScaling = "none"; // "none", "llama3", "linear"

  int64_t qDim() const { return qHeads * headDim; }
  int64_t kvDim() const { return kvHeads * headDim; }
  bool projectsEmbeddings() const { return embedDim != hidden; }
};

/// Parses the text of a config.json. An unsupported architecture or option, a missing or
/// ill-typed field: an invalid-argument Status naming |source| and the field.
Result<ModelConfig> parseModelConfig(const std::string &jsonText,
                                     const std::string &source = "config.json");
/// Reads and parses |path| (a config.json file).
Result<ModelConfig> loadModelConfig(const std::string &path);

} // namespace hybridgen::rt::model
