/* RaBitQ arithmetic shared by the host kernels and the CUDA backend.
 *
 * Everything here is `static inline` and marked QM_HD, so the same source compiles as C
 * and as CUDA device code: the LUT construction, the 4-bit query quantisation of the
 * popcount form, the code accessors, the half-float decode and the estimator/bound
 * arithmetic. Keeping one copy means the CPU tests cover what the GPU runs.
 *
 * Notation (docs/algorithms.md §1): P is the index rotation, q' = P q, c' = P c,
 * r = P v - c', u the centred code of r. Every estimate has the similarity form
 *
 *     <q, v>  ~=  <q, c> + alpha + kappa * <u, q'>        (docs/algorithms.md §1.5)
 *
 * with kappa = |r|^2 / <u, r> and alpha = <r, c'> - kappa <u, c'> stored per token,
 * and <u, q'> computed from the code: u = b - 1/2 for the 1-bit plane, u = T - (2^B-1)/2
 * for the B-bit code T. The error bound is eps0 * f_error * G_error with
 * G_error = |q' - c'| (docs/algorithms.md §1.6); f_error is stored *without* eps0 so that callers
 * can choose the confidence (QM_EPS0 = 1.9 is the papers' choice).
 *
 * Code layouts (d_pad = padded dimension, a multiple of 64):
 *   1-bit plane   d_pad/8 bytes; dim i is bit (i % 8) of byte i/8 (LSB first). Read as
 *                 little-endian uint64 words, dim i is bit (i % 64) of word i/64, and
 *                 as uint32 words (GPU) bit (i % 32) of word i/32: one rule for every
 *                 word size. Departure: RaBitQ-Library packs MSB first; LSB first makes
 *                 the word view and the nibble view agree without byte swaps.
 *   B-bit code    B <= 4: one nibble per dim, d_pad/2 bytes, dim 2k in the low nibble
 *                 of byte k and dim 2k+1 in the high nibble. B = 5..8: one byte per dim.
 *                 T_i = b_i * 2^(B-1) + e_i, so bit B-1 of every T_i is the 1-bit plane.
 *   LUT           per query token, d_pad/4 groups x 16 floats; group g covers dims
 *                 4g..4g+3 and entry j = sum_k (bit k of j ? +1/2 : -1/2) q'_{4g+k}.
 *                 The nibble of group g is (byte[g/2] >> 4*(g%2)) & 15 of the 1-bit
 *                 plane, so sum_g L_g[nibble_g] = <b - 1/2, q'> directly (the table is
 *                 centred, which removes the -S_q/2 term and its cancellation).
 *   query-interleaved LUT (doc shape) for m query tokens padded to m_pad (a multiple
 *                 of 8): T[(16 g + nib) * m_pad + j] = entry nib of group g of token j's
 *                 LUT, zero for j >= m. One document token adds, for g = 0, 1, ..., the
 *                 contiguous row of its nibble into m_pad accumulators, which gives
 *                 <b - 1/2, q'_j> for every j at once, summed per lane in the order of
 *                 qm_lut_ip (so the doc and list forms agree bit for bit).
 *   4-bit query   q'_i ~= vlow + delta * qu_i, qu_i in 0..15, stored as 4 bit-planes
 *                 (plane p holds bit p of every qu_i in the 1-bit layout).
 */
#ifndef CHIMERA_QUANT_QUANT_MATH_H
#define CHIMERA_QUANT_QUANT_MATH_H

#include <stdint.h>

#if defined(__CUDACC__)
#define QM_HD __host__ __device__
#else
#define QM_HD
#endif

/* The papers' confidence constant: "nearly perfect confidence" in RaBitQ's words; for
 * Gaussian-like errors it is about a 6% two-sided miss rate, see tests/test_quant.c. */
#define QM_EPS0 1.9f

/* Per-token factors of the 1-bit plane: three IEEE halves (6 bytes). Halves suffice
 * here: their relative error (2^-11) is ~1% of the 1-bit estimator's own relative
 * error (tan(theta)/sqrt(d) ~ 7% at d = 128), measured in bench/bench_quant.c. */
