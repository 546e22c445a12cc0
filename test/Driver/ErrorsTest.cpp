// Bad input never aborts: invalid IR is a CompileError with a location, bad buffers an
// ArgumentError that says what is wrong.
#include "DriverTestUtil.h"

#include <gtest/gtest.h>

using namespace hgtest;
using hybridgen::driver::ArgumentError;
using hybridgen::driver::CompileError;
using hybridgen::driver::JitModule;

namespace {

std::string compileError(const std::string &text) {
  hybridgen::driver::CompileOptions opts;
  opts.sourceName = "bad.mlir";
  try {
    JitModule::compile(text, opts);
  } catch (const CompileError &e) {
    return e.what();
  }
  return "<no error>";
}

/// A valid small problem whose buffers the cases below break one at a time.
struct BadArgs : ::testing::Test {
  void SetUp() override {
    shape.qHeads = 4;
    shape.kvHeads = 2;
    shape.headDim = 64;
    shape.blockSize = 16;
    std::mt19937_64 rng(testSeed() + 20);
    p = makeProblem(shape, {40, 3}, rng);
    args = p.args();
  }
  std::string message() {
    try {
      hybridgen::driver::validateAttentionArgs(args, shape.blockSize);
    } catch (const ArgumentError &e) {
      return e.what();
    }
    return "<no error>";
  }
  Shape shape;
  Problem p;
  std::vector<MemRefArg> args;
};

} // namespace

TEST(CompileErrors, SyntaxErrorHasLocation) {
  std::string msg = compileError("func.func @f() {\n  %0 = arith.constant : i32\n  return\n}\n");
  EXPECT_NE(msg.find("bad.mlir:2:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("error:"), std::string::npos) << msg;
}

TEST(CompileErrors, VerifierErrorHasLocation) {
  // q_heads (6) is not a multiple of kv_heads (4): the hg.attention verifier rejects it.
  std::string text = R"(func.func @f(%q: memref<1x6x64xf32>, %k: memref<8x4x16x64xf32>,
    %bt: memref<1x8xi32>, %n: memref<1xi32>, %o: memref<1x6x64xf32>) {
  hg.attention q(%q : memref<1x6x64xf32>) kv(%k, %k : memref<8x4x16x64xf32>, memref<8x4x16x64xf32>)
      table(%bt : memref<1x8xi32>) lens(%n : memref<1xi32>) out(%o : memref<1x6x64xf32>)
      {scale = 0.125 : f32}
  return
}
)";
  std::string msg = compileError(text);
  EXPECT_NE(msg.find("bad.mlir:3:3: error:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("q_heads"), std::string::npos) << msg;
}

TEST(CompileErrors, UnknownOpAndEmptyInput) {
  EXPECT_NE(compileError("hg.nonsense\n").find("bad.mlir:1:1"), std::string::npos);
  EXPECT_NO_THROW(JitModule::compile("")); // an empty module is valid and has no functions
}

TEST(CompileErrors, BadSpecIsArgumentError) {
  hybridgen::driver::AttentionSpec spec;
  spec.qHeads = 6;
  spec.kvHeads = 4;
  EXPECT_THROW(hybridgen::driver::buildAttentionModule(spec), ArgumentError);
  spec.qHeads = 8;
  spec.kvDtype = "f64";
  EXPECT_THROW(hybridgen::driver::buildAttentionModule(spec), ArgumentError);
  spec.kvDtype = "f32";
  spec.devices = {"cpu", "tpu"};
  EXPECT_THROW(hybridgen::driver::buildAttentionModule(spec), ArgumentError);
}

TEST(DTypes, NamesAndSizes) {
  EXPECT_EQ(hybridgen::driver::parseDType("bf16"), DType::bf16);
  EXPECT_STREQ(hybridgen::driver::dtypeName(DType::f16), "f16");
  EXPECT_EQ(hybridgen::driver::dtypeSize(DType::i64), 8u);
  EXPECT_THROW(hybridgen::driver::parseDType("f64"), ArgumentError);
}

TEST_F(BadArgs, ValidProblemPasses) { EXPECT_EQ(message(), "<no error>"); }

TEST_F(BadArgs, ShapeMismatch) {
  args[5].shape[1] = 8;
  EXPECT_NE(message().find("out shape"), std::string::npos) << message();
  SetUp();
  args[1].shape[3] = 32;
  args[2].shape[3] = 32;
  EXPECT_NE(message().find("head_dim"), std::string::npos) << message();
  SetUp();
  args[4].shape[0] = 3;
  EXPECT_NE(message().find("seq_lens has 3 entries"), std::string::npos) << message();
}

TEST_F(BadArgs, UnsupportedDtype) {
  args[1].dtype = DType::i64;
  args[2].dtype = DType::i64;
  EXPECT_NE(message().find("unsupported dtype i64"), std::string::npos) << message();
  SetUp();
  args[2].dtype = DType::f16;
  EXPECT_NE(message().find("v_pool is f16"), std::string::npos) << message();
}

TEST_F(BadArgs, NullBlockTable) {
  args[3].data = nullptr;
  EXPECT_NE(message().find("block_table is a null pointer"), std::string::npos) << message();
}

TEST_F(BadArgs, LengthsBeyondPool) {
  p.lens[0] = static_cast<int32_t>(p.maxBlocks * shape.blockSize + 1);
  EXPECT_NE(message().find("exceeds the block table's capacity"), std::string::npos) << message();
  SetUp();
  p.table[0] = static_cast<int32_t>(p.numBlocks);
  EXPECT_NE(message().find("outside the pool"), std::string::npos) << message();
  SetUp();
  p.lens[1] = -1;
  EXPECT_NE(message().find("negative"), std::string::npos) << message();
}

TEST_F(BadArgs, JitCallChecksSignature) {
  hybridgen::driver::AttentionSpec spec;
  spec.qHeads = 4;
  spec.kvHeads = 2;
  spec.headDim = 64;
  spec.batch = 2;
  auto jit = JitModule::compile(hybridgen::driver::buildAttentionModule(spec));
  ASSERT_EQ(jit->signature("hg_attention").size(), 6u);
  EXPECT_EQ(jit->signature("hg_attention")[0].shape, (std::vector<int64_t>{2, 4, 64}));
  EXPECT_THROW(jit->signature("missing"), ArgumentError);
  args[0].shape = {2, 4, 32}; // static head dim 64 in the signature
  EXPECT_THROW(jit->call("hg_attention", args), ArgumentError);
  SetUp();
  args[3].data = nullptr;
  EXPECT_THROW(jit->call("hg_attention", args), ArgumentError);
  SetUp();
  args.pop_back();
  EXPECT_THROW(jit->call("hg_attention", args), ArgumentError);
}

TEST(CompileErrors, ScalarArgumentsAreNotCallable) {
  auto jit = JitModule::compile("func.func @s(%x: i32) {\n  return\n}\n");
  try {
    jit->call("s", {});
    ADD_FAILURE() << "calling a function with a scalar argument must fail";
  } catch (const ArgumentError &e) {
    EXPECT_NE(std::string(e.what()).find("has argument 0"), std::string::npos) << e.what();
  }
}
