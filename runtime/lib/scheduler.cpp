// Scheduler: smoothed per-token cost estimates, analytic balance, damped moves of the split.
#include "hybridgen/runtime/scheduler.h"

#include <algorithm>
#include <cmath>

namespace hybridgen::rt {

const char *schedulerPolicyName(SchedulerPolicy p) {
  switch (p) {
  case SchedulerPolicy::kStatic: return "static";
  case SchedulerPolicy::kFeedback: return "feedback";
  case SchedulerPolicy::kOracle: return "oracle";
  }
  return "?";
}

double CostModel::stepTime(int64_t split, int64_t tokens) const {
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
  x = std::clamp(x, 0.0, double(tokens));
  int64_t lo = int64_t(std::floor(x / double(quantum))) * quantum;
  int64_t cands[] = {0, tokens, lo, lo + quantum};
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
    return cfg_.staticSplit;
  if (contextTokens <= 0)
    return 0;
  if (cfg_.policy == SchedulerPolicy::kOracle)
    return withinCapacity(balancedSplit(cfg_.prior, contextTokens, cfg_.quantum), contextTokens);

  State &s = state(segment);
  const CostModel &m = s.model;
  const bool known = m.cpuPerToken > 0 && m.gpuPerToken > 0;
  const double q = double(cfg_.quantum);
  if (s.fraction < 0) {
    // First run: start from the prior's balance, or from a fixed fraction so both sides get measured.
    s.fraction = known ? double(balancedSplit(m, contextTokens, cfg_.quantum)) / double(contextTokens)
                       : cfg_.initialFraction;
  } else if (known) {
    // Solve for balance at the current length (tracks growth with no lag), then move part of the
    // way there (damping), and not at all inside one quantum (no dithering on noise).
    double target = double(balancedSplit(m, contextTokens, cfg_.quantum));
    double cur = s.fraction * double(contextTokens);
    double next = std::fabs(target - cur) < q ? cur : cur + cfg_.damping * (target - cur);
    if (target == 0 || target == double(contextTokens)) {
      // The ends are exact decisions (one side idle), not estimates to approach. An idle side is
      // never measured, so every probeInterval steps run once at the fixed-cost-free crossing to
      // learn whether the idle side has become worth using (costs change, sequences grow).
      next = target;
      if (s.probeEvery <= 0)
        s.probeEvery = cfg_.probeInterval;
      if (++s.idleSteps >= s.probeEvery) {
        // Every probe that ends back at the same end halves the probing rate (bounded): a probe
        // costs one slow step, so a confirmed decision should be re-checked less and less often.
        s.idleSteps = 0;
        s.probeEvery = std::min(2 * s.probeEvery, 4 * cfg_.probeInterval);
        next = double(contextTokens) * m.gpuPerToken / (m.cpuPerToken + m.gpuPerToken);
        next = std::max(next, q);
      }
    } else {
      s.idleSteps = 0;
      s.probeEvery = cfg_.probeInterval;
    }
    s.fraction = next / double(contextTokens);
  }
  double tokens = s.fraction * double(contextTokens);
  int64_t out = int64_t(std::llround(tokens / q)) * cfg_.quantum;
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
