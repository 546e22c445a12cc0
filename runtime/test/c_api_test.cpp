// Tests for the C ABI against the installed scheduler context, and the trace it produces.
#include "hybridgen/runtime/c_api.h"
#include "hybridgen/runtime/context.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cpuid.h>

#include <climits>
#include <cstdlib>
#include <thread>

using namespace hybridgen::rt;

namespace {

TEST(CApi, SafeWithNothingInstalled) {
  uninstallContext();
  EXPECT_EQ(hgrt_split_point(0), INT64_MAX);
  hgrt_segment_begin(0);
  hgrt_device_begin(0, 0);
  hgrt_device_end(0, 0);
  hgrt_device_end(0, 7); // bad device: ignored
  hgrt_segment_end(0);
}

TEST(CApi, BracketsFeedTheSchedulerAndTrace) {
  SchedulerConfig cfg;
  cfg.quantum = 16;
  auto ctx = std::make_shared<SchedulerContext>(cfg);
  installContext(ctx);
  EXPECT_EQ(hgrt_split_point(0), INT64_MAX); // no length known yet
  const int64_t L = 32768;
  for (int step = 0; step < 12; ++step) {
    ctx->beginStep(L);
    int64_t s = hgrt_split_point(0);
    ASSERT_GE(s, 0);
    ASSERT_LE(s, L);
    hgrt_segment_begin(0);
    hgrt_device_begin(0, 0);
    hgrt_device_end(0, 0);
    hgrt_device_begin(0, 1);
    hgrt_device_end(0, 1);
    // Deterministic device times (as a GPU backend would report from events): cpu 10x slower.
    ctx->recordDeviceTime(0, 0, 10e-9 * double(s));
    ctx->recordDeviceTime(0, 1, 1e-9 * double(L - s));
    hgrt_segment_end(0);
  }
  int64_t s = hgrt_split_point(0);
  EXPECT_NEAR(double(s), double(L) / 11, 0.05 * double(L) / 11 + 16);
  Trace tr = ctx->trace();
  ASSERT_EQ(tr.size(), 12u);
  EXPECT_EQ(tr.column("split").size(), 12u);
  EXPECT_EQ(tr.column("context_tokens")[3], double(L));
  EXPECT_GT(tr.rows()[0].segmentSeconds, 0);
  EXPECT_EQ(tr.toCsv().rfind("step,segment,context_tokens,split,cpu_s,gpu_s", 0), 0u);
  EXPECT_TRUE(tr.column("nonexistent").empty());
  uninstallContext();
  EXPECT_EQ(hgrt_split_point(0), INT64_MAX);
}

TEST(CApi, ModelledDeviceTimeReplacesTheMeasurementAndIsLabelled) {
  SchedulerConfig cfg;
  cfg.quantum = 16;
  auto ctx = std::make_shared<SchedulerContext>(cfg);
  // The GPU side of a no-GPU machine: 3x faster per token than the (also modelled) CPU side.
  ctx->setDeviceTimeModel(0, [](int64_t tokens) { return 3e-9 * double(tokens); });
  ctx->setDeviceTimeModel(1, [](int64_t tokens) { return 1e-9 * double(tokens); });
  installContext(ctx);
  const int64_t L = 16384;
  for (int step = 0; step < 12; ++step) {
    ctx->beginStep(L);
    int64_t s = hgrt_split_point(0);
    hgrt_segment_begin(0);
    hgrt_device_begin(0, 1);
    hgrt_device_end(0, 1);
    hgrt_segment_end(0);
    Trace tr = ctx->trace();
    EXPECT_DOUBLE_EQ(tr.rows().back().gpuSeconds, 1e-9 * double(L - std::min(s, L)));
    EXPECT_EQ(tr.rows().back().modelledDevices, 3);
  }
  EXPECT_NEAR(double(hgrt_split_point(0)), double(L) / 4, 0.05 * double(L) / 4 + 16);
  EXPECT_EQ(ctx->trace().column("modelled_devices").back(), 3.0);
  uninstallContext();
}

TEST(CApi, ConcurrentCallersAreSafe) {
  auto ctx = std::make_shared<SchedulerContext>(SchedulerConfig{});
  installContext(ctx);
  ctx->beginStep(4096);
#pragma omp parallel for num_threads(4)
  for (int i = 0; i < 400; ++i) {
    int64_t seg = i % 8;
    (void)hgrt_split_point(seg);
    hgrt_segment_begin(seg);
    hgrt_device_begin(seg, i % 2);
    hgrt_device_end(seg, i % 2);
    hgrt_segment_end(seg);
    if (i == 200)
      installContext(std::make_shared<SchedulerContext>(SchedulerConfig{})); // swap while in use
  }
  uninstallContext();
  EXPECT_GT(ctx->trace().size(), 0u);
}

// hgrt_amx_available: 1 exactly where the CPU has AMX-BF16 (and the OS grants the tile state,
// which Linux >= 5.16 does on request), 0 under HYBRIDGEN_DISABLE_AMX, stable across calls.
TEST(CApi, AmxAvailability) {
  unsetenv("HYBRIDGEN_DISABLE_AMX");
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  bool cpuHasAmx = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx & (1u << 22)) &&
                   (edx & (1u << 24));
  int32_t first = hgrt_amx_available();
  EXPECT_EQ(first, hgrt_amx_available());
  if (!cpuHasAmx)
    EXPECT_EQ(first, 0);
  std::printf("[hybridgen] cpu has AMX-BF16: %s, hgrt_amx_available() = %d\n",
              cpuHasAmx ? "yes" : "no", first);
  setenv("HYBRIDGEN_DISABLE_AMX", "1", 1);
  EXPECT_EQ(hgrt_amx_available(), 0);
  setenv("HYBRIDGEN_DISABLE_AMX", "0", 1);
  EXPECT_EQ(hgrt_amx_available(), first);
  unsetenv("HYBRIDGEN_DISABLE_AMX");
  EXPECT_EQ(hgrt_amx_available(), first);
}

} // namespace

namespace {

// Compiled kernels report argument errors per thread; the caller takes the first one once.
TEST(CApi, KernelArgumentErrorsAreTakenOncePerThread) {
  hgrt_take_kernel_argument_error(nullptr); // start clean
  hgrt_argument_error rec;
  EXPECT_EQ(hgrt_take_kernel_argument_error(&rec), 0);
  EXPECT_EQ(rec.count, 0);
  hgrt_kernel_argument_error(HGRT_ARG_BLOCK_ID, 2, 5, 900, 64);
  hgrt_kernel_argument_error(HGRT_ARG_LENGTH, 3, -1, 10000, 512);
  // Another thread neither sees nor takes this thread's record.
  std::thread other([] {
    hgrt_argument_error theirs;
    EXPECT_EQ(hgrt_take_kernel_argument_error(&theirs), 0);
  });
  other.join();
  ASSERT_EQ(hgrt_take_kernel_argument_error(&rec), 1);
  EXPECT_EQ(rec.kind, HGRT_ARG_BLOCK_ID);
  EXPECT_EQ(rec.sequence, 2);
  EXPECT_EQ(rec.index, 5);
  EXPECT_EQ(rec.value, 900);
  EXPECT_EQ(rec.limit, 64);
  EXPECT_EQ(rec.count, 2);
  EXPECT_EQ(hgrt_take_kernel_argument_error(&rec), 0);
}

} // namespace
