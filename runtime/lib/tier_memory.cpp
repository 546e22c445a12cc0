// TierMemory implementations: NUMA-bound host ranges (mbind, pinned for DMA with a GPU) and
// emulated HBM. The CUDA device tier is in lib/cuda/device_tier.cpp.
#include "hybridgen/runtime/tier_memory.h"
#include "hybridgen/runtime/cuda/gpu_runtime.h"

#include <numa.h>
#include <numaif.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace hybridgen::rt {

namespace {

class NumaTierMemory final : public TierMemory {
public:
  explicit NumaTierMemory(int32_t node) : node_(node) {}
  ~NumaTierMemory() override {
    for (void *p : pinned_)
      cuda::unpinHostRange(p);
  }
  bool hostAccessible() const override { return true; }
  Status bindHostRange(void *p, size_t bytes) const override {
    if (node_ < 0 || bytes == 0 || numa_available() < 0)
      return Status::ok(); // nothing to bind to: first-touch placement
    std::vector<unsigned long> mask(size_t(node_) / (8 * sizeof(unsigned long)) + 1, 0);
    mask[size_t(node_) / (8 * sizeof(unsigned long))] |= 1ul << (size_t(node_) % (8 * sizeof(unsigned long)));
    // MPOL_BIND (not PREFERRED): a block id must really live on its tier, or placement is a lie.
    if (mbind(p, bytes, MPOL_BIND, mask.data(), mask.size() * 8 * sizeof(unsigned long) + 1, 0) != 0)
      return systemError(std::string("mbind to node ") + std::to_string(node_) + " failed: " +
                         std::strerror(errno));
    return Status::ok();
  }
  std::string label() const override {
    return "numa:" + std::to_string(node_) + (pinned_.empty() ? "" : "(pinned)");
  }
  // With a device tier in the pool, migrations to and from HBM are DMA from these pages.
  Status attachArray(void *hostArray, size_t, size_t firstByte, size_t bytes, bool pinForDevice) override {
    if (!pinForDevice || bytes == 0)
      return Status::ok();
    void *p = static_cast<char *>(hostArray) + firstByte;
    if (Status s = cuda::pinHostRange(p, bytes); !s)
      return s;
    pinned_.push_back(p);
    return Status::ok();
  }

private:
  int32_t node_;
  std::vector<void *> pinned_;
};

class EmulatedHbmMemory final : public TierMemory {
public:
  bool hostAccessible() const override { return true; }
  Status bindHostRange(void *, size_t) const override { return Status::ok(); }
  std::string label() const override { return "emulated-hbm(host)"; }
};

} // namespace

Status TierMemory::copyToDevice(const std::vector<Copy> &, bool) const {
  return invalidArgument("tier memory " + label() + " is not on a device");
}
Status TierMemory::copyFromDevice(const std::vector<Copy> &, bool) const {
  return invalidArgument("tier memory " + label() + " is not on a device");
}
Status TierMemory::copyWithinDevice(size_t, size_t, size_t) const {
  return invalidArgument("tier memory " + label() + " is not on a device");
}

std::unique_ptr<TierMemory> makeTierMemory(const TierInfo &tier) {
  if (tier.kind == TierKind::kHbm && tier.onDevice)
    return cuda::makeDeviceTierMemory(tier);
  if (tier.kind == TierKind::kHbm)
    return std::make_unique<EmulatedHbmMemory>();
  return std::make_unique<NumaTierMemory>(tier.numaNode);
}

} // namespace hybridgen::rt
