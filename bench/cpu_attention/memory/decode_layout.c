// decode_layout.c: what the K layout inside a block costs the exact 16-bit decode attention on one
// core (docs/cpu-runs.md, "K transposed per block"). SmolLM2's shape
// (group 3, head dim 64, blocks of 16 tokens), bf16 K and V, f32 q and arithmetic (the default
// exact kernel's: bf16 widened by a shift or a mask, f32 FMAs, online softmax per block), one kv
// head's rows, one thread. Two loops that differ only in the logits:
//   row-major  K as the pool stores it, [block][16 rows][64]: each row's dot products in 8-lane
//              f32 chains, 4 rows x 3 heads interleaved, then a sum tree per 8 rows and head (the
//              generated kernel's formulation);
//   transposed K per block as [64 columns][16 rows] (the pool's KvLayout::kTransposed): one
//              32-byte load is one column of all 16 rows, so the logits of the block are 16-lane
//              FMAs against q's broadcast elements, no tree.
// Softmax and p.V (16-lane FMAs, V row-major) are the same code in both. Not part of the build
// (needs AVX-512F):
//
//   clang-22 -O2 -march=native bench/cpu_attention/memory/decode_layout.c -o /tmp/decode_layout -lm
//   /tmp/decode_layout [ROWS [REPS]]     # 4096 rows: cache-resident; 196608 (64K tokens x 3 kv
//                                        # heads, 48 MiB of K and V): from DRAM
//
// Prints ns per row, K+V GB/s, the ratio to the read roof of 1 GiB measured between the calls,
// and the relative error of the output against a float64 reference.
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { D = 64, H = 3, BS = 16 };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static inline __m512 widenEven(__m512i x) { return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)); }
static inline __m512 widenOdd(__m512i x) {
  return _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32((int)0xffff0000u)));
}
static inline __m256 widenEven8(__m256i x) { return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)); }
static inline __m256 widenOdd8(__m256i x) {
  return _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32((int)0xffff0000u)));
}

// Lane r of the result: the sum of the 8 lanes of v[r].
static inline __m256 sumTree8(const __m256 v[8]) {
  __m256 a0 = _mm256_hadd_ps(v[0], v[1]), a1 = _mm256_hadd_ps(v[2], v[3]);
  __m256 a2 = _mm256_hadd_ps(v[4], v[5]), a3 = _mm256_hadd_ps(v[6], v[7]);
  __m256 b0 = _mm256_hadd_ps(a0, a1), b1 = _mm256_hadd_ps(a2, a3);
  return _mm256_add_ps(_mm256_permute2f128_ps(b0, b1, 0x20), _mm256_permute2f128_ps(b0, b1, 0x31));
}

// exp(x) for x <= 0 (and -inf): range reduction by ln 2, degree-7 polynomial, ~1e-7 relative.
static inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  static const float c[] = {1.f / 5040, 1.f / 720, 1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f};
  __m512 p = _mm512_set1_ps(c[0]);
  for (int i = 1; i < 8; ++i)
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c[i]));
  return _mm512_scalef_ps(p, n);
}

// Online-softmax state of the 3 heads: 64 output columns in 4 zmm per head, in the widening's
// (even 16, odd 16) order per 32 columns.
typedef struct {
  __m512 acc[H][4];
  float max[H], sum[H];
} State;

static void stateInit(State *st) {
  memset(st, 0, sizeof *st);
  for (int h = 0; h < H; ++h)
    st->max[h] = -INFINITY;
}

// The block's softmax from its logits |scores| [H][BS], then p.V over its 16 V rows.
static inline void softmaxAndPV(State *st, const float *scores, const uint16_t *vBlock) {
  float p[H][BS] __attribute__((aligned(64)));
  for (int h = 0; h < H; ++h) {
    __m512 l = _mm512_load_ps(scores + h * BS);
    float m = fmaxf(st->max[h], _mm512_reduce_max_ps(l));
    __m512 e = exp512(_mm512_sub_ps(l, _mm512_set1_ps(m)));
    float alpha = expf(st->max[h] - m);
    st->sum[h] = st->sum[h] * alpha + _mm512_reduce_add_ps(e);
    st->max[h] = m;
    _mm512_store_ps(p[h], e);
    for (int j = 0; j < 4; ++j)
      st->acc[h][j] = _mm512_mul_ps(st->acc[h][j], _mm512_set1_ps(alpha));
  }
  for (int r = 0; r < BS; ++r) {
    const uint16_t *row = vBlock + r * D;
    __m512i x0 = _mm512_load_si512(row), x1 = _mm512_load_si512(row + 32);
    __m512 v[4] = {widenEven(x0), widenOdd(x0), widenEven(x1), widenOdd(x1)};
    for (int h = 0; h < H; ++h) {
      __m512 pb = _mm512_set1_ps(p[h][r]);
      for (int j = 0; j < 4; ++j)
        st->acc[h][j] = _mm512_fmadd_ps(pb, v[j], st->acc[h][j]);
    }
  }
}

