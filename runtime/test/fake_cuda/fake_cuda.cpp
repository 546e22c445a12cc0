// A stand-in libcuda.so.1 for the runtime tests: the driver entry points the runtime resolves,
// backed by host memory, so the CUDA layer's success and error paths run on machines without a GPU.
// Behaviour is read from the environment at each call:
//   FAKE_CUDA_VERSION (driver version, default 13000)  FAKE_CUDA_DEVICES (default 1)
//   FAKE_CUDA_INIT_ERROR (cuInit's result)              FAKE_CUDA_FAIL (a call name: it returns 2)
//   FAKE_CUDA_MEM_FREE / FAKE_CUDA_MEM_TOTAL (bytes)    FAKE_CUDA_EVENT_MS (fixed elapsed time)
//   FAKE_CUDA_TRACE (print module loads, launches, allocations and copies on stderr)
// Built with FAKE_CUDA_PARTIAL it exports only three entry points (a driver lacking symbols).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

using CUresult = int;
using CUdeviceptr = uint64_t;

namespace {
std::mutex gMu;
std::map<uintptr_t, size_t> gAllocs;     // fake device allocations (host memory)
long gAsyncAllocs = 0;                   // of which from cuMemAllocAsync, not yet freed
std::map<uintptr_t, size_t> gRegistered; // cuMemHostRegister ranges
long gLaunches = 0, gH2D = 0, gD2H = 0, gD2D = 0, gModules = 0;
unsigned gLastGrid[3], gLastBlock[3], gLastSmem;
struct FakeEvent {
  double t = 0;
  bool recorded = false;
};
int gCtx, gStreamTag, gFnTag;

const char *env(const char *n) { return std::getenv(n); }
long envLong(const char *n, long def) {
  const char *v = env(n);
  return v && *v ? std::strtol(v, nullptr, 10) : def;
}
bool failing(const char *call) {
  const char *f = env("FAKE_CUDA_FAIL");
  return f && std::strcmp(f, call) == 0;
}
#define TRACE(...)                                                                                 \
  do {                                                                                             \
    if (env("FAKE_CUDA_TRACE"))                                                                    \
      std::fprintf(stderr, "fake-cuda: " __VA_ARGS__);                                            \
  } while (0)
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
} // namespace

#define FAKE_FAIL(name)                                                                            \
  if (failing(name))                                                                               \
    return 2;

