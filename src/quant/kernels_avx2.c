/* AVX2 kernels (docs/algorithms.md §1.7), compiled with -mavx2 -mfma -mpopcnt (cmake/Simd.cmake).
 *
 * ip1_lut: 8 tokens per step; one 32-bit gather fetches word w (groups 8w..8w+7) of the
 * 8 codes, then 8 float gathers from the LUT. Each lane adds its groups in the scalar
 * order, so the result equals the scalar reference bit for bit. The codes are per-token
 * (the GPU's layout), which rules out FastScan's pshufb-on-transposed-batches; on this
 * layout gathers are the only vector LUT form, and they lose to popcount (bench).
 * ip1_pop / ip1_pop_multi: the shared per-token body with the POPCNT instruction. A
 * pshufb nibble-count vectorisation was not tried: POPCNT already retires 1-4 per cycle
 * and the loop is a handful of them per 64 dims.
 * doc1_lut_max: the 1-bit doc shape on the query-interleaved LUT (see its section).
 * ipB_multi: the token is unpacked once to centred floats, then 8-wide FMA dots, eight
 * query tokens at a time sharing each load of the token (float sums in another order
 * than scalar: tested against the rounding bound of a d-term dot product).
 * ipB4_q8, docB_q8_max, doc1_q8_max: nibble codes, byte codes (as two nibble planes)
 * and 1-bit planes against the 8-bit query with vpmaddubsw + vpmaddwd, 8 query tokens
 * per vector (see their section). */
#include <immintrin.h>
#include <string.h>

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

/* ---- doc shape on the query-interleaved LUT ----
 * Query tokens are taken 32 at a time (NV <= 4 vectors of 8, the last one masked) and
 * their running maxima stay in registers across the document's tokens. Tokens go two
 * at a time so that 2 * NV independent add chains hide the add latency (one chain per
 * lane is the fixed summation order, so chains cannot be split within a token). The
 * epilogue is (qc + alpha) + kappa * ip with separate mul and add, as in scalar. */

