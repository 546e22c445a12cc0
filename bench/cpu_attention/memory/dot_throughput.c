// dot_throughput.c: how many vector multiply-adds one core retires per cycle, the compute limit of
// decode attention (docs/cpu-runs.md, "The bf16 dot-product path"). Twelve independent
// accumulators, so latency is hidden and only throughput counts; the clock comes from a chain of
// dependent integer multiplies (3 cycles each), so the figures are per cycle of this core as it runs.
// Not part of the build; the AVX-512 rows run only where the CPU has them (an AVX2-only Zen 3
// prints the ymm FMA row alone):
//
//   clang-22 -O2 bench/cpu_attention/memory/dot_throughput.c -o /tmp/dot_throughput && \
//       chrt -f 90 /tmp/dot_throughput
#include <stdio.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

enum { kIters = 100000000 };

// Twelve instructions of OP into accumulators 0-11 from registers 14 and 15 of width REG.
#define TWELVE(OP, REG)                                                                            \
  OP " %%" REG "14,%%" REG "15,%%" REG "0\n\t" OP " %%" REG "14,%%" REG "15,%%" REG "1\n\t" OP     \
     " %%" REG "14,%%" REG "15,%%" REG "2\n\t" OP " %%" REG "14,%%" REG "15,%%" REG "3\n\t" OP     \
     " %%" REG "14,%%" REG "15,%%" REG "4\n\t" OP " %%" REG "14,%%" REG "15,%%" REG "5\n\t" OP     \
     " %%" REG "14,%%" REG "15,%%" REG "6\n\t" OP " %%" REG "14,%%" REG "15,%%" REG "7\n\t" OP     \
     " %%" REG "14,%%" REG "15,%%" REG "8\n\t" OP " %%" REG "14,%%" REG "15,%%" REG "9\n\t" OP     \
     " %%" REG "14,%%" REG "15,%%" REG "10\n\t" OP " %%" REG "14,%%" REG "15,%%" REG "11\n\t"

#define MEASURE(BODY)                                                                              \
  ({                                                                                               \
    long n = kIters;                                                                               \
    double t0 = now();                                                                             \
    __asm__ volatile("vpxor %%xmm14,%%xmm14,%%xmm14\n\tvpxor %%xmm15,%%xmm15,%%xmm15\n1:\n\t" BODY \
                     "dec %0\n\tjnz 1b"                                                            \
                     : "+r"(n)                                                                     \
                     :                                                                             \
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",     \
                       "xmm9", "xmm10", "xmm11", "xmm14", "xmm15");                                \
    12.0 * kIters / (now() - t0);                                                                  \
  })

int main(void) {
  // A chain of dependent 64-bit multiplies, 3 cycles each on every x86 core in question (Zen 3-5,
  // Golden Cove). Not adds: Golden Cove (Sapphire/Emerald Rapids) folds chains of add-immediate
  // at rename, and such a chain read ~11 GHz there.
  long n = (long)kIters, x = 1, one = 1;
  double t0 = now();
  for (long i = 0; i < n; ++i)
    __asm__ volatile("imul %1, %0\n\timul %1, %0\n\timul %1, %0\n\timul %1, %0"
                     : "+r"(x)
                     : "r"(one));
  double hz = 3.0 * 4.0 * n / (now() - t0);
  printf("clock ~%.2f GHz (dependent multiplies, 3 cycles each)\n", hz / 1e9);
  // The instructions are in the asm text, so they assemble without -m flags; each row runs only
  // where the CPU executes it.
  int avx512 = __builtin_cpu_supports("avx512f");
  int bf16 = avx512 && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vl");
#define ROW(name, macs, ok, BODY)                                                                  \
  if (ok) {                                                                                        \
    double perSecond = MEASURE(BODY);                                                              \
    printf("%-32s %.2f per cycle, %.1f GMAC/s\n", name, perSecond / hz, perSecond * macs / 1e9);   \
  }
  ROW("vfmadd231ps ymm (8 f32 MACs)", 8, __builtin_cpu_supports("fma"),
      TWELVE("vfmadd231ps", "ymm"));
  ROW("vfmadd231ps zmm (16 f32 MACs)", 16, avx512, TWELVE("vfmadd231ps", "zmm"));
  ROW("vdpbf16ps ymm (16 bf16 MACs)", 16, bf16, TWELVE("vdpbf16ps", "ymm"));
  ROW("vdpbf16ps zmm (32 bf16 MACs)", 32, bf16, TWELVE("vdpbf16ps", "zmm"));
  return 0;
}
