// overlap_softmax: the kernel's own softmax (mode 0) or q split (mode 1), `rows` rows per 16 products,
// against products alone and the vector work alone. Includes a kernel file as kp.c:
// cp kernel.c kp.c && gcc -O3 -march=native -pthread overlap_softmax.c -o ov2 -lm && ./ov2 1
#include "kp.c"
#include <stdio.h>
#include <x86intrin.h>
static uint16_t buf[4][512] __attribute__((aligned(64)));
int main(int argc,char**argv){
  int npad=256, rows=atoi(argv[1]), mode=argc>2?atoi(argv[2]):0; /* rows of softmax per 4 products */
  amx_enable(); amx_config();
  float *sb=aligned_alloc(64,16*npad*4), *sb2=aligned_alloc(64,16*npad*4), inv[16];
  ablock k=amx_blk(15,256,0); /* full rows of 256 keys */
  uint16_t *qa=aligned_alloc(64,16*3*64*2); float*q=aligned_alloc(64,256*64*4); for(int i=0;i<256*64;i++)q[i]=i*1e-4f;
  _tile_loadd(4,buf[0],64);_tile_loadd(5,buf[1],64);_tile_loadd(6,buf[2],64);_tile_loadd(7,buf[3],64);
  for(int rep=0;rep<3;rep++){
    unsigned long long T=0,V=0,B=0,t0;
    for(int it=0;it<50;it++){
      for(int r=0;r<16;r++)for(int j=0;j<npad;j++)sb[r*npad+j]=0.01f*j+r;
      t0=__rdtsc(); for(int i=0;i<16/rows;i++){ for(int z=0;z<4;z++){_tile_dpbf16ps(0,4,5);_tile_dpbf16ps(1,4,6);_tile_dpbf16ps(2,7,5);_tile_dpbf16ps(3,7,6);} } _tile_stored(0,sb2,64); T+=__rdtsc()-t0;
      t0=__rdtsc(); if(mode==0) amx_softmax(k,0,npad,0,16,sb,inv); else amx_qsplit(q,k,0,16,qa); V+=__rdtsc()-t0;
      for(int r=0;r<16;r++)for(int j=0;j<npad;j++)sb[r*npad+j]=0.01f*j+r;
      t0=__rdtsc(); for(int i=0;i<16/rows;i++){ for(int z=0;z<4;z++){_tile_dpbf16ps(0,4,5);_tile_dpbf16ps(1,4,6);_tile_dpbf16ps(2,7,5);_tile_dpbf16ps(3,7,6);} if(mode==0) amx_softmax(k,0,npad,i*rows,i*rows+rows,sb,inv); else amx_qsplit(q,k,i*rows,i*rows+rows,qa);} _tile_stored(0,sb2,64); B+=__rdtsc()-t0;
    }
    printf("%s rows/16 products %d: tiles %llu vec %llu both %llu\n",mode?"qsplit":"softmax",rows,T/50,V/50,B/50);
  }
}
