// Hugging Face config.json -> ModelConfig (nlohmann-json). Every rejection names the field.
#include "hybridgen/runtime/model/config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>

namespace hybridgen::rt::model {
namespace {

using nlohmann::json;

/// Reads fields of one JSON object; the first problem is kept and names |source| and the field.
class Fields {
public:
  Fields(const json &j, std::string source) : j_(j), source_(std::move(source)) {}

  bool has(const char *name) const { return j_.contains(name) && !j_.at(name).is_null(); }

  int64_t integer(const char *name, std::optional<int64_t> fallback = std::nullopt) {
    if (!has(name)) {
      if (!fallback)
        fail(name, "is missing");
      return fallback.value_or(0);
    }
    const json &v = j_.at(name);
    if (!v.is_number_integer()) {
      fail(name, "must be an integer, got " + v.dump());
      return 0;
    }
    return v.get<int64_t>();
  }
  int64_t positive(const char *name, std::optional<int64_t> fallback = std::nullopt) {
    int64_t v = integer(name, fallback);
    if (ok() && v <= 0)
      fail(name, "must be positive, got " + std::to_string(v));
    return v;
  }
  double number(const char *name, double fallback) {
    if (!has(name))
      return fallback;
    const json &v = j_.at(name);
    if (!v.is_number()) {
      fail(name, "must be a number, got " + v.dump());
      return fallback;
    }
    return v.get<double>();
  }
  bool boolean(const char *name, bool fallback) {
    if (!has(name))
      return fallback;
    const json &v = j_.at(name);
    if (!v.is_boolean()) {
      fail(name, "must be true or false, got " + v.dump());
      return fallback;
    }
    return v.get<bool>();
  }
  std::string string(const char *name, const std::string &fallback) {
    if (!has(name))
      return fallback;
    const json &v = j_.at(name);
    if (!v.is_string()) {
      fail(name, "must be a string, got " + v.dump());
      return fallback;
    }
    return v.get<std::string>();
  }

