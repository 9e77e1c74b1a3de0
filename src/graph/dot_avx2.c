/* AVX2 + FMA inner product: two 8-lane accumulators, masked-free scalar tail. */
#include <immintrin.h>

#include "graph/dot.h"

float graph_dot_avx2(const float *a, const float *b, uint32_t d)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    uint32_t t = 0;
    for (; t + 16 <= d; t += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + t), _mm256_loadu_ps(b + t), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + t + 8), _mm256_loadu_ps(b + t + 8), s1);
    }
    for (; t + 8 <= d; t += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + t), _mm256_loadu_ps(b + t), s0);
    s0 = _mm256_add_ps(s0, s1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    float s = _mm_cvtss_f32(h);
    for (; t < d; t++) s += a[t] * b[t];
    return s;
}
