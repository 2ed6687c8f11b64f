#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include KERNEL
static double tnow(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static double probe(long it){
  __m512 a[12]; for(int i=0;i<12;i++)a[i]=_mm512_set1_ps(i*0.001f);
  const __m512 b=_mm512_set1_ps(0.9999f), c=_mm512_set1_ps(1e-6f);
  double t0=tnow();
  for(long k=0;k<it;k++){for(int i=0;i<12;i++)a[i]=_mm512_fmadd_ps(a[i],b,c); __asm__ volatile(""::"v"(a[0]),"v"(a[1]),"v"(a[2]),"v"(a[3]),"v"(a[4]),"v"(a[5]),"v"(a[6]),"v"(a[7]),"v"(a[8]),"v"(a[9]),"v"(a[10]),"v"(a[11]));}
  double t=tnow()-t0; return 2.0*16*12*it/t/1e9;}
int main(){
  int NK=atoi(getenv("NK")?getenv("NK"):"256"); int lds=NK+16;
  float*sb=aligned_alloc(64,6*lds*4),*kp=aligned_alloc(64,NK*64*4),*q=aligned_alloc(64,6*64*4);
  for(int i=0;i<NK*64;i++)kp[i]=0.01f*(i%5-2); for(int i=0;i<6*64;i++)q[i]=0.01f*(i%3);
  int len[6]={NK,NK,NK,NK,NK,NK}; float nb[6]={-5,-5,-5,-5,-5,-5}; __m512 sum[6];
  long reps=3000000000L/(NK*6*64*2); double t0=tnow();
  for(long r=0;r<reps;r++){ for(int j=0;j<NK;j+=64) tilex512(q,kp+(size_t)j*64,sb,lds,j,NK,len,nb,sum,4); __asm__ volatile(""::"r"(sb):"memory");}
  double t=tnow()-t0; double g=reps*(double)NK*6*64*2/t/1e9; probe(100000); double p=probe(2000000);
  printf("NK=%d tile+exp %.1f GF/s probe %.1f  %.1f%%\n",NK,g,p,100*g/p);
}
