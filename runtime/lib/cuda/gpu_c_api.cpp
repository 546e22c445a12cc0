// The GPU entries of the C ABI (c_api.h): device availability, pool-array aliases, batch checks.
#include "hybridgen/runtime/c_api.h"
#include "hybridgen/runtime/context.h"
#include "hybridgen/runtime/cuda/device.h"
#include "hybridgen/runtime/cuda/gpu_runtime.h"

#include <cstdio>

using hybridgen::rt::installedContext;

extern "C" {

int32_t hgrt_gpu_available(void) {
  try {
    return hybridgen::rt::cuda::processDevice() ? 1 : 0;
  } catch (...) {
  }
  return 0;
}

int32_t hgrt_gpu_check_batch(const int32_t *block_table, const int32_t *lens, int64_t batch,
                             int64_t max_blocks, int64_t block_size, int64_t split) {
  try {
    auto ctx = installedContext();
    hybridgen::rt::Status s = hybridgen::rt::cuda::checkGpuBatch(ctx ? ctx->pool() : nullptr, block_table, lens,
                                                                 batch, max_blocks, block_size, split);
    if (s)
      return 1;
    std::fprintf(stderr, "hybridgen: %s\n", s.message().c_str());
  } catch (...) {
  }
  return 0;
}

void *hgrt_gpu_alias(const void *host_ptr) {
  try {
    return reinterpret_cast<void *>(uintptr_t(hybridgen::rt::cuda::deviceAlias(host_ptr)));
  } catch (...) {
  }
  return nullptr;
}

} // extern "C"
