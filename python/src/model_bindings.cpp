// Python bindings of the model runner (runtime only, no MLIR): the native half of hybridgen.Model
// (python/hybridgen/model.py). The compiler half is model_compiler_bindings.cpp.
#include "bindings.h"

#include "hybridgen/runtime/model/runner.h"
#include "hybridgen/runtime/model/sampler.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <vector>

namespace nb = nanobind;

namespace hybridgen::python {
namespace {

using rt::model::ModelRunner;
using rt::model::Sampler;
using IdArray = nb::ndarray<const int32_t, nb::c_contig, nb::device::cpu>;
using LogitArray = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;

nb::object toNumpy(std::vector<float> &&values, std::vector<size_t> shape) {
  auto *heap = new std::vector<float>(std::move(values));
  nb::capsule owner(heap, [](void *p) noexcept { delete static_cast<std::vector<float> *>(p); });
  return nb::cast(nb::ndarray<nb::numpy, float>(heap->data(), shape.size(), shape.data(), owner));
}

nb::dict statsDict(const rt::model::RunnerStats &s) {
  nb::dict d;
  d["prefill_tokens"] = s.prefillTokens;
  d["prefill_seconds"] = s.prefillSeconds;
  d["prefill_tokens_per_s"] = s.prefillTokensPerSecond();
  d["prefill_shared_tokens"] = s.prefillSharedTokens;
  d["decode_tokens"] = s.decodeTokens;
  d["decode_seconds"] = s.decodeSeconds;
  d["decode_tokens_per_s"] = s.decodeTokensPerSecond();
  d["decode_steps"] = s.decodeSteps;
  d["split_per_layer"] = s.splitPerLayer;
  nb::dict tiers;
  for (size_t t = 0; t < s.tierNames.size(); ++t) {
    nb::dict tier;
    tier["used_blocks"] = s.tierUsedBlocks[t];
    tier["capacity_blocks"] = s.tierCapacityBlocks[t];
    tiers[nb::str(s.tierNames[t].c_str())] = tier;
  }
  d["tier_occupancy"] = tiers;
  d["migrations"] = s.migrations;
  d["gpu_side"] = s.gpuSide;
  d["policy"] = s.policy;
  d["kv_committed_bytes"] = s.kvCommittedBytes;
  d["kv_commit_seconds"] = s.kvCommitSeconds;
  return d;
}

/// Owns the runner (which is neither copyable nor movable: it holds the installed scheduler).
struct RunnerHandle {
  std::unique_ptr<ModelRunner> runner;
};

} // namespace

void bindModelRunner(nb::module_ &m) {
  nb::class_<RunnerHandle>(m, "ModelRunner")
      .def(
          "__init__",
          [](RunnerHandle *self, const std::string &artifact, const std::string &policy,
             int32_t batch, int64_t maxContext, const std::string &kvDtype, int32_t threads,
             const std::string &weights, int64_t prefillChunk, int64_t gpuTokens,
             bool mapWeights) {
            rt::model::RunnerOptions o;
            o.policy = policy;
            o.batch = batch;
            o.maxContext = maxContext;
            o.kvDtype = kvDtype;
            o.threads = threads;
            o.weightsPath = weights;
            o.prefillChunk = prefillChunk;
            o.gpuTokens = gpuTokens;
            o.mapWeights = mapWeights;
            auto runner = ModelRunner::open(artifact, o);
            rt::throwIfError(runner.status());
            new (self) RunnerHandle{std::move(*runner)};
          },
          nb::arg("artifact"), nb::arg("policy") = "feedback", nb::arg("batch") = 1,
          nb::arg("max_context") = 4096, nb::arg("kv_dtype") = "", nb::arg("threads") = 0,
          nb::arg("weights") = "", nb::arg("prefill_chunk") = 512, nb::arg("gpu_tokens") = 0,
          nb::arg("map_weights") = false)
      .def_prop_ro("config_json", [](RunnerHandle &h) { return h.runner->configJson(); })
      .def_prop_ro("batch", [](RunnerHandle &h) { return h.runner->batch(); })
      .def_prop_ro("kv_dtype", [](RunnerHandle &h) { return h.runner->kvDtype(); })
      .def("reset", [](RunnerHandle &h) { rt::throwIfError(h.runner->reset()); })
      .def(
          "truncate", [](RunnerHandle &h, int64_t length) { rt::throwIfError(h.runner->truncate(length)); },
          nb::arg("length"))
      .def(
          "prefill",
          [](RunnerHandle &h, IdArray ids, bool allLogits) {
            if (ids.ndim() != 2 || int64_t(ids.shape(0)) != h.runner->batch())
              throwArgument("prefill: ids must be int32 [batch=" +
                            std::to_string(h.runner->batch()) + ", T]");
            int64_t T = int64_t(ids.shape(1));
            std::vector<float> logits;
            {
              nb::gil_scoped_release release;
              rt::throwIfError(h.runner->prefill(ids.data(), T, allLogits, logits));
            }
            size_t B = size_t(h.runner->batch()), V = size_t(h.runner->config().vocab);
            return allLogits ? toNumpy(std::move(logits), {B, size_t(T), V})
                             : toNumpy(std::move(logits), {B, V});
          },
          nb::arg("ids"), nb::arg("all_logits") = false)
      .def(
          "decode",
          [](RunnerHandle &h, IdArray ids) {
            if (ids.ndim() != 1 || int64_t(ids.shape(0)) != h.runner->batch())
              throwArgument("decode: ids must be int32 [batch=" +
                            std::to_string(h.runner->batch()) + "]");
            std::vector<float> logits;
            {
              nb::gil_scoped_release release;
              rt::throwIfError(h.runner->decode(ids.data(), logits));
            }
            size_t B = size_t(h.runner->batch()), V = size_t(h.runner->config().vocab);
            return toNumpy(std::move(logits), {B, V});
          },
          nb::arg("ids"))
      .def("sequence_lengths", [](RunnerHandle &h) { return h.runner->sequenceLengths(); })
      .def("stats", [](RunnerHandle &h) { return statsDict(h.runner->stats()); })
      .def("trace_csv", [](RunnerHandle &h) { return h.runner->traceCsv(); })
      .def("weight_bytes_per_step", [](RunnerHandle &h) { return h.runner->weightBytesPerStep(); });

  // The runtime's Sampler (the same code as hybridgen-run's): hybridgen.Model.sampler() builds it.
  nb::class_<Sampler>(m, "Sampler")
      .def(
          "__init__",
          [](Sampler *self, int64_t batch, int64_t vocab, double temperature, int64_t topK,
             double topP, double minP, double repetitionPenalty, uint64_t seed) {
            rt::model::SamplingOptions o;
            o.temperature = temperature;
            o.topK = topK;
            o.topP = topP;
            o.minP = minP;
            o.repetitionPenalty = repetitionPenalty;
            o.seed = seed;
            new (self) Sampler(Sampler::create(o, batch, vocab).valueOrThrow());
          },
          nb::arg("batch"), nb::arg("vocab"), nb::arg("temperature") = 0.0, nb::arg("top_k") = 0,
          nb::arg("top_p") = 1.0, nb::arg("min_p") = 0.0, nb::arg("repetition_penalty") = 1.0,
          nb::arg("seed") = 0)
      .def(
          "observe",
          [](Sampler &s, int64_t seq, IdArray ids) {
            if (ids.ndim() != 1)
              throwArgument("Sampler.observe: ids must be int32 [T]");
            rt::throwIfError(s.observe(seq, ids.data(), int64_t(ids.shape(0))));
          },
          nb::arg("seq"), nb::arg("ids"))
      .def(
          "next",
          [](Sampler &s, LogitArray logits) {
            if (logits.ndim() != 2 || int64_t(logits.shape(0)) != s.batch() ||
                int64_t(logits.shape(1)) != s.vocab())
              throwArgument("Sampler.next: logits must be float32 [batch=" +
                            std::to_string(s.batch()) + ", vocab=" + std::to_string(s.vocab()) +
                            "]");
            return s.next(logits.data()).valueOrThrow();
          },
          nb::arg("logits"))
      .def(
          "distribution",
          [](Sampler &s, int64_t seq, LogitArray row) {
            if (row.ndim() != 1 || int64_t(row.shape(0)) != s.vocab())
              throwArgument("Sampler.distribution: logits must be float32 [vocab=" +
                            std::to_string(s.vocab()) + "]");
            return s.distribution(seq, row.data()).valueOrThrow();
          },
          nb::arg("seq"), nb::arg("logits"),
          "[(token, probability)] a draw for sequence |seq| can reach, in id order; draws nothing")
      .def_prop_ro("batch", &Sampler::batch)
      .def_prop_ro("vocab", &Sampler::vocab);
}

} // namespace hybridgen::python
