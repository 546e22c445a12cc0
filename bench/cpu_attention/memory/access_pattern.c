// access_pattern.c: how fast one thread streams two arrays (K and V) from DRAM under the access
// patterns the dense CPU attention kernel can produce, with a little math per cache line, so a
// CPU's prefetchers can be characterized independently of the kernel (docs/cpu-runs.md, "Memory
// behaviour on Zen 4"). Not part of the build: it needs AVX-512 (build it where the CPU has it).
//
//   clang-22 -O2 -march=native bench/cpu_attention/memory/access_pattern.c -o /tmp/access_pattern
//   /tmp/access_pattern FMAS CHUNK_BYTES [options]     e.g. /tmp/access_pattern 4 8192 tile=1
//
// FMAS: 512-bit FMAs per 64-byte line on up to 8 independent accumulators (0: one add). CHUNK_BYTES: bytes of K, then of V, in turn.
// Options (key=value): mib=64 (size of each array), dist=<bytes> (V's start minus K's; default
// the array size), tile=1 (read V in 4 column passes of 16 rows x 128 bytes, as the kernel's
// column-tiled V accumulation does, instead of line by line), pf=<bytes> and loc=0..3 (a software
// prefetch that far ahead, locality as __builtin_prefetch), touch=1 (prefetch V line by line,
// locality 2, while K is read), passes=N (re-read each chunk N more times, from cache), pfv=0 (the
// pf prefetch in K's chunks only, as the transposed kernel's logits ask for the far K rows and p.V
// asks for nothing), half=1 (K's lines as two 32-byte loads widened from bf16, FMAS each, as the
// transposed K columns), bubble=N (N FMAs with no loads between a K and a V chunk, the softmax).
// Prints GB/s of K+V read, best of 3 passes over both arrays.
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct {
  int fmas, tile, touch, passes, loc, pfv, half, bubble;
  size_t chunk, pf;
} Pattern;

static void prefetch(const char *p, int loc) {
  switch (loc) {
  case 3: _mm_prefetch(p, _MM_HINT_T0); break;
  case 2: _mm_prefetch(p, _MM_HINT_T1); break;
  case 1: _mm_prefetch(p, _MM_HINT_T2); break;
  default: _mm_prefetch(p, _MM_HINT_NTA); break;
  }
}

// The order in which the lines of one 8 KiB piece are read: in order, or (V with tile) in the
// kernel's column passes over 16 rows of 512 bytes (pass t reads lines 2t, 2t+1 of each row).
// Precomputed, so every pattern costs the same instructions per line (compare the rates with
// mib=1, where the arrays sit in cache: they must agree for the DRAM rates to mean anything).
static unsigned kOrder[2][128];

static void makeOrders(void) {
  for (unsigned i = 0; i < 128; ++i) {
    unsigned t = i / 32, rem = i % 32;
    kOrder[0][i] = i * 64;
    kOrder[1][i] = ((rem / 2) * 8 + 2 * t + rem % 2) * 64;
  }
}

// FMAS multiply-adds per line on up to 8 independent accumulators (kept in registers: named, not
// an indexed array, which compilers leave in memory).
#define STEP(i, a)                                                                                 \
  if (f + i < p->fmas)                                                                             \
    a = _mm512_fmadd_ps(x, q, a);
