//===- ModelRun.cpp - hybridgen-run's model mode: prefill, then decode, streaming ids -===//
//
//   hybridgen-run <artifact or model dir> (--prompt-ids 1,2,3 | --context N) --max-new-tokens N
//       [--policy feedback|static:S|cpu] [--batch B] [--threads T] [--kv-dtype f32|bf16|f16]
//       [--prefill-chunk N] [--gpu-tokens N] [--map-weights 0|1] [--bf16-dot-rounded 0|1]
//       [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R]
//       [--seed S] [--trace out.csv]
//
// Decoding is greedy unless --temperature > 0 (rt::model::Sampler, docs/models.md "Sampling").
//
// A model dir (config.json + safetensors) is compiled first (hybridgen-compile's model mode). The
// run itself uses only the runtime's ModelRunner, as a deployment would.
//
//===----------------------------------------------------------------------===//
#include "ModelRun.h"

#include "hybridgen/Models/ModelModule.h"
#include "hybridgen/runtime/model/runner.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace rt = hybridgen::rt;
namespace fs = std::filesystem;

namespace {

struct ModelOptions {
  std::string path;
  std::vector<int32_t> promptIds;
  int64_t context = 0;
  int64_t maxNewTokens = 16;
  std::string tracePath, artifactDir, weightDtype = "auto";
  bool bf16DotRounded = false; // compiling a model dir: hybridgen-compile --bf16-dot-rounded
  rt::model::RunnerOptions runner;
  rt::model::SamplingOptions sampling;
};

int usage(const char *why) {
  std::fprintf(stderr,
               "usage: hybridgen-run <artifact or model dir> (--prompt-ids 1,2,3 | --context N) "
               "[--max-new-tokens N] [--policy feedback|static:S|cpu] [--batch B] [--threads T] "
               "[--kv-dtype f32|bf16|f16] [--weight-dtype auto|f32|bf16|f16] [--prefill-chunk N] "
               "[--gpu-tokens N] [--map-weights 0|1] [--bf16-dot-rounded 0|1] "
               "[--temperature T] [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R] "
               "[--seed S] [--artifact-dir DIR] [--trace out.csv]\n");
  if (why)
    std::fprintf(stderr, "hybridgen-run: %s\n", why);
  return 2;
}

bool parseInt(const std::string &text, int64_t &out) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  out = std::stoll(text);
  return true;
}

/// A whole finite number (the sampling options; their ranges are checked by SamplingOptions).
bool parseReal(const std::string &text, double &out) {
  char *end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size() && std::isfinite(out);
}

/// Flags as `--name value` or `--name=value`.
bool parse(int argc, char **argv, ModelOptions &o, std::string &error) {
  o.path = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i], value;
    size_t eq = a.find('=');
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      error = "flag " + a + " needs a value";
      return false;
    }
    int64_t n = 0;
    auto number = [&](int64_t &dst) {
      if (!parseInt(value, n)) {
        error = a + " needs a non-negative integer, got '" + value + "'";
        return false;
      }
      dst = n;
      return true;
    };
    if (a == "--prompt-ids") {
      std::stringstream ss(value);
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (!parseInt(item, n) || n > INT32_MAX) {
          error = "--prompt-ids: '" + item + "' is not a token id";
          return false;
        }
        o.promptIds.push_back(int32_t(n));
      }
    } else if (a == "--context") {
      if (!number(o.context))
        return false;
    } else if (a == "--max-new-tokens") {
      if (!number(o.maxNewTokens))
        return false;
    } else if (a == "--policy") {
      o.runner.policy = value;
    } else if (a == "--batch" || a == "--threads") {
      int64_t v = 0;
      if (!number(v) || v > 4096)
        return false;
      (a == "--batch" ? o.runner.batch : o.runner.threads) = int32_t(v);
    } else if (a == "--kv-dtype") {
      o.runner.kvDtype = value;
    } else if (a == "--weight-dtype") {
      o.weightDtype = value;
    } else if (a == "--prefill-chunk") {
      if (!number(o.runner.prefillChunk))
        return false;
    } else if (a == "--gpu-tokens") {
      if (!number(o.runner.gpuTokens))
        return false;
    } else if (a == "--map-weights") {
      // 1: run on the checkpoint's file mapping instead of a copy in huge-page memory.
      if (value != "0" && value != "1") {
        error = "--map-weights needs 0 or 1, got '" + value + "'";
        return false;
      }
      o.runner.mapWeights = value == "1";
    } else if (a == "--bf16-dot-rounded") {
      // 1: a model dir is compiled with q and p rounded once to bf16 in the bf16 KV kernels.
      if (value != "0" && value != "1") {
        error = "--bf16-dot-rounded needs 0 or 1, got '" + value + "'";
        return false;
      }
      o.bf16DotRounded = value == "1";
    } else if (a == "--temperature" || a == "--top-p" || a == "--min-p" ||
               a == "--repetition-penalty") {
      double v = 0;
      if (!parseReal(value, v)) {
        error = a + " needs a number, got '" + value + "'";
        return false;
      }
      rt::model::SamplingOptions &sm = o.sampling;
      (a == "--temperature" ? sm.temperature
       : a == "--top-p"     ? sm.topP
       : a == "--min-p"     ? sm.minP
                            : sm.repetitionPenalty) = v;
    } else if (a == "--top-k") {
      if (!number(o.sampling.topK))
        return false;
    } else if (a == "--seed") {
      if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos ||
          value.size() > 20) {
        error = "--seed needs a non-negative integer, got '" + value + "'";
        return false;
      }
      errno = 0;
      o.sampling.seed = std::strtoull(value.c_str(), nullptr, 10);
      if (errno == ERANGE) {
        error = "--seed must fit 64 bits, got '" + value + "'";
        return false;
      }
    } else if (a == "--artifact-dir") {
      o.artifactDir = value;
    } else if (a == "--trace") {
      o.tracePath = value;
    } else {
      error = "unknown flag " + a;
      return false;
    }
  }
  if (o.promptIds.empty() == (o.context == 0)) {
    error = "give exactly one of --prompt-ids and --context N (N >= 1)";
    return false;
  }
  if (rt::Status s = o.sampling.validate(); !s) {
    error = s.message();
    return false;
  }
  return true;
}

