// Checkpoint (safetensors reader): valid single and sharded checkpoints load; every corruption is a
// Status naming the file and the tensor, never a crash or an over-read (run under ASan too).
#include "hybridgen/runtime/safetensors.h"

#include "safetensors_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>

namespace hybridgen::rt {
namespace {

using test::RawTensor;
using test::TempDir;
using json = nlohmann::json;

/// Asserts |status| failed and its message contains every one of |parts|.
void expectError(const Status &status, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(status.isOk()) << "expected an error containing '" << *parts.begin() << "'";
  for (const std::string &p : parts)
    EXPECT_NE(status.message().find(p), std::string::npos)
        << "message lacks '" << p << "': " << status.message();
}

Status openStatus(const std::string &path) { return Checkpoint::open(path).status(); }

std::vector<RawTensor> sampleTensors() {
  return {
      {"model.embed.weight", "F32", {2, 3}, test::floatBytes({1, 2, 3, 4, 5, 6})},
      {"model.norm.weight", "BF16", {4}, test::u16Bytes({0x3f80, 0x4000, 0xbf80, 0x0000})},
      {"model.odd", "F16", {3}, test::u16Bytes({0x3c00, 0xc000, 0x3800})},  // 6 bytes: misaligns
      {"model.ids", "I64", {2}, std::vector<uint8_t>(16, 7)},
      {"lm_head.weight", "F32", {3, 2}, test::floatBytes({-1, -2, -3, -4, -5, -6})},
  };
}

std::string corruptHeaderFile(const TempDir &dir, const json &header,
                              const std::vector<uint8_t> &data, const char *name = "bad.safetensors") {
  std::string path = dir.file(name);
  test::writeBytes(path, test::fileBytes(header.dump(), data));
  return path;
}

//===----------------------------------------------------------------------===//
// Valid checkpoints
//===----------------------------------------------------------------------===//

TEST(Safetensors, SingleFileLoadsEveryTensorWithItsBytes) {
  TempDir dir;
  auto tensors = sampleTensors();
  json header = test::headerFor(tensors);
  header["__metadata__"] = {{"format", "pt"}};
  test::writeBytes(dir.file("model.safetensors"), test::fileBytes(header.dump(), test::dataFor(tensors)));

  for (const std::string &path : {dir.path(), dir.file("model.safetensors")}) {
    auto ck = Checkpoint::open(path);
    ASSERT_TRUE(ck.isOk()) << ck.status().message();
    const Checkpoint &c = **ck;
    EXPECT_EQ(c.size(), tensors.size());
    EXPECT_EQ(c.files(), std::vector<std::string>{dir.file("model.safetensors")});
    EXPECT_EQ(c.find("__metadata__"), nullptr);
    for (const RawTensor &t : tensors) {
      const TensorInfo *info = c.find(t.name);
      ASSERT_NE(info, nullptr) << t.name;
      EXPECT_EQ(info->dtypeName, t.dtype);
      EXPECT_EQ(info->shape, t.shape);
      EXPECT_EQ(info->file, dir.file("model.safetensors"));
      ASSERT_EQ(info->nbytes, t.bytes.size());
      EXPECT_EQ(std::memcmp(info->data, t.bytes.data(), t.bytes.size()), 0) << t.name;
    }
    EXPECT_EQ(c.find("model.embed.weight")->dtype, TensorDType::f32);
    EXPECT_EQ(c.find("model.norm.weight")->dtype, TensorDType::bf16);
    EXPECT_EQ(c.find("model.odd")->dtype, TensorDType::f16);
    EXPECT_EQ(c.find("model.ids")->dtype, TensorDType::i64);
    std::vector<std::string> names = c.names();
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
    EXPECT_EQ(names.size(), tensors.size());
    auto ok = c.require("lm_head.weight", {3, 2});
    ASSERT_TRUE(ok.isOk()) << ok.status().message();
    EXPECT_EQ(*ok, c.find("lm_head.weight"));
  }
}

TEST(Safetensors, ShardedCheckpointMergesShardsThroughTheIndex) {
  TempDir dir;
  auto all = sampleTensors();
  std::vector<RawTensor> a(all.begin(), all.begin() + 2), b(all.begin() + 2, all.end());
  test::writeSafetensors(dir.file("model-00001-of-00002.safetensors"), a);
  test::writeSafetensors(dir.file("model-00002-of-00002.safetensors"), b);
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  for (const RawTensor &t : a)
    index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const RawTensor &t : b)
    index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  test::writeText(dir.file("model.safetensors.index.json"), index.dump(2));

