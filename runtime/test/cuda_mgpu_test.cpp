// The mgpu* host ABI on the dlopen'ed driver: safe no-ops without a device, argument checks before
// any launch or copy, CUDA-event GPU timing fed to the scheduler, and the device-alias registry.
#include "cuda_test_util.h"
#include "hybridgen/runtime/c_api.h"
#include "hybridgen/runtime/context.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstring>
#include <thread>
#include <vector>

using namespace hybridgen::rt::cuda;

// The ABI as MLIR 22's gpu-to-llvm declares it (see lib/cuda/mgpu.cpp).
extern "C" {
CUmodule mgpuModuleLoad(void *data, uint64_t size);
CUmodule mgpuModuleLoadJIT(void *data, int32_t optLevel);
void mgpuModuleUnload(CUmodule m);
CUfunction mgpuModuleGetFunction(CUmodule m, const char *name);
void mgpuLaunchKernel(CUfunction f, intptr_t gx, intptr_t gy, intptr_t gz, intptr_t bx, intptr_t by, intptr_t bz,
                      int32_t smem, CUstream s, void **params, void **extra, uint64_t n);
CUstream mgpuStreamCreate();
void mgpuStreamDestroy(CUstream s);
void mgpuStreamSynchronize(CUstream s);
void mgpuStreamWaitEvent(CUstream s, CUevent e);
CUevent mgpuEventCreate();
void mgpuEventDestroy(CUevent e);
void mgpuEventSynchronize(CUevent e);
void mgpuEventRecord(CUevent e, CUstream s);
void *mgpuMemAlloc(uint64_t bytes, CUstream s, bool hostShared);
void mgpuMemFree(void *p, CUstream s);
void mgpuMemcpy(void *dst, void *src, uint64_t bytes, CUstream s);
void mgpuMemset32(void *dst, uint32_t v, uint64_t n, CUstream s);
void mgpuMemset16(void *dst, uint16_t v, uint64_t n, CUstream s);
void mgpuMemHostRegisterMemRef(int64_t rank, void *desc, int64_t elemBytes);
void mgpuMemHostUnregisterMemRef(int64_t rank, void *desc, int64_t elemBytes);
}

