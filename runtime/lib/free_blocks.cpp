// One tier's free block ids, handed out in runs (free_blocks.h).
#include "hybridgen/runtime/free_blocks.h"

#include <algorithm>

namespace hybridgen::rt {

FreeBlocks::FreeBlocks(int32_t first, int32_t count) : first_(first) {
  isFree_.assign(size_t(count), 1);
  free_ = count;
  int32_t runs = int32_t((int64_t(count) + kAllocRunBlocks - 1) / kAllocRunBlocks);
  freeInRun_.resize(size_t(runs));
  for (int32_t r = 0; r < runs; ++r)
    freeInRun_[size_t(r)] = runLength(r);
  compact();
}

int32_t FreeBlocks::runLength(int32_t run) const {
  int64_t begin = int64_t(run) * kAllocRunBlocks;
  return int32_t(std::min<int64_t>(kAllocRunBlocks, int64_t(isFree_.size()) - begin));
}

void FreeBlocks::compact() {
  ids_.clear();
  runs_.clear();
  for (int64_t i = int64_t(isFree_.size()) - 1; i >= 0; --i) // lowest on top
    if (isFree_[size_t(i)])
      ids_.push_back(first_ + int32_t(i));
  for (int32_t r = int32_t(freeInRun_.size()) - 1; r >= 0; --r)
    if (freeInRun_[size_t(r)] == runLength(r))
      runs_.push_back(r);
}

void FreeBlocks::markTaken(int32_t id) {
  isFree_[size_t(id - first_)] = 0;
  --freeInRun_[size_t(runOf(id))];
  --free_;
}

template <typename IsFree>
int32_t FreeBlocks::popFree(std::vector<int32_t> &stack, IsFree free) {
  while (!stack.empty()) {
    int32_t entry = stack.back();
    stack.pop_back();
    if (free(entry))
      return entry;
  }
  return -1;
}

int32_t FreeBlocks::take(int32_t after) {
  if (free_ == 0)
    return -1;
  // The id after the sequence's last block (never past INT32_MAX: |after| is a valid id).
  if (after >= first_ && after < INT32_MAX && contains(after + 1)) {
    markTaken(after + 1);
    return after + 1;
  }
  auto wholeRun = [&](int32_t run) { return freeInRun_[size_t(run)] == runLength(run); };
  int32_t r = popFree(runs_, wholeRun);
  // Else the lowest free id: free_ > 0, so a free entry is on the stack.
  int32_t id = r >= 0 ? first_ + r * kAllocRunBlocks
                      : popFree(ids_, [&](int32_t i) { return contains(i); });
  if (id >= 0)
    markTaken(id);
  return id;
}

void FreeBlocks::release(int32_t id) {
  isFree_[size_t(id - first_)] = 1;
  ++free_;
  ids_.push_back(id);
  int32_t r = runOf(id);
  if (++freeInRun_[size_t(r)] == runLength(r))
    runs_.push_back(r);
  if (ids_.size() + runs_.size() > 2 * isFree_.size() + 64)
    compact();
}

} // namespace hybridgen::rt
