// The runtime's CUDA device: libcuda.so.1 loaded at run time, one device's primary context, and
// the process-wide device every GPU-facing part of the runtime (mgpu* ABI, HBM tier, timing) uses.
#pragma once

#include "hybridgen/runtime/cuda/driver_api.h"
#include "hybridgen/runtime/status.h"

#include <memory>
#include <string>

namespace hybridgen::rt::cuda {

struct DeviceInfo {
  int32_t ordinal = 0;
  std::string name;
  int32_t ccMajor = 0, ccMinor = 0;
  int32_t driverVersion = 0; // 1000 * major + 10 * minor
  uint64_t totalBytes = 0;
};

/// One opened device. Every failing driver call becomes a Status naming the call and the CUDA
/// error string; nothing here aborts or throws.
class CudaDevice {
public:
  /// dlopen |libraryPath| (e.g. "libcuda.so.1"), resolve the entry points, cuInit, check the
  /// driver version, open device |ordinal| and retain its primary context. Fails with
  /// kNotFound (no library / no device) or kSystem (missing symbol, driver too old, call failed).
  static Result<std::unique_ptr<CudaDevice>> open(const std::string &libraryPath, int32_t ordinal = 0);
  ~CudaDevice();
  CudaDevice(const CudaDevice &) = delete;
  CudaDevice &operator=(const CudaDevice &) = delete;

  const DriverApi &api() const { return api_; }
  const DeviceInfo &info() const { return info_; }
  std::string describe() const; // "NVIDIA H200 (sm_90, driver 13.0, 139.8 GiB)"

  /// Makes the primary context current on the calling thread (cheap when it already is).
  Status makeCurrent() const;
  /// Ok for kCudaSuccess, else a kSystem Status "<call> failed: <CUDA error name>: <string>".
  Status check(CUresult r, const char *call) const;
  /// Free and total device memory (cuMemGetInfo).
  Result<std::pair<uint64_t, uint64_t>> memInfo() const;
  /// Whether cuMemAllocAsync/cuMemFreeAsync serve the compiled code's per-step buffers (the
  /// driver has them and the default pool keeps freed memory); else cuMemAlloc/cuMemFree.
  bool streamOrderedAllocation() const { return streamOrderedAllocation_; }

private:
  CudaDevice() = default;
  void enableStreamOrderedAllocation();
  bool streamOrderedAllocation_ = false;
  void *lib_ = nullptr;
  DriverApi api_;
  DeviceInfo info_;
  CUdevice device_ = 0;
  CUcontext ctx_ = nullptr;
  uint64_t generation_ = 0; // tells a thread's cached "current" apart across reopened devices
};

/// Formats a CUDA error as "<call> failed: <name>: <description>" with whatever |api| can resolve.
std::string describeCudaError(const DriverApi &api, CUresult r, const char *call);

/// The process-wide device, opened on first use from HYBRIDGEN_CUDA_LIBRARY (a path; default
/// "libcuda.so.1") and HYBRIDGEN_CUDA_DEVICE (ordinal, default 0); HYBRIDGEN_DISABLE_CUDA set to
/// anything but 0 turns it off. When it cannot be opened, one line "hybridgen: no usable CUDA
/// device (<reason>); every token runs on the CPU" goes to stderr, once per process, and this
/// returns nullptr from then on.
CudaDevice *processDevice();
/// The process-wide device if it was already opened and is usable; never opens it (so code that
/// only reacts to GPU work, like the event timers, never prints the notice by itself).
CudaDevice *processDeviceIfOpen();
/// Device ordinal to open when HYBRIDGEN_CUDA_DEVICE is unset (mgpuSetDefaultDevice); false when
/// a different device is already open (one device per process).
bool requestProcessDeviceOrdinal(int32_t ordinal);
/// Why processDevice() is null ("" while it is usable or not yet asked).
std::string processDeviceUnavailableReason();
/// Forgets the process-wide device (and the notice) so the next processDevice() reads the
/// environment again. For tests only: nothing may use the old device afterwards.
void resetProcessDeviceForTesting();

} // namespace hybridgen::rt::cuda
