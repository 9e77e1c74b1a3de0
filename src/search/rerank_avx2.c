/* AVX2 + F16C widening of stored half and bfloat16 vectors (rerank.h): 8 per step, the
 * scalar tail as core/f16.h converts (both are exact, so every level agrees bit for bit). */
#include <immintrin.h>

#include "core/f16.h"
#include "search/rerank.h"

void sp_f16_widen_avx2(const uint16_t *src, size_t n, float *dst)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = cm_f16_to_f32(src[i]);
}

void sp_bf16_widen_avx2(const uint16_t *src, size_t n, float *dst)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    for (; i < n; i++) dst[i] = cm_bf16_to_f32(src[i]);
}