  void fail(const std::string &field, const std::string &why) {
    if (status_.isOk())
      status_ = invalidArgument(source_ + ": field '" + prefix_ + field + "' " + why);
  }
  void setPrefix(std::string p) { prefix_ = std::move(p); }
  bool ok() const { return status_.isOk(); }
  const Status &status() const { return status_; }

private:
  const json &j_;
  std::string source_, prefix_;
  Status status_;
};

/// inv_freq[i] = theta^(-2i/d), then rope_scaling applied as in the Llama 3 / linear definitions.
void ropeFrequencies(const json &root, Fields &f, ModelConfig &c) {
  double theta = f.number("rope_theta", 10000.0);
  if (f.ok() && !(theta > 1.0))
    f.fail("rope_theta", "must be > 1");
  c.invFreq.resize(size_t(c.headDim / 2));
  for (int64_t i = 0; i < c.headDim / 2; ++i)
    c.invFreq[size_t(i)] = 1.0 / std::pow(theta, double(2 * i) / double(c.headDim));
  if (!f.has("rope_scaling"))
    return;
  const json &rs = root.at("rope_scaling");
  if (!rs.is_object()) {
    f.fail("rope_scaling", "must be an object or null");
    return;
  }
  Fields s(rs, "");
  std::string type = s.string("rope_type", s.string("type", ""));
  double factor = s.number("factor", 1.0);
  if (!s.ok() || !(factor > 0)) {
    f.fail("rope_scaling.factor", "must be a positive number");
    return;
  }
  if (type == "linear") {
    c.ropeScaling = "linear";
    for (double &x : c.invFreq)
      x /= factor;
  } else if (type == "llama3") {
    c.ropeScaling = "llama3";
    double low = s.number("low_freq_factor", 1.0), high = s.number("high_freq_factor", 4.0);
    double original = s.number("original_max_position_embeddings", 8192.0);
    if (!(high > low) || !(low > 0) || !(original > 0)) {
      f.fail("rope_scaling", "llama3 needs 0 < low_freq_factor < high_freq_factor and a "
                             "positive original_max_position_embeddings");
      return;
    }
    double lowWavelen = original / low, highWavelen = original / high;
    for (double &x : c.invFreq) {
      double wavelen = 2.0 * M_PI / x;
      if (wavelen < highWavelen)
        continue;
      if (wavelen > lowWavelen) {
        x /= factor;
        continue;
      }
      double smooth = (original / wavelen - low) / (high - low);
      x = (1.0 - smooth) * x / factor + smooth * x;
    }
  } else if (type == "default" || type.empty()) {
    // "default" means no scaling.
  } else {
    f.fail("rope_scaling.rope_type", "'" + type + "' is not supported (llama3, linear)");
  }
}

Result<ModelConfig> parseJson(const json &root, const std::string &source) {
  if (!root.is_object())
    return invalidArgument(source + ": expected a JSON object");
  Fields f(root, source);
  ModelConfig c;
  if (root.contains("architectures") && root["architectures"].is_array() &&
      !root["architectures"].empty() && root["architectures"][0].is_string())
    c.architecture = root["architectures"][0].get<std::string>();
  c.modelType = f.string("model_type", "");
  if (!f.ok())
    return f.status();
  const std::string &a = c.architecture, &t = c.modelType;
  bool llama = a == "LlamaForCausalLM" || (a.empty() && t == "llama");
  bool mistral = a == "MistralForCausalLM" || (a.empty() && t == "mistral");
  bool qwen2 = a == "Qwen2ForCausalLM" || (a.empty() && t == "qwen2");
  bool opt = a == "OPTForCausalLM" || (a.empty() && t == "opt");
  if (!llama && !mistral && !qwen2 && !opt)
    return invalidArgument(source + ": field 'architectures' names '" +
                           (a.empty() ? t : a) +
                           "', which is not supported (LlamaForCausalLM, MistralForCausalLM, "
                           "Qwen2ForCausalLM, OPTForCausalLM)");

  c.hidden = f.positive("hidden_size");
  c.layers = f.positive("num_hidden_layers");
  c.qHeads = f.positive("num_attention_heads");
  c.vocab = f.positive("vocab_size");
  c.maxPositions = f.positive("max_position_embeddings", 2048);
  if (!f.ok())
    return f.status();

  if (opt) {
    c.family = Family::kOpt;
    c.intermediate = f.positive("ffn_dim");
    c.kvHeads = c.qHeads;
    c.norm = NormKind::kLayer;
    c.normEps = 1e-5;
    c.rope = false;
    c.gatedMlp = false;
    c.qkvBias = c.denseBias = f.boolean("enable_bias", true);
    c.positionOffset = 2;
    c.layerNormBefore = f.boolean("do_layer_norm_before", true);
    c.tiedEmbeddings = f.boolean("tie_word_embeddings", true);
    std::string act = f.string("activation_function", "relu");
    if (f.ok() && act != "relu")
      f.fail("activation_function", "'" + act + "' is not supported (relu)");
    c.embedDim = f.positive("word_embed_proj_dim", c.hidden);
    c.finalNorm = c.layerNormBefore && !f.boolean("_remove_final_layer_norm", false);
    if (f.ok() && !f.boolean("layer_norm_elementwise_affine", true))
      f.fail("layer_norm_elementwise_affine",
             "false (LayerNorms without weights) is not supported");
    if (f.ok() && c.hidden % c.qHeads != 0)
      f.fail("hidden_size", "must be a multiple of num_attention_heads");
    c.headDim = c.hidden / c.qHeads;
  } else {
    c.family = Family::kLlama;
    c.embedDim = c.hidden;
    c.intermediate = f.positive("intermediate_size");
    c.kvHeads = f.positive("num_key_value_heads", c.qHeads);
    c.normEps = f.number("rms_norm_eps", 1e-6);
    c.tiedEmbeddings = f.boolean("tie_word_embeddings", false);
    c.qkvBias = qwen2 || f.boolean("attention_bias", false);
    if (f.ok() && f.boolean("mlp_bias", false))
      f.fail("mlp_bias", "true is not supported");
    std::string act = f.string("hidden_act", "silu");
    if (f.ok() && act != "silu")
      f.fail("hidden_act", "'" + act + "' is not supported (silu)");
    if (f.ok() && !qwen2 && c.qkvBias)
      f.fail("attention_bias", "true is only supported for Qwen2");
    if (f.ok() && c.hidden % c.qHeads != 0 && !f.has("head_dim"))
      f.fail("hidden_size", "must be a multiple of num_attention_heads (or give head_dim)");
    c.headDim = f.positive("head_dim", c.qHeads ? c.hidden / c.qHeads : 0);
    if (mistral && f.has("sliding_window")) {
      c.slidingWindow = f.positive("sliding_window");
    }
    if (qwen2 && f.boolean("use_sliding_window", false))
      f.fail("use_sliding_window", "true is not supported for Qwen2");
    if (f.ok() && c.headDim % 2 != 0)
      f.fail("head_dim", "must be even for RoPE");
    if (f.ok() && root.contains("partial_rotary_factor") &&
        f.number("partial_rotary_factor", 1.0) != 1.0)
      f.fail("partial_rotary_factor", "must be 1.0");
    if (f.ok())
      ropeFrequencies(root, f, c);
  }
  if (f.ok() && c.qHeads % c.kvHeads != 0)
    f.fail("num_key_value_heads", "must divide num_attention_heads (" +
                                      std::to_string(c.qHeads) + ")");
  if (f.ok() && !(c.normEps > 0))
    f.fail(opt ? "layer_norm_eps" : "rms_norm_eps", "must be positive");
  if (!f.ok())
    return f.status();
  return c;
}

} // namespace

Result<ModelConfig> parseModelConfig(const std::string &jsonText, const std::string &source) {
  json root = json::parse(jsonText, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded())
    return invalidArgument(source + ": not valid JSON");
  return parseJson(root, source);
}

Result<ModelConfig> loadModelConfig(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return notFound("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return parseModelConfig(text.str(), path);
}

} // namespace hybridgen::rt::model
