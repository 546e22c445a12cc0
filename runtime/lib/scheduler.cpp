// Scheduler: smoothed per-token cost estimates, analytic balance, damped moves of the split.
#include "hybridgen/runtime/scheduler.h"

#include "hybridgen/runtime/checked.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace hybridgen::rt {

const char *schedulerPolicyName(SchedulerPolicy p) {
  switch (p) {
  case SchedulerPolicy::kStatic: return "static";
  case SchedulerPolicy::kFeedback: return "feedback";
  case SchedulerPolicy::kOracle: return "oracle";
  }
  return "?";
}

namespace {
bool nonNegativeFinite(double x) { return std::isfinite(x) && x >= 0; }

Status badField(const char *field, const std::string &value, const char *want) {
  return invalidArgument(std::string("scheduler: ") + field + " = " + value + "; needs " + want);
}
} // namespace

Status CostModel::validate() const {
  const std::pair<const char *, double> fields[] = {{"cpuFixed", cpuFixed}, {"cpuPerToken", cpuPerToken},
                                                    {"gpuFixed", gpuFixed}, {"gpuPerToken", gpuPerToken},
                                                    {"transfer", transfer}};
  for (const auto &f : fields)
    if (!nonNegativeFinite(f.second))
      return badField(f.first, std::to_string(f.second), "a finite cost >= 0");
  return Status::ok();
}

Status SchedulerConfig::validate() const {
  if (policy != SchedulerPolicy::kStatic && policy != SchedulerPolicy::kFeedback &&
      policy != SchedulerPolicy::kOracle)
    return badField("policy", std::to_string(int32_t(policy)), "static, feedback or oracle");
  if (quantum <= 0)
    return badField("quantum", std::to_string(quantum), "> 0 tokens");
  if (staticSplit < 0)
    return badField("staticSplit", std::to_string(staticSplit), ">= 0 tokens");
  if (!(smoothing > 0 && smoothing <= 1))
    return badField("smoothing", std::to_string(smoothing), "a weight in (0, 1]");
  if (!(damping > 0 && damping <= 1))
    return badField("damping", std::to_string(damping), "a fraction in (0, 1]");
  if (!(initialFraction >= 0 && initialFraction <= 1))
    return badField("initialFraction", std::to_string(initialFraction), "a fraction in [0, 1]");
  if (secondDeviceCapacityTokens < 0)
    return badField("secondDeviceCapacityTokens", std::to_string(secondDeviceCapacityTokens),
                    ">= 0 (0 = unlimited)");
  if (probeInterval <= 0)
    return badField("probeInterval", std::to_string(probeInterval), "> 0 steps");
  return prior.validate();
}

Result<Scheduler> Scheduler::create(SchedulerConfig cfg) {
  Status s = cfg.validate();
  if (!s)
    return s;
  return Scheduler(cfg);
}

Status Scheduler::setModel(const CostModel &m) {
  Status s = m.validate();
  if (s)
    cfg_.prior = m;
  return s;
}

double CostModel::stepTime(int64_t split, int64_t tokens) const {
  if (tokens <= 0)
    return 0;
  int64_t c = std::clamp<int64_t>(split, 0, tokens), g = tokens - c;
  double cpu = c > 0 ? cpuFixed + transfer + cpuPerToken * double(c) : 0;
  double gpu = g > 0 ? gpuFixed + gpuPerToken * double(g) : 0;
  return std::max(cpu, gpu);
}

CostModel bandwidthPrior(double bytesPerToken, double hostGBs, double hbmGBs, double gpuFixed) {
  CostModel m;
  if (hostGBs > 0)
    m.cpuPerToken = bytesPerToken / (hostGBs * 1e9);
  if (hbmGBs > 0)
    m.gpuPerToken = bytesPerToken / (hbmGBs * 1e9);
  m.gpuFixed = gpuFixed;
  return m;
}

int64_t balancedSplit(const CostModel &m, int64_t tokens, int64_t quantum) {
  if (tokens <= 0)
    return 0;
  quantum = std::max<int64_t>(1, quantum);
  // Where the two linear sides cross; then the neighbouring quanta and the ends are candidates
  // (the ends matter because a side with no tokens also drops its fixed cost).
  double denom = m.cpuPerToken + m.gpuPerToken;
  double x = denom > 0 ? (m.gpuFixed + m.gpuPerToken * double(tokens) - m.cpuFixed - m.transfer) / denom : 0;
  if (!std::isfinite(x)) // costs that overflow to infinity compare nothing: start from the ends
    x = 0;
  x = std::clamp(x, 0.0, double(tokens));
  // double(tokens) may round up past INT64_MAX, and lo + quantum may not fit: saturate both.
  int64_t lo = std::min(saturatingInt64(std::floor(x / double(quantum))), tokens / quantum) * quantum;
  int64_t hi = 0;
  if (!checkedAdd(lo, quantum, &hi))
    hi = tokens;
  int64_t cands[] = {0, tokens, lo, hi};
  int64_t best = 0;
  double bestT = m.stepTime(0, tokens);
  for (int64_t c : cands) {
    c = std::clamp<int64_t>(c, 0, tokens);
    double t = m.stepTime(c, tokens);
    if (t < bestT) {
      bestT = t;
      best = c;
    }
  }
  return best;
}

