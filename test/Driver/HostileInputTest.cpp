// Hostile input to the driver API: every case is a CompileError or ArgumentError with a clear
// message, never a crash, an LLVM fatal error or a silently ignored option (issue 17).
#include "DriverTestUtil.h"

#include "hybridgen/runtime/memref_call.h"

#include <gtest/gtest.h>

#include <climits>
#include <pthread.h>

using hybridgen::driver::CompileError;
using hybridgen::driver::CompileOptions;
using hybridgen::driver::JitModule;
namespace mc = hybridgen::memref_call;

namespace {

std::string jitError(const std::string &text, const CompileOptions &opts = {}) {
  try {
    JitModule::compile(text, opts);
  } catch (const CompileError &e) {
    return e.what();
  }
  return "<no error>";
}

std::string nestedRegions(int n) {
  std::string text = "func.func @f() {\n";
  for (int i = 0; i < n; ++i)
    text += "scf.execute_region {\n";
  text += "scf.yield\n";
  for (int i = 0; i < n; ++i)
    text += i + 1 < n ? "}\nscf.yield\n" : "}\n";
  return text + "return\n}\n";
}

const char *kCopy = "func.func @copy(%a: memref<4xf32>, %b: memref<4xf32>) {\n"
                    "  memref.copy %a, %b : memref<4xf32> to memref<4xf32>\n  return\n}\n";

} // namespace

TEST(HostileInput, DeepNestingIsADiagnosticEvenOnASmallStack) {
  // The guard refuses it before the parser; the driver also parses on its own large stack, so a
  // caller thread with 256 KiB (smaller than the parser needs for a few hundred levels) is safe.
  std::string deep = nestedRegions(5000), moderate = nestedRegions(400);
  std::string deepMsg, moderateMsg;
  auto body = [&] {
    deepMsg = jitError(deep);
    moderateMsg = jitError(moderate);
  };
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 << 10);
  pthread_t thread;
  auto trampoline = [](void *arg) -> void * {
    (*static_cast<decltype(body) *>(arg))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, trampoline, &body), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  EXPECT_NE(deepMsg.find("<input>:513:"), std::string::npos) << deepMsg;
  EXPECT_NE(deepMsg.find("nesting deeper than 512 brackets"), std::string::npos) << deepMsg;
  EXPECT_EQ(moderateMsg, "<no error>");
}

TEST(HostileInput, NulBytesAndHugeVectorsAreDiagnostics) {
  EXPECT_NE(jitError(std::string(64, '\0')).find("<input>:1:1: error: the input contains a NUL"),
            std::string::npos);
  std::string msg = jitError("func.func @f(%a: vector<4294967295xi1>) { return }");
  EXPECT_NE(msg.find("vector type 'vector<4294967295xi1>' has 4294967295 elements"),
            std::string::npos)
      << msg;
  msg = jitError("func.func @f(%m: memref<4294967296x4294967296x8xf32>) { return }");
  EXPECT_NE(msg.find("has more elements than a 64-bit count holds"), std::string::npos) << msg;
}

/// Compiling with |field| set to each of |values| fails with |message|.
static void expectRefused(int64_t CompileOptions::*field, std::initializer_list<int64_t> values,
                          const std::string &message) {
  for (int64_t value : values) {
    CompileOptions opts;
    opts.*field = value;
    EXPECT_NE(jitError(kCopy, opts).find(message), std::string::npos) << value;
  }
}

TEST(HostileInput, ChunkTokensOutOfRangeIsRefused) {
  // INT64_MAX - 15 = 2^63 - 16 used to compile and return wrong attention.
  expectRefused(&CompileOptions::chunkTokens, {int64_t(-1), INT64_MAX - 15, int64_t(1) << 25},
                "chunk_tokens must be in [0, 16777216]");
}

TEST(HostileInput, FarPrefetchBytesOutOfRangeIsRefused) {
  expectRefused(&CompileOptions::farPrefetchBytes,
                {int64_t(-2), INT64_MIN, INT64_MAX, (int64_t(1) << 20) + 1},
                "far_prefetch_bytes must be in [0, 1048576]");
}

