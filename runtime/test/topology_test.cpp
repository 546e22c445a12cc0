// Tests for tier discovery and the explicit tier config.
#include "test_util.h"

#include "hybridgen/runtime/topology.h"

#include <cstdlib>

using namespace hybridgen::rt;

namespace {

TEST(Topology, ParsesThreeTierConfigInPlacementOrder) {
  Topology t = test::makeTopology("name=cxl,kind=cxl,node=0,capacity=2MiB,bandwidth=20;"
                                  "name=dram,kind=dram,capacity=4M,bandwidth=40;"
                                  "name=hbm,kind=hbm,capacity=1GiB");
  ASSERT_EQ(t.tierCount(), 3);
  EXPECT_EQ(t.tiers()[0].name, "hbm");
  EXPECT_EQ(t.tiers()[1].name, "dram");
  EXPECT_EQ(t.tiers()[2].name, "cxl");
  EXPECT_TRUE(t.tiers()[0].emulated);  // no CUDA backend
  EXPECT_FALSE(t.tiers()[1].emulated);
  EXPECT_TRUE(t.tiers()[2].emulated);  // far memory on a node with CPUs
  EXPECT_EQ(t.tiers()[0].bandwidthSource, BandwidthSource::kModelled);
  EXPECT_EQ(t.tiers()[1].capacityBytes, 4ull << 20);
  EXPECT_DOUBLE_EQ(t.tiers()[2].readGBs, 20);
  EXPECT_EQ(t.findTier("dram"), 1);
  EXPECT_EQ(t.findTier("nope"), -1);
  EXPECT_NE(t.describe().find("[emulated]"), std::string::npos);
}

TEST(Topology, BadConfigsAreErrorsNotAborts) {
  DiscoverOptions o;
  o.probeBandwidth = false;
  const char *bad[] = {
      "",                                              // nothing
      "kind=dram,capacity=1M,colour=red",              // unknown key
      "kind=ssd,capacity=1M",                          // unknown kind
      "capacity=1M",                                   // no kind
      "name=a,kind=dram,capacity=1M;name=a,kind=dram,capacity=1M", // duplicate
      "kind=dram,node=77,capacity=1M",                 // no such node
      "kind=dram,capacity=0",                          // no room
      "kind=dram,capacity=12XB",                       // bad size
      "kind=dram,capacity=1M,bandwidth=fast",          // bad number
  };
  for (const char *cfg : bad) {
    auto t = Topology::fromConfig(cfg, o);
    EXPECT_FALSE(t.isOk()) << cfg;
    EXPECT_EQ(t.status().code(), ErrorCode::kInvalidArgument) << cfg;
    EXPECT_FALSE(t.status().message().empty());
  }
  EXPECT_EQ(Topology::fromConfigFile("/nonexistent/tiers.cfg", o).status().code(), ErrorCode::kNotFound);
}

TEST(Topology, ParsesByteSizes) {
  EXPECT_EQ(*parseByteSize("4096"), 4096u);
  EXPECT_EQ(*parseByteSize("2K"), 2048u);
  EXPECT_EQ(*parseByteSize("3MiB"), 3ull << 20);
  EXPECT_EQ(*parseByteSize(" 1 GiB "), 1ull << 30);
  EXPECT_FALSE(parseByteSize("MiB").isOk());
}

TEST(Topology, DiscoversAtLeastOneHostTierWithMeasuredBandwidth) {
  DiscoverOptions o;
  o.probeBytes = 8ull << 20;
  auto t = Topology::discover(o);
  ASSERT_TRUE(t.isOk()) << t.status().message();
  ASSERT_GE(t->tierCount(), 1);
  EXPECT_EQ(t->tiers()[0].kind, TierKind::kDram);
  EXPECT_GT(t->tiers()[0].readGBs, 0);
}

TEST(Topology, EnvironmentOverridesDiscovery) {
  setenv("HYBRIDGEN_TIERS", "name=only,kind=dram,capacity=8M,bandwidth=12", 1);
  auto t = Topology::fromEnvironment();
  unsetenv("HYBRIDGEN_TIERS");
  ASSERT_TRUE(t.isOk()) << t.status().message();
  ASSERT_EQ(t->tierCount(), 1);
  EXPECT_EQ(t->tiers()[0].name, "only");
}

} // namespace
