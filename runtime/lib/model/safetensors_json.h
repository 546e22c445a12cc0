// The JSON side of the safetensors reader (private to runtime/lib/model): a header's tensor
// entries and an index's weight_map, read by nlohmann-json's SAX parser straight into these structs.
#pragma once

#include "hybridgen/runtime/status.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hybridgen::rt::safetensors_json {

/// One tensor entry of a header, structurally checked (types, counts) but not yet against the file.
struct HeaderEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;  // every entry in [0, 2^63)
  uint64_t begin = 0, end = 0;
};

/// Parses a header (the JSON text after the 8-byte length). Messages name the tensor at fault and
/// leave the file to the caller. Memory stays proportional to the entries, whatever the input.
Status parseHeader(const char *begin, const char *end, std::vector<HeaderEntry> &out);

/// Parses an index: (tensor, shard file) pairs of its weight_map, in file order; other keys are
/// skipped. A tensor listed twice is an error. Every message starts with "index".
Status parseIndex(const char *begin, const char *end,
                  std::vector<std::pair<std::string, std::string>> &weightMap);

} // namespace hybridgen::rt::safetensors_json
