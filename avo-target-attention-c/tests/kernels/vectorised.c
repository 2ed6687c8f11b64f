/* The seed restructured so gcc vectorises every inner loop without reassociation:
 * K is transposed per head so the scores of one query row are computed across keys
 * (s[j] += q[c] * kt[c][j], independent lanes), and P V accumulates rows of V
 * (acc[c] += p[j] * v[j][c]). Built with -march=native from cflags.txt. */
#include <math.h>
#include <stdlib.h>

void attention(const float *q, const float *k, const float *v, float *out,
               int heads, int n, int d, int causal)
{
    const float scale = 1.0f / sqrtf((float)d);
    float *kt = malloc((size_t)n * d * sizeof(float));
    float *s = malloc((size_t)n * sizeof(float));
    float *acc = malloc((size_t)d * sizeof(float));
    if (!kt || !s || !acc) {
        free(kt), free(s), free(acc);
        return;
    }
    for (int h = 0; h < heads; h++) {
        const float *qh = q + (size_t)h * n * d, *kh = k + (size_t)h * n * d, *vh = v + (size_t)h * n * d;
        float *oh = out + (size_t)h * n * d;
        for (int j = 0; j < n; j++)
            for (int c = 0; c < d; c++)
                kt[(size_t)c * n + j] = kh[(size_t)j * d + c];
        for (int i = 0; i < n; i++) {
            int last = causal ? i + 1 : n;
            const float *qi = qh + (size_t)i * d;
            for (int j = 0; j < last; j++)
                s[j] = 0.0f;
            for (int c = 0; c < d; c++) {
                const float qc = qi[c] * scale;
                const float *row = kt + (size_t)c * n;
                for (int j = 0; j < last; j++)
                    s[j] += qc * row[j];
            }
            float m = -INFINITY;
            for (int j = 0; j < last; j++)
                m = s[j] > m ? s[j] : m;
            float sum = 0.0f;
            for (int j = 0; j < last; j++) {
                s[j] = expf(s[j] - m);
                sum += s[j];
            }
            for (int c = 0; c < d; c++)
                acc[c] = 0.0f;
            for (int j = 0; j < last; j++) {
                const float p = s[j];
                const float *vj = vh + (size_t)j * d;
                for (int c = 0; c < d; c++)
                    acc[c] += p * vj[c];
            }
            const float inv = 1.0f / sum;
            for (int c = 0; c < d; c++)
                oh[(size_t)i * d + c] = acc[c] * inv;
        }
    }
    free(kt), free(s), free(acc);
}
