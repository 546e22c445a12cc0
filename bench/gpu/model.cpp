// The model check of the device check: a compiled model (hybridgen-compile --gpu) generating
// through the runtime's ModelRunner with part of every layer's KV in device memory, against the
// float64 reference's greedy tokens (written next to the artifact by build-device-artifacts.sh)
// and against its own CPU-only run (logits of every step, teacher-forced on the reference tokens).
//
// DIR holds artifact/ (metadata.json, model.so), checkpoint/ (config.json, safetensors) and
// expected.txt: "prompt <ids>", "tokens <ids>", "gpu_tokens <N>", comma-separated.
#include "modes.h"

#include "hybridgen/runtime/model/runner.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>

namespace hybridgen::devcheck {

namespace {

namespace model = hybridgen::rt::model;

std::map<std::string, std::vector<int64_t>> readExpected(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot read " + path);
  std::map<std::string, std::vector<int64_t>> out;
  std::string line;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string key, item;
    ss >> key;
    std::vector<int64_t> &values = out[key];
    while (std::getline(ss >> std::ws, item, ','))
      values.push_back(std::stoll(item));
  }
  for (const char *key : {"prompt", "tokens", "gpu_tokens"})
    if (out[key].empty())
      throw std::runtime_error(path + ": no '" + key + "' line");
  return out;
}

struct PolicyRun {
  std::vector<int32_t> tokens;              // greedy, from the runner's own logits
  std::vector<std::vector<float>> logits;   // teacher-forced on the reference tokens
  model::RunnerStats stats;
  double decodeSeconds = 0;
  int64_t hbmBlocks = 0;                    // the most blocks the HBM tier held
};

PolicyRun runPolicy(const std::string &dir, const std::string &policy, const std::vector<int32_t> &prompt,
                    const std::vector<int32_t> &expected, int64_t gpuTokens) {
  model::RunnerOptions ro;
  ro.policy = policy;
  ro.gpuTokens = gpuTokens;
  ro.maxContext = int64_t(prompt.size() + expected.size()) + 16;
  ro.weightsPath = dir + "/checkpoint";
  auto runner = model::ModelRunner::open(dir + "/artifact", ro).valueOrThrow();
  PolicyRun r;
  auto hbmUsed = [&] {
    model::RunnerStats s = runner->stats();
    for (size_t t = 0; t < s.tierNames.size(); ++t)
      if (s.tierNames[t] == "hbm")
        r.hbmBlocks = std::max(r.hbmBlocks, s.tierUsedBlocks[t]);
  };
  // Teacher-forced: the logits after the prompt, then after each reference token.
  std::vector<float> logits;
  rt::throwIfError(runner->prefill(prompt.data(), int64_t(prompt.size()), false, logits));
  r.logits.push_back(logits);
  auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i + 1 < expected.size(); ++i) {
    rt::throwIfError(runner->decode(&expected[i], logits));
    r.logits.push_back(logits);
    hbmUsed();
  }
  r.decodeSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.stats = runner->stats();
  // Free-running greedy generation from a fresh cache.
  rt::throwIfError(runner->reset());
  auto gen = runner->generate(prompt.data(), int64_t(prompt.size()), int64_t(expected.size()))
                 .valueOrThrow();
  r.tokens = gen.at(0);
  hbmUsed();
  return r;
}

/// max |a - b| over max |b|, over every step's logits.
double relativeError(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b) {
  double num = 0, den = 0;
  for (size_t s = 0; s < a.size() && s < b.size(); ++s)
    for (size_t i = 0; i < a[s].size() && i < b[s].size(); ++i) {
      num = std::max(num, std::fabs(double(a[s][i]) - double(b[s][i])));
      den = std::max(den, std::fabs(double(b[s][i])));
    }
  return den > 0 ? num / den : num;
}

std::string join(const std::vector<int32_t> &v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? " " : "") + std::to_string(v[i]);
  return s;
}

} // namespace

int runModel(const Options &o) {
  auto exp = readExpected(o.modelDir + "/expected.txt");
  std::vector<int32_t> prompt(exp["prompt"].begin(), exp["prompt"].end());
  std::vector<int32_t> expected(exp["tokens"].begin(), exp["tokens"].end());
  const int64_t gpuTokens = exp["gpu_tokens"].front();

  Csv csv(o.csv, "policy,gpu_side,hbm_blocks,tokens_match,logits_rel_err_vs_cpu,decode_tokens_per_s,tokens");
  PolicyRun cpu = runPolicy(o.modelDir, "cpu", prompt, expected, gpuTokens);
  bool allPass = true;
  for (const std::string policy : {"cpu", "static:0", "feedback"}) {
    PolicyRun r = policy == "cpu" ? cpu : runPolicy(o.modelDir, policy, prompt, expected, gpuTokens);
    const bool match = r.tokens == expected;
    const double err = relativeError(r.logits, cpu.logits);
    // f32 weights and KV: the split changes only the order of the softmax's sums.
    const bool pass = match && err <= 1e-4;
    allPass = allPass && pass;
    const double tps = r.decodeSeconds > 0 ? double(expected.size() - 1) / r.decodeSeconds : 0;
    std::string side = r.stats.gpuSide; // the device's description has commas
    std::replace(side.begin(), side.end(), ',', ';');
    csv.row(policy + "," + side + "," + std::to_string(r.hbmBlocks) + "," +
            (match ? "1" : "0") + "," + fmt(err, "%.3g") + "," + fmt(tps, "%.1f") + "," + join(r.tokens));
  }
  std::printf("model: expected tokens %s (float64 reference)\n", join(expected).c_str());
  return allPass ? 0 : 1;
}

} // namespace hybridgen::devcheck
