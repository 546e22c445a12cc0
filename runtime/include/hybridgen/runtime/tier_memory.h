// How a tier's memory is provided: NUMA-bound host ranges, emulated HBM, or CUDA device memory.
#pragma once

#include "hybridgen/runtime/status.h"
#include "hybridgen/runtime/topology.h"

#include <cstddef>
#include <memory>
#include <vector>

namespace hybridgen::rt {

/// Each tier owns a contiguous block-id range of the pool. A host-accessible tier backs its range
/// with part of the pool's host mapping (bound to its NUMA node); a device tier (CUDA HBM,
/// lib/cuda/device_tier.cpp) allocates device memory for its range of every pool array and
/// registers the alias `device_base = dev_ptr - first_byte` (hgrt_gpu_alias), so that
/// `device_base + id * blockBytes` addresses the same ids as the host array does.
class TierMemory {
public:
  virtual ~TierMemory() = default;
  virtual bool hostAccessible() const = 0;
  /// Places [p, p + bytes) of the pool's host mapping on this tier's memory (page-aligned range).
  virtual Status bindHostRange(void *p, size_t bytes) const = 0;
  /// Short label for reports, e.g. "numa:1", "emulated-hbm(host)" or "cuda:0 <name>".
  virtual std::string label() const = 0;

  /// Called once per pool array (layer 0 K, layer 0 V, layer 1 K, ...) after bindHostRange:
  /// [firstByte, firstByte + bytes) is this tier's range of the array at |hostArray|. Host tiers
  /// pin it for DMA when |pinForDevice| (the pool has a device tier); a device tier allocates its
  /// device twin.
  virtual Status attachArray(void *hostArray, size_t arrayBytes, size_t firstByte, size_t bytes,
                             bool pinForDevice) {
    (void)hostArray, (void)arrayBytes, (void)firstByte, (void)bytes, (void)pinForDevice;
    return Status::ok();
  }

  //===--- device tiers only: the pool's copies (all are checked before anything is copied) ---===//
  /// True when the tier's blocks live in device memory: the pool then never touches its part of
  /// the host arrays and moves data with the calls below.
  virtual bool onDevice() const { return false; }
  /// One piece of a copy: |bytes| at byte |offset| of pool array |array| <-> host memory |host|.
  struct Copy {
    int32_t array;
    size_t offset;
    void *host;
    size_t bytes;
  };
  /// Host -> device. |staged|: gather through the pinned staging buffer and merge pieces adjacent
  /// on the device (token rows); otherwise copy straight from |host| (pinned pool memory).
  virtual Status copyToDevice(const std::vector<Copy> &copies, bool staged) const;
  /// Device -> host, same meaning of |staged|.
  virtual Status copyFromDevice(const std::vector<Copy> &copies, bool staged) const;
  /// Device -> device inside every array: |bytes| from |srcOffset| to |dstOffset|.
  virtual Status copyWithinDevice(size_t dstOffset, size_t srcOffset, size_t bytes) const;
};

/// NUMA-bound host memory for DRAM/far tiers, CUDA device memory for an HBM tier that is
/// `onDevice`, and host memory labelled emulated for other HBM.
std::unique_ptr<TierMemory> makeTierMemory(const TierInfo &tier);

} // namespace hybridgen::rt
