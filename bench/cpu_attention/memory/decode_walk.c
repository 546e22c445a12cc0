// decode_walk.c: a hand-written f32 decode attention with the dense kernel's memory walk, so that
// the walk's DRAM behaviour can be measured apart from the compiler (docs/cpu-runs.md, "Memory
// behaviour on Zen 4"). Llama-3-8B shape (8 kv heads, group 4, head dim 128, blocks of 16 tokens),
// K and V pools [block][kv head][16][128] in one mapping (V after K plus GAP bytes), one thread.
// Not part of the build (it needs AVX-512):
//
//   clang-22 -O3 -march=native bench/cpu_attention/memory/decode_walk.c -o /tmp/decode_walk -lm
//   /tmp/decode_walk TOKENS ORDER PF VROW [REUSE [DIST [GAP]]]
//
// ORDER 0: slot-major, per kv head K piece then V piece (the kernel's order); 1: per block all K
// pieces, then all V pieces. PF 0: none; 1: the next piece whole (K t0, V t1); 2: the block DIST
// ahead whole, into L2. VROW 0: V in column tiles of 32 (the kernel's accumulateV); 1: whole
// rows, accumulators in L1. REUSE N > 0: every block index mod N (cache-resident compute rate).
// Environment: KPF=<bytes> KLOC=3|2|1|0 (prefetch each K and V row that far ahead, spread over
// the rows, with that locality), SKIP=1 (logits only) or 2 (V only). Prints the K+V (or K/V
// alone) GB/s of the best of 5 calls against a plain read of 1 GiB measured between them.
// The exp is a rough polynomial: only the speed means anything here.
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { KVH = 8, G = 4, D = 128, BS = 16 };
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static void *big(size_t n) {
  void *p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  madvise(p, n, MADV_HUGEPAGE);
  return p;
}
static inline __m512 vexp(__m512 x) { // rough 2^(x*log2e), accuracy irrelevant here
  x = _mm512_max_ps(x, _mm512_set1_ps(-80.f));
  __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.442695f));
  __m512 fi = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_sub_ps(t, fi);
  __m512 p = _mm512_fmadd_ps(f, _mm512_set1_ps(0.0555f), _mm512_set1_ps(0.2402f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, fi);
}
typedef struct {
  float acc[KVH][G][D];
  float m[KVH][G], l[KVH][G];
  float p[KVH][G][BS];
  float alpha[KVH][G];
  float q[KVH][G][D];
} State;

static int pfmode = 0;   // 0 none, 1 next piece K t0 + V t1 (as built-ish), 2 next block t1 all
static int vrow = 0;     // V walk: 0 column tiles of 32 cols, 1 whole rows, acc in L1
static int pfdist = 1;
static int skip = 0;
static long kpf = 0; static int kloc = 2; // spread K prefetch distance (bytes) and hint
 // 1: no V, 2: no K
   // blocks ahead for pfmode 2

static void logits(State *st, const float *K, int h) {
  __m512 s[G];
  float sc[G][BS];
  for (int t = 0; t < BS; ++t) {
    const float *kr = K + t * D;
    if (kpf)
      for (int c = 0; c < D; c += 16) {
        const char *a = (const char *)(kr + c) + kpf;
        if (kloc == 3) _mm_prefetch(a, _MM_HINT_T0);
        else if (kloc == 2) _mm_prefetch(a, _MM_HINT_T1);
        else if (kloc == 1) _mm_prefetch(a, _MM_HINT_T2);
        else _mm_prefetch(a, _MM_HINT_NTA);
      }
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int c = 0; c < D; c += 16) {
      __m512 k = _mm512_loadu_ps(kr + c);
      a0 = _mm512_fmadd_ps(k, _mm512_loadu_ps(&st->q[h][0][c]), a0);
      a1 = _mm512_fmadd_ps(k, _mm512_loadu_ps(&st->q[h][1][c]), a1);
      a2 = _mm512_fmadd_ps(k, _mm512_loadu_ps(&st->q[h][2][c]), a2);
      a3 = _mm512_fmadd_ps(k, _mm512_loadu_ps(&st->q[h][3][c]), a3);
    }
    sc[0][t] = _mm512_reduce_add_ps(a0);
    sc[1][t] = _mm512_reduce_add_ps(a1);
    sc[2][t] = _mm512_reduce_add_ps(a2);
    sc[3][t] = _mm512_reduce_add_ps(a3);
  }
  for (int g = 0; g < G; ++g) {
    s[g] = _mm512_loadu_ps(sc[g]);
    float bm = _mm512_reduce_max_ps(s[g]);
    float mo = st->m[h][g], mn = bm > mo ? bm : mo;
    __m512 p = vexp(_mm512_sub_ps(s[g], _mm512_set1_ps(mn)));
    _mm512_storeu_ps(st->p[h][g], p);
    float a = mo == -INFINITY ? 0.f : expf(mo - mn);
    st->alpha[h][g] = a;
    st->l[h][g] = st->l[h][g] * a + _mm512_reduce_add_ps(p);
    st->m[h][g] = mn;
  }
}

