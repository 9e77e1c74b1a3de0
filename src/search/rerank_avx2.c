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

/* R rows (a, one every dim floats) against W x 8 query columns from j0: R x W
 * accumulators, one load of qt per vector shared by the R rows. An FMA waits for the
 * previous one on its accumulator (4 cycles) and two issue per cycle, so the kernel
 * needs at least 8 independent accumulators to run at its peak (with two, a 12-token
 * query ran at a quarter of it); it takes 12, R = 12 / W rows at a time, which leaves a
 * load that waits on memory some slack (with 8 and the next block fetched ahead, 5-7%
 * slower). 12 accumulators, W query vectors and a broadcast fit the 16 registers.
 * Inlined with constant R and W, so the arrays stay in registers. */
static inline __attribute__((always_inline)) void block(const float *a, uint32_t dim,
                                                         const float *qt, uint32_t m_pad,
                                                         uint32_t j0, float *mx, __m256 *bad,
                                                         const int R, const int W)
{
    __m256 c[12][4];
    /* the loops must be unrolled for c to live in registers */
#pragma GCC unroll 12
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < W; v++) c[r][v] = _mm256_setzero_ps();
    for (uint32_t i = 0; i < dim; i++) {
        const float *qr = qt + (size_t)i * m_pad + j0;
        __m256 qv[4];
#pragma GCC unroll 4
        for (int v = 0; v < W; v++) qv[v] = _mm256_loadu_ps(qr + 8 * v);
#pragma GCC unroll 12
        for (int r = 0; r < R; r++) {
            __m256 x = _mm256_broadcast_ss(a + (size_t)r * dim + i);
#pragma GCC unroll 4
            for (int v = 0; v < W; v++) c[r][v] = _mm256_fmadd_ps(x, qv[v], c[r][v]);
        }
    }
#pragma GCC unroll 4
    for (int v = 0; v < W; v++) {
        __m256 m = _mm256_loadu_ps(mx + j0 + 8 * v);
#pragma GCC unroll 12
        for (int r = 0; r < R; r++) {
            m = _mm256_max_ps(c[r][v], m); /* max_ps(a, b) is b when either is NaN: see bad */
            *bad = _mm256_add_ps(*bad, _mm256_sub_ps(c[r][v], c[r][v]));
        }
        _mm256_storeu_ps(mx + j0 + 8 * v, m);
    }
}

/* n rows against W x 8 columns from j0: 12 / W rows at a time, the rest by fours, two
 * and one. */
static inline __attribute__((always_inline)) void rows_cols(const float *rows, uint32_t n,
                                                             uint32_t dim, const float *qt,
                                                             uint32_t m_pad, uint32_t j0,
                                                             float *mx, __m256 *bad, const int W)
{
    const int R = W == 1 ? 12 : W == 2 ? 6 : W == 3 ? 4 : 3;
    uint32_t r = 0;
    for (; r + R <= n; r += R) block(rows + (size_t)r * dim, dim, qt, m_pad, j0, mx, bad, R, W);
    if (R > 4)
        for (; r + 4 <= n; r += 4) block(rows + (size_t)r * dim, dim, qt, m_pad, j0, mx, bad, 4, W);
    if (R > 2 && r + 2 <= n) {
        block(rows + (size_t)r * dim, dim, qt, m_pad, j0, mx, bad, 2, W);
        r += 2;
    }
    if (r < n) block(rows + (size_t)r * dim, dim, qt, m_pad, j0, mx, bad, 1, W);
}

void sp_maxsim_avx2(const float *rows, uint32_t n, uint32_t dim, const float *qt,
                    uint32_t m_pad, float *mx, float *bad)
{
    __m256 b = _mm256_setzero_ps();
    uint32_t j0 = 0;
    for (; j0 + 32 <= m_pad; j0 += 32) rows_cols(rows, n, dim, qt, m_pad, j0, mx, &b, 4);
    switch ((m_pad - j0) / 8) {
    case 3: rows_cols(rows, n, dim, qt, m_pad, j0, mx, &b, 3); break;
    case 2: rows_cols(rows, n, dim, qt, m_pad, j0, mx, &b, 2); break;
    case 1: rows_cols(rows, n, dim, qt, m_pad, j0, mx, &b, 1); break;
    default: break;
    }
    float t[8];
    _mm256_storeu_ps(t, b);
    for (int v = 0; v < 8; v++) *bad += t[v];
}
