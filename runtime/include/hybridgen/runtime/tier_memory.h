// How a tier's memory is provided: the seam where a CUDA HBM allocator plugs in later.
#pragma once

#include "hybridgen/runtime/status.h"
#include "hybridgen/runtime/topology.h"

#include <cstddef>
#include <memory>

namespace hybridgen::rt {

/// Each tier owns a contiguous block-id range of the pool. A host-accessible tier backs its range
/// with part of the pool's host mapping (bound to its NUMA node); a device tier (a future CUDA HBM
/// backend) would instead allocate device memory for its range and expose a device base pointer
/// offset so that `base + id * blockBytes` addresses the same ids.
class TierMemory {
public:
  virtual ~TierMemory() = default;
  virtual bool hostAccessible() const = 0;
  /// Places [p, p + bytes) of the pool's host mapping on this tier's memory (page-aligned range).
  virtual Status bindHostRange(void *p, size_t bytes) const = 0;
  /// Short label for reports, e.g. "numa:1" or "emulated-hbm(host)".
  virtual std::string label() const = 0;
};

/// NUMA-bound host memory for DRAM/far tiers; host memory labelled emulated for HBM without CUDA.
std::unique_ptr<TierMemory> makeTierMemory(const TierInfo &tier);

} // namespace hybridgen::rt