static void accv(State *st, const float *V, int h) {
  if (!vrow) {
    for (int c = 0; c < D; c += 32) {
      __m512 acc[G][2];
      for (int g = 0; g < G; ++g) {
        __m512 a = _mm512_set1_ps(st->alpha[h][g]);
        acc[g][0] = _mm512_mul_ps(a, _mm512_loadu_ps(&st->acc[h][g][c]));
        acc[g][1] = _mm512_mul_ps(a, _mm512_loadu_ps(&st->acc[h][g][c + 16]));
      }
      for (int t = 0; t < BS; ++t) {
        if (kpf && c == 0)
          for (int cc = 0; cc < D; cc += 16) {
            const char *a = (const char *)(V + t * D + cc) + kpf;
            if (kloc == 3) _mm_prefetch(a, _MM_HINT_T0);
            else if (kloc == 2) _mm_prefetch(a, _MM_HINT_T1);
            else _mm_prefetch(a, _MM_HINT_NTA);
          }
        __m512 v0 = _mm512_loadu_ps(V + t * D + c), v1 = _mm512_loadu_ps(V + t * D + c + 16);
        for (int g = 0; g < G; ++g) {
          __m512 p = _mm512_set1_ps(st->p[h][g][t]);
          acc[g][0] = _mm512_fmadd_ps(p, v0, acc[g][0]);
          acc[g][1] = _mm512_fmadd_ps(p, v1, acc[g][1]);
        }
      }
      for (int g = 0; g < G; ++g) {
        _mm512_storeu_ps(&st->acc[h][g][c], acc[g][0]);
        _mm512_storeu_ps(&st->acc[h][g][c + 16], acc[g][1]);
      }
    }
  } else {
    for (int g = 0; g < G; ++g) {
      __m512 a = _mm512_set1_ps(st->alpha[h][g]);
      for (int c = 0; c < D; c += 16)
        _mm512_storeu_ps(&st->acc[h][g][c], _mm512_mul_ps(a, _mm512_loadu_ps(&st->acc[h][g][c])));
    }
    for (int t = 0; t < BS; ++t) {
        if (kpf)
          for (int cc = 0; cc < D; cc += 16) {
            const char *a = (const char *)(V + t * D + cc) + kpf;
            if (kloc == 3) _mm_prefetch(a, _MM_HINT_T0);
            else if (kloc == 2) _mm_prefetch(a, _MM_HINT_T1);
            else _mm_prefetch(a, _MM_HINT_NTA);
          }
      __m512 p0 = _mm512_set1_ps(st->p[h][0][t]), p1 = _mm512_set1_ps(st->p[h][1][t]),
             p2 = _mm512_set1_ps(st->p[h][2][t]), p3 = _mm512_set1_ps(st->p[h][3][t]);
      for (int c = 0; c < D; c += 16) {
        __m512 v = _mm512_loadu_ps(V + t * D + c);
        _mm512_storeu_ps(&st->acc[h][0][c], _mm512_fmadd_ps(p0, v, _mm512_loadu_ps(&st->acc[h][0][c])));
        _mm512_storeu_ps(&st->acc[h][1][c], _mm512_fmadd_ps(p1, v, _mm512_loadu_ps(&st->acc[h][1][c])));
        _mm512_storeu_ps(&st->acc[h][2][c], _mm512_fmadd_ps(p2, v, _mm512_loadu_ps(&st->acc[h][2][c])));
        _mm512_storeu_ps(&st->acc[h][3][c], _mm512_fmadd_ps(p3, v, _mm512_loadu_ps(&st->acc[h][3][c])));
      }
    }
  }
}

