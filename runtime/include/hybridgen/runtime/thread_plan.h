// Which CPU thread reads which KV blocks: work sized by tier bandwidth, threads pinned near the memory.
#pragma once

#include "hybridgen/runtime/kv_pool.h"

#include <cstdint>
#include <vector>

namespace hybridgen::rt {

/// One block's worth of CPU-side tokens: |tokens| rows starting at token |logical * blockSize|.
struct WorkItem {
  int32_t batchIndex = 0; // index into the batch's sequence list
  int32_t logical = 0;    // logical block index in the sequence
  int32_t block = 0;      // pool block id
  int32_t tokens = 0;     // rows of the block that are CPU tokens (the last block may be partial)
};

struct ThreadWork {
  int32_t tier = -1;      // the tier this thread reads
  int32_t cpuNode = 0;    // node to pin to (the tier's reader node)
  double estSeconds = 0;  // bytes / (tier bandwidth shared by the tier's threads)
  std::vector<WorkItem> items;
};

struct ThreadPlan {
  std::vector<ThreadWork> threads;
  double estSeconds() const; // the slowest thread
};

/// Splits the CPU tokens [0, min(split, len)) of every sequence in |seqs| over |numThreads| threads:
/// each tier gets threads in proportion to its read time (bytes / bandwidth), every tier with work at
/// least one while threads last, and a tier's blocks are cut into equal-token contiguous chunks.
/// With fewer threads than tiers, a thread takes several tiers (longest-first).
ThreadPlan planThreads(const KvPool &pool, const std::vector<int64_t> &seqs, int64_t split, int32_t numThreads);

/// Restricts the calling thread to the CPUs of |node| (no-op without libnuma).
Status pinCurrentThreadToNode(int32_t node);

} // namespace hybridgen::rt
