// packbench: amx_pack of one 256-key head, best of 500 (TSC cycles).
// gcc -O3 -march=native -pthread -DKFILE='"kernel.c"' packbench.c -o pb -lm && ./pb
#include KFILE
#include <stdio.h>
#include <x86intrin.h>
int main(void){
  int n=256, npad=256; float *k=aligned_alloc(64,n*64*4),*v=aligned_alloc(64,n*64*4);
  for(int i=0;i<n*64;i++){k[i]=rand()/(float)RAND_MAX-.5f;v[i]=rand()/(float)RAND_MAX-.5f;}
  amxbuf w={0}; amx_ensure(&w,npad); unsigned long long best=~0ull;
  for(int it=0;it<500;it++){ unsigned long long t0=__rdtsc(); amx_pack(k,v,n,npad,&w); unsigned long long t=__rdtsc()-t0; if(t<best)best=t; }
  printf("%s pack 256 keys: %llu cycles\n",KFILE,best);
}