  for (const std::string &path : {dir.path() + "/", dir.file("model.safetensors.index.json")}) {
    auto ck = Checkpoint::open(path);
    ASSERT_TRUE(ck.isOk()) << ck.status().message();
    EXPECT_EQ((*ck)->size(), all.size());
    EXPECT_EQ((*ck)->files().size(), 2u);
    for (const RawTensor &t : all) {
      const TensorInfo *info = (*ck)->find(t.name);
      ASSERT_NE(info, nullptr) << t.name;
      bool inFirst = &t - all.data() < 2;
      EXPECT_EQ(info->file, dir.file(inFirst ? "model-00001-of-00002.safetensors"
                                             : "model-00002-of-00002.safetensors"));
      ASSERT_EQ(info->nbytes, t.bytes.size());
      EXPECT_EQ(std::memcmp(info->data, t.bytes.data(), t.bytes.size()), 0) << t.name;
    }
  }
}

TEST(Safetensors, EmptyTensorsAndUnknownDTypesAreAccepted) {
  TempDir dir;
  std::vector<RawTensor> tensors = {
      {"empty", "F32", {0, 4}, {}},
      {"scalar", "F32", {}, test::floatBytes({2.5f})},
      {"packed", "F4", {3}, {0x12, 0x34}},  // sub-byte type: size not checked, kept as `other`
  };
  test::writeSafetensors(dir.file("m.safetensors"), tensors);
  auto ck = Checkpoint::open(dir.file("m.safetensors"));
  ASSERT_TRUE(ck.isOk()) << ck.status().message();
  EXPECT_EQ((*ck)->find("empty")->nbytes, 0u);
  EXPECT_EQ((*ck)->find("scalar")->numElements(), 1u);
  EXPECT_EQ((*ck)->find("packed")->dtype, TensorDType::other);
  EXPECT_EQ((*ck)->find("packed")->dtypeName, "F4");
  EXPECT_EQ((*ck)->find("packed")->nbytes, 2u);
}

//===----------------------------------------------------------------------===//
// Corrupt single files
//===----------------------------------------------------------------------===//

TEST(Safetensors, TruncatedFileNamesTheTensorCut) {
  TempDir dir;
  auto tensors = sampleTensors();
  std::string path = dir.file("model.safetensors");
  auto bytes = test::fileBytes(test::headerFor(tensors).dump(), test::dataFor(tensors));
  bytes.resize(bytes.size() - 5);  // cuts into the last tensor, lm_head.weight
  test::writeBytes(path, bytes);
  expectError(openStatus(path), {path, "lm_head.weight", "run past the data section"});

  test::writeBytes(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + 5));
  expectError(openStatus(path), {path, "5 bytes, too short"});
  test::writeBytes(path, {});
  expectError(openStatus(dir.path()), {path, "0 bytes, too short"});
}

TEST(Safetensors, HeaderLengthBeyondTheFileOrTheCapIsRefused) {
  TempDir dir;
  std::string path = dir.file("model.safetensors");
  auto bytes = test::fileBytes(test::headerFor(sampleTensors()).dump(), test::dataFor(sampleTensors()));
  uint64_t beyond = bytes.size();  // 8 more than fits
  std::memcpy(bytes.data(), &beyond, 8);
  test::writeBytes(path, bytes);
  expectError(openStatus(path), {path, "header length " + std::to_string(beyond), "runs past the end"});

  uint64_t huge = ~uint64_t(0);  // 8 + huge would wrap around
  std::memcpy(bytes.data(), &huge, 8);
  test::writeBytes(path, bytes);
  expectError(openStatus(path), {path, "exceeds the 100000000-byte limit"});
}

