// Compiled attention checks the block ids and lengths it reads, however it is called: raw MLIR
// through the JIT, modules built from a spec, AOT libraries. A bad table is an ArgumentError
// naming the sequence and block, never a read outside the pool.
#include "DriverTestUtil.h"

#include "hybridgen/runtime/c_api.h"
#include "hybridgen/runtime/memref_call.h"

#include <gtest/gtest.h>

#include <climits>
#include <cmath>

using namespace hgtest;
using hybridgen::driver::ArgumentError;
using hybridgen::driver::AttentionSpec;
using hybridgen::driver::JitModule;
namespace mc = hybridgen::memref_call;

namespace {

// Raw MLIR, as a user of hg.compile writes it: dynamic batch, pool and table.
const char *kRawModule = R"(
func.func @attn(%q: memref<?x4x64xf32>, %k: memref<?x2x16x64xf32>, %v: memref<?x2x16x64xf32>,
                %bt: memref<?x?xi32>, %n: memref<?xi32>, %o: memref<?x4x64xf32>) {
  hg.attention q(%q : memref<?x4x64xf32>)
      kv(%k, %v : memref<?x2x16x64xf32>, memref<?x2x16x64xf32>)
      table(%bt : memref<?x?xi32>) lens(%n : memref<?xi32>) out(%o : memref<?x4x64xf32>)
      {scale = 0.125 : f32}
  return
}
)";

struct KernelGuard : ::testing::Test {
  void SetUp() override {
    shape.qHeads = 4;
    shape.kvHeads = 2;
    shape.headDim = 64;
    shape.blockSize = 16;
    std::mt19937_64 rng(testSeed() + 77);
    p = makeProblem(shape, {40, 21}, rng);
    hgrt_take_kernel_argument_error(nullptr);
  }
  /// The ArgumentError message of calling |fn| of |jit| on the problem, or "<no error>".
  std::string callError(const JitModule &jit, const std::string &fn) {
    try {
      jit.call(fn, p.args());
    } catch (const ArgumentError &e) {
      return e.what();
    }
    return "<no error>";
  }
  /// Whether the output is the empty partial's (all zeros) - a refused call writes no garbage.
  bool outputIsZero() const {
    for (float x : p.out)
      if (x != 0.0f)
        return false;
    return true;
  }
  Shape shape;
  Problem p;
};

} // namespace

TEST_F(KernelGuard, RawMlirBadBlockIdIsArgumentError) {
  auto jit = JitModule::compile(kRawModule);
  // Sequence 1's second block (tokens 16..20) names a block far outside the pool.
  p.table[1 * p.maxBlocks + 1] = 1 << 30;
  std::fill(p.out.begin(), p.out.end(), 7.0f);
  std::string msg = callError(*jit, "attn");
  EXPECT_NE(msg.find("block_table[1][1] = 1073741824 is outside the pool of " +
                     std::to_string(p.numBlocks) + " blocks (sequence 1)"),
            std::string::npos)
      << msg;
  EXPECT_TRUE(outputIsZero());
  // A negative id is caught by the same (unsigned) compare.
  p.table[1 * p.maxBlocks + 1] = -3;
  msg = callError(*jit, "attn");
  EXPECT_NE(msg.find("block_table[1][1] = -3"), std::string::npos) << msg;
}

TEST_F(KernelGuard, AfterARefusedCallAGoodCallIsExact) {
  auto jit = JitModule::compile(kRawModule);
  int32_t good = p.table[0];
  p.table[0] = p.numBlocks; // one past the end
  EXPECT_NE(callError(*jit, "attn").find("block_table[0][0]"), std::string::npos);
  p.table[0] = good;
  ASSERT_EQ(callError(*jit, "attn"), "<no error>");
  EXPECT_LT(relativeError(p.out, referenceAttention(p)), 1e-5);
}

TEST_F(KernelGuard, LengthBeyondTheTableIsArgumentError) {
  auto jit = JitModule::compile(kRawModule);
  p.lens[0] = static_cast<int32_t>(p.maxBlocks * shape.blockSize + 1);
  std::string msg = callError(*jit, "attn");
  EXPECT_NE(msg.find("seq_lens[0] = " + std::to_string(p.lens[0]) + " is outside [0, " +
                     std::to_string(p.maxBlocks * shape.blockSize) + "]"),
            std::string::npos)
      << msg;
  p.lens[0] = -5;
  msg = callError(*jit, "attn");
  EXPECT_NE(msg.find("seq_lens[0] = -5"), std::string::npos) << msg;
}

