/*
 * kernel.c -- attention_c candidate.
 *
 *   void attention(const float *q, const float *k, const float *v, float *out,
 *                  int heads, int n, int d, int causal);
 *
 * q, k, v, out: row-major float32 [heads][n][d]; out[h][i] = softmax(q_i K^T/sqrt(d)) V,
 * keys j > i masked when causal != 0. See git log for the lineage.
 *
 * Structure (v1): per head, K is packed transposed (kt[c][j]) so the scores of one query
 * vectorise across keys with no float reduction; P V vectorises across d. Both loops
 * auto-vectorise at -O3 -march=native (the host has AVX2+FMA).
 * v2: exp and the row sum in one AVX2 loop: Cody-Waite range reduction, degree-5
 * polynomial (Cephes expf coefficients, ~1 ulp), 2^n built in the exponent bits;
 * rounding by vroundps (no magic-constant trick, so no -ffast-math fold), argument
 * clamped at -87.3 so the scaled-logit shapes cannot wrap the exponent.
 * v3: register blocking (AVX2 intrinsics, needs d % 16 == 0): a block of RB = 4 query
 * rows is processed together. Scores: a 4 x 16 tile in 8 ymm accumulators, each K load
 * used 4 times, each broadcast q value twice. P V: 4 rows x 16 columns of out in 8
 * accumulators, each v load used 4 times. Causal rows only compute up to the block's
 * diagonal; the scores a row must not see get weight 0. Other d: the v2 row loop.
 * v4: K^T and V packed into contiguous 16-wide panels, GEMM style. In v3 the score tile
 * read kt[c][j..j+16] for 64 values of c, rows ldk*4 bytes apart (8 KiB at n = 2048):
 * all in the same L1 sets, so they evicted each other; now the tile streams one 4 KiB
 * panel. V likewise: vp[chunk][j][16] so P V reads one contiguous panel per chunk.
 * v5: RB = 6 query rows per block: 12 accumulators instead of 8. Zen 3 has two FMA pipes
 * with 4-cycle latency, so 8 independent chains leave it no slack for the loads and
 * broadcasts; 12 fit in the 16 ymm registers with 2 operand loads and 1 broadcast.
 * v6: two passes over the score rows removed from the exp phase: (1) scores are in the
 * log2 domain (log2 e folded into the q scaling), so the exp is Cephes' exp2f
 * polynomial with no Cody-Waite reduction; (2) the row max of every full score tile is
 * taken from the accumulators as the tile is stored; only the keys past the last full
 * tile (the diagonal tile, the n % 16 tail) are scanned afterwards.
 * v8 (= v6 plus): the last score tile of a block is 8 keys wide when 8 suffice (causal
 * diagonal blocks computed up to 15 keys no row could see: ~8 % of the score work at
 * n = 256 causal), and the q block is scaled with a vectorisable loop.
 * v9 (= v8 plus): the last 1-7 exps of a row go through the vector exp with a lane mask
 * (maskload/maskstore) instead of scalar libm calls; causal rows have every length.
 * Also: 2^r by a degree-4 near-minimax polynomial (max relative error 2.7e-6 in float32,
 * fitted here; the gate allows ~1e-5), and K packed with 8x8 in-register transposes
 * instead of one scalar store per element.
 */
#define _GNU_SOURCE /* sched_getcpu, sched_setaffinity (v4, 2 threads) */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>

/* 2^x: n = round(x), r = x - n in [-0.5, 0.5], 2^r by a degree-4 polynomial (rel. err 2.7e-6),
 * clamped at -125 so 2^n stays a normal float for any max-subtracted argument. */