static void pfrange(const char *p, size_t bytes, int hint) {
  for (size_t o = 0; o < bytes; o += 64)
    if (hint == 3) _mm_prefetch(p + o, _MM_HINT_T0);
    else _mm_prefetch(p + o, _MM_HINT_T1);
}

// order 0: slot-major per unit (K piece, V piece); 1: block-phased (all K, then all V)
static void run(State *st, const float *K, const float *V, int nblk, int order, int reuse) {
  const size_t piece = BS * D, blk = KVH * piece;
  for (int b = 0; b < nblk; ++b) {
    int pb = reuse ? b % reuse : b, pn = reuse ? (b + pfdist) % reuse : b + pfdist;
    const float *Kb = K + pb * blk, *Vb = V + pb * blk;
    if (pfmode == 2 && b + pfdist < nblk) {
      pfrange((const char *)(K + pn * blk), blk * 4, 2);
      pfrange((const char *)(V + pn * blk), blk * 4, 2);
    }
    if (order == 0) {
      for (int h = 0; h < KVH; ++h) {
        if (pfmode == 1) {
          int nb = h + 1 < KVH ? pb : pn, nh = (h + 1) % KVH;
          if (b + 1 < nblk || h + 1 < KVH) {
            pfrange((const char *)(K + nb * blk + nh * piece), piece * 4, 3);
            pfrange((const char *)(V + nb * blk + nh * piece), piece * 4, 2);
          }
        }
        if (skip != 2) logits(st, Kb + h * piece, h);
        if (skip != 1) accv(st, Vb + h * piece, h);
      }
    } else {
      for (int h = 0; h < KVH; ++h)
        logits(st, Kb + h * piece, h);
      for (int h = 0; h < KVH; ++h)
        accv(st, Vb + h * piece, h);
    }
  }
}

int main(int argc, char **argv) {
  int tokens = atoi(argv[1]), order = atoi(argv[2]);
  pfmode = atoi(argv[3]);
  vrow = atoi(argv[4]);
  int reuse = argc > 5 ? atoi(argv[5]) : 0;
  pfdist = argc > 6 ? atoi(argv[6]) : 1;
  int nblk = tokens / BS;
  size_t bytes = (size_t)nblk * KVH * BS * D * 4;
  skip = getenv("SKIP") ? atoi(getenv("SKIP")) : 0;
  kpf = getenv("KPF") ? atol(getenv("KPF")) : 0;
  kloc = getenv("KLOC") ? atoi(getenv("KLOC")) : 2;
  size_t gap = argc > 7 ? (size_t)atol(argv[7]) : 0;
  char *base = big(2 * bytes + gap + (4u << 20));
  base = (char *)(((size_t)base + (2u << 20) - 1) & ~((size_t)(2u << 20) - 1));
  float *K = (float *)base, *V = (float *)(base + bytes + gap);
  for (size_t i = 0; i < bytes / 4; ++i) K[i] = V[i] = (float)(i % 7) * 0.01f;
  size_t rb = 1ull << 30;
  float *R = big(rb);
  memset(R, 1, rb);
  State *st = aligned_alloc(64, sizeof(State));
  memset(st, 0, sizeof *st);
  double best = 1e9, roof = 0;
  for (int r = 0; r < 5; ++r) {
    double t = now();
    __m512 a = _mm512_setzero_ps(), b2 = a;
    for (size_t i = 0; i < rb / 4; i += 32) {
      a = _mm512_add_ps(a, _mm512_load_ps(R + i));
      b2 = _mm512_add_ps(b2, _mm512_load_ps(R + i + 16));
    }
    t = now() - t;
    volatile float sink = _mm512_reduce_add_ps(_mm512_add_ps(a, b2));
    (void)sink;
    if (rb / t > roof) roof = rb / t;
    for (int h = 0; h < KVH; ++h)
      for (int g = 0; g < G; ++g) st->m[h][g] = -INFINITY, st->l[h][g] = 0;
    t = now();
    run(st, K, V, nblk, order, reuse);
    t = now() - t;
    if (t < best) best = t;
  }
  double gbps = (skip ? 1.0 : 2.0) * bytes / best / 1e9;
  printf("gap=%zu tokens=%d order=%d pf=%d vrow=%d reuse=%d dist=%d: %.2f GB/s roof %.2f ratio %.3f\n", gap, tokens,
         order, pfmode, vrow, reuse, pfdist, gbps, roof / 1e9, gbps / (roof / 1e9));
  return 0;
}
