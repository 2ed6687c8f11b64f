#define _GNU_SOURCE
/* Operator check: FMA peak of one vCPU alone and of both at once (12 chains of zmm FMAs, 0.3 s). */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
#include <pthread.h>
#define _GNU_SOURCE
#include <sched.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static double res[2];
static void *run(void *a){ int cpu=(int)(long)a; cpu_set_t s; CPU_ZERO(&s); CPU_SET(cpu,&s); sched_setaffinity(0,sizeof s,&s);
  __m512 x[12]; for(int i=0;i<12;i++) x[i]=_mm512_set1_ps(1.0f+i*1e-3f); const __m512 m=_mm512_set1_ps(0.9999999f), ad=_mm512_set1_ps(1e-7f);
  double t0=now(); long it=0; while(now()-t0<0.3){ for(int r=0;r<1000;r++){ for(int i=0;i<12;i++) x[i]=_mm512_fmadd_ps(x[i],m,ad);} it+=1000; }
  double t=now()-t0; float s2=0; for(int i=0;i<12;i++) s2+=_mm512_reduce_add_ps(x[i]); res[cpu]=it*12*32.0/t/1e9+s2*0; return 0;}
int main(){ pthread_t a,b; pthread_create(&a,0,run,(void*)0L); pthread_join(a,0); printf("cpu0 alone %.0f GF/s\n",res[0]);
  pthread_create(&a,0,run,(void*)1L); pthread_join(a,0); printf("cpu1 alone %.0f GF/s\n",res[1]);
  pthread_create(&a,0,run,(void*)0L); pthread_create(&b,0,run,(void*)1L); pthread_join(a,0); pthread_join(b,0); printf("together %.0f + %.0f GF/s\n",res[0],res[1]); }
