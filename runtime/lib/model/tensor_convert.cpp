// Checkpoint tensors to f32 for callers that compute in f32 (F32 copied, F16 and BF16 widened).
#include "hybridgen/runtime/safetensors.h"

#include <cmath>
#include <cstring>

namespace hybridgen::rt {

float f16ToF32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {  // inf / NaN (payload kept, NaN stays NaN)
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {  // normal: rebias 15 -> 127
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // signed zero
    bits = sign;
  } else {  // subnormal: value = mantissa * 2^-24, normal in f32
    int shift = 0;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      ++shift;
    }
    bits = sign | (uint32_t(113 - shift) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32ToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) // NaN: keep the top payload bits, force it quiet
    return uint16_t(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  if (magnitude >= 0x477ff000u) // >= 65520, halfway past 65504: rounds (to even) to infinity
    return uint16_t(sign | 0x7c00u);
  if (magnitude < 0x38800000u) {
    // Below 2^-14 the result is subnormal (or rounds up to the smallest normal, 0x0400): in
    // units of 2^-24 it is the integer nearest |f| * 2^24, scaled exactly and rounded by the
    // default (to nearest even) mode.
    float a;
    std::memcpy(&a, &magnitude, 4);
    return uint16_t(sign | uint16_t(std::nearbyint(a * 16777216.0f)));
  }
  // Normal: rebias the exponent (127 -> 15) and round 23 mantissa bits to 10; a carry out of the
  // mantissa correctly bumps the exponent.
  uint32_t r = magnitude - (112u << 23);
  r += 0xfffu + ((r >> 13) & 1u);
  return uint16_t(sign | uint16_t(r >> 13));
}

namespace {

/// Element count of |t| if it can be widened to f32 and its byte size matches its shape (always so
/// for tensors from Checkpoint::open; checked again for TensorInfo values built by hand).
Result<uint64_t> convertibleElements(const TensorInfo &t) {
  const std::string where = "safetensors: '" + t.file + "': tensor '" + t.name + "': ";
  if (t.dtype != TensorDType::f32 && t.dtype != TensorDType::f16 && t.dtype != TensorDType::bf16)
    return invalidArgument(where + t.dtypeName + " cannot be converted to f32 (F32, F16, BF16 only)");
  uint64_t n = 1, bytes = 0;
  for (int64_t d : t.shape)
    if (d < 0 || __builtin_mul_overflow(n, uint64_t(d), &n))
      return invalidArgument(where + "invalid shape");
  if (__builtin_mul_overflow(n, tensorDTypeSize(t.dtype), &bytes) || bytes != t.nbytes)
    return invalidArgument(where + "nbytes does not match its shape");
  if (n != 0 && !t.data)
    return invalidArgument(where + "no data");
  return n;
}

} // namespace

Status copyTensorAsF32(const TensorInfo &t, float *dst, uint64_t dstCount) {
  Result<uint64_t> count = convertibleElements(t);
  if (!count)
    return count.status();
  const uint64_t n = *count;
  if (dstCount != n)
    return invalidArgument("safetensors: '" + t.file + "': tensor '" + t.name + "' has " +
                           std::to_string(n) + " elements but the destination " +
                           std::to_string(dstCount));
  if (n == 0)
    return Status::ok();
  if (!dst)
    return invalidArgument("copyTensorAsF32: null destination");
  // The mapping gives no alignment guarantee: read element by element through memcpy.
  const auto *src = static_cast<const unsigned char *>(t.data);
  if (t.dtype == TensorDType::f32) {
    std::memcpy(dst, src, n * 4);
    return Status::ok();
  }
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    if (t.dtype == TensorDType::f16) {
      dst[i] = f16ToF32(h);
    } else {
      uint32_t bits = uint32_t(h) << 16;
      std::memcpy(&dst[i], &bits, 4);
    }
  }
  return Status::ok();
}

Result<std::vector<float>> tensorToF32(const TensorInfo &t) {
  Result<uint64_t> count = convertibleElements(t);  // before allocating |count| floats
  if (!count)
    return count.status();
  std::vector<float> out(*count);
  Status s = copyTensorAsF32(t, out.data(), out.size());
  if (!s)
    return s;
  return out;
}

} // namespace hybridgen::rt