static inline __attribute__((always_inline)) void
doc1_chunk(const float *T, uint32_t mp, uint32_t G, uint32_t cb, const uint8_t *codes,
           const quant_f1 *f1, size_t n, const uint32_t *cid, const float *cscore, size_t ld,
           float *out_max, uint32_t j0, uint32_t left, const int NV)
{
    __m256i mask[4];
    __m256 mx[4];
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _Pragma("GCC unroll 4")
    for (int v = 0; v < NV; v++) {
        mask[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)left - 8 * v), lane);
        mx[v] = _mm256_maskload_ps(out_max + j0 + 8 * v, mask[v]);
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
        __m256 a0[4], a1[4];
        _Pragma("GCC unroll 4")
        for (int v = 0; v < NV; v++) a0[v] = a1[v] = _mm256_setzero_ps();
        const float *Tg = Tj;
        for (uint32_t k = 0; k < cb; k++, Tg += 32 * (size_t)mp) {
            unsigned b0 = c0[k], b1 = c1[k];
            const float *r0 = Tg + off[b0 & 15u], *r1 = Tg + off[b1 & 15u];
            _Pragma("GCC unroll 4")
            for (int v = 0; v < NV; v++) {
                a0[v] = _mm256_add_ps(a0[v], _mm256_load_ps(r0 + 8 * v));
                a1[v] = _mm256_add_ps(a1[v], _mm256_load_ps(r1 + 8 * v));
            }
            r0 = Tg + 16 * (size_t)mp + off[b0 >> 4];
            r1 = Tg + 16 * (size_t)mp + off[b1 >> 4];
            _Pragma("GCC unroll 4")
            for (int v = 0; v < NV; v++) {
                a0[v] = _mm256_add_ps(a0[v], _mm256_load_ps(r0 + 8 * v));
                a1[v] = _mm256_add_ps(a1[v], _mm256_load_ps(r1 + 8 * v));
            }
        }
        _Pragma("GCC unroll 4")
        for (int k = 0; k < 2; k++) {
            const quant_f1 *f = &f1[t + k];
            __m256 al = _mm256_set1_ps(qm_f16_to_f32(f->alpha));
            __m256 ka = _mm256_set1_ps(qm_f16_to_f32(f->kappa));
            const float *cs = cscore + (size_t)cid[t + k] * ld + j0;
            _Pragma("GCC unroll 4")
            for (int v = 0; v < NV; v++) {
                __m256 q = _mm256_maskload_ps(cs + 8 * v, mask[v]);
                __m256 e = _mm256_add_ps(_mm256_add_ps(q, al),
                                         _mm256_mul_ps(ka, k ? a1[v] : a0[v]));
                mx[v] = _mm256_max_ps(e, mx[v]);
            }
        }
    }
    for (; t < n; t++) {
        const uint8_t *c0 = codes + t * cb;
        __m256 a0[4];
        _Pragma("GCC unroll 4")
        for (int v = 0; v < NV; v++) a0[v] = _mm256_setzero_ps();
        for (uint32_t g = 0; g < G; g++) {
            const float *r0 = Tj + (size_t)(16 * g + ((c0[g >> 1] >> ((g & 1) * 4)) & 15u)) * mp;
            _Pragma("GCC unroll 4")
            for (int v = 0; v < NV; v++) a0[v] = _mm256_add_ps(a0[v], _mm256_load_ps(r0 + 8 * v));
        }
        __m256 al = _mm256_set1_ps(qm_f16_to_f32(f1[t].alpha));
        __m256 ka = _mm256_set1_ps(qm_f16_to_f32(f1[t].kappa));
        const float *cs = cscore + (size_t)cid[t] * ld + j0;
        _Pragma("GCC unroll 4")
        for (int v = 0; v < NV; v++) {
            __m256 q = _mm256_maskload_ps(cs + 8 * v, mask[v]);
            __m256 e = _mm256_add_ps(_mm256_add_ps(q, al), _mm256_mul_ps(ka, a0[v]));
            mx[v] = _mm256_max_ps(e, mx[v]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int v = 0; v < NV; v++) _mm256_maskstore_ps(out_max + j0 + 8 * v, mask[v], mx[v]);
}

static void doc1_lut_max(const float *T, uint32_t mp, uint32_t m, uint32_t dim_pad,
                         const uint8_t *codes, const quant_f1 *f1, size_t n, const uint32_t *cid,
                         const float *cscore, size_t ld, float *out_max)
{
    uint32_t G = dim_pad / 4, cb = qm_code1_bytes(dim_pad);
    for (uint32_t j0 = 0; j0 < m; j0 += 32) {
        uint32_t left = m - j0, nv = left >= 32 ? 4 : (left + 7) / 8;
        switch (nv) {
        case 4: doc1_chunk(T, mp, G, cb, codes, f1, n, cid, cscore, ld, out_max, j0, left, 4); break;
        case 3: doc1_chunk(T, mp, G, cb, codes, f1, n, cid, cscore, ld, out_max, j0, left, 3); break;
        case 2: doc1_chunk(T, mp, G, cb, codes, f1, n, cid, cscore, ld, out_max, j0, left, 2); break;
        default: doc1_chunk(T, mp, G, cb, codes, f1, n, cid, cscore, ld, out_max, j0, left, 1); break;
        }
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

/* The sums of 8 vectors, one per lane of the result: three rounds of pairwise
 * horizontal adds and one cross-half add (10 instructions where 8 separate reductions
 * take about 50). */
static inline __m256 sum8(const __m256 *h)
{
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
    _Alignas(32) float u[QUANT_DIM_MAX];
    uint32_t cb = qm_codeB_bytes(dim_pad, bits);
    for (size_t t = 0; t < n; t++) {
        unpackB(codes + t * cb, bits, dim_pad, u);
        uint32_t j = 0;
        for (; j + 8 <= m; j += 8) {
            const float *qj = q + (size_t)j * dim_pad;
            __m256 acc[8];
            _Pragma("GCC unroll 8")
            for (int k = 0; k < 8; k++) acc[k] = _mm256_setzero_ps();
            for (uint32_t i = 0; i < dim_pad; i += 8) {
                __m256 x = _mm256_load_ps(u + i);
                _Pragma("GCC unroll 8")
                for (int k = 0; k < 8; k++)
                    acc[k] = _mm256_fmadd_ps(x, _mm256_loadu_ps(qj + (size_t)k * dim_pad + i), acc[k]);
            }
            _mm256_storeu_ps(ip + t * m + j, sum8(acc));
        }
        for (; j < m; j++) ip[t * m + j] = dot(u, q + (size_t)j * dim_pad, dim_pad);
    }
}

/* ---- the 8-bit query (vpmaddubsw + vpmaddwd) ----
 * As in kernels_avx512.c, query tokens are the lanes (8 per vector, 16 per chunk,
 * NV <= 2) and a block of 8 document tokens shares each load of a query group row. AVX2
 * has no byte dot product into 32 bits: vpmaddubsw multiplies the unsigned query bytes
 * by the token's signed group (broadcast) and adds pairs into 16 bits, which cannot
 * saturate (|pair| <= 2 * 255 * 8 = 4080), so two groups' pair sums are added in 16
 * bits (<= 8160) before one vpmaddwd by ones widens them to the 32-bit lane sums that
 * vpdpbusd gives; the integers, hence the results, equal scalar's. d/4 is even (d_pad is
 * a multiple of 64), so groups go in pairs. 1-bit planes unpack 32 dims per
 * pshufb + and + pcmpeqb (a set bit becomes the byte -1). */

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

/* The block's n (<= 8) byte codes (B >= 5) as two nibble planes whose sum is
 * qk_unpackB_s8's T - 128 = 16 (hi - 8) + lo: uh[8][d] = hi - 8, ul[8][d] = lo, both
 * within vpmaddubsw's reach (a byte code minus 128 is not: two products of 255 x 128
 * overflow its 16 bits); rows >= n zeroed. */
static void unpack8_planes(const uint8_t *codes, uint32_t d, size_t n, int8_t *uh, int8_t *ul,
                           int32_t *st)
{
    const __m256i m4 = _mm256_set1_epi8(15), e8 = _mm256_set1_epi8(8), z = _mm256_setzero_si256();
    for (size_t t = 0; t < QUANT_Q8_BLOCK; t++) {
        int8_t *ht = uh + t * d, *lt = ul + t * d;
        if (t >= n) {
            memset(ht, 0, d);
            memset(lt, 0, d);
            st[t] = 0;
            continue;
        }
        __m256i s = z;
        for (uint32_t c = 0; c < d / 32; c++) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(codes + t * d + 32 * c));
            s = _mm256_add_epi64(s, _mm256_sad_epu8(x, z));
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
            _mm256_store_si256((__m256i *)(void *)(ht + 32 * c), _mm256_sub_epi8(hi, e8));
            _mm256_store_si256((__m256i *)(void *)(lt + 32 * c), _mm256_and_si256(x, m4));
        }
        __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        st[t] = (int32_t)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1));
    }
}

