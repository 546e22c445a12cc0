// Memory tiers of this machine: discovered with libnuma, or described by a config string/file.
#pragma once

#include "hybridgen/runtime/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hybridgen::rt {

/// HBM is read by the GPU, DRAM and far memory (CXL: CPU-less NUMA nodes) by the CPU.
enum class TierKind : int32_t { kHbm = 0, kDram = 1, kFar = 2 };
const char *tierKindName(TierKind k);

/// Where a tier's bandwidth figure came from (so reports never pass a guess off as a measurement).
enum class BandwidthSource : int32_t { kConfig = 0, kMeasured = 1, kModelled = 2 };
const char *bandwidthSourceName(BandwidthSource s);

struct TierInfo {
  std::string name;           // unique, e.g. "hbm", "dram0", "cxl"
  TierKind kind = TierKind::kDram;
  int32_t numaNode = -1;      // memory node backing the tier; -1 = not NUMA-bound
  int32_t readerNode = -1;    // node with CPUs whose threads read this tier (nearest by distance)
  int32_t distance = 10;      // numa_distance(readerNode, numaNode); 10 = local
  uint64_t capacityBytes = 0; // budget for KV (K+V of all layers)
  double readGBs = 0;         // read bandwidth of the readers, GB/s
  BandwidthSource bandwidthSource = BandwidthSource::kConfig;
  /// True when the tier is not what its kind claims: HBM without a CUDA backend (host memory), or
  /// far memory placed on a node that has CPUs. Reported everywhere the tier is printed.
  bool emulated = false;
  /// HBM only: the config asked for the GPU's memory (`device=cuda`). The tier is then real when a
  /// CUDA device is usable (`onDevice`), and the emulated host tier otherwise (the CPU fallback).
  bool wantsDevice = false;
  bool onDevice = false; // the tier's blocks live in device memory (set by the topology)

  bool hostAccessible() const { return kind != TierKind::kHbm || emulated; }
};

struct NumaNodeInfo {
  int32_t id = 0;
  bool hasCpus = false;
  std::vector<int32_t> cpus;
};

struct DiscoverOptions {
  bool probeBandwidth = true;       // run the short read probe for tiers without a configured figure
  uint64_t probeBytes = 64ull << 20;
  uint64_t defaultCapacityBytes = 1ull << 30; // libnuma's node sizes are unreliable: never size from them
  double modelledHbmGBs = 4800;     // H200 published figure, used for emulated HBM without config
};

class Topology {
public:
  /// One tier per NUMA node: DRAM for nodes with CPUs, far memory for CPU-less ones.
  static Result<Topology> discover(const DiscoverOptions &opts = {});
  /// Parses tiers from text: entries separated by ';' or newlines, fields `key=value` separated by
  /// ',', `#` starts a comment. Keys: name, kind (hbm|dram|far|cxl), node, capacity (bytes with
  /// optional K/M/G/KiB/MiB/GiB suffix), bandwidth (GB/s), emulated (0|1). See docs/runtime.md.
  static Result<Topology> fromConfig(const std::string &text, const DiscoverOptions &opts = {});
  static Result<Topology> fromConfigFile(const std::string &path, const DiscoverOptions &opts = {});
  /// HYBRIDGEN_TIERS (config text) or HYBRIDGEN_TIERS_FILE (path); otherwise discover().
  static Result<Topology> fromEnvironment(const DiscoverOptions &opts = {});

  /// Tiers in placement order: HBM first, then host tiers by decreasing read bandwidth.
  const std::vector<TierInfo> &tiers() const { return tiers_; }
  const std::vector<NumaNodeInfo> &nodes() const { return nodes_; }
  int32_t tierCount() const { return int32_t(tiers_.size()); }
  int32_t findTier(const std::string &name) const; // -1 if absent
  /// Multi-line human-readable summary; emulated tiers and modelled figures are labelled.
  std::string describe() const;

  /// Builds from explicit tiers (validates, fills reader nodes, sorts). Used by the parsers.
  static Result<Topology> fromTiers(std::vector<TierInfo> tiers, const DiscoverOptions &opts);

private:
  std::vector<TierInfo> tiers_;
  std::vector<NumaNodeInfo> nodes_;
};

/// Measures read bandwidth (GB/s) of memory on |memNode| read by threads running on |cpuNode|.
/// Returns 0 if libnuma is unavailable or the node cannot be used.
double probeReadBandwidth(int32_t memNode, int32_t cpuNode, uint64_t bytes);

/// Decides what an HBM tier is: with `wantsDevice` and a usable CUDA device, device memory
/// (`onDevice`; capacity 0 = 90% of the device's free memory); otherwise the emulated host tier.
/// Implemented in lib/cuda/device_tier.cpp.
Status resolveHbmTier(TierInfo &tier);

/// Parses "64MiB", "1G", "4096" into bytes.
Result<uint64_t> parseByteSize(const std::string &text);

} // namespace hybridgen::rt
