// Topology discovery with libnuma, validation of configured tiers, and the printable summary.
#include "hybridgen/runtime/topology.h"

#include <numa.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

namespace hybridgen::rt {

const char *tierKindName(TierKind k) {
  switch (k) {
  case TierKind::kHbm: return "hbm";
  case TierKind::kDram: return "dram";
  case TierKind::kFar: return "far";
  }
  return "?";
}

const char *bandwidthSourceName(BandwidthSource s) {
  switch (s) {
  case BandwidthSource::kConfig: return "config";
  case BandwidthSource::kMeasured: return "measured";
  case BandwidthSource::kModelled: return "modelled";
  }
  return "?";
}

namespace {

std::vector<NumaNodeInfo> readNodes() {
  std::vector<NumaNodeInfo> nodes;
  if (numa_available() < 0) {
    // No libnuma support (containers without NUMA syscalls): one CPU node 0 with no binding.
    nodes.push_back({0, true, {}});
    return nodes;
  }
  int maxNode = numa_max_node();
  struct bitmask *cpus = numa_allocate_cpumask();
  for (int n = 0; n <= maxNode; ++n) {
    if (!numa_bitmask_isbitset(numa_all_nodes_ptr, n))
      continue;
    NumaNodeInfo info;
    info.id = n;
    if (numa_node_to_cpus(n, cpus) == 0)
      for (unsigned c = 0; c < cpus->size; ++c)
        if (numa_bitmask_isbitset(cpus, c))
          info.cpus.push_back(int32_t(c));
    info.hasCpus = !info.cpus.empty();
    nodes.push_back(info);
  }
  numa_free_cpumask(cpus);
  return nodes;
}

int32_t distanceBetween(int32_t a, int32_t b) {
  if (a < 0 || b < 0 || numa_available() < 0)
    return 10;
  int d = numa_distance(a, b);
  return d > 0 ? d : 10;
}

/// The CPU node nearest to |memNode| (itself if it has CPUs).
int32_t nearestCpuNode(const std::vector<NumaNodeInfo> &nodes, int32_t memNode) {
  int32_t best = -1, bestDist = 1 << 30;
  for (const auto &n : nodes) {
    if (!n.hasCpus)
      continue;
    int32_t d = memNode < 0 ? 10 : distanceBetween(n.id, memNode);
    if (d < bestDist) {
      best = n.id;
      bestDist = d;
    }
  }
  return best < 0 ? 0 : best;
}

} // namespace

Result<Topology> Topology::fromTiers(std::vector<TierInfo> tiers, const DiscoverOptions &opts) {
  if (tiers.empty())
    return invalidArgument("topology: no tiers");
  Topology t;
  t.nodes_ = readNodes();
  std::set<std::string> names;
  for (auto &tier : tiers) {
    if (tier.name.empty())
      return invalidArgument("topology: a tier has no name");
    if (!names.insert(tier.name).second)
      return invalidArgument("topology: duplicate tier name '" + tier.name + "'");
    // HBM is real device memory only when asked for and a CUDA device is usable; capacity may
    // then come from the device.
    if (tier.kind == TierKind::kHbm)
      if (Status s = resolveHbmTier(tier); !s)
        return s;
    if (tier.capacityBytes == 0)
      return invalidArgument("topology: tier '" + tier.name + "' has zero capacity");
    if (tier.kind != TierKind::kHbm && tier.kind != TierKind::kDram && tier.kind != TierKind::kFar)
      return invalidArgument("topology: tier '" + tier.name + "' has an unknown kind");
    if (tier.numaNode < -1)
      return invalidArgument("topology: tier '" + tier.name + "' names NUMA node " +
                             std::to_string(tier.numaNode) + " (use -1 for none)");
    // Bandwidths divide byte counts everywhere downstream: NaN or infinity would poison every
    // estimate and every float-to-int conversion made from it. 0 means "not known: probe".
    if (!std::isfinite(tier.readGBs) || tier.readGBs < 0)
      return invalidArgument("topology: tier '" + tier.name + "' has read bandwidth " +
                             std::to_string(tier.readGBs) + " (needs a finite figure >= 0)");
    const NumaNodeInfo *node = nullptr;
    for (const auto &n : t.nodes_)
      if (n.id == tier.numaNode)
        node = &n;
    if (tier.numaNode >= 0 && !node)
      return invalidArgument("topology: tier '" + tier.name + "' names NUMA node " +
                             std::to_string(tier.numaNode) + " which does not exist");
    // Real far memory has no CPUs; far memory on a CPU node can only be an emulation.
    if (tier.kind == TierKind::kFar && (tier.numaNode < 0 || (node && node->hasCpus)))
      tier.emulated = true;
    tier.readerNode = nearestCpuNode(t.nodes_, tier.numaNode);
    tier.distance = distanceBetween(tier.readerNode, tier.numaNode);
    if (tier.readGBs <= 0) {
      if (tier.kind == TierKind::kHbm) {
        tier.readGBs = opts.modelledHbmGBs;
        tier.bandwidthSource = BandwidthSource::kModelled;
      } else if (opts.probeBandwidth) {
        tier.readGBs = probeReadBandwidth(std::max(tier.numaNode, 0), tier.readerNode, opts.probeBytes);
        tier.bandwidthSource = BandwidthSource::kMeasured;
      }
      if (tier.readGBs <= 0) {
        // Probe off or failed: a conservative DRAM-like guess, labelled modelled.
        tier.readGBs = tier.kind == TierKind::kFar ? 20 : 40;
        tier.bandwidthSource = BandwidthSource::kModelled;
      }
    }
  }
  // HBM first (the GPU side), then the host tiers fastest first: placement fills in this order.
  // (std::sort with the config index as tie-break: stable without libstdc++'s deprecated buffer.)
  std::vector<size_t> idx(tiers.size());
  for (size_t i = 0; i < idx.size(); ++i)
    idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t ia, size_t ib) {
    const TierInfo &a = tiers[ia], &b = tiers[ib];
    bool ah = a.kind == TierKind::kHbm, bh = b.kind == TierKind::kHbm;
    if (ah != bh)
      return ah;
    if (a.readGBs != b.readGBs)
      return a.readGBs > b.readGBs;
    return ia < ib;
  });
  std::vector<TierInfo> sorted;
  for (size_t i : idx)
    sorted.push_back(std::move(tiers[i]));
  tiers = std::move(sorted);
  t.tiers_ = std::move(tiers);
  return t;
}