namespace hybridgen::rt::test {
namespace {

class Mgpu : public CudaEnvTest {};

char kImage[] = "fake cubin";

TEST_F(Mgpu, EveryEntryIsASafeNoOpWithoutADevice) {
  useLibrary("/nonexistent/libcuda.so.1");
  testing::internal::CaptureStderr();
  EXPECT_EQ(mgpuModuleLoad(kImage, sizeof kImage), nullptr);
  EXPECT_EQ(mgpuModuleLoadJIT(kImage, 2), nullptr);
  EXPECT_EQ(mgpuModuleGetFunction(nullptr, "f"), nullptr);
  mgpuLaunchKernel(nullptr, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr, 0);
  EXPECT_EQ(mgpuStreamCreate(), nullptr);
  EXPECT_EQ(mgpuEventCreate(), nullptr);
  EXPECT_EQ(mgpuMemAlloc(64, nullptr, false), nullptr);
  int host[4] = {1, 2, 3, 4};
  mgpuMemcpy(host, host + 2, 8, nullptr);
  EXPECT_EQ(host[0], 1); // nothing was copied
  mgpuMemFree(nullptr, nullptr);
  mgpuStreamSynchronize(nullptr);
  mgpuStreamDestroy(nullptr);
  mgpuModuleUnload(nullptr);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("no usable CUDA device"), std::string::npos) << err;
}

TEST_F(Mgpu, LoadsLaunchesAndRefusesBadLaunchesBeforeTheDriver) {
  useFake();
  CUmodule m = mgpuModuleLoad(kImage, sizeof kImage);
  ASSERT_NE(m, nullptr);
  CUfunction f = mgpuModuleGetFunction(m, "partial_attention");
  ASSERT_NE(f, nullptr);
  CUstream s = mgpuStreamCreate();
  ASSERT_NE(s, nullptr);
  long before = fakeCounter("launches");
  uint64_t counted = launchCount();
  mgpuLaunchKernel(f, 132, 8, 1, 256, 1, 1, 4096, s, nullptr, nullptr, 0);
  EXPECT_EQ(fakeCounter("launches"), before + 1);
  EXPECT_EQ(launchCount(), counted + 1);
  EXPECT_EQ(fakeCounter("grid_x"), 132);
  EXPECT_EQ(fakeCounter("block_x"), 256);
  EXPECT_EQ(fakeCounter("smem"), 4096);

  testing::internal::CaptureStderr();
  mgpuLaunchKernel(f, 0, 1, 1, 256, 1, 1, 0, s, nullptr, nullptr, 0);              // empty grid
  mgpuLaunchKernel(f, 1, 1, 1, -1, 1, 1, 0, s, nullptr, nullptr, 0);               // negative block
  mgpuLaunchKernel(f, intptr_t(UINT_MAX) + 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr, 0); // > 32 bits
  mgpuLaunchKernel(f, 1, 1, 1, 32, 1, 1, -4, s, nullptr, nullptr, 0);              // negative smem
  mgpuLaunchKernel(nullptr, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr, 0);         // no function
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(fakeCounter("launches"), before + 1) << "a refused launch reached the driver";
  EXPECT_EQ(launchCount(), counted + 1);
  EXPECT_NE(err.find("refused launch"), std::string::npos) << err;
  EXPECT_NE(err.find("null function"), std::string::npos) << err;

  testing::internal::CaptureStderr();
  EXPECT_EQ(mgpuModuleGetFunction(m, "missing"), nullptr);
  err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cuModuleGetFunction failed"), std::string::npos) << err;

  setenv("FAKE_CUDA_FAIL", "cuLaunchKernel", 1);
  testing::internal::CaptureStderr();
  mgpuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr, 0);
  err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("mgpuLaunchKernel: cuLaunchKernel failed: CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos)
      << err;
  mgpuStreamSynchronize(s);
  mgpuStreamDestroy(s);
  long modules = fakeCounter("modules");
  mgpuModuleUnload(m);
  EXPECT_EQ(fakeCounter("modules"), modules - 1);
}

TEST_F(Mgpu, JitFailureReportsTheDriverLog) {
  useFake();
  char bad[] = "BAD ptx";
  testing::internal::CaptureStderr();
  EXPECT_EQ(mgpuModuleLoadJIT(bad, 2), nullptr);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cuModuleLoadDataEx failed"), std::string::npos) << err;
  EXPECT_NE(err.find("fake ptxas: syntax error"), std::string::npos) << err;
  char good[] = "//ptx";
  CUmodule m = mgpuModuleLoadJIT(good, 3);
  EXPECT_NE(m, nullptr);
  mgpuModuleUnload(m);
}

TEST_F(Mgpu, MemoryRoundTripsThroughTheDriver) {
  useFake();
  CUstream s = mgpuStreamCreate();
  long allocs = fakeCounter("allocations");
  auto *dev = static_cast<uint16_t *>(mgpuMemAlloc(16 * sizeof(uint16_t), s, false));
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ(fakeCounter("allocations"), allocs + 1);
  EXPECT_EQ(mgpuMemAlloc(0, s, false), nullptr);
  std::vector<uint16_t> host(16), back(16, 0);
  for (int i = 0; i < 16; ++i)
    host[size_t(i)] = uint16_t(i * 3);
  mgpuMemcpy(dev, host.data(), 32, s);
  mgpuMemset16(dev + 8, 0xBEEF, 4, s);
  mgpuMemcpy(back.data(), dev, 32, s);
  mgpuStreamSynchronize(s);
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(back[size_t(i)], i >= 8 && i < 12 ? 0xBEEF : i * 3) << i;
  auto *dev32 = static_cast<uint32_t *>(mgpuMemAlloc(16, s, true));
  mgpuMemset32(dev32, 0xA5A5A5A5u, 4, s);
  uint32_t w[4];
  mgpuMemcpy(w, dev32, 16, s);
  EXPECT_EQ(w[3], 0xA5A5A5A5u);
  testing::internal::CaptureStderr();
  mgpuMemcpy(nullptr, w, 16, s);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("null pointer"), std::string::npos);
  mgpuMemFree(dev, s);
  mgpuMemFree(dev32, s);
  EXPECT_EQ(fakeCounter("allocations"), allocs);
  mgpuStreamDestroy(s);
}

// Per-step buffers come from the stream-ordered allocator where the driver has it (and go back
// through it); without it, or when the pool cannot be set to keep its memory, from cuMemAlloc.
TEST_F(Mgpu, StepBuffersUseTheStreamOrderedAllocatorWhenTheDriverHasIt) {
  for (bool poolFails : {false, true}) {
    useFake();
    if (poolFails)
      setenv("FAKE_CUDA_FAIL", "cuMemPoolSetAttribute", 1);
    ASSERT_NE(processDevice(), nullptr);
    EXPECT_EQ(processDevice()->streamOrderedAllocation(), !poolFails);
    CUstream s = mgpuStreamCreate();
    long allocs = fakeCounter("allocations"), async = fakeCounter("async_allocations");
    void *a = mgpuMemAlloc(64, s, false);       // a step's buffer
    void *b = mgpuMemAlloc(64, nullptr, false); // no stream: synchronous
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(fakeCounter("allocations"), allocs + 2);
    EXPECT_EQ(fakeCounter("async_allocations"), async + (poolFails ? 0 : 1));
    mgpuMemFree(a, s);
    mgpuMemFree(b, s); // from cuMemAlloc: back through cuMemFree even with a stream
    EXPECT_EQ(fakeCounter("allocations"), allocs);
    EXPECT_EQ(fakeCounter("async_allocations"), async);
    mgpuStreamDestroy(s);
    unsetenv("FAKE_CUDA_FAIL");
  }
}

