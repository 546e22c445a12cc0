// cpuAttention: online-softmax partials per thread (bf16 K/V rows, f32 math), then the exact merge.
#include "cpu_attention.h"

#include "hybridgen/runtime/executor.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace hybridgen::bench {

using rt::bf16ToF32;

namespace {

struct Acc {
  std::vector<float> o, m, l;
  void init(size_t rows, size_t hd) {
    o.assign(rows * hd, 0.f);
    m.assign(rows, -std::numeric_limits<float>::infinity());
    l.assign(rows, 0.f);
  }
};

constexpr int32_t kMaxGroup = 16, kMaxRows = 256, kMaxDim = 512;

// exp for x <= 0 that vectorizes (libm's expf is a scalar call and dominated the loop): Cody-Waite
// range reduction to [-ln2/2, ln2/2] and a degree-6 Taylor polynomial, ~2 ulp; exp(x < -87) = 0-ish.
inline float expNonPositive(float x) {
  x = std::max(x, -87.0f);
  const float k = std::floor(x * 1.44269504f + 0.5f);
  const float r = x - k * 0.693359375f + k * 2.12194440e-4f;
  float p = 1.f + r * (1.f + r * (0.5f + r * (0.16666667f + r * (0.041666668f + r * (0.0083333338f + r * 0.0013888889f)))));
  uint32_t bits;
  std::memcpy(&bits, &p, 4);
  bits += uint32_t(int32_t(k)) << 23; // scale by 2^k
  std::memcpy(&p, &bits, 4);
  return p;
}

// One block of one kv-head for the |group| query heads that share it: each bf16 row is widened once
// and used by every query head of the group (the row is read from memory once).
void blockHead(const uint16_t *K, const uint16_t *V, int32_t rows, int32_t hd, const float *q, int32_t group,
               float scale, float *o, float *m, float *l) {
  static thread_local float s[kMaxGroup][kMaxRows];
  float row[kMaxDim];
  for (int32_t r = 0; r < rows; ++r) {
    const uint16_t *k = K + size_t(r) * hd;
#pragma omp simd
    for (int32_t d = 0; d < hd; ++d)
      row[d] = bf16ToF32(k[d]);
    for (int32_t g = 0; g < group; ++g) {
      const float *qg = q + size_t(g) * hd;
      float acc = 0.f;
#pragma omp simd reduction(+ : acc)
      for (int32_t d = 0; d < hd; ++d)
        acc += qg[d] * row[d];
      s[g][r] = acc * scale;
    }
  }
  for (int32_t g = 0; g < group; ++g) {
    float mx = m[g];
    for (int32_t r = 0; r < rows; ++r)
      mx = std::max(mx, s[g][r]);
    float corr = std::exp(m[g] - mx); // exp(-inf) = 0 on the first block
    l[g] *= corr;
    float *og = o + size_t(g) * hd;
    for (int32_t d = 0; d < hd; ++d)
      og[d] *= corr;
    m[g] = mx;
    float lsum = 0.f;
#pragma omp simd reduction(+ : lsum)
    for (int32_t r = 0; r < rows; ++r) {
      s[g][r] = expNonPositive(s[g][r] - mx);
      lsum += s[g][r];
    }
    l[g] += lsum;
  }
  for (int32_t r = 0; r < rows; ++r) {
    const uint16_t *v = V + size_t(r) * hd;
#pragma omp simd
    for (int32_t d = 0; d < hd; ++d)
      row[d] = bf16ToF32(v[d]);
    for (int32_t g = 0; g < group; ++g) {
      float *og = o + size_t(g) * hd;
      const float p = s[g][r];
#pragma omp simd
      for (int32_t d = 0; d < hd; ++d)
        og[d] += p * row[d];
    }
  }
}

} // namespace

