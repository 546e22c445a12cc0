// Overflow-safe arithmetic for every size, position and count the runtime takes from its callers.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>

namespace hybridgen::rt {

/// |a| + |b| into |out|; false (|out| unspecified) when the sum does not fit. Every bound the runtime
/// checks goes through these, so a hostile count can never wrap a comparison into "in range".
template <typename T> inline bool checkedAdd(T a, T b, T *out) { return !__builtin_add_overflow(a, b, out); }
template <typename T> inline bool checkedMul(T a, T b, T *out) { return !__builtin_mul_overflow(a, b, out); }

/// True when [pos, pos + n) lies inside [0, len), computed without forming pos + n.
inline bool rangeWithin(int64_t pos, int64_t n, int64_t len) {
  return pos >= 0 && n >= 0 && len >= 0 && pos <= len && n <= len - pos;
}

/// ceil(a / b) for a >= 0, b > 0, without the a + b - 1 that overflows near INT64_MAX.
inline int64_t ceilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

/// The product of |n| non-negative factors as size_t; false on overflow or a negative factor.
template <typename... Ts> inline bool checkedSize(size_t *out, Ts... factors) {
  size_t acc = 1;
  for (int64_t f : {int64_t(factors)...}) {
    if (f < 0 || __builtin_mul_overflow(acc, size_t(f), &acc))
      return false;
  }
  *out = acc;
  return true;
}

/// A double to int64 without the undefined behaviour of an out-of-range cast: NaN gives |nanValue|,
/// values beyond the int64 range saturate to its ends.
inline int64_t saturatingInt64(double x, int64_t nanValue = 0) {
  if (std::isnan(x))
    return nanValue;
  // 2^63 is exactly representable; anything >= it does not fit (INT64_MAX itself rounds up to it).
  if (x >= 9223372036854775808.0)
    return std::numeric_limits<int64_t>::max();
  if (x < -9223372036854775808.0)
    return std::numeric_limits<int64_t>::min();
  return int64_t(x);
}

} // namespace hybridgen::rt
