/* Operator screening tool (not part of the kernel): times attention() from kernel.c in a plain C loop.
 *   gcc -O3 -std=gnu11 -march=native -pthread -o drv drv.c kernel.c -lm && taskset -c 1 ./drv N HEADS CAUSAL REPS
 * MODE=0 rotates 8 input sets, 1 copies fresh inputs before each call (as the evaluator writes them),
 * 2 reuses one set, 3 copies and then touches 4 MiB, 4/5 busy-loops/sleeps between calls.
 * WALL=1 times wall clock (for AVO_THREADS=2), else the thread CPU clock. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <math.h>
void attention(const float *q, const float *k, const float *v, float *out, int heads, int n, int d, int causal);
static double now(void){struct timespec t;clock_gettime(getenv("WALL")?CLOCK_MONOTONIC:getenv("PROC")?CLOCK_PROCESS_CPUTIME_ID:CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+1e-9*t.tv_nsec;}
int main(int argc,char**argv){ int mode=getenv("MODE")?atoi(getenv("MODE")):0; float *Q,*K,*V,*O;
  int n=atoi(argv[1]), h=atoi(argv[2]), c=atoi(argv[3]), reps=atoi(argv[4]);
  int NB=8; size_t sz=(size_t)h*n*64;
  float *b[8][4];
  for(int i=0;i<NB;i++)for(int j=0;j<4;j++){b[i][j]=aligned_alloc(64,sz*4);for(size_t x=0;x<sz;x++)b[i][j][x]=(rand()/(float)RAND_MAX-0.5f)*3;}
  Q=aligned_alloc(64,sz*4);K=aligned_alloc(64,sz*4);V=aligned_alloc(64,sz*4);O=aligned_alloc(64,sz*4);
  double best=1e9, tot=0;
  for(int r=0;r<reps;r++){int i=r%NB; double t0; static float *pol; if(!pol){pol=aligned_alloc(64,4<<20);} if(mode==4||mode==5){ volatile long z=0; if(mode==4) for(long x=0;x<3000000;x++) z+=x; else {struct timespec ts={0,2000000}; nanosleep(&ts,0);} t0=now();attention(b[0][0],b[0][1],b[0][2],b[0][3],h,n,64,c);} else if(mode==3){memcpy(Q,b[i][0],sz*4);memcpy(K,b[i][1],sz*4);memcpy(V,b[i][2],sz*4);for(size_t x=0;x<sz;x++)O[x]=NAN; for(size_t x=0;x<(1u<<20);x+=16)pol[x]+=1.0f; t0=now();attention(Q,K,V,O,h,n,64,c);} else if(mode==1){memcpy(Q,b[i][0],sz*4);memcpy(K,b[i][1],sz*4);memcpy(V,b[i][2],sz*4);for(size_t x=0;x<sz;x++)O[x]=NAN; t0=now();attention(Q,K,V,O,h,n,64,c);} else if(mode==2){t0=now();attention(b[0][0],b[0][1],b[0][2],b[0][3],h,n,64,c);} else {t0=now();attention(b[i][0],b[i][1],b[i][2],b[i][3],h,n,64,c);}double t=now()-t0;tot+=t;if(t<best)best=t;}
  double fl=4.0*n*n*64*h*(c?0.5:1);
  printf("n=%d h=%d c=%d best %.3f ms (%.1f GF/s) mean %.3f ms (%.1f GF/s)\n",n,h,c,best*1e3,fl/best/1e9,tot/reps*1e3,fl/(tot/reps)/1e9);
}
