// WeightArena: see weight_arena.h.
#include "weight_arena.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace hybridgen::rt::model {

namespace {
/// |n| rounded up to a multiple of |a| (a power of two), or false on overflow.
bool roundUp(size_t n, size_t a, size_t &out) {
  if (n > SIZE_MAX - (a - 1))
    return false;
  out = (n + a - 1) & ~(a - 1);
  return true;
}
} // namespace

WeightArena::~WeightArena() {
  for (Chunk &c : chunks_)
    ::munmap(c.mapping, c.mappingBytes);
}

size_t WeightArena::mappedBytes() const {
  size_t n = 0;
  for (const Chunk &c : chunks_)
    n += c.bytes;
  return n;
}

Result<WeightArena::Chunk> WeightArena::mapChunk(size_t bytes) {
  Chunk c;
  // One huge page more than needed, so that the chunk can start on a 2 MiB boundary.
  if (!roundUp(bytes, kHugePage, c.bytes) || c.bytes > SIZE_MAX - kHugePage)
    return invalidArgument("weight memory: " + std::to_string(bytes) + " bytes overflow the "
                           "address space");
  c.mappingBytes = c.bytes + kHugePage;
  void *p = ::mmap(nullptr, c.mappingBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return exhausted("weight memory: mmap of " + std::to_string(c.mappingBytes) +
                             " bytes failed: " + std::strerror(errno) +
                             " (RunnerOptions::mapWeights / --map-weights reads the weights "
                             "from the file's mapping instead)");
  c.mapping = p;
  auto addr = reinterpret_cast<uintptr_t>(p);
  c.begin = reinterpret_cast<char *>((addr + kHugePage - 1) & ~uintptr_t(kHugePage - 1));
  // Best effort: THP may be off ("never"), and then the memory is still fresh and in order.
  (void)::madvise(c.begin, c.bytes, MADV_HUGEPAGE);
  return c;
}

Result<void *> WeightArena::allocate(size_t bytes) {
  size_t need = 0;
  if (!roundUp(bytes == 0 ? 1 : bytes, kAlign, need))
    return invalidArgument("weight memory: a tensor of " + std::to_string(bytes) +
                           " bytes overflows the address space");
  if (chunks_.empty() || chunks_.back().bytes - chunks_.back().used < need) {
    // A tensor larger than a chunk gets its own (its tail is never touched, so it costs no
    // memory); smaller ones start a new shared chunk.
    Result<Chunk> c = mapChunk(need > kChunk ? need : kChunk);
    if (!c)
      return c.status();
    chunks_.push_back(*c);
  }
  Chunk &c = chunks_.back();
  void *p = c.begin + c.used;
  c.used += need;
  used_ += need;
  return p;
}

} // namespace hybridgen::rt::model
