// ModelConfig from config.json: the fields each architecture reads, RoPE scaling, and errors that
// name the field (the one parser shared by the compiler and the runner).
#include "hybridgen/runtime/model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace hybridgen::rt::model {
namespace {

const char *kLlama = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
  "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256, "rope_theta": 500000.0,
  "rms_norm_eps": 1e-5, "tie_word_embeddings": true %s})";

std::string llama(const std::string &extra = "") {
  std::string s = kLlama;
  return s.replace(s.find("%s"), 2, extra);
}

TEST(ModelConfig, LlamaFieldsAndDefaults) {
  Result<ModelConfig> c = parseModelConfig(llama());
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->family, Family::kLlama);
  EXPECT_EQ(c->hidden, 64);
  EXPECT_EQ(c->qHeads, 4);
  EXPECT_EQ(c->kvHeads, 2);
  EXPECT_EQ(c->headDim, 16);
  EXPECT_TRUE(c->tiedEmbeddings);
  EXPECT_FALSE(c->qkvBias);
  ASSERT_EQ(c->invFreq.size(), 8u);
  for (int i = 0; i < 8; ++i)
    EXPECT_DOUBLE_EQ(c->invFreq[size_t(i)], 1.0 / std::pow(500000.0, 2.0 * i / 16.0));
}

TEST(ModelConfig, Llama3ScalingKeepsHighDividesLowAndSmoothsBetween) {
  Result<ModelConfig> plain = parseModelConfig(llama());
  Result<ModelConfig> c = parseModelConfig(llama(
      R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->ropeScaling, "llama3");
  int kept = 0, divided = 0, smoothed = 0;
  for (size_t i = 0; i < c->invFreq.size(); ++i) {
    double f = plain->invFreq[i], g = c->invFreq[i], wavelen = 2 * M_PI / f;
    if (wavelen < 8192.0 / 4.0) {
      EXPECT_DOUBLE_EQ(g, f);
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_DOUBLE_EQ(g, f / 8.0);
      ++divided;
    } else {
      double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      EXPECT_DOUBLE_EQ(g, (1 - smooth) * f / 8.0 + smooth * f);
      ++smoothed;
    }
  }
  // theta 5e5 at head_dim 16 puts frequencies in all three bands.
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
}

TEST(ModelConfig, LinearScalingDividesEveryFrequency) {
  Result<ModelConfig> plain = parseModelConfig(llama());
  Result<ModelConfig> c =
      parseModelConfig(llama(R"(, "rope_scaling": {"type": "linear", "factor": 4.0})"));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  for (size_t i = 0; i < c->invFreq.size(); ++i)
    EXPECT_DOUBLE_EQ(c->invFreq[i], plain->invFreq[i] / 4.0);
}

TEST(ModelConfig, MistralWindowQwenBiasesOptLayout) {
  std::string mistral = llama(R"(, "sliding_window": 4096)");
  mistral.replace(mistral.find("LlamaForCausalLM"), 16, "MistralForCausalLM");
  Result<ModelConfig> m = parseModelConfig(mistral);
  ASSERT_TRUE(m.isOk()) << m.status().message();
  EXPECT_EQ(m->slidingWindow.value_or(0), 4096);

  std::string qwen = llama();
  qwen.replace(qwen.find("LlamaForCausalLM"), 16, "Qwen2ForCausalLM");
  Result<ModelConfig> q = parseModelConfig(qwen);
  ASSERT_TRUE(q.isOk()) << q.status().message();
  EXPECT_TRUE(q->qkvBias);
  EXPECT_FALSE(q->slidingWindow.has_value());

  Result<ModelConfig> o = parseModelConfig(R"({"architectures": ["OPTForCausalLM"],
    "hidden_size": 64, "ffn_dim": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 256, "max_position_embeddings": 128})");
  ASSERT_TRUE(o.isOk()) << o.status().message();
  EXPECT_EQ(o->family, Family::kOpt);
  EXPECT_EQ(o->kvHeads, 4);
  EXPECT_EQ(o->headDim, 16);
  EXPECT_EQ(o->positionOffset, 2);
  EXPECT_FALSE(o->rope);
  EXPECT_TRUE(o->qkvBias && o->denseBias && o->tiedEmbeddings);
  EXPECT_EQ(o->norm, NormKind::kLayer);
}

