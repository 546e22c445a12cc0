// The CUDA driver API as the runtime sees it: opaque handle types, the few constants it uses and a
// table of entry points filled by dlsym, so nothing links against libcuda and no cuda.h is needed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hybridgen::rt::cuda {

// Handle types of the driver API (cuda.h spells them CUcontext, ...). Only their size matters here:
// the runtime passes them through and never looks inside.
using CUresult = int32_t;
using CUdevice = int32_t;
using CUdeviceptr = uint64_t;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;
using CUjit_option = int32_t;
using CUmemoryPool = struct CUmemPoolHandle_st *;

// The values below are the driver ABI (stable since CUDA 4); names follow cuda.h.
inline constexpr CUresult kCudaSuccess = 0;
inline constexpr CUresult kCudaErrorInvalidValue = 1;
inline constexpr CUresult kCudaErrorOutOfMemory = 2;
inline constexpr CUresult kCudaErrorNoDevice = 100;
inline constexpr CUresult kCudaErrorNotReady = 600;
inline constexpr int32_t kAttrComputeCapabilityMajor = 75;
inline constexpr int32_t kAttrComputeCapabilityMinor = 76;
inline constexpr int32_t kAttrUnifiedAddressing = 41;
inline constexpr unsigned kStreamNonBlocking = 0x1;
inline constexpr unsigned kEventDefault = 0x0;          // timing enabled
inline constexpr unsigned kEventDisableTiming = 0x2;
inline constexpr unsigned kHostRegisterPortable = 0x1;
inline constexpr int32_t kMemPoolAttrReleaseThreshold = 4; // CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
inline constexpr CUjit_option kJitErrorLogBuffer = 5;
inline constexpr CUjit_option kJitErrorLogBufferSizeBytes = 6;
inline constexpr CUjit_option kJitOptimizationLevel = 7;

/// Oldest driver the runtime accepts: 12.0 is the first to load the PTX ISA 8.0 that the compiler
/// emits for sm_90 (cuDriverGetVersion reports 1000 * major + 10 * minor).
inline constexpr int32_t kMinDriverVersion = 12000;

/// Entry points resolved from libcuda.so.1. Where cuda.h maps a name to a versioned symbol
/// (cuMemAlloc -> cuMemAlloc_v2, ...) the table holds the versioned one: the unversioned symbols
/// are the 32-bit-size ABI kept for old binaries.
struct DriverApi {
  CUresult (*cuInit)(unsigned flags) = nullptr;
  CUresult (*cuDriverGetVersion)(int *version) = nullptr;
  CUresult (*cuGetErrorString)(CUresult error, const char **str) = nullptr;
  CUresult (*cuGetErrorName)(CUresult error, const char **str) = nullptr;
  CUresult (*cuDeviceGetCount)(int *count) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice *device, int ordinal) = nullptr;
  CUresult (*cuDeviceGetName)(char *name, int len, CUdevice device) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int *value, int32_t attribute, CUdevice device) = nullptr;
  CUresult (*cuDeviceTotalMem)(size_t *bytes, CUdevice device) = nullptr;            // _v2
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice device) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice device) = nullptr;                 // _v2
  CUresult (*cuCtxSetCurrent)(CUcontext ctx) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext *ctx) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule *module, const void *image) = nullptr;
  CUresult (*cuModuleLoadDataEx)(CUmodule *module, const void *image, unsigned numOptions,
                                 CUjit_option *options, void **values) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule module) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction *fn, CUmodule module, const char *name) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned smemBytes, CUstream stream,
                             void **params, void **extra) = nullptr;
  CUresult (*cuStreamCreate)(CUstream *stream, unsigned flags) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream stream) = nullptr;                           // _v2
  CUresult (*cuStreamSynchronize)(CUstream stream) = nullptr;
  CUresult (*cuStreamWaitEvent)(CUstream stream, CUevent event, unsigned flags) = nullptr;
  CUresult (*cuEventCreate)(CUevent *event, unsigned flags) = nullptr;
  CUresult (*cuEventDestroy)(CUevent event) = nullptr;                              // _v2
  CUresult (*cuEventRecord)(CUevent event, CUstream stream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent event) = nullptr;
  CUresult (*cuEventElapsedTime)(float *ms, CUevent start, CUevent end) = nullptr;   // _v2 if present
  CUresult (*cuMemAlloc)(CUdeviceptr *ptr, size_t bytes) = nullptr;                 // _v2
  CUresult (*cuMemAllocManaged)(CUdeviceptr *ptr, size_t bytes, unsigned flags) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr ptr) = nullptr;                                 // _v2
  CUresult (*cuMemGetInfo)(size_t *freeBytes, size_t *totalBytes) = nullptr;        // _v2
  CUresult (*cuMemcpyAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) = nullptr;
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t bytes, CUstream s) = nullptr;
  CUresult (*cuMemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t bytes, CUstream s) = nullptr;
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) = nullptr;
  CUresult (*cuMemsetD32Async)(CUdeviceptr dst, unsigned value, size_t n, CUstream s) = nullptr;
  CUresult (*cuMemsetD16Async)(CUdeviceptr dst, unsigned short value, size_t n, CUstream s) = nullptr;
  CUresult (*cuMemHostRegister)(void *p, size_t bytes, unsigned flags) = nullptr;   // _v2
  CUresult (*cuMemHostUnregister)(void *p) = nullptr;
  // Optional (CUDA 11.2+; null where the driver lacks them): the stream-ordered allocator.
  CUresult (*cuMemAllocAsync)(CUdeviceptr *ptr, size_t bytes, CUstream s) = nullptr;
  CUresult (*cuMemFreeAsync)(CUdeviceptr ptr, CUstream s) = nullptr;
  CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *pool, CUdevice device) = nullptr;
  CUresult (*cuMemPoolSetAttribute)(CUmemoryPool pool, int32_t attribute, void *value) = nullptr;
};

} // namespace hybridgen::rt::cuda
