/* AVX-512 kernels (F/BW/VL/DQ + VPOPCNTDQ; docs/algorithms.md §1.7), kept parallel to
 * kernels_avx2.c so that each can be read against the other.
 *
 * ip1_lut: 16 tokens per step (16-lane gathers), same per-lane order as scalar.
 * ip1_pop: VPOPCNTQ over 8/W consecutive tokens per load when W divides 8 (d = 64,
 * 128, 256, 512), else one token at a time (measured in bench/bench_quant.c).
 * ip1_pop_multi: 8 query tokens per vector against one broadcast code word (the
 * interleaved planes make those 8 words contiguous).
 * doc1_lut_max: the 1-bit doc shape on the query-interleaved LUT, 16 query tokens per
 * vector (see its section).
 * ipB_multi: unpack to centred floats, then 16-wide FMA dots, eight query tokens at a
 * time sharing each load of the token (see its section).
 * ipB4_q8, docB_q8_max, doc1_q8_max: nibble and byte codes and 1-bit planes against
 * the 8-bit query with VNNI vpdpbusd, 16 query tokens per vector, or for a query of at most 8
 * tokens two document tokens per vector (see their section). */
#include <immintrin.h>
#include <string.h>

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

/* One token at a time: 8 code words per masked load (used when W does not divide 8,
 * e.g. d = 192 or 320). */