Result<Topology> Topology::discover(const DiscoverOptions &opts) {
  std::vector<TierInfo> tiers;
  for (const auto &n : readNodes()) {
    TierInfo tier;
    tier.kind = n.hasCpus ? TierKind::kDram : TierKind::kFar;
    tier.name = std::string(n.hasCpus ? "dram" : "far") + std::to_string(n.id);
    tier.numaNode = numa_available() < 0 ? -1 : n.id;
    tier.capacityBytes = opts.defaultCapacityBytes;
    tiers.push_back(tier);
  }
  return fromTiers(std::move(tiers), opts);
}

int32_t Topology::findTier(const std::string &name) const {
  for (size_t i = 0; i < tiers_.size(); ++i)
    if (tiers_[i].name == name)
      return int32_t(i);
  return -1;
}

std::string Topology::describe() const {
  std::ostringstream os;
  for (size_t i = 0; i < tiers_.size(); ++i) {
    const auto &t = tiers_[i];
    char line[256];
    std::snprintf(line, sizeof line, "tier %zu %-8s kind=%s%s node=%d reader=%d dist=%d cap=%.1fMiB read=%.1fGB/s (%s)\n",
                  i, t.name.c_str(), tierKindName(t.kind),
                  t.emulated ? " [emulated]" : t.onDevice ? " [cuda]" : "",
                  t.numaNode, t.readerNode, t.distance, double(t.capacityBytes) / (1 << 20), t.readGBs,
                  bandwidthSourceName(t.bandwidthSource));
    os << line;
  }
  return os.str();
}

} // namespace hybridgen::rt