typedef struct quant_f1 {
    uint16_t kappa;   /* f16 */
    uint16_t alpha;   /* f16 */
    uint16_t f_error; /* f16, bound per unit of eps0 * G_error */
} quant_f1;

/* Per-token factors of the B-bit code (8 bytes). alpha is itself a small correction and
 * f_error only a bound, so halves. kappa multiplies the large term <u, q'>: in RMSE its
 * f16 rounding is invisible (bench: B = 8 RMSE 3.946e-4 -> 3.947e-4), but its worst
 * case 2^-11 |kappa <u, q'>| reaches about half the B = 8 RMSE for far tokens
 * (|r| ~ 1), and float32 costs 2 bytes on 72 per host token; so kappa stays float32. */
typedef struct quant_fB {
    float kappa;
    uint16_t alpha;   /* f16 */
    uint16_t f_error; /* f16 */
} quant_fB;

/* Exact for every finite half (normals and subnormals: the shifted bits read as a float
 * are the value times 2^-112). Inf/NaN are never stored. Identical to F16C vcvtph2ps. */
QM_HD static inline float qm_f16_to_f32(uint16_t h)
{
    union {
        uint32_t u;
        float f;
    } m, s;
    m.u = (uint32_t)(h & 0x7fffu) << 13;
    s.f = m.f * 0x1p112f;
    s.u |= (uint32_t)(h & 0x8000u) << 16;
    return s.f;
}

/* Bytes of one token's 1-bit plane and of its B-bit code. */
QM_HD static inline uint32_t qm_code1_bytes(uint32_t dim_pad) { return dim_pad / 8; }
QM_HD static inline uint32_t qm_codeB_bytes(uint32_t dim_pad, uint32_t bits)
{
    return bits <= 4 ? dim_pad / 2 : dim_pad;
}

QM_HD static inline unsigned qm_code1_bit(const uint8_t *code, uint32_t i)
{
    return (code[i >> 3] >> (i & 7)) & 1u;
}

/* T_i of a B-bit code. */
QM_HD static inline unsigned qm_codeB_get(const uint8_t *code, uint32_t bits, uint32_t i)
{
    if (bits <= 4) return (code[i >> 1] >> ((i & 1) * 4)) & 15u;
    return code[i];
}

/* The centring offset (2^B - 1)/2 of a B-bit code: u_i = T_i - offset. */
QM_HD static inline float qm_codeB_offset(uint32_t bits)
{
    return 0.5f * (float)((1u << bits) - 1u);
}

/* Builds the centred 16-entry tables of one query token (layout above). Each entry is
 * reached from the one with its lowest set bit cleared by adding one coordinate, so the
 * table costs 16 additions per group and the order of operations is fixed: host and
 * device build bit-identical tables. */
QM_HD static inline void qm_lut_build(const float *q, uint32_t dim_pad, float *lut)
{
    for (uint32_t g = 0; g < dim_pad / 4; g++) {
        const float *x = q + 4 * g;
        float *L = lut + 16 * g;
        L[0] = -0.5f * (((x[0] + x[1]) + x[2]) + x[3]);
        for (unsigned j = 1; j < 16; j++) {
            unsigned low = j & (0u - j), k = low == 1 ? 0 : low == 2 ? 1 : low == 4 ? 2 : 3;
            L[j] = L[j & (j - 1)] + x[k];
        }
    }
}

/* <b - 1/2, q'> of one 1-bit code from the LUT, summed in group order (the SIMD
 * variants keep this order per lane, so they match it bit for bit). */
QM_HD static inline float qm_lut_ip(const float *lut, const uint8_t *code, uint32_t dim_pad)
{
    float acc = 0.0f;
    for (uint32_t g = 0; g < dim_pad / 4; g++)
        acc += lut[16 * g + ((code[g >> 1] >> ((g & 1) * 4)) & 15u)];
    return acc;
}

/* Copies the LUT of query token j (qm_lut_build layout) into column j of the
 * query-interleaved table T (layout above). */
QM_HD static inline void qm_lut_interleave(const float *lut, uint32_t dim_pad, uint32_t j,
                                           uint32_t m_pad, float *T)
{
    for (uint32_t r = 0; r < dim_pad * 4; r++) T[(uint64_t)r * m_pad + j] = lut[r];
}

