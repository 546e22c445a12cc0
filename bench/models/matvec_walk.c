// matvec_walk.c: a hand-written bf16 matrix-vector product (y[R] = W[R,C] x[C], f32 x and y), the
// shape of decode's matmuls, to measure how the weights' memory and the loop's walk set its DRAM
// rate apart from the compiler (docs/models.md, "Weight memory"). Not part of the build (AVX-512):
//
//   clang-22 -O3 -march=native bench/models/matvec_walk.c -o /tmp/matvec_walk
//   /tmp/matvec_walk C PF [LOC [MODE]]
//
// C: the row length (columns); the matrix is 256 MiB. PF: software prefetch distance in bytes (0:
// none), LOC 2: into L2 (prefetcht1), 3: L1, else L3. MODE 0: 4 rows side by side (4 streams),
// 1: one row after the other, 2 accumulators; 2: the same with 4 (the emitter's decode loop);
// 3: 4096-column panels; 4: as 1 with EXTRA=n (environment) dependent FMA chains per 32 weights;
// 5: SIDE=n (environment: 1, 2, 4, 8 or 16, default 8) rows side by side, one accumulator each, x loaded once
// per 16 columns for all of them (the emitter's decode loop where x is wider than 4096 f32).
// Environment: FILE=path (read the weights through a read-only mapping of that file; POP=1
// touches it first), NOHUGE=1 (anonymous memory without MADV_HUGEPAGE), REUSE=bytes (the same
// REUSE bytes again and again: the cache-resident compute rate). Prints the best of 5 passes
// against a plain read of 1 GiB measured between them.
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <fcntl.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void*big(size_t n){void*p=mmap(0,n,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);if(!getenv("NOHUGE"))madvise(p,n,MADV_HUGEPAGE);else madvise(p,n,MADV_NOHUGEPAGE);memset(p,1,n);return p;}
static long PF=0; static int LOC=2, MODE=0;
static inline __m512 ld(const uint16_t*p){return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)),16));}
static float hsum(__m512 v){return _mm512_reduce_add_ps(v);}
static void mv(const uint16_t*W,const float*x,float*y,long R,long C){
  long blockBytes=4*C*2;
  for(long r=0;r<R;r+=4){
    const uint16_t*w0=W+r*C,*w1=w0+C,*w2=w1+C,*w3=w2+C;
    const char*pf=(const char*)w0+PF;
    __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0;
    for(long k=0;k<C;k+=16){
      if(PF){ // 4 rows x 32 bytes = 128 bytes per step = 2 lines
        const char*p=pf+(k/16)*128;
        if(LOC==2){_mm_prefetch(p,_MM_HINT_T1);_mm_prefetch(p+64,_MM_HINT_T1);}
        else if(LOC==3){_mm_prefetch(p,_MM_HINT_T0);_mm_prefetch(p+64,_MM_HINT_T0);}
        else {_mm_prefetch(p,_MM_HINT_T2);_mm_prefetch(p+64,_MM_HINT_T2);}
      }
      __m512 xv=_mm512_loadu_ps(x+k);
      a0=_mm512_fmadd_ps(ld(w0+k),xv,a0);a1=_mm512_fmadd_ps(ld(w1+k),xv,a1);
      a2=_mm512_fmadd_ps(ld(w2+k),xv,a2);a3=_mm512_fmadd_ps(ld(w3+k),xv,a3);
    }
    y[r]=hsum(a0);y[r+1]=hsum(a1);y[r+2]=hsum(a2);y[r+3]=hsum(a3);
  }
  (void)blockBytes;
}
static void mv1(const uint16_t*W,const float*x,float*y,long R,long C){ // row at a time, 4 accumulators over k
  for(long r=0;r<R;r++){const uint16_t*w=W+r*C;__m512 a0=_mm512_setzero_ps(),a1=a0;
    for(long k=0;k<C;k+=32){ if(PF){_mm_prefetch((const char*)w+PF+k*2,_MM_HINT_T1);}
      a0=_mm512_fmadd_ps(ld(w+k),_mm512_loadu_ps(x+k),a0);a1=_mm512_fmadd_ps(ld(w+k+16),_mm512_loadu_ps(x+k+16),a1);}
    y[r]=hsum(_mm512_add_ps(a0,a1));}
}
static void mv2(const uint16_t*W,const float*x,float*y,long R,long C){ // row at a time, 4 accumulators
  for(long r=0;r<R;r++){const uint16_t*w=W+r*C;__m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0;long k=0;
    for(;k+64<=C;k+=64){ if(PF){_mm_prefetch((const char*)w+PF+k*2,_MM_HINT_T1);_mm_prefetch((const char*)w+PF+k*2+64,_MM_HINT_T1);}
      a0=_mm512_fmadd_ps(ld(w+k),_mm512_loadu_ps(x+k),a0);a1=_mm512_fmadd_ps(ld(w+k+16),_mm512_loadu_ps(x+k+16),a1);
      a2=_mm512_fmadd_ps(ld(w+k+32),_mm512_loadu_ps(x+k+32),a2);a3=_mm512_fmadd_ps(ld(w+k+48),_mm512_loadu_ps(x+k+48),a3);}
    for(;k<C;k+=16)a0=_mm512_fmadd_ps(ld(w+k),_mm512_loadu_ps(x+k),a0);
    y[r]=hsum(_mm512_add_ps(_mm512_add_ps(a0,a1),_mm512_add_ps(a2,a3)));}
}
static void mv3(const uint16_t*W,const float*x,float*y,long R,long C){ // k panels of 4096 cols, row at a time
  long P=4096; for(long r=0;r<R;r++)y[r]=0;
  for(long p0=0;p0<C;p0+=P){long p1=p0+P<C?p0+P:C;
  for(long r=0;r<R;r++){const uint16_t*w=W+r*C;__m512 a0=_mm512_setzero_ps(),a1=a0;
    for(long k=p0;k<p1;k+=32){
      a0=_mm512_fmadd_ps(ld(w+k),_mm512_loadu_ps(x+k),a0);a1=_mm512_fmadd_ps(ld(w+k+16),_mm512_loadu_ps(x+k+16),a1);}
    y[r]+=hsum(_mm512_add_ps(a0,a1));}}
}
static int EXTRA=0;
static void mv4(const uint16_t*W,const float*x,float*y,long R,long C){ // row at a time, EXTRA more FMAs per 16 weights
  for(long r=0;r<R;r++){const uint16_t*w=W+r*C;__m512 a0=_mm512_setzero_ps(),a1=a0,b0=a0,b1=a0,b2=a0,b3=a0;
    for(long k=0;k<C;k+=32){ if(PF){if(LOC==2)_mm_prefetch((const char*)w+PF+k*2,_MM_HINT_T1);else _mm_prefetch((const char*)w+PF+k*2,_MM_HINT_T0);}
      __m512 w0=ld(w+k),w1=ld(w+k+16),x0=_mm512_loadu_ps(x+k),x1=_mm512_loadu_ps(x+k+16);
      a0=_mm512_fmadd_ps(w0,x0,a0);a1=_mm512_fmadd_ps(w1,x1,a1);
      for(int e=0;e<EXTRA;e++){b0=_mm512_fmadd_ps(w0,x1,b0);b1=_mm512_fmadd_ps(w1,x0,b1);b2=_mm512_fmadd_ps(w0,b1,b2);b3=_mm512_fmadd_ps(w1,b0,b3);}
    }
    y[r]=hsum(_mm512_add_ps(_mm512_add_ps(a0,a1),_mm512_add_ps(_mm512_add_ps(b0,b1),_mm512_add_ps(b2,b3))));}
}
static int SIDE=8;
static void mv5(const uint16_t*W,const float*x,float*y,long R,long C){ // SIDE rows side by side
  for(long r=0;r<R;r+=SIDE){__m512 a[16];for(int i=0;i<SIDE;i++)a[i]=_mm512_setzero_ps();
    for(long k=0;k<C;k+=16){__m512 xv=_mm512_loadu_ps(x+k);
      for(int i=0;i<SIDE;i++)a[i]=_mm512_fmadd_ps(ld(W+(r+i)*C+k),xv,a[i]);}
    for(int i=0;i<SIDE;i++)y[r+i]=hsum(a[i]);}
}
static double roof(const char*p,size_t n){double t=now();__m512i s=_mm512_setzero_si512();for(size_t i=0;i<n;i+=256){s=_mm512_add_epi64(s,_mm512_load_si512(p+i));s=_mm512_add_epi64(s,_mm512_load_si512(p+i+64));s=_mm512_add_epi64(s,_mm512_load_si512(p+i+128));s=_mm512_add_epi64(s,_mm512_load_si512(p+i+192));}
 volatile long z=_mm512_reduce_add_epi64(s);(void)z;return n/(now()-t)/1e9;}