Scheduler::State &Scheduler::state(int64_t segment) {
  auto it = states_.find(segment);
  if (it == states_.end())
    {
    State fresh;
    fresh.model = cfg_.prior;
    it = states_.emplace(segment, fresh).first;
  }
  return it->second;
}

CostModel Scheduler::estimate(int64_t segment) const {
  auto it = states_.find(segment);
  return it == states_.end() ? cfg_.prior : it->second.model;
}

int64_t Scheduler::split(int64_t segment, int64_t contextTokens) {
  if (cfg_.policy == SchedulerPolicy::kStatic)
    return std::max<int64_t>(cfg_.staticSplit, 0);
  if (contextTokens <= 0)
    return 0;
  const int64_t quant = quantum();
  if (cfg_.policy == SchedulerPolicy::kOracle)
    return withinCapacity(balancedSplit(cfg_.prior, contextTokens, quant), contextTokens);

  State &s = state(segment);
  const CostModel &m = s.model;
  const bool known = m.cpuPerToken > 0 && m.gpuPerToken > 0;
  const double q = double(quant);
  if (s.fraction < 0) {
    // First run: start from the prior's balance, or from a fixed fraction so both sides get measured.
    s.fraction = known ? double(balancedSplit(m, contextTokens, quant)) / double(contextTokens)
                       : std::clamp(cfg_.initialFraction, 0.0, 1.0);
  } else if (known) {
    // Solve for balance at the current length (tracks growth with no lag), then move part of the
    // way there (damping), and not at all inside one quantum (no dithering on noise).
    double target = double(balancedSplit(m, contextTokens, quant));
    double cur = s.fraction * double(contextTokens);
    double next = std::fabs(target - cur) < q ? cur : cur + cfg_.damping * (target - cur);
    if (target == 0 || target == double(contextTokens)) {
      // The ends are exact decisions (one side idle), not estimates to approach. An idle side is
      // never measured, so every probeInterval steps run once at the fixed-cost-free crossing to
      // learn whether the idle side has become worth using (costs change, sequences grow).
      next = target;
      const int64_t interval = std::max<int64_t>(cfg_.probeInterval, 1);
      if (s.probeEvery <= 0)
        s.probeEvery = interval;
      if (++s.idleSteps >= s.probeEvery) {
        // Every probe that ends back at the same end halves the probing rate (bounded): a probe
        // costs one slow step, so a confirmed decision should be re-checked less and less often.
        s.idleSteps = 0;
        s.probeEvery = std::min(2 * s.probeEvery, 4 * interval);
        next = double(contextTokens) * m.gpuPerToken / (m.cpuPerToken + m.gpuPerToken);
        next = std::max(next, q);
      }
    } else {
      s.idleSteps = 0;
      s.probeEvery = std::max<int64_t>(cfg_.probeInterval, 1);
    }
    s.fraction = std::isfinite(next) ? std::clamp(next / double(contextTokens), 0.0, 1.0) : 0.5;
  }
  // Round to whole quanta in double, then convert with saturation: near INT64_MAX tokens the
  // rounded product may exceed int64, and the clamp below brings it back to the context.
  double quanta = std::nearbyint(s.fraction * double(contextTokens) / q);
  int64_t out = 0;
  if (!checkedMul(saturatingInt64(quanta), quant, &out))
    out = contextTokens;
  return withinCapacity(std::clamp<int64_t>(out, 0, contextTokens), contextTokens);
}

int64_t Scheduler::withinCapacity(int64_t split, int64_t contextTokens) const {
  // The tokens the second device cannot hold must stay with the first: a hard limit, not a cost.
  if (cfg_.secondDeviceCapacityTokens <= 0)
    return split;
  return std::max(split, std::min(contextTokens, contextTokens - cfg_.secondDeviceCapacityTokens));
}

void Scheduler::observe(int64_t segment, const SegmentTiming &t) {
  if (cfg_.policy != SchedulerPolicy::kFeedback || t.contextTokens <= 0)
    return;
  // A NaN, infinite or negative time is not a measurement: learning from it would poison the
  // model (and every split computed from it) for good.
  if (!nonNegativeFinite(t.cpuSeconds) || !nonNegativeFinite(t.gpuSeconds) ||
      !nonNegativeFinite(t.transferSeconds))
    return;
  State &s = state(segment);
  CostModel &m = s.model;
  const double a = cfg_.smoothing;
  const int64_t c = std::clamp<int64_t>(t.splitUsed, 0, t.contextTokens), g = t.contextTokens - c;
  // EMA against noise, but a sample off by more than 2x is a regime change (or a probe of an idle
  // side): take it whole instead of creeping toward it.
  auto ema = [a](double &est, double sample) {
    bool jump = est <= 0 || sample > 2 * est || sample < 0.5 * est;
    est = jump ? sample : (1 - a) * est + a * sample;
  };
  // Per-token samples net of the known fixed costs; a side with no tokens teaches nothing.
  if (c > 0) {
    ema(m.cpuPerToken, std::max(t.cpuSeconds - m.cpuFixed, 1e-12) / double(c));
    m.transfer = m.transfer > 0 ? (1 - a) * m.transfer + a * t.transferSeconds : t.transferSeconds;
  }
  if (g > 0)
    ema(m.gpuPerToken, std::max(t.gpuSeconds - m.gpuFixed, 1e-12) / double(g));
  // Keep the damped state consistent with what actually ran (a caller may have overridden it).
  s.fraction = double(c) / double(t.contextTokens);
}

} // namespace hybridgen::rt
