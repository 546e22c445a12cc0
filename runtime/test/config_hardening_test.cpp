// Hostile configuration (issue 17, item 5): tier files and fields, scheduler and placement settings,
// thread counts. Each is a clear Status (or a bounded, defined result), never UB or unbounded memory.
#include "test_util.h"

#include "hybridgen/runtime/context.h"
#include "hybridgen/runtime/scheduler.h"
#include "hybridgen/runtime/thread_plan.h"
#include "hybridgen/runtime/topology.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <limits>

using namespace hybridgen::rt;

namespace {

DiscoverOptions noProbe() {
  DiscoverOptions o;
  o.probeBandwidth = false;
  return o;
}

TEST(ConfigHardening, NumericTierFieldsAreParsedStrictly) {
  const char *bad[] = {
      "kind=dram,capacity=1M,node=nan",   "kind=dram,capacity=1M,node=1e300",
      "kind=dram,capacity=1M,node=-7",    "kind=dram,capacity=1M,node=2.5",
      "kind=dram,capacity=1M,node=",      "kind=dram,capacity=1M,node=99999999999999999999",
      "kind=dram,capacity=1M,bandwidth=nan", "kind=dram,capacity=1M,bandwidth=inf",
      "kind=dram,capacity=1M,bandwidth=-inf", "kind=dram,capacity=1M,bandwidth=1e400",
      "kind=dram,capacity=1M,bandwidth=0x10", "kind=dram,capacity=1M,bandwidth=-3",
      "kind=dram,capacity=99999999999999999999999T", "kind=dram,capacity=18446744073709551616",
      "kind=dram,capacity=1.2.3M",        "kind=dram,capacity=.",
      "kind=dram,capacity=1M,emulated=perhaps",
  };
  for (const char *cfg : bad) {
    auto t = Topology::fromConfig(cfg, noProbe());
    EXPECT_EQ(t.status().code(), ErrorCode::kInvalidArgument) << cfg;
  }
  // The exact edges still parse.
  EXPECT_EQ(*parseByteSize("18446744073709551615"), UINT64_MAX);
  auto ok = Topology::fromConfig("kind=dram,node=0,capacity=1M,bandwidth=12.5,emulated=no", noProbe());
  ASSERT_TRUE(ok.isOk()) << ok.status().message();
  EXPECT_DOUBLE_EQ(ok->tiers()[0].readGBs, 12.5);
}

TEST(ConfigHardening, ExplicitTiersWithNonFiniteBandwidthAreRefused) {
  for (double bw : {std::nan(""), std::numeric_limits<double>::infinity(), -1.0}) {
    TierInfo t;
    t.name = "x";
    t.capacityBytes = 1 << 20;
    t.readGBs = bw;
    EXPECT_EQ(Topology::fromTiers({t}, noProbe()).status().code(), ErrorCode::kInvalidArgument) << bw;
  }
}

TEST(ConfigHardening, TierFilesAreReadWithABound) {
  // /dev/zero was read without limit (10 GB of RSS); a FIFO without a writer blocked forever.
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Topology::fromConfigFile("/dev/zero", noProbe()).status().code(), ErrorCode::kInvalidArgument);
  char fifo[] = "/tmp/hg_tiers_fifo_XXXXXX";
  ASSERT_NE(mkdtemp(fifo), nullptr);
  std::string fifoPath = std::string(fifo) + "/tiers";
  ASSERT_EQ(mkfifo(fifoPath.c_str(), 0600), 0);
  EXPECT_EQ(Topology::fromConfigFile(fifoPath, noProbe()).status().code(), ErrorCode::kInvalidArgument);
  std::string big = std::string(fifo) + "/big";
  FILE *f = std::fopen(big.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("kind=dram,capacity=1M\n", f);
  std::fclose(f);
  ASSERT_EQ(truncate(big.c_str(), 64 << 20), 0); // sparse: 64 MiB of NULs after a valid line
  auto r = Topology::fromConfigFile(big, noProbe());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("limit"), std::string::npos) << r.status().message();
  EXPECT_EQ(Topology::fromConfigFile(fifo, noProbe()).status().code(), ErrorCode::kInvalidArgument); // a dir
  EXPECT_EQ(Topology::fromConfig(std::string(2 << 20, ';'), noProbe()).status().code(),
            ErrorCode::kInvalidArgument);
  unlink(fifoPath.c_str());
  unlink(big.c_str());
  rmdir(fifo);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(ConfigHardening, DegenerateSchedulerConfigsAreErrors) {
  std::vector<std::function<void(SchedulerConfig &)>> breakers = {
      [](SchedulerConfig &c) { c.quantum = 0; },
      [](SchedulerConfig &c) { c.quantum = -16; },
      [](SchedulerConfig &c) { c.smoothing = 0; },
      [](SchedulerConfig &c) { c.smoothing = std::nan(""); },
      [](SchedulerConfig &c) { c.damping = 1.5; },
      [](SchedulerConfig &c) { c.initialFraction = -0.1; },
      [](SchedulerConfig &c) { c.staticSplit = -1; },
      [](SchedulerConfig &c) { c.secondDeviceCapacityTokens = -5; },
      [](SchedulerConfig &c) { c.probeInterval = 0; },
      [](SchedulerConfig &c) { c.policy = SchedulerPolicy(9); },
      [](SchedulerConfig &c) { c.prior.cpuPerToken = std::numeric_limits<double>::infinity(); },
      [](SchedulerConfig &c) { c.prior.gpuFixed = -1; },
  };
  for (size_t i = 0; i < breakers.size(); ++i) {
    SchedulerConfig c;
    breakers[i](c);
    EXPECT_EQ(c.validate().code(), ErrorCode::kInvalidArgument) << "case " << i;
    EXPECT_FALSE(Scheduler::create(c).isOk()) << "case " << i;
    EXPECT_FALSE(SchedulerContext::create(c).isOk()) << "case " << i;
  }
  EXPECT_TRUE(SchedulerConfig{}.validate().isOk());
  PlacementConfig p;
  p.maxMigrationsPerStep = -1;
  EXPECT_EQ(SchedulerContext::create(SchedulerConfig{}, nullptr, p).status().code(), ErrorCode::kInvalidArgument);
  Scheduler s;
  CostModel nan;
  nan.cpuPerToken = std::nan("");
  EXPECT_FALSE(s.setModel(nan).isOk());
  EXPECT_EQ(s.config().prior.cpuPerToken, 0);
}

TEST(ConfigHardening, SchedulerMathStaysDefinedAtTheExtremes) {
  // Unvalidated configs and INT64_MAX contexts: results stay in [0, context] (run under UBSan too).
  SchedulerConfig c;
  c.quantum = 0;
  c.initialFraction = 1;
  Scheduler zero(c);
  int64_t got = zero.split(0, 1000);
  EXPECT_GE(got, 0);
  EXPECT_LE(got, 1000);
  c.quantum = 16;
  Scheduler full(c);
  EXPECT_EQ(full.split(0, INT64_MAX), INT64_MAX); // fraction 1 of INT64_MAX rounds past int64
  CostModel m;
  m.cpuPerToken = 1e-12;
  m.gpuPerToken = 1;
  int64_t b = balancedSplit(m, INT64_MAX, 16);
  EXPECT_GE(b, INT64_MAX - 16);
  EXPECT_EQ(m.stepTime(5, -5), 0.0);
  // A NaN or negative timing teaches nothing (it used to turn the model into NaN for good).
  Scheduler fb;
  SegmentTiming t;
  t.contextTokens = 1000;
  t.splitUsed = 500;
  t.cpuSeconds = std::nan("");
  t.gpuSeconds = 1e-3;
  fb.observe(0, t);
  t.cpuSeconds = -1;
  fb.observe(0, t);
  EXPECT_TRUE(std::isfinite(fb.estimate(0).cpuPerToken));
  EXPECT_TRUE(std::isfinite(fb.estimate(0).gpuPerToken));
  int64_t sp = fb.split(0, 1000);
  EXPECT_GE(sp, 0);
  EXPECT_LE(sp, 1000);
}

TEST(ConfigHardening, ThreadCountsAreBoundedByTheWork) {
  PoolConfig pc;
  pc.layout = test::smallLayout();
  auto pool = std::move(KvPool::create(test::makeTopology(test::threeTierConfig()), pc)).valueOrThrow();
  int64_t s = pool->createSequence();
  ASSERT_TRUE(pool->appendTokens(s, 16 * 5).isOk());
  auto start = std::chrono::steady_clock::now();
  ThreadPlan plan = planThreads(*pool, {s}, INT64_MAX, INT32_MAX); // used to build 2^31 entries
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_LE(plan.threads.size(), 5u);
  int64_t tokens = 0;
  for (const auto &w : plan.threads) {
    EXPECT_FALSE(w.items.empty());
    for (const auto &it : w.items)
      tokens += it.tokens;
  }
  EXPECT_EQ(tokens, 16 * 5);
  EXPECT_TRUE(planThreads(*pool, {s}, INT64_MIN, INT32_MIN).threads.empty());
}

} // namespace
