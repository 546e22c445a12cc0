// access_pattern.c: how fast one thread streams two arrays (K and V) from DRAM under the access
// patterns the dense CPU attention kernel can produce, with a little math per cache line, so a
// CPU's prefetchers can be characterized independently of the kernel (docs/cpu-path.md, "Memory
// behaviour on Zen 4"). Not part of the build: it needs AVX-512 (build it where the CPU has it).
//
//   clang-22 -O2 -march=native bench/cpu_attention/memory/access_pattern.c -o /tmp/access_pattern
//   /tmp/access_pattern FMAS CHUNK_BYTES [options]     e.g. /tmp/access_pattern 4 8192 tile=1
//
// FMAS: 512-bit FMAs per 64-byte line (0: one add). CHUNK_BYTES: bytes of K, then of V, in turn.
// Options (key=value): mib=64 (size of each array), dist=<bytes> (V's start minus K's; default
// the array size), tile=1 (read V in 4 column passes of 16 rows x 128 bytes, as the kernel's
// column-tiled V accumulation does, instead of line by line), pf=<bytes> and loc=0..3 (a software
// prefetch that far ahead, locality as __builtin_prefetch), touch=1 (prefetch V line by line,
// locality 2, while K is read), passes=N (re-read each chunk N more times, from cache).
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
  int fmas, tile, touch, passes, loc;
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

// Offset of the i-th line read in a chunk: in order, or (V with tile) in the kernel's column
// passes over 16 rows of 512 bytes: pass t reads lines 2t, 2t+1 of each row.
static size_t lineOffset(const Pattern *p, int isV, size_t i) {
  if (!isV || !p->tile)
    return i * 64;
  size_t perPass = 32, t = i / perPass % 4, rem = i % perPass, block = i / 128;
  return block * 8192 + ((rem / 2) * 8 + 2 * t + rem % 2) * 64;
}

__attribute__((noinline)) static float run(const char *k, const char *v, size_t n, const Pattern *p) {
  __m512 acc[8];
  for (int i = 0; i < 8; ++i)
    acc[i] = _mm512_setzero_ps();
  const __m512 q = _mm512_set1_ps(1.0001f);
  for (size_t c = 0; c < n; c += p->chunk)
    for (int isV = 0; isV < 2; ++isV) {
      const char *base = isV ? v : k;
      for (int pass = 0; pass <= p->passes; ++pass)
        for (size_t i = 0; i < p->chunk / 64; ++i) {
          size_t o = c + lineOffset(p, isV, i);
          if (pass == 0 && p->pf && o + p->pf < n)
            prefetch(base + o + p->pf, p->loc);
          if (pass == 0 && !isV && p->touch)
            prefetch(v + o, 2);
          __m512 x = _mm512_load_ps((const float *)(base + o));
          if (!p->fmas)
            acc[0] = _mm512_add_ps(acc[0], x);
          for (int f = 0; f < p->fmas; ++f)
            acc[f & 7] = _mm512_fmadd_ps(x, q, acc[f & 7]);
        }
    }
  for (int i = 1; i < 8; ++i)
    acc[0] = _mm512_add_ps(acc[0], acc[i]);
  return _mm512_reduce_add_ps(acc[0]);
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
               (size_t)atol(argv[2]), (size_t)option(argc, argv, "pf", 0)};
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
  printf("fmas=%d chunk=%zu tile=%d touch=%d passes=%d pf=%zu loc=%d dist=%zu: %.1f GB/s (%g)\n",
         p.fmas, p.chunk, p.tile, p.touch, p.passes, p.pf, p.loc, dist, 2.0 * n / best / 1e9, sink);
  return 0;
}
