// libFuzzer target for Checkpoint::open: arbitrary bytes as a safetensors file, a header or an index
// must give a Status, never a crash, a hang or a read outside the mapping.
//
// Build (own directory; needs nothing but the reader's sources and nlohmann-json):
//   mkdir -p build-fuzz && clang++-22 -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined \
//     -fno-sanitize-recover=undefined -I runtime/include runtime/fuzz/safetensors_fuzz.cpp \
//     runtime/lib/model/safetensors.cpp runtime/lib/model/safetensors_json.cpp \
//     runtime/lib/model/tensor_convert.cpp \
//     -o build-fuzz/safetensors_fuzz
// Run (corpus dir grows; the seeds and dictionary are in runtime/fuzz/):
//   mkdir -p build-fuzz/corpus && build-fuzz/safetensors_fuzz -max_total_time=60 \
//     -dict=runtime/fuzz/safetensors.dict build-fuzz/corpus runtime/fuzz/seeds/safetensors
//
// The first input byte picks what the rest is, so the fuzzer reaches every layer of validation:
//   0: a whole .safetensors file;
//   1: the JSON header only, framed with a correct length and 64 data bytes (skips the length checks);
//   2: a model.safetensors.index.json beside two fixed valid shards (s1: a, b; s2: c).
#include "hybridgen/runtime/safetensors.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using hybridgen::rt::Checkpoint;
using hybridgen::rt::TensorDType;

namespace {

std::string gDir;

bool writeFile(const std::string &path, const uint8_t *data, size_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return false;
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0)
      break;
    done += size_t(n);
  }
  ::close(fd);
  return done == size;
}

std::vector<uint8_t> frame(const std::string &header, size_t dataBytes) {
  std::vector<uint8_t> out(8);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[i] = uint8_t(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  for (size_t i = 0; i < dataBytes; ++i)
    out.push_back(uint8_t(i * 37));
  return out;
}

void writeShard(const std::string &name, const std::string &header, size_t dataBytes) {
  std::vector<uint8_t> bytes = frame(header, dataBytes);
  if (!writeFile(gDir + "/" + name, bytes.data(), bytes.size()))
    abort();
}

/// Reads every byte of every tensor the reader accepted (ASan/SEGV catch a pointer outside the
/// mapping) and checks the invariants callers rely on.
void touchEverything(const Checkpoint &ck) {
  volatile uint8_t sink = 0;
  for (const std::string &name : ck.names()) {
    const hybridgen::rt::TensorInfo *t = ck.find(name);
    if (!t)
      __builtin_trap();
    uint64_t elementSize = hybridgen::rt::safetensorsDTypeSize(t->dtypeName);
    if (elementSize && t->numElements() * elementSize != t->nbytes)
      __builtin_trap();
    const auto *p = static_cast<const uint8_t *>(t->data);
    for (uint64_t i = 0; i < t->nbytes; ++i)
      sink = sink ^ p[i];
    if (t->dtype == TensorDType::f32 || t->dtype == TensorDType::f16 ||
        t->dtype == TensorDType::bf16) {
      auto f = hybridgen::rt::tensorToF32(*t);
      if (!f.isOk() || f->size() != t->numElements())
        __builtin_trap();
    }
    (void)ck.require(name, t->shape);
  }
}

const char *const kFiles[] = {"s1.safetensors", "s2.safetensors", "input.safetensors",
                              "header.safetensors", "model.safetensors.index.json"};

void removeDir() {
  for (const char *f : kFiles)
    ::unlink((gDir + "/" + f).c_str());
  ::rmdir(gDir.c_str());
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // Every execution writes a file: tmpfs (/dev/shm) is several times faster than a disk /tmp.
  char shm[] = "/dev/shm/hg-safetensors-fuzz-XXXXXX", tmp[] = "/tmp/hg-safetensors-fuzz-XXXXXX";
  const char *dir = ::mkdtemp(shm);
  if (!dir)
    dir = ::mkdtemp(tmp);
  if (!dir)
    abort();
  gDir = dir;
  std::atexit(removeDir);
  writeShard("s1.safetensors",
             R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
             R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]}})",
             14);
  writeShard("s2.safetensors", R"({"c":{"dtype":"F16","shape":[1,2],"data_offsets":[0,4]}})", 4);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  const uint8_t mode = data[0] % 3;
  ++data;
  --size;
  std::string path;
  if (mode == 0) {
    path = gDir + "/input.safetensors";
    if (!writeFile(path, data, size))
      return 0;
  } else if (mode == 1) {
    path = gDir + "/header.safetensors";
    std::vector<uint8_t> bytes = frame(std::string(reinterpret_cast<const char *>(data), size), 64);
    if (!writeFile(path, bytes.data(), bytes.size()))
      return 0;
  } else {
    path = gDir + "/model.safetensors.index.json";
    if (!writeFile(path, data, size))
      return 0;
  }
  auto ck = Checkpoint::open(path);
  if (ck.isOk())
    touchEverything(**ck);
  else if (ck.status().message().empty())
    __builtin_trap();  // every refusal must say why
  return 0;
}