TEST(Safetensors, OffsetsThatLieAreRefusedNamingTheTensor) {
  TempDir dir;
  auto tensors = sampleTensors();
  auto data = test::dataFor(tensors);
  json header = test::headerFor(tensors);
  header["model.norm.weight"]["data_offsets"] = {data.size() - 4, data.size() + 4};
  std::string path = corruptHeaderFile(dir, header, data);
  expectError(openStatus(path), {path, "'model.norm.weight'", "run past the data section"});

  header = test::headerFor(tensors);
  header["model.odd"]["data_offsets"] = {30, 24};
  path = corruptHeaderFile(dir, header, data);
  expectError(openStatus(path), {path, "'model.odd'", "end before begin"});

  header = test::headerFor(tensors);
  header["model.ids"]["data_offsets"] = {-8, 8};
  path = corruptHeaderFile(dir, header, data);
  expectError(openStatus(path), {path, "'model.ids'", "non-negative integers"});

  header = test::headerFor(tensors);
  header["model.ids"]["data_offsets"] = json::array({0});
  path = corruptHeaderFile(dir, header, data);
  expectError(openStatus(path), {path, "'model.ids'", "[begin, end]"});
}

TEST(Safetensors, OverlappingTensorsAreRefusedNamingBoth) {
  TempDir dir;
  std::vector<RawTensor> tensors = {
      {"a", "F32", {4}, test::floatBytes({1, 2, 3, 4})},
      {"b", "F32", {4}, test::floatBytes({5, 6, 7, 8})},
      {"c", "F32", {0}, {}},
  };
  auto data = test::dataFor(tensors);
  json header = test::headerFor(tensors);
  header["b"]["data_offsets"] = {8, 24};  // b starts inside a, its byte count still right
  header["c"]["data_offsets"] = {4, 4};   // an empty tensor overlaps nothing
  std::string path = corruptHeaderFile(dir, header, data);
  expectError(openStatus(path), {path, "'a'", "'b'", "overlap"});

  header = test::headerFor(tensors);
  header["b"]["data_offsets"] = {0, 16};  // b aliases a exactly
  path = corruptHeaderFile(dir, header, data);
  expectError(openStatus(path), {path, "'a'", "'b'", "overlap"});
}

TEST(Safetensors, ByteCountThatDisagreesWithShapeAndDTypeIsRefused) {
  TempDir dir;
  auto tensors = sampleTensors();
  auto data = test::dataFor(tensors);
  json header = test::headerFor(tensors);
  header["model.embed.weight"]["shape"] = {2, 2};  // 16 bytes of F32, offsets hold 24
  std::string path = corruptHeaderFile(dir, header, data);
  expectError(openStatus(path),
              {path, "'model.embed.weight'", "shape [2, 2] of F32 needs 16 bytes", "hold 24"});

  header = test::headerFor(tensors);
  header["model.embed.weight"]["dtype"] = "F64";  // same shape, twice the bytes
  path = corruptHeaderFile(dir, header, data);
  expectError(openStatus(path), {path, "'model.embed.weight'", "F64 needs 48 bytes"});

  header = test::headerFor(tensors);
  header["model.ids"]["shape"] = {uint64_t(1) << 62, 8};  // element count overflows 64 bits
  path = corruptHeaderFile(dir, header, data);
  expectError(openStatus(path), {path, "'model.ids'", "overflows"});

  header = test::headerFor(tensors);
  header["model.ids"]["shape"] = {uint64_t(1) << 61};  // 2^61 I64 elements: bytes overflow
  path = corruptHeaderFile(dir, header, data);
  expectError(openStatus(path), {path, "'model.ids'", "overflows"});

  for (json bad : {json(-2), json(2.0), json("2"), json(uint64_t(1) << 63)}) {
    header = test::headerFor(tensors);
    header["model.ids"]["shape"] = json::array({bad});
    path = corruptHeaderFile(dir, header, data);
    expectError(openStatus(path), {path, "'model.ids'", "shape entries must be integers"});
  }
}

