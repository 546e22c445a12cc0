// Refuses a GPU partial's block table and lengths before launch: a kernel reading a block id
// outside the device tier would read unrelated device memory (or fault) instead of failing.
#include "hybridgen/runtime/cuda/gpu_runtime.h"
#include "hybridgen/runtime/kv_pool.h"

#include <cstdint>
#include <string>

namespace hybridgen::rt::cuda {

Status checkGpuBatch(const KvPool *pool, const int32_t *blockTable, const int32_t *lens, int64_t batch,
                     int64_t maxBlocks, int64_t blockSize, int64_t split) {
  if (batch <= 0 || maxBlocks <= 0 || blockSize <= 0)
    return invalidArgument("GPU batch: batch " + std::to_string(batch) + ", table width " +
                           std::to_string(maxBlocks) + " and block size " + std::to_string(blockSize) +
                           " must be positive");
  if (!blockTable || !lens)
    return invalidArgument("GPU batch: null block table or lengths");
  if (split < 0)
    return invalidArgument("GPU batch: negative split " + std::to_string(split));
  if (pool && blockSize != pool->layout().blockSize)
    return invalidArgument("GPU batch: block size " + std::to_string(blockSize) + " but the pool's is " +
                           std::to_string(pool->layout().blockSize));
  // maxBlocks * blockSize cannot overflow: a table this wide would not fit in memory anyway, but the
  // check costs nothing.
  if (maxBlocks > INT64_MAX / blockSize)
    return invalidArgument("GPU batch: table width times block size overflows");
  const int64_t capacity = maxBlocks * blockSize;
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t len = lens[i];
    if (len < 0 || len > capacity)
      return invalidArgument("GPU batch: sequence " + std::to_string(i) + " has length " + std::to_string(len) +
                             ", the table holds " + std::to_string(capacity) + " tokens");
    for (int64_t b = split / blockSize; b * blockSize < len; ++b) {
      int32_t id = blockTable[i * maxBlocks + b];
      bool valid = id >= 0 && (!pool || int64_t(id) < pool->numBlocks());
      if (!valid)
        return invalidArgument("GPU batch: sequence " + std::to_string(i) + " block " + std::to_string(b) +
                               " names id " + std::to_string(id) + ", outside the pool");
      if (pool) {
        int32_t tier = pool->tierOfBlock(id);
        if (tier < 0 || !pool->tierMemory(tier).onDevice())
          return invalidArgument("GPU batch: sequence " + std::to_string(i) + " block " + std::to_string(b) +
                                 " (id " + std::to_string(id) + ") is not in device memory" +
                                 (tier < 0 ? "" : " but in tier '" + pool->topology().tiers()[size_t(tier)].name + "'"));
      }
    }
  }
  return Status::ok();
}

} // namespace hybridgen::rt::cuda