TEST_F(KernelGuard, ShortPerSequenceBufferIsArgumentError) {
  auto jit = JitModule::compile(kRawModule);
  std::vector<MemRefArg> args = p.args();
  args[4].shape = {1}; // seq_lens with one entry for a batch of two
  try {
    jit->call("attn", args);
    FAIL() << "a seq_lens shorter than the batch was accepted";
  } catch (const ArgumentError &e) {
    EXPECT_NE(std::string(e.what()).find("seq_lens has 1 rows for a batch of 2"),
              std::string::npos)
        << e.what();
  }
}

// A split between two devices: each partial checks its own range, so a bad block in either
// half is found, and the sparse kernel checks like the dense one.
TEST_F(KernelGuard, SplitAndSparseModulesCheckEveryPartial) {
  for (bool sparse : {false, true}) {
    AttentionSpec spec;
    spec.qHeads = shape.qHeads;
    spec.kvHeads = shape.kvHeads;
    spec.headDim = shape.headDim;
    spec.blockSize = shape.blockSize;
    spec.splitPoint = 16;
    spec.sparse = sparse;
    spec.topK = sparse ? 8 : 0;
    auto jit = JitModule::compile(hybridgen::driver::buildAttentionModule(spec));
    for (int64_t blk : {0, 2}) { // block 0 is the first device's, block 2 the second's
      SetUp();
      p.table[blk] = INT32_MAX;
      std::string msg = callError(*jit, "hg_attention");
      EXPECT_NE(msg.find("block_table[0][" + std::to_string(blk) + "] = 2147483647"),
                std::string::npos)
          << (sparse ? "sparse: " : "dense: ") << msg;
    }
  }
}

TEST_F(KernelGuard, AotLibraryBadBlockIdIsInvalidArgument) {
  std::string so = std::string(HYBRIDGEN_TEST_TMPDIR) + "/kernel_guard.so";
  hybridgen::driver::compileToSharedLibrary(kRawModule, so);
  mc::AotLibrary aot(so);
  std::vector<mc::Arg> args;
  p.table[1] = 1 << 30;
  for (const MemRefArg &a : p.args())
    args.push_back({a.data, static_cast<mc::ElemType>(a.dtype), a.shape, a.strides});
  try {
    aot.call("attn", args);
    FAIL() << "a block id outside the pool was accepted";
  } catch (const std::invalid_argument &e) {
    EXPECT_NE(std::string(e.what()).find("block_table[0][1] = 1073741824"), std::string::npos)
        << e.what();
  }
}

// hg.merge with dynamic partials: a partial with fewer rows than the output is refused (it was
// read past its end), the output left untouched.
TEST(KernelGuardMerge, ShortPartialIsArgumentError) {
  auto jit = JitModule::compile(R"(
func.func @merge(%o: memref<?x4x8xf32>, %m: memref<?x4xf32>, %l: memref<?x4xf32>,
                 %out: memref<?x4x8xf32>) {
  hg.merge o(%o : memref<?x4x8xf32>) m(%m : memref<?x4xf32>) l(%l : memref<?x4xf32>)
      into(%out : memref<?x4x8xf32>)
  return
}
)");
  std::vector<float> o(1 * 4 * 8, 1.0f), m(1 * 4, 0.0f), l(1 * 4, 1.0f), out(3 * 4 * 8, 5.0f);
  std::vector<MemRefArg> args = {{o.data(), DType::f32, {1, 4, 8}, {}},
                                 {m.data(), DType::f32, {1, 4}, {}},
                                 {l.data(), DType::f32, {1, 4}, {}},
                                 {out.data(), DType::f32, {3, 4, 8}, {}}};
  try {
    jit->call("merge", args);
    FAIL() << "a partial with 1 row was merged into 3";
  } catch (const ArgumentError &e) {
    EXPECT_NE(std::string(e.what()).find("hg.merge: a partial's dimension 0 is 1 but the "
                                         "output's is 3"),
              std::string::npos)
        << e.what();
  }
  for (float x : out)
    ASSERT_EQ(x, 5.0f);
  args[3].shape = {1, 4, 8};
  jit->call("merge", args); // consistent shapes: merged (one partial: out = o)
  EXPECT_EQ(out[0], 1.0f);
}
