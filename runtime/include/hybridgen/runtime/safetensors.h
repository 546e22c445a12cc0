// Safetensors checkpoints (one file, or shards named by model.safetensors.index.json), memory-mapped
// read-only and fully validated on open, so a model loader can trust every pointer it is handed.
#pragma once

#include "hybridgen/runtime/status.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hybridgen::rt {

/// Element types of safetensors headers. The ones the models use (f32/f16/bf16) and the common
/// others get their own value so callers can say "I64 not supported for <tensor>"; every other
/// name in the format (U16, U32, U64, F8_E4M3, F8_E5M2, ...) is `other`, with `dtypeName` kept.
enum class TensorDType { f32, f16, bf16, f64, i64, i32, i16, i8, u8, boolean, other };

/// One tensor of a checkpoint. |data| points into the read-only mapping of |file| and stays valid
/// while the Checkpoint lives. It has no alignment guarantee (safetensors packs tensors of mixed
/// element sizes back to back): read through memcpy or `copyTensorAsF32`, never a cast `float *`.
struct TensorInfo {
  std::string name, file;      // tensor name, file it lives in
  TensorDType dtype = TensorDType::other;
  std::string dtypeName;       // "F32", "BF16", ... as in the header
  std::vector<int64_t> shape;  // empty for a scalar
  const void *data = nullptr;
  uint64_t nbytes = 0;         // == product(shape) * element size for every dtype of known size
  uint64_t numElements() const;
};

/// Bytes per element of |dtype| (0 for `other`; use `safetensorsDTypeSize(dtypeName)` for those).
uint64_t tensorDTypeSize(TensorDType dtype);
/// Bytes per element of a header dtype name, 0 when the name is not a known fixed-size type.
uint64_t safetensorsDTypeSize(const std::string &dtypeName);
/// The header spelling of |dtype| ("F32", ...); "other" for `other`.
const char *tensorDTypeName(TensorDType dtype);

/// A set of memory-mapped safetensors files seen as one name -> tensor table.
class Checkpoint {
public:
  /// |path|: a directory (model.safetensors, else model.safetensors.index.json in it), a
  /// .safetensors file, or an index .json. Every header, offset and index entry is validated here;
  /// an error names the file and, where one is at fault, the tensor.
  static Result<std::unique_ptr<Checkpoint>> open(const std::string &path);
  ~Checkpoint();
  Checkpoint(const Checkpoint &) = delete;
  Checkpoint &operator=(const Checkpoint &) = delete;

  /// nullptr when absent.
  const TensorInfo *find(const std::string &name) const;
  /// The tensor with exactly |shape|; else an error naming the file, the tensor and what differs.
  Result<const TensorInfo *> require(const std::string &name,
                                     const std::vector<int64_t> &shape) const;
  /// Every tensor name, sorted.
  std::vector<std::string> names() const;
  size_t size() const { return tensors_.size(); }
  /// The path given to `open`, for messages.
  const std::string &path() const { return path_; }
  /// The files mapped (one, or every shard), in the order they were opened.
  std::vector<std::string> files() const;

private:
  struct MappedFile;  // one read-only mmap; defined in safetensors.cpp
  Checkpoint() = default;
  Status openSingle(const std::string &file);
  Status openIndex(const std::string &indexFile);
  Status addFile(const std::string &file, std::map<std::string, TensorInfo> &out);

  std::string path_;
  std::vector<std::unique_ptr<MappedFile>> mapped_;
  std::map<std::string, TensorInfo> tensors_;
};

/// Converts |t| (F32, F16 or BF16) to f32 into |dst|, which holds |dstCount| floats; |dstCount|
/// must equal t.numElements(). Other dtypes are an error naming the tensor and the file.
Status copyTensorAsF32(const TensorInfo &t, float *dst, uint64_t dstCount);
/// The same into a new vector.
Result<std::vector<float>> tensorToF32(const TensorInfo &t);

/// IEEE binary16 -> f32 (exact; subnormals, infinities and NaN kept).
float f16ToF32(uint16_t h);
/// f32 -> IEEE binary16, rounded to nearest even (as a hardware conversion does): subnormal
/// results kept, magnitudes from 65520 up become infinity, NaN stays a (quiet) NaN.
uint16_t f32ToF16(float f);

} // namespace hybridgen::rt
