// The C ABI: forwards to the installed SchedulerContext; swallows every exception.
#include "hybridgen/runtime/c_api.h"
#include "hybridgen/runtime/context.h"
#include "hybridgen/runtime/cuda/device.h"
#include "hybridgen/runtime/cuda/gpu_runtime.h"

#include <climits>

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

// Per thread: concurrent callers (two Python threads, two modules) never see each other's
// errors, and the kernels report from the thread that called them.
namespace {
thread_local hgrt_argument_error pendingArgumentError = {};
} // namespace

void hgrt_kernel_argument_error(int32_t kind, int64_t sequence, int64_t index, int64_t value,
                                int64_t limit) {
  hgrt_argument_error &rec = pendingArgumentError;
  if (rec.count++ == 0) {
    rec.kind = kind;
    rec.sequence = sequence;
    rec.index = index;
    rec.value = value;
    rec.limit = limit;
  }
}

int32_t hgrt_take_kernel_argument_error(hgrt_argument_error *out) {
  hgrt_argument_error rec = pendingArgumentError;
  pendingArgumentError = {};
  if (out)
    *out = rec;
  return rec.count > 0 ? 1 : 0;
}

} // extern "C"