static void ip1_pop_wide(const uint64_t *planes, uint32_t W, const uint8_t *codes, size_t n,
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

/* W in {1, 2, 4, 8} (d = 64, 128, 256, 512): codes are contiguous, so one 64-byte load
 * holds 8/W whole tokens and every lane is live (one token per load left 6 of 8 lanes
 * idle at d = 128 and ran slower than AVX2's scalar POPCNT). The query planes are
 * repeated to match (lane l holds word l % W), and each token's W lane sums are added
 * after the loop. The last load is masked to the words that exist. */
static void ip1_pop(const uint64_t *planes, uint32_t W, const uint8_t *codes, size_t n,
                    uint32_t *wsum, uint32_t *pop)
{
    if (W > 8 || 8 % W != 0) {
        ip1_pop_wide(planes, W, codes, n, wsum, pop);
        return;
    }
    const uint32_t per = 8 / W;
    const __m512i idx = _mm512_and_si512(_mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7),
                                         _mm512_set1_epi64((long long)W - 1));
    const __mmask8 kw = (__mmask8)((1u << W) - 1u);
    __m512i q[4];
    for (uint32_t p = 0; p < 4; p++)
        q[p] = _mm512_permutexvar_epi64(idx, _mm512_maskz_loadu_epi64(kw, planes + p * W));
    _Alignas(64) uint64_t sa[8], sc[8];
    for (size_t t = 0; t < n; t += per) {
        size_t nt = n - t < per ? n - t : per;
        __mmask8 k = nt == per ? (__mmask8)0xff : (__mmask8)((1u << (nt * W)) - 1u);
        __m512i b = _mm512_maskz_loadu_epi64(k, codes + t * 8 * W);
        __m512i acc = _mm512_popcnt_epi64(_mm512_and_si512(b, q[0]));
        acc = _mm512_add_epi64(
            acc, _mm512_slli_epi64(_mm512_popcnt_epi64(_mm512_and_si512(b, q[1])), 1));
        acc = _mm512_add_epi64(
            acc, _mm512_slli_epi64(_mm512_popcnt_epi64(_mm512_and_si512(b, q[2])), 2));
        acc = _mm512_add_epi64(
            acc, _mm512_slli_epi64(_mm512_popcnt_epi64(_mm512_and_si512(b, q[3])), 3));
        _mm512_store_si512((void *)sa, acc);
        _mm512_store_si512((void *)sc, _mm512_popcnt_epi64(b));
        for (size_t i = 0; i < nt; i++) {
            uint64_t s = 0, c = 0;
            for (uint32_t w = 0; w < W; w++) {
                s += sa[i * W + w];
                c += sc[i * W + w];
            }
            wsum[t + i] = (uint32_t)s;
            pop[t + i] = (uint32_t)c;
        }
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

/* ---- doc shape on the query-interleaved LUT (parallel to kernels_avx2.c) ----
 * 64 query tokens per chunk (NV <= 4 vectors of 16); every load is masked to j < m, which
 * also keeps a last half vector (m_pad % 16 == 8) inside the table. */

static inline __attribute__((always_inline)) void
doc1_chunk(const float *T, uint32_t mp, uint32_t G, uint32_t cb, const uint8_t *codes,
           const quant_f1 *f1, size_t n, const uint32_t *cid, const float *cscore, size_t ld,
           float *out_max, uint32_t j0, uint32_t left, const int NV)
{
    __mmask16 mask[4];
    __m512 mx[4];
    _Pragma("GCC unroll 4")
    for (int v = 0; v < NV; v++) {
        uint32_t l = left - 16u * (uint32_t)v;
        mask[v] = l >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << l) - 1u);
        mx[v] = _mm512_maskz_loadu_ps(mask[v], out_max + j0 + 16 * v);
    }
    /* off[nib]: the row of a nibble within its group (indexing beats a multiply). */
    size_t off[16];
    for (unsigned v = 0; v < 16; v++) off[v] = (size_t)v * mp;
    const float *Tj = T + j0;
    size_t t = 0;
    for (; t + 2 <= n; t += 2) {
        /* the S rows of the pair after next (see prefetch_rows) */
        if (t + 5 < n) {
            _mm_prefetch((const char *)(cscore + (size_t)cid[t + 4] * ld + j0), _MM_HINT_T0);
            _mm_prefetch((const char *)(cscore + (size_t)cid[t + 5] * ld + j0), _MM_HINT_T0);
        }
        const uint8_t *c0 = codes + t * cb, *c1 = c0 + cb;
        __m512 a0[4], a1[4];
        _Pragma("GCC unroll 4")
        for (int v = 0; v < NV; v++) a0[v] = a1[v] = _mm512_setzero_ps();
        const float *Tg = Tj;
        for (uint32_t k = 0; k < cb; k++, Tg += 32 * (size_t)mp) {
            unsigned b0 = c0[k], b1 = c1[k];
            const float *r0 = Tg + off[b0 & 15u], *r1 = Tg + off[b1 & 15u];
            _Pragma("GCC unroll 4")
            for (int v = 0; v < NV; v++) {
                a0[v] = _mm512_add_ps(a0[v], _mm512_maskz_loadu_ps(mask[v], r0 + 16 * v));
                a1[v] = _mm512_add_ps(a1[v], _mm512_maskz_loadu_ps(mask[v], r1 + 16 * v));
            }
            r0 = Tg + 16 * (size_t)mp + off[b0 >> 4];
            r1 = Tg + 16 * (size_t)mp + off[b1 >> 4];
            _Pragma("GCC unroll 4")
            for (int v = 0; v < NV; v++) {
                a0[v] = _mm512_add_ps(a0[v], _mm512_maskz_loadu_ps(mask[v], r0 + 16 * v));
                a1[v] = _mm512_add_ps(a1[v], _mm512_maskz_loadu_ps(mask[v], r1 + 16 * v));
            }
        }
        _Pragma("GCC unroll 4")
        for (int k = 0; k < 2; k++) {
            const quant_f1 *f = &f1[t + k];
            __m512 al = _mm512_set1_ps(qm_f16_to_f32(f->alpha));
            __m512 ka = _mm512_set1_ps(qm_f16_to_f32(f->kappa));
            const float *cs = cscore + (size_t)cid[t + k] * ld + j0;
            _Pragma("GCC unroll 4")
            for (int v = 0; v < NV; v++) {
                __m512 q = _mm512_maskz_loadu_ps(mask[v], cs + 16 * v);
                __m512 e = _mm512_add_ps(_mm512_add_ps(q, al),
                                         _mm512_mul_ps(ka, k ? a1[v] : a0[v]));
                mx[v] = _mm512_max_ps(e, mx[v]);
            }
        }
    }
    for (; t < n; t++) {
        const uint8_t *c0 = codes + t * cb;
        __m512 a0[4];
        _Pragma("GCC unroll 4")
        for (int v = 0; v < NV; v++) a0[v] = _mm512_setzero_ps();
        for (uint32_t g = 0; g < G; g++) {
            const float *r0 = Tj + (size_t)(16 * g + ((c0[g >> 1] >> ((g & 1) * 4)) & 15u)) * mp;
            _Pragma("GCC unroll 4")
            for (int v = 0; v < NV; v++)
                a0[v] = _mm512_add_ps(a0[v], _mm512_maskz_loadu_ps(mask[v], r0 + 16 * v));
        }
        __m512 al = _mm512_set1_ps(qm_f16_to_f32(f1[t].alpha));
        __m512 ka = _mm512_set1_ps(qm_f16_to_f32(f1[t].kappa));
        const float *cs = cscore + (size_t)cid[t] * ld + j0;
        _Pragma("GCC unroll 4")
        for (int v = 0; v < NV; v++) {
            __m512 q = _mm512_maskz_loadu_ps(mask[v], cs + 16 * v);
            __m512 e = _mm512_add_ps(_mm512_add_ps(q, al), _mm512_mul_ps(ka, a0[v]));
            mx[v] = _mm512_max_ps(e, mx[v]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int v = 0; v < NV; v++) _mm512_mask_storeu_ps(out_max + j0 + 16 * v, mask[v], mx[v]);
}

static void doc1_lut_max(const float *T, uint32_t mp, uint32_t m, uint32_t dim_pad,
                         const uint8_t *codes, const quant_f1 *f1, size_t n, const uint32_t *cid,
                         const float *cscore, size_t ld, float *out_max)
{
    uint32_t G = dim_pad / 4, cb = qm_code1_bytes(dim_pad);
    for (uint32_t j0 = 0; j0 < m; j0 += 64) {
        uint32_t left = m - j0, nv = left >= 64 ? 4 : (left + 15) / 16;
        switch (nv) {
        case 4: doc1_chunk(T, mp, G, cb, codes, f1, n, cid, cscore, ld, out_max, j0, left, 4); break;
        case 3: doc1_chunk(T, mp, G, cb, codes, f1, n, cid, cscore, ld, out_max, j0, left, 3); break;
        case 2: doc1_chunk(T, mp, G, cb, codes, f1, n, cid, cscore, ld, out_max, j0, left, 2); break;
        default: doc1_chunk(T, mp, G, cb, codes, f1, n, cid, cscore, ld, out_max, j0, left, 1); break;
        }
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

/* The sums of 8 vectors, one per lane of the result: each is folded to 8 lanes, then
 * three rounds of pairwise horizontal adds (25 instructions where 8 separate reductions
 * take about 80). */
static inline __m256 sum8(const __m512 *a)
{
    __m256 h[8];
    _Pragma("GCC unroll 8")
    for (int k = 0; k < 8; k++)
        h[k] = _mm256_add_ps(_mm512_castps512_ps256(a[k]),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[k]), 1)));
    __m256 s01 = _mm256_hadd_ps(h[0], h[1]), s23 = _mm256_hadd_ps(h[2], h[3]);
    __m256 s45 = _mm256_hadd_ps(h[4], h[5]), s67 = _mm256_hadd_ps(h[6], h[7]);
    __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
    return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                         _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

/* Eight query tokens at a time against one unpacked token: every load of u serves eight
 * FMA chains (which also hide the FMA latency), and the eight sums are reduced together
 * (sum8). The last m % 8 query tokens take one dot each. */
static void ipB_multi(const float *q, uint32_t m, uint32_t dim_pad, uint32_t bits,
                      const uint8_t *codes, size_t n, float *ip)
{
    _Alignas(64) float u[QUANT_DIM_MAX];
    uint32_t cb = qm_codeB_bytes(dim_pad, bits);
    for (size_t t = 0; t < n; t++) {
        unpackB(codes + t * cb, bits, dim_pad, u);
        uint32_t j = 0;
        for (; j + 8 <= m; j += 8) {
            const float *qj = q + (size_t)j * dim_pad;
            __m512 acc[8];
            _Pragma("GCC unroll 8")
            for (int k = 0; k < 8; k++) acc[k] = _mm512_setzero_ps();
            for (uint32_t i = 0; i < dim_pad; i += 16) {
                __m512 x = _mm512_load_ps(u + i);
                _Pragma("GCC unroll 8")
                for (int k = 0; k < 8; k++)
                    acc[k] = _mm512_fmadd_ps(x, _mm512_loadu_ps(qj + (size_t)k * dim_pad + i), acc[k]);
            }
            _mm256_storeu_ps(ip + t * m + j, sum8(acc));
        }
        for (; j < m; j++) ip[t * m + j] = dot(u, q + (size_t)j * dim_pad, dim_pad);
    }
}

/* ---- the 8-bit query (VNNI) ----
 * Query tokens are the lanes: 16 per vector, 32 per chunk (NV <= 2), and a block of
 * QUANT_Q8_BLOCK = 8 document tokens shares each load of a query group row, so the
 * inner step is 2 row loads and 16 vpdpbusd whose signed operand is one token's group,
 * a 4-byte broadcast from the unpacked block (16 accumulators + 2 rows fit the 32
 * registers). One vpdpbusd is 64 byte MACs; at d = 128, m = 32 a token costs 64 of them,
 * against 256 float FMAs in ipB_multi. No horizontal sums: the accumulators are already
 * the [t][j] results, and the estimate epilogue runs on them lane-wise in the scalar
 * order. A block short of 8 tokens computes on zeroed rows and stores only its own.
 * Nibble codes unpack with an and, a shift and a byte interleave; byte codes (B >= 5)
 * with one xor per 64 dims (T - 128: |product| <= 255 * 128, four to a 32-bit lane);
 * 1-bit planes with one vpmovm2b per 64 dims (a set bit becomes the byte -1). */

/* The block's n (<= 8) nibble codes into u[8][d] (qk_unpackB_s8); rows >= n zeroed. */
static void unpack4_block(const uint8_t *codes, uint32_t d, size_t n, int8_t *u, int32_t *st)
{
    const __m256i m4 = _mm256_set1_epi8(15), e8 = _mm256_set1_epi8(8), z = _mm256_setzero_si256();
    uint32_t cb = d / 2;
    for (size_t t = 0; t < QUANT_Q8_BLOCK; t++) {
        int8_t *ut = u + t * d;
        if (t >= n) {
            memset(ut, 0, d);
            st[t] = 0;
            continue;
        }
        __m256i s = z;
        for (uint32_t c = 0; c < d / 64; c++) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(codes + t * cb + 32 * c));
            __m256i lo = _mm256_and_si256(x, m4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
            s = _mm256_add_epi64(s, _mm256_add_epi64(_mm256_sad_epu8(lo, z), _mm256_sad_epu8(hi, z)));
            /* per 128-bit lane: a = dims of bytes 0-7 (16-23), b = bytes 8-15 (24-31) */
            __m256i a = _mm256_unpacklo_epi8(lo, hi), b = _mm256_unpackhi_epi8(lo, hi);
            __m256i d0 = _mm256_permute2x128_si256(a, b, 0x20), d1 = _mm256_permute2x128_si256(a, b, 0x31);
            _mm256_store_si256((__m256i *)(void *)(ut + 64 * c), _mm256_sub_epi8(d0, e8));
            _mm256_store_si256((__m256i *)(void *)(ut + 64 * c + 32), _mm256_sub_epi8(d1, e8));
        }
        __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        st[t] = (int32_t)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1));
    }
}

