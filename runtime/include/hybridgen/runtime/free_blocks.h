// The free block ids of one memory tier, handed out so that each sequence's blocks lie in runs of
// consecutive ids even when a batch grows in lockstep (one block of every sequence in turn).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hybridgen::rt {

/// Ids are grouped in aligned runs of kAllocRunBlocks from the tier's first id. A sequence's next
/// block is the id after its last one when that is free; otherwise (its first block included) the
/// first id of a run that is wholly free, so that a neighbour in the batch does not start right
/// after it; otherwise the lowest free id (nothing is reserved: every free block stays usable).
/// A batch grown in lockstep from an empty tier so spans batch x (blocks rounded up to a run).
/// Why: the dense CPU kernel read 0.02-0.04 less of the memory roof when the batch's blocks
/// alternated one by one than in runs of 16 (docs/cpu-runs.md, "Blocks in runs").
///
/// Lazy stacks: a block taken out of stack order (as a sequence's next id) leaves its entry behind,
/// and pops skip entries whose block or run is no longer free. O(1) amortized per call.
class FreeBlocks {
public:
  /// Run length in blocks: 16-token blocks make runs of 256 tokens.
  static constexpr int32_t kAllocRunBlocks = 16;

  FreeBlocks() = default;
  /// All of ids [first, first + count) free; the lowest ids are handed out first.
  FreeBlocks(int32_t first, int32_t count);

  int64_t size() const { return free_; }
  bool empty() const { return free_ == 0; }
  bool contains(int32_t id) const {
    return id >= first_ && id - first_ < int64_t(isFree_.size()) &&
           isFree_[std::size_t(id - first_)];
  }
  /// A free id for a sequence whose last block is |after| (-1: none, or one in another tier), as
  /// the class comment orders them; -1 when the tier is full.
  int32_t take(int32_t after = -1);
  /// Gives |id| back (it must be in this tier and taken).
  void release(int32_t id);

private:
  void markTaken(int32_t id);
  /// Pops |stack| down to its first entry for which |free| holds; -1 when none does.
  template <typename IsFree> static int32_t popFree(std::vector<int32_t> &stack, IsFree free);
  int32_t runOf(int32_t id) const { return (id - first_) / kAllocRunBlocks; }
  int32_t runLength(int32_t run) const;
  /// Rebuilds both stacks from the flags when stale entries outnumber the blocks.
  void compact();

  int32_t first_ = 0;
  int64_t free_ = 0;
  std::vector<uint8_t> isFree_;
  std::vector<int32_t> freeInRun_;
  std::vector<int32_t> ids_;  // stack of free ids (lowest on top), with stale entries
  std::vector<int32_t> runs_; // stack of wholly free runs (lowest on top), with stale entries
};

} // namespace hybridgen::rt