static void unpack1_block(const uint8_t *codes, uint32_t d, size_t n, int8_t *u, int32_t *st)
{
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                            2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    uint32_t cb = d / 8;
    for (size_t t = 0; t < QUANT_Q8_BLOCK; t++) {
        int8_t *ut = u + t * d;
        if (t >= n) {
            memset(ut, 0, d);
            st[t] = 0;
            continue;
        }
        int32_t pc = 0;
        for (uint32_t w = 0; w < d / 32; w++) {
            uint32_t x;
            memcpy(&x, codes + t * cb + 4 * w, sizeof x);
            pc += (int32_t)__builtin_popcount(x);
            __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), spread);
            _mm256_store_si256((__m256i *)(void *)(ut + 32 * w),
                               _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit));
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

/* acc[t][v] = w x the block's sums for query lanes j0 + 8 v + (0..7); NV vectors are all
 * inside the row (j0 + 8 (NV - 1) < m <= m_pad, m_pad a multiple of 8). |u| <= 15, so
 * that four products fit vpmaddubsw's and the addition's 16 bits; w <= 16. */
static inline __attribute__((always_inline)) void
q8_block(const uint8_t *qt, uint32_t mp, uint32_t d, const int8_t *u, uint32_t j0,
         __m256i acc[QUANT_Q8_BLOCK][2], const int NV, const short w)
{
    const __m256i ones = _mm256_set1_epi16(w);
    size_t rs = (size_t)mp * 4;
    /* Half a block per pass: 8 accumulators (kept in registers, copied out once), 4 rows,
     * ones and the broadcasts fit the 16 registers. */
    for (int h = 0; h < QUANT_Q8_BLOCK; h += 4) {
        __m256i c[4][2];
        _Pragma("GCC unroll 4")
        for (int t = 0; t < 4; t++)
            _Pragma("GCC unroll 2")
            for (int v = 0; v < NV; v++) c[t][v] = _mm256_setzero_si256();
        const uint8_t *row = qt + (size_t)j0 * 4;
        for (uint32_t g = 0; g < d / 4; g += 2, row += 2 * rs) {
            __m256i q0[2], q1[2];
            _Pragma("GCC unroll 2")
            for (int v = 0; v < NV; v++) {
                q0[v] = _mm256_loadu_si256((const __m256i *)(const void *)(row + 32 * v));
                q1[v] = _mm256_loadu_si256((const __m256i *)(const void *)(row + rs + 32 * v));
            }
            _Pragma("GCC unroll 4")
            for (int t = 0; t < 4; t++) {
                const int8_t *ut = u + (size_t)(h + t) * d + 4 * g;
                __m256i b0 = _mm256_set1_epi32(load_i32(ut)), b1 = _mm256_set1_epi32(load_i32(ut + 4));
                _Pragma("GCC unroll 2")
                for (int v = 0; v < NV; v++) {
                    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(q0[v], b0),
                                                 _mm256_maddubs_epi16(q1[v], b1));
                    c[t][v] = _mm256_add_epi32(c[t][v], _mm256_madd_epi16(p, ones));
                }
            }
        }
        _Pragma("GCC unroll 4")
        for (int t = 0; t < 4; t++)
            _Pragma("GCC unroll 2")
            for (int v = 0; v < NV; v++) acc[h + t][v] = c[t][v];
    }
}