/* Row of T that group g of a 1-bit code selects (m_pad floats). */
QM_HD static inline const float *qm_lut_t_row(const float *T, uint32_t m_pad, const uint8_t *code,
                                              uint32_t g)
{
    return T + (uint64_t)(16 * g + ((code[g >> 1] >> ((g & 1) * 4)) & 15u)) * m_pad;
}

/* Quantises a rotated query token to 4 bits per dim, uniformly between its min and max
 * (round to nearest). Writes plane p, word w to planes[(p * n_words + w) * stride]
 * (stride 1: plane-major per token; the multi-query layout interleaves tokens).
 * *sum_qu = sum_i qu_i, needed to centre the estimate (see qm_pop_ip). */
QM_HD static inline void qm_query4(const float *q, uint32_t dim_pad, uint64_t *planes,
                                   uint32_t stride, float *delta, float *vlow, int32_t *sum_qu)
{
    uint32_t n_words = dim_pad / 64;
    float lo = q[0], hi = q[0];
    for (uint32_t i = 1; i < dim_pad; i++) {
        lo = q[i] < lo ? q[i] : lo;
        hi = q[i] > hi ? q[i] : hi;
    }
    float d = (hi - lo) / 15.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
    int32_t s = 0;
    for (uint32_t w = 0; w < n_words; w++) {
        uint64_t p[4] = {0, 0, 0, 0};
        for (uint32_t k = 0; k < 64; k++) {
            float t = (q[64 * w + k] - lo) * inv + 0.5f;
            int32_t v = (int32_t)t; /* t >= 0, so truncation is floor */
            v = v > 15 ? 15 : v;
            s += v;
            for (int b = 0; b < 4; b++) p[b] |= (uint64_t)((v >> b) & 1) << k;
        }
        for (int b = 0; b < 4; b++) planes[((uint32_t)b * n_words + w) * stride] = p[b];
    }
    *delta = d;
    *vlow = lo;
    *sum_qu = s;
}

/* ---- 8-bit query for the integer doc-shape kernels (bench/RESULTS.md section 2.2) ----
 * Each rotated query token is quantised uniformly between its min and max to
 * qu_i in 0..255: q'_i ~= lo + delta qu_i, delta = (max - min)/255, round to nearest, so
 * |q~_i - q'_i| <= delta/2. The kernels then compute only integer sums of one signed
 * byte per dim of the document token times the unsigned query byte (vpmaddubsw and
 * vpdpbusd operands; |sum| < 2^31 for every dim_pad):
 *   nibble code (B <= 4, T_i in 0..15): A = sum_i (T_i - 8) qu_i and ST = sum_i T_i;
 *     with off = (2^B-1)/2, <T - off, q~> = delta (A + (8 - off) SQ) + lo (ST - off d_pad);
 *   1-bit plane (b_i in 0..1): A = sum_i (-b_i) qu_i and ST = sum_i b_i;
 *     <b - 1/2, q~> = delta (-A - SQ/2) + lo (ST - d_pad/2);
 * where SQ = sum_i qu_i.
 * Error: the estimate's inner product moves by <u, q~ - q'>, at most (delta/2) sum_i |u_i|
 * (the bound the tests check, times |kappa| in the estimate). For a unit query token
 * after the random rotation, max - min ~ 5/sqrt(d), so delta/2 ~ 1e-3 at d = 128, and the
 * rounding errors are zero-mean and independent of the code: their typical effect is
 * kappa |u| delta/sqrt(12) ~ |r| delta/sqrt(12) (kappa |u| ~ |r| / cos), about 3e-4 for
 * |r| ~ 0.5, next to a B = 4 estimator RMSE of 6.3e-3 and a 1-bit one of 4.7e-2; being
 * independent of them, it adds in quadrature (bench/bench_quant.c's error table: B = 4
 * RMSE 6.270e-3 -> 6.275e-3, the eps0 bound's miss rate 0.0492 -> 0.0495). On Chamfer
 * scores of the demo corpus the q8 - float difference is 0.0015 RMS against 0.032 for
 * float - exact (bench/RESULTS.md), so rankings move only where the estimator's own
 * noise already decides them. For B >= 5 the estimator's RMSE (3.9e-4 at B = 8) is of
 * the order of this error (bench/bench_quant.c's error table, row "B=8 q8"), yet
 * rankings on a real corpus came out as the float query's (bench/RESULTS.md section
 * 5.25), so byte codes use the 8-bit query too (as T - 128, kernels.h).
 *
 * Layout (query-interleaved, like lut_t): 4 dims (one 32-bit lane of vpdpbusd) per
 * group, q8_t[((i/4) * m_pad + j) * 4 + i % 4] = qu_i of query token j. One group of a
 * document token (4 signed bytes, broadcast) times the row of its group (m_pad lanes)
 * gives that group's sums for every query token at once: query tokens are the vector
 * lanes, and no horizontal reduction is needed. */

