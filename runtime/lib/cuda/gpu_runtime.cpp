// The device-alias registry and the CUDA-event segment timers (see gpu_runtime.h).
#include "hybridgen/runtime/cuda/gpu_runtime.h"
#include "hybridgen/runtime/cuda/device.h"

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>

namespace hybridgen::rt::cuda {

//===----------------------------------------------------------------------===//
// Aliases
//===----------------------------------------------------------------------===//

namespace {
struct AliasRange {
  size_t bytes;
  CUdeviceptr deviceBase;
};
std::mutex gAliasMu;
std::map<uintptr_t, AliasRange> gAliases; // by host start
} // namespace

Status registerDeviceAlias(const void *hostBase, size_t bytes, CUdeviceptr deviceBase) {
  if (!hostBase || bytes == 0)
    return invalidArgument("device alias: empty host range");
  std::lock_guard<std::mutex> lock(gAliasMu);
  uintptr_t b = uintptr_t(hostBase);
  auto next = gAliases.lower_bound(b);
  if (next != gAliases.end() && next->first < b + bytes)
    return invalidArgument("device alias: host range overlaps a registered one");
  if (next != gAliases.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.bytes > b)
      return invalidArgument("device alias: host range overlaps a registered one");
  }
  gAliases[b] = {bytes, deviceBase};
  return Status::ok();
}

void unregisterDeviceAlias(const void *hostBase) {
  std::lock_guard<std::mutex> lock(gAliasMu);
  gAliases.erase(uintptr_t(hostBase));
}

CUdeviceptr deviceAlias(const void *host) {
  std::lock_guard<std::mutex> lock(gAliasMu);
  uintptr_t h = uintptr_t(host);
  auto it = gAliases.upper_bound(h);
  if (it == gAliases.begin())
    return 0;
  --it;
  if (h >= it->first + it->second.bytes)
    return 0;
  return it->second.deviceBase + CUdeviceptr(h - it->first);
}

//===----------------------------------------------------------------------===//
// Timers
//===----------------------------------------------------------------------===//

namespace {
struct Timer {
  CUevent start = nullptr, end = nullptr;
  bool armed = false;
  bool started = false;  // start event recorded since the last begin
};
std::mutex gTimerMu;
std::map<int64_t, Timer> gTimers;
CudaDevice *gTimerDevice = nullptr; // the device whose events gTimers hold

void report(const Status &s) {
  if (!s)
    std::fprintf(stderr, "hybridgen: GPU timer: %s\n", s.message().c_str());
}
} // namespace

void gpuTimerBegin(int64_t segment) {
  CudaDevice *d = processDeviceIfOpen();
  if (!d)
    return;
  std::lock_guard<std::mutex> lock(gTimerMu);
  gTimerDevice = d;
  Timer &t = gTimers[segment];
  if (!t.start) {
    if (Status s = d->makeCurrent(); !s)
      return report(s);
    Status s1 = d->check(d->api().cuEventCreate(&t.start, kEventDefault), "cuEventCreate");
    Status s2 = s1 ? d->check(d->api().cuEventCreate(&t.end, kEventDefault), "cuEventCreate") : s1;
    if (!s2) {
      if (t.start)
        d->api().cuEventDestroy(t.start);
      t = Timer{};
      return report(s2);
    }
  }
  t.armed = true;
  t.started = false;
}

void gpuTimerEnd(int64_t segment) {
  std::lock_guard<std::mutex> lock(gTimerMu);
  auto it = gTimers.find(segment);
  if (it != gTimers.end())
    it->second.armed = false;
}

void gpuTimerBeforeLaunch(CUstream stream) {
  std::lock_guard<std::mutex> lock(gTimerMu);
  for (auto &kv : gTimers) {
    Timer &t = kv.second;
    if (t.armed && !t.started) {
      report(gTimerDevice->check(gTimerDevice->api().cuEventRecord(t.start, stream), "cuEventRecord"));
      t.started = true;
    }
  }
}

double gpuTimerCollect(int64_t segment) {
  std::lock_guard<std::mutex> lock(gTimerMu);
  auto it = gTimers.find(segment);
  if (it == gTimers.end() || !it->second.started)
    return -1;
  Timer &t = it->second;
  t.started = false;
  const DriverApi &a = gTimerDevice->api();
  if (Status s = gTimerDevice->check(a.cuEventSynchronize(t.end), "cuEventSynchronize"); !s) {
    report(s);
    return -1;
  }
  float ms = 0;
  if (Status s = gTimerDevice->check(a.cuEventElapsedTime(&ms, t.start, t.end), "cuEventElapsedTime"); !s) {
    report(s);
    return -1;
  }
  return double(ms) * 1e-3;
}

namespace {
std::atomic<uint64_t> gLaunches{0};
} // namespace

void gpuTimerAfterLaunch(CUstream stream) {
  ++gLaunches;
  std::lock_guard<std::mutex> lock(gTimerMu);
  for (auto &kv : gTimers)
    if (kv.second.armed && kv.second.started)
      report(gTimerDevice->check(gTimerDevice->api().cuEventRecord(kv.second.end, stream), "cuEventRecord"));
}

uint64_t launchCount() { return gLaunches.load(); }

void resetGpuTimersForTesting() {
  std::lock_guard<std::mutex> lock(gTimerMu);
  if (gTimerDevice)
    for (auto &kv : gTimers) {
      if (kv.second.start)
        gTimerDevice->api().cuEventDestroy(kv.second.start);
      if (kv.second.end)
        gTimerDevice->api().cuEventDestroy(kv.second.end);
    }
  gTimers.clear();
  gTimerDevice = nullptr;
}

} // namespace hybridgen::rt::cuda
