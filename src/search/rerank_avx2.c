/* The AVX2 kernels of the exact re-rank (rerank.h): F16C widening of stored half and
 * bfloat16 vectors, 8 per step, the scalar tail as core/f16.h converts (both exact, so
 * every level agrees bit for bit); and maxsim with FMA, which differs from the scalar
 * reference only in rounding (tests/test_rerank.c bounds it). */
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

/* Rows r0 (and r1 when two) against W x 8 query columns from j0: 2 W accumulators, one
 * load of qt per vector shared by both rows. Inlined with a constant W and ROWS, so the
 * arrays stay in registers. */
static inline __attribute__((always_inline)) void block(const float *a0, const float *a1,
                                                         uint32_t dim, const float *qt,
                                                         uint32_t m_pad, uint32_t j0, float *mx,
                                                         __m256 *bad, const int W, const int two)
{
    __m256 c0[4], c1[4];
    /* the loops over v must be unrolled for c0 and c1 to live in registers */
#pragma GCC unroll 4
    for (int v = 0; v < W; v++) c0[v] = c1[v] = _mm256_setzero_ps();
    for (uint32_t i = 0; i < dim; i++) {
        const float *qr = qt + (size_t)i * m_pad + j0;
        __m256 x0 = _mm256_broadcast_ss(a0 + i);
        __m256 x1 = two ? _mm256_broadcast_ss(a1 + i) : x0;
#pragma GCC unroll 4
        for (int v = 0; v < W; v++) {
            __m256 qv = _mm256_loadu_ps(qr + 8 * v);
            c0[v] = _mm256_fmadd_ps(x0, qv, c0[v]);
            if (two) c1[v] = _mm256_fmadd_ps(x1, qv, c1[v]);
        }
    }
#pragma GCC unroll 4
    for (int v = 0; v < W; v++) {
        __m256 m = _mm256_loadu_ps(mx + j0 + 8 * v);
        m = _mm256_max_ps(c0[v], m); /* max_ps(a, b) is b when either is NaN: see bad */
        *bad = _mm256_add_ps(*bad, _mm256_sub_ps(c0[v], c0[v]));
        if (two) {
            m = _mm256_max_ps(c1[v], m);
            *bad = _mm256_add_ps(*bad, _mm256_sub_ps(c1[v], c1[v]));
        }
        _mm256_storeu_ps(mx + j0 + 8 * v, m);
    }
}

static inline __attribute__((always_inline)) void rows_block(const float *a0, const float *a1,
                                                              uint32_t dim, const float *qt,
                                                              uint32_t m_pad, float *mx,
                                                              __m256 *bad, const int two)
{
    uint32_t j0 = 0;
    for (; j0 + 32 <= m_pad; j0 += 32) block(a0, a1, dim, qt, m_pad, j0, mx, bad, 4, two);
    switch ((m_pad - j0) / 8) {
    case 3: block(a0, a1, dim, qt, m_pad, j0, mx, bad, 3, two); break;
    case 2: block(a0, a1, dim, qt, m_pad, j0, mx, bad, 2, two); break;
    case 1: block(a0, a1, dim, qt, m_pad, j0, mx, bad, 1, two); break;
    default: break;
    }
}

void sp_maxsim_avx2(const float *rows, uint32_t n, uint32_t dim, const float *qt,
                    uint32_t m_pad, float *mx, float *bad)
{
    __m256 b = _mm256_setzero_ps();
    uint32_t r = 0;
    for (; r + 2 <= n; r += 2)
        rows_block(rows + (size_t)r * dim, rows + (size_t)(r + 1) * dim, dim, qt, m_pad, mx, &b, 1);
    if (r < n) rows_block(rows + (size_t)r * dim, NULL, dim, qt, m_pad, mx, &b, 0);
    float t[8];
    _mm256_storeu_ps(t, b);
    for (int v = 0; v < 8; v++) *bad += t[v];
}
