// overlap: AMX products alone, vector work alone (mode 0: FMA chains, 1: exp-like work, 2: 1 plus
// tile loads), and both interleaved: do they overlap? gcc -O2 -march=native overlap.c -o ov && ./ov 8 1
#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <x86intrin.h>
typedef struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } __attribute__((packed)) tilecfg;
static const tilecfg C __attribute__((aligned(64))) = {1,0,{0},{64,64,64,64,64,64,64,64},{16,16,16,16,16,16,16,16}};
static uint16_t buf[4][512] __attribute__((aligned(64)));
static float sc[16*256] __attribute__((aligned(64)));
#define IT 2000
static __m512 acc[12];
static inline void vec(int k){ const __m512 b=_mm512_set1_ps(0.9999f), c=_mm512_set1_ps(1e-6f);
  for(int j=0;j<k;j++){ for(int i=0;i<12;i++) acc[i]=_mm512_fmadd_ps(acc[i],b,c); } __asm__ volatile(""::"v"(acc[0]),"v"(acc[5]),"v"(acc[11])); }
static inline void vexp(int k){ /* softmax-like: load, sub, reduce, 4 fma, scalef, store */
  const __m512 m=_mm512_set1_ps(3.0f);
  for(int j=0;j<k;j++){ float*s=sc+((j*16)&4095); __m512 x=_mm512_sub_ps(_mm512_load_ps(s),m); __m512 f=_mm512_reduce_ps(x,9);
    __m512 p=_mm512_fmadd_ps(f,f,m); p=_mm512_fmadd_ps(p,f,m); p=_mm512_fmadd_ps(p,f,m); p=_mm512_fmadd_ps(p,f,m); _mm512_store_ps(s,_mm512_scalef_ps(p,x)); } }
int main(int argc,char**argv){
  syscall(SYS_arch_prctl,0x1023,18); _tile_loadconfig(&C);
  memset(buf,0,sizeof buf); for(int i=0;i<12;i++)acc[i]=_mm512_set1_ps(i);
  _tile_loadd(4,buf[0],64);_tile_loadd(5,buf[1],64);_tile_loadd(6,buf[2],64);_tile_loadd(7,buf[3],64);
  int K=argc>1?atoi(argv[1]):4, mode=argc>2?atoi(argv[2]):0;
  for(int rep=0;rep<3;rep++){
  unsigned long long t0=__rdtsc();
  for(int i=0;i<IT;i++){ _tile_dpbf16ps(0,4,5);_tile_dpbf16ps(1,4,6);_tile_dpbf16ps(2,7,5);_tile_dpbf16ps(3,7,6); if(mode==2){_tile_loadd(4,buf[0],64);_tile_loadd(7,buf[3],64);} }
  unsigned long long t1=__rdtsc();
  for(int i=0;i<IT;i++){ if(mode) vexp(K); else vec(K); }
  unsigned long long t2=__rdtsc();
  for(int i=0;i<IT;i++){ _tile_dpbf16ps(0,4,5);_tile_dpbf16ps(1,4,6);_tile_dpbf16ps(2,7,5);_tile_dpbf16ps(3,7,6); if(mode==2){_tile_loadd(4,buf[0],64);_tile_loadd(7,buf[3],64);} if(mode) vexp(K); else vec(K); }
  unsigned long long t3=__rdtsc();
  printf("K=%d mode %d: tiles %.1f  vec %.1f  both %.1f cycles per 4 products\n",K,mode,(t1-t0)/(double)IT,(t2-t1)/(double)IT,(t3-t2)/(double)IT);}
  _tile_stored(0,sc,64);
}