/* The block's n (<= 8) byte codes into u[8][d] (qk_unpackB_s8: T - 128, one xor per 64
 * dims); rows >= n zeroed. */
static void unpack8_block(const uint8_t *codes, uint32_t d, size_t n, int8_t *u, int32_t *st)
{
    const __m512i flip = _mm512_set1_epi8((char)0x80), z = _mm512_setzero_si512();
    for (size_t t = 0; t < QUANT_Q8_BLOCK; t++) {
        int8_t *ut = u + t * d;
        if (t >= n) {
            memset(ut, 0, d);
            st[t] = 0;
            continue;
        }
        __m512i s = z;
        for (uint32_t c = 0; c < d / 64; c++) {
            __m512i x = _mm512_loadu_si512((const void *)(codes + t * d + 64 * c));
            s = _mm512_add_epi64(s, _mm512_sad_epu8(x, z));
            _mm512_store_si512((void *)(ut + 64 * c), _mm512_xor_si512(x, flip));
        }
        st[t] = (int32_t)_mm512_reduce_add_epi64(s);
    }
}

/* The block's n (<= 8) B-bit codes into u[8][d]: nibble codes (B <= 4) or byte codes. */
static void unpackB_block(uint32_t bits, const uint8_t *codes, uint32_t d, size_t n, int8_t *u,
                          int32_t *st)
{
    if (bits <= 4) unpack4_block(codes, d, n, u, st);
    else unpack8_block(codes, d, n, u, st);
}

