/* AVX2 kernels (REFERENCE.md 1.10), compiled with -mavx2 -mfma -mpopcnt (cmake/Simd.cmake).
 *
 * ip1_lut: 8 tokens per step; one 32-bit gather fetches word w (groups 8w..8w+7) of the
 * 8 codes, then 8 float gathers from the LUT. Each lane adds its groups in the scalar
 * order, so the result equals the scalar reference bit for bit. The codes are per-token
 * (the GPU's layout), which rules out FastScan's pshufb-on-transposed-batches; on this
 * layout gathers are the only vector LUT form, and they lose to popcount (bench).
 * ip1_pop / ip1_pop_multi: the shared per-token body with the POPCNT instruction. A
 * pshufb nibble-count vectorisation was not tried: POPCNT already retires 1-4 per cycle
 * and the loop is a handful of them per 64 dims.
 * ipB_multi: the token is unpacked once to centred floats, then one 8-wide FMA dot per
 * query token (float sums in another order than scalar: tested with a tolerance). */
#include <immintrin.h>

#include "quant/kernels_impl.h"
#include "core/alloc.h"

#define LUT_STEP(s)                                                                            \
    do {                                                                                       \
        __m256i idx = _mm256_and_si256(_mm256_srli_epi32(word, 4 * (s)), m15);                 \
        acc = _mm256_add_ps(acc, _mm256_i32gather_ps(L + 16 * (s), idx, 4));                   \
    } while (0)

static void ip1_lut(const float *lut, uint32_t dim_pad, const uint8_t *codes, size_t n,
                    float *ip)
{
    uint32_t cb = qm_code1_bytes(dim_pad), nw = dim_pad / 32;
    const __m256i off = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                           _mm256_set1_epi32((int)cb));
    const __m256i m15 = _mm256_set1_epi32(15);
    size_t t = 0;
    for (; t + 8 <= n; t += 8) {
        const uint8_t *base = codes + t * cb;
        __m256 acc = _mm256_setzero_ps();
        for (uint32_t w = 0; w < nw; w++) {
            __m256i word = _mm256_i32gather_epi32((const int *)(const void *)(base + 4 * w), off, 1);
            const float *L = lut + (size_t)w * 128;
            LUT_STEP(0);
            LUT_STEP(1);
            LUT_STEP(2);
            LUT_STEP(3);
            LUT_STEP(4);
            LUT_STEP(5);
            LUT_STEP(6);
            LUT_STEP(7);
        }
        _mm256_storeu_ps(ip + t, acc);
    }
    for (; t < n; t++) ip[t] = qm_lut_ip(lut, codes + t * cb, dim_pad);
}

static void ip1_pop(const uint64_t *planes, uint32_t W, const uint8_t *codes, size_t n,
                    uint32_t *wsum, uint32_t *pop)
{
    for (size_t t = 0; t < n; t++) qk_pop_one(planes, W, codes + t * 8 * W, &wsum[t], &pop[t]);
}

static void ip1_pop_multi(const uint64_t *pt, size_t mp, uint32_t m, uint32_t W,
                          const uint8_t *codes, size_t n, uint32_t *wsum, uint32_t *pop)
{
    for (size_t t = 0; t < n; t++) {
        const uint8_t *code = codes + t * 8 * W;
        qk_pop_multi_one(pt, mp, 0, m, W, code, wsum + t * m);
        pop[t] = qk_popcount_code(code, W);
    }
}

/* u[0..d) = T_i - offset, 32 dims per step for nibbles, 8 for bytes. */
static void unpackB(const uint8_t *code, uint32_t bits, uint32_t d, float *u)
{
    const __m256 off = _mm256_set1_ps(qm_codeB_offset(bits));
    if (bits <= 4) {
        const __m128i m4 = _mm_set1_epi8(0x0f);
        for (uint32_t i = 0; i < d; i += 32) {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(code + i / 2));
            __m128i lo = _mm_and_si128(x, m4), hi = _mm_and_si128(_mm_srli_epi16(x, 4), m4);
            __m128i a = _mm_unpacklo_epi8(lo, hi), b = _mm_unpackhi_epi8(lo, hi);
            __m128i parts[4] = {a, _mm_srli_si128(a, 8), b, _mm_srli_si128(b, 8)};
            for (int k = 0; k < 4; k++) {
                __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k]));
                _mm256_storeu_ps(u + i + 8 * k, _mm256_sub_ps(f, off));
            }
        }
    } else {
        for (uint32_t i = 0; i < d; i += 8) {
            __m128i x = _mm_loadl_epi64((const __m128i *)(const void *)(code + i));
            __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(x));
            _mm256_storeu_ps(u + i, _mm256_sub_ps(f, off));
        }
    }
}

static float dot(const float *a, const float *b, uint32_t d)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    for (uint32_t i = 0; i < d; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    __m256 s = _mm256_add_ps(s0, s1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

static void ipB_multi(const float *q, uint32_t m, uint32_t dim_pad, uint32_t bits,
                      const uint8_t *codes, size_t n, float *ip)
{
    _Alignas(32) float u[QUANT_DIM_MAX];
    uint32_t cb = qm_codeB_bytes(dim_pad, bits);
    for (size_t t = 0; t < n; t++) {
        unpackB(codes + t * cb, bits, dim_pad, u);
        for (uint32_t j = 0; j < m; j++) ip[t * m + j] = dot(u, q + (size_t)j * dim_pad, dim_pad);
    }
}

const quant_kernels quant_kernels_avx2 = {"avx2", ip1_lut, ip1_pop, ip1_pop_multi, ipB_multi};