void expectError(const std::string &json, const std::string &needle) {
  Result<ModelConfig> c = parseModelConfig(json, "cfg.json");
  ASSERT_FALSE(c.isOk()) << "accepted: " << json;
  EXPECT_EQ(c.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("cfg.json"), std::string::npos) << c.status().message();
}

TEST(ModelConfig, ErrorsNameTheField) {
  expectError("{not json", "not valid JSON");
  expectError(R"({"architectures": ["GPT2LMHeadModel"]})", "'architectures'");
  std::string noFfn = llama();
  noFfn.replace(noFfn.find("\"intermediate_size\": 128,"), 25, "");
  expectError(noFfn, "'intermediate_size' is missing");
  expectError(llama(R"(, "hidden_act": "gelu")"), "'hidden_act'");
  expectError(llama(R"(, "rope_scaling": {"rope_type": "yarn", "factor": 2.0})"),
              "'rope_scaling.rope_type'");
  expectError(llama(R"(, "rope_scaling": {"rope_type": "linear", "factor": -1})"),
              "'rope_scaling.factor'");
  expectError(llama(R"(, "rope_theta": "big")"), "'rope_theta' must be a number");
  std::string badKv = llama();
  badKv.replace(badKv.find("\"num_key_value_heads\": 2"), 24, "\"num_key_value_heads\": 3");
  expectError(badKv, "'num_key_value_heads' must divide");
  expectError(R"({"architectures": ["OPTForCausalLM"], "hidden_size": 64, "ffn_dim": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256,
    "word_embed_proj_dim": 0})", "'word_embed_proj_dim' must be positive");
  expectError(R"({"architectures": ["OPTForCausalLM"], "hidden_size": 64, "ffn_dim": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256,
    "layer_norm_elementwise_affine": false})", "'layer_norm_elementwise_affine'");
}

const char *kOpt = R"({"architectures": ["OPTForCausalLM"], "hidden_size": 64, "ffn_dim": 128,
  "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256 %s})";

Result<ModelConfig> opt(const std::string &extra) {
  std::string s = kOpt;
  return parseModelConfig(s.replace(s.find("%s"), 2, extra));
}

TEST(ModelConfig, OptNormPlacementFinalNormAndProjections) {
  // Pre-LN (opt-125m and most sizes): a final LayerNorm, embeddings as wide as the hidden state.
  Result<ModelConfig> pre = opt("");
  ASSERT_TRUE(pre.isOk()) << pre.status().message();
  EXPECT_TRUE(pre->layerNormBefore && pre->finalNorm);
  EXPECT_EQ(pre->embedDim, 64);
  EXPECT_FALSE(pre->projectsEmbeddings());
  // opt-350m: post-LN (HF's OPTDecoder then has no final_layer_norm) and 32-wide embeddings.
  Result<ModelConfig> post = opt(R"(, "do_layer_norm_before": false, "word_embed_proj_dim": 32)");
  ASSERT_TRUE(post.isOk()) << post.status().message();
  EXPECT_FALSE(post->layerNormBefore || post->finalNorm);
  EXPECT_EQ(post->embedDim, 32);
  EXPECT_TRUE(post->projectsEmbeddings());
  // Checkpoints fine-tuned before transformers 4.20.1: pre-LN without the final norm.
  Result<ModelConfig> removed = opt(R"(, "_remove_final_layer_norm": true)");
  ASSERT_TRUE(removed.isOk()) << removed.status().message();
  EXPECT_TRUE(removed->layerNormBefore);
  EXPECT_FALSE(removed->finalNorm);
  // The Llama family embeds at hidden_size.
  Result<ModelConfig> l = parseModelConfig(llama());
  ASSERT_TRUE(l.isOk()) << l.status().message();
  EXPECT_EQ(l->embedDim, 64);
  EXPECT_TRUE(l->finalNorm);
}

} // namespace
} // namespace hybridgen::rt::model
