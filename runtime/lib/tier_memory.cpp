// TierMemory implementations: NUMA-bound host ranges (mbind) and emulated HBM.
#include "hybridgen/runtime/tier_memory.h"

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
  std::string label() const override { return "numa:" + std::to_string(node_); }

private:
  int32_t node_;
};

class EmulatedHbmMemory final : public TierMemory {
public:
  bool hostAccessible() const override { return true; }
  Status bindHostRange(void *, size_t) const override { return Status::ok(); }
  std::string label() const override { return "emulated-hbm(host)"; }
};

} // namespace

std::unique_ptr<TierMemory> makeTierMemory(const TierInfo &tier) {
  if (tier.kind == TierKind::kHbm)
    return std::make_unique<EmulatedHbmMemory>(); // no CUDA backend in this build
  return std::make_unique<NumaTierMemory>(tier.numaNode);
}

} // namespace hybridgen::rt
