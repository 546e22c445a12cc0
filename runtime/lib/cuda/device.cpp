// CudaDevice: dlopen/dlsym of the driver, device + primary context, error strings, and the
// process-wide device with its one-line fallback notice.
#include "hybridgen/runtime/cuda/device.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace hybridgen::rt::cuda {

namespace {

std::atomic<uint64_t> gNextGeneration{1};

/// Resolves |name| into |slot|; a missing symbol is recorded in |missing| (all are reported at once).
template <typename Fn> void resolve(void *lib, const char *name, Fn &slot, std::string &missing) {
  void *p = dlsym(lib, name);
  if (!p) {
    missing += missing.empty() ? name : std::string(", ") + name;
    return;
  }
  slot = reinterpret_cast<Fn>(p);
}

/// Optional symbols: prefer |preferred|, take |fallback| when the driver lacks it.
template <typename Fn> void resolveEither(void *lib, const char *preferred, const char *fallback, Fn &slot,
                                          std::string &missing) {
  if (void *p = dlsym(lib, preferred)) {
    slot = reinterpret_cast<Fn>(p);
    return;
  }
  resolve(lib, fallback, slot, missing);
}

/// Symbols the runtime can do without: |slot| stays null when the driver lacks |name|.
template <typename Fn> void resolveOptional(void *lib, const char *name, Fn &slot) {
  slot = reinterpret_cast<Fn>(dlsym(lib, name));
}

std::string resolveAll(void *lib, DriverApi &a) {
  std::string missing;
  resolve(lib, "cuInit", a.cuInit, missing);
  resolve(lib, "cuDriverGetVersion", a.cuDriverGetVersion, missing);
  resolve(lib, "cuGetErrorString", a.cuGetErrorString, missing);
  resolve(lib, "cuGetErrorName", a.cuGetErrorName, missing);
  resolve(lib, "cuDeviceGetCount", a.cuDeviceGetCount, missing);
  resolve(lib, "cuDeviceGet", a.cuDeviceGet, missing);
  resolve(lib, "cuDeviceGetName", a.cuDeviceGetName, missing);
  resolve(lib, "cuDeviceGetAttribute", a.cuDeviceGetAttribute, missing);
  resolve(lib, "cuDeviceTotalMem_v2", a.cuDeviceTotalMem, missing);
  resolve(lib, "cuDevicePrimaryCtxRetain", a.cuDevicePrimaryCtxRetain, missing);
  resolve(lib, "cuDevicePrimaryCtxRelease_v2", a.cuDevicePrimaryCtxRelease, missing);
  resolve(lib, "cuCtxSetCurrent", a.cuCtxSetCurrent, missing);
  resolve(lib, "cuCtxGetCurrent", a.cuCtxGetCurrent, missing);
  resolve(lib, "cuCtxSynchronize", a.cuCtxSynchronize, missing);
  resolve(lib, "cuModuleLoadData", a.cuModuleLoadData, missing);
  resolve(lib, "cuModuleLoadDataEx", a.cuModuleLoadDataEx, missing);
  resolve(lib, "cuModuleUnload", a.cuModuleUnload, missing);
  resolve(lib, "cuModuleGetFunction", a.cuModuleGetFunction, missing);
  resolve(lib, "cuLaunchKernel", a.cuLaunchKernel, missing);
  resolve(lib, "cuStreamCreate", a.cuStreamCreate, missing);
  resolve(lib, "cuStreamDestroy_v2", a.cuStreamDestroy, missing);
  resolve(lib, "cuStreamSynchronize", a.cuStreamSynchronize, missing);
  resolve(lib, "cuStreamWaitEvent", a.cuStreamWaitEvent, missing);
  resolve(lib, "cuEventCreate", a.cuEventCreate, missing);
  resolve(lib, "cuEventDestroy_v2", a.cuEventDestroy, missing);
  resolve(lib, "cuEventRecord", a.cuEventRecord, missing);
  resolve(lib, "cuEventSynchronize", a.cuEventSynchronize, missing);
  // CUDA 12.8 added cuEventElapsedTime_v2 (same signature); older drivers have only the original.
  resolveEither(lib, "cuEventElapsedTime_v2", "cuEventElapsedTime", a.cuEventElapsedTime, missing);
  resolve(lib, "cuMemAlloc_v2", a.cuMemAlloc, missing);
  resolve(lib, "cuMemAllocManaged", a.cuMemAllocManaged, missing);
  resolve(lib, "cuMemFree_v2", a.cuMemFree, missing);
  resolve(lib, "cuMemGetInfo_v2", a.cuMemGetInfo, missing);
  resolve(lib, "cuMemcpyAsync", a.cuMemcpyAsync, missing);
  resolve(lib, "cuMemcpyHtoDAsync_v2", a.cuMemcpyHtoDAsync, missing);
  resolve(lib, "cuMemcpyDtoHAsync_v2", a.cuMemcpyDtoHAsync, missing);
  resolve(lib, "cuMemcpyDtoDAsync_v2", a.cuMemcpyDtoDAsync, missing);
  resolve(lib, "cuMemsetD32Async", a.cuMemsetD32Async, missing);
  resolve(lib, "cuMemsetD16Async", a.cuMemsetD16Async, missing);
  resolve(lib, "cuMemHostRegister_v2", a.cuMemHostRegister, missing);
  resolve(lib, "cuMemHostUnregister", a.cuMemHostUnregister, missing);
  resolveOptional(lib, "cuMemAllocAsync", a.cuMemAllocAsync);
  resolveOptional(lib, "cuMemFreeAsync", a.cuMemFreeAsync);
  resolveOptional(lib, "cuDeviceGetDefaultMemPool", a.cuDeviceGetDefaultMemPool);
  resolveOptional(lib, "cuMemPoolSetAttribute", a.cuMemPoolSetAttribute);
  return missing;
}

std::string versionText(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

} // namespace

std::string describeCudaError(const DriverApi &api, CUresult r, const char *call) {
  const char *name = nullptr, *text = nullptr;
  if (api.cuGetErrorName)
    api.cuGetErrorName(r, &name);
  if (api.cuGetErrorString)
    api.cuGetErrorString(r, &text);
  std::string m = std::string(call) + " failed: ";
  m += name ? name : "CUDA error " + std::to_string(r);
  if (text)
    m += std::string(": ") + text;
  return m;
}

Status CudaDevice::check(CUresult r, const char *call) const {
  if (r == kCudaSuccess)
    return Status::ok();
  return systemError(describeCudaError(api_, r, call));
}

Result<std::unique_ptr<CudaDevice>> CudaDevice::open(const std::string &libraryPath, int32_t ordinal) {
  std::unique_ptr<CudaDevice> d(new CudaDevice());
  dlerror();
  d->lib_ = dlopen(libraryPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!d->lib_) {
    const char *e = dlerror();
    return notFound("cannot load the CUDA driver '" + libraryPath + "': " + (e ? e : "dlopen failed"));
  }
  std::string missing = resolveAll(d->lib_, d->api_);
  if (!missing.empty())
    return systemError("the CUDA driver '" + libraryPath + "' lacks " + missing);
  const DriverApi &a = d->api_;
  CUresult r = a.cuInit(0);
  if (r == kCudaErrorNoDevice)
    return notFound(describeCudaError(a, r, "cuInit"));
  if (Status s = d->check(r, "cuInit"); !s)
    return s;
  int version = 0;
  if (Status s = d->check(a.cuDriverGetVersion(&version), "cuDriverGetVersion"); !s)
    return s;
  d->info_.driverVersion = version;
  if (version < kMinDriverVersion)
    return systemError("the CUDA driver is version " + versionText(version) + ", hybridgen needs " +
                       versionText(kMinDriverVersion) + " or newer");
  int count = 0;
  if (Status s = d->check(a.cuDeviceGetCount(&count), "cuDeviceGetCount"); !s)
    return s;
  if (count <= 0)
    return notFound("the CUDA driver sees no device");
  if (ordinal < 0 || ordinal >= count)
    return invalidArgument("CUDA device " + std::to_string(ordinal) + " requested, the driver sees " +
                           std::to_string(count));
  if (Status s = d->check(a.cuDeviceGet(&d->device_, ordinal), "cuDeviceGet"); !s)
    return s;
  char name[256] = {0};
  if (Status s = d->check(a.cuDeviceGetName(name, int(sizeof name) - 1, d->device_), "cuDeviceGetName"); !s)
    return s;
  d->info_.ordinal = ordinal;
  d->info_.name = name;
  if (Status s = d->check(a.cuDeviceGetAttribute(&d->info_.ccMajor, kAttrComputeCapabilityMajor, d->device_),
                          "cuDeviceGetAttribute(compute capability major)");
      !s)
    return s;
  if (Status s = d->check(a.cuDeviceGetAttribute(&d->info_.ccMinor, kAttrComputeCapabilityMinor, d->device_),
                          "cuDeviceGetAttribute(compute capability minor)");
      !s)
    return s;
  int unified = 0;
  if (Status s = d->check(a.cuDeviceGetAttribute(&unified, kAttrUnifiedAddressing, d->device_),
                          "cuDeviceGetAttribute(unified addressing)");
      !s)
    return s;
  // mgpuMemcpy passes host and device pointers alike to cuMemcpyAsync: that needs one address space.
  if (!unified)
    return systemError("CUDA device " + std::string(name) + " has no unified addressing");
  size_t total = 0;
  if (Status s = d->check(a.cuDeviceTotalMem(&total, d->device_), "cuDeviceTotalMem"); !s)
    return s;
  d->info_.totalBytes = total;
  if (Status s = d->check(a.cuDevicePrimaryCtxRetain(&d->ctx_, d->device_), "cuDevicePrimaryCtxRetain"); !s)
    return s;
  d->generation_ = gNextGeneration++;
  if (Status s = d->makeCurrent(); !s)
    return s;
  d->enableStreamOrderedAllocation();
  return d;
}

void CudaDevice::enableStreamOrderedAllocation() {
  // Every hybrid step allocates and frees its few small device buffers (q, table, partials):
  // cuMemAlloc/cuMemFree take tens of microseconds each and cuMemFree waits for the device. The
  // stream-ordered allocator reuses the default pool's memory in about a microsecond, provided
  // the pool keeps what is freed (release threshold: all of it) instead of returning it at
  // every synchronization.
  const DriverApi &a = api_;
  if (!a.cuMemAllocAsync || !a.cuMemFreeAsync || !a.cuDeviceGetDefaultMemPool || !a.cuMemPoolSetAttribute)
    return;
  CUmemoryPool pool = nullptr;
  uint64_t keepAll = ~uint64_t(0);
  if (a.cuDeviceGetDefaultMemPool(&pool, device_) == kCudaSuccess && pool &&
      a.cuMemPoolSetAttribute(pool, kMemPoolAttrReleaseThreshold, &keepAll) == kCudaSuccess)
    streamOrderedAllocation_ = true;
}

CudaDevice::~CudaDevice() {
  if (ctx_ && api_.cuDevicePrimaryCtxRelease)
    api_.cuDevicePrimaryCtxRelease(device_);
  // A driver that gave out a context stays loaded (the real one keeps threads running); a failed
  // open unloads it again.
  if (lib_ && !ctx_)
    dlclose(lib_);
}

Status CudaDevice::makeCurrent() const {
  thread_local uint64_t currentGeneration = 0;
  if (currentGeneration == generation_)
    return Status::ok();
  if (Status s = check(api_.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent"); !s)
    return s;
  currentGeneration = generation_;
  return Status::ok();
}

Result<std::pair<uint64_t, uint64_t>> CudaDevice::memInfo() const {
  if (Status s = makeCurrent(); !s)
    return s;
  size_t freeBytes = 0, totalBytes = 0;
  if (Status s = check(api_.cuMemGetInfo(&freeBytes, &totalBytes), "cuMemGetInfo"); !s)
    return s;
  return std::make_pair(uint64_t(freeBytes), uint64_t(totalBytes));
}

std::string CudaDevice::describe() const {
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, driver %s, %.1f GiB)", info_.name.c_str(), info_.ccMajor,
                info_.ccMinor, versionText(info_.driverVersion).c_str(),
                double(info_.totalBytes) / double(1ull << 30));
  return buf;
}

//===----------------------------------------------------------------------===//
// The process-wide device
//===----------------------------------------------------------------------===//

namespace {
std::mutex gProcessMu;
bool gProcessTried = false;
std::unique_ptr<CudaDevice> gProcessDevice;
std::string gProcessReason;
int32_t gRequestedOrdinal = 0;

bool envFlagSet(const char *name) {
  const char *v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}
} // namespace

CudaDevice *processDevice() {
  std::lock_guard<std::mutex> lock(gProcessMu);
  if (gProcessTried)
    return gProcessDevice.get();
  gProcessTried = true;
  if (envFlagSet("HYBRIDGEN_DISABLE_CUDA")) {
    gProcessReason = "HYBRIDGEN_DISABLE_CUDA is set";
  } else {
    const char *lib = std::getenv("HYBRIDGEN_CUDA_LIBRARY");
    const char *ord = std::getenv("HYBRIDGEN_CUDA_DEVICE");
    int32_t ordinal = ord && *ord ? int32_t(std::strtol(ord, nullptr, 10)) : gRequestedOrdinal;
    auto d = CudaDevice::open(lib && *lib ? lib : "libcuda.so.1", ordinal);
    if (d.isOk())
      gProcessDevice = std::move(d).valueOrThrow();
    else
      gProcessReason = d.status().message();
  }
  if (!gProcessDevice)
    std::fprintf(stderr, "hybridgen: no usable CUDA device (%s); every token runs on the CPU\n",
                 gProcessReason.c_str());
  return gProcessDevice.get();
}

CudaDevice *processDeviceIfOpen() {
  std::lock_guard<std::mutex> lock(gProcessMu);
  return gProcessDevice.get();
}

bool requestProcessDeviceOrdinal(int32_t ordinal) {
  std::lock_guard<std::mutex> lock(gProcessMu);
  if (gProcessDevice)
    return gProcessDevice->info().ordinal == ordinal;
  gRequestedOrdinal = ordinal;
  return true;
}

std::string processDeviceUnavailableReason() {
  std::lock_guard<std::mutex> lock(gProcessMu);
  return gProcessReason;
}

void resetProcessDeviceForTesting() {
  std::lock_guard<std::mutex> lock(gProcessMu);
  gProcessDevice.reset();
  gProcessTried = false;
  gProcessReason.clear();
  gRequestedOrdinal = 0;
}

} // namespace hybridgen::rt::cuda