extern "C" {

CUresult cuInit(unsigned) { return CUresult(envLong("FAKE_CUDA_INIT_ERROR", 0)); }
CUresult cuDriverGetVersion(int *v) {
  *v = int(envLong("FAKE_CUDA_VERSION", 13000));
  return 0;
}
CUresult cuGetErrorString(CUresult e, const char **s) {
  *s = e == 2 ? "out of memory" : e == 100 ? "no CUDA-capable device is detected" : "fake error";
  return 0;
}

#ifndef FAKE_CUDA_PARTIAL
CUresult cuGetErrorName(CUresult e, const char **s) {
  *s = e == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : e == 100 ? "CUDA_ERROR_NO_DEVICE" : e == 1 ? "CUDA_ERROR_INVALID_VALUE"
                                                                                       : "CUDA_ERROR_FAKE";
  return 0;
}
CUresult cuDeviceGetCount(int *n) {
  *n = int(envLong("FAKE_CUDA_DEVICES", 1));
  return 0;
}
CUresult cuDeviceGet(int *d, int ordinal) {
  *d = ordinal;
  return 0;
}
CUresult cuDeviceGetName(char *name, int len, int) {
  std::strncpy(name, "Fake H200", size_t(len));
  return 0;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int) {
  *v = attr == 75 ? 9 : attr == 76 ? 0 : 1;
  return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *b, int) {
  *b = size_t(envLong("FAKE_CUDA_MEM_TOTAL", 80l << 20));
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, int) {
  FAKE_FAIL("cuDevicePrimaryCtxRetain");
  *ctx = &gCtx;
  return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(int) { return 0; }
CUresult cuCtxSetCurrent(void *) { return 0; }
CUresult cuCtxGetCurrent(void **c) {
  *c = &gCtx;
  return 0;
}
CUresult cuCtxSynchronize() { return 0; }

CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned n, int *opts, void **vals) {
  FAKE_FAIL("cuModuleLoadData");
  if (!image || std::memcmp(image, "BAD", 3) == 0) {
    for (unsigned i = 0; i < n; ++i)
      if (opts[i] == 5 && vals[i])
        std::strcpy(static_cast<char *>(vals[i]), "fake ptxas: syntax error");
    return 218; // CUDA_ERROR_INVALID_PTX
  }
  TRACE("module load, %s, %u JIT options\n",
        std::memcmp(image, "//", 2) == 0 ? "PTX text" : "binary image", n);
  std::lock_guard<std::mutex> l(gMu);
  ++gModules;
  *m = new int(0);
  return 0;
}
CUresult cuModuleLoadData(void **m, const void *image) { return cuModuleLoadDataEx(m, image, 0, nullptr, nullptr); }
CUresult cuModuleUnload(void *m) {
  std::lock_guard<std::mutex> l(gMu);
  --gModules;
  delete static_cast<int *>(m);
  return 0;
}
CUresult cuModuleGetFunction(void **f, void *, const char *name) {
  if (std::strcmp(name, "missing") == 0)
    return 500; // CUDA_ERROR_NOT_FOUND
  *f = &gFnTag;
  return 0;
}
CUresult cuLaunchKernel(void *, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, void *, void **, void **) {
  FAKE_FAIL("cuLaunchKernel");
  TRACE("launch grid (%u, %u, %u) block (%u, %u, %u) smem %u\n", gx, gy, gz, bx, by, bz, smem);
  std::lock_guard<std::mutex> l(gMu);
  ++gLaunches;
  gLastGrid[0] = gx, gLastGrid[1] = gy, gLastGrid[2] = gz;
  gLastBlock[0] = bx, gLastBlock[1] = by, gLastBlock[2] = bz;
  gLastSmem = smem;
  return 0;
}
CUresult cuStreamCreate(void **s, unsigned) {
  FAKE_FAIL("cuStreamCreate");
  *s = new int(gStreamTag);
  return 0;
}
CUresult cuStreamDestroy_v2(void *s) {
  delete static_cast<int *>(s);
  return 0;
}
CUresult cuStreamSynchronize(void *) { return failing("cuStreamSynchronize") ? 2 : 0; }
CUresult cuStreamWaitEvent(void *, void *, unsigned) { return 0; }
CUresult cuEventCreate(void **e, unsigned) {
  FAKE_FAIL("cuEventCreate");
  *e = new FakeEvent();
  return 0;
}
CUresult cuEventDestroy_v2(void *e) {
  delete static_cast<FakeEvent *>(e);
  return 0;
}
CUresult cuEventRecord(void *e, void *) {
  static_cast<FakeEvent *>(e)->t = now();
  static_cast<FakeEvent *>(e)->recorded = true;
  return 0;
}
CUresult cuEventSynchronize(void *) { return 0; }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) {
  auto *ea = static_cast<FakeEvent *>(a), *eb = static_cast<FakeEvent *>(b);
  if (!ea->recorded || !eb->recorded)
    return 600; // CUDA_ERROR_NOT_READY
  const char *fixed = env("FAKE_CUDA_EVENT_MS");
  *ms = fixed ? float(std::atof(fixed)) : float((eb->t - ea->t) * 1e3);
  return 0;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
  FAKE_FAIL("cuMemAlloc");
  TRACE("alloc %zu bytes\n", bytes);
  void *m = std::calloc(1, bytes ? bytes : 1);
  if (!m)
    return 2;
  std::lock_guard<std::mutex> l(gMu);
  gAllocs[uintptr_t(m)] = bytes;
  *p = CUdeviceptr(uintptr_t(m));
  return 0;
}
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t bytes, unsigned) { return cuMemAlloc_v2(p, bytes); }
CUresult cuMemFree_v2(CUdeviceptr p) {
  std::lock_guard<std::mutex> l(gMu);
  auto it = gAllocs.find(uintptr_t(p));
  if (it == gAllocs.end())
    return 1;
  TRACE("free %zu bytes\n", it->second);
  std::free(reinterpret_cast<void *>(uintptr_t(p)));
  gAllocs.erase(it);
  return 0;
}
// The stream-ordered allocator: the same host memory, counted apart ("async_allocations").
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t bytes, void *) {
  FAKE_FAIL("cuMemAllocAsync");
  CUresult r = cuMemAlloc_v2(p, bytes);
  if (r == 0) {
    std::lock_guard<std::mutex> l(gMu);
    ++gAsyncAllocs;
  }
  return r;
}
CUresult cuMemFreeAsync(CUdeviceptr p, void *) {
  CUresult r = cuMemFree_v2(p);
  if (r == 0) {
    std::lock_guard<std::mutex> l(gMu);
    --gAsyncAllocs;
  }
  return r;
}
CUresult cuDeviceGetDefaultMemPool(void **pool, int) {
  static int fakePool;
  *pool = &fakePool;
  return 0;
}
CUresult cuMemPoolSetAttribute(void *, int, void *) {
  FAKE_FAIL("cuMemPoolSetAttribute");
  return 0;
}
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) {
  *f = size_t(envLong("FAKE_CUDA_MEM_FREE", 64l << 20));
  *t = size_t(envLong("FAKE_CUDA_MEM_TOTAL", 80l << 20));
  return 0;
}
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, void *) {
  FAKE_FAIL("cuMemcpyAsync");
  TRACE("copy %zu bytes\n", n);
  std::memmove(reinterpret_cast<void *>(uintptr_t(d)), reinterpret_cast<void *>(uintptr_t(s)), n);
  return 0;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, void *) {
  FAKE_FAIL("cuMemcpyHtoDAsync");
  std::memcpy(reinterpret_cast<void *>(uintptr_t(d)), s, n);
  std::lock_guard<std::mutex> l(gMu);
  ++gH2D;
  return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, void *) {
  FAKE_FAIL("cuMemcpyDtoHAsync");
  std::memcpy(d, reinterpret_cast<void *>(uintptr_t(s)), n);
  std::lock_guard<std::mutex> l(gMu);
  ++gD2H;
  return 0;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void *) {
  std::memmove(reinterpret_cast<void *>(uintptr_t(d)), reinterpret_cast<void *>(uintptr_t(s)), n);
  std::lock_guard<std::mutex> l(gMu);
  ++gD2D;
  return 0;
}
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, void *) {
  auto *p = reinterpret_cast<uint32_t *>(uintptr_t(d));
  for (size_t i = 0; i < n; ++i)
    p[i] = v;
  return 0;
}
CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, void *) {
  auto *p = reinterpret_cast<uint16_t *>(uintptr_t(d));
  for (size_t i = 0; i < n; ++i)
    p[i] = v;
  return 0;
}
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned) {
  FAKE_FAIL("cuMemHostRegister");
  TRACE("host register %zu bytes\n", n);
  std::lock_guard<std::mutex> l(gMu);
  uintptr_t b = uintptr_t(p);
  for (const auto &r : gRegistered)
    if (b < r.first + r.second && r.first < b + n)
      return 712; // CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
  gRegistered[b] = n;
  return 0;
}
CUresult cuMemHostUnregister(void *p) {
  std::lock_guard<std::mutex> l(gMu);
  return gRegistered.erase(uintptr_t(p)) ? 0 : 713; // CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
}

// What the tests inspect (looked up with dlsym on this library).
long fakecuda_counter(const char *what) {
  std::lock_guard<std::mutex> l(gMu);
  std::string w = what;
  if (w == "launches") return gLaunches;
  if (w == "h2d") return gH2D;
  if (w == "d2h") return gD2H;
  if (w == "d2d") return gD2D;
  if (w == "modules") return gModules;
  if (w == "allocations") return long(gAllocs.size());
  if (w == "async_allocations") return gAsyncAllocs;
  if (w == "registered") return long(gRegistered.size());
  if (w == "grid_x") return gLastGrid[0];
  if (w == "block_x") return gLastBlock[0];
  if (w == "smem") return gLastSmem;
  return -1;
}
#endif // FAKE_CUDA_PARTIAL

} // extern "C"