static void stateFinish(const State *st, float *out) {
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < 4; ++j)
      _mm512_storeu_ps(out + h * D + 16 * j,
                       _mm512_mul_ps(st->acc[h][j], _mm512_set1_ps(1.f / st->sum[h])));
}

// K row-major [rows][64]; |qPerm| is q in the 8-lane widening order (even 8, odd 8 per 16).
__attribute__((noinline)) static void attendRowMajor(const uint16_t *K, const uint16_t *V, int rows,
                                                     const float *qPerm, float *out) {
  State st;
  stateInit(&st);
  float scores[H * BS] __attribute__((aligned(64)));
  for (int b = 0; b < rows; b += BS) {
    for (int r0 = 0; r0 < BS; r0 += 8) {
      __m256 part[H][8];
      for (int g = 0; g < 8; g += 4) {
        __m256 acc[4][H];
        for (int c = 0; c < D; c += 16)
          for (int i = 0; i < 4; ++i) {
            __m256i x = _mm256_load_si256((const __m256i *)(K + (size_t)(b + r0 + g + i) * D + c));
            __m256 e = widenEven8(x), o = widenOdd8(x);
            for (int h = 0; h < H; ++h) {
              __m256 qe = _mm256_load_ps(qPerm + h * D + c), qo = _mm256_load_ps(qPerm + h * D + c + 8);
              acc[i][h] = c == 0 ? _mm256_mul_ps(qe, e) : _mm256_fmadd_ps(qe, e, acc[i][h]);
              acc[i][h] = _mm256_fmadd_ps(qo, o, acc[i][h]);
            }
          }
        for (int i = 0; i < 4; ++i)
          for (int h = 0; h < H; ++h)
            part[h][g + i] = acc[i][h];
      }
      for (int h = 0; h < H; ++h)
        _mm256_store_ps(scores + h * BS + r0, sumTree8(part[h]));
    }
    softmaxAndPV(&st, scores, V + (size_t)b * D);
  }
  stateFinish(&st, out);
}

static inline __m512 widen16(const uint16_t *p) { // 16 bf16 -> 16 f32
  __m512i x = _mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
}

// K transposed per block [block][64 columns][16 rows]; q in natural order; two chains per head.
__attribute__((noinline)) static void attendTransposed(const uint16_t *KT, const uint16_t *V, int rows,
                                                       const float *q, float *out) {
  State st;
  stateInit(&st);
  float scores[H * BS] __attribute__((aligned(64)));
  for (int b = 0; b < rows; b += BS) {
    const uint16_t *kb = KT + (size_t)b * D;
    __m512 even[H], odd[H];
    for (int h = 0; h < H; ++h)
      even[h] = odd[h] = _mm512_setzero_ps();
    for (int d = 0; d < D; d += 2) {
      __m512 e = widen16(kb + d * BS), o = widen16(kb + (d + 1) * BS);
      for (int h = 0; h < H; ++h) {
        even[h] = _mm512_fmadd_ps(_mm512_set1_ps(q[h * D + d]), e, even[h]);
        odd[h] = _mm512_fmadd_ps(_mm512_set1_ps(q[h * D + d + 1]), o, odd[h]);
      }
    }
    for (int h = 0; h < H; ++h)
      _mm512_store_ps(scores + h * BS, _mm512_add_ps(even[h], odd[h]));
    softmaxAndPV(&st, scores, V + (size_t)b * D);
  }
  stateFinish(&st, out);
}

// Anonymous memory advised for huge pages, as the KV pools and the bench's roof buffer are (with
// 4 KiB pages this guest's read roof measured ~20% lower).
static void *hugeAlloc(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

static uint16_t toBf16(float f) { // truncation is fine for test data
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
static float fromBf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// The read roof: the faster of a plain sum over |bytes| and the same sum reading both halves at
// once (as attention reads K and V; like the bench's roof in bench_core.cpp, ~10% apart here).
static double readRoof(const float *R, size_t bytes) {
  double best = 0;
  size_t n = bytes / 4;
  for (int twoStreams = 0; twoStreams < 2; ++twoStreams) {
    double t = now();
    __m512 a = _mm512_setzero_ps(), a2 = a;
    if (twoStreams)
      for (size_t i = 0; i < n / 2; i += 16) {
        a = _mm512_add_ps(a, _mm512_load_ps(R + i));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(R + n / 2 + i));
      }
    else
      for (size_t i = 0; i < n; i += 32) {
        a = _mm512_add_ps(a, _mm512_load_ps(R + i));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(R + i + 16));
      }
    t = now() - t;
    volatile float sink = _mm512_reduce_add_ps(_mm512_add_ps(a, a2));
    (void)sink;
    best = fmax(best, bytes / t / 1e9);
  }
  return best;
}

