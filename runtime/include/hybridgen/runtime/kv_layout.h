// The KV block layout contract (docs/interfaces.md): the one place pool and compiled kernels agree on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace hybridgen::rt {

/// Element type of the K and V arrays.
enum class DType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

inline constexpr size_t dtypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }
inline const char *dtypeName(DType t) {
  return t == DType::kF32 ? "f32" : t == DType::kF16 ? "f16" : "bf16";
}

/// Every pool array is aligned to this (kernels may assume aligned vector loads at block starts
/// when a block's byte size is a multiple of it).
inline constexpr size_t kPoolAlignment = 64;

/// Shape of one layer's K (and, identically, V) array: [num_blocks][kv_heads][block_size][head_dim].
/// With kTransposed, each (block, kv head) piece of K holds its rows transposed, [head_dim]
/// [block_size] (V is unchanged): the layout of code compiled with CompileOptions::kTransposed,
/// whose decode logits then need no sum trees (docs/cpu-runs.md, "K transposed per block").
struct KvLayout {
  int32_t kvHeads = 8;
  int32_t blockSize = 16;  // tokens per block, 16..256
  int32_t headDim = 128;
  DType dtype = DType::kBF16;
  bool kTransposed = false;

  size_t eltSize() const { return dtypeSize(dtype); }
  /// Bytes of one token row of one kv-head.
  size_t rowBytes() const { return size_t(headDim) * eltSize(); }
  /// Bytes of one block of K (or of V); blocks are packed, nothing is rounded.
  size_t blockBytes() const { return size_t(kvHeads) * blockSize * rowBytes(); }
  /// Element offset of (block, head, row, 0) inside a K or V array.
  size_t elementOffset(int64_t block, int32_t head, int32_t row) const {
    return ((size_t(block) * kvHeads + head) * blockSize + row) * size_t(headDim);
  }
  size_t byteOffset(int64_t block, int32_t head, int32_t row) const {
    return elementOffset(block, head, row) * eltSize();
  }
  /// Byte offset of K element (block, head, row, col) inside a K array, in either K layout.
  size_t kByteOffset(int64_t block, int32_t head, int32_t row, int32_t col) const {
    size_t piece = elementOffset(block, head, 0);
    size_t within = kTransposed ? size_t(col) * blockSize + row : size_t(row) * headDim + col;
    return (piece + within) * eltSize();
  }
};

/// bf16 <-> f32 helpers (round-to-nearest-even), used by tests and the bench stand-in kernel.
inline float bf16ToF32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN stays a quiet NaN
    return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

} // namespace hybridgen::rt
