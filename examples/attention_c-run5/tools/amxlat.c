#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <x86intrin.h>
typedef struct { uint8_t palette, start_row, res[14]; uint16_t colsb[16]; uint8_t rows[16]; } __attribute__((packed)) cfg_t;
static uint16_t B[8][512] __attribute__((aligned(64)));
int main(){
  syscall(SYS_arch_prctl, 0x1023, 18);
  cfg_t c; memset(&c,0,sizeof c); c.palette=1; for(int i=0;i<8;i++){c.rows[i]=16;c.colsb[i]=64;} _tile_loadconfig(&c);
  _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);_tile_loadd(4,B[0],64);_tile_loadd(5,B[1],64);_tile_loadd(6,B[1],64);
  long it=200000; unsigned long long t0=__rdtsc();
  for(long i=0;i<it;i++){_tile_dpbf16ps(0,4,5);_tile_dpbf16ps(0,4,6);}
  unsigned long long t1=__rdtsc(); printf("1 acc chain: %.1f TSC cycles/tdp\n",(t1-t0)/(2.0*it));
  t0=__rdtsc(); for(long i=0;i<it;i++){_tile_dpbf16ps(0,4,5);_tile_dpbf16ps(1,4,6);} t1=__rdtsc(); printf("2 acc: %.1f\n",(t1-t0)/(2.0*it));
  t0=__rdtsc(); for(long i=0;i<it;i++){_tile_dpbf16ps(0,4,5);_tile_dpbf16ps(1,4,6);_tile_dpbf16ps(2,4,5);_tile_dpbf16ps(3,4,6);} t1=__rdtsc(); printf("4 acc: %.1f\n",(t1-t0)/(4.0*it));
  t0=__rdtsc(); for(long i=0;i<it;i++){_tile_loadd(5,B[i&7],64);_tile_dpbf16ps(0,4,5);_tile_loadd(6,B[(i+1)&7],64);_tile_dpbf16ps(1,4,6);_tile_loadd(5,B[(i+2)&7],64);_tile_dpbf16ps(2,4,5);_tile_loadd(6,B[(i+3)&7],64);_tile_dpbf16ps(3,4,6);} t1=__rdtsc(); printf("4 acc + B loads (L1): %.1f\n",(t1-t0)/(4.0*it));
  float S[16*16] __attribute__((aligned(64)));
  t0=__rdtsc(); for(long i=0;i<it;i++){_tile_dpbf16ps(0,4,5); _tile_stored(0,S,64); _tile_zero(0);} t1=__rdtsc(); printf("tdp+store+zero chain: %.1f\n",(t1-t0)/(1.0*it));
  _tile_release();
}
