// The dlopen'ed CUDA driver layer without a GPU: its error paths (no library, missing symbols,
// too old a driver, no device, failing calls) and the process-wide device's one-time notice.
#include "cuda_test_util.h"
#include "hybridgen/runtime/c_api.h"

#include <gtest/gtest.h>

namespace hybridgen::rt::test {
namespace {

using cuda::CudaDevice;

class CudaDevice_ : public CudaEnvTest {};

size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1))
    ++n;
  return n;
}

TEST_F(CudaDevice_, MissingLibraryIsNotFoundAndNamesThePath) {
  auto d = CudaDevice::open("/nonexistent/libcuda.so.1");
  ASSERT_FALSE(d.isOk());
  EXPECT_EQ(d.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(d.status().message().find("/nonexistent/libcuda.so.1"), std::string::npos) << d.status().message();
}

TEST_F(CudaDevice_, DriverLackingSymbolsNamesEveryMissingOne) {
  auto d = CudaDevice::open(HG_FAKE_CUDA_PARTIAL);
  ASSERT_FALSE(d.isOk());
  EXPECT_EQ(d.status().code(), ErrorCode::kSystem);
  const std::string &m = d.status().message();
  EXPECT_NE(m.find("lacks"), std::string::npos) << m;
  EXPECT_NE(m.find("cuDeviceGetCount"), std::string::npos) << m;
  EXPECT_NE(m.find("cuMemAlloc_v2"), std::string::npos) << m;
  EXPECT_EQ(m.find("cuInit,"), std::string::npos) << m; // present in the partial driver
}

TEST_F(CudaDevice_, TooOldDriverIsRefusedWithBothVersions) {
  setenv("FAKE_CUDA_VERSION", "11080", 1);
  auto d = CudaDevice::open(HG_FAKE_CUDA);
  ASSERT_FALSE(d.isOk());
  EXPECT_EQ(d.status().code(), ErrorCode::kSystem);
  EXPECT_NE(d.status().message().find("11.8"), std::string::npos) << d.status().message();
  EXPECT_NE(d.status().message().find("12.0"), std::string::npos) << d.status().message();
  setenv("FAKE_CUDA_VERSION", "12000", 1); // the oldest accepted
  EXPECT_TRUE(CudaDevice::open(HG_FAKE_CUDA).isOk());
}

TEST_F(CudaDevice_, NoDeviceIsNotFound) {
  setenv("FAKE_CUDA_DEVICES", "0", 1);
  auto none = CudaDevice::open(HG_FAKE_CUDA);
  ASSERT_FALSE(none.isOk());
  EXPECT_EQ(none.status().code(), ErrorCode::kNotFound);
  unsetenv("FAKE_CUDA_DEVICES");
  setenv("FAKE_CUDA_INIT_ERROR", "100", 1); // what cuInit says on a machine with a driver, no GPU
  auto noInit = CudaDevice::open(HG_FAKE_CUDA);
  ASSERT_FALSE(noInit.isOk());
  EXPECT_EQ(noInit.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(noInit.status().message().find("cuInit failed: CUDA_ERROR_NO_DEVICE"), std::string::npos)
      << noInit.status().message();
}

TEST_F(CudaDevice_, OrdinalBeyondTheDevicesIsInvalid) {
  auto d = CudaDevice::open(HG_FAKE_CUDA, 1);
  ASSERT_FALSE(d.isOk());
  EXPECT_EQ(d.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("sees 1"), std::string::npos) << d.status().message();
}

TEST_F(CudaDevice_, FailingCallNamesTheCallAndTheCudaError) {
  setenv("FAKE_CUDA_FAIL", "cuDevicePrimaryCtxRetain", 1);
  auto d = CudaDevice::open(HG_FAKE_CUDA);
  ASSERT_FALSE(d.isOk());
  EXPECT_EQ(d.status().message(),
            "cuDevicePrimaryCtxRetain failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory");
}

TEST_F(CudaDevice_, OpensTheFakeDeviceAndReportsIt) {
  setenv("FAKE_CUDA_MEM_FREE", "1234567", 1);
  auto d = CudaDevice::open(HG_FAKE_CUDA);
  ASSERT_TRUE(d.isOk()) << d.status().message();
  const cuda::DeviceInfo &info = (*d)->info();
  EXPECT_EQ(info.name, "Fake H200");
  EXPECT_EQ(info.ccMajor, 9);
  EXPECT_EQ(info.driverVersion, 13000);
  EXPECT_NE((*d)->describe().find("sm_90, driver 13.0"), std::string::npos) << (*d)->describe();
  auto mem = (*d)->memInfo();
  ASSERT_TRUE(mem.isOk());
  EXPECT_EQ(mem->first, 1234567u);
  EXPECT_TRUE((*d)->makeCurrent().isOk());
}

// The fallback: no driver -> hgrt_gpu_available() is 0 and the notice is printed exactly once.
TEST_F(CudaDevice_, NoDriverGivesOneNoticeAndTheCpuFallback) {
  useLibrary("/nonexistent/libcuda.so.1");
  testing::internal::CaptureStderr();
  EXPECT_EQ(hgrt_gpu_available(), 0);
  EXPECT_EQ(hgrt_gpu_available(), 0);
  EXPECT_EQ(cuda::processDevice(), nullptr);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(err, "hybridgen: no usable CUDA device"), 1u) << err;
  EXPECT_EQ(count(err, "\n"), 1u) << err; // one line
  EXPECT_NE(err.find("every token runs on the CPU"), std::string::npos) << err;
  EXPECT_NE(cuda::processDeviceUnavailableReason().find("/nonexistent"), std::string::npos);
}

TEST_F(CudaDevice_, ProcessDeviceUsesTheConfiguredLibraryAndCanBeDisabled) {
  useFake();
  EXPECT_EQ(hgrt_gpu_available(), 1);
  ASSERT_NE(cuda::processDeviceIfOpen(), nullptr);
  EXPECT_EQ(cuda::processDevice()->info().name, "Fake H200");

  useFake();
  setenv("HYBRIDGEN_DISABLE_CUDA", "1", 1);
  testing::internal::CaptureStderr();
  EXPECT_EQ(hgrt_gpu_available(), 0);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("HYBRIDGEN_DISABLE_CUDA"), std::string::npos) << err;

  useFake();
  setenv("HYBRIDGEN_DISABLE_CUDA", "0", 1); // "0" means not disabled
  setenv("HYBRIDGEN_CUDA_DEVICE", "5", 1);
  testing::internal::CaptureStderr();
  EXPECT_EQ(hgrt_gpu_available(), 0);
  err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("CUDA device 5 requested"), std::string::npos) << err;
}

// Nothing opens the device by itself: asking whether it is open does not print the notice.
TEST_F(CudaDevice_, IfOpenNeverOpens) {
  useLibrary("/nonexistent/libcuda.so.1");
  testing::internal::CaptureStderr();
  EXPECT_EQ(cuda::processDeviceIfOpen(), nullptr);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

} // namespace
} // namespace hybridgen::rt::test