void printSummary(const rt::model::RunnerStats &s, int64_t layers) {
  std::printf("\n== summary (policy %s)\n", s.policy.c_str());
  std::printf("prefill: %lld tokens in %.3f s = %.1f tokens/s", (long long)s.prefillTokens,
              s.prefillSeconds, s.prefillTokensPerSecond());
  if (s.prefillSharedTokens > 0)
    std::printf(" (%lld of them copied, not computed: every sequence had the same prompt)",
                (long long)s.prefillSharedTokens);
  std::printf("\n");
  std::printf("decode:  %lld tokens in %.3f s = %.2f tokens/s (%lld steps)\n",
              (long long)s.decodeTokens, s.decodeSeconds, s.decodeTokensPerSecond(),
              (long long)s.decodeSteps);
  if (!s.splitPerLayer.empty()) {
    std::vector<int64_t> sorted = s.splitPerLayer;
    std::sort(sorted.begin(), sorted.end());
    std::printf("split per layer (CPU-side tokens, last step): min %lld, median %lld, max %lld",
                (long long)sorted.front(), (long long)sorted[sorted.size() / 2],
                (long long)sorted.back());
    if (layers <= 8) {
      std::printf(" [");
      for (size_t l = 0; l < s.splitPerLayer.size(); ++l)
        std::printf("%s%lld", l ? " " : "", (long long)s.splitPerLayer[l]);
      std::printf("]");
    }
    std::printf("\n");
  }
  for (size_t t = 0; t < s.tierNames.size(); ++t)
    std::printf("tier %-16s %lld / %lld blocks\n", s.tierNames[t].c_str(),
                (long long)s.tierUsedBlocks[t], (long long)s.tierCapacityBlocks[t]);
  std::printf("migrations: %lld blocks\n", (long long)s.migrations);
  std::printf("kv pool: %.1f MiB committed at load in %.3f s (not in the prefill's time)\n",
              double(s.kvCommittedBytes) / (1 << 20), s.kvCommitSeconds);
  if (s.gpuSide == "modelled")
    std::printf("The GPU side's time is MODELLED (H200 figures): both partials ran on the CPU (no "
                "usable GPU, an artifact without --gpu kernels, or --gpu-tokens 0).\n");
  else
    std::printf("GPU side: %s (kernels on the device, CUDA-event times)\n", s.gpuSide.c_str());
}

} // namespace

bool looksLikeModelMode(int argc, char **argv) {
  return argc > 1 && argv[1][0] != '-';
}

