/* AVX-512 kernels (F/BW/VL/DQ + VPOPCNTDQ; REFERENCE.md 1.10), kept parallel to
 * kernels_avx2.c so that each can be read against the other.
 *
 * ip1_lut: 16 tokens per step (16-lane gathers), same per-lane order as scalar.
 * ip1_pop: one token at a time, 8 code words per masked load, VPOPCNTQ. At d = 128 only
 * 2 of 8 lanes are live; a flat layout over consecutive tokens would fill them but needs
 * n_words to divide 8. XXX: not measured (the development machine has no AVX-512).
 * ip1_pop_multi: 8 query tokens per vector against one broadcast code word (the
 * interleaved planes make those 8 words contiguous).
 * ipB_multi: unpack to centred floats, 16-wide FMA dot per query token. */
#include <immintrin.h>

#include "quant/kernels_impl.h"
#include "core/alloc.h"

#define LUT_STEP(s)                                                                            \
    do {                                                                                       \
        __m512i idx = _mm512_and_si512(_mm512_srli_epi32(word, 4 * (s)), m15);                 \
        acc = _mm512_add_ps(acc, _mm512_i32gather_ps(idx, L + 16 * (s), 4));                   \
    } while (0)

static void ip1_lut(const float *lut, uint32_t dim_pad, const uint8_t *codes, size_t n,
                    float *ip)
{
    uint32_t cb = qm_code1_bytes(dim_pad), nw = dim_pad / 32;
    const __m512i off =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32((int)cb));
    const __m512i m15 = _mm512_set1_epi32(15);
    size_t t = 0;
    for (; t + 16 <= n; t += 16) {
        const uint8_t *base = codes + t * cb;
        __m512 acc = _mm512_setzero_ps();
        for (uint32_t w = 0; w < nw; w++) {
            __m512i word = _mm512_i32gather_epi32(off, (const void *)(base + 4 * w), 1);
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
        _mm512_storeu_ps(ip + t, acc);
    }
    for (; t < n; t++) ip[t] = qm_lut_ip(lut, codes + t * cb, dim_pad);
}

static void ip1_pop(const uint64_t *planes, uint32_t W, const uint8_t *codes, size_t n,
                    uint32_t *wsum, uint32_t *pop)
{
    for (size_t t = 0; t < n; t++) {
        const uint8_t *code = codes + t * 8 * W;
        __m512i acc = _mm512_setzero_si512(), cnt = _mm512_setzero_si512();
        for (uint32_t w0 = 0; w0 < W; w0 += 8) {
            __mmask8 k = W - w0 >= 8 ? (__mmask8)0xff : (__mmask8)((1u << (W - w0)) - 1u);
            __m512i b = _mm512_maskz_loadu_epi64(k, code + 8 * w0);
            cnt = _mm512_add_epi64(cnt, _mm512_popcnt_epi64(b));
            for (uint32_t p = 0; p < 4; p++) {
                __m512i q = _mm512_maskz_loadu_epi64(k, planes + p * W + w0);
                __m512i c = _mm512_popcnt_epi64(_mm512_and_si512(b, q));
                acc = _mm512_add_epi64(acc, _mm512_sllv_epi64(c, _mm512_set1_epi64(p)));
            }
        }
        wsum[t] = (uint32_t)_mm512_reduce_add_epi64(acc);
        pop[t] = (uint32_t)_mm512_reduce_add_epi64(cnt);
    }
}

static void ip1_pop_multi(const uint64_t *pt, size_t mp, uint32_t m, uint32_t W,
                          const uint8_t *codes, size_t n, uint32_t *wsum, uint32_t *pop)
{
    for (size_t t = 0; t < n; t++) {
        const uint8_t *code = codes + t * 8 * W;
        for (uint32_t j0 = 0; j0 < m; j0 += 8) {
            __m512i acc = _mm512_setzero_si512();
            for (uint32_t w = 0; w < W; w++) {
                __m512i bb = _mm512_set1_epi64((long long)qk_load64(code + 8 * w));
                const uint64_t *p = pt + (size_t)w * 4 * mp + j0;
                for (uint32_t pl = 0; pl < 4; pl++) {
                    __m512i q = _mm512_loadu_si512((const void *)(p + pl * mp));
                    __m512i c = _mm512_popcnt_epi64(_mm512_and_si512(bb, q));
                    acc = _mm512_add_epi64(acc, _mm512_sllv_epi64(c, _mm512_set1_epi64(pl)));
                }
            }
            uint32_t left = m - j0;
            __mmask8 k = left >= 8 ? (__mmask8)0xff : (__mmask8)((1u << left) - 1u);
            _mm256_mask_storeu_epi32(wsum + t * m + j0, k, _mm512_cvtepi64_epi32(acc));
        }
        pop[t] = qk_popcount_code(code, W);
    }
}

static void unpackB(const uint8_t *code, uint32_t bits, uint32_t d, float *u)
{
    const __m512 off = _mm512_set1_ps(qm_codeB_offset(bits));
    if (bits <= 4) {
        const __m128i m4 = _mm_set1_epi8(0x0f);
        for (uint32_t i = 0; i < d; i += 32) {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(code + i / 2));
            __m128i lo = _mm_and_si128(x, m4), hi = _mm_and_si128(_mm_srli_epi16(x, 4), m4);
            __m128i a = _mm_unpacklo_epi8(lo, hi), b = _mm_unpackhi_epi8(lo, hi);
            __m512 fa = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(a));
            __m512 fb = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
            _mm512_storeu_ps(u + i, _mm512_sub_ps(fa, off));
            _mm512_storeu_ps(u + i + 16, _mm512_sub_ps(fb, off));
        }
    } else {
        for (uint32_t i = 0; i < d; i += 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(code + i));
            __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(x));
            _mm512_storeu_ps(u + i, _mm512_sub_ps(f, off));
        }
    }
}

static float dot(const float *a, const float *b, uint32_t d)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    for (uint32_t i = 0; i < d; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static void ipB_multi(const float *q, uint32_t m, uint32_t dim_pad, uint32_t bits,
                      const uint8_t *codes, size_t n, float *ip)
{
    _Alignas(64) float u[QUANT_DIM_MAX];
    uint32_t cb = qm_codeB_bytes(dim_pad, bits);
    for (size_t t = 0; t < n; t++) {
        unpackB(codes + t * cb, bits, dim_pad, u);
        for (uint32_t j = 0; j < m; j++) ip[t * m + j] = dot(u, q + (size_t)j * dim_pad, dim_pad);
    }
}

const quant_kernels quant_kernels_avx512 = {"avx512", ip1_lut, ip1_pop, ip1_pop_multi,
                                            ipB_multi};
