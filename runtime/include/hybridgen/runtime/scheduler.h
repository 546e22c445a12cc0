// Split-point schedulers: static, feedback (default) and the analytic oracle.
#pragma once

#include "hybridgen/runtime/status.h"

#include <cstdint>
#include <map>

namespace hybridgen::rt {

/// Measured times of one run of a compiled segment. |transferSeconds| is the q copy to the host and
/// the partials back: it sits on the CPU side's critical path (only paid when the CPU has tokens).
struct SegmentTiming {
  double cpuSeconds = 0;
  double gpuSeconds = 0;
  double transferSeconds = 0;
  int64_t contextTokens = 0; // tokens per sequence the segment attended over (longest in the batch)
  int64_t splitUsed = 0;     // the split point the segment ran with
};

/// Linear per-side cost: side time = fixed + perToken * tokens on that side (0 when it has none).
struct CostModel {
  double cpuFixed = 0, cpuPerToken = 0;
  double gpuFixed = 0, gpuPerToken = 0;
  double transfer = 0; // added to the CPU side when it has tokens

  /// kInvalidArgument when a cost is negative, NaN or infinite.
  Status validate() const;

  /// Step time (the slower side) at split |split| of |tokens|.
  double stepTime(int64_t split, int64_t tokens) const;
};

/// A starting model from bandwidths (per-token cost = bytes per token / read bandwidth), for the
/// feedback policy's first step before anything was measured.
CostModel bandwidthPrior(double bytesPerToken, double hostGBs, double hbmGBs, double gpuFixed = 0);

/// The split in [0, tokens], a multiple of |quantum| (or tokens itself), minimizing stepTime.
int64_t balancedSplit(const CostModel &m, int64_t tokens, int64_t quantum);

enum class SchedulerPolicy : int32_t { kStatic = 0, kFeedback = 1, kOracle = 2 };
const char *schedulerPolicyName(SchedulerPolicy p);

struct SchedulerConfig {
  SchedulerPolicy policy = SchedulerPolicy::kFeedback;
  int64_t staticSplit = 0;       // kStatic: tokens on the first device
  int64_t quantum = 16;          // split granularity, normally the block size
  double smoothing = 0.6;        // EMA weight of the newest per-token cost sample
  double damping = 0.8;          // fraction of the distance to the balanced split moved per step
  /// Tokens per sequence the second device's memory can hold for this segment (HBM budget); the
  /// split never leaves it more (split >= context - capacity). 0 = unlimited. Not for kStatic.
  int64_t secondDeviceCapacityTokens = 0;
  int32_t probeInterval = 16;    // steps at an end (one side idle) before probing the balance again;
                                 // doubles after each probe that confirms the idle side, up to 4x
  double initialFraction = 0.5;  // first split as a fraction of the context when no prior is known
  /// Prior costs (feedback starts from them; the oracle takes them as the truth). Zero per-token
  /// costs mean unknown. Feedback learns per-token costs and keeps the prior's fixed costs: its
  /// model line always passes through the last measured point, so the balance it converges to is
  /// exact even when the fixed costs are off (they only shift the decision to idle a side).
  CostModel prior;

  /// kInvalidArgument naming the first field out of range: quantum <= 0, smoothing or damping outside
  /// (0, 1], initialFraction outside [0, 1], a negative split or capacity, probeInterval <= 0, a
  /// negative or non-finite prior cost, an unknown policy. Every entry point that takes a config
  /// from a user (Scheduler::create, SchedulerContext::create, the Python bindings) checks it.
  Status validate() const;
};

/// Per-segment split decisions. Not thread-safe by itself; SchedulerContext serializes calls.
class Scheduler {
public:
  /// |cfg| should pass validate() (use create() for configs from users). Even one that does not
  /// never causes undefined behaviour: degenerate values are treated as their nearest valid ones.
  explicit Scheduler(SchedulerConfig cfg = {}) : cfg_(cfg) {}
  static Result<Scheduler> create(SchedulerConfig cfg);
  const SchedulerConfig &config() const { return cfg_; }

  /// Split point for the next run of |segment| over |contextTokens| tokens.
  int64_t split(int64_t segment, int64_t contextTokens);
  /// Feeds a measurement of |segment| back (feedback policy learns from it; others ignore it).
  void observe(int64_t segment, const SegmentTiming &t);
  /// The current cost estimate of |segment| (the prior until it was observed).
  CostModel estimate(int64_t segment) const;
  /// Replaces the oracle's (and the feedback prior's) model, e.g. after calibration. A model with a
  /// negative or non-finite cost is refused (the old one stays).
  Status setModel(const CostModel &m);

private:
  struct State {
    CostModel model;
    double fraction = -1; // last split / context, the damped state
    int64_t idleSteps = 0; // consecutive steps with one side idle
    int64_t probeEvery = 0; // current probe interval (backs off while probes confirm idling)
  };
  State &state(int64_t segment);
  int64_t withinCapacity(int64_t split, int64_t contextTokens) const;
  int64_t quantum() const { return cfg_.quantum > 0 ? cfg_.quantum : 1; }
  SchedulerConfig cfg_;
  std::map<int64_t, State> states_;
};

} // namespace hybridgen::rt
