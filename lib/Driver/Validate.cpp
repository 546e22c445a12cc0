//===- Validate.cpp - dtype names and the decode-attention argument checks -----------------===//
//
// Compiled kernels trust their inputs (a bad block id reads outside the pool), so callers run
// these checks first and get an ArgumentError that says what is wrong instead of a crash.
//
//===----------------------------------------------------------------------===//
#include "hybridgen/Driver/Driver.h"

#include <sstream>

namespace hybridgen::driver {

DType parseDType(const std::string &name) {
  if (name == "f32")
    return DType::f32;
  if (name == "f16")
    return DType::f16;
  if (name == "bf16")
    return DType::bf16;
  if (name == "i32")
    return DType::i32;
  if (name == "i64")
    return DType::i64;
  throw ArgumentError("unsupported dtype '" + name + "' (expected f32, f16, bf16, i32 or i64)");
}

const char *dtypeName(DType dtype) {
  switch (dtype) {
  case DType::f32: return "f32";
  case DType::f16: return "f16";
  case DType::bf16: return "bf16";
  case DType::i32: return "i32";
  case DType::i64: return "i64";
  }
  return "?";
}

size_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::f16:
  case DType::bf16: return 2;
  case DType::f32:
  case DType::i32: return 4;
  case DType::i64: return 8;
  }
  return 0;
}

namespace {

const char *const kNames[] = {"q", "k_pool", "v_pool", "block_table", "seq_lens", "out"};

std::string shapeText(const std::vector<int64_t> &shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

[[noreturn]] void fail(const std::string &message) {
  throw ArgumentError("attention arguments: " + message);
}

/// The i32 at |index| of |a| (honouring explicit strides).
int32_t loadI32(const MemRefArg &a, const std::vector<int64_t> &index) {
  int64_t offset = 0, stride = 1;
  for (size_t d = index.size(); d-- > 0;) {
    offset += index[d] * (a.strides.empty() ? stride : a.strides[d]);
    stride *= a.shape[d];
  }
  return static_cast<const int32_t *>(a.data)[offset];
}

void checkBuffer(const MemRefArg &a, const std::string &name, size_t rank,
                 std::initializer_list<DType> dtypes) {
  if (a.shape.size() != rank)
    fail(name + " must have rank " + std::to_string(rank) + ", got shape " + shapeText(a.shape));
  if (!a.strides.empty() && a.strides.size() != rank)
    fail(name + " has " + std::to_string(a.strides.size()) + " strides for rank " +
         std::to_string(rank));
  bool okType = false;
  std::string allowed;
  for (DType t : dtypes) {
    okType |= t == a.dtype;
    allowed += std::string(allowed.empty() ? "" : " or ") + dtypeName(t);
  }
  if (!okType)
    fail(name + " has unsupported dtype " + dtypeName(a.dtype) + " (expected " + allowed + ")");
  int64_t elems = 1;
  for (int64_t s : a.shape) {
    if (s < 0)
      fail(name + " has a negative dimension in shape " + shapeText(a.shape));
    elems *= s;
  }
  if (!a.data && elems != 0)
    fail(name + " is a null pointer");
}

} // namespace

void validateAttentionArgs(const std::vector<MemRefArg> &args, int64_t blockSize) {
  if (args.size() != 6 && args.size() != 9 && args.size() != 12)
    fail("expected 6 buffers (q, k_pool, v_pool, block_table, seq_lens, out) plus 3 per "
         "device partial, got " + std::to_string(args.size()));
  const MemRefArg &q = args[0], &k = args[1], &v = args[2], &table = args[3], &lens = args[4],
                  &out = args[5];
  checkBuffer(q, kNames[0], 3, {DType::f32});
  checkBuffer(k, kNames[1], 4, {DType::f32, DType::f16, DType::bf16});
  checkBuffer(v, kNames[2], 4, {DType::f32, DType::f16, DType::bf16});
  checkBuffer(table, kNames[3], 2, {DType::i32});
  checkBuffer(lens, kNames[4], 1, {DType::i32});
  checkBuffer(out, kNames[5], 3, {DType::f32});

  if (k.dtype != v.dtype)
    fail(std::string("k_pool is ") + dtypeName(k.dtype) + " but v_pool is " + dtypeName(v.dtype));
  if (k.shape != v.shape)
    fail("k_pool shape " + shapeText(k.shape) + " differs from v_pool shape " + shapeText(v.shape));
  int64_t batch = q.shape[0], qHeads = q.shape[1], headDim = q.shape[2];
  int64_t numBlocks = k.shape[0], kvHeads = k.shape[1];
  if (blockSize <= 0)
    fail("block size must be positive, got " + std::to_string(blockSize));
  if (k.shape[2] != blockSize)
    fail("k_pool shape " + shapeText(k.shape) + " has block size " + std::to_string(k.shape[2]) +
         ", expected " + std::to_string(blockSize));
  if (k.shape[3] != headDim)
    fail("k_pool head_dim " + std::to_string(k.shape[3]) + " differs from q head_dim " +
         std::to_string(headDim));
  if (kvHeads <= 0 || qHeads % kvHeads != 0)
    fail("q_heads (" + std::to_string(qHeads) + ") is not a multiple of kv_heads (" +
         std::to_string(kvHeads) + ")");
  if (out.shape != q.shape)
    fail("out shape " + shapeText(out.shape) + " differs from q shape " + shapeText(q.shape));
  if (table.shape[0] != batch)
    fail("block_table has " + std::to_string(table.shape[0]) + " rows for a batch of " +
         std::to_string(batch));
  if (lens.shape[0] != batch)
    fail("seq_lens has " + std::to_string(lens.shape[0]) + " entries for a batch of " +
         std::to_string(batch));
  for (size_t p = 6; p < args.size(); p += 3) {
    std::string dev = std::to_string((p - 6) / 3);
    checkBuffer(args[p], "o_" + dev, 3, {DType::f32});
    checkBuffer(args[p + 1], "m_" + dev, 2, {DType::f32});
    checkBuffer(args[p + 2], "l_" + dev, 2, {DType::f32});
    if (args[p].shape != q.shape)
      fail("o_" + dev + " shape " + shapeText(args[p].shape) + " differs from q shape " +
           shapeText(q.shape));
    for (int i = 1; i <= 2; ++i)
      if (args[p + i].shape != std::vector<int64_t>{batch, qHeads})
        fail(std::string(i == 1 ? "m_" : "l_") + dev + " shape " + shapeText(args[p + i].shape) +
             " must be [batch, q_heads] = " + shapeText({batch, qHeads}));
  }

  // Contents: every token a sequence claims must live in a pool block its table row names.
  int64_t maxBlocks = table.shape[1];
  for (int64_t b = 0; b < batch; ++b) {
    int64_t len = loadI32(lens, {b});
    if (len < 0)
      fail("seq_lens[" + std::to_string(b) + "] is negative (" + std::to_string(len) + ")");
    if (len > maxBlocks * blockSize)
      fail("seq_lens[" + std::to_string(b) + "] = " + std::to_string(len) +
           " exceeds the block table's capacity of " + std::to_string(maxBlocks) + " blocks x " +
           std::to_string(blockSize) + " tokens");
    int64_t used = (len + blockSize - 1) / blockSize;
    for (int64_t i = 0; i < used; ++i) {
      int64_t id = loadI32(table, {b, i});
      if (id < 0 || id >= numBlocks)
        fail("block_table[" + std::to_string(b) + "][" + std::to_string(i) + "] = " +
             std::to_string(id) + " is outside the pool of " + std::to_string(numBlocks) +
             " blocks");
    }
  }
}

} // namespace hybridgen::driver
