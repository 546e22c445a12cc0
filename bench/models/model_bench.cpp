// Decode (and prefill) speed of a compiled model artifact, with model bandwidth utilization:
// (weight + KV bytes one decode step reads) / step time, over the read roof measured in the same
// run on the same threads (bench_core's roof), right before and right after each case's timed
// steps (the larger of the two). Runtime only: no MLIR (compile the artifact first).
//
//   hybridgen_model_bench --artifact=DIR [--name=smollm2] [--contexts=1024,8192] [--batches=1,4]
//       [--threads=1,2] [--steps=8] [--prefill=512,4096] [--kv-dtype=bf16] [--csv=out.csv]
//       [--weight-memory=copy,map]   (the runner copies weights into huge-page memory, or maps them)
//
// Decode runs over a synthetic KV cache (random K/V filled by the runtime, labelled so): timing
// only, the tokens it produces mean nothing.
#include "../cpu_attention/bench_core.h"

#include "hybridgen/runtime/model/runner.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace rt = hybridgen::rt;
using hybridgen::bench::measureReadRoof;
using hybridgen::bench::now;

namespace {

/// The read roof around one case, in GB/s: measured just before and just after the case's timed
/// part, the larger of the two. This guest's memory bandwidth moves by up to 2x between minutes
/// (two threads: 33-62 GB/s on the Zen 4 guest), and a roof read once per thread count at the
/// start of a run said little about a case timed minutes later.
class CaseRoof {
public:
  void before() { gbps_ = measureReadRoof(size_t(1) << 30, 1) / 1e9; }
  double after() { return gbps_ = std::max(gbps_, measureReadRoof(size_t(1) << 30, 1) / 1e9); }

private:
  double gbps_ = 0;
};

std::vector<int64_t> numbers(const std::string &s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty())
      out.push_back(std::stoll(item));
  return out;
}

struct Options {
  std::string artifact, name = "model", kvDtype = "bf16", csv = "model_bench.csv", weights;
  std::vector<int64_t> contexts = {1024}, batches = {1}, threads = {1, 2}, prefill = {};
  int64_t steps = 8;
  /// "copy" (the runner's default: weights copied into huge-page memory) and/or "map" (read from
  /// the file's mapping), each decode case run once per entry, in turn.
  std::vector<std::string> weightMemory = {"copy"};
};

