// fma_mix.c: whether the helper instructions of the 16-bit attention kernels (bf16 widening,
// sum-tree shuffles) compete with the FMAs for the same execution pipes. Twelve independent ymm
// FMAs per iteration (2 per cycle on Zen 4, 6 cycles), alone and with six more instructions of
// one kind; an instruction that runs on other pipes adds ~nothing, one that shares the FMA pipes
// adds up to 3 cycles. The broadcast loads (the kernels' q and p operands) are set beside plain
// loads of a full register: LLVM's scheduling models put `vbroadcastss` from memory on FP1/FP2
// on Zen 3 (ymm) and on FP1 alone on Zen 4 (zmm), where a plain load takes no FP pipe
// (docs/cpu-runs.md, "Predicted core cycles for a CPU not at hand"); these rows measure it. Not
// part of the build (needs AVX2 and FMA; the vpandd and zmm rows run only where AVX-512VL is):
//
//   clang-22 -O2 bench/cpu_attention/memory/fma_mix.c -o /tmp/fma_mix && \
//       /tmp/fma_mix
//
// Measured numbers and what they mean for the kernel: docs/cpu-runs.md, "Where one thread's time
// goes in the 16-bit FMA kernel".
#include <stdio.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

enum { kIters = 100000000 };

// What the load rows read (an L1 hit every time).
float fma_mix_operand[16] __attribute__((aligned(64)));

#define FMA(n) "vfmadd231ps %%ymm14,%%ymm15,%%ymm" #n "\n\t"
#define TWELVE_FMAS                                                                                \
  FMA(0) FMA(1) FMA(2) FMA(3) FMA(4) FMA(5) FMA(6) FMA(7) FMA(8) FMA(9) FMA(10) FMA(11)
#define ZFMA(n) "vfmadd231ps %%zmm14,%%zmm15,%%zmm" #n "\n\t"
#define TWELVE_ZMM_FMAS                                                                            \
  ZFMA(0) ZFMA(1) ZFMA(2) ZFMA(3) ZFMA(4) ZFMA(5) ZFMA(6) ZFMA(7) ZFMA(8) ZFMA(9) ZFMA(10) ZFMA(11)
#define BFMA(n) "vfmadd231ps fma_mix_operand(%%rip)%{1to16%},%%zmm15,%%zmm" #n "\n\t"
#define TWELVE_ZMM_BCAST_FMAS                                                                      \
  BFMA(0) BFMA(1) BFMA(2) BFMA(3) BFMA(4) BFMA(5) BFMA(6) BFMA(7) BFMA(8) BFMA(9) BFMA(10) BFMA(11)
// Six instructions writing ymm12 only (no dependency between them: the register is renamed).
#define SIX(INSN) INSN "\n\t" INSN "\n\t" INSN "\n\t" INSN "\n\t" INSN "\n\t" INSN "\n\t"