int runModelMode(int argc, char **argv) {
  ModelOptions o;
  std::string error;
  if (!parse(argc, argv, o, error))
    return usage(error.c_str());
  std::string artifact = o.path;
  if (!fs::exists(fs::path(o.path) / "metadata.json")) {
    if (!fs::exists(fs::path(o.path) / "config.json"))
      return usage((o.path + " is neither an artifact (metadata.json) nor a model dir "
                             "(config.json)").c_str());
    hybridgen::models::ModelCompileOptions copts;
    copts.weightDtype = o.weightDtype;
    copts.compile.bf16DotRounded = o.bf16DotRounded;
    // The default KV dtypes, plus the one asked for (f16) so that it is compiled in.
    const std::string &kv = o.runner.kvDtype;
    if (!kv.empty() &&
        std::find(copts.kvDtypes.begin(), copts.kvDtypes.end(), kv) == copts.kvDtypes.end())
      copts.kvDtypes.push_back(kv);
    try {
      bool compiled = false;
      auto start = std::chrono::steady_clock::now();
      artifact = hybridgen::models::ensureArtifact(o.path, o.artifactDir, copts, &compiled);
      double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("== %s %s in %.2f s -> %s\n", compiled ? "compiled" : "reused artifact of",
                  o.path.c_str(), secs, artifact.c_str());
    } catch (const std::exception &e) {
      std::fprintf(stderr, "hybridgen-run: %s\n", e.what());
      return 1;
    }
  }
  int64_t promptLen = o.context ? o.context : int64_t(o.promptIds.size());
  o.runner.maxContext = promptLen + o.maxNewTokens + 1;
  auto runner = rt::model::ModelRunner::open(artifact, o.runner);
  if (!runner) {
    std::fprintf(stderr, "hybridgen-run: %s\n", runner.status().message().c_str());
    return 1;
  }
  rt::model::ModelRunner &m = **runner;
  const rt::model::ModelConfig &c = m.config();
  std::printf("== %s: %lld layers, hidden %lld, heads %lld/%lld, vocab %lld; batch %d, kv %s\n",
              c.architecture.c_str(), (long long)c.layers, (long long)c.hidden,
              (long long)c.qHeads, (long long)c.kvHeads, (long long)c.vocab, m.batch(),
              m.kvDtype().c_str());

  const int64_t B = m.batch();
  std::vector<int32_t> ids;
  if (o.context) {
    // Synthetic prompt for benchmarking: a fixed pseudo-random id sequence, the same per sequence.
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (int64_t t = 0; t < o.context; ++t) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      ids.push_back(int32_t((state >> 33) % uint64_t(c.vocab)));
    }
    std::printf("== prompt: %lld SYNTHETIC tokens (--context), not text\n", (long long)o.context);
  } else {
    ids = o.promptIds;
    std::printf("== prompt: %zu token ids\n", ids.size());
  }
  std::vector<int32_t> batchIds;
  for (int64_t b = 0; b < B; ++b)
    batchIds.insert(batchIds.end(), ids.begin(), ids.end());

  bool longPrefill = promptLen > o.runner.prefillChunk;
  auto progress = [&](int64_t done, int64_t total) {
    if (longPrefill) {
      std::fprintf(stderr, "\rprefill %lld / %lld tokens", (long long)done, (long long)total);
      if (done == total)
        std::fprintf(stderr, "\n");
    }
  };
  const rt::model::SamplingOptions &sm = o.sampling;
  if (sm.greedy() && sm.repetitionPenalty == 1)
    std::printf("== decoding: greedy\n");
  else if (sm.greedy())
    std::printf("== decoding: greedy, repetition penalty %g\n", sm.repetitionPenalty);
  else
    std::printf("== decoding: sampled, temperature %g, top-k %lld, top-p %g, min-p %g, "
                "repetition penalty %g, seed %llu\n",
                sm.temperature, (long long)sm.topK, sm.topP, sm.minP, sm.repetitionPenalty,
                (unsigned long long)sm.seed);
  std::printf("== generated token ids%s:\n", B > 1 ? " (one column per sequence)" : "");
  int64_t step = 0;
  auto onToken = [&](const std::vector<int32_t> &tokens) {
    if (B == 1) {
      std::printf("%d ", tokens[0]);
    } else {
      std::printf("%4lld:", (long long)step);
      for (int32_t t : tokens)
        std::printf(" %d", t);
      std::printf("\n");
    }
    ++step;
    std::fflush(stdout);
  };
  auto out = m.generate(batchIds.data(), promptLen, o.maxNewTokens, o.sampling, onToken,
                        progress);
  if (B == 1)
    std::printf("\n");
  if (!out) {
    std::fprintf(stderr, "hybridgen-run: %s\n", out.status().message().c_str());
    return 1;
  }
  printSummary(m.stats(), c.layers);
  if (!o.tracePath.empty()) {
    std::ofstream trace(o.tracePath);
    trace << m.traceCsv();
    if (!trace) {
      std::fprintf(stderr, "hybridgen-run: cannot write %s\n", o.tracePath.c_str());
      return 1;
    }
  }
  return 0;
}