/* Quantises rotated query token j (q: dim_pad floats) into column j of q8_t (layout
 * above). */
QM_HD static inline void qm_query8(const float *q, uint32_t dim_pad, uint32_t j, uint32_t m_pad,
                                   uint8_t *q8_t, float *delta, float *lo, int32_t *sum_qu)
{
    float l = q[0], h = q[0];
    for (uint32_t i = 1; i < dim_pad; i++) {
        l = q[i] < l ? q[i] : l;
        h = q[i] > h ? q[i] : h;
    }
    float d = (h - l) / 255.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
    int32_t s = 0;
    for (uint32_t i = 0; i < dim_pad; i++) {
        float t = (q[i] - l) * inv + 0.5f;
        int32_t v = (int32_t)t; /* t >= 0: truncation is floor */
        v = v > 255 ? 255 : v;
        s += v;
        q8_t[((uint64_t)(i >> 2) * m_pad + j) * 4 + (i & 3u)] = (uint8_t)v;
    }
    *delta = d;
    *lo = l;
    *sum_qu = s;
}

/* <T - off, q~> from the integer sums (formulas above): a = A and hsq = (8 - off) SQ for
 * nibble codes, a = -A and hsq = -SQ/2 for the 1-bit plane (per query token), and
 * ysum = ST - off d_pad (per document token), all as float.
 * Separate statements, so no compiler fuses them into FMAs: SIMD variants perform the
 * same roundings lane by lane and match this bit for bit. */
QM_HD static inline float qm_q8_ip(float delta, float lo, float hsq, int32_t a, float ysum)
{
    float x = (float)a + hsq;
    float y = delta * x;
    float z = lo * ysum;
    return y + z;
}

/* <b - 1/2, q~> from the popcount sums wsum = sum_i b_i qu_i and pop = sum_i b_i, where
 * q~ is the quantised query. Centring on q~ (not on the exact S_q) keeps the query
 * rounding error zero-mean over the code bits; its size is at most delta * d_pad / 4. */
QM_HD static inline float qm_pop_ip(float delta, float vlow, uint32_t dim_pad, int32_t sum_qu,
                                    uint32_t wsum, uint32_t pop)
{
    return 0.5f * delta * (float)(2 * (int32_t)wsum - sum_qu) +
           0.5f * vlow * (float)(2 * (int32_t)pop - (int32_t)dim_pad);
}

/* The estimate <q, c> + alpha + kappa <u, q'>; ip = <u, q'>. */
QM_HD static inline float qm_est(float qc, float alpha, float kappa, float ip)
{
    return qc + alpha + kappa * ip;
}

QM_HD static inline float qm_est1(float qc, const quant_f1 *f, float ip)
{
    return qm_est(qc, qm_f16_to_f32(f->alpha), qm_f16_to_f32(f->kappa), ip);
}

QM_HD static inline float qm_estB(float qc, const quant_fB *f, float ip)
{
    return qm_est(qc, qm_f16_to_f32(f->alpha), f->kappa, ip);
}

/* |estimate - <q, v>| <= bound with high probability; g_error = |q' - c'|. */
QM_HD static inline float qm_bound(float f_error, float g_error, float eps0)
{
    return eps0 * f_error * g_error;
}

#endif