TEST(Safetensors, MalformedHeadersAreRefused) {
  TempDir dir;
  auto data = test::dataFor(sampleTensors());
  std::string path = dir.file("model.safetensors");
  test::writeBytes(path, test::fileBytes("{\"a\": {\"dtype\": \"F32\",", data));
  expectError(openStatus(path), {path, "not valid JSON"});
  test::writeBytes(path, test::fileBytes("", data));
  expectError(openStatus(path), {path, "not valid JSON"});
  test::writeBytes(path, test::fileBytes("[1, 2]", data));
  expectError(openStatus(path), {path, "not a JSON object"});
  test::writeBytes(path, test::fileBytes("{\"a\": 3}", data));
  expectError(openStatus(path), {path, "'a'", "not an object"});
  test::writeBytes(path, test::fileBytes("{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", data));
  expectError(openStatus(path), {path, "'a'", "'dtype'"});
  test::writeBytes(path, test::fileBytes("{\"__metadata__\": {\"n\": 1}}", data));
  expectError(openStatus(path), {path, "'__metadata__'"});
  // nlohmann keeps the last of duplicated keys: the first entry would silently vanish.
  test::writeBytes(path, test::fileBytes(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
      "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", data));
  expectError(openStatus(path), {path, "'w'", "appears twice"});
  // Structure no header has is refused as soon as it is seen (no DOM is built).
  test::writeBytes(path, test::fileBytes(std::string(20, '[') + std::string(20, ']'), data));
  expectError(openStatus(path), {path, "not a JSON object"});
  test::writeBytes(path, test::fileBytes(R"({"__metadata__": {"k": {"deep": []}}})", data));
  expectError(openStatus(path), {path, "'__metadata__' must map strings to strings"});
  json rank = test::headerFor({{"r", "F32", std::vector<int64_t>(64, 1), test::floatBytes({1})}});
  test::writeBytes(path, test::fileBytes(rank.dump(), test::floatBytes({1})));
  ASSERT_TRUE(openStatus(path).isOk()) << "64 dimensions are allowed: " << openStatus(path).message();
  rank["r"]["shape"].push_back(1);
  test::writeBytes(path, test::fileBytes(rank.dump(), test::floatBytes({1})));
  expectError(openStatus(path), {path, "'r'", "more than 64 dimensions"});
  test::writeBytes(path, test::fileBytes(
      R"({"r": {"dtype": "F32", "dtype": "F16", "shape": [1], "data_offsets": [0, 4]}})", data));
  expectError(openStatus(path), {path, "'r'", "'dtype' appears twice"});
  test::writeBytes(path, test::fileBytes(R"({"r": {"dtype": "F32", "shape": [[1]], "data_offsets": [0, 4]}})", data));
  expectError(openStatus(path), {path, "'r'", "got an array"});
  // Keys the format does not define are skipped, whatever they hold (as the reference reader does).
  test::writeBytes(path, test::fileBytes(R"({"r": {"extra": {"x": [[{}]]}, "dtype": "F32", "shape": [1],
      "data_offsets": [0, 4]}})", test::floatBytes({1})));
  auto skipped = Checkpoint::open(path);
  ASSERT_TRUE(skipped.isOk()) << skipped.status().message();
  EXPECT_EQ((*skipped)->find("r")->shape, std::vector<int64_t>{1});
  // A hostile name is cut in the message, not copied whole into it.
  json longName = {{std::string(100000, 'n'), 3}};
  test::writeBytes(path, test::fileBytes(longName.dump(), data));
  Status cut = openStatus(path);
  expectError(cut, {path, "'nnnn", "...'", "not an object"});
  EXPECT_LT(cut.message().size(), 1000u);
  // Bytes that are not UTF-8 inside a string.
  test::writeBytes(path, test::fileBytes("{\"\xff\xfe\": {}}", data));
  expectError(openStatus(path), {path, "not valid JSON"});
}

TEST(Safetensors, PathsThatAreNotCheckpointsAreRefused) {
  TempDir dir;
  Status missing = openStatus(dir.file("nope.safetensors"));
  expectError(missing, {dir.file("nope.safetensors"), "No such file"});
  EXPECT_EQ(missing.code(), ErrorCode::kNotFound);
  expectError(openStatus(dir.path()), {dir.path(), "neither model.safetensors"});
  expectError(openStatus("/dev/zero"), {"/dev/zero", "not a regular file"});
  ::mkdir(dir.file("model.safetensors").c_str(), 0700);
  expectError(openStatus(dir.path()), {dir.file("model.safetensors"), "not a regular file"});
}