static inline __m256i lane_mask(uint32_t left)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left > 8 ? 8 : left)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
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
        for (uint32_t j0 = 0; j0 < m; j0 += 16) {
            uint32_t left = m - j0;
            int nv = left > 8 ? 2 : 1;
            __m256i acc[QUANT_Q8_BLOCK][2];
            if (nv == 2) q8_block(qt, mp, d, u, j0, acc, 2, 1);
            else q8_block(qt, mp, d, u, j0, acc, 1, 1);
            for (int v = 0; v < nv; v++) {
                __m256i k = lane_mask(left - 8 * (uint32_t)v);
                for (size_t t = 0; t < nb; t++)
                    _mm256_maskstore_epi32((int *)(a + (t0 + t) * m + j0 + 8 * v), k, acc[t][v]);
            }
        }
    }
}

/* One block's estimates for query lanes [j0, j0 + 8 NV): the scalar q8_est_max lane by
 * lane (see kernels_avx512.c's q8_chunk). ul: NULL, or for byte codes the low nibbles
 * (u then holds the high ones, unpack8_planes). */
static inline __attribute__((always_inline)) void
q8_chunk(const quant_qset *qs, const int8_t *u, const int8_t *ul, size_t nb, const float *al,
         const float *ka, const float *ys, const float *hsq, const int neg, const uint32_t *cid,
         const float *cscore, size_t ld, float *out_max, uint32_t j0, const int NV)
{
    uint32_t left = qs->m - j0;
    __m256i acc[QUANT_Q8_BLOCK][2];
    q8_block(qs->q8_t, qs->m_pad, qs->dim_pad, u, j0, acc, NV, ul ? 16 : 1);
    if (ul) {
        __m256i lo_acc[QUANT_Q8_BLOCK][2];
        q8_block(qs->q8_t, qs->m_pad, qs->dim_pad, ul, j0, lo_acc, NV, 1);
        for (size_t t = 0; t < nb; t++)
            _Pragma("GCC unroll 2")
            for (int v = 0; v < NV; v++) acc[t][v] = _mm256_add_epi32(acc[t][v], lo_acc[t][v]);
    }
    __m256i mask[2];
    __m256 dl[2], lo[2], hs[2], mx[2];
    _Pragma("GCC unroll 2")
    for (int v = 0; v < NV; v++) {
        size_t j = j0 + 8 * (size_t)v;
        mask[v] = lane_mask(left - 8 * (uint32_t)v);
        dl[v] = _mm256_maskload_ps(qs->q8_delta + j, mask[v]);
        lo[v] = _mm256_maskload_ps(qs->q8_lo + j, mask[v]);
        hs[v] = _mm256_maskload_ps(hsq + j, mask[v]);
        mx[v] = _mm256_maskload_ps(out_max + j, mask[v]);
    }
    for (size_t t = 0; t < nb; t++) {
        __m256 y = _mm256_set1_ps(ys[t]), a = _mm256_set1_ps(al[t]), k = _mm256_set1_ps(ka[t]);
        const float *cs = cscore + (size_t)cid[t] * ld + j0;
        _Pragma("GCC unroll 2")
        for (int v = 0; v < NV; v++) {
            __m256i av = neg ? _mm256_sub_epi32(_mm256_setzero_si256(), acc[t][v]) : acc[t][v];
            __m256 x = _mm256_add_ps(_mm256_cvtepi32_ps(av), hs[v]);
            __m256 ip = _mm256_add_ps(_mm256_mul_ps(dl[v], x), _mm256_mul_ps(lo[v], y));
            __m256 c = _mm256_maskload_ps(cs + 8 * v, mask[v]);
            __m256 e = _mm256_add_ps(_mm256_add_ps(c, a), _mm256_mul_ps(k, ip));
            mx[v] = _mm256_max_ps(e, mx[v]);
        }
    }
    _Pragma("GCC unroll 2")
    for (int v = 0; v < NV; v++) _mm256_maskstore_ps(out_max + j0 + 8 * v, mask[v], mx[v]);
}

