#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <time.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
typedef struct { uint8_t palette, start_row, res[14]; uint16_t colsb[16]; uint8_t rows[16]; } __attribute__((packed)) cfg_t;
static double tnow(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){
  long r = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
  printf("arch_prctl -> %ld\n", r);
  cfg_t c; memset(&c,0,sizeof c); c.palette=1;
  for(int i=0;i<8;i++){c.rows[i]=16;c.colsb[i]=64;}
  _tile_loadconfig(&c);
  static uint16_t A[16*32] __attribute__((aligned(64))), B[16*32] __attribute__((aligned(64))); static float C[16*16] __attribute__((aligned(64)));
  for(int i=0;i<16*32;i++){A[i]=0x3f80; B[i]=0x3f80;} // 1.0 bf16
  _tile_zero(0); _tile_loadd(1,A,64); _tile_loadd(2,B,64);
  _tile_dpbf16ps(0,1,2); _tile_stored(0,C,64);
  printf("C[0]=%f (expect 32)\n",C[0]);
  long it=2000000; _tile_zero(3); _tile_zero(4);_tile_zero(5);_tile_zero(0);
  _tile_loadd(6,B,64);
  double t0=tnow();
  for(long i=0;i<it;i++){_tile_dpbf16ps(0,1,2);_tile_dpbf16ps(3,1,6);_tile_dpbf16ps(4,1,2);_tile_dpbf16ps(5,1,6);}
  double t=tnow()-t0; printf("AMX bf16: %.0f GFLOP/s\n", 4.0*it*16*16*32*2/t/1e9);
  _tile_release();
}