/* The block's n (<= 8) 1-bit planes into u[8][d] (qk_unpack1_s8); rows >= n zeroed. */
static void unpack1_block(const uint8_t *codes, uint32_t d, size_t n, int8_t *u, int32_t *st)
{
    uint32_t cb = d / 8;
    for (size_t t = 0; t < QUANT_Q8_BLOCK; t++) {
        int8_t *ut = u + t * d;
        if (t >= n) {
            memset(ut, 0, d);
            st[t] = 0;
            continue;
        }
        int32_t pc = 0;
        for (uint32_t w = 0; w < d / 64; w++) {
            uint64_t x = qk_load64(codes + t * cb + 8 * w);
            pc += (int32_t)__builtin_popcountll(x);
            _mm512_store_si512((void *)(ut + 64 * w), _mm512_movm_epi8((__mmask64)x));
        }
        st[t] = pc;
    }
}

static inline int32_t load_i32(const int8_t *p)
{
    int32_t x;
    memcpy(&x, p, sizeof x);
    return x;
}

/* acc[t][v] = the block's sums for query lanes j0 + 16 v + (0..15). */
static inline __attribute__((always_inline)) void
q8_block(const uint8_t *qt, uint32_t mp, uint32_t d, const int8_t *u, uint32_t j0,
         const __mmask16 *mask, __m512i acc[QUANT_Q8_BLOCK][2], const int NV)
{
    /* a local array (kept in registers), copied out once: accumulating into acc[]
     * directly made the compiler store every update to the caller's memory (2.5x) */
    __m512i c[QUANT_Q8_BLOCK][2];
    _Pragma("GCC unroll 8")
    for (int t = 0; t < QUANT_Q8_BLOCK; t++)
        _Pragma("GCC unroll 2")
        for (int v = 0; v < NV; v++) c[t][v] = _mm512_setzero_si512();
    const uint8_t *row = qt + (size_t)j0 * 4;
    for (uint32_t g = 0; g < d / 4; g++, row += (size_t)mp * 4) {
        __m512i q[2];
        _Pragma("GCC unroll 2")
        for (int v = 0; v < NV; v++) q[v] = _mm512_maskz_loadu_epi32(mask[v], row + 64 * v);
        _Pragma("GCC unroll 8")
        for (int t = 0; t < QUANT_Q8_BLOCK; t++) {
            __m512i b = _mm512_set1_epi32(load_i32(u + (size_t)t * d + 4 * g));
            _Pragma("GCC unroll 2")
            for (int v = 0; v < NV; v++) c[t][v] = _mm512_dpbusd_epi32(c[t][v], q[v], b);
        }
    }
    _Pragma("GCC unroll 8")
    for (int t = 0; t < QUANT_Q8_BLOCK; t++)
        _Pragma("GCC unroll 2")
        for (int v = 0; v < NV; v++) acc[t][v] = c[t][v];
}

static inline void q8_masks(uint32_t left, __mmask16 *mask)
{
    for (uint32_t v = 0; v < 2; v++) {
        uint32_t l = left > 16 * v ? left - 16 * v : 0;
        mask[v] = l >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << l) - 1u);
    }
}

/* a[t*m + j] for the nb (<= QUANT_Q8_BLOCK) tokens of one block u, every query token,
 * 32 at a time. */
static inline void q8_sums(const uint8_t *qt, uint32_t mp, uint32_t m, uint32_t d,
                           const int8_t *u, size_t nb, int32_t *a)
{
    for (uint32_t j0 = 0; j0 < m; j0 += 32) {
        __mmask16 mask[2];
        q8_masks(m - j0, mask);
        __m512i acc[QUANT_Q8_BLOCK][2];
        if (m - j0 > 16) q8_block(qt, mp, d, u, j0, mask, acc, 2);
        else q8_block(qt, mp, d, u, j0, mask, acc, 1);
        for (size_t t = 0; t < nb; t++)
            for (int v = 0; v < 2 && mask[v]; v++)
                _mm512_mask_storeu_epi32(a + t * m + j0 + 16 * v, mask[v], acc[t][v]);
    }
}

static void ipB4_q8(const uint8_t *qt, uint32_t mp, uint32_t m, uint32_t d, const uint8_t *codes,
                    size_t n, int32_t *a, int32_t *st)
{
    _Alignas(64) int8_t u[QUANT_Q8_BLOCK * QUANT_DIM_MAX];
    int32_t sb[QUANT_Q8_BLOCK];
    for (size_t t0 = 0; t0 < n; t0 += QUANT_Q8_BLOCK) {
        size_t nb = n - t0 < QUANT_Q8_BLOCK ? n - t0 : QUANT_Q8_BLOCK;
        unpack4_block(codes + t0 * (d / 2), d, nb, u, sb);
        for (size_t t = 0; t < nb; t++) st[t0 + t] = sb[t];
        q8_sums(qt, mp, m, d, u, nb, a + t0 * m);
    }
}

/* One block's estimates for query lanes [j0, j0 + 16 NV), max-accumulated: the scalar
 * q8_est_max lane by lane. al, ka, ys: the tokens' alpha, kappa and ysum; hsq: per query
 * token; neg: the 1-bit form (a = -A). */
