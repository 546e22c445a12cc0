// The HBM tier as real device memory: one device allocation per pool array for the tier's id
// range, async copies on the tier's own stream (through a pinned staging buffer for token rows),
// and the device aliases that hgrt_gpu_alias hands to compiled code.
#include "hybridgen/runtime/cuda/device.h"
#include "hybridgen/runtime/cuda/gpu_runtime.h"
#include "hybridgen/runtime/topology.h"

#include <cstdlib>
#include <cstring>

namespace hybridgen::rt {

Status resolveHbmTier(TierInfo &tier) {
  tier.onDevice = false;
  cuda::CudaDevice *d = tier.wantsDevice ? cuda::processDevice() : nullptr;
  if (!d) {
    tier.emulated = true; // host memory standing in for the GPU (the notice said why, if asked)
    return Status::ok();
  }
  tier.emulated = false;
  tier.onDevice = true;
  if (tier.capacityBytes == 0) {
    auto mem = d->memInfo();
    if (!mem)
      return mem.status();
    // Leave a tenth of the free memory to the kernels' partials, modules and other users.
    tier.capacityBytes = mem->first / 10 * 9;
  }
  return Status::ok();
}

namespace cuda {

Status pinHostRange(void *p, size_t bytes) {
  CudaDevice *d = processDevice();
  if (!d)
    return systemError("cannot pin host memory: no usable CUDA device");
  if (Status s = d->makeCurrent(); !s)
    return s;
  return d->check(d->api().cuMemHostRegister(p, bytes, kHostRegisterPortable), "cuMemHostRegister");
}

void unpinHostRange(void *p) {
  if (CudaDevice *d = processDeviceIfOpen())
    d->api().cuMemHostUnregister(p);
}

namespace {

constexpr size_t kStagingBytes = 4u << 20;

class DeviceTierMemory final : public TierMemory {
public:
  DeviceTierMemory(CudaDevice *d, std::string tierName) : dev_(d), tierName_(std::move(tierName)) {}
  ~DeviceTierMemory() override {
    if (!dev_)
      return;
    (void)dev_->makeCurrent();
    const DriverApi &a = dev_->api();
    for (const Array &arr : arrays_) {
      unregisterDeviceAlias(arr.host);
      a.cuMemFree(arr.device);
    }
    if (staging_) {
      a.cuMemHostUnregister(staging_);
      std::free(staging_);
    }
    if (stream_)
      a.cuStreamDestroy(stream_);
  }

  bool hostAccessible() const override { return false; }
  bool onDevice() const override { return true; }
  Status bindHostRange(void *, size_t) const override { return Status::ok(); } // pages never touched
  std::string label() const override {
    return dev_ ? "cuda:" + std::to_string(dev_->info().ordinal) + " " + dev_->info().name : "cuda:none";
  }

  Status attachArray(void *hostArray, size_t arrayBytes, size_t firstByte, size_t bytes, bool) override {
    if (!dev_)
      return systemError("tier '" + tierName_ + "' wants device memory but no CUDA device is usable");
    if (Status s = dev_->makeCurrent(); !s)
      return s;
    const DriverApi &a = dev_->api();
    if (!stream_)
      if (Status s = dev_->check(a.cuStreamCreate(&stream_, kStreamNonBlocking), "cuStreamCreate"); !s)
        return s;
    Array arr{hostArray, firstByte, bytes, 0};
    if (bytes) {
      if (Status s = dev_->check(a.cuMemAlloc(&arr.device, bytes), "cuMemAlloc"); !s)
        return systemError("tier '" + tierName_ + "': " + std::to_string(bytes) + " bytes of device memory: " +
                           s.message());
      // Byte i of the host array <-> alias + i; only the tier's own range is backed.
      Status s = registerDeviceAlias(hostArray, arrayBytes, arr.device - firstByte);
      if (!s) {
        a.cuMemFree(arr.device);
        return s;
      }
    }
    arrays_.push_back(arr);
    return Status::ok();
  }

  Status copyToDevice(const std::vector<Copy> &copies, bool staged) const override {
    return transfer(copies, staged, /*toDevice=*/true);
  }
  Status copyFromDevice(const std::vector<Copy> &copies, bool staged) const override {
    return transfer(copies, staged, /*toDevice=*/false);
  }

  Status copyWithinDevice(size_t dstOffset, size_t srcOffset, size_t bytes) const override {
    for (const Array &arr : arrays_)
      if (!inside(arr, dstOffset, bytes) || !inside(arr, srcOffset, bytes))
        return invalidArgument("tier '" + tierName_ + "': device copy outside the tier's range");
    if (Status s = dev_->makeCurrent(); !s)
      return s;
    for (const Array &arr : arrays_)
      if (Status s = dev_->check(dev_->api().cuMemcpyDtoDAsync(deviceAddr(arr, dstOffset), deviceAddr(arr, srcOffset),
                                                               bytes, stream_),
                                 "cuMemcpyDtoDAsync");
          !s)
        return s;
    return sync();
  }

private:
  struct Array {
    void *host;
    size_t first, bytes;
    CUdeviceptr device;
  };

  static bool inside(const Array &arr, size_t offset, size_t bytes) {
    return offset >= arr.first && bytes <= arr.bytes && offset - arr.first <= arr.bytes - bytes;
  }
  static CUdeviceptr deviceAddr(const Array &arr, size_t offset) { return arr.device + (offset - arr.first); }

