// The mgpu* host ABI that MLIR 22's gpu-to-llvm emits calls to (signatures taken from the LLVM IR it
// produces), implemented on the runtime's dlopen'ed driver, so compiled host code links only
// libhybridgen_runtime. Without a usable device every entry is a safe no-op returning null; the
// compiled code's hgrt_gpu_available() check keeps the kernels themselves from being reached.
// Failing driver calls are reported on stderr with the call and the CUDA error string (the ABI has
// no error channel), never abort.
#include "hybridgen/runtime/cuda/device.h"
#include "hybridgen/runtime/cuda/gpu_runtime.h"

#include <climits>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_set>

using namespace hybridgen::rt;
using namespace hybridgen::rt::cuda;

namespace {

/// The open device with its context current on this thread, or nullptr (reported once by
/// processDevice, or here when making the context current failed).
CudaDevice *device(const char *entry) {
  CudaDevice *d = processDevice();
  if (!d)
    return nullptr;
  if (Status s = d->makeCurrent(); !s) {
    std::fprintf(stderr, "hybridgen: %s: %s\n", entry, s.message().c_str());
    return nullptr;
  }
  return d;
}

bool ok(CudaDevice *d, CUresult r, const char *entry, const char *call) {
  if (r == kCudaSuccess)
    return true;
  std::fprintf(stderr, "hybridgen: %s: %s\n", entry, describeCudaError(d->api(), r, call).c_str());
  return false;
}

/// Device pointers that came from cuMemAllocAsync (they go back with cuMemFreeAsync).
std::mutex gStreamOrderedMu;
std::unordered_set<CUdeviceptr> gStreamOrdered;
void rememberStreamOrdered(CUdeviceptr p) {
  std::lock_guard<std::mutex> lock(gStreamOrderedMu);
  gStreamOrdered.insert(p);
}
bool forgetStreamOrdered(CUdeviceptr p) {
  std::lock_guard<std::mutex> lock(gStreamOrderedMu);
  return gStreamOrdered.erase(p) != 0;
}

bool fitsUnsigned(intptr_t v) { return v > 0 && uint64_t(v) <= UINT_MAX; }

/// Dense byte size of a ranked memref descriptor {allocated, aligned, offset, sizes[r], strides[r]}
/// and the address of its first element; false for a strided (non-dense) one.
bool denseMemRef(int64_t rank, void *desc, int64_t elemBytes, void *&first, uint64_t &bytes) {
  auto *fields = static_cast<int64_t *>(desc);
  char *aligned = reinterpret_cast<char *>(fields[1]);
  int64_t offset = fields[2];
  const int64_t *sizes = fields + 3, *strides = fields + 3 + rank;
  int64_t expect = 1;
  for (int64_t i = rank - 1; i >= 0; --i) {
    if (sizes[i] != 1 && strides[i] != expect)
      return false;
    expect *= sizes[i];
  }
  first = aligned + offset * elemBytes;
  bytes = uint64_t(expect) * uint64_t(elemBytes);
  return true;
}

} // namespace

