// cold: one config, fresh inputs written before every call (as the evaluator does), and optionally
// (mode bits) 1: inputs in a memfd mapping, 2: 16 MiB touched before the call, 4: ~1 ms of 512-bit FMAs
// before the call, 8: inputs read back into cache, 16: a tiny call first. Mode 6 reproduced the
// evaluator's kernel times. Prints min / p10 / median of 100 calls (TSC at 2.6 GHz).
// gcc -O2 -march=native cold.c -o cold -ldl && ./cold ./k.so 256 8 1 6      (n heads causal mode)
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>
#include <immintrin.h>
#include <x86intrin.h>
typedef void (*fn)(const float*,const float*,const float*,float*,int,int,int,int);
static int cmp(const void*a,const void*b){unsigned long long x=*(unsigned long long*)a,y=*(unsigned long long*)b;return x<y?-1:x>y;}
static void fma_burst(long it){ __m512 a[12]; for(int i=0;i<12;i++)a[i]=_mm512_set1_ps(i*0.001f);
  const __m512 b=_mm512_set1_ps(0.9999f), c=_mm512_set1_ps(1e-6f);
  for(long k=0;k<it;k++){for(int i=0;i<12;i++)a[i]=_mm512_fmadd_ps(a[i],b,c); __asm__ volatile(""::"v"(a[0]),"v"(a[1]),"v"(a[2]),"v"(a[3]),"v"(a[4]),"v"(a[5]),"v"(a[6]),"v"(a[7]),"v"(a[8]),"v"(a[9]),"v"(a[10]),"v"(a[11]));}}
int main(int argc,char**argv){
  fn A=(fn)dlsym(dlopen(argv[1],RTLD_NOW),"attention");
  int n=atoi(argv[2]),H=atoi(argv[3]),c=atoi(argv[4]),mode=atoi(argv[5]),R=100; size_t sz=(size_t)H*n*64;
  float *base;
  if(mode&1){ int fd=memfd_create("x",0); ftruncate(fd,sz*16); base=mmap(0,sz*16,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);} else base=aligned_alloc(4096,sz*16);
  float*q=base,*k=base+sz,*v=base+2*sz,*o=base+3*sz; float*big=malloc(16<<20);
  unsigned long long t[100];
  for(int r=0;r<R;r++){
    for(size_t i=0;i<sz;i++){q[i]=(r+i%97)*1e-3f-.05f;k[i]=(i%89)*1e-3f-.04f;v[i]=(i%83)*1e-3f;} /* fresh inputs, written here */
    for(size_t i=0;i<sz;i++)o[i]=__builtin_nanf("");
    if(mode&2) for(int i=0;i<(16<<20)/4;i+=16)big[i]+=1;  /* evict */
    if(mode&4) fma_burst(200000);
    if(mode&8){ volatile float s=0; for(size_t i=0;i<4*sz;i+=16) s+=q[i]; }  /* inputs back into cache */
    if(mode&16) A(q,k,v,o,1,64,64,c); /* a tiny call: scratch, code, tiles warm */
    unsigned long long t0=__rdtsc(); A(q,k,v,o,H,n,64,c); t[r]=__rdtsc()-t0;}
  qsort(t,R,8,cmp);
  printf("mode %d n%d c%d: min %.1f p10 %.1f median %.1f us\n",mode,n,c,t[0]/2600.0,t[R/10]/2600.0,t[R/2]/2600.0);
}