int main(int argc,char**argv){long C=atol(argv[1]);PF=atol(argv[2]);LOC=argc>3?atoi(argv[3]):2;MODE=argc>4?atoi(argv[4]):0;EXTRA=getenv("EXTRA")?atoi(getenv("EXTRA")):0;
  if(getenv("SIDE")){SIDE=atoi(getenv("SIDE"));if(SIDE<1||SIDE>16||(SIDE&(SIDE-1))){fprintf(stderr,"SIDE must be 1, 2, 4, 8 or 16\n");return 2;}}
  size_t bytes=256ul<<20;long R=bytes/(C*2)/16*16;if(getenv("REUSE")){R=atol(getenv("REUSE"))/(C*2)/16*16;}uint16_t*W;
  if(getenv("FILE")){int fd=open(getenv("FILE"),O_RDONLY);W=mmap(0,R*C*2,PROT_READ,MAP_SHARED,fd,0);if(getenv("POP")){volatile long s=0;for(size_t i=0;i<R*C*2;i+=4096)s+=((char*)W)[i];}}
  else W=big(R*C*2);float*x=malloc(C*4),*y=malloc(R*4);for(long i=0;i<C;i++)x[i]=1;
  char*rb=big(1ul<<30);double best=0,rbest=0;
  for(int it=0;it<5;it++){double t=now();int reps=getenv("REUSE")?(int)(bytes/(R*C*2)):1;for(int rp=0;rp<reps;rp++)if(MODE==5)mv5(W,x,y,R,C);else if(MODE==4)mv4(W,x,y,R,C);else if(MODE==3)mv3(W,x,y,R,C);else if(MODE==2)mv2(W,x,y,R,C);else if(MODE)mv1(W,x,y,R,C);else mv(W,x,y,R,C);double g=(double)reps*R*C*2/(now()-t)/1e9;if(g>best)best=g;double rr=roof(rb,1ul<<30);if(rr>rbest)rbest=rr;}
  double cs=0;for(long i=0;i<R;i++)cs+=y[i];printf("cs=%g ",cs);printf("C=%ld PF=%ld LOC=%d mode=%d: %.1f GB/s roof %.1f ratio %.2f\n",C,PF,LOC,MODE,best,rbest,best/rbest);}
