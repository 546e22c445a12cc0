// Checkpoint: maps safetensors files read-only and validates every header, offset and index entry
// before a single tensor pointer is handed out (the files are untrusted input).
#include "hybridgen/runtime/safetensors.h"

#include "safetensors_json.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hybridgen::rt {

using safetensors_json::HeaderEntry;

namespace {

/// The same cap as the reference implementation: a larger header is corrupt, not a big model.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
/// An index lists one short line per tensor; megabytes are plenty, gigabytes are an attack.
constexpr uint64_t kMaxIndexBytes = 64u << 20;

struct DTypeEntry {
  const char *name;
  TensorDType dtype;
  uint64_t size;
};
// Every fixed-size element type of the format; the sub-byte ones (F4, F6_*) have no entry.
constexpr DTypeEntry kDTypes[] = {
    {"F32", TensorDType::f32, 4},     {"F16", TensorDType::f16, 2},
    {"BF16", TensorDType::bf16, 2},   {"F64", TensorDType::f64, 8},
    {"I64", TensorDType::i64, 8},     {"I32", TensorDType::i32, 4},
    {"I16", TensorDType::i16, 2},     {"I8", TensorDType::i8, 1},
    {"U8", TensorDType::u8, 1},       {"BOOL", TensorDType::boolean, 1},
    {"U16", TensorDType::other, 2},   {"U32", TensorDType::other, 4},
    {"U64", TensorDType::other, 8},   {"F8_E4M3", TensorDType::other, 1},
    {"F8_E5M2", TensorDType::other, 1}, {"F8_E8M0", TensorDType::other, 1},
};

const DTypeEntry *lookupDType(const std::string &name) {
  for (const DTypeEntry &e : kDTypes)
    if (name == e.name)
      return &e;
  return nullptr;
}

/// Quoted for a message; untrusted names are cut so that a hostile one cannot make a huge message
/// (the cut is PATH_MAX, so a file path is always whole).
std::string inQuotes(const std::string &s) {
  constexpr size_t kMax = 4096;
  return "'" + (s.size() <= kMax ? s : s.substr(0, kMax) + "...") + "'";
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string errnoText() { return std::strerror(errno); }

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string dirName(const std::string &file) {
  size_t slash = file.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : file.substr(0, slash);
}

/// Opens |path| for reading without blocking on FIFOs and refuses anything but a regular file
/// (a device such as /dev/zero would otherwise be read or mapped without end).
Result<int> openRegular(const std::string &path, uint64_t &size) {
  if (path.find('\0') != std::string::npos)
    return invalidArgument(inQuotes(path) + ": path contains a NUL byte");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    Status s(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kSystem,
             "cannot open " + inQuotes(path) + ": " + errnoText());
    return s;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalidArgument(inQuotes(path) + " is not a regular file");
  }
  size = uint64_t(st.st_size);
  return fd;
}

/// Reads a small text file (an index) whole, refusing one larger than |cap|.
Result<std::string> readSmallFile(const std::string &path, uint64_t cap) {
  uint64_t size = 0;
  Result<int> fd = openRegular(path, size);
  if (!fd)
    return fd.status();
  if (size > cap) {
    ::close(*fd);
    return invalidArgument(inQuotes(path) + ": " + std::to_string(size) + " bytes, more than the " +
                           std::to_string(cap) + "-byte limit for an index");
  }
  std::string text(size, '\0');
  uint64_t got = 0;
  while (got < size) {
    ssize_t n = ::read(*fd, &text[got], size - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got += uint64_t(n);
  }
  ::close(*fd);
  text.resize(got);  // a file that shrank while read is parsed as what was there
  return text;
}

struct Span {
  uint64_t begin, end;
  const std::string *name;
};

} // namespace

//===----------------------------------------------------------------------===//
// dtype helpers
//===----------------------------------------------------------------------===//

uint64_t tensorDTypeSize(TensorDType dtype) {
  if (dtype == TensorDType::other)
    return 0;
  for (const DTypeEntry &e : kDTypes)
    if (e.dtype == dtype)
      return e.size;
  return 0;
}

uint64_t safetensorsDTypeSize(const std::string &dtypeName) {
  const DTypeEntry *e = lookupDType(dtypeName);
  return e ? e->size : 0;
}

const char *tensorDTypeName(TensorDType dtype) {
  if (dtype == TensorDType::other)
    return "other";
  for (const DTypeEntry &e : kDTypes)
    if (e.dtype == dtype)
      return e.name;
  return "other";
}

uint64_t TensorInfo::numElements() const {
  uint64_t n = 1;
  for (int64_t d : shape)
    n *= uint64_t(d);  // validated on open not to overflow
  return n;
}

//===----------------------------------------------------------------------===//
// One file
//===----------------------------------------------------------------------===//

struct Checkpoint::MappedFile {
  std::string path;
  void *base = nullptr;
  uint64_t size = 0;
  ~MappedFile() {
    if (base)
      ::munmap(base, size);
  }
};

namespace {

/// Checks a structurally valid header entry against its dtype and the data section of |file|.
Status validateEntry(const std::string &file, HeaderEntry &e, uint64_t dataBytes, TensorInfo &t) {
  std::string where = "safetensors: " + inQuotes(file) + ": tensor " + inQuotes(e.name) + ": ";
  t.name = e.name;
  t.file = file;
  t.dtypeName = std::move(e.dtype);
  t.shape = std::move(e.shape);
  const DTypeEntry *dt = lookupDType(t.dtypeName);
  t.dtype = dt ? dt->dtype : TensorDType::other;

  uint64_t elements = 1;
  bool overflow = false;
  for (int64_t dim : t.shape)
    overflow = overflow || __builtin_mul_overflow(elements, uint64_t(dim), &elements);
  const uint64_t begin = e.begin, end = e.end;
  std::string offsets = "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
  if (begin > end)
    return invalidArgument(where + offsets + " end before begin");
  if (end > dataBytes)
    return invalidArgument(where + offsets + " run past the data section (" +
                           std::to_string(dataBytes) + " bytes; file truncated or header lies)");
  uint64_t bytes = 0;
  if (dt) {
    // An element count whose byte size overflows can never match a range inside the file.
    if (overflow || __builtin_mul_overflow(elements, dt->size, &bytes))
      return invalidArgument(where + "shape " + shapeString(t.shape) + " of " + t.dtypeName +
                             " overflows 64-bit byte size");
    if (bytes != end - begin)
      return invalidArgument(where + "shape " + shapeString(t.shape) + " of " + t.dtypeName +
                             " needs " + std::to_string(bytes) + " bytes but " + offsets +
                             " hold " + std::to_string(end - begin));
  } else if (overflow) {
    return invalidArgument(where + "shape " + shapeString(t.shape) + " overflows 64 bits");
  }
  t.nbytes = end - begin;
  return Status::ok();
}

} // namespace

Status Checkpoint::addFile(const std::string &file, std::map<std::string, TensorInfo> &out) {
  uint64_t size = 0;
  Result<int> fd = openRegular(file, size);
  if (!fd)
    return Status(fd.status().code(), "safetensors: " + fd.status().message());
  std::string where = "safetensors: " + inQuotes(file) + ": ";
  if (size < 8) {
    ::close(*fd);
    return invalidArgument(where + "file is " + std::to_string(size) +
                           " bytes, too short for the 8-byte header length (truncated?)");
  }
  void *base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, *fd, 0);
  int mmapErrno = errno;
  ::close(*fd);
  if (base == MAP_FAILED)
    return systemError(where + "mmap of " + std::to_string(size) + " bytes failed: " +
                       std::strerror(mmapErrno));
  auto mapped = std::make_unique<MappedFile>();
  mapped->path = file;
  mapped->base = base;
  mapped->size = size;
  const auto *bytes = static_cast<const unsigned char *>(base);

