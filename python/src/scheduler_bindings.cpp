// Bindings of the feedback scheduler: configs, the context the compiled code's C ABI talks to, trace.
#include "bindings.h"

#include "hybridgen/runtime/c_api.h"
#include "hybridgen/runtime/context.h"

#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <string>

namespace nb = nanobind;
using namespace hybridgen::rt;

namespace hybridgen::python {

namespace {
bool finiteNonNegative(double x) { return std::isfinite(x) && x >= 0; }
} // namespace

void bindScheduler(nb::module_ &m) {
  nb::enum_<SchedulerPolicy>(m, "SchedulerPolicy")
      .value("static", SchedulerPolicy::kStatic)
      .value("feedback", SchedulerPolicy::kFeedback)
      .value("oracle", SchedulerPolicy::kOracle);

  nb::class_<CostModel>(m, "CostModel", "Linear per-side cost: fixed + per_token * tokens.")
      .def(nb::init<>())
      .def_rw("cpu_fixed", &CostModel::cpuFixed)
      .def_rw("cpu_per_token", &CostModel::cpuPerToken)
      .def_rw("gpu_fixed", &CostModel::gpuFixed)
      .def_rw("gpu_per_token", &CostModel::gpuPerToken)
      .def_rw("transfer", &CostModel::transfer)
      .def("step_time", &CostModel::stepTime, nb::arg("split"), nb::arg("tokens"));

  nb::class_<SchedulerConfig>(m, "SchedulerConfig")
      .def(nb::init<>())
      .def_rw("policy", &SchedulerConfig::policy)
      .def_rw("static_split", &SchedulerConfig::staticSplit)
      .def_rw("quantum", &SchedulerConfig::quantum)
      .def_rw("smoothing", &SchedulerConfig::smoothing)
      .def_rw("damping", &SchedulerConfig::damping)
      .def_rw("initial_fraction", &SchedulerConfig::initialFraction)
      .def_rw("second_device_capacity_tokens", &SchedulerConfig::secondDeviceCapacityTokens)
      .def_rw("prior", &SchedulerConfig::prior);

  nb::class_<PlacementConfig>(m, "PlacementConfig")
      .def(nb::init<>())
      .def_rw("sink_tokens", &PlacementConfig::sinkTokens)
      .def_rw("recent_tokens", &PlacementConfig::recentTokens)
      .def_rw("use_hits", &PlacementConfig::useHits)
      .def_rw("max_migrations_per_step", &PlacementConfig::maxMigrationsPerStep);

  nb::class_<SchedulerContext>(m, "SchedulerContext",
                               "Scheduler + optional pool + trace; install() it so compiled code "
                               "reads its split points and feeds it timings.")
      // keep_alive: the context keeps a raw pointer to the pool, so the pool must outlive it.
      .def(
          "__init__",
          [](SchedulerContext *self, const SchedulerConfig &cfg, KvPool *pool, const PlacementConfig &pc) {
            // Validated here, not later: quantum = 0, a NaN smoothing or a negative budget is an
            // error at construction, never a division by zero in a decode step.
            throwIfError(cfg.validate());
            throwIfError(pc.validate());
            new (self) SchedulerContext(cfg, pool, pc);
          },
          nb::arg("config"), nb::arg("pool").none() = nb::none(), nb::arg("placement") = PlacementConfig(),
          nb::keep_alive<1, 3>())
      .def(
          "begin_step",
          [](SchedulerContext &c, int64_t contextTokens) {
            if (contextTokens < 0)
              throwArgument("context_tokens must be >= 0, got " + std::to_string(contextTokens));
            c.beginStep(contextTokens);
          },
          nb::arg("context_tokens"))
      .def("end_step", [](SchedulerContext &c) { return std::move(c.endStep()).valueOrThrow(); },
           "Ends the step; rebalances the pool toward the split; returns the migrations done.")
      .def_prop_ro("step", &SchedulerContext::step)
      .def("split_point", &SchedulerContext::splitPoint, nb::arg("segment"))
      .def("segment_begin", &SchedulerContext::segmentBegin, nb::arg("segment"))
      .def("segment_end", &SchedulerContext::segmentEnd, nb::arg("segment"))
      .def("device_begin", &SchedulerContext::deviceBegin, nb::arg("segment"), nb::arg("device"))
      .def("device_end", &SchedulerContext::deviceEnd, nb::arg("segment"), nb::arg("device"))
      .def(
          "record_device_time",
          [](SchedulerContext &c, int64_t segment, int32_t device, double seconds) {
            if (device < 0 || device > 1)
              throwArgument("device must be 0 (cpu) or 1 (gpu)");
            if (!finiteNonNegative(seconds))
              throwArgument("seconds must be finite and >= 0");
            c.recordDeviceTime(segment, device, seconds);
          },
          nb::arg("segment"), nb::arg("device"), nb::arg("seconds"))
      .def(
          "record_transfer",
          [](SchedulerContext &c, int64_t segment, double seconds) {
            if (!finiteNonNegative(seconds))
              throwArgument("seconds must be finite and >= 0");
            c.recordTransfer(segment, seconds);
          },
          nb::arg("segment"), nb::arg("seconds"))
      .def(
          "set_linear_device_model",
          [](SchedulerContext &c, int32_t device, double fixedSeconds, double perTokenSeconds) {
            if (device < 0 || device > 1)
              throw Error(invalidArgument("device must be 0 (cpu) or 1 (gpu)"));
            if (!finiteNonNegative(fixedSeconds) || !finiteNonNegative(perTokenSeconds))
              throwArgument("fixed_seconds and per_token_seconds must be finite and >= 0");
            // A C++ closure, not a Python callable: segment ends run inside compiled code with
            // the GIL released.
            c.setDeviceTimeModel(device, [=](int64_t tokens) {
              return tokens > 0 ? fixedSeconds + perTokenSeconds * double(tokens) : 0.0;
            });
          },
          nb::arg("device"), nb::arg("fixed_seconds"), nb::arg("per_token_seconds"),
          "Replaces the device's measured time by fixed + per_token * tokens (marked in the trace's "
          "modelled_devices column).")
      .def(
          "record_segment",
          [](SchedulerContext &c, int64_t segment, double cpu, double gpu, double transfer,
             int64_t contextTokens, int64_t splitUsed) {
            if (!finiteNonNegative(cpu) || !finiteNonNegative(gpu) || !finiteNonNegative(transfer))
              throwArgument("cpu_seconds, gpu_seconds and transfer_seconds must be finite and >= 0");
            if (contextTokens < 0 || splitUsed < 0)
              throwArgument("context_tokens and split_used must be >= 0");
            SegmentTiming t;
            t.cpuSeconds = cpu;
            t.gpuSeconds = gpu;
            t.transferSeconds = transfer;
            t.contextTokens = contextTokens;
            t.splitUsed = splitUsed;
            c.recordSegment(segment, t);
          },
          nb::arg("segment"), nb::arg("cpu_seconds"), nb::arg("gpu_seconds"),
          nb::arg("transfer_seconds"), nb::arg("context_tokens"), nb::arg("split_used"))
      .def("estimate", &SchedulerContext::estimate, nb::arg("segment"))
      .def("last_split", &SchedulerContext::lastSplit, nb::arg("segment"))
      .def(
          "trace_columns",
          [](const SchedulerContext &c) {
            // Plain lists: the Python layer turns them into numpy arrays (the trace is small).
            Trace t = c.trace();
            nb::dict d;
            for (const std::string &name : t.columnNames())
              d[name.c_str()] = t.column(name);
            return d;
          },
          "The per-step trace as {column name: [values]} (a snapshot).")
      .def("trace_csv", [](const SchedulerContext &c) { return c.trace().toCsv(); })
      .def("trace_len", [](const SchedulerContext &c) { return c.trace().size(); });

  m.def("install_context", &installContext, nb::arg("context"),
        "Makes the context the one compiled code's hgrt_* calls use (process-global).");
  m.def("uninstall_context", &uninstallContext);
  m.def("installed_context", &installedContext);
  // The C ABI itself, so Python can check what compiled code would see.
  m.def("hgrt_split_point", &hgrt_split_point, nb::arg("segment"));
}

} // namespace hybridgen::python
