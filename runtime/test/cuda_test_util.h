// Test helpers for the CUDA layer: point the process-wide device at the fake drivers built with
// the tests (fake_cuda/) and read the fake's counters.
#pragma once

#include "hybridgen/runtime/cuda/device.h"
#include "hybridgen/runtime/cuda/gpu_runtime.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace hybridgen::rt::test {

/// Resets the process device before and after each test and clears every variable the CUDA layer
/// and the fake read, so tests cannot leak a device (or a failure) into each other.
class CudaEnvTest : public ::testing::Test {
protected:
  void SetUp() override { clean(); }
  void TearDown() override { clean(); }
  /// The process device will load |library| (a path) on its next use.
  static void useLibrary(const std::string &library) {
    cuda::resetGpuTimersForTesting();
    cuda::resetProcessDeviceForTesting();
    setenv("HYBRIDGEN_CUDA_LIBRARY", library.c_str(), 1);
  }
  static void useFake() { useLibrary(HG_FAKE_CUDA); }
  /// A counter of the fake driver ("launches", "h2d", "d2h", "d2d", "allocations", "registered",
  /// "modules", "grid_x", "block_x", "smem").
  static long fakeCounter(const char *what) {
    void *h = dlopen(HG_FAKE_CUDA, RTLD_NOW | RTLD_NOLOAD);
    if (!h)
      return -1;
    auto fn = reinterpret_cast<long (*)(const char *)>(dlsym(h, "fakecuda_counter"));
    long v = fn ? fn(what) : -1;
    dlclose(h);
    return v;
  }

private:
  static void clean() {
    cuda::resetGpuTimersForTesting();
    cuda::resetProcessDeviceForTesting();
    for (const char *v : {"HYBRIDGEN_CUDA_LIBRARY", "HYBRIDGEN_CUDA_DEVICE", "HYBRIDGEN_DISABLE_CUDA",
                          "FAKE_CUDA_VERSION", "FAKE_CUDA_DEVICES", "FAKE_CUDA_INIT_ERROR", "FAKE_CUDA_FAIL",
                          "FAKE_CUDA_MEM_FREE", "FAKE_CUDA_MEM_TOTAL", "FAKE_CUDA_EVENT_MS"})
      unsetenv(v);
  }
};

} // namespace hybridgen::rt::test
