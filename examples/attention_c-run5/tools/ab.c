// ab: dlopen two kernel .so files, alternate calls per config (fresh-ish inputs), report median time ratio A/B and each's fraction of an interleaved FMA probe.
#include <stdio.h>
#include <stdlib.h>
#include <dlfcn.h>
#include <math.h>
#include <time.h>
#include <immintrin.h>
typedef void (*fn)(const float*,const float*,const float*,float*,int,int,int,int);
static int wall_; static double tnow(void){struct timespec t;clock_gettime(wall_?CLOCK_MONOTONIC:CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static double probe(long it){
  __m512 a[12]; for(int i=0;i<12;i++)a[i]=_mm512_set1_ps(i*0.001f);
  const __m512 b=_mm512_set1_ps(0.9999f), c=_mm512_set1_ps(1e-6f);
  double t0=tnow();
  for(long k=0;k<it;k++){for(int i=0;i<12;i++)a[i]=_mm512_fmadd_ps(a[i],b,c); __asm__ volatile(""::"v"(a[0]),"v"(a[1]),"v"(a[2]),"v"(a[3]),"v"(a[4]),"v"(a[5]),"v"(a[6]),"v"(a[7]),"v"(a[8]),"v"(a[9]),"v"(a[10]),"v"(a[11]));}
  double t=tnow()-t0; return 2.0*16*12*it/t/1e9;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
static double med(double*x,int n){qsort(x,n,sizeof(double),cmp);return x[n/2];}
int main(int argc,char**argv){
  fn A=(fn)dlsym(dlopen(argv[1],RTLD_NOW|RTLD_LOCAL),"attention"), B=(fn)dlsym(dlopen(argv[2],RTLD_NOW|RTLD_LOCAL),"attention");
  int R=argc>3?atoi(argv[3]):30; wall_=getenv("WALL")!=0;
  int ns[4]={256,512,1024,2048}, hs[4]={8,4,2,1};
  double lr=0,la=0,lb=0,mina=9,minb=9;
  for(int ci=0;ci<4;ci++) for(int causal=0;causal<2;causal++){
    int n=ns[ci],h=hs[ci]; size_t sz=(size_t)h*n*64;
    float*in[4][3]; for(int s=0;s<4;s++)for(int m=0;m<3;m++){in[s][m]=aligned_alloc(64,sz*4); for(size_t i=0;i<sz;i++)in[s][m][i]=rand()/(float)RAND_MAX-0.5f;}
    float*o=aligned_alloc(64,sz*4), *big=malloc(8<<20);
    double ta[200],tb[200],rat[200],pr[200];
    for(int r=0;r<R;r++){
      int s=r%4; if(!getenv("HOT"))for(int i=0;i<(8<<20)/4;i+=16)big[i]+=1; // evict-ish (touch 8 MiB)
      double t0=tnow(); if(r&1)B(in[s][0],in[s][1],in[s][2],o,h,n,64,causal); else A(in[s][0],in[s][1],in[s][2],o,h,n,64,causal); double t1=tnow();
      s=(r+1)%4; if(!getenv("HOT"))for(int i=0;i<(8<<20)/4;i+=16)big[i]+=1;
      double t2=tnow(); if(r&1)A(in[s][0],in[s][1],in[s][2],o,h,n,64,causal); else B(in[s][0],in[s][1],in[s][2],o,h,n,64,causal); double t3=tnow();
      double a_=(r&1)?t3-t2:t1-t0, b_=(r&1)?t1-t0:t3-t2; ta[r]=a_;tb[r]=b_;rat[r]=a_/b_; probe(20000); pr[r]=probe(100000);
    }
    double fl=4.0*h*(causal? n*(n+1)/2.0 : (double)n*n)*64, p=med(pr,R);
    double fa=fl/med(ta,R)/1e9/p, fb=fl/med(tb,R)/1e9/p, rr=med(rat,R);
    double sa=med(ta,R)/ta[R/10], sb_=med(tb,R)/tb[R/10];
    printf("n%d%s  A %5.1f%%  B %5.1f%%  tA/tB %.3f  probe %.0f  swing A %.2f B %.2f\n",n,causal?"c":"n",100*fa,100*fb,rr,p,sa,sb_);
    lr+=log(rr);la+=log(fa);lb+=log(fb); if(fa<mina)mina=fa; if(fb<minb)minb=fb;
    for(int s=0;s<4;s++)for(int m=0;m<3;m++)free(in[s][m]); free(o); free(big);
  }
  printf("gm: A %.1f%% (min %.1f)  B %.1f%% (min %.1f)  tA/tB %.3f\n",100*exp(la/8),100*mina,100*exp(lb/8),100*minb,exp(lr/8));
}