bool parse(int argc, char **argv, Options &o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    size_t eq = a.find('=');
    std::string key = a.substr(0, eq), val = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (key == "--artifact") o.artifact = val;
    else if (key == "--name") o.name = val;
    else if (key == "--weights") o.weights = val;
    else if (key == "--kv-dtype") o.kvDtype = val;
    else if (key == "--csv") o.csv = val;
    else if (key == "--contexts") o.contexts = numbers(val);
    else if (key == "--batches") o.batches = numbers(val);
    else if (key == "--threads") o.threads = numbers(val);
    else if (key == "--prefill") o.prefill = numbers(val);
    else if (key == "--weight-memory") {
      o.weightMemory.clear();
      std::stringstream ss(val);
      std::string item;
      while (std::getline(ss, item, ','))
        if (item == "copy" || item == "map") {
          o.weightMemory.push_back(item);
        } else {
          std::fprintf(stderr, "--weight-memory: '%s' is not copy or map\n", item.c_str());
          return false;
        }
      if (o.weightMemory.empty())
        return false;
    }
    else if (key == "--steps") o.steps = std::max<int64_t>(1, std::stoll(val));
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return false;
    }
  }
  if (o.artifact.empty()) {
    std::fprintf(stderr, "usage: hybridgen_model_bench --artifact=DIR [...] (see the source)\n");
    return false;
  }
  // Checked here so that a bad list is a usage error, not an exception out of the runner.
  for (auto [flag, list] : {std::pair{"--contexts", &o.contexts}, {"--batches", &o.batches},
                            {"--threads", &o.threads}, {"--prefill", &o.prefill}})
    for (int64_t n : *list)
      if (n < 1) {
        std::fprintf(stderr, "%s: every entry must be >= 1, got %lld (leave --prefill out for "
                             "no prefill cases)\n", flag, (long long)n);
        return false;
      }
  return true;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  if (!parse(argc, argv, o))
    return 2;
  std::ofstream csv(o.csv);
  csv << "model,phase,context,batch,threads,kv_dtype,seconds_per_step,tokens_per_s,"
         "bytes_per_step,gbps,roof_gbps,ratio,weight_memory\n";
  std::printf("%-10s %-7s %7s %5s %7s %12s %12s %9s %9s %6s %s\n", "model", "phase", "context",
              "batch", "threads", "ms/step", "tokens/s", "GB/s", "roof", "ratio", "weights");
  for (int64_t threads : o.threads) {
    omp_set_num_threads(int(threads));
    CaseRoof caseRoof;
    for (int64_t batch : o.batches)
      for (int64_t context : o.contexts) {
        for (const std::string &memory : o.weightMemory) {
          rt::model::RunnerOptions ro;
          ro.mapWeights = memory == "map";
          ro.batch = int32_t(batch);
          ro.maxContext = context + o.steps + 2;
          ro.kvDtype = o.kvDtype;
          ro.threads = int32_t(threads);
          ro.policy = "cpu";
          ro.weightsPath = o.weights;
          auto runner = rt::model::ModelRunner::open(o.artifact, ro);
          if (!runner) {
            std::fprintf(stderr, "%s\n", runner.status().message().c_str());
            return 1;
          }
          rt::model::ModelRunner &m = **runner;
          rt::throwIfError(m.fillSyntheticKv(context));
          std::vector<int32_t> ids(static_cast<size_t>(batch), 1);
          std::vector<float> logits;
          rt::throwIfError(m.decode(ids.data(), logits)); // warm-up
          double best = 1e30;
          uint64_t bytes = 0;
          caseRoof.before();
          for (int64_t s = 0; s < o.steps; ++s) {
            bytes = m.weightBytesPerStep() + m.kvBytesPerStep();
            double t0 = now();
            rt::throwIfError(m.decode(ids.data(), logits));
            best = std::min(best, now() - t0);
          }
          double roof = caseRoof.after();
          double gbps = double(bytes) / best / 1e9;
          std::printf("%-10s %-7s %7lld %5lld %7lld %12.2f %12.2f %9.2f %9.2f %6.3f %s\n",
                      o.name.c_str(), "decode", (long long)context, (long long)batch,
                      (long long)threads, best * 1e3, double(batch) / best, gbps, roof, gbps / roof,
                      memory.c_str());
          csv << o.name << ",decode," << context << "," << batch << "," << threads << ","
              << o.kvDtype << "," << best << "," << double(batch) / best << "," << bytes << ","
              << gbps << "," << roof << "," << gbps / roof << "," << memory << "\n";
        }
      }
    for (int64_t prompt : o.prefill) {
      rt::model::RunnerOptions ro;
      ro.maxContext = prompt + 1;
      ro.kvDtype = o.kvDtype;
      ro.threads = int32_t(threads);
      ro.weightsPath = o.weights;
      ro.mapWeights = o.weightMemory[0] == "map";
      auto runner = rt::model::ModelRunner::open(o.artifact, ro);
      if (!runner) {
        std::fprintf(stderr, "%s\n", runner.status().message().c_str());
        return 1;
      }
      std::vector<int32_t> ids(static_cast<size_t>(prompt));
      for (int64_t t = 0; t < prompt; ++t)
        ids[size_t(t)] = int32_t((t * 7919) % std::max<int64_t>(1, (*runner)->config().vocab));
      std::vector<float> logits;
      caseRoof.before();
      double t0 = now();
      rt::throwIfError((*runner)->prefill(ids.data(), prompt, false, logits));
      double secs = now() - t0;
      double roof = caseRoof.after();
      std::printf("%-10s %-7s %7lld %5d %7lld %12.2f %12.2f %9s %9.2f %6s %s\n", o.name.c_str(),
                  "prefill", (long long)prompt, 1, (long long)threads, secs * 1e3,
                  double(prompt) / secs, "-", roof, "-", o.weightMemory[0].c_str());
      csv << o.name << ",prefill," << prompt << ",1," << threads << "," << o.kvDtype << ","
          << secs << "," << double(prompt) / secs << ",,,," << roof << ",," << o.weightMemory[0]
          << "\n";
    }
  }
  std::printf("decode over a SYNTHETIC KV cache (random K/V); ratio = (weight + KV bytes per "
              "step) / step time / read roof. CSV: %s\n",
              o.csv.c_str());
  return 0;
}