TEST(HostileInput, VectorBitsOtherThanTheTargetsWidthsAreRefused) {
  CompileOptions opts;
  opts.vectorBits = 300;
  EXPECT_NE(jitError(kCopy, opts).find("vector_bits must be 0 (the target's), 128, 256 or 512"),
            std::string::npos);
  opts.targetCpu = "x86-64-v3"; // AVX2: 256 at most
  opts.vectorBits = 512;
  EXPECT_NE(jitError(kCopy, opts).find("vector_bits 512 is wider than the target's 256"),
            std::string::npos);
}

TEST(HostileInput, JitRefusesTargetsAndMissingLibraries) {
  CompileOptions bogus;
  bogus.targetCpu = "bogus";
  EXPECT_NE(jitError(kCopy, bogus).find("unknown target CPU 'bogus'"), std::string::npos);
  // A CPU this machine cannot run (Sapphire Rapids' AMX on anything but an AMX CPU; the test
  // runs on machines without it).
  CompileOptions other;
  other.targetCpu = "sapphirerapids";
  if (!__builtin_cpu_supports("amx-tile"))
    EXPECT_NE(jitError(kCopy, other).find("which lacks"), std::string::npos);
  CompileOptions feature;
  feature.targetFeatures = "+nonsense";
  EXPECT_NE(jitError(kCopy, feature).find("unknown target feature 'nonsense'"),
            std::string::npos);
  CompileOptions libs;
  libs.sharedLibs = {"/nonexistent/libomp.so"};
  EXPECT_NE(jitError(kCopy, libs).find("cannot load shared library '/nonexistent/libomp.so'"),
            std::string::npos);
}

TEST(HostileInput, AotRefusesABogusTargetCpu) {
  CompileOptions opts;
  opts.targetCpu = "bogus";
  std::string so = std::string(HYBRIDGEN_TEST_TMPDIR) + "/bogus_target.so";
  try {
    hybridgen::driver::compileToSharedLibrary(kCopy, so, opts);
    FAIL() << "a bogus target CPU was accepted";
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find("unknown target CPU 'bogus'"), std::string::npos);
  }
}

TEST(HostileInput, SeventeenMemrefsAreRefusedAtCompileTime) {
  std::string args, body;
  for (int i = 0; i < 17; ++i)
    args += std::string(i ? ", " : "") + "%a" + std::to_string(i) + ": memref<4xf32>";
  std::string text = "func.func @wide(" + args + ") {\n  return\n}\n";
  std::string msg = jitError(text);
  EXPECT_NE(msg.find("<input>:1:1: error: public function 'wide' takes 17 memref arguments; "
                     "compiled functions take at most 16"),
            std::string::npos)
      << msg;
}

TEST(HostileInput, MalformedSigFilesAreRuntimeErrors) {
  auto sigError = [](const std::string &text) -> std::string {
    try {
      mc::parseSignatures(text);
    } catch (const std::runtime_error &e) {
      return e.what();
    } catch (...) {
      return "<another exception type>";
    }
    return "<no error>";
  };
  // std::stoll threw std::out_of_range here.
  EXPECT_NE(sigError("f f32:99999999999999999999x4\n").find("malformed dimension"),
            std::string::npos);
  EXPECT_NE(sigError("f f32:9223372036854775808\n").find("malformed dimension"), std::string::npos);
  EXPECT_EQ(sigError("f f32:9223372036854775807\n"), "<no error>");
  EXPECT_NE(sigError("f f32:-4\n").find("malformed dimension"), std::string::npos);
  std::string wide = "f";
  for (int i = 0; i < 17; ++i)
    wide += " f32:4";
  EXPECT_NE(sigError(wide).find("17 memref arguments"), std::string::npos);
  std::string deep = "f f32:1";
  for (int i = 0; i < 16; ++i)
    deep += "x1";
  EXPECT_NE(sigError(deep).find("has rank 17"), std::string::npos);
}