static inline __m256 exp2_256(__m256 x)
{
    x = _mm256_max_ps(x, _mm256_set1_ps(-125.0f));
    __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_sub_ps(x, n);
    __m256 p = _mm256_set1_ps(9.570102207e-03f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.591786280e-02f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(2.402474433e-01f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(6.931217909e-01f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(9.999992847e-01f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
#endif

/* s[j] = 2^(s[j] - m) for j < len (s in the log2 domain); returns the sum. */
static float exp_row(float *restrict s, int len, float m)
{
    int j = 0;
    float sum = 0.0f;
#ifdef __AVX2__
    __m256 vm = _mm256_set1_ps(m), vs = _mm256_setzero_ps();
    for (; j + 8 <= len; j += 8) {
        __m256 e = exp2_256(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        _mm256_storeu_ps(s + j, e);
        vs = _mm256_add_ps(vs, e);
    }
    if (j < len) { /* 1-7 left: masked lanes are neither read nor written */
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(len - j),
                                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 e = exp2_256(_mm256_sub_ps(_mm256_maskload_ps(s + j, mask), vm));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(mask));
        _mm256_maskstore_ps(s + j, mask, e);
        vs = _mm256_add_ps(vs, e);
        j = len;
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(vs), _mm256_extractf128_ps(vs, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    sum = _mm_cvtss_f32(h);
#endif
    for (; j < len; j++) {
        s[j] = exp2f(s[j] - m);
        sum += s[j];
    }
    return sum;
}

static void attention_rows(const float *q, const float *k, const float *v, float *out,
               int heads, int n, int d, int causal)
{ /* the v2 loop: any d, any ISA */
    const float scale = 1.4426950408889634f / sqrtf((float)d); /* log2(e)/sqrt(d): log2 domain */
    float *kt = malloc((size_t)n * d * sizeof(float));
    float *s = malloc((size_t)n * sizeof(float));
    float *acc = malloc((size_t)d * sizeof(float));
    if (!kt || !s || !acc) {
        free(kt); free(s); free(acc);
        return;
    }
    for (int h = 0; h < heads; h++) {
        const float *qh = q + (size_t)h * n * d;
        const float *kh = k + (size_t)h * n * d;
        const float *vh = v + (size_t)h * n * d;
        float *oh = out + (size_t)h * n * d;
        for (int j = 0; j < n; j++)
            for (int c = 0; c < d; c++)
                kt[(size_t)c * n + j] = kh[(size_t)j * d + c];
        for (int i = 0; i < n; i++) {
            const int last = causal ? i + 1 : n;
            const float *qi = qh + (size_t)i * d;
            float *restrict sr = s;
            for (int j = 0; j < last; j++)
                sr[j] = 0.0f;
            for (int c = 0; c < d; c++) {
                const float qc = qi[c] * scale;
                const float *restrict kc = kt + (size_t)c * n;
                for (int j = 0; j < last; j++)
                    sr[j] += qc * kc[j];
            }
            float m = -INFINITY;
            for (int j = 0; j < last; j++)
                m = sr[j] > m ? sr[j] : m;
            const float sum = exp_row(sr, last, m);
            float *restrict a = acc;
            for (int c = 0; c < d; c++)
                a[c] = 0.0f;
            for (int j = 0; j < last; j++) {
                const float p = sr[j];
                const float *restrict vj = vh + (size_t)j * d;
                for (int c = 0; c < d; c++)
                    a[c] += p * vj[c];
            }
            const float inv = 1.0f / sum;
            float *oi = oh + (size_t)i * d;
            for (int c = 0; c < d; c++)
                oi[c] = a[c] * inv;
        }
    }
    free(kt); free(s); free(acc);
}

#ifdef __AVX2__
#define RB 6  /* query rows per block: 12 ymm accumulators (v5; 4 in v3-v4) */
#define CB 16 /* keys per score tile: 2 ymm */

static inline float hmax8(__m256 x)
{
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* dst[u * CB + t] = src[t * d + u] for t, u < 8: 8 keys x 8 dims into a K panel. */
static inline void pack8x8(const float *src, int d, float *dst)
{
    __m256 r[8], t[8], s[8];
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_ps(src + (size_t)i * d);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        s[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        _mm256_store_ps(dst + i * CB, _mm256_permute2f128_ps(s[i], s[i + 4], 0x20));
        _mm256_store_ps(dst + (i + 4) * CB, _mm256_permute2f128_ps(s[i], s[i + 4], 0x31));
    }
}

static float row_max(const float *s, int len)
{
    int j = 0;
    float m = -INFINITY;
    if (len >= 8) {
        __m256 vm = _mm256_loadu_ps(s);
        for (j = 8; j + 8 <= len; j += 8)
            vm = _mm256_max_ps(vm, _mm256_loadu_ps(s + j));
        m = hmax8(vm);
    }
    for (; j < len; j++)
        m = s[j] > m ? s[j] : m;
    return m;
}

/* sb[r][j] = qs[r] . k_j for r < RB, j < nk (nk a multiple of 8); kp holds K in
 * panels of CB keys: kp[j / CB][c][j % CB]. */
static void score_tile(const float *restrict qs, const float *restrict kp, int ldk, int d,
                       int nk, int full, float *restrict sb, float *restrict rm)
{ /* rm[r][8]: running max of row r over the tiles that end at or before `full` */
    int j = 0;
    for (; j + CB <= nk; j += CB) {
        const float *restrict kt = kp + (size_t)j * d;
        __m256 a[RB][2];
        for (int r = 0; r < RB; r++)
            a[r][0] = a[r][1] = _mm256_setzero_ps();
        for (int c = 0; c < d; c++) {
            const __m256 k0 = _mm256_load_ps(kt + c * CB);
            const __m256 k1 = _mm256_load_ps(kt + c * CB + 8);
            for (int r = 0; r < RB; r++) {
                const __m256 b = _mm256_broadcast_ss(qs + r * d + c);
                a[r][0] = _mm256_fmadd_ps(b, k0, a[r][0]);
                a[r][1] = _mm256_fmadd_ps(b, k1, a[r][1]);
            }
        }
        for (int r = 0; r < RB; r++) {
            _mm256_storeu_ps(sb + (size_t)r * ldk + j, a[r][0]);
            _mm256_storeu_ps(sb + (size_t)r * ldk + j + 8, a[r][1]);
        }
        if (j + CB <= full)
            for (int r = 0; r < RB; r++)
                _mm256_store_ps(rm + r * 8, _mm256_max_ps(_mm256_load_ps(rm + r * 8),
                                                          _mm256_max_ps(a[r][0], a[r][1])));
    }
    if (j < nk) { /* 8 keys left: half a tile, first half of the panel */
        const float *restrict kt = kp + (size_t)j * d;
        __m256 a[RB];
        for (int r = 0; r < RB; r++)
            a[r] = _mm256_setzero_ps();
        for (int c = 0; c < d; c++) {
            const __m256 k0 = _mm256_load_ps(kt + c * CB);
            for (int r = 0; r < RB; r++)
                a[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(qs + r * d + c), k0, a[r]);
        }
        for (int r = 0; r < RB; r++)
            _mm256_storeu_ps(sb + (size_t)r * ldk + j, a[r]);
    }
}

/* o[r] = sum_j sb[r][j] v[j] * inv[r] for r < rows (RB rows computed), j < nk; vp holds
 * V in panels of 16 columns: vp[c / 16][j][c % 16]. */
static void pv_tile(const float *restrict sb, int ldk, const float *restrict vp, int d, int nk,
                    const float *inv, float *restrict o, int rows)
{
    for (int cc = 0; cc < d; cc += 16) {
        const float *restrict vc = vp + (size_t)cc * ldk;
        __m256 a[RB][2];
        for (int r = 0; r < RB; r++)
            a[r][0] = a[r][1] = _mm256_setzero_ps();
        for (int j = 0; j < nk; j++) {
            const __m256 v0 = _mm256_load_ps(vc + (size_t)j * 16);
            const __m256 v1 = _mm256_load_ps(vc + (size_t)j * 16 + 8);
            for (int r = 0; r < RB; r++) {
                const __m256 p = _mm256_broadcast_ss(sb + (size_t)r * ldk + j);
                a[r][0] = _mm256_fmadd_ps(p, v0, a[r][0]);
                a[r][1] = _mm256_fmadd_ps(p, v1, a[r][1]);
            }
        }
        for (int r = 0; r < rows; r++) {
            const __m256 s = _mm256_set1_ps(inv[r]);
            _mm256_storeu_ps(o + (size_t)r * d + cc, _mm256_mul_ps(a[r][0], s));
            _mm256_storeu_ps(o + (size_t)r * d + cc + 8, _mm256_mul_ps(a[r][1], s));
        }
    }
}

static void attention_blocked(const float *q, const float *k, const float *v, float *out,
                              int heads, int n, int d, int causal)
{
    const float scale = 1.4426950408889634f / sqrtf((float)d); /* log2(e)/sqrt(d): log2 domain */
    const int ldk = (n + CB - 1) / CB * CB;
    float *kt = aligned_alloc(64, (size_t)ldk * d * sizeof(float));
    float *sb = aligned_alloc(64, (size_t)RB * ldk * sizeof(float));
    float *qs = aligned_alloc(64, (size_t)RB * d * sizeof(float));
    float *vp = aligned_alloc(64, (size_t)ldk * d * sizeof(float));
    if (!kt || !sb || !qs || !vp) {
        free(kt); free(sb); free(qs); free(vp);
        return;
    }
    for (int h = 0; h < heads; h++) {
        const float *qh = q + (size_t)h * n * d;
        const float *kh = k + (size_t)h * n * d;
        const float *vh = v + (size_t)h * n * d;
        float *oh = out + (size_t)h * n * d;
        for (int j0 = 0; j0 < ldk; j0 += 8) {
            float *kc = kt + (size_t)(j0 / CB) * CB * d + j0 % CB;
            if (j0 + 8 <= n) {
                for (int c = 0; c < d; c += 8)
                    pack8x8(kh + (size_t)j0 * d + c, d, kc + c * CB);
            } else { /* the last keys and the zero padding */
                for (int j = j0; j < j0 + 8; j++)
                    for (int c = 0; c < d; c++)
                        kc[c * CB + j - j0] = j < n ? kh[(size_t)j * d + c] : 0.0f;
            }
        }
        for (int cc = 0; cc < d; cc += 16)
            for (int j = 0; j < n; j++)
                memcpy(vp + (size_t)cc * ldk + (size_t)j * 16, vh + (size_t)j * d + cc, 16 * sizeof(float));
        for (int i0 = 0; i0 < n; i0 += RB) {
            const int rows = n - i0 < RB ? n - i0 : RB;
            const int maxlen = causal ? i0 + rows : n;      /* keys any row of the block sees */
            const int nk = (maxlen + 7) / 8 * 8;
            for (int c = 0; c < rows * d; c++)
                qs[c] = qh[(size_t)i0 * d + c] * scale;
            for (int c = rows * d; c < RB * d; c++)
                qs[c] = 0.0f;
            /* keys below `full` are visible to every row of the block */
            const int full = (causal ? i0 + 1 : n) / CB * CB;
            __attribute__((aligned(32))) float rm[RB * 8];
            for (int r = 0; r < RB * 8; r++)
                rm[r] = -INFINITY;
            score_tile(qs, kt, ldk, d, nk, full, sb, rm);
            float inv[RB];
            for (int r = 0; r < RB; r++) {
                float *sr = sb + (size_t)r * ldk;
                const int len = causal && r < rows ? i0 + r + 1 : maxlen;
                const float mt = row_max(sr + full, len - full);
                const float mf = hmax8(_mm256_load_ps(rm + r * 8));
                const float m = mt > mf ? mt : mf;
                inv[r] = 1.0f / exp_row(sr, len, m);
                for (int j = len; j < maxlen; j++)
                    sr[j] = 0.0f;                           /* masked keys: weight 0 */
            }
            pv_tile(sb, ldk, vp, d, maxlen, inv, oh + (size_t)i0 * d, rows);
        }
    }
    free(kt); free(sb); free(qs); free(vp);
}
#endif

#ifdef __AVX512F__
#include <pthread.h>
#include <sched.h>
/* v7 (AVX-512 hosts, d = 64): 32 zmm registers, 16 floats each.
 * Scores: RB = 6 query rows x up to 64 keys (4 zmm) = 24 accumulators; K packed into
 * panels of 64 keys, kp[j / 64][c][j % 64], so a tile streams one contiguous 16 KiB panel.
 * P V: 6 rows x 64 columns (4 zmm) = 24 accumulators, V read in place (a row of V is
 * exactly 4 zmm, no packing). exp2 by roundscale + degree-4 polynomial + vscalefps
 * (scalef handles the underflow of very negative arguments, so no clamp). */
#define RB5 6
#define KT 64

static inline __m512 exp2_512(__m512 x)
{ /* v3: 2^x = 2^floor(x) * 2^f with f = x - floor(x) in [0, 1) from one vreduceps (was
   * roundscale + sub); degree-4 minimax of 2^f (relative error 2.7e-6 in float32, as before);
   * scalef multiplies by 2^floor(x) and underflows to 0 for very negative x (no clamp) */
    const __m512 f = _mm512_reduce_ps(x, 0x09); /* M = 0 fraction bits, round down, no exceptions */
    __m512 p = _mm512_set1_ps(1.353414636e-02f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.201156065e-02f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.414426506e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.930038929e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.000002623e+00f));
    return _mm512_scalef_ps(p, x);
}

/* s[j] = 2^(s[j] - m) for j < len, 0 for len <= j < end (end a multiple of 16); returns the sum. */
static inline float exp_row512(float *restrict s, int len, int end, float m)
{
    const __m512 vm = _mm512_set1_ps(m);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int j = 0;
    for (; j + 32 <= len; j += 32) {
        const __m512 e0 = exp2_512(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm));
        const __m512 e1 = exp2_512(_mm512_sub_ps(_mm512_loadu_ps(s + j + 16), vm));
        _mm512_storeu_ps(s + j, e0);
        _mm512_storeu_ps(s + j + 16, e1);
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
    }
    for (; j < end; j += 16) {
        const int left = len - j;
        const __mmask16 mk = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
        const __m512 e = _mm512_maskz_mov_ps(mk, exp2_512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, s + j), vm)));
        _mm512_storeu_ps(s + j, e);
        s0 = _mm512_add_ps(s0, e);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

/* max of s[j] for from <= j < len (from a multiple of 16), and of m */
static inline float tail_max512(const float *s, int from, int len, float m)
{
    __m512 vm = _mm512_set1_ps(m);
    for (int j = from; j < len; j += 16) {
        const int left = len - j;
        const __mmask16 mk = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
        vm = _mm512_mask_max_ps(vm, mk, vm, _mm512_maskz_loadu_ps(mk, s + j));
    }
    return _mm512_reduce_max_ps(vm);
}

/* One score tile: sb[r][j0 + 16w + t] = qs[r] . k_{j0+16w+t} for w < W; the row maxima of
 * the 16-key columns that end at or before `full` go into rm. */
static inline __attribute__((always_inline)) void tile512(const float *restrict qs, const float *restrict kt,
                                                          float *restrict sb, int ldk, int j0, int full,
                                                          __m512 *restrict rm, const int W)
{
    __m512 a[RB5][4];
#pragma GCC unroll 8
    for (int r = 0; r < RB5; r++)
#pragma GCC unroll 4
        for (int w = 0; w < W; w++)
            a[r][w] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int c = 0; c < 64; c++) {
        __m512 kv[4];
#pragma GCC unroll 4
        for (int w = 0; w < W; w++)
            kv[w] = _mm512_load_ps(kt + c * KT + 16 * w);
#pragma GCC unroll 8
        for (int r = 0; r < RB5; r++) {
            const __m512 b = _mm512_set1_ps(qs[r * 64 + c]);
#pragma GCC unroll 4
            for (int w = 0; w < W; w++)
                a[r][w] = _mm512_fmadd_ps(b, kv[w], a[r][w]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < RB5; r++)
#pragma GCC unroll 4
        for (int w = 0; w < W; w++) {
            _mm512_storeu_ps(sb + (size_t)r * ldk + j0 + 16 * w, a[r][w]);
            if (j0 + 16 * w + 16 <= full)
                rm[r] = _mm512_max_ps(rm[r], a[r][w]);
        }
}

/* v8: the fused score tile. Scores start at -bound[r] (an upper bound of row r's scores, so
 * exp2 never overflows and every row's largest term is >= 2^-(bound - max)), and are turned
 * into exp2(s - bound) in registers: no raw score store, no max pass, no exp pass. Keys a row
 * must not see (causal, padding past n) get weight 0; each row's sum accumulates in sum[r]. */
static inline __attribute__((always_inline)) void tilex512(const float *restrict qs, const float *restrict kt,
                                                           float *restrict sb, int ldk, int j0, int full,
                                                           const int *len, const float *nbound,
                                                           __m512 *restrict sum, const int W)
{
    __m512 a[RB5][4];
#pragma GCC unroll 8
    for (int r = 0; r < RB5; r++)
#pragma GCC unroll 4
        for (int w = 0; w < W; w++)
            a[r][w] = _mm512_set1_ps(nbound[r]);
#pragma GCC unroll 2
    for (int c = 0; c < 64; c++) {
        __m512 kv[4];
#pragma GCC unroll 4
        for (int w = 0; w < W; w++)
            kv[w] = _mm512_load_ps(kt + c * KT + 16 * w);
#pragma GCC unroll 8
        for (int r = 0; r < RB5; r++) {
            const __m512 b = _mm512_set1_ps(qs[r * 64 + c]);
#pragma GCC unroll 4
            for (int w = 0; w < W; w++)
                a[r][w] = _mm512_fmadd_ps(b, kv[w], a[r][w]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < RB5; r++) {
        __m512 sr = sum[r];
#pragma GCC unroll 4
        for (int w = 0; w < W; w++) {
            __m512 e = exp2_512(a[r][w]);
            const int j = j0 + 16 * w;
            if (j + 16 > full) {
                const int left = len[r] - j;
                const __mmask16 mk = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
                e = _mm512_maskz_mov_ps(mk, e);
            }
            _mm512_storeu_ps(sb + (size_t)r * ldk + j, e);
            sr = _mm512_add_ps(sr, e);
        }
        sum[r] = sr;
    }
}

/* o[r] = inv[r] * sum_{j < nk} sb[r][j] v_j for r < rows (RB5 rows computed), d = 64 */
static __attribute__((noinline)) void pv512(const float *restrict sb, int ldk, const float *restrict vh, int nk,
                         const float *inv, float *restrict o, int rows)
{
    __m512 a[RB5][4];
#pragma GCC unroll 8
    for (int r = 0; r < RB5; r++)
#pragma GCC unroll 4
        for (int w = 0; w < 4; w++)
            a[r][w] = _mm512_setzero_ps();
    for (int j = 0; j < nk; j++) {
        __m512 vv[4];
#pragma GCC unroll 4
        for (int w = 0; w < 4; w++)
            vv[w] = _mm512_loadu_ps(vh + (size_t)j * 64 + 16 * w);
#pragma GCC unroll 8
        for (int r = 0; r < RB5; r++) {
            const __m512 p = _mm512_set1_ps(sb[(size_t)r * ldk + j]);
#pragma GCC unroll 4
            for (int w = 0; w < 4; w++)
                a[r][w] = _mm512_fmadd_ps(p, vv[w], a[r][w]);
        }
    }
    for (int r = 0; r < rows; r++) {
        const __m512 s = _mm512_set1_ps(inv[r]);
#pragma GCC unroll 4
        for (int w = 0; w < 4; w++)
            _mm512_storeu_ps(o + (size_t)r * 64 + 16 * w, _mm512_mul_ps(a[r][w], s));
    }
}

/* K of one head into 64-key panels; keys n .. ldk-1 are zero. Uses the AVX2 8x8 transpose
 * (dst stride KT). v3: returns max_j |k_j| of the packed (scaled) keys, summed from the
 * transposed vectors while they are in registers (was a second pass over the panels). */
static float pack_k512(const float *kh, int n, int ldk, float *kp)
{
    const float scale = 1.4426950408889634f / 8.0f; /* log2(e)/sqrt(64): scores in the log2 domain */
    const __m256 vsc = _mm256_set1_ps(scale);
    __m256 mx = _mm256_setzero_ps();
    float mxs = 0.0f;
    for (int j0 = 0; j0 < ldk; j0 += 8) {
        float *kc = kp + (size_t)(j0 / KT) * KT * 64 + j0 % KT;
        if (j0 + 8 <= n) {
            __m256 nr = _mm256_setzero_ps(); /* squared norms of keys j0 .. j0 + 7 */
            for (int c = 0; c < 64; c += 8) {
                __m256 r[8], t[8], s[8];
                for (int i = 0; i < 8; i++)
                    r[i] = _mm256_mul_ps(_mm256_loadu_ps(kh + (size_t)(j0 + i) * 64 + c), vsc);
                for (int i = 0; i < 8; i += 2) {
                    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
                    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
                }
                for (int i = 0; i < 8; i += 4) {
                    s[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
                    s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
                    s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
                    s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
                }
                float *dst = kc + c * KT;
                for (int i = 0; i < 4; i++) {
                    const __m256 x0 = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
                    const __m256 x1 = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
                    _mm256_store_ps(dst + i * KT, x0);
                    _mm256_store_ps(dst + (i + 4) * KT, x1);
                    nr = _mm256_fmadd_ps(x0, x0, nr);
                    nr = _mm256_fmadd_ps(x1, x1, nr);
                }
            }
            mx = _mm256_max_ps(mx, nr);
        } else {
            for (int j = j0; j < j0 + 8; j++) {
                float s2 = 0.0f;
                for (int c = 0; c < 64; c++) {
                    const float x = j < n ? kh[(size_t)j * 64 + c] * scale : 0.0f;
                    kc[c * KT + j - j0] = x;
                    s2 += x * x;
                }
                mxs = s2 > mxs ? s2 : mxs;
            }
        }
    }
    const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    float m = mxs;
    for (int i = 0; i < 4; i++)
        m = m4[i] > m ? m4[i] : m;
    return sqrtf(m);
}

typedef struct {
    float *kp, *sb, *qs;
    float kmax; /* max_j |k_j| of the packed (scaled) head */
    size_t cap; /* ldk the buffers were sized for */
} scratch512;

static int ensure512(scratch512 *w, int ldk)
{
    if ((size_t)ldk <= w->cap)
        return 1;
    free(w->kp); free(w->sb); free(w->qs);
    w->kp = aligned_alloc(64, (size_t)ldk * 64 * sizeof(float));
    w->sb = aligned_alloc(64, (size_t)RB5 * (ldk + 16) * sizeof(float));
    w->qs = aligned_alloc(64, (size_t)RB5 * 64 * sizeof(float));
    w->cap = (w->kp && w->sb && w->qs) ? (size_t)ldk : 0;
    return w->cap != 0;
}

/* The exact two-pass softmax of one block: raw scores, row max, exp2(s - max). */
static void block_exact512(const float *qb, const float *kp, float *sb, int lds, int nk, int full,
                           const int *len, float *inv)
{
    __m512 rm[RB5];
    for (int r = 0; r < RB5; r++)
        rm[r] = _mm512_set1_ps(-INFINITY);
    int j = 0;
    for (; j + KT <= nk; j += KT)
        tile512(qb, kp + (size_t)j * 64, sb, lds, j, full, rm, 4);
    switch ((nk - j) / 16) { /* the last panel, 1-3 columns of 16 keys */
    case 3: tile512(qb, kp + (size_t)j * 64, sb, lds, j, full, rm, 3); break;
    case 2: tile512(qb, kp + (size_t)j * 64, sb, lds, j, full, rm, 2); break;
    case 1: tile512(qb, kp + (size_t)j * 64, sb, lds, j, full, rm, 1); break;
    default: break;
    }
    for (int r = 0; r < RB5; r++) {
        float *sr = sb + (size_t)r * lds;
        const float m = tail_max512(sr, full, len[r], _mm512_reduce_max_ps(rm[r]));
        inv[r] = 1.0f / exp_row512(sr, len[r], nk, m);
    }
}

/* Query blocks b0 <= b < b1 of one head (K already packed in w->kp). */
static void head_blocks512(const float *qh, const float *vh, float *oh, int n, int causal,
                           scratch512 *w, int b0, int b1)
{
    const int ldk = (n + KT - 1) / KT * KT, lds = ldk + 16;
    float *sb = w->sb, *qs = w->qs;
    for (int b = b0; b < b1; b++) {
        const int i0 = b * RB5;
        const int rows = n - i0 < RB5 ? n - i0 : RB5;
        const int maxlen = causal ? i0 + rows : n;      /* keys any row of the block sees */
        const int nk = (maxlen + 15) / 16 * 16;
        const float *qb = qh + (size_t)i0 * 64;  /* full blocks read q in place */
        if (rows < RB5) {                        /* the last block: zero-padded copy */
            memcpy(qs, qb, (size_t)rows * 64 * sizeof(float));
            memset(qs + rows * 64, 0, (size_t)(RB5 - rows) * 64 * sizeof(float));
            qb = qs;
        }
        const int full = (causal ? i0 + 1 : n) / 16 * 16; /* keys every row sees, whole columns */
        int len[RB5];
        float nbound[RB5];
        __m512 sum[RB5];
        for (int r = 0; r < RB5; r++) {
            len[r] = causal && r < rows ? i0 + r + 1 : maxlen;
            const float *qr = qb + r * 64;
            __m512 q2 = _mm512_mul_ps(_mm512_loadu_ps(qr), _mm512_loadu_ps(qr));
            for (int c = 16; c < 64; c += 16)
                q2 = _mm512_fmadd_ps(_mm512_loadu_ps(qr + c), _mm512_loadu_ps(qr + c), q2);
            /* |q . k| <= |q| |k|; the margin covers float rounding of the dot product */
            nbound[r] = -(sqrtf(_mm512_reduce_add_ps(q2)) * w->kmax * 1.001f + 1e-3f);
            sum[r] = _mm512_setzero_ps();
        }
        int j = 0;
        for (; j + KT <= nk; j += KT)
            tilex512(qb, w->kp + (size_t)j * 64, sb, lds, j, full, len, nbound, sum, 4);
        switch ((nk - j) / 16) {
        case 3: tilex512(qb, w->kp + (size_t)j * 64, sb, lds, j, full, len, nbound, sum, 3); break;
        case 2: tilex512(qb, w->kp + (size_t)j * 64, sb, lds, j, full, len, nbound, sum, 2); break;
        case 1: tilex512(qb, w->kp + (size_t)j * 64, sb, lds, j, full, len, nbound, sum, 1); break;
        default: break;
        }
        float inv[RB5];
        int exact = 0;
        for (int r = 0; r < RB5; r++) {
            const float t = _mm512_reduce_add_ps(sum[r]);
            exact |= !(t >= 0x1p-100f && t <= 0x1p100f); /* bound far above the max: underflow */
            inv[r] = 1.0f / t;
        }
        if (exact) /* rare (a row whose scores lie far below |q| max|k|): the two-pass softmax */
            block_exact512(qb, w->kp, sb, lds, nk, full, len, inv);
        pv512(sb, lds, vh, maxlen, inv, oh + (size_t)i0 * 64, rows);
    }
}

/* v3, more than one thread: work items (v4: runs of query blocks, head-major, the caller
 * from the front and the first helper from the back) are taken from a shared counter,
 * so a thread slowed by someone else's job on its core does less of the work. The helper
 * threads are started once and sleep on a futex between calls (no thread start or join per
 * call); a call wakes them and does items itself at once, so a helper that wakes late only
 * finds less work. A call returns when every helper that joined it has finished its item:
 * helpers are idle (asleep) whenever no call runs. A thread packs K for each head it works on. */
#include <stdatomic.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <limits.h>

typedef struct {
    const float *q, *k, *v;
    float *out;
    int heads, n, causal, chunk, per_head, items;
    _Atomic unsigned long long range; /* v4: low 32 bits the next item from the front, high 32
                                       * one past the next item from the back */
    atomic_int bad;  /* a thread could not get its scratch */
} call512;

static scratch512 scratch_of[8];
static call512 the_call;
static atomic_uint call_gen;    /* futex word: bumped when a call starts */
static atomic_uint open_active; /* bit 31: the call is open to helpers; low bits: helpers in it */
#define OPEN 0x80000000u

static void work512(call512 *cl, int tid)
{
    const int n = cl->n, ldk = (n + KT - 1) / KT * KT, nblocks = (n + RB5 - 1) / RB5;
    scratch512 *w = &scratch_of[tid];
    if (!ensure512(w, ldk)) {
        atomic_store(&cl->bad, 1);
        return;
    }
    const size_t hs = (size_t)n * 64;
    int packed = -1;
    const int back = tid == 1; /* the first helper works from the last item down */
    for (;;) {
        unsigned long long r = atomic_load_explicit(&cl->range, memory_order_relaxed);
        int item;
        for (;;) {
            const unsigned lo = (unsigned)r, hi = (unsigned)(r >> 32);
            if (lo >= hi) {
                item = -1;
                break;
            }
            const unsigned long long nr = back ? r - (1ull << 32) : r + 1;
            if (atomic_compare_exchange_weak_explicit(&cl->range, &r, nr, memory_order_relaxed,
                                                      memory_order_relaxed)) {
                item = back ? (int)hi - 1 : (int)lo;
                break;
            }
        }
        if (item < 0)
            break;
        const int h = item / cl->per_head, c = item % cl->per_head;
        const int b0 = c * cl->chunk, b1 = b0 + cl->chunk < nblocks ? b0 + cl->chunk : nblocks;
        if (packed != h) {
            w->kmax = pack_k512(cl->k + h * hs, n, ldk, w->kp);
            packed = h;
        }
        head_blocks512(cl->q + h * hs, cl->v + h * hs, cl->out + h * hs, n, cl->causal, w, b0, b1);
    }
}

static atomic_int helper_tid[8]; /* kernel thread ids of the helpers, for their affinity */

static void *helper512(void *arg)
{
    const int tid = (int)(intptr_t)arg;
    unsigned seen = 0;
    atomic_store(&helper_tid[tid], (int)syscall(SYS_gettid));
    for (;;) {
        unsigned g = atomic_load_explicit(&call_gen, memory_order_acquire);
        if (g == seen) {
            syscall(SYS_futex, &call_gen, FUTEX_WAIT_PRIVATE, g, NULL, NULL, 0);
            continue;
        }
        seen = g;
        unsigned s = atomic_load(&open_active);
        while ((s & OPEN) && !atomic_compare_exchange_weak(&open_active, &s, s + 1))
            ;
        if (!(s & OPEN))
            continue; /* woke after the call closed: nothing to do */
        work512(&the_call, tid);
        atomic_fetch_sub_explicit(&open_active, 1, memory_order_release);
    }
    return NULL;
}

static int threads512(void)
{
    const char *s = getenv("AVO_THREADS");
    int t = s ? atoi(s) : 1;
    return t < 1 ? 1 : t > 8 ? 8 : t;
}

static int attention512(const float *q, const float *k, const float *v, float *out,
                        int heads, int n, int causal)
{
    static int helpers = -1; /* started helper threads */
    const int nt = 1, nblocks = (n + RB5 - 1) / RB5;
    call512 *cl = &the_call;
    cl->q = q; cl->k = k; cl->v = v; cl->out = out;
    cl->heads = heads; cl->n = n; cl->causal = causal;
    /* v4: one thread: whole heads. More: ~16 runs of query blocks per thread in head-major
     * order, the caller taking them from the front and the first helper from the back, so each
     * thread walks its own heads (only the one where they meet is packed twice) and a helper
     * that wakes late costs at most one short run of imbalance (whole heads left up to a head:
     * n512's 4 heads were 2 items per thread). */
    const int chunk = nt == 1 ? nblocks : nblocks * heads / (16 * nt);
    cl->chunk = chunk < 1 ? 1 : chunk > nblocks ? nblocks : chunk;
    cl->per_head = (nblocks + cl->chunk - 1) / cl->chunk;
    cl->items = heads * cl->per_head;
    atomic_store(&cl->range, (unsigned long long)cl->items << 32);
    atomic_store(&cl->bad, 0);
    if (nt > 1) {
        if (helpers < 0) {
            helpers = 0;
            for (int t = 1; t < nt; t++) {
                pthread_t tid;
                if (pthread_create(&tid, NULL, helper512, (void *)(intptr_t)t) == 0) {
                    pthread_detach(tid);
                    helpers++;
                }
            }
        }
        if (helpers > 0) {
            /* v4: the helpers may run anywhere but on the caller's CPU. Left to the scheduler, a
             * helper woken for a short call was often queued on the caller's own CPU
             * (wake-affine) and ran only after it: through the target's Worker a 2-thread n256
             * call used as much process CPU as wall time (1.18 ms each), the helper did almost
             * nothing. The caller is never pinned; the mask is set again only when it moved. */
            static int last_cpu = -1;
            const int cpu = sched_getcpu();
            if (cpu >= 0 && cpu != last_cpu) {
                cpu_set_t others;
                int all = 1; /* every helper's mask set (a new helper may not have its id yet) */
                if (sched_getaffinity(0, sizeof others, &others) == 0 && CPU_COUNT(&others) > 1) {
                    CPU_CLR(cpu, &others);
                    for (int t = 1; t <= helpers && t < 8; t++) {
                        const int ht = atomic_load(&helper_tid[t]);
                        all &= ht > 0 && sched_setaffinity(ht, sizeof others, &others) == 0;
                    }
                }
                if (all)
                    last_cpu = cpu;
            }
            atomic_store(&open_active, OPEN);
            atomic_fetch_add_explicit(&call_gen, 1, memory_order_release);
            syscall(SYS_futex, &call_gen, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
        }
    }
    work512(cl, 0);
    if (nt > 1 && helpers > 0) {
        atomic_fetch_and(&open_active, ~OPEN);           /* late helpers find the call closed */
        while (atomic_load_explicit(&open_active, memory_order_acquire) != 0)
            _mm_pause();                                 /* helpers finishing their last item */
    }
    return !atomic_load(&cl->bad);
}
#endif


void attention(const float *q, const float *k, const float *v, float *out,
               int heads, int n, int d, int causal)
{
#ifdef __AVX512F__
    if (d == 64 && attention512(q, k, v, out, heads, n, causal))
        return;
#endif
#ifdef __AVX2__
    if (d % 16 == 0) {
        attention_blocked(q, k, v, out, heads, n, d, causal);
        return;
    }
#endif
    attention_rows(q, k, v, out, heads, n, d, causal);
}
