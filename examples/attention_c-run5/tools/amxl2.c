#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <x86intrin.h>
typedef struct { uint8_t palette, start_row, res[14]; uint16_t colsb[16]; uint8_t rows[16]; } __attribute__((packed)) cfg_t;
static const cfg_t C __attribute__((aligned(64))) = {1,0,{0},{64,64,64,64,64,64,64,64},{16,16,16,16,16,16,16,16}};
int main(int argc,char**argv){
  syscall(SYS_arch_prctl, 0x1023, 18); _tile_loadconfig(&C);
  for (int kb=4; kb<=1024; kb*=4) {
    int nt=kb; uint16_t *B=aligned_alloc(64,(size_t)nt*1024); memset(B,0,(size_t)nt*1024);
    _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);_tile_loadd(4,B,64);
    long it=400000/4; unsigned long long t0=__rdtsc();
    for(long i=0;i<it;i++){ int j=(int)((i*4)%nt);
      _tile_loadd(5,B+(size_t)j*512,64);_tile_dpbf16ps(0,4,5);_tile_loadd(6,B+(size_t)((j+1)%nt)*512,64);_tile_dpbf16ps(1,4,6);
      _tile_loadd(5,B+(size_t)((j+2)%nt)*512,64);_tile_dpbf16ps(2,4,5);_tile_loadd(6,B+(size_t)((j+3)%nt)*512,64);_tile_dpbf16ps(3,4,6);}
    unsigned long long t1=__rdtsc(); printf("B tiles cycling through %4d KiB: %.1f TSC/tdp\n",kb,(t1-t0)/(4.0*it));
    free(B);
  }
  _tile_release();
}