  uint64_t headerLen = 0;
  for (int i = 7; i >= 0; --i)  // the format's length is little-endian, whatever the host
    headerLen = (headerLen << 8) | bytes[i];
  if (headerLen > kMaxHeaderBytes)
    return invalidArgument(where + "header length " + std::to_string(headerLen) + " exceeds the " +
                           std::to_string(kMaxHeaderBytes) + "-byte limit (not a safetensors file?)");
  if (headerLen > size - 8)
    return invalidArgument(where + "header length " + std::to_string(headerLen) +
                           " runs past the end of the file (" + std::to_string(size) +
                           " bytes; truncated?)");
  const char *headerBegin = reinterpret_cast<const char *>(bytes + 8);
  std::vector<HeaderEntry> entries;
  Status parsed = safetensors_json::parseHeader(headerBegin, headerBegin + headerLen, entries);
  if (!parsed)
    return invalidArgument(where + parsed.message());

  const uint64_t dataStart = 8 + headerLen, dataBytes = size - dataStart;
  // Straight into |out|: it is fresh (a new Checkpoint or a new shard's map), and dropped on error.
  std::vector<Span> spans;
  spans.reserve(entries.size());
  for (HeaderEntry &e : entries) {
    TensorInfo t;
    Status s = validateEntry(file, e, dataBytes, t);
    if (!s)
      return s;
    t.data = bytes + dataStart + e.begin;
    auto placed = out.emplace(e.name, std::move(t));  // names are unique: the parser checked
    spans.push_back({e.begin, e.end, &placed.first->first});
  }
  std::vector<HeaderEntry>().swap(entries);  // a big header's parse results go before the sort