#define MEASURE(NAME, BODY)                                                                        \
  do {                                                                                             \
    double best = 1e30;                                                                            \
    for (int round = 0; round < 3; ++round) {                                                      \
      double t = now();                                                                            \
      for (long i = 0; i < kIters; ++i)                                                            \
        __asm__ volatile(BODY::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",   \
                         "xmm8", "xmm9", "xmm10", "xmm11", "xmm12");                               \
      t = now() - t;                                                                               \
      best = t < best ? t : best;                                                                  \
    }                                                                                              \
    double ns = best / kIters * 1e9;                                                               \
    if (base == 0)                                                                                 \
      base = ns;                                                                                   \
    printf("%-34s %.2f ns per iteration (%+.2f)\n", NAME, ns, ns - base);                         \
  } while (0)

int main(void) {
  double base = 0;
  __asm__ volatile("vxorps %%ymm13,%%ymm13,%%ymm13\n\tvxorps %%ymm14,%%ymm14,%%ymm14\n\t"
                   "vxorps %%ymm15,%%ymm15,%%ymm15" ::: "xmm13", "xmm14", "xmm15");
  MEASURE("12 vfmadd231ps", TWELVE_FMAS);
  MEASURE("+ 6 vpslld (bf16 even half)", TWELVE_FMAS SIX("vpslld $16,%%ymm13,%%ymm12"));
  MEASURE("+ 6 vpblendw (bf16 odd half)", TWELVE_FMAS SIX("vpblendw $0xaa,%%ymm13,%%ymm13,%%ymm12"));
  int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
  if (avx512)
    MEASURE("+ 6 vpandd", TWELVE_FMAS SIX("vpandd %%ymm13,%%ymm13,%%ymm12"));
  // Byte shuffles: what a bf16 even half could take instead of the shift (LLVM folds a
  // constant vpshufb that moves each low word up back into vpslld, an unpack against zero it
  // keeps).
  MEASURE("+ 6 vpshufb ymm", TWELVE_FMAS SIX("vpshufb %%ymm13,%%ymm13,%%ymm12"));
  MEASURE("+ 6 vpunpcklwd", TWELVE_FMAS SIX("vpunpcklwd %%ymm13,%%ymm13,%%ymm12"));
  MEASURE("+ 6 vshufps (in-lane tree step)", TWELVE_FMAS SIX("vshufps $0x88,%%ymm13,%%ymm13,%%ymm12"));
  MEASURE("+ 6 vperm2f128 (cross-lane)", TWELVE_FMAS SIX("vperm2f128 $0x31,%%ymm13,%%ymm13,%%ymm12"));
  MEASURE("+ 6 vinsertf128 (cross-lane)", TWELVE_FMAS SIX("vinsertf128 $1,%%xmm13,%%ymm13,%%ymm12"));
  MEASURE("+ 6 vaddps", TWELVE_FMAS SIX("vaddps %%ymm13,%%ymm13,%%ymm12"));
  MEASURE("+ 6 vmovups m256 (plain load)", TWELVE_FMAS SIX("vmovups fma_mix_operand(%%rip),%%ymm12"));
  MEASURE("+ 6 vbroadcastss m32 (ymm)", TWELVE_FMAS SIX("vbroadcastss fma_mix_operand(%%rip),%%ymm12"));
  if (avx512) {
    base = 0; // the zmm rows against 12 zmm FMAs
    MEASURE("12 vfmadd231ps zmm", TWELVE_ZMM_FMAS);
    MEASURE("+ 6 vmovups m512 (plain load)",
            TWELVE_ZMM_FMAS SIX("vmovups fma_mix_operand(%%rip),%%zmm12"));
    MEASURE("+ 6 vbroadcastss m32 (zmm)",
            TWELVE_ZMM_FMAS SIX("vbroadcastss fma_mix_operand(%%rip),%%zmm12"));
    // What the transposed 16-bit logits issue per K column: the column widened from memory
    // (bf16 by vpmovzxwd + vpslld, f16 by vcvtph2ps), q broadcast inside the FMA.
    MEASURE("12 vfmadd231ps zmm, m32{1to16}", TWELVE_ZMM_BCAST_FMAS);
    MEASURE("+ 6 vpmovzxwd m256 (bf16 column)",
            TWELVE_ZMM_FMAS SIX("vpmovzxwd fma_mix_operand(%%rip),%%zmm12"));
    MEASURE("+ 6 vpslld zmm", TWELVE_ZMM_FMAS SIX("vpslld $16,%%zmm13,%%zmm12"));
    MEASURE("+ 6 vpshufb zmm", TWELVE_ZMM_FMAS SIX("vpshufb %%zmm13,%%zmm13,%%zmm12"));
    MEASURE("+ 6 vpandd zmm", TWELVE_ZMM_FMAS SIX("vpandd %%zmm13,%%zmm13,%%zmm12"));
    MEASURE("+ 6 vcvtph2ps m256 (f16 column)",
            TWELVE_ZMM_FMAS SIX("vcvtph2ps fma_mix_operand(%%rip),%%zmm12"));
  }
  return 0;
}
