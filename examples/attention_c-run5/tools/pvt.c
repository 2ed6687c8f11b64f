#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <immintrin.h>
#include KERNEL
static double tnow(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static double probe(void){
  __m512 a[12]; for(int i=0;i<12;i++)a[i]=_mm512_set1_ps(i*0.001f);
  const __m512 b=_mm512_set1_ps(0.9999f), c=_mm512_set1_ps(1e-6f);
  long it=2000000; double t0=tnow();
  for(long k=0;k<it;k++){for(int i=0;i<12;i++)a[i]=_mm512_fmadd_ps(a[i],b,c); __asm__ volatile(""::"v"(a[0]),"v"(a[1]),"v"(a[2]),"v"(a[3]),"v"(a[4]),"v"(a[5]),"v"(a[6]),"v"(a[7]),"v"(a[8]),"v"(a[9]),"v"(a[10]),"v"(a[11]));}
  double t=tnow()-t0; return 2.0*16*12*it/t/1e9;}
int main(){
  int NK=atoi(getenv("NK")?getenv("NK"):"64"); int lds=NK+16;
  float*sb=aligned_alloc(64,6*lds*4),*v=aligned_alloc(64,NK*64*4),*acc=aligned_alloc(64,6*64*4),*o=aligned_alloc(64,6*64*4); float inv[6]={1,1,1,1,1,1};
  for(int i=0;i<6*lds;i++)sb[i]=0.001f*(i%7); for(int i=0;i<NK*64;i++)v[i]=0.01f*(i%5);
  long reps=2000000000L/(NK*6*64*2); double t0=tnow();
  for(long r=0;r<reps;r++) pvc512(sb,lds,v,NK,acc,0,0,inv,o,6);
  double t=tnow()-t0; double g=reps*(double)NK*6*64*2/t/1e9; double p=probe();
  printf("NK=%d pv %.1f GF/s probe %.1f  %.1f%%\n",NK,g,p,100*g/p);
}