Partials cpuAttention(const rt::KvPool &pool, int32_t layer, int32_t batch, int32_t qHeads, const float *q,
                      const rt::ThreadPlan &plan) {
  const rt::KvLayout &L = pool.layout();
  const int32_t hd = L.headDim, group = qHeads / L.kvHeads;
  const float scale = 1.0f / std::sqrt(float(hd));
  const size_t rows = size_t(batch) * qHeads;
  const int nthreads = std::max<int>(1, int(plan.threads.size()));
  std::vector<Acc> acc(static_cast<size_t>(nthreads));
  const auto *kb = static_cast<const uint16_t *>(pool.kBase(layer));
  const auto *vb = static_cast<const uint16_t *>(pool.vBase(layer));
  // Threads pinned to their tier's reader node by the runtime's executor.
  (void)rt::runPinned(plan, [&](const rt::ThreadWork &w, int t) {
    Acc &a = acc[size_t(t)];
    a.init(rows, size_t(hd));
    for (const rt::WorkItem &it : w.items)
      for (int32_t h = 0; h < L.kvHeads; ++h) {
        size_t off = L.elementOffset(it.block, h, 0);
        size_t row = size_t(it.batchIndex) * qHeads + size_t(h) * group;
        blockHead(kb + off, vb + off, it.tokens, hd, q + row * hd, group, scale, a.o.data() + row * hd,
                  a.m.data() + row, a.l.data() + row);
      }
  });
  for (Acc &a : acc)
    if (a.m.empty())
      a.init(rows, size_t(hd)); // entries of an empty plan
  // Exact merge of the per-thread partials (the same rule as the CPU/GPU merge).
  Partials out;
  out.o.assign(rows * hd, 0.f);
  out.m.assign(rows, -std::numeric_limits<float>::infinity());
  out.l.assign(rows, 0.f);
  for (size_t r = 0; r < rows; ++r) {
    float m = -std::numeric_limits<float>::infinity();
    for (const Acc &a : acc)
      m = std::max(m, a.m[r]);
    float wsum = 0.f;
    for (const Acc &a : acc) {
      if (a.l[r] == 0.f)
        continue;
      float w = std::exp(a.m[r] - m);
      wsum += a.l[r] * w;
      for (int32_t d = 0; d < hd; ++d)
        out.o[r * hd + d] += w * a.o[r * hd + d]; // unnormalized so far
    }
    if (wsum > 0)
      for (int32_t d = 0; d < hd; ++d)
        out.o[r * hd + d] /= wsum;
    out.m[r] = m;
    out.l[r] = wsum;
  }
  return out;
}

Partials referenceAttention(const rt::KvPool &pool, int32_t layer, const std::vector<int64_t> &seqs,
                            int32_t qHeads, const float *q, int64_t split) {
  const rt::KvLayout &L = pool.layout();
  const int32_t hd = L.headDim, group = qHeads / L.kvHeads;
  Partials out;
  out.o.assign(seqs.size() * qHeads * hd, 0.f);
  out.m.assign(seqs.size() * qHeads, -std::numeric_limits<float>::infinity());
  out.l.assign(seqs.size() * qHeads, 0.f);
  const auto *kb = static_cast<const uint16_t *>(pool.kBase(layer));
  const auto *vb = static_cast<const uint16_t *>(pool.vBase(layer));
  for (size_t b = 0; b < seqs.size(); ++b) {
    int64_t n = std::min(split, pool.seqLen(seqs[b]));
    const auto &table = pool.blockTable(seqs[b]);
    for (int32_t qh = 0; qh < qHeads; ++qh) {
      int32_t h = qh / group;
      const float *qv = q + (b * qHeads + qh) * size_t(hd);
      std::vector<double> s(static_cast<size_t>(n));
      double mx = -INFINITY;
      for (int64_t t = 0; t < n; ++t) {
        size_t off = L.elementOffset(table[size_t(t / L.blockSize)], h, int32_t(t % L.blockSize));
        double acc = 0;
        for (int32_t d = 0; d < hd; ++d)
          acc += double(qv[d]) * bf16ToF32(kb[off + d]);
        s[size_t(t)] = acc / std::sqrt(double(hd));
        mx = std::max(mx, s[size_t(t)]);
      }
      double l = 0;
      std::vector<double> o(size_t(hd), 0);
      for (int64_t t = 0; t < n; ++t) {
        size_t off = L.elementOffset(table[size_t(t / L.blockSize)], h, int32_t(t % L.blockSize));
        double p = std::exp(s[size_t(t)] - mx);
        l += p;
        for (int32_t d = 0; d < hd; ++d)
          o[size_t(d)] += p * bf16ToF32(vb[off + d]);
      }
      size_t row = b * qHeads + size_t(qh);
      for (int32_t d = 0; d < hd; ++d)
        out.o[row * hd + d] = l > 0 ? float(o[size_t(d)] / l) : 0.f;
      out.m[row] = float(mx);
      out.l[row] = float(l);
    }
  }
  return out;
}

} // namespace hybridgen::bench