static inline void q8_chunks(const quant_qset *qs, const int8_t *u, const int8_t *ul, size_t nb,
                             const float *al, const float *ka, const float *ys, const float *hsq,
                             int neg, const uint32_t *cid, const float *cscore, size_t ld,
                             float *out_max)
{
    for (uint32_t j0 = 0; j0 < qs->m; j0 += 16) {
        int two = qs->m - j0 > 8;
        if (neg && two) q8_chunk(qs, u, ul, nb, al, ka, ys, hsq, 1, cid, cscore, ld, out_max, j0, 2);
        else if (neg) q8_chunk(qs, u, ul, nb, al, ka, ys, hsq, 1, cid, cscore, ld, out_max, j0, 1);
        else if (two) q8_chunk(qs, u, ul, nb, al, ka, ys, hsq, 0, cid, cscore, ld, out_max, j0, 2);
        else q8_chunk(qs, u, ul, nb, al, ka, ys, hsq, 0, cid, cscore, ld, out_max, j0, 1);
    }
}

/* The S rows (cscore + cid[t] * ld) of the block of tokens from t0, fetched one block
 * ahead: random reads of a matrix of K rows (see kernels_avx512.c). */
static inline void prefetch_rows(const uint32_t *cid, const float *cscore, size_t ld, size_t t0,
                                 size_t n)
{
    size_t t1 = t0 + QUANT_Q8_BLOCK < n ? t0 + QUANT_Q8_BLOCK : n;
    for (size_t t = t0; t < t1; t++)
        _mm_prefetch((const char *)(cscore + (size_t)cid[t] * ld), _MM_HINT_T0);
}

