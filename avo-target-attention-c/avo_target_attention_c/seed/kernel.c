/*
 * kernel.c -- the candidate of avo's attention_c target (seed x_0).
 *
 * Contract (the evaluator compiles this file with gcc and calls it through cffi):
 *
 *   void attention(const float *q, const float *k, const float *v, float *out,
 *                  int heads, int n, int d, int causal);
 *
 *   q, k, v, out: row-major float32 arrays of shape [heads][n][d], contiguous.
 *   For every head h and query row i:
 *       s_j    = dot(q[h][i], k[h][j]) / sqrt(d)     for j in 0..n-1
 *                (causal != 0: only j <= i; later keys are masked out)
 *       p_j    = exp(s_j - max_j s_j) / sum_j exp(s_j - max_j s_j)
 *       out[h][i] = sum_j p_j * v[h][j]
 *   d is 64 in every benchmark, but the gate also passes it explicitly: read it.
 *   n can be anything from 1 up (primes, powers of two +-1): handle the tails.
 *   out must be written completely on every call and nothing outside it; q, k, v are
 *   read-only. Every call gets fresh inputs: never cache results between calls.
 *
 * Build: gcc -O3 -std=gnu11 -fPIC -shared plus the flags in an optional cflags.txt next
 * to this file (one line, e.g. "-march=native -fopenmp"). The prototype above is
 * force-included, so a definition with another signature is a compile error.
 *
 * Threads: the evaluator pins the process to $AVO_THREADS cores (default 1) and sets
 * OMP_NUM_THREADS to the same number; the NumPy/BLAS reference gets the same count.
 * With 1, starting a thread or a child process fails the evaluation.
 *
 * This seed is deliberately plain: scalar loops, expf from libm, a scratch row of
 * scores per query. It is correct for every n and both masks; it is slow.
 */
#include <math.h>
#include <stdlib.h>

void attention(const float *q, const float *k, const float *v, float *out,
               int heads, int n, int d, int causal)
{
    const float scale = 1.0f / sqrtf((float)d);
    float *scores = malloc((size_t)n * sizeof(float));
    if (scores == NULL)
        return;
    for (int h = 0; h < heads; h++) {
        const float *qh = q + (size_t)h * n * d;
        const float *kh = k + (size_t)h * n * d;
        const float *vh = v + (size_t)h * n * d;
        float *oh = out + (size_t)h * n * d;
        for (int i = 0; i < n; i++) {
            int last = causal ? i + 1 : n;  /* keys 0..last-1 are visible */
            float maxs = -INFINITY;
            for (int j = 0; j < last; j++) {
                float s = 0.0f;
                for (int c = 0; c < d; c++)
                    s += qh[(size_t)i * d + c] * kh[(size_t)j * d + c];
                s *= scale;
                scores[j] = s;
                if (s > maxs)
                    maxs = s;
            }
            float sum = 0.0f;
            for (int j = 0; j < last; j++) {
                scores[j] = expf(scores[j] - maxs);
                sum += scores[j];
            }
            float inv = 1.0f / sum;
            for (int c = 0; c < d; c++) {
                float acc = 0.0f;
                for (int j = 0; j < last; j++)
                    acc += scores[j] * vh[(size_t)j * d + c];
                oh[(size_t)i * d + c] = acc * inv;
            }
        }
    }
    free(scores);
}
