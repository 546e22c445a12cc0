// Random paged-KV problems and the float64 reference attention used by the driver tests.
#include "DriverTestUtil.h"

#include "hybridgen/runtime/context.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

namespace hgtest {

float Shape::scale() const { return 1.0f / std::sqrt(static_cast<float>(headDim)); }

uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float fromBf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// _Float16 (clang, x86-64) rounds to nearest even like the kernels' extf/truncf.
uint16_t toHalf(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
float fromHalf(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}

uint64_t testSeed() {
  static uint64_t seed = [] {
    uint64_t s;
    if (const char *env = std::getenv("HG_TEST_SEED"))
      s = std::strtoull(env, nullptr, 10);
    else
      s = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    std::printf("[hybridgen] random seed %llu (rerun with HG_TEST_SEED=%llu)\n",
                static_cast<unsigned long long>(s), static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

namespace {
// Values in +-[0.05, 1]: random, never zero, and with a sign.
float nonZero(std::mt19937_64 &rng) {
  std::uniform_real_distribution<float> mag(0.05f, 1.0f);
  return (rng() & 1) ? mag(rng) : -mag(rng);
}
} // namespace

Problem makeProblem(const Shape &shape, const std::vector<int32_t> &lens, std::mt19937_64 &rng) {
  Problem p;
  p.shape = shape;
  p.lens = lens;
  int64_t bs = shape.blockSize, batch = p.batch();
  int64_t used = 0;
  for (int32_t len : lens) {
    int64_t blocks = (len + bs - 1) / bs;
    used += blocks;
    p.maxBlocks = std::max(p.maxBlocks, blocks);
  }
  p.maxBlocks += 1; // a spare column: entries past a sequence's last block must be ignored
  p.numBlocks = used + 3;
  std::vector<int32_t> ids(p.numBlocks);
  for (int64_t i = 0; i < p.numBlocks; ++i)
    ids[i] = static_cast<int32_t>(i);
  std::shuffle(ids.begin(), ids.end(), rng);
  p.table.assign(batch * p.maxBlocks, -1); // garbage past the end, as in a real allocator
  int64_t next = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < (lens[b] + bs - 1) / bs; ++i)
      p.table[b * p.maxBlocks + i] = ids[next++];

  // Queries a little larger than unit scale, so the softmax is not flat.
  p.q.resize(batch * shape.qHeads * shape.headDim);
  for (float &x : p.q)
    x = 2.5f * nonZero(rng);
  p.out.assign(p.q.size(), std::nanf(""));
  size_t poolElems = p.numBlocks * shape.kvHeads * bs * shape.headDim;
  if (shape.kvType == DType::f32) {
    p.k32.resize(poolElems);
    p.v32.resize(poolElems);
    for (size_t i = 0; i < poolElems; ++i) {
      p.k32[i] = nonZero(rng);
      p.v32[i] = nonZero(rng);
    }
  } else {
    auto conv = shape.kvType == DType::f16 ? toHalf : toBf16;
    p.k16.resize(poolElems);
    p.v16.resize(poolElems);
    for (size_t i = 0; i < poolElems; ++i) {
      p.k16[i] = conv(nonZero(rng));
      p.v16[i] = conv(nonZero(rng));
    }
  }
  return p;
}

std::vector<MemRefArg> Problem::args() {
  const Shape &s = shape;
  int64_t b = batch();
  std::vector<int64_t> poolShape = {numBlocks, s.kvHeads, s.blockSize, s.headDim};
  void *k = s.kvType == DType::f32 ? static_cast<void *>(k32.data()) : k16.data();
  void *v = s.kvType == DType::f32 ? static_cast<void *>(v32.data()) : v16.data();
  return {
      {q.data(), DType::f32, {b, s.qHeads, s.headDim}, {}},
      {k, s.kvType, poolShape, {}},
      {v, s.kvType, poolShape, {}},
      {table.data(), DType::i32, {b, maxBlocks}, {}},
      {lens.data(), DType::i32, {b}, {}},
      {out.data(), DType::f32, {b, s.qHeads, s.headDim}, {}},
  };
}

double Problem::kv(bool value, int64_t block, int64_t h, int64_t row, int64_t d) const {
  size_t i = ((block * shape.kvHeads + h) * shape.blockSize + row) * shape.headDim + d;
  switch (shape.kvType) {
  case DType::f32: return value ? v32[i] : k32[i];
  case DType::f16: return fromHalf(value ? v16[i] : k16[i]);
  default: return fromBf16(value ? v16[i] : k16[i]);
  }
}

Partial referencePartial(const Problem &p, int64_t begin, int64_t end, int64_t topK) {
  const Shape &s = p.shape;
  int64_t group = s.qHeads / s.kvHeads, D = s.headDim, batch = p.batch();
  Partial r;
  r.o.assign(batch * s.qHeads * D, 0.0);
  r.m.assign(batch * s.qHeads, -std::numeric_limits<double>::infinity());
  r.l.assign(batch * s.qHeads, 0.0);
  std::vector<double> row(D);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t len = p.lens[b];
    int64_t lo = std::clamp<int64_t>(begin, 0, len), hi = std::clamp<int64_t>(end, 0, len);
    if (s.window)
      lo = std::max(lo, len - *s.window);
    if (lo >= hi)
      continue;
    auto rowOf = [&](bool value, int64_t h, int64_t t) {
      int64_t block = p.table[b * p.maxBlocks + t / s.blockSize];
      for (int64_t d = 0; d < D; ++d)
        row[d] = p.kv(value, block, h, t % s.blockSize, d);
    };
    for (int64_t h = 0; h < s.kvHeads; ++h) {
      // logits[g][t - lo] for the group's query heads, reading each K row once.
      std::vector<std::vector<double>> logits(group, std::vector<double>(hi - lo));
      for (int64_t t = lo; t < hi; ++t) {
        rowOf(false, h, t);
        for (int64_t g = 0; g < group; ++g) {
          const float *q = &p.q[(b * s.qHeads + h * group + g) * D];
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += static_cast<double>(q[d]) * row[d];
          double x = static_cast<double>(s.scale()) * dot;
          if (s.softcap)
            x = *s.softcap * std::tanh(x / *s.softcap);
          logits[g][t - lo] = x;
        }
      }
      std::vector<std::vector<double>> weight(group, std::vector<double>(hi - lo, 0.0));
      for (int64_t g = 0; g < group; ++g) {
        std::vector<double> &lg = logits[g];
        double threshold = -std::numeric_limits<double>::infinity();
        if (topK > 0 && topK < hi - lo) {
          std::vector<double> sorted = lg;
          std::nth_element(sorted.begin(), sorted.begin() + (topK - 1), sorted.end(),
                           std::greater<double>());
          threshold = sorted[topK - 1];
        }
        double m = *std::max_element(lg.begin(), lg.end()), l = 0;
        int64_t kept = 0;
        for (size_t j = 0; j < lg.size(); ++j)
          if (lg[j] >= threshold && (topK <= 0 || kept < topK)) {
            weight[g][j] = std::exp(lg[j] - m);
            l += weight[g][j];
            ++kept;
          }
        int64_t idx = b * s.qHeads + h * group + g;
        r.m[idx] = m;
        r.l[idx] = l;
      }
      for (int64_t t = lo; t < hi; ++t) {
        rowOf(true, h, t);
        for (int64_t g = 0; g < group; ++g) {
          double w = weight[g][t - lo];
          if (w == 0)
            continue;
          double *o = &r.o[(b * s.qHeads + h * group + g) * D];
          for (int64_t d = 0; d < D; ++d)
            o[d] += w * row[d];
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        int64_t idx = b * s.qHeads + h * group + g;
        for (int64_t d = 0; d < D; ++d)
          r.o[idx * D + d] /= r.l[idx];
      }
    }
  }
  return r;
}

std::vector<double> referenceAttention(const Problem &p) {
  return referencePartial(p, 0, std::numeric_limits<int64_t>::max()).o;
}

double relativeError(const std::vector<float> &got, const std::vector<double> &want) {
  double maxErr = 0, maxRef = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (std::isnan(err))
      return std::numeric_limits<double>::infinity();
    maxErr = std::max(maxErr, err);
    maxRef = std::max(maxRef, std::fabs(want[i]));
  }
  return maxRef > 0 ? maxErr / maxRef : maxErr;
}

void setRuntimeSplit(int64_t split) {
  hybridgen::rt::SchedulerConfig cfg;
  cfg.policy = hybridgen::rt::SchedulerPolicy::kStatic;
  cfg.staticSplit = split;
  hybridgen::rt::installContext(std::make_shared<hybridgen::rt::SchedulerContext>(cfg));
}

void clearRuntimeSplit() { hybridgen::rt::uninstallContext(); }

} // namespace hgtest
