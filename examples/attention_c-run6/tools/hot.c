// drv: best of 200 calls of one config, same inputs every call (hot caches), in TSC cycles.
// If the .so exports prof_pack/prof_soft/prof_qs/prof_scores (rdtsc sums, see
// kernels/knp-no-pipeline.diff), prints their share of the best call too.
// gcc -O2 drv.c -o drv -ldl && ./drv ./k.so 256 8 1   (n, heads, causal)
#include <stdio.h>
#include <stdlib.h>
#include <dlfcn.h>
#include <x86intrin.h>
typedef void (*fn)(const float*,const float*,const float*,float*,int,int,int,int);
int main(int argc,char**argv){
  if(argc<5){fprintf(stderr,"usage: drv K.so N HEADS CAUSAL\n");return 2;}
  void*h=dlopen(argv[1],RTLD_NOW); if(!h){fprintf(stderr,"%s\n",dlerror());return 1;}
  fn A=(fn)dlsym(h,"attention");
  const char*names[4]={"prof_pack","prof_soft","prof_qs","prof_scores"}; unsigned long long*pc[4],at[4]={0};
  for(int i=0;i<4;i++)pc[i]=dlsym(h,names[i]);
  int n=atoi(argv[2]),H=atoi(argv[3]),c=atoi(argv[4]),R=200; size_t sz=(size_t)H*n*64;
  float*q=aligned_alloc(64,sz*4),*k=aligned_alloc(64,sz*4),*v=aligned_alloc(64,sz*4),*o=aligned_alloc(64,sz*4);
  for(size_t i=0;i<sz;i++){q[i]=rand()/(float)RAND_MAX-.5f;k[i]=rand()/(float)RAND_MAX-.5f;v[i]=rand()/(float)RAND_MAX-.5f;}
  unsigned long long best=~0ull;
  for(int r=0;r<R;r++){
    for(int i=0;i<4;i++)if(pc[i])*pc[i]=0;
    unsigned long long t0=__rdtsc(); A(q,k,v,o,H,n,64,c); unsigned long long t=__rdtsc()-t0;
    if(t<best){best=t;for(int i=0;i<4;i++)at[i]=pc[i]?*pc[i]:0;}
  }
  printf("n%d heads %d causal %d: best %llu cycles, per head %llu",n,H,c,best,best/H);
  for(int i=0;i<4;i++)if(pc[i])printf(", %s %.1f%%",names[i]+5,100.0*at[i]/best);
  printf("\n");
}
