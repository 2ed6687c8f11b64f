/* The seed with expf replaced by the classic fast exp: round x/ln2 to an integer with the
 * add-magic-constant trick, evaluate 2^r on the remainder by a polynomial, and put the
 * integer into the exponent bits. Accurate to ~1e-7 relative when compiled normally.
 * Under -ffast-math gcc folds (t + M) - M into t, so the remainder r becomes 0 and the
 * result collapses to 2^round(t): off by up to a factor sqrt(2). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float fast_exp(float x)
{
    x = x < -87.0f ? -87.0f : x;
    float t = x * 1.44269504088896341f;
    float shifted = t + 12582912.0f; /* 1.5 * 2^23: the sum rounds t to an integer */
    float n = shifted - 12582912.0f;
    float r = (t - n) * 0.693147180559945f;
    int32_t bits;
    memcpy(&bits, &shifted, sizeof bits);
    int32_t e = ((bits - 0x4B400000) + 127) << 23;
    float scale;
    memcpy(&scale, &e, sizeof scale);
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    return p * scale;
}

void attention(const float *q, const float *k, const float *v, float *out,
               int heads, int n, int d, int causal)
{
    const float scale = 1.0f / sqrtf((float)d);
    float *scores = malloc((size_t)n * sizeof(float));
    if (scores == NULL)
        return;
    for (int h = 0; h < heads; h++) {
        const float *qh = q + (size_t)h * n * d, *kh = k + (size_t)h * n * d, *vh = v + (size_t)h * n * d;
        float *oh = out + (size_t)h * n * d;
        for (int i = 0; i < n; i++) {
            int last = causal ? i + 1 : n;
            float maxs = -INFINITY;
            for (int j = 0; j < last; j++) {
                float s = 0.0f;
                for (int c = 0; c < d; c++)
                    s += qh[(size_t)i * d + c] * kh[(size_t)j * d + c];
                scores[j] = s * scale;
                if (scores[j] > maxs)
                    maxs = scores[j];
            }
            float sum = 0.0f;
            for (int j = 0; j < last; j++) {
                scores[j] = fast_exp(scores[j] - maxs);
                sum += scores[j];
            }
            for (int c = 0; c < d; c++) {
                float acc = 0.0f;
                for (int j = 0; j < last; j++)
                    acc += scores[j] * vh[(size_t)j * d + c];
                oh[(size_t)i * d + c] = acc / sum;
            }
        }
    }
    free(scores);
}
