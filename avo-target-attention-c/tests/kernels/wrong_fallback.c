/* The softmax of examples/attention_c-run2's v2 in plain C, with its fallback broken.
 *
 * No max pass: each row's scores are shifted by an upper bound instead of their max,
 * |s_j| <= |q_i| max_j |k_j| / sqrt(d) (Cauchy-Schwarz), so exp(s_j - bound) never
 * overflows. When the bound lies far above the row's max, the terms underflow and the row
 * needs the exact two-pass softmax. This kernel's fallback forgets the max subtraction:
 * right while every logit is small, inf (then NaN) as soon as one is large. On normal
 * inputs the bound stays within ~10 of the max, so the fallback never runs; the gate's
 * skewed-norm shapes make it run. Portable C, so the hole is shown on any host (v2's
 * fused path exists only under AVX-512).
 */
#include <math.h>
#include <stdlib.h>

void attention(const float *q, const float *k, const float *v, float *out,
               int heads, int n, int d, int causal)
{
    const float scale = 1.0f / sqrtf((float)d);
    float *raw = malloc((size_t)n * sizeof(float));
    float *p = malloc((size_t)n * sizeof(float));
    if (raw == NULL || p == NULL) {
        free(raw);
        free(p);
        return;
    }
    for (int h = 0; h < heads; h++) {
        const float *qh = q + (size_t)h * n * d;
        const float *kh = k + (size_t)h * n * d;
        const float *vh = v + (size_t)h * n * d;
        float *oh = out + (size_t)h * n * d;
        float kmax = 0.0f;
        for (int j = 0; j < n; j++) {
            float k2 = 0.0f;
            for (int c = 0; c < d; c++)
                k2 += kh[(size_t)j * d + c] * kh[(size_t)j * d + c];
            kmax = k2 > kmax ? k2 : kmax;
        }
        kmax = sqrtf(kmax);
        for (int i = 0; i < n; i++) {
            const float *qi = qh + (size_t)i * d;
            int last = causal ? i + 1 : n;
            float q2 = 0.0f;
            for (int c = 0; c < d; c++)
                q2 += qi[c] * qi[c];
            /* the margin covers the rounding of the dot products */
            const float bound = sqrtf(q2) * kmax * scale * 1.001f + 1e-3f;
            float sum = 0.0f;
            for (int j = 0; j < last; j++) {
                float s = 0.0f;
                for (int c = 0; c < d; c++)
                    s += qi[c] * kh[(size_t)j * d + c];
                raw[j] = s * scale;
                p[j] = expf(raw[j] - bound);
                sum += p[j];
            }
            if (!(sum >= 1e-30f)) { /* the terms underflowed: the exact softmax */
                float shift = 0.0f; /* the bug: should be the row max */
                sum = 0.0f;
                for (int j = 0; j < last; j++) {
                    p[j] = expf(raw[j] - shift);
                    sum += p[j];
                }
            }
            const float inv = 1.0f / sum;
            for (int c = 0; c < d; c++) {
                float acc = 0.0f;
                for (int j = 0; j < last; j++)
                    acc += p[j] * vh[(size_t)j * d + c];
                oh[(size_t)i * d + c] = acc * inv;
            }
        }
    }
    free(raw);
    free(p);
}