int main(int argc, char **argv) {
  int rows = argc > 1 ? atoi(argv[1]) : 4096, reps = argc > 2 ? atoi(argv[2]) : 0;
  if (rows < BS || rows % BS) {
    fprintf(stderr, "ROWS must be a positive multiple of %d\n", BS);
    return 1;
  }
  if (reps <= 0) // about 0.2 s per timed call set
    reps = (int)(4096 * 500LL / rows) > 0 ? (int)(4096 * 500LL / rows) : 1;
  size_t n = (size_t)rows * D;
  uint16_t *K = hugeAlloc(n * 2), *KT = hugeAlloc(n * 2), *V = hugeAlloc(n * 2);
  float q[H * D] __attribute__((aligned(64))), qPerm[H * D] __attribute__((aligned(64)));
  float out[H * D];
  double ref[H * D];
  srand(1);
  for (size_t i = 0; i < n; ++i) {
    K[i] = toBf16(rand() / (float)RAND_MAX - 0.5f);
    V[i] = toBf16(rand() / (float)RAND_MAX - 0.5f);
  }
  for (int i = 0; i < H * D; ++i)
    q[i] = (rand() / (float)RAND_MAX - 0.5f) * 0.5f;
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < D; c += 16)
      for (int j = 0; j < 8; ++j) {
        qPerm[h * D + c + j] = q[h * D + c + 2 * j];
        qPerm[h * D + c + 8 + j] = q[h * D + c + 2 * j + 1];
      }
  for (int b = 0; b < rows; b += BS)
    for (int d = 0; d < D; ++d)
      for (int t = 0; t < BS; ++t)
        KT[(size_t)b * D + d * BS + t] = K[(size_t)(b + t) * D + d];
  double *logit = malloc(sizeof(double) * rows);
  for (int h = 0; h < H; ++h) {
    double mx = -INFINITY, den = 0;
    for (int r = 0; r < rows; ++r) {
      double s = 0;
      for (int d = 0; d < D; ++d)
        s += (double)q[h * D + d] * fromBf16(K[(size_t)r * D + d]);
      logit[r] = s;
      mx = fmax(mx, s);
    }
    for (int r = 0; r < rows; ++r)
      den += logit[r] = exp(logit[r] - mx);
    for (int d = 0; d < D; ++d) {
      double s = 0;
      for (int r = 0; r < rows; ++r)
        s += logit[r] * fromBf16(V[(size_t)r * D + d]);
      ref[h * D + d] = s / den;
    }
  }
  size_t roofBytes = (size_t)1 << 30;
  float *R = hugeAlloc(roofBytes);
  memset(R, 0, roofBytes);
  const char *names[] = {"row-major K (tree logits)", "K transposed per block"};
  for (int variant = 0; variant < 2; ++variant) {
    double best = 1e9, roof = 0;
    for (int round = 0; round < 5; ++round) {
      roof = fmax(roof, readRoof(R, roofBytes));
      double t = now();
      for (int i = 0; i < reps; ++i)
        variant == 0 ? attendRowMajor(K, V, rows, qPerm, out) : attendTransposed(KT, V, rows, q, out);
      best = fmin(best, (now() - t) / reps);
    }
    double err = 0, mag = 0; // out is in the widening's order: per 32 columns, even 16 then odd 16
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < D; c += 32)
        for (int j = 0; j < 16; ++j) {
          err = fmax(err, fabs(out[h * D + c + j] - ref[h * D + c + 2 * j]));
          err = fmax(err, fabs(out[h * D + c + 16 + j] - ref[h * D + c + 2 * j + 1]));
          mag = fmax(mag, fmax(fabs(ref[h * D + c + 2 * j]), fabs(ref[h * D + c + 2 * j + 1])));
        }
    double gbps = 4.0 * n / best / 1e9; // K and V, 2 bytes each
    printf("%-26s rows=%d %.3f ns/row %.2f GB/s roof %.2f ratio %.3f max rel err %.1e\n",
           names[variant], rows, best / rows * 1e9, gbps, roof, gbps / roof, err / mag);
  }
  return 0;
}
