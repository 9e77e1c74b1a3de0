/* Scalar reference kernels (RaBitQ inner products, docs/algorithms.md §1.7): the definition
 * that the SIMD variants are tested against. Straight loops in the summation order the
 * variants reproduce: the LUT sum runs over groups in order, per token (and per query
 * token in the doc form), and the estimate is (qc + alpha) + kappa * ip, unfused. The
 * 8-bit-query kernels are integer sums (any order) and the same unfused epilogue. */
#include "quant/kernels_impl.h"
#include "core/alloc.h"

static void ip1_lut(const float *lut, uint32_t dim_pad, const uint8_t *codes, size_t n,
                    float *ip)
{
    uint32_t cb = qm_code1_bytes(dim_pad);
    for (size_t t = 0; t < n; t++) ip[t] = qm_lut_ip(lut, codes + t * cb, dim_pad);
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

static void doc1_lut_max(const float *T, uint32_t mp, uint32_t m, uint32_t dim_pad,
                         const uint8_t *codes, const quant_f1 *f1, size_t n, const uint32_t *cid,
                         const float *cscore, size_t ld, float *out_max)
{
    float ip[QUANT_QTOK_MAX];
    uint32_t cb = qm_code1_bytes(dim_pad), G = dim_pad / 4;
    for (size_t t = 0; t < n; t++) {
        const uint8_t *code = codes + t * cb;
        for (uint32_t j = 0; j < m; j++) ip[j] = 0.0f;
        for (uint32_t g = 0; g < G; g++) {
            const float *row = qm_lut_t_row(T, mp, code, g);
            for (uint32_t j = 0; j < m; j++) ip[j] += row[j];
        }
        float alpha = qm_f16_to_f32(f1[t].alpha), kappa = qm_f16_to_f32(f1[t].kappa);
        const float *cs = cscore + (size_t)cid[t] * ld;
        for (uint32_t j = 0; j < m; j++) {
            float e = qm_est(cs[j], alpha, kappa, ip[j]);
            out_max[j] = e > out_max[j] ? e : out_max[j];
        }
    }
}

static void ipB_multi(const float *q, uint32_t m, uint32_t dim_pad, uint32_t bits,
                      const uint8_t *codes, size_t n, float *ip)
{
    float u[QUANT_DIM_MAX];
    uint32_t cb = qm_codeB_bytes(dim_pad, bits);
    for (size_t t = 0; t < n; t++) {
        qk_unpackB(codes + t * cb, bits, dim_pad, u);
        for (uint32_t j = 0; j < m; j++) {
            const float *x = q + (size_t)j * dim_pad;
            float acc = 0.0f;
            for (uint32_t i = 0; i < dim_pad; i++) acc += u[i] * x[i];
            ip[t * m + j] = acc;
        }
    }
}

/* ---- the 8-bit query: the integer definitions ---- */

/* a[j] = sum_i u[i] qu_ji for j < m, group by group (each row read contiguously). */
static void q8_dots(const uint8_t *qt, uint32_t mp, uint32_t m, uint32_t dim_pad, const int8_t *u,
                    int32_t *a)
{
    for (uint32_t j = 0; j < m; j++) a[j] = 0;
    for (uint32_t g = 0; g < dim_pad / 4; g++) {
        const uint8_t *row = qt + (size_t)g * mp * 4;
        int32_t u0 = u[4 * g], u1 = u[4 * g + 1], u2 = u[4 * g + 2], u3 = u[4 * g + 3];
        for (uint32_t j = 0; j < m; j++)
            a[j] += u0 * row[4 * j] + u1 * row[4 * j + 1] + u2 * row[4 * j + 2] +
                    u3 * row[4 * j + 3];
    }
}

static void ipB4_q8(const uint8_t *qt, uint32_t mp, uint32_t m, uint32_t dim_pad,
                    const uint8_t *codes, size_t n, int32_t *a, int32_t *st)
{
    int8_t u[QUANT_DIM_MAX];
    uint32_t cb = qm_codeB_bytes(dim_pad, 4);
    for (size_t t = 0; t < n; t++) {
        st[t] = qk_unpackB_s8(codes + t * cb, 4, dim_pad, u);
        q8_dots(qt, mp, m, dim_pad, u, a + t * m);
    }
}

/* The shared epilogue of one token: e_j = (cs[j] + alpha) + kappa * ip_j, maxima. */
static void q8_est_max(const quant_qset *qs, const int32_t *a, int neg, const float *hsq,
                       float ysum, float alpha, float kappa, const float *cs, float *out_max)
{
    for (uint32_t j = 0; j < qs->m; j++) {
        int32_t aj = neg ? -a[j] : a[j];
        float ip = qm_q8_ip(qs->q8_delta[j], qs->q8_lo[j], hsq[j], aj, ysum);
        float b = cs[j] + alpha;
        float c = kappa * ip;
        float e = b + c;
        out_max[j] = e > out_max[j] ? e : out_max[j];
    }
}

static void docB_q8_max(const quant_qset *qs, uint32_t bits, const uint8_t *codes,
                         const quant_fB *fB, size_t n, const uint32_t *cid, const float *cscore,
                         size_t ld, float *out_max)
{
    uint32_t d = qs->dim_pad, m = qs->m, cb = qm_codeB_bytes(d, bits);
    float off = qm_codeB_offset(bits), od = off * (float)d, hsq[QUANT_QTOK_MAX];
    float centre = (float)qk_q8_centre(bits);
    for (uint32_t j = 0; j < m; j++) hsq[j] = (centre - off) * (float)qs->q8_sum[j];
    int8_t u[QUANT_DIM_MAX];
    int32_t a[QUANT_QTOK_MAX];
    for (size_t t = 0; t < n; t++) {
        int32_t st = qk_unpackB_s8(codes + t * cb, bits, d, u);
        q8_dots(qs->q8_t, qs->m_pad, m, d, u, a);
        q8_est_max(qs, a, 0, hsq, (float)st - od, qm_f16_to_f32(fB[t].alpha), fB[t].kappa,
                   cscore + (size_t)cid[t] * ld, out_max);
    }
}

static void doc1_q8_max(const quant_qset *qs, const uint8_t *codes, const quant_f1 *f1, size_t n,
                        const uint32_t *cid, const float *cscore, size_t ld, float *out_max)
{
    uint32_t d = qs->dim_pad, m = qs->m, cb = qm_code1_bytes(d);
    float od = 0.5f * (float)d, hsq[QUANT_QTOK_MAX];
    for (uint32_t j = 0; j < m; j++) hsq[j] = -0.5f * (float)qs->q8_sum[j];
    int8_t u[QUANT_DIM_MAX];
    int32_t a[QUANT_QTOK_MAX];
    for (size_t t = 0; t < n; t++) {
        int32_t st = qk_unpack1_s8(codes + t * cb, d, u);
        q8_dots(qs->q8_t, qs->m_pad, m, d, u, a);
        q8_est_max(qs, a, 1, hsq, (float)st - od, qm_f16_to_f32(f1[t].alpha),
                   qm_f16_to_f32(f1[t].kappa), cscore + (size_t)cid[t] * ld, out_max);
    }
}

static void ci_max(const uint32_t *cid, size_t n, const float *cscore, size_t ld, uint32_t m,
                   float *out_max)
{
    for (size_t t = 0; t < n; t++) {
        const float *row = cscore + (size_t)cid[t] * ld;
        for (uint32_t j = 0; j < m; j++) out_max[j] = row[j] > out_max[j] ? row[j] : out_max[j];
    }
}

static void ip8_q8(const uint8_t *qt, uint32_t mp, uint32_t m, uint32_t dim_pad, const int8_t *rows,
                   size_t n, int32_t *a)
{
    for (size_t t = 0; t < n; t++) q8_dots(qt, mp, m, dim_pad, rows + t * dim_pad, a + t * m);
}

static void c8_finish(const int32_t *a, size_t n, uint32_t m, const float *delta, const float *lo,
                      const float *scale, const int32_t *csum, const uint32_t *ids, float *out,
                      size_t ld)
{
    for (size_t t = 0; t < n; t++) {
        size_t k = ids ? ids[t] : t;
        float s = scale[k], cs = (float)csum[k], *o = out + k * ld;
        for (uint32_t j = 0; j < m; j++) {
            /* two statements: one expression would let a compiler fuse a product */
            float y = delta[j] * (float)a[t * m + j], z = lo[j] * cs;
            o[j] = s * (y + z);
        }
    }
}

static size_t first_above(const float *S, size_t n, uint32_t m, const float *thr)
{
    for (size_t t = 0; t < n; t++)
        for (uint32_t j = 0; j < m; j++)
            if (S[t * m + j] > thr[j]) return t;
    return n;
}

static void est1_pop(const uint32_t *wsum, const uint32_t *pop, const quant_f1 *f1, size_t n,
                     float qc, float delta, float vlow, uint32_t dim_pad, int32_t sum_qu,
                     float *est)
{
    for (size_t t = 0; t < n; t++)
        est[t] = qk_est1_pop_one(wsum[t], pop[t], &f1[t], qc, delta, vlow, dim_pad, sum_qu);
}

const quant_kernels quant_kernels_scalar = {"scalar",      ip1_lut,   ip1_pop,
                                            ip1_pop_multi, doc1_lut_max, ipB_multi,
                                            ipB4_q8,       docB_q8_max,
                                            doc1_q8_max,   ci_max,       ip8_q8,
                                            c8_finish,     first_above,
                                            est1_pop,      0};