static void docB_q8_max(const quant_qset *qs, uint32_t bits, const uint8_t *codes,
                         const quant_fB *fB, size_t n, const uint32_t *cid, const float *cscore,
                         size_t ld, float *out_max)
{
    _Alignas(64) int8_t u[QUANT_Q8_BLOCK * QUANT_DIM_MAX], ul[QUANT_Q8_BLOCK * QUANT_DIM_MAX];
    int32_t sb[QUANT_Q8_BLOCK];
    float al[QUANT_Q8_BLOCK], ka[QUANT_Q8_BLOCK], ys[QUANT_Q8_BLOCK], hsq[QUANT_QTOK_MAX];
    uint32_t d = qs->dim_pad, cb = qm_codeB_bytes(d, bits);
    float off = qm_codeB_offset(bits), od = off * (float)d, centre = (float)qk_q8_centre(bits);
    for (uint32_t j = 0; j < qs->m; j++) hsq[j] = (centre - off) * (float)qs->q8_sum[j];
    for (size_t t0 = 0; t0 < n; t0 += QUANT_Q8_BLOCK) {
        size_t nb = n - t0 < QUANT_Q8_BLOCK ? n - t0 : QUANT_Q8_BLOCK;
        prefetch_rows(cid, cscore, ld, t0 + QUANT_Q8_BLOCK, n);
        if (bits <= 4) unpack4_block(codes + t0 * cb, d, nb, u, sb);
        else unpack8_planes(codes + t0 * cb, d, nb, u, ul, sb);
        for (size_t t = 0; t < nb; t++) {
            al[t] = qm_f16_to_f32(fB[t0 + t].alpha);
            ka[t] = fB[t0 + t].kappa;
            ys[t] = (float)sb[t] - od;
        }
        q8_chunks(qs, u, bits <= 4 ? NULL : ul, nb, al, ka, ys, hsq, 0, cid + t0, cscore, ld,
                  out_max);
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
    for (uint32_t j = 0; j < qs->m; j++) hsq[j] = -0.5f * (float)qs->q8_sum[j];
    for (size_t t0 = 0; t0 < n; t0 += QUANT_Q8_BLOCK) {
        size_t nb = n - t0 < QUANT_Q8_BLOCK ? n - t0 : QUANT_Q8_BLOCK;
        prefetch_rows(cid, cscore, ld, t0 + QUANT_Q8_BLOCK, n);
        unpack1_block(codes + t0 * (d / 8), d, nb, u, sb);
        for (size_t t = 0; t < nb; t++) {
            al[t] = qm_f16_to_f32(f1[t0 + t].alpha);
            ka[t] = qm_f16_to_f32(f1[t0 + t].kappa);
            ys[t] = (float)sb[t] - od;
        }
        q8_chunks(qs, u, NULL, nb, al, ka, ys, hsq, 1, cid + t0, cscore, ld, out_max);
    }
}

/* Centroid interaction: up to 32 query tokens per pass in 4 accumulators (masked loads
 * for the tail: a masked-off lane reads nothing), one S row of the pass per token.
 * _mm256_max_ps(s, acc) is `s > acc ? s : acc`, the scalar form, lane by lane; the
 * tokens are taken in order, so signed zeros and NaN resolve as in scalar. */
static inline __attribute__((always_inline)) void ci_pass(const uint32_t *cid, size_t n,
                                                          const float *cs, size_t ld, int nb,
                                                          const __m256i *mk, float *out)
{
    __m256 acc[4];
    for (int b = 0; b < nb; b++) acc[b] = _mm256_maskload_ps(out + 8 * b, mk[b]);
    for (size_t t = 0; t < n; t++) {
        const float *row = cs + (size_t)cid[t] * ld;
        for (int b = 0; b < nb; b++)
            acc[b] = _mm256_max_ps(_mm256_maskload_ps(row + 8 * b, mk[b]), acc[b]);
    }
    for (int b = 0; b < nb; b++) _mm256_maskstore_ps(out + 8 * b, mk[b], acc[b]);
}

static void ci_max(const uint32_t *cid, size_t n, const float *cscore, size_t ld, uint32_t m,
                   float *out_max)
{
    for (uint32_t j0 = 0; j0 < m; j0 += 32) {
        uint32_t w = m - j0 < 32 ? m - j0 : 32;
        int nb = (int)((w + 7) / 8);
        __m256i mk[4];
        for (int b = 0; b < 4; b++) {
            int left = (int)w - 8 * b;
            mk[b] = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
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

/* Four rows against eight query lanes at a time. A query byte (up to 255) times a row
 * byte (up to +-127), two to a 16-bit lane, would saturate vpmaddubsw, so the query
 * bytes are split into nibbles, qu = 16 hi + lo, and each product pair (at most
 * 2 x 15 x 127) is widened on its own (vpmaddwd by 1 and by 16). A last partial group of
 * rows repeats its first row (computed, never stored). */
static void ip8_q8(const uint8_t *qt, uint32_t mp, uint32_t m, uint32_t d, const int8_t *rows,
                   size_t n, int32_t *a)
{
    const __m256i ones = _mm256_set1_epi16(1), sixteen = _mm256_set1_epi16(16);
    const __m256i nib = _mm256_set1_epi8(0x0f);
    for (uint32_t j0 = 0; j0 < m; j0 += 8) {
        __m256i k = lane_mask(m - j0);
        for (size_t t = 0; t < n; t += 4) {
            size_t nr = n - t < 4 ? n - t : 4;
            const int8_t *ur[4];
            __m256i c[4];
            _Pragma("GCC unroll 4")
            for (size_t r = 0; r < 4; r++) {
                ur[r] = rows + (t + (r < nr ? r : 0)) * d;
                c[r] = _mm256_setzero_si256();
            }
            for (uint32_t g = 0; g < d / 4; g++) {
                __m256i q = _mm256_loadu_si256((const __m256i *)(qt + ((size_t)g * mp + j0) * 4));
                __m256i lo = _mm256_and_si256(q, nib);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), nib);
                _Pragma("GCC unroll 4")
                for (size_t r = 0; r < 4; r++) {
                    __m256i b = _mm256_set1_epi32(load_i32(ur[r] + 4 * g));
                    __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, b), ones);
                    __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, b), sixteen);
                    c[r] = _mm256_add_epi32(c[r], _mm256_add_epi32(pl, ph));
                }
            }
            for (size_t r = 0; r < nr; r++)
                _mm256_maskstore_epi32((int *)(a + (t + r) * m + j0), k, c[r]);
        }
    }
}

