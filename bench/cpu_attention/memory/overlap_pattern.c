// overlap_pattern.c: one thread streams two arrays (K and V) from DRAM in 4 KiB pieces with F
// 512-bit FMAs per 64-byte line, in the order of the dense CPU attention kernel on transposed K
// (docs/cpu-runs.md, "Each piece's logits with the previous piece's p.V"). Not part of the build:
// it needs AVX-512.
//
//   clang-22 -O2 -march=native bench/cpu_attention/memory/overlap_pattern.c -o /tmp/overlap_pattern
//   /tmp/overlap_pattern MODE F BUBBLE FAR [MIB] [REPS]     e.g. /tmp/overlap_pattern 1 8 200 8192
//
// MODE 0 (phased, the kernel before): a piece's K lines with their math, asking for the far
// piece's K line and this piece's V line into L2 per line; then BUBBLE FMAs without loads (the
// softmax); then the piece's V lines with their math. MODE 2: as 0, asking for the far piece's V
// instead of this one's. MODE 1 (overlapped): piece j's K lines and piece j-1's V lines in one
// loop, line by line, asking for the far K and V lines; then the bubble. FAR: the prefetch
// distance in bytes (0: none). MIB: size of each array (256; 1 keeps them in cache, the compute
// rate); REPS: passes over them. Prints GB/s of K+V read, best of 3.
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define PIECE 4096
#define LINES (PIECE/64)
static __m512 A[8];
#define MATH(x) do{ for(int f=0;f<F;f+=8){ \
  a0=_mm512_fmadd_ps(x,q,a0);a1=_mm512_fmadd_ps(x,q,a1);a2=_mm512_fmadd_ps(x,q,a2);a3=_mm512_fmadd_ps(x,q,a3); \
  if(f+4<F){a4=_mm512_fmadd_ps(x,q,a4);a5=_mm512_fmadd_ps(x,q,a5);a6=_mm512_fmadd_ps(x,q,a6);a7=_mm512_fmadd_ps(x,q,a7);} } }while(0)
int main(int argc,char**argv){
  int mode=atoi(argv[1]), F=atoi(argv[2]), B=atoi(argv[3]); size_t far=atol(argv[4]); size_t mib=argc>5?atol(argv[5]):256; int reps=argc>6?atoi(argv[6]):1;
  size_t n=mib<<20, al=2<<20;
  char*raw=mmap(NULL,2*n+2*al,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  madvise(raw,2*n+2*al,MADV_HUGEPAGE); memset(raw,1,2*n+2*al);
  char*k=(char*)(((size_t)raw+al-1)&~(al-1)), *v=k+n+al;
  double best=1e30; float sink=0; const __m512 q=_mm512_set1_ps(1.0001f);
  for(int r=0;r<3;++r){
    __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0,a4=a0,a5=a0,a6=a0,a7=a0;
    double t=now();
    for(int rp=0;rp<reps;++rp){
    size_t np=n/PIECE;
    if(mode!=1){
      for(size_t p=0;p<np;++p){
        const char*kp=k+p*PIECE,*vp=v+p*PIECE;
        for(int i=0;i<LINES;++i){
          if(far){ if((p*PIECE+far+i*64)<n) _mm_prefetch(kp+far+i*64,_MM_HINT_T1); if(mode==2){ if((p*PIECE+far+i*64)<n) _mm_prefetch(vp+far+i*64,_MM_HINT_T1);} else _mm_prefetch(vp+i*64,_MM_HINT_T1);}
          __m512 x=_mm512_load_ps((const float*)(kp+i*64)); MATH(x);
        }
        __m512 b0=a0,b1=a1,b2=a2,b3=a3;
        for(int i=0;i<B;i+=4){b0=_mm512_fmadd_ps(b0,q,q);b1=_mm512_fmadd_ps(b1,q,q);b2=_mm512_fmadd_ps(b2,q,q);b3=_mm512_fmadd_ps(b3,q,q);}
        a4=_mm512_add_ps(a4,_mm512_min_ps(_mm512_add_ps(b0,b1),_mm512_add_ps(b2,b3)));
        for(int i=0;i<LINES;++i){ __m512 x=_mm512_load_ps((const float*)(vp+i*64)); MATH(x); }
      }
    } else {
      // fused: step i reads K line i of piece p and V line i of piece p-1
      for(size_t p=0;p<=np;++p){
        const char*kp=k+p*PIECE,*vp=v+(p-1)*PIECE;
        for(int i=0;i<LINES;++i){
          // K FAR bytes ahead of the K read now; V as far ahead of the V read now (piece p-1).
          if(far){ if(p<np && (p*PIECE+far+i*64)<n) _mm_prefetch(kp+far+i*64,_MM_HINT_T1); if(p<np && (p*PIECE+far-PIECE+i*64)<n) _mm_prefetch(v+p*PIECE+far-PIECE+i*64,_MM_HINT_T1);}
          if(p<np){ __m512 x=_mm512_load_ps((const float*)(kp+i*64)); MATH(x);}
          if(p>0){ __m512 y=_mm512_load_ps((const float*)(vp+i*64)); MATH(y);}
        }
        __m512 b0=a0,b1=a1,b2=a2,b3=a3;
        for(int i=0;i<B;i+=4){b0=_mm512_fmadd_ps(b0,q,q);b1=_mm512_fmadd_ps(b1,q,q);b2=_mm512_fmadd_ps(b2,q,q);b3=_mm512_fmadd_ps(b3,q,q);}
        a4=_mm512_add_ps(a4,_mm512_min_ps(_mm512_add_ps(b0,b1),_mm512_add_ps(b2,b3)));
      }
    }
    }
    t=now()-t; if(t<best)best=t;
    sink+=_mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0,a1),_mm512_add_ps(a2,a3)),_mm512_add_ps(_mm512_add_ps(a4,a5),_mm512_add_ps(a6,a7))));
  }
  printf("mode=%s F=%d B=%d far=%zu mib=%zu: %.1f GB/s (%g)\n",mode==1?"fused":mode==2?"phasedfarV":"phased",F,B,far,mib,2.0*n*reps/best/1e9,sink);
}
