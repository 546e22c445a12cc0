// hg.segment dynamic(%id): one compiled layer function called with different ids runs as
// different segments of the runtime's scheduler, and the split point it reads is that segment's.
#include "DriverTestUtil.h"
#include "hybridgen/runtime/context.h"

#include <gtest/gtest.h>

#include <set>

using namespace hgtest;
using hybridgen::driver::JitModule;

namespace {

// The layer id arrives in a memref (JitModule calls take memrefs): loaded, cast to index, and
// used as the segment id of a runtime-split decode attention and of a prefill.
constexpr const char *kLayerModule = R"mlir(
!q = memref<?x8x64xf32>
!q4 = memref<?x?x8x64xf32>
!kv = memref<?x2x16x64xf32>
func.func @layer(%ids: memref<1xi64>, %q: !q, %k: !kv, %v: !kv, %bt: memref<?x?xi32>,
                 %lens: memref<?xi32>, %o: !q, %q4: !q4, %o4: !q4) {
  %c0 = arith.constant 0 : index
  %raw = memref.load %ids[%c0] : memref<1xi64>
  %id = arith.index_cast %raw : i64 to index
  hg.segment dynamic(%id) {
    hg.attention q(%q : !q) kv(%k, %v : !kv, !kv) table(%bt : memref<?x?xi32>)
        lens(%lens : memref<?xi32>) out(%o : !q)
        {scale = 0.125 : f32, split = #hg.split<[cpu, gpu], point = runtime>}
    hg.prefill_attention q(%q4 : !q4) kv(%k, %v : !kv, !kv) table(%bt : memref<?x?xi32>)
        lens(%lens : memref<?xi32>) out(%o4 : !q4) {scale = 0.125 : f32}
  }
  return
}
)mlir";

} // namespace

TEST(DynamicSegment, EachIdIsItsOwnSegment) {
  Shape s;
  s.qHeads = 8;
  s.kvHeads = 2;
  s.headDim = 64;
  s.blockSize = 16;
  std::mt19937_64 rng(testSeed() ^ 0xd1d);
  Problem p = makeProblem(s, {70, 33}, rng);
  std::vector<double> want = referenceAttention(p);
  int64_t chunk = 3;
  std::vector<float> q4(p.batch() * chunk * s.qHeads * s.headDim, 0.5f), o4(q4.size());

  auto jit = JitModule::compile(kLayerModule);
  hybridgen::rt::SchedulerConfig cfg;
  cfg.policy = hybridgen::rt::SchedulerPolicy::kStatic;
  cfg.staticSplit = 20;
  auto ctx = std::make_shared<hybridgen::rt::SchedulerContext>(cfg);
  hybridgen::rt::installContext(ctx);
  for (int64_t layer : {3, 7, 3}) {
    int64_t id = layer;
    ctx->beginStep(70);
    std::vector<MemRefArg> args = p.args();
    args.insert(args.begin(), MemRefArg{&id, DType::i64, {1}, {}});
    std::vector<int64_t> shape4 = {p.batch(), chunk, s.qHeads, s.headDim};
    args.push_back({q4.data(), DType::f32, shape4, {}});
    args.push_back({o4.data(), DType::f32, shape4, {}});
    std::fill(p.out.begin(), p.out.end(), std::nanf(""));
    jit->call("layer", args);
    EXPECT_LE(relativeError(p.out, want), 1e-5) << "layer " << layer;
  }
  hybridgen::rt::Trace trace = ctx->trace();
  hybridgen::rt::uninstallContext();

  std::vector<int64_t> segments;
  for (const hybridgen::rt::TraceRow &row : trace.rows())
    segments.push_back(row.segment);
  EXPECT_EQ(segments, (std::vector<int64_t>{3, 7, 3}));
  for (const hybridgen::rt::TraceRow &row : trace.rows()) {
    EXPECT_EQ(row.split, 20);
    EXPECT_GT(row.cpuSeconds, 0.0) << "the prefill and the cpu partial were timed";
  }
}