  Status sync() const {
    return dev_->check(dev_->api().cuStreamSynchronize(stream_), "cuStreamSynchronize");
  }

  Status ensureStaging() const {
    if (staging_)
      return Status::ok();
    void *p = std::aligned_alloc(4096, kStagingBytes);
    if (!p)
      return systemError("tier '" + tierName_ + "': cannot allocate the staging buffer");
    if (Status s = dev_->check(dev_->api().cuMemHostRegister(p, kStagingBytes, kHostRegisterPortable),
                               "cuMemHostRegister(staging)");
        !s) {
      std::free(p);
      return s;
    }
    staging_ = static_cast<char *>(p);
    return Status::ok();
  }

  /// Every piece is checked before the first byte moves: a bad offset copies nothing.
  Status transfer(const std::vector<Copy> &copies, bool staged, bool toDevice) const {
    for (const Copy &c : copies)
      if (c.array < 0 || size_t(c.array) >= arrays_.size() || !inside(arrays_[size_t(c.array)], c.offset, c.bytes) ||
          (c.bytes && !c.host))
        return invalidArgument("tier '" + tierName_ + "': copy of " + std::to_string(c.bytes) + " bytes at array " +
                               std::to_string(c.array) + " offset " + std::to_string(c.offset) +
                               " is outside the tier's device memory");
    if (copies.empty())
      return Status::ok();
    if (Status s = dev_->makeCurrent(); !s)
      return s;
    const DriverApi &a = dev_->api();
    if (!staged) {
      for (const Copy &c : copies) {
        CUdeviceptr d = deviceAddr(arrays_[size_t(c.array)], c.offset);
        CUresult r = toDevice ? a.cuMemcpyHtoDAsync(d, c.host, c.bytes, stream_)
                              : a.cuMemcpyDtoHAsync(c.host, d, c.bytes, stream_);
        if (Status s = dev_->check(r, toDevice ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync"); !s)
          return s;
      }
      return sync();
    }
    if (Status s = ensureStaging(); !s)
      return s;
    // Pieces go through the staging buffer in batches; pieces adjacent on the device (rows of one
    // head in one block) become one DMA.
    size_t i = 0;
    while (i < copies.size()) {
      size_t used = 0, batchEnd = i;
      struct Run {
        CUdeviceptr device;
        size_t staging, bytes;
      };
      std::vector<Run> runs;
      while (batchEnd < copies.size()) {
        const Copy &c = copies[batchEnd];
        if (c.bytes > kStagingBytes) // a single huge piece: stream it in staging-sized parts
          break;
        if (used + c.bytes > kStagingBytes)
          break;
        CUdeviceptr d = deviceAddr(arrays_[size_t(c.array)], c.offset);
        if (toDevice)
          std::memcpy(staging_ + used, c.host, c.bytes);
        if (!runs.empty() && runs.back().device + runs.back().bytes == d && runs.back().staging + runs.back().bytes == used)
          runs.back().bytes += c.bytes;
        else
          runs.push_back({d, used, c.bytes});
        used += c.bytes;
        ++batchEnd;
      }
      if (batchEnd == i) { // copies[i] is larger than the staging buffer
        const Copy &c = copies[i];
        for (size_t done = 0; done < c.bytes; done += kStagingBytes) {
          size_t n = std::min(kStagingBytes, c.bytes - done);
          CUdeviceptr d = deviceAddr(arrays_[size_t(c.array)], c.offset) + done;
          char *h = static_cast<char *>(c.host) + done;
          if (toDevice)
            std::memcpy(staging_, h, n);
          CUresult r = toDevice ? a.cuMemcpyHtoDAsync(d, staging_, n, stream_) : a.cuMemcpyDtoHAsync(staging_, d, n, stream_);
          if (Status s = dev_->check(r, toDevice ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync"); !s)
            return s;
          if (Status s = sync(); !s)
            return s;
          if (!toDevice)
            std::memcpy(h, staging_, n);
        }
        ++i;
        continue;
      }
      for (const Run &r : runs) {
        CUresult res = toDevice ? a.cuMemcpyHtoDAsync(r.device, staging_ + r.staging, r.bytes, stream_)
                                : a.cuMemcpyDtoHAsync(staging_ + r.staging, r.device, r.bytes, stream_);
        if (Status s = dev_->check(res, toDevice ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync"); !s)
          return s;
      }
      if (Status s = sync(); !s) // the staging buffer is reused by the next batch
        return s;
      if (!toDevice) {
        size_t off = 0;
        for (size_t k = i; k < batchEnd; ++k) {
          std::memcpy(copies[k].host, staging_ + off, copies[k].bytes);
          off += copies[k].bytes;
        }
      }
      i = batchEnd;
    }
    return Status::ok();
  }

  CudaDevice *dev_;
  std::string tierName_;
  CUstream stream_ = nullptr;
  std::vector<Array> arrays_;
  mutable char *staging_ = nullptr;
};

} // namespace

std::unique_ptr<TierMemory> makeDeviceTierMemory(const TierInfo &tier) {
  return std::make_unique<DeviceTierMemory>(processDevice(), tier.name);
}

} // namespace cuda
} // namespace hybridgen::rt
