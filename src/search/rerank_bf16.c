/* The exact re-rank's kernel for bfloat16 vectors on CPUs with AVX-512 BF16 (rerank.h):
 * vdpbf16ps multiplies a pair of bfloat16 values of a stored row by a pair of the
 * query's and adds both products into a float32 lane, twice the multiply-adds of an FMA
 * in one instruction at the same rate (bench/RESULTS.md section 5.17), and reads the
 * stored row as it lies, without the widening to float32 that cost the float kernel a
 * fifth of its time. The products of two bfloat16 values are exact in float32, so the
 * kernel computes what the scalar reference computes on the widened rows and the query
 * rounded to bfloat16, up to the order of the additions (and with denormal inputs read
 * as zero: a product with a value below 2^-126 in magnitude is lost, which the float
 * kernel would keep). */
#include <immintrin.h>
#include <string.h>

#include "search/rerank.h"

/* Row a's stored pair of dimensions (2p, 2p + 1), broadcast: one 32-bit load. An odd
 * dimension's last value goes alone with a zero beside it (tail), never with the next
 * row's first value (a non-finite one would make a NaN of 0 x inf). */
static inline __m256bh pair_at(const uint16_t *a, uint32_t p, const int tail)
{
    uint32_t v;
    if (tail) v = a[2 * p];
    else memcpy(&v, a + 2 * p, sizeof v);
    return (__m256bh)_mm256_set1_epi32((int)v);
}

/* One pair of dimensions of R rows against W query vectors. */
static inline __attribute__((always_inline)) void step(__m256 c[16][4], const uint16_t *a,
                                                        uint32_t dim, uint32_t p,
                                                        const uint32_t *qr, const int R,
                                                        const int W, const int tail)
{
    __m256bh qv[4];
#pragma GCC unroll 4
    for (int v = 0; v < W; v++) qv[v] = (__m256bh)_mm256_loadu_si256((const __m256i *)(qr + 8 * v));
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
        __m256bh x = pair_at(a + (size_t)r * dim, p, tail);
#pragma GCC unroll 4
        for (int v = 0; v < W; v++) c[r][v] = _mm256_dpbf16_ps(c[r][v], x, qv[v]);
    }
}

/* R rows against W x 8 query columns from j0: R x W accumulators, 24 at most of the 32
 * registers AVX-512 gives 256-bit code, enough to cover the instruction's latency at two
 * a cycle with room for a load that waits. Inlined with constant R and W (see
 * rerank_avx2.c's block). */
static inline __attribute__((always_inline)) void block(const uint16_t *a, uint32_t dim,
                                                         const uint32_t *qp, uint32_t m_pad,
                                                         uint32_t j0, float *mx, __m256 *bad,
                                                         const int R, const int W)
{
    __m256 c[16][4];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < W; v++) c[r][v] = _mm256_setzero_ps();
    for (uint32_t p = 0; p < dim / 2; p++) step(c, a, dim, p, qp + (size_t)p * m_pad + j0, R, W, 0);
    if (dim % 2) step(c, a, dim, dim / 2, qp + (size_t)(dim / 2) * m_pad + j0, R, W, 1);
#pragma GCC unroll 4
    for (int v = 0; v < W; v++) {
        __m256 m = _mm256_loadu_ps(mx + j0 + 8 * v);
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            m = _mm256_max_ps(c[r][v], m); /* max_ps(a, b) is b when either is NaN: see bad */
            *bad = _mm256_add_ps(*bad, _mm256_sub_ps(c[r][v], c[r][v]));
        }
        _mm256_storeu_ps(mx + j0 + 8 * v, m);
    }
}

static inline __attribute__((always_inline)) void rows_cols(const uint16_t *rows, uint32_t n,
                                                             uint32_t dim, const uint32_t *qp,
                                                             uint32_t m_pad, uint32_t j0,
                                                             float *mx, __m256 *bad, const int W)
{
    const int R = W == 1 ? 16 : W == 2 ? 12 : W == 3 ? 8 : 6;
    uint32_t r = 0;
    for (; r + R <= n; r += R) block(rows + (size_t)r * dim, dim, qp, m_pad, j0, mx, bad, R, W);
    for (; r + 4 <= n; r += 4) block(rows + (size_t)r * dim, dim, qp, m_pad, j0, mx, bad, 4, W);
    if (r + 2 <= n) {
        block(rows + (size_t)r * dim, dim, qp, m_pad, j0, mx, bad, 2, W);
        r += 2;
    }
    if (r < n) block(rows + (size_t)r * dim, dim, qp, m_pad, j0, mx, bad, 1, W);
}

void sp_maxsim_bf16_avx512(const uint16_t *rows, uint32_t n, uint32_t dim, const uint32_t *qp,
                           uint32_t m_pad, float *mx, float *bad)
{
    __m256 b = _mm256_setzero_ps();
    uint32_t j0 = 0;
    for (; j0 + 32 <= m_pad; j0 += 32) rows_cols(rows, n, dim, qp, m_pad, j0, mx, &b, 4);
    switch ((m_pad - j0) / 8) {
    case 3: rows_cols(rows, n, dim, qp, m_pad, j0, mx, &b, 3); break;
    case 2: rows_cols(rows, n, dim, qp, m_pad, j0, mx, &b, 2); break;
    case 1: rows_cols(rows, n, dim, qp, m_pad, j0, mx, &b, 1); break;
    default: break;
    }
    float t[8];
    _mm256_storeu_ps(t, b);
    for (int v = 0; v < 8; v++) *bad += t[v];
}