  // Tensors must not share bytes: one that overlaps another means the offsets lie.
  std::sort(spans.begin(), spans.end(), [](const Span &a, const Span &b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Span *previous = nullptr;
  for (const Span &s : spans) {
    if (s.begin == s.end)
      continue;  // an empty tensor owns no bytes
    if (previous && s.begin < previous->end)
      return invalidArgument(where + "tensors " + inQuotes(*previous->name) + " (bytes " +
                             std::to_string(previous->begin) + ".." + std::to_string(previous->end) +
                             ") and " + inQuotes(*s.name) + " (bytes " + std::to_string(s.begin) +
                             ".." + std::to_string(s.end) + ") overlap");
    if (!previous || s.end > previous->end)
      previous = &s;
  }

  mapped_.push_back(std::move(mapped));
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Checkpoint
//===----------------------------------------------------------------------===//

Checkpoint::~Checkpoint() = default;

Result<std::unique_ptr<Checkpoint>> Checkpoint::open(const std::string &given) {
  std::string path = given;
  while (path.size() > 1 && path.back() == '/')  // "dir/" names files "dir/x", not "dir//x"
    path.pop_back();
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  ckpt->path_ = path;
  struct stat st;
  if (path.find('\0') != std::string::npos || ::stat(path.c_str(), &st) != 0)
    return notFound("safetensors: cannot open " + inQuotes(path) + ": " +
                    (path.find('\0') != std::string::npos ? "path contains a NUL byte"
                                                          : errnoText()));
  Status s;
  if (S_ISDIR(st.st_mode)) {
    std::string single = path + "/model.safetensors", index = path + "/model.safetensors.index.json";
    // Same preference as Hugging Face transformers: the single file first, then the index.
    if (::access(single.c_str(), F_OK) == 0)
      s = ckpt->openSingle(single);
    else if (::access(index.c_str(), F_OK) == 0)
      s = ckpt->openIndex(index);
    else
      return notFound("safetensors: directory " + inQuotes(path) +
                      " has neither model.safetensors nor model.safetensors.index.json");
  } else if (endsWith(path, ".json")) {
    s = ckpt->openIndex(path);
  } else {
    s = ckpt->openSingle(path);
  }
  if (!s)
    return s;
  return ckpt;
}

Status Checkpoint::openSingle(const std::string &file) { return addFile(file, tensors_); }

Status Checkpoint::openIndex(const std::string &indexFile) {
  std::string where = "safetensors index " + inQuotes(indexFile) + ": ";
  Result<std::string> text = readSmallFile(indexFile, kMaxIndexBytes);
  if (!text)
    return Status(text.status().code(), "safetensors index: " + text.status().message());
  std::vector<std::pair<std::string, std::string>> weightMap;
  Status parsed = safetensors_json::parseIndex(text->data(), text->data() + text->size(), weightMap);
  if (!parsed) {
    // Every index message starts with "index"; name the file right after that word.
    return invalidArgument("safetensors index " + inQuotes(indexFile) + parsed.message().substr(5));
  }

  // Shard names come from an untrusted file: keep them inside the index's directory.
  std::vector<std::string> shards;
  for (const auto &[tensor, shard] : weightMap) {
    bool escapes = shard.empty() || shard[0] == '/' || shard == ".." ||
                   shard.rfind("../", 0) == 0 || shard.find("/../") != std::string::npos ||
                   endsWith(shard, "/..") || shard.find('\0') != std::string::npos;
    if (escapes)
      return invalidArgument(where + "tensor " + inQuotes(tensor) + " names shard " +
                             inQuotes(shard) + ", which is not a file inside the index's directory");
    if (std::find(shards.begin(), shards.end(), shard) == shards.end())
      shards.push_back(shard);
  }

  const std::string dir = dirName(indexFile);
  std::map<std::string, std::map<std::string, TensorInfo>> byShard;
  for (const std::string &shard : shards) {
    const std::string file = dir + "/" + shard;
    Status s = addFile(file, byShard[shard]);
    if (!s)
      return Status(s.code(), s.message() + " (shard named by " + inQuotes(indexFile) + ")");
  }
  for (const auto &[tensor, shard] : weightMap) {
    if (!byShard[shard].count(tensor))
      return notFound(where + "tensor " + inQuotes(tensor) + " is mapped to " +
                      inQuotes(dir + "/" + shard) + ", which has no such tensor");
  }
  // A tensor stored in two shards is ambiguous, whichever one the weight_map names.
  for (const std::string &shard : shards) {
    for (auto &entry : byShard[shard]) {
      auto placed = tensors_.emplace(entry.first, entry.second);
      if (!placed.second)
        return invalidArgument(where + "tensor " + inQuotes(entry.first) + " is stored in both " +
                               inQuotes(placed.first->second.file) + " and " +
                               inQuotes(entry.second.file));
    }
  }
  return Status::ok();
}

const TensorInfo *Checkpoint::find(const std::string &name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Result<const TensorInfo *> Checkpoint::require(const std::string &name,
                                               const std::vector<int64_t> &shape) const {
  const TensorInfo *t = find(name);
  if (!t)
    return notFound("checkpoint " + inQuotes(path_) + ": tensor " + inQuotes(name) + " not found");
  if (t->shape != shape)
    return invalidArgument("safetensors: " + inQuotes(t->file) + ": tensor " + inQuotes(name) +
                           " has shape " + shapeString(t->shape) + " but " + shapeString(shape) +
                           " is expected");
  return t;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto &entry : tensors_)
    out.push_back(entry.first);
  return out;
}

std::vector<std::string> Checkpoint::files() const {
  std::vector<std::string> out;
  for (const auto &m : mapped_)
    out.push_back(m->path);
  return out;
}

} // namespace hybridgen::rt
