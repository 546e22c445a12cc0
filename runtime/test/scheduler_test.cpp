// Tests for the split schedulers on synthetic cost models (fixed, growing, changing, noisy).
#include "hybridgen/runtime/scheduler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace hybridgen::rt;

namespace {

// A CPU ~100x slower per token than the GPU, with fixed costs on both sides (like the bench model).
CostModel truth() {
  CostModel m;
  m.cpuFixed = 20e-6;
  m.cpuPerToken = 100e-9;
  m.transfer = 15e-6;
  m.gpuFixed = 5e-6;
  m.gpuPerToken = 1e-9;
  return m;
}

SegmentTiming measure(const CostModel &m, int64_t split, int64_t len, double noise = 0, std::mt19937 *rng = nullptr) {
  std::uniform_real_distribution<double> u(1 - noise, 1 + noise);
  auto jitter = [&] { return rng ? u(*rng) : 1.0; };
  SegmentTiming t;
  int64_t c = std::min(split, len);
  t.cpuSeconds = c > 0 ? (m.cpuFixed + m.cpuPerToken * double(c)) * jitter() : 0;
  t.transferSeconds = c > 0 ? m.transfer : 0;
  t.gpuSeconds = len - c > 0 ? (m.gpuFixed + m.gpuPerToken * double(len - c)) * jitter() : 0;
  t.contextTokens = len;
  t.splitUsed = c;
  return t;
}

bool near(int64_t s, int64_t oracle, double tol, int64_t quantum) {
  return std::llabs(s - oracle) <= std::max<int64_t>(int64_t(tol * double(oracle)), quantum);
}

SchedulerConfig feedback() {
  SchedulerConfig c;
  c.quantum = 16;
  c.prior.cpuFixed = 20e-6; // fixed costs are known a priori; per-token costs are learnt
  c.prior.gpuFixed = 5e-6;
  return c;
}

TEST(Scheduler, BalancedSplitEqualizesSides) {
  CostModel m = truth();
  int64_t L = 131072, s = balancedSplit(m, L, 16);
  EXPECT_EQ(s % 16, 0);
  double cpu = m.cpuFixed + m.transfer + m.cpuPerToken * double(s);
  double gpu = m.gpuFixed + m.gpuPerToken * double(L - s);
  EXPECT_NEAR(cpu, gpu, 16 * m.cpuPerToken);
  // Short contexts: the CPU's fixed cost is not worth paying, all tokens go to the GPU.
  EXPECT_EQ(balancedSplit(m, 1000, 16), 0);
  EXPECT_EQ(balancedSplit(m, 0, 16), 0);
}

TEST(Scheduler, StaticAndOraclePolicies) {
  SchedulerConfig c;
  c.policy = SchedulerPolicy::kStatic;
  c.staticSplit = 777;
  Scheduler st(c);
  EXPECT_EQ(st.split(0, 5000), 777);
  c.policy = SchedulerPolicy::kOracle;
  c.prior = truth();
  Scheduler orc(c);
  EXPECT_EQ(orc.split(3, 65536), balancedSplit(truth(), 65536, c.quantum));
}

TEST(Scheduler, FeedbackConvergesWithinAFewSteps) {
  Scheduler s(feedback());
  const int64_t L = 65536, oracle = balancedSplit(truth(), L, 16);
  int steps = -1;
  for (int k = 0; k < 30; ++k) {
    int64_t sp = s.split(0, L);
    if (steps < 0 && near(sp, oracle, 0.05, 16))
      steps = k;
    s.observe(0, measure(truth(), sp, L));
  }
  EXPECT_GE(steps, 0);
  EXPECT_LE(steps, 8);
  EXPECT_TRUE(near(s.split(0, L), oracle, 0.01, 16));
  EXPECT_NEAR(s.estimate(0).cpuPerToken, truth().cpuPerToken, 1e-12);
}

TEST(Scheduler, TracksSequenceGrowth) {
  SchedulerConfig cfg = feedback();
  Scheduler s(cfg);
  double L = 4096;
  int misses = 0;
  for (int k = 0; k < 100; ++k, L *= std::pow(32.0, 1.0 / 100)) {
    int64_t len = int64_t(L), sp = s.split(0, len);
    // Short contexts keep the CPU idle; one step in probeInterval then probes it on purpose.
    if (k >= 10 && !near(sp, balancedSplit(truth(), len, 16), 0.05, 16))
      ++misses;
    s.observe(0, measure(truth(), sp, len));
  }
  EXPECT_LE(misses, 100 / cfg.probeInterval + 1);
}

TEST(Scheduler, IdleSideIsProbedAndPickedUpWhenItPays) {
  Scheduler s(feedback());
  CostModel m = truth();
  m.cpuPerToken = 100e-6; // CPU useless at first: the split goes to 0
  const int64_t L = 131072;
  for (int k = 0; k < 20; ++k) {
    int64_t sp = s.split(0, L);
    s.observe(0, measure(m, sp, L));
  }
  EXPECT_EQ(s.split(0, L), 0);
  m.cpuPerToken = 100e-9; // CPU gets 1000x faster while idle
  bool back = false;
  for (int k = 0; k < 80 && !back; ++k) { // within the backed-off probe interval (<= 4 x 16)
    int64_t sp = s.split(0, L);
    back = near(sp, balancedSplit(m, L, 16), 0.05, 16) && sp > 0;
    s.observe(0, measure(m, sp, L));
  }
  EXPECT_TRUE(back);
}

TEST(Scheduler, ReconvergesWhenCostsChange) {
  Scheduler s(feedback());
  CostModel m = truth();
  const int64_t L = 131072;
  int since = -1;
  for (int k = 0; k < 80; ++k) {
    if (k == 40)
      m.cpuPerToken *= 2; // e.g. another process starts streaming memory
    int64_t sp = s.split(0, L);
    if (k >= 40 && since < 0 && near(sp, balancedSplit(m, L, 16), 0.05, 16))
      since = k - 40;
    s.observe(0, measure(m, sp, L));
  }
  EXPECT_GE(since, 0);
  EXPECT_LE(since, 8);
}

TEST(Scheduler, NoisyMeasurementsDoNotOscillate) {
  Scheduler s(feedback());
  std::mt19937 rng(7);
  const int64_t L = 131072, oracle = balancedSplit(truth(), L, 16);
  int64_t prev = -1, reversals = 0, prevDelta = 0;
  for (int k = 0; k < 200; ++k) {
    int64_t sp = s.split(0, L);
    if (k >= 20) {
      EXPECT_TRUE(near(sp, oracle, 0.10, 16)) << "step " << k;
      int64_t d = sp - prev;
      if (d != 0 && prevDelta != 0 && (d > 0) != (prevDelta > 0) && std::llabs(d) > 32)
        ++reversals;
      if (d != 0)
        prevDelta = d;
    }
    prev = sp;
    s.observe(0, measure(truth(), sp, L, 0.05, &rng));
  }
  EXPECT_LT(reversals, 40); // big back-and-forth jumps stay rare under +-5% noise
}

TEST(Scheduler, SegmentsAreIndependent) {
  Scheduler s(feedback());
  CostModel slow = truth();
  slow.cpuPerToken *= 4;
  for (int k = 0; k < 20; ++k) {
    int64_t a = s.split(0, 65536), b = s.split(1, 65536);
    s.observe(0, measure(truth(), a, 65536));
    s.observe(1, measure(slow, b, 65536));
  }
  EXPECT_GT(s.split(0, 65536), s.split(1, 65536));
}

} // namespace

namespace {

// When the KV outgrows the GPU's memory budget, the tokens it cannot hold stay on the CPU side
// even though balancing alone would give the (much faster) GPU everything.
TEST(Scheduler, SecondDeviceCapacityIsAHardLimit) {
  for (SchedulerPolicy policy : {SchedulerPolicy::kFeedback, SchedulerPolicy::kOracle}) {
    SchedulerConfig cfg;
    cfg.policy = policy;
    cfg.prior = truth();
    cfg.secondDeviceCapacityTokens = 8192;
    Scheduler sched(cfg);
    for (int64_t len = 4096; len <= 65536; len += 4096) {
      int64_t s = sched.split(0, len);
      EXPECT_GE(s, len - 8192) << schedulerPolicyName(policy) << " at " << len;
      EXPECT_LE(s, len);
      sched.observe(0, measure(truth(), s, len));
    }
    // Below the budget nothing is forced: the fast GPU takes (nearly) everything.
    EXPECT_LT(sched.split(0, 4096), 4096);
  }
}

} // namespace