static inline __attribute__((always_inline)) void
q8_chunk(const quant_qset *qs, const int8_t *u, size_t nb, const float *al, const float *ka,
         const float *ys, const float *hsq, const int neg, const uint32_t *cid,
         const float *cscore, size_t ld, float *out_max, uint32_t j0, const int NV)
{
    __mmask16 mask[2];
    q8_masks(qs->m - j0, mask);
    __m512i acc[QUANT_Q8_BLOCK][2];
    q8_block(qs->q8_t, qs->m_pad, qs->dim_pad, u, j0, mask, acc, NV);
    __m512 dl[2], lo[2], hs[2], mx[2];
    _Pragma("GCC unroll 2")
    for (int v = 0; v < NV; v++) {
        size_t j = j0 + 16 * (size_t)v;
        dl[v] = _mm512_maskz_loadu_ps(mask[v], qs->q8_delta + j);
        lo[v] = _mm512_maskz_loadu_ps(mask[v], qs->q8_lo + j);
        hs[v] = _mm512_maskz_loadu_ps(mask[v], hsq + j);
        mx[v] = _mm512_maskz_loadu_ps(mask[v], out_max + j);
    }
    for (size_t t = 0; t < nb; t++) {
        __m512 y = _mm512_set1_ps(ys[t]), a = _mm512_set1_ps(al[t]), k = _mm512_set1_ps(ka[t]);
        const float *cs = cscore + (size_t)cid[t] * ld + j0;
        _Pragma("GCC unroll 2")
        for (int v = 0; v < NV; v++) {
            __m512i av = neg ? _mm512_sub_epi32(_mm512_setzero_si512(), acc[t][v]) : acc[t][v];
            __m512 x = _mm512_add_ps(_mm512_cvtepi32_ps(av), hs[v]);
            __m512 ip = _mm512_add_ps(_mm512_mul_ps(dl[v], x), _mm512_mul_ps(lo[v], y));
            __m512 c = _mm512_maskz_loadu_ps(mask[v], cs + 16 * v);
            __m512 e = _mm512_add_ps(_mm512_add_ps(c, a), _mm512_mul_ps(k, ip));
            mx[v] = _mm512_max_ps(e, mx[v]);
        }
    }
    _Pragma("GCC unroll 2")
    for (int v = 0; v < NV; v++) _mm512_mask_storeu_ps(out_max + j0 + 16 * v, mask[v], mx[v]);
}

static inline void q8_chunks(const quant_qset *qs, const int8_t *u, size_t nb, const float *al,
                             const float *ka, const float *ys, const float *hsq, int neg,
                             const uint32_t *cid, const float *cscore, size_t ld, float *out_max)
{
    for (uint32_t j0 = 0; j0 < qs->m; j0 += 32) {
        int two = qs->m - j0 > 16;
        if (neg && two) q8_chunk(qs, u, nb, al, ka, ys, hsq, 1, cid, cscore, ld, out_max, j0, 2);
        else if (neg) q8_chunk(qs, u, nb, al, ka, ys, hsq, 1, cid, cscore, ld, out_max, j0, 1);
        else if (two) q8_chunk(qs, u, nb, al, ka, ys, hsq, 0, cid, cscore, ld, out_max, j0, 2);
        else q8_chunk(qs, u, nb, al, ka, ys, hsq, 0, cid, cscore, ld, out_max, j0, 1);
    }
}

/* The S rows (cscore + cid[t] * ld) of the block of tokens from t0: random reads of a
 * matrix of K rows that outgrows the caches at large K, where the load in the estimate
 * epilogue stalled a quarter of these kernels' time; fetched one block ahead. */
static inline void prefetch_rows(const uint32_t *cid, const float *cscore, size_t ld, size_t t0,
                                 size_t n)
{
    size_t t1 = t0 + QUANT_Q8_BLOCK < n ? t0 + QUANT_Q8_BLOCK : n;
    for (size_t t = t0; t < t1; t++)
        _mm_prefetch((const char *)(cscore + (size_t)cid[t] * ld), _MM_HINT_T0);
}

/* Two tokens per vector, for queries of m <= 8 tokens. At 16 query lanes a vector, such a
 * query (a third of the 4-16-token queries users send) left half or more of every
 * vpdpbusd idle. This form puts tokens t and t + 4 of a block in the even and odd dwords
 * of one vector, against quant_qset.q8_pair (query token j in dwords 2j and 2j + 1): one
 * 64-bit broadcast carries a dim group of both tokens, and a block takes half the
 * vpdpbusd. The sums are the same integers (taken over the dim groups in another
 * order); the estimates are the same float operations lane by lane and the maxima the
 * same maxima, so the results are the one-token form's bit for bit.
 *
 * Pair layout u2 [4 pairs][dim_pad/64][128 bytes]: pair p holds tokens p and p + 4, one
 * 64-dim word as unpacklo_epi32 / unpackhi_epi32 of their 16 dim groups leave it:
 * position i of the 16 holds dim group 16 w + pair_g16[i] of both tokens. */
static const uint8_t pair_g16[16] = {0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15};

static inline void pair_store(int8_t *dst, __m512i xt, __m512i xs)
{
    _mm512_store_si512((void *)dst, _mm512_unpacklo_epi32(xt, xs));
    _mm512_store_si512((void *)(dst + 64), _mm512_unpackhi_epi32(xt, xs));
}

/* The block's n (<= 8) 1-bit planes into u2 (unpack1_block's bytes, paired). */
static void unpack1_pairs(const uint8_t *codes, uint32_t d, size_t n, int8_t *u2, int32_t *st)
{
    uint32_t cb = d / 8;
    for (size_t t = 0; t < QUANT_Q8_BLOCK; t++) {
        int32_t pc = 0;
        for (uint32_t w = 0; t < n && w < d / 64; w++)
            pc += (int32_t)__builtin_popcountll(qk_load64(codes + t * cb + 8 * w));
        st[t] = pc;
    }
    for (size_t p = 0; p < 4; p++)
        for (uint32_t w = 0; w < d / 64; w++) {
            __m512i xt = _mm512_setzero_si512(), xs = xt;
            if (p < n) xt = _mm512_movm_epi8((__mmask64)qk_load64(codes + p * cb + 8 * w));
            if (p + 4 < n) xs = _mm512_movm_epi8((__mmask64)qk_load64(codes + (p + 4) * cb + 8 * w));
            pair_store(u2 + p * 2 * d + 128 * w, xt, xs);
        }
}

/* The block's n (<= 8) B-bit codes into u2 (unpackB_block's bytes, paired). */
static void unpackB_pairs(uint32_t bits, const uint8_t *codes, uint32_t d, size_t n, int8_t *u2,
                          int32_t *st)
{
    _Alignas(64) int8_t u[QUANT_Q8_BLOCK * QUANT_DIM_MAX];
    unpackB_block(bits, codes, d, n, u, st);
    for (size_t p = 0; p < 4; p++)
        for (uint32_t w = 0; w < d / 64; w++)
            pair_store(u2 + p * 2 * d + 128 * w,
                       _mm512_load_si512((const void *)(u + p * d + 64 * w)),
                       _mm512_load_si512((const void *)(u + (p + 4) * d + 64 * w)));
}