/* c8_finish: 8 query lanes a step, each row's scale and sum broadcast. */
static void c8_finish(const int32_t *a, size_t n, uint32_t m, const float *delta, const float *lo,
                      const float *scale, const int32_t *csum, const uint32_t *ids, float *out,
                      size_t ld)
{
    for (uint32_t j0 = 0; j0 < m; j0 += 8) {
        __m256i k8 = lane_mask(m - j0);
        __m256 dv = _mm256_maskload_ps(delta + j0, k8), lv = _mm256_maskload_ps(lo + j0, k8);
        for (size_t t = 0; t < n; t++) {
            size_t k = ids ? ids[t] : t;
            __m256 x = _mm256_cvtepi32_ps(_mm256_maskload_epi32(a + t * m + j0, k8));
            __m256 y = _mm256_mul_ps(dv, x);
            __m256 z = _mm256_mul_ps(lv, _mm256_set1_ps((float)csum[k]));
            __m256 o = _mm256_mul_ps(_mm256_set1_ps(scale[k]), _mm256_add_ps(y, z));
            _mm256_maskstore_ps(out + k * ld + j0, k8, o);
        }
    }
}

/* est1_pop: 8 tokens a step. Each token's (kappa, alpha) halves are the first 4 bytes of
 * its 6-byte factors, fetched by one 32-bit gather; the halves are decoded with
 * qm_f16_to_f32's integer steps (the F16C instruction turns Inf/NaN halves into Inf/NaN,
 * the scalar decoder into large finite values). */
static inline __m256 f16_decode8(__m256i h)
{
    __m256i mag = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x7fff)), 13);
    __m256 f = _mm256_mul_ps(_mm256_castsi256_ps(mag), _mm256_set1_ps(0x1p112f));
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x8000)), 16);
    return _mm256_or_ps(f, _mm256_castsi256_ps(sign));
}

