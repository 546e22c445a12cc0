// WeightArena: anonymous, huge-page-advised memory that the model runner copies its weights into.
//
// Why copy at all when the checkpoint is already mapped: the file's page-cache pages lie scattered
// over physical memory in 4 KiB pieces, and the matrix-vector products of decode, which read every
// weight once per token, stream them at about half the rate they get from freshly allocated memory
// (docs/models.md, "Weight memory"). Fresh anonymous memory advised MADV_HUGEPAGE comes in 2 MiB
// pages where THP is enabled, and in address order where it is not.
#pragma once

#include "hybridgen/runtime/status.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hybridgen::rt::model {

class WeightArena {
public:
  WeightArena() = default;
  WeightArena(const WeightArena &) = delete;
  WeightArena &operator=(const WeightArena &) = delete;
  ~WeightArena();

  /// |bytes| of zero-initialised memory aligned to kAlign, valid until the arena dies; a clear
  /// error (never a crash) when the size overflows or the system has no memory for it.
  Result<void *> allocate(size_t bytes);

  /// Bytes handed out so far (aligned sizes), and bytes mapped for them.
  size_t usedBytes() const { return used_; }
  size_t mappedBytes() const;

  static constexpr size_t kAlign = 64;           // a cache line: every vector load stays in one
  static constexpr size_t kHugePage = 2u << 20;  // chunks start on a 2 MiB boundary
  static constexpr size_t kChunk = 64u << 20;    // small tensors share chunks of this size

private:
  struct Chunk {
    void *mapping = nullptr;  // what munmap gets back
    size_t mappingBytes = 0;
    char *begin = nullptr;    // 2 MiB aligned
    size_t bytes = 0, used = 0;
  };
  Result<Chunk> mapChunk(size_t bytes);
  std::vector<Chunk> chunks_;
  size_t used_ = 0;
};

} // namespace hybridgen::rt::model