extern "C" {

// --- modules (called from the global constructors/destructors of a gpu.binary) ---

CUmodule mgpuModuleLoad(void *data, uint64_t gpuBlobSize) {
  (void)gpuBlobSize; // cubin/fatbin images carry their own size
  CudaDevice *d = device("mgpuModuleLoad");
  if (!d || !data)
    return nullptr;
  CUmodule m = nullptr;
  return ok(d, d->api().cuModuleLoadData(&m, data), "mgpuModuleLoad", "cuModuleLoadData") ? m : nullptr;
}

/// PTX embedded because ptxas was absent at compile time: the driver JIT-compiles it.
CUmodule mgpuModuleLoadJIT(void *data, int32_t optLevel) {
  CudaDevice *d = device("mgpuModuleLoadJIT");
  if (!d || !data)
    return nullptr;
  char log[8192] = {0};
  CUjit_option opts[] = {kJitErrorLogBuffer, kJitErrorLogBufferSizeBytes, kJitOptimizationLevel};
  void *vals[] = {log, reinterpret_cast<void *>(uintptr_t(sizeof log - 1)),
                  reinterpret_cast<void *>(intptr_t(optLevel < 0 ? 0 : optLevel > 4 ? 4 : optLevel))};
  CUmodule m = nullptr;
  if (!ok(d, d->api().cuModuleLoadDataEx(&m, data, 3, opts, vals), "mgpuModuleLoadJIT", "cuModuleLoadDataEx")) {
    if (log[0])
      std::fprintf(stderr, "hybridgen: mgpuModuleLoadJIT: JIT log: %s\n", log);
    return nullptr;
  }
  return m;
}

void mgpuModuleUnload(CUmodule module) {
  CudaDevice *d = processDeviceIfOpen();
  if (d && module)
    ok(d, d->api().cuModuleUnload(module), "mgpuModuleUnload", "cuModuleUnload");
}

CUfunction mgpuModuleGetFunction(CUmodule module, const char *name) {
  CudaDevice *d = device("mgpuModuleGetFunction");
  if (!d || !module || !name)
    return nullptr;
  CUfunction f = nullptr;
  return ok(d, d->api().cuModuleGetFunction(&f, module, name), "mgpuModuleGetFunction", "cuModuleGetFunction")
             ? f
             : nullptr;
}

// --- launches ---

void mgpuLaunchKernel(CUfunction function, intptr_t gridX, intptr_t gridY, intptr_t gridZ, intptr_t blockX,
                      intptr_t blockY, intptr_t blockZ, int32_t smem, CUstream stream, void **params,
                      void **extra, uint64_t paramsCount) {
  (void)paramsCount;
  CudaDevice *d = device("mgpuLaunchKernel");
  if (!d)
    return;
  if (!function || !fitsUnsigned(gridX) || !fitsUnsigned(gridY) || !fitsUnsigned(gridZ) ||
      !fitsUnsigned(blockX) || !fitsUnsigned(blockY) || !fitsUnsigned(blockZ) || smem < 0) {
    std::fprintf(stderr,
                 "hybridgen: mgpuLaunchKernel: refused launch of %s with grid (%ld, %ld, %ld), block "
                 "(%ld, %ld, %ld), %d bytes of shared memory\n",
                 function ? "a kernel" : "a null function (module not loaded?)", long(gridX), long(gridY),
                 long(gridZ), long(blockX), long(blockY), long(blockZ), int(smem));
    return;
  }
  gpuTimerBeforeLaunch(stream);
  if (ok(d,
         d->api().cuLaunchKernel(function, unsigned(gridX), unsigned(gridY), unsigned(gridZ), unsigned(blockX),
                                 unsigned(blockY), unsigned(blockZ), unsigned(smem), stream, params, extra),
         "mgpuLaunchKernel", "cuLaunchKernel"))
    gpuTimerAfterLaunch(stream);
}

// --- streams and events ---

CUstream mgpuStreamCreate() {
  CudaDevice *d = device("mgpuStreamCreate");
  if (!d)
    return nullptr;
  CUstream s = nullptr;
  return ok(d, d->api().cuStreamCreate(&s, kStreamNonBlocking), "mgpuStreamCreate", "cuStreamCreate") ? s
                                                                                                     : nullptr;
}

void mgpuStreamDestroy(CUstream stream) {
  CudaDevice *d = processDeviceIfOpen();
  if (d && stream)
    ok(d, d->api().cuStreamDestroy(stream), "mgpuStreamDestroy", "cuStreamDestroy");
}

void mgpuStreamSynchronize(CUstream stream) {
  CudaDevice *d = device("mgpuStreamSynchronize");
  if (d && stream)
    ok(d, d->api().cuStreamSynchronize(stream), "mgpuStreamSynchronize", "cuStreamSynchronize");
}

void mgpuStreamWaitEvent(CUstream stream, CUevent event) {
  CudaDevice *d = device("mgpuStreamWaitEvent");
  if (d && stream && event)
    ok(d, d->api().cuStreamWaitEvent(stream, event, 0), "mgpuStreamWaitEvent", "cuStreamWaitEvent");
}

CUevent mgpuEventCreate() {
  CudaDevice *d = device("mgpuEventCreate");
  if (!d)
    return nullptr;
  CUevent e = nullptr;
  return ok(d, d->api().cuEventCreate(&e, kEventDisableTiming), "mgpuEventCreate", "cuEventCreate") ? e : nullptr;
}

void mgpuEventDestroy(CUevent event) {
  CudaDevice *d = processDeviceIfOpen();
  if (d && event)
    ok(d, d->api().cuEventDestroy(event), "mgpuEventDestroy", "cuEventDestroy");
}

void mgpuEventSynchronize(CUevent event) {
  CudaDevice *d = device("mgpuEventSynchronize");
  if (d && event)
    ok(d, d->api().cuEventSynchronize(event), "mgpuEventSynchronize", "cuEventSynchronize");
}

void mgpuEventRecord(CUevent event, CUstream stream) {
  CudaDevice *d = device("mgpuEventRecord");
  if (d && event)
    ok(d, d->api().cuEventRecord(event, stream), "mgpuEventRecord", "cuEventRecord");
}

// --- memory ---

void *mgpuMemAlloc(uint64_t sizeBytes, CUstream stream, bool isHostShared) {
  CudaDevice *d = device("mgpuMemAlloc");
  if (!d || sizeBytes == 0)
    return nullptr;
  CUdeviceptr p = 0;
  bool good;
  if (isHostShared) {
    good = ok(d, d->api().cuMemAllocManaged(&p, sizeBytes, /*CU_MEM_ATTACH_GLOBAL*/ 1), "mgpuMemAlloc",
              "cuMemAllocManaged");
  } else if (stream && d->streamOrderedAllocation()) {
    good = ok(d, d->api().cuMemAllocAsync(&p, sizeBytes, stream), "mgpuMemAlloc", "cuMemAllocAsync");
    if (good)
      rememberStreamOrdered(p);
  } else {
    good = ok(d, d->api().cuMemAlloc(&p, sizeBytes), "mgpuMemAlloc", "cuMemAlloc");
  }
  return good ? reinterpret_cast<void *>(uintptr_t(p)) : nullptr;
}

void mgpuMemFree(void *ptr, CUstream stream) {
  CudaDevice *d = processDeviceIfOpen();
  if (!d || !ptr)
    return;
  CUdeviceptr p = CUdeviceptr(uintptr_t(ptr));
  // Only memory from cuMemAllocAsync goes back through the stream; the rest through cuMemFree.
  if (forgetStreamOrdered(p)) {
    if (stream)
      ok(d, d->api().cuMemFreeAsync(p, stream), "mgpuMemFree", "cuMemFreeAsync");
    else
      ok(d, d->api().cuMemFree(p), "mgpuMemFree", "cuMemFree");
    return;
  }
  ok(d, d->api().cuMemFree(p), "mgpuMemFree", "cuMemFree");
}

void mgpuMemcpy(void *dst, void *src, uint64_t sizeBytes, CUstream stream) {
  CudaDevice *d = device("mgpuMemcpy");
  if (!d || sizeBytes == 0)
    return;
  if (!dst || !src) {
    std::fprintf(stderr, "hybridgen: mgpuMemcpy: refused a copy of %llu bytes with a null pointer\n",
                 (unsigned long long)sizeBytes);
    return;
  }
  ok(d, d->api().cuMemcpyAsync(CUdeviceptr(uintptr_t(dst)), CUdeviceptr(uintptr_t(src)), sizeBytes, stream),
     "mgpuMemcpy", "cuMemcpyAsync");
}

void mgpuMemset32(void *dst, uint32_t value, uint64_t count, CUstream stream) {
  CudaDevice *d = device("mgpuMemset32");
  if (d && dst && count)
    ok(d, d->api().cuMemsetD32Async(CUdeviceptr(uintptr_t(dst)), value, count, stream), "mgpuMemset32",
       "cuMemsetD32Async");
}

void mgpuMemset16(void *dst, uint16_t value, uint64_t count, CUstream stream) {
  CudaDevice *d = device("mgpuMemset16");
  if (d && dst && count)
    ok(d, d->api().cuMemsetD16Async(CUdeviceptr(uintptr_t(dst)), value, count, stream), "mgpuMemset16",
       "cuMemsetD16Async");
}

void mgpuMemHostRegister(void *ptr, uint64_t sizeBytes) {
  CudaDevice *d = device("mgpuMemHostRegister");
  if (d && ptr && sizeBytes)
    ok(d, d->api().cuMemHostRegister(ptr, sizeBytes, kHostRegisterPortable), "mgpuMemHostRegister",
       "cuMemHostRegister");
}

void mgpuMemHostUnregister(void *ptr) {
  CudaDevice *d = processDeviceIfOpen();
  if (d && ptr)
    ok(d, d->api().cuMemHostUnregister(ptr), "mgpuMemHostUnregister", "cuMemHostUnregister");
}

void mgpuMemHostRegisterMemRef(int64_t rank, void *descriptor, int64_t elementSizeBytes) {
  if (!descriptor || rank < 0 || elementSizeBytes <= 0)
    return;
  void *first = nullptr;
  uint64_t bytes = 0;
  if (!denseMemRef(rank, descriptor, elementSizeBytes, first, bytes)) {
    std::fprintf(stderr, "hybridgen: mgpuMemHostRegisterMemRef: refused a strided memref\n");
    return;
  }
  mgpuMemHostRegister(first, bytes);
}

void mgpuMemHostUnregisterMemRef(int64_t rank, void *descriptor, int64_t elementSizeBytes) {
  if (!descriptor || rank < 0 || elementSizeBytes <= 0)
    return;
  auto *fields = static_cast<int64_t *>(descriptor);
  mgpuMemHostUnregister(reinterpret_cast<char *>(fields[1]) + fields[2] * elementSizeBytes);
}

void mgpuSetDefaultDevice(int32_t device) {
  if (!requestProcessDeviceOrdinal(device))
    std::fprintf(stderr, "hybridgen: mgpuSetDefaultDevice(%d): another device is already in use\n", int(device));
}

} // extern "C"