static inline int64_t load_i64(const int8_t *p)
{
    int64_t x;
    memcpy(&x, p, sizeof x);
    return x;
}

/* acc[p] = the sums of pair p's two tokens (even / odd dwords) for query lanes 0..7. */
static inline __attribute__((always_inline)) void q8_block2(const uint8_t *qp, uint32_t d,
                                                            const int8_t *u2, __m512i acc[4])
{
    __m512i c[4];
    _Pragma("GCC unroll 4")
    for (int p = 0; p < 4; p++) c[p] = _mm512_setzero_si512();
    for (uint32_t w = 0; w < d / 64; w++) {
        const uint8_t *qw = qp + (size_t)w * 16 * 64;
        const int8_t *uw = u2 + (size_t)w * 128;
        _Pragma("GCC unroll 16")
        for (int i = 0; i < 16; i++) {
            __m512i q = _mm512_load_si512((const void *)(qw + (size_t)pair_g16[i] * 64));
            _Pragma("GCC unroll 4")
            for (int p = 0; p < 4; p++) {
                __m512i b = _mm512_set1_epi64(load_i64(uw + (size_t)p * 2 * d + 8 * i));
                c[p] = _mm512_dpbusd_epi32(c[p], q, b);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int p = 0; p < 4; p++) acc[p] = c[p];
}

/* q8_chunk for the two-token form (m <= 8): the same estimate per lane, maxima kept per
 * half and merged at the end. */
static inline __attribute__((always_inline)) void
q8_chunk2(const quant_qset *qs, const __m512i acc[4], size_t nb, const float *al,
          const float *ka, const float *ys, const float *hsq, const int neg,
          const uint32_t *cid, const float *cscore, size_t ld, float *out_max)
{
    const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i mix = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    uint32_t m = qs->m;
    __mmask16 m8 = (__mmask16)((1u << m) - 1u), mq = (__mmask16)((1u << (2 * m)) - 1u);
    __m512 dl = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(m8, qs->q8_delta));
    __m512 lo = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(m8, qs->q8_lo));
    __m512 hs = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(m8, hsq));
    __m512 mx = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(m8, out_max));
    for (size_t p = 0; p < 4 && p < nb; p++) {
        size_t t = p, s = p + 4;
        int two = s < nb;
        __mmask16 mk = two ? mq : (__mmask16)(mq & 0x5555);
        __m512 y = _mm512_mask_blend_ps(0xAAAA, _mm512_set1_ps(ys[t]), _mm512_set1_ps(two ? ys[s] : 0.0f));
        __m512 a = _mm512_mask_blend_ps(0xAAAA, _mm512_set1_ps(al[t]), _mm512_set1_ps(two ? al[s] : 0.0f));
        __m512 k = _mm512_mask_blend_ps(0xAAAA, _mm512_set1_ps(ka[t]), _mm512_set1_ps(two ? ka[s] : 0.0f));
        __m512i av = neg ? _mm512_sub_epi32(_mm512_setzero_si512(), acc[p]) : acc[p];
        __m512 x = _mm512_add_ps(_mm512_cvtepi32_ps(av), hs);
        __m512 ip = _mm512_add_ps(_mm512_mul_ps(dl, x), _mm512_mul_ps(lo, y));
        __m512 ct = _mm512_maskz_loadu_ps(m8, cscore + (size_t)cid[t] * ld);
        __m512 cs = two ? _mm512_maskz_loadu_ps(m8, cscore + (size_t)cid[s] * ld) : _mm512_setzero_ps();
        __m512 c = _mm512_permutex2var_ps(ct, mix, cs);
        __m512 e = _mm512_add_ps(_mm512_add_ps(c, a), _mm512_mul_ps(k, ip));
        mx = _mm512_mask_max_ps(mx, mk, e, mx);
    }
    /* lane j: the even half's maximum against the odd half's */
    const __m512i ev = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i od = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 15, 13, 11, 9, 7, 5, 3, 1);
    __m512 r = _mm512_max_ps(_mm512_permutexvar_ps(od, mx), _mm512_permutexvar_ps(ev, mx));
    _mm512_mask_storeu_ps(out_max, m8, r);
}

/* One block's estimates, max-accumulated: in the two-token form (u in pair layout) or
 * 16 query tokens a vector. */
static inline void q8_estimates(const quant_qset *qs, const int8_t *u, int pairs, size_t nb,
                                const float *al, const float *ka, const float *ys,
                                const float *hsq, int neg, const uint32_t *cid,
                                const float *cscore, size_t ld, float *out_max)
{
    if (pairs) {
        __m512i acc[4];
        q8_block2(qs->q8_pair, qs->dim_pad, u, acc);
        if (neg) q8_chunk2(qs, acc, nb, al, ka, ys, hsq, 1, cid, cscore, ld, out_max);
        else q8_chunk2(qs, acc, nb, al, ka, ys, hsq, 0, cid, cscore, ld, out_max);
    } else {
        q8_chunks(qs, u, nb, al, ka, ys, hsq, neg, cid, cscore, ld, out_max);
    }
}