//===----------------------------------------------------------------------===//
// require() and missing tensors
//===----------------------------------------------------------------------===//

TEST(Safetensors, RequireNamesTheFileTheTensorAndBothShapes) {
  TempDir dir;
  test::writeSafetensors(dir.file("model.safetensors"), sampleTensors());
  auto ck = Checkpoint::open(dir.path());
  ASSERT_TRUE(ck.isOk()) << ck.status().message();

  auto wrong = (*ck)->require("model.embed.weight", {3, 2});
  expectError(wrong.status(), {dir.file("model.safetensors"), "'model.embed.weight'",
                               "has shape [2, 3] but [3, 2] is expected"});
  auto rank = (*ck)->require("model.norm.weight", {4, 1});
  expectError(rank.status(), {"'model.norm.weight'", "[4] but [4, 1]"});

  EXPECT_EQ((*ck)->find("model.layers.0.self_attn.q_proj.weight"), nullptr);
  auto absent = (*ck)->require("model.layers.0.self_attn.q_proj.weight", {2, 2});
  expectError(absent.status(), {dir.path(), "'model.layers.0.self_attn.q_proj.weight'", "not found"});
  EXPECT_EQ(absent.status().code(), ErrorCode::kNotFound);
}

//===----------------------------------------------------------------------===//
// Corrupt indexes
//===----------------------------------------------------------------------===//

/// Two valid shards (tensors a, b in s1; c in s2) and an index written from |weightMap|.
std::string writeShardedCheckpoint(const TempDir &dir, const json &weightMap) {
  test::writeSafetensors(dir.file("s1.safetensors"),
                         {{"a", "F32", {1}, test::floatBytes({1})}, {"b", "F32", {1}, test::floatBytes({2})}});
  test::writeSafetensors(dir.file("s2.safetensors"), {{"c", "F32", {1}, test::floatBytes({3})}});
  std::string index = dir.file("model.safetensors.index.json");
  test::writeText(index, json{{"weight_map", weightMap}}.dump());
  return index;
}

