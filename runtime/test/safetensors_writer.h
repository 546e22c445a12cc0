// Test helper: writes safetensors files (and indexes) byte by byte, valid or deliberately corrupt.
#pragma once

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace hybridgen::rt::test {

/// One tensor to write: header fields plus its raw bytes.
struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

inline std::vector<uint8_t> floatBytes(const std::vector<float> &v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

inline std::vector<uint8_t> u16Bytes(const std::vector<uint16_t> &v) {
  std::vector<uint8_t> b(v.size() * 2);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

/// The header a correct writer produces: tensors back to back in the given order.
inline nlohmann::json headerFor(const std::vector<RawTensor> &tensors) {
  nlohmann::json h = nlohmann::json::object();
  uint64_t offset = 0;
  for (const RawTensor &t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape},
                 {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  return h;
}

inline std::vector<uint8_t> dataFor(const std::vector<RawTensor> &tensors) {
  std::vector<uint8_t> data;
  for (const RawTensor &t : tensors)
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  return data;
}

/// 8-byte little-endian length, the header text padded with spaces to a multiple of 8, the data.
inline std::vector<uint8_t> fileBytes(const std::string &headerText, const std::vector<uint8_t> &data) {
  std::string header = headerText;
  while (header.size() % 8)
    header += ' ';
  std::vector<uint8_t> out(8);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[i] = uint8_t(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

inline void writeBytes(const std::string &path, const std::vector<uint8_t> &bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char *>(bytes.data()), std::streamsize(bytes.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

inline void writeText(const std::string &path, const std::string &text) {
  writeBytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

inline void writeSafetensors(const std::string &path, const std::vector<RawTensor> &tensors) {
  writeBytes(path, fileBytes(headerFor(tensors).dump(), dataFor(tensors)));
}

/// A fresh directory under /tmp, removed with everything in it when the object goes.
class TempDir {
public:
  TempDir() {
    char tmpl[] = "/tmp/hg-safetensors-XXXXXX";
    const char *p = ::mkdtemp(tmpl);
    EXPECT_NE(p, nullptr);
    path_ = p ? p : "/tmp";
  }
  ~TempDir() {
    std::error_code ignored;
    if (path_ != "/tmp")
      std::filesystem::remove_all(path_, ignored);
  }
  const std::string &path() const { return path_; }
  std::string file(const std::string &name) const { return path_ + "/" + name; }

private:
  std::string path_;
};

} // namespace hybridgen::rt::test