static void docB_q8_max(const quant_qset *qs, uint32_t bits, const uint8_t *codes,
                         const quant_fB *fB, size_t n, const uint32_t *cid, const float *cscore,
                         size_t ld, float *out_max)
{
    _Alignas(64) int8_t u[QUANT_Q8_BLOCK * QUANT_DIM_MAX];
    int32_t sb[QUANT_Q8_BLOCK];
    float al[QUANT_Q8_BLOCK], ka[QUANT_Q8_BLOCK], ys[QUANT_Q8_BLOCK], hsq[QUANT_QTOK_MAX];
    uint32_t d = qs->dim_pad, cb = qm_codeB_bytes(d, bits);
    float off = qm_codeB_offset(bits), od = off * (float)d, centre = (float)qk_q8_centre(bits);
    const int pairs = qs->m <= 8;
    for (uint32_t j = 0; j < qs->m; j++) hsq[j] = (centre - off) * (float)qs->q8_sum[j];
    for (size_t t0 = 0; t0 < n; t0 += QUANT_Q8_BLOCK) {
        size_t nb = n - t0 < QUANT_Q8_BLOCK ? n - t0 : QUANT_Q8_BLOCK;
        prefetch_rows(cid, cscore, ld, t0 + QUANT_Q8_BLOCK, n);
        if (pairs) unpackB_pairs(bits, codes + t0 * cb, d, nb, u, sb);
        else unpackB_block(bits, codes + t0 * cb, d, nb, u, sb);
        for (size_t t = 0; t < nb; t++) {
            al[t] = qm_f16_to_f32(fB[t0 + t].alpha);
            ka[t] = fB[t0 + t].kappa;
            ys[t] = (float)sb[t] - od;
        }
        q8_estimates(qs, u, pairs, nb, al, ka, ys, hsq, 0, cid + t0, cscore, ld, out_max);
    }
}

static void doc1_q8_max(const quant_qset *qs, const uint8_t *codes, const quant_f1 *f1, size_t n,
                        const uint32_t *cid, const float *cscore, size_t ld, float *out_max)
{
    _Alignas(64) int8_t u[QUANT_Q8_BLOCK * QUANT_DIM_MAX];
    int32_t sb[QUANT_Q8_BLOCK];
    float al[QUANT_Q8_BLOCK], ka[QUANT_Q8_BLOCK], ys[QUANT_Q8_BLOCK], hsq[QUANT_QTOK_MAX];
    uint32_t d = qs->dim_pad;
    float od = 0.5f * (float)d;
    const int pairs = qs->m <= 8;
    for (uint32_t j = 0; j < qs->m; j++) hsq[j] = -0.5f * (float)qs->q8_sum[j];
    for (size_t t0 = 0; t0 < n; t0 += QUANT_Q8_BLOCK) {
        size_t nb = n - t0 < QUANT_Q8_BLOCK ? n - t0 : QUANT_Q8_BLOCK;
        prefetch_rows(cid, cscore, ld, t0 + QUANT_Q8_BLOCK, n);
        if (pairs) unpack1_pairs(codes + t0 * (d / 8), d, nb, u, sb);
        else unpack1_block(codes + t0 * (d / 8), d, nb, u, sb);
        for (size_t t = 0; t < nb; t++) {
            al[t] = qm_f16_to_f32(f1[t0 + t].alpha);
            ka[t] = qm_f16_to_f32(f1[t0 + t].kappa);
            ys[t] = (float)sb[t] - od;
        }
        q8_estimates(qs, u, pairs, nb, al, ka, ys, hsq, 1, cid + t0, cscore, ld, out_max);
    }
}

/* Centroid interaction: up to 64 query tokens per pass in 4 accumulators (masked loads
 * for the tail: a masked-off lane reads nothing), one S row of the pass per token.
 * _mm512_max_ps(s, acc) is `s > acc ? s : acc`, the scalar form, lane by lane; the
 * tokens are taken in order, so signed zeros and NaN resolve as in scalar. */
static inline __attribute__((always_inline)) void ci_pass(const uint32_t *cid, size_t n,
                                                          const float *cs, size_t ld, int nb,
                                                          const __mmask16 *mk, float *out)
{
    __m512 acc[4];
    for (int b = 0; b < nb; b++) acc[b] = _mm512_maskz_loadu_ps(mk[b], out + 16 * b);
    for (size_t t = 0; t < n; t++) {
        const float *row = cs + (size_t)cid[t] * ld;
        for (int b = 0; b < nb; b++)
            acc[b] = _mm512_max_ps(_mm512_maskz_loadu_ps(mk[b], row + 16 * b), acc[b]);
    }
    for (int b = 0; b < nb; b++) _mm512_mask_storeu_ps(out + 16 * b, mk[b], acc[b]);
}

static void ci_max(const uint32_t *cid, size_t n, const float *cscore, size_t ld, uint32_t m,
                   float *out_max)
{
    for (uint32_t j0 = 0; j0 < m; j0 += 64) {
        uint32_t w = m - j0 < 64 ? m - j0 : 64;
        int nb = (int)((w + 15) / 16);
        __mmask16 mk[4];
        for (int b = 0; b < 4; b++) {
            int left = (int)w - 16 * b;
            mk[b] = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
        }
        const float *cs = cscore + j0;
        float *out = out_max + j0;
        switch (nb) { /* constant pass widths keep the accumulators in registers */
        case 1: ci_pass(cid, n, cs, ld, 1, mk, out); break;
        case 2: ci_pass(cid, n, cs, ld, 2, mk, out); break;
        case 3: ci_pass(cid, n, cs, ld, 3, mk, out); break;
        default: ci_pass(cid, n, cs, ld, 4, mk, out); break;
        }
    }
}

/* ipB4_q8's blocks on rows that need no unpacking (a last partial block is copied to
 * a full one, since q8_block reads QUANT_Q8_BLOCK rows). */
static void ip8_q8(const uint8_t *qt, uint32_t mp, uint32_t m, uint32_t d, const int8_t *rows,
                   size_t n, int32_t *a)
{
    _Alignas(64) int8_t u[QUANT_Q8_BLOCK * QUANT_DIM_MAX];
    for (size_t t0 = 0; t0 < n; t0 += QUANT_Q8_BLOCK) {
        size_t nb = n - t0 < QUANT_Q8_BLOCK ? n - t0 : QUANT_Q8_BLOCK;
        const int8_t *blk = rows + t0 * d;
        if (nb < QUANT_Q8_BLOCK) {
            memcpy(u, blk, nb * d);
            memset(u + nb * d, 0, (QUANT_Q8_BLOCK - nb) * d);
            blk = u;
        }
        q8_sums(qt, mp, m, d, blk, nb, a + t0 * m);
    }
}

