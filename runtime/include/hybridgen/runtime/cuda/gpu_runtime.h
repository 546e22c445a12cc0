// What the C ABI and the mgpu* host ABI share: the registry of device aliases of host KV arrays
// and the CUDA-event timers behind hgrt_device_begin/end(segment, 1).
#pragma once

#include "hybridgen/runtime/cuda/driver_api.h"
#include "hybridgen/runtime/status.h"
#include "hybridgen/runtime/tier_memory.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace hybridgen::rt {
class KvPool;
}

namespace hybridgen::rt::cuda {

//===----------------------------------------------------------------------===//
// The HBM tier in device memory (device_tier.cpp)
//===----------------------------------------------------------------------===//

/// Device memory for the HBM tier |tier| (onDevice) on the process device; its attachArray fails
/// when no device is usable.
std::unique_ptr<TierMemory> makeDeviceTierMemory(const TierInfo &tier);
/// cuMemHostRegister on the process device (page-locks [p, p + bytes) for DMA).
Status pinHostRange(void *p, size_t bytes);
void unpinHostRange(void *p);

//===----------------------------------------------------------------------===//
// Device aliases of host arrays
//===----------------------------------------------------------------------===//

/// Declares that [hostBase, hostBase + bytes) (a KV pool layer array) has a device twin whose
/// byte i is at deviceBase + i. The device twin usually only exists for the HBM tier's id range;
/// deviceBase is then the (unallocated) address where byte 0 would be, so block ids index both.
/// Fails on an empty or overlapping range.
Status registerDeviceAlias(const void *hostBase, size_t bytes, CUdeviceptr deviceBase);
void unregisterDeviceAlias(const void *hostBase);
/// deviceBase + (host - hostBase) for the registered range containing |host|; 0 when none.
CUdeviceptr deviceAlias(const void *host);

//===----------------------------------------------------------------------===//
// GPU segment timing with CUDA events
//===----------------------------------------------------------------------===//

/// hgrt_device_begin(segment, 1): arms the segment's timer. The first kernel launched while it is
/// armed records the start event on its stream before the launch; every launch records the end
/// event after itself, so the measured span is first kernel start to last kernel end (copies of
/// q and partials are transfers, not GPU time). A no-op while no device is open.
void gpuTimerBegin(int64_t segment);
/// hgrt_device_end(segment, 1): disarms; the events stay pending until collected.
void gpuTimerEnd(int64_t segment);
/// Called by mgpuLaunchKernel around each launch on |stream|.
void gpuTimerBeforeLaunch(CUstream stream);
void gpuTimerAfterLaunch(CUstream stream);
/// Waits for the segment's end event and returns the span in seconds; < 0 when the segment launched
/// nothing since gpuTimerBegin (then the host-measured time stands). Clears the pending state.
double gpuTimerCollect(int64_t segment);
/// Kernels launched through mgpuLaunchKernel by this process (the device check uses it to tell
/// a real GPU run from the CPU fallback).
uint64_t launchCount();
/// Drops every timer (their events belong to the device being reset). Tests only.
void resetGpuTimersForTesting();

//===----------------------------------------------------------------------===//
// Batch checks before a GPU launch (batch_check.cpp)
//===----------------------------------------------------------------------===//

/// What a GPU partial over tokens [split, lens[i]) of each sequence i will read, checked before
/// anything is launched: batch and table sizes positive, 0 <= lens[i] <= maxBlocks * blockSize,
/// every block of those tokens a valid id; with |pool|, also blockSize equal to the pool's and
/// every such block in a tier that lives on the device (kernels index the HBM alias only).
Status checkGpuBatch(const KvPool *pool, const int32_t *blockTable, const int32_t *lens, int64_t batch,
                     int64_t maxBlocks, int64_t blockSize, int64_t split);

} // namespace hybridgen::rt::cuda