static void est1_pop(const uint32_t *wsum, const uint32_t *pop, const quant_f1 *f1, size_t n,
                     float qc, float delta, float vlow, uint32_t dim_pad, int32_t sum_qu,
                     float *est)
{
    const __m256 hd = _mm256_set1_ps(0.5f * delta), hv = _mm256_set1_ps(0.5f * vlow),
                 vqc = _mm256_set1_ps(qc);
    const __m256i squ = _mm256_set1_epi32(sum_qu), dp = _mm256_set1_epi32((int)dim_pad),
                  off = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                           _mm256_set1_epi32((int)sizeof(quant_f1))),
                  lo16 = _mm256_set1_epi32(0xffff);
    size_t t = 0;
    for (; t + 8 <= n; t += 8) {
        __m256i ws = _mm256_loadu_si256((const __m256i *)(wsum + t));
        __m256i pc = _mm256_loadu_si256((const __m256i *)(pop + t));
        __m256 xa = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_slli_epi32(ws, 1), squ));
        __m256 xb = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_slli_epi32(pc, 1), dp));
        __m256 ip = _mm256_add_ps(_mm256_mul_ps(hd, xa), _mm256_mul_ps(hv, xb));
        __m256i g = _mm256_i32gather_epi32((const int *)(const void *)(f1 + t), off, 1);
        __m256 kappa = f16_decode8(_mm256_and_si256(g, lo16));
        __m256 alpha = f16_decode8(_mm256_srli_epi32(g, 16));
        _mm256_storeu_ps(est + t, _mm256_add_ps(_mm256_add_ps(vqc, alpha), _mm256_mul_ps(kappa, ip)));
    }
    for (; t < n; t++)
        est[t] = qk_est1_pop_one(wsum[t], pop[t], &f1[t], qc, delta, vlow, dim_pad, sum_qu);
}

/* Nonzero when some column of the row is above its threshold, 8 columns a compare
 * (masked loads read nothing past the row). */
static inline int row_above8(const float *row, uint32_t m, const float *thr)
{
    int hit = 0;
    uint32_t j = 0;
    for (; j + 8 <= m; j += 8)
        hit |= _mm256_movemask_ps(
            _mm256_cmp_ps(_mm256_loadu_ps(row + j), _mm256_loadu_ps(thr + j), _CMP_GT_OQ));
    if (j < m) {
        __m256i k = lane_mask(m - j);
        hit |= _mm256_movemask_ps(_mm256_cmp_ps(_mm256_maskload_ps(row + j, k),
                                                _mm256_maskload_ps(thr + j, k), _CMP_GT_OQ));
    }
    return hit;
}

/* For m <= 8 one compare a row, four rows tested together (most rows pass nothing). */
static size_t first_above(const float *S, size_t n, uint32_t m, const float *thr)
{
    size_t t = 0;
    if (m <= 8) {
        __m256i k = lane_mask(m);
        __m256 th = _mm256_maskload_ps(thr, k);
        for (; t + 4 <= n; t += 4) {
            int h[4];
            for (int i = 0; i < 4; i++)
                h[i] = _mm256_movemask_ps(
                    _mm256_cmp_ps(_mm256_maskload_ps(S + (t + (size_t)i) * m, k), th, _CMP_GT_OQ));
            if (h[0] | h[1] | h[2] | h[3]) return t + (h[0] ? 0 : h[1] ? 1 : h[2] ? 2 : 3);
        }
    }
    for (; t < n; t++)
        if (row_above8(S + t * m, m, thr)) return t;
    return n;
}

const quant_kernels quant_kernels_avx2 = {"avx2",        ip1_lut,      ip1_pop,
                                          ip1_pop_multi, doc1_lut_max, ipB_multi,
                                          ipB4_q8,       docB_q8_max,
                                          doc1_q8_max,   ci_max,       ip8_q8,
                                          c8_finish,     first_above,
                                          est1_pop,      0};
