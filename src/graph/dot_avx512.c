/* AVX-512 inner product: two 16-lane accumulators, a masked load for the tail (d = 96
 * or 128 needs none; odd d costs one masked step). */
#include <immintrin.h>

#include "graph/dot.h"

float graph_dot_avx512(const float *a, const float *b, uint32_t d)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    uint32_t t = 0;
    for (; t + 32 <= d; t += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + t), _mm512_loadu_ps(b + t), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + t + 16), _mm512_loadu_ps(b + t + 16), s1);
    }
    for (; t + 16 <= d; t += 16)
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + t), _mm512_loadu_ps(b + t), s0);
    if (t < d) {
        __mmask16 m = (__mmask16)((1u << (d - t)) - 1);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + t), _mm512_maskz_loadu_ps(m, b + t), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}