TEST_F(Mgpu, HostRegisterMemRefTakesDenseMemRefsOnly) {
  useFake();
  std::vector<float> buf(6 * 4);
  // memref<6x4xf32> descriptor: allocated, aligned, offset, sizes[2], strides[2].
  int64_t dense[7] = {int64_t(uintptr_t(buf.data())), int64_t(uintptr_t(buf.data())), 0, 6, 4, 4, 1};
  long reg = fakeCounter("registered");
  mgpuMemHostRegisterMemRef(2, dense, 4);
  EXPECT_EQ(fakeCounter("registered"), reg + 1);
  mgpuMemHostUnregisterMemRef(2, dense, 4);
  EXPECT_EQ(fakeCounter("registered"), reg);
  int64_t strided[7] = {dense[0], dense[1], 0, 3, 4, 8, 1}; // every other row
  testing::internal::CaptureStderr();
  mgpuMemHostRegisterMemRef(2, strided, 4);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("strided"), std::string::npos);
  EXPECT_EQ(fakeCounter("registered"), reg);
}

// The GPU bracket's time comes from the CUDA events around its launches, not from the host clock
// (which only saw asynchronous launches); a bracket that launched nothing keeps the host time.
TEST_F(Mgpu, GpuBracketReportsEventTimeToTheScheduler) {
  useFake();
  ASSERT_EQ(hgrt_gpu_available(), 1);
  setenv("FAKE_CUDA_EVENT_MS", "7.5", 1);
  SchedulerConfig sc;
  sc.policy = SchedulerPolicy::kStatic;
  sc.staticSplit = 512;
  auto ctx = std::make_shared<SchedulerContext>(sc);
  installContext(ctx);
  ctx->beginStep(1024);
  CUmodule m = mgpuModuleLoad(kImage, sizeof kImage);
  CUfunction f = mgpuModuleGetFunction(m, "k");
  CUstream s = mgpuStreamCreate();
  EXPECT_EQ(hgrt_split_point(3), 512);
  hgrt_segment_begin(3);
  hgrt_device_begin(3, 1);
  mgpuLaunchKernel(f, 4, 1, 1, 128, 1, 1, 0, s, nullptr, nullptr, 0);
  mgpuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, s, nullptr, nullptr, 0); // the combine kernel
  hgrt_device_end(3, 1);
  hgrt_device_begin(3, 0);
  hgrt_device_end(3, 0);
  mgpuStreamSynchronize(s);
  hgrt_segment_end(3);
  TraceRow row = ctx->lastTraceRow();
  EXPECT_DOUBLE_EQ(row.gpuSeconds, double(7.5f) * 1e-3);

  // No launch inside the bracket: the host-measured time stands (a sleep makes it nonzero).
  hgrt_segment_begin(3);
  hgrt_device_begin(3, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  hgrt_device_end(3, 1);
  hgrt_segment_end(3);
  row = ctx->lastTraceRow();
  EXPECT_GE(row.gpuSeconds, 0.002);
  EXPECT_NE(row.gpuSeconds, double(7.5f) * 1e-3);
  uninstallContext();
  mgpuStreamDestroy(s);
  mgpuModuleUnload(m);
}

TEST_F(Mgpu, AliasRegistryMapsInteriorPointersAndRefusesOverlaps) {
  std::vector<char> a(4096), b(4096);
  ASSERT_TRUE(registerDeviceAlias(a.data(), a.size(), 0x100000).isOk());
  EXPECT_EQ(deviceAlias(a.data()), 0x100000u);
  EXPECT_EQ(deviceAlias(a.data() + 100), 0x100000u + 100);
  EXPECT_EQ(hgrt_gpu_alias(a.data() + 4095), reinterpret_cast<void *>(uintptr_t(0x100000 + 4095)));
  EXPECT_EQ(deviceAlias(a.data() + 4096), 0u); // one past the end
  EXPECT_EQ(deviceAlias(b.data()), 0u);
  EXPECT_EQ(hgrt_gpu_alias(nullptr), nullptr);
  EXPECT_FALSE(registerDeviceAlias(a.data() + 10, 16, 0x200000).isOk());
  EXPECT_FALSE(registerDeviceAlias(a.data(), 0, 0x200000).isOk());
  unregisterDeviceAlias(a.data());
  EXPECT_EQ(deviceAlias(a.data() + 100), 0u);
}

} // namespace
} // namespace hybridgen::rt::test
