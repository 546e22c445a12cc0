// The C ABI: forwards to the installed SchedulerContext; swallows every exception.
#include "hybridgen/runtime/c_api.h"
#include "hybridgen/runtime/context.h"
#include "hybridgen/runtime/cuda/device.h"
#include "hybridgen/runtime/cuda/gpu_runtime.h"

#include <climits>
#include <cstdio>

using hybridgen::rt::installedContext;

extern "C" {

int64_t hgrt_split_point(int64_t segment_id) {
  try {
    if (auto ctx = installedContext())
      return ctx->splitPoint(segment_id);
  } catch (...) {
  }
  return INT64_MAX;
}

void hgrt_segment_begin(int64_t segment_id) {
  try {
    if (auto ctx = installedContext())
      ctx->segmentBegin(segment_id);
  } catch (...) {
  }
}

void hgrt_segment_end(int64_t segment_id) {
  try {
    // Kernel time from CUDA events replaces the host-measured GPU bracket (which only saw the
    // asynchronous launches).
    double gpuSeconds = hybridgen::rt::cuda::gpuTimerCollect(segment_id);
    if (auto ctx = installedContext()) {
      if (gpuSeconds >= 0)
        ctx->recordDeviceTime(segment_id, 1, gpuSeconds);
      ctx->segmentEnd(segment_id);
    }
  } catch (...) {
  }
}

void hgrt_device_begin(int64_t segment_id, int32_t device) {
  try {
    if (auto ctx = installedContext())
      ctx->deviceBegin(segment_id, device);
    if (device == 1)
      hybridgen::rt::cuda::gpuTimerBegin(segment_id);
  } catch (...) {
  }
}

void hgrt_device_end(int64_t segment_id, int32_t device) {
  try {
    if (auto ctx = installedContext())
      ctx->deviceEnd(segment_id, device);
    if (device == 1)
      hybridgen::rt::cuda::gpuTimerEnd(segment_id);
  } catch (...) {
  }
}

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
