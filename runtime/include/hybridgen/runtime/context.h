// The scheduler context that the C ABI talks to, and the C++ API to install/uninstall it.
#pragma once

#include "hybridgen/runtime/kv_pool.h"
#include "hybridgen/runtime/placement.h"
#include "hybridgen/runtime/scheduler.h"
#include "hybridgen/runtime/trace.h"

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

namespace hybridgen::rt {

/// Holds a Scheduler, optionally a KvPool + PlacementPolicy, and the trace. All methods lock one
/// mutex, so OpenMP callers (and the C ABI) may call from any thread.
class SchedulerContext {
public:
  explicit SchedulerContext(SchedulerConfig cfg, KvPool *pool = nullptr, PlacementConfig placement = {});
  /// The constructor after validating both configs (SchedulerConfig::validate,
  /// PlacementConfig::validate): the way to build a context from user-supplied settings.
  static Result<std::shared_ptr<SchedulerContext>> create(SchedulerConfig cfg, KvPool *pool = nullptr,
                                                          PlacementConfig placement = {});

  /// Starts a decode step over sequences of at most |contextTokens| tokens (the split is decided per
  /// segment against this length).
  void beginStep(int64_t contextTokens);
  /// Ends the step: rebalances the pool toward the current split (bounded migrations) if a pool is
  /// attached. Returns the migrations done.
  Result<int64_t> endStep();
  int64_t step() const;

  /// For a pool with a tier in device memory. Neither side reads the other's memory (the CPU
  /// partial reads host memory, the GPU kernels device memory), so the split that runs must be the
  /// split that is placed. placeForStep decides one split for the whole step (the scheduler's
  /// split of |leadSegment|, which every segment then runs at: a model's layers have one shape),
  /// moves every block to its side before any kernel runs (no per-step bound) and returns the
  /// migrations. When the placement cannot follow (device memory full), the step runs on the CPU
  /// with every block moved to host memory. Until the next call, splitPoint returns that split.
  Result<int64_t> placeForStep(int64_t leadSegment = 0);
  /// Moves every block to host memory and pins the split past every token: before work that reads
  /// the whole cache on the CPU (chunked prefill). Returns the migrations.
  Result<int64_t> placeAllOnHost();

  //===--- what the C ABI calls ---===//
  int64_t splitPoint(int64_t segment);
  void segmentBegin(int64_t segment);
  void segmentEnd(int64_t segment);
  void deviceBegin(int64_t segment, int32_t device);
  void deviceEnd(int64_t segment, int32_t device);

  /// Overrides host-measured device time (e.g. from CUDA events) for the current run of |segment|.
  void recordDeviceTime(int64_t segment, int32_t device, double seconds);
  void recordTransfer(int64_t segment, double seconds);
  /// On a machine without |device| (the GPU here), its partial still runs, on the CPU, but the
  /// scheduler must balance against the real device: |seconds|(tokens on the device) replaces the
  /// measured time at each segment end, and the trace marks those rows in `modelled_devices` (bit 0 cpu, bit 1 gpu).
  /// Device 0 holds tokens [0, split), device 1 the rest (the [cpu, gpu] order). Empty = measured.
  void setDeviceTimeModel(int32_t device, std::function<double(int64_t tokens)> seconds);
  /// Feeds one run directly (no begin/end bracketing): scheduler + trace. Used by benches/tests.
  void recordSegment(int64_t segment, const SegmentTiming &t);

  /// Copies of the trace / current estimate (the context keeps running while you read them).
  Trace trace() const;
  TraceRow lastTraceRow() const; // a default row when the trace is empty
  CostModel estimate(int64_t segment) const;
  int64_t lastSplit(int64_t segment) const;
  /// The attached pool (nullptr when none); the C ABI's GPU batch check reads its tiers.
  KvPool *pool() const { return pool_; }

private:
  using Clock = std::chrono::steady_clock;
  struct Run {
    Clock::time_point begin, devBegin[2];
    double dev[2] = {0, 0};
    double transfer = 0;
    int64_t split = 0;
    bool active = false;
  };
  void finishLocked(int64_t segment, const SegmentTiming &t, double segmentSeconds);

  mutable std::mutex mu_;
  Scheduler sched_;
  KvPool *pool_;
  PlacementPolicy placement_;
  Trace trace_;
  std::map<int64_t, Run> runs_;
  int64_t contextTokens_ = 0;
  int64_t step_ = 0;
  int64_t lastMigrations_ = 0;
  int64_t currentSplit_ = 0; // the latest split handed out, used for placement
  int64_t pinnedSplit_ = -1; // >= 0: placeForStep's split, handed to every segment
  /// Moves every block to its side of |split| (unbounded); true when the placement then matches.
  Result<bool> placeExactlyLocked(int64_t split, int64_t &migrations);
  std::function<double(int64_t)> deviceModel_[2];
  int32_t modelledDevices_ = 0; // set by segmentEnd for the row finishLocked writes
};

/// Makes |ctx| the process-global context the C ABI uses (replacing any previous one).
void installContext(std::shared_ptr<SchedulerContext> ctx);
void uninstallContext();
std::shared_ptr<SchedulerContext> installedContext();

} // namespace hybridgen::rt