TEST(Safetensors, IndexNamingAMissingShardIsRefused) {
  TempDir dir;
  std::string index = writeShardedCheckpoint(
      dir, {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s3.safetensors"}});
  Status s = openStatus(dir.path());
  expectError(s, {dir.file("s3.safetensors"), "No such file", index});
  EXPECT_EQ(s.code(), ErrorCode::kNotFound);
}

TEST(Safetensors, IndexNamingATensorAbsentFromItsShardIsRefused) {
  TempDir dir;
  std::string index = writeShardedCheckpoint(
      dir, {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s1.safetensors"}});
  expectError(openStatus(index), {index, "'c'", dir.file("s1.safetensors"), "has no such tensor"});
}

TEST(Safetensors, TensorStoredInTwoShardsIsRefused) {
  TempDir dir;
  std::string index = writeShardedCheckpoint(dir, {{"a", "s1.safetensors"}, {"c", "s2.safetensors"}});
  test::writeSafetensors(dir.file("s2.safetensors"),
                         {{"c", "F32", {1}, test::floatBytes({3})}, {"b", "F32", {1}, test::floatBytes({4})}});
  expectError(openStatus(index),
              {index, "'b'", dir.file("s1.safetensors"), dir.file("s2.safetensors"), "both"});
}

TEST(Safetensors, MalformedIndexesAreRefused) {
  TempDir dir;
  std::string index = writeShardedCheckpoint(dir, json::object());
  test::writeText(index, "{\"weight_map\": ");
  expectError(openStatus(index), {index, "not valid JSON"});
  test::writeText(index, "{\"metadata\": {}}");
  expectError(openStatus(index), {index, "has no 'weight_map'"});
  test::writeText(index, R"({"weight_map": []})");
  expectError(openStatus(index), {index, "non-object 'weight_map'"});
  test::writeText(index, R"({"weight_map": {"a": "s1.safetensors", "a": "s2.safetensors"}})");
  expectError(openStatus(index), {index, "'a'", "twice"});
  test::writeText(index, R"({"weight_map": {"a": 3}})");
  expectError(openStatus(index), {index, "'a'", "not a file name"});
  for (const char *escape : {"../s1.safetensors", "/etc/passwd", "x/../../s1.safetensors", ""}) {
    test::writeText(index, json{{"weight_map", {{"a", escape}}}}.dump());
    expectError(openStatus(index), {index, "'a'", "not a file inside the index's directory"});
  }
  // A corrupt shard: the error names the shard, the tensor and the index.
  test::writeText(index, R"({"weight_map": {"a": "s1.safetensors", "c": "s2.safetensors"}})");
  json header = test::headerFor({{"c", "F32", {1}, test::floatBytes({3})}});
  header["c"]["data_offsets"] = {0, 8};
  test::writeBytes(dir.file("s2.safetensors"), test::fileBytes(header.dump(), test::floatBytes({3})));
  expectError(openStatus(index), {dir.file("s2.safetensors"), "'c'", "run past", index});
}

//===----------------------------------------------------------------------===//
// Conversion to f32
//===----------------------------------------------------------------------===//

/// binary16 decoded from its definition, independently of f16ToF32's bit manipulation.
double f16Reference(uint16_t h) {
  int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double magnitude = exponent == 0 ? std::ldexp(mantissa, -24)
                                   : std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

TEST(Safetensors, F16ToF32IsExactForEveryValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16ToF32(uint16_t(h));
    int exponent = (h >> 10) & 0x1f;
    if (exponent == 0x1f) {
      EXPECT_EQ(std::isnan(f), (h & 0x3ff) != 0) << h;
      EXPECT_EQ(std::isinf(f), (h & 0x3ff) == 0) << h;
    } else {
      ASSERT_EQ(double(f), f16Reference(uint16_t(h))) << h;
    }
    EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
  }
}

TEST(Safetensors, TensorsConvertToF32FromEachFloatDType) {
  TempDir dir;
  test::writeSafetensors(dir.file("model.safetensors"), sampleTensors());
  auto ck = Checkpoint::open(dir.path());
  ASSERT_TRUE(ck.isOk()) << ck.status().message();
  auto f32 = tensorToF32(*(*ck)->find("model.embed.weight"));
  ASSERT_TRUE(f32.isOk()) << f32.status().message();
  EXPECT_EQ(*f32, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  auto bf16 = tensorToF32(*(*ck)->find("model.norm.weight"));  // 0x3f80 is bf16 1.0, ...
  ASSERT_TRUE(bf16.isOk()) << bf16.status().message();
  EXPECT_EQ(*bf16, (std::vector<float>{1, 2, -1, 0}));
  auto f16 = tensorToF32(*(*ck)->find("model.odd"));  // 0x3c00 = 1, 0xc000 = -2, 0x3800 = 0.5
  ASSERT_TRUE(f16.isOk()) << f16.status().message();
  EXPECT_EQ(*f16, (std::vector<float>{1, -2, 0.5f}));
  // lm_head.weight starts 6 bytes after an 8-aligned offset: the copy must not assume alignment.
  std::vector<float> head(6);
  ASSERT_TRUE(copyTensorAsF32(*(*ck)->find("lm_head.weight"), head.data(), head.size()).isOk());
  EXPECT_EQ(head, (std::vector<float>{-1, -2, -3, -4, -5, -6}));

  expectError(copyTensorAsF32(*(*ck)->find("lm_head.weight"), head.data(), 5),
              {"'lm_head.weight'", "6 elements but the destination 5"});
  expectError(tensorToF32(*(*ck)->find("model.ids")).status(),
              {dir.file("model.safetensors"), "'model.ids'", "I64 cannot be converted to f32"});
  TensorInfo forged = *(*ck)->find("model.embed.weight");
  forged.shape = {int64_t(1) << 40, 1 << 30};  // a hand-built lie must not allocate or over-read
  expectError(tensorToF32(forged).status(), {"'model.embed.weight'"});
}

} // namespace
} // namespace hybridgen::rt