__attribute__((noinline)) static float run(const char *k, const char *v, size_t n, const Pattern *p) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  const __m512 q = _mm512_set1_ps(1.0001f);
  for (size_t c = 0; c < n; c += p->chunk)
    for (int isV = 0; isV < 2; ++isV) {
      const char *base = isV ? v : k;
      // A stretch of math with no loads between a K and a V chunk, as the softmax between the
      // logits and p.V: |bubble| FMAs on 4 chains, fed by the K math and feeding the V math.
      if (isV && p->bubble) {
        __m512 b0 = a0, b1 = a1, b2 = a2, b3 = a3;
        for (int i = 0; i < p->bubble; i += 4) {
          b0 = _mm512_fmadd_ps(b0, q, q);
          b1 = _mm512_fmadd_ps(b1, q, q);
          b2 = _mm512_fmadd_ps(b2, q, q);
          b3 = _mm512_fmadd_ps(b3, q, q);
        }
        a4 = _mm512_add_ps(a4, _mm512_min_ps(_mm512_add_ps(b0, b1), _mm512_add_ps(b2, b3)));
      }
      const unsigned *order = kOrder[isV && p->tile];
      for (int pass = 0; pass <= p->passes; ++pass) {
        const int pf = pass == 0 && p->pf && (!isV || p->pfv), touch = pass == 0 && !isV && p->touch;
        for (size_t piece = 0; piece < p->chunk; piece += 8192)
          for (size_t i = 0; i < 128 && piece + i * 64 < p->chunk; ++i) {
            size_t o = c + piece + (p->chunk >= 8192 ? order[i] : i * 64);
            if (pf && o + p->pf < n)
              prefetch(base + o + p->pf, p->loc);
            if (touch)
              prefetch(v + o, 2);
            for (int h = 0; h <= (p->half && !isV); ++h) {
              __m512 x;
              if (p->half) // 16 bf16 (32 bytes) widened to f32, as the transposed K column
                x = _mm512_castsi512_ps(_mm512_slli_epi32(
                    _mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)(base + o + 32 * h))),
                    16));
              else
                x = _mm512_load_ps((const float *)(base + o));
              if (!p->fmas)
                a0 = _mm512_add_ps(a0, x);
              for (int f = 0; f < p->fmas; f += 8) {
                STEP(0, a0) STEP(1, a1) STEP(2, a2) STEP(3, a3) STEP(4, a4) STEP(5, a5) STEP(6, a6)
                STEP(7, a7)
              }
            }
          }
      }
    }
  a0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                     _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  return _mm512_reduce_add_ps(a0);
}

static long option(int argc, char **argv, const char *key, long fallback) {
  size_t n = strlen(key);
  for (int i = 3; i < argc; ++i)
    if (strncmp(argv[i], key, n) == 0 && argv[i][n] == '=')
      return atol(argv[i] + n + 1);
  return fallback;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s FMAS CHUNK_BYTES [mib= dist= tile= pf= loc= touch= passes=]\n", argv[0]);
    return 2;
  }
  Pattern p = {atoi(argv[1]), (int)option(argc, argv, "tile", 0), (int)option(argc, argv, "touch", 0),
               (int)option(argc, argv, "passes", 0), (int)option(argc, argv, "loc", 3),
               (int)option(argc, argv, "pfv", 1), (int)option(argc, argv, "half", 0),
               (int)option(argc, argv, "bubble", 0),
               (size_t)atol(argv[2]), (size_t)option(argc, argv, "pf", 0)};
  makeOrders();
  size_t n = (size_t)option(argc, argv, "mib", 64) << 20;
  size_t dist = (size_t)option(argc, argv, "dist", (long)n);
  if (p.chunk < 8192 && p.tile) {
    fprintf(stderr, "tile needs chunks of whole 8 KiB pieces\n");
    return 2;
  }
  if (p.chunk == 0 || p.chunk % 64 || n % p.chunk || dist < n) {
    fprintf(stderr, "CHUNK_BYTES must be a positive multiple of 64 dividing the array, dist >= mib\n");
    return 2;
  }
  size_t align = 2u << 20, total = dist + n + align;
  char *raw = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  madvise(raw, total, MADV_HUGEPAGE);
  memset(raw, 1, total);
  char *k = (char *)(((size_t)raw + align - 1) & ~(align - 1)), *v = k + dist;
  double best = 1e30;
  float sink = 0;
  for (int r = 0; r < 3; ++r) {
    double t = now();
    sink += run(k, v, n, &p);
    t = now() - t;
    best = t < best ? t : best;
  }
  printf("fmas=%d chunk=%zu tile=%d touch=%d passes=%d pf=%zu loc=%d pfv=%d half=%d bubble=%d "
         "dist=%zu: %.1f GB/s (%g)\n",
         p.fmas, p.chunk, p.tile, p.touch, p.passes, p.pf, p.loc, p.pfv, p.half, p.bubble, dist, 2.0 * n / best / 1e9, sink);
  return 0;
}