/* c8_finish: 16 query lanes a step, each row's scale and sum broadcast. */
static void c8_finish(const int32_t *a, size_t n, uint32_t m, const float *delta, const float *lo,
                      const float *scale, const int32_t *csum, const uint32_t *ids, float *out,
                      size_t ld)
{
    for (uint32_t j0 = 0; j0 < m; j0 += 16) {
        uint32_t l = m - j0 < 16 ? m - j0 : 16;
        __mmask16 mk = (__mmask16)((1u << l) - 1u);
        __m512 dv = _mm512_maskz_loadu_ps(mk, delta + j0), lv = _mm512_maskz_loadu_ps(mk, lo + j0);
        for (size_t t = 0; t < n; t++) {
            size_t k = ids ? ids[t] : t;
            __m512 x = _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(mk, a + t * m + j0));
            __m512 y = _mm512_mul_ps(dv, x);
            __m512 z = _mm512_mul_ps(lv, _mm512_set1_ps((float)csum[k]));
            __m512 o = _mm512_mul_ps(_mm512_set1_ps(scale[k]), _mm512_add_ps(y, z));
            _mm512_mask_storeu_ps(out + k * ld + j0, mk, o);
        }
    }
}

/* est1_pop: as kernels_avx2.c's, 16 tokens a step. */
static inline __m512 f16_decode16(__m512i h)
{
    __m512i mag = _mm512_slli_epi32(_mm512_and_si512(h, _mm512_set1_epi32(0x7fff)), 13);
    __m512 f = _mm512_mul_ps(_mm512_castsi512_ps(mag), _mm512_set1_ps(0x1p112f));
    __m512i sign = _mm512_slli_epi32(_mm512_and_si512(h, _mm512_set1_epi32(0x8000)), 16);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(f), sign));
}

static void est1_pop(const uint32_t *wsum, const uint32_t *pop, const quant_f1 *f1, size_t n,
                     float qc, float delta, float vlow, uint32_t dim_pad, int32_t sum_qu,
                     float *est)
{
    const __m512 hd = _mm512_set1_ps(0.5f * delta), hv = _mm512_set1_ps(0.5f * vlow),
                 vqc = _mm512_set1_ps(qc);
    const __m512i squ = _mm512_set1_epi32(sum_qu), dp = _mm512_set1_epi32((int)dim_pad),
                  off = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                             11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)sizeof(quant_f1))),
                  lo16 = _mm512_set1_epi32(0xffff);
    size_t t = 0;
    for (; t + 16 <= n; t += 16) {
        __m512i ws = _mm512_loadu_si512((const void *)(wsum + t));
        __m512i pc = _mm512_loadu_si512((const void *)(pop + t));
        __m512 xa = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_slli_epi32(ws, 1), squ));
        __m512 xb = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_slli_epi32(pc, 1), dp));
        __m512 ip = _mm512_add_ps(_mm512_mul_ps(hd, xa), _mm512_mul_ps(hv, xb));
        __m512i g = _mm512_i32gather_epi32(off, (const void *)(f1 + t), 1);
        __m512 kappa = f16_decode16(_mm512_and_si512(g, lo16));
        __m512 alpha = f16_decode16(_mm512_srli_epi32(g, 16));
        _mm512_storeu_ps(est + t, _mm512_add_ps(_mm512_add_ps(vqc, alpha), _mm512_mul_ps(kappa, ip)));
    }
    for (; t < n; t++)
        est[t] = qk_est1_pop_one(wsum[t], pop[t], &f1[t], qc, delta, vlow, dim_pad, sum_qu);
}

/* Nonzero when some column of the row is above its threshold, 16 columns a compare
 * (masked loads read nothing past the row). */
static inline __mmask16 row_above16(const float *row, uint32_t m, const float *thr)
{
    __mmask16 hit = 0;
    uint32_t j = 0;
    for (; j + 16 <= m; j += 16)
        hit |= _mm512_cmp_ps_mask(_mm512_loadu_ps(row + j), _mm512_loadu_ps(thr + j), _CMP_GT_OQ);
    if (j < m) {
        __mmask16 k = (__mmask16)((1u << (m - j)) - 1u);
        hit |= _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, row + j),
                                       _mm512_maskz_loadu_ps(k, thr + j), _CMP_GT_OQ);
    }
    return hit;
}

/* For m <= 16 one compare a row, four rows tested together (most rows pass nothing). */
static size_t first_above(const float *S, size_t n, uint32_t m, const float *thr)
{
    size_t t = 0;
    if (m <= 16) {
        __mmask16 k = (__mmask16)((1u << m) - 1u);
        __m512 th = _mm512_maskz_loadu_ps(k, thr);
        for (; t + 4 <= n; t += 4) {
            __mmask16 h[4];
            for (int i = 0; i < 4; i++)
                h[i] = _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, S + (t + (size_t)i) * m),
                                               th, _CMP_GT_OQ);
            if (h[0] | h[1] | h[2] | h[3]) return t + (h[0] ? 0 : h[1] ? 1 : h[2] ? 2 : 3);
        }
    }
    for (; t < n; t++)
        if (row_above16(S + t * m, m, thr)) return t;
    return n;
}

const quant_kernels quant_kernels_avx512 = {"avx512",      ip1_lut,      ip1_pop,
                                            ip1_pop_multi, doc1_lut_max, ipB_multi,
                                            ipB4_q8,       docB_q8_max,
                                            doc1_q8_max,   ci_max,       ip8_q8,
                                            c8_finish,     first_above,
                                            est1_pop,      1};
