/* What this proves: every SIMD variant of the quant kernels that this CPU can run
 * computes what the scalar reference computes. Integer outputs (the popcount sums) must
 * be equal bit for bit; the float-LUT sums too (each lane adds in the scalar order);
 * the B-bit float dot products, summed in another order with FMA, must agree within
 * the rounding-error bound of a d-term float dot product (dot_bound: 2 gamma_d times
 * the sum of the terms' magnitudes, not the result's, which cancellation can make
 * arbitrarily small). The B-bit doc-shape estimates inherit that bound through kappa,
 * plus the few roundings of the shared factor arithmetic; the 1-bit estimates are
 * compared bit for bit. Inputs: random codes and queries, encoded tokens,
 * and awkward cases: d not a multiple of 16 or 64 (padded dims 64, 128, 192, 256, 320),
 * token counts 0, 1 and around the 8/16-lane and block boundaries, a zero query, zero
 * residuals (v == c), m = 1 and m not a multiple of 8 (up to 33, past one 32-token
 * chunk). The 1-bit doc shape's interleaved-LUT kernel must equal scalar bit for bit and
 * equal the single-token LUT estimates (qm_lut_ip) exactly; its popcount form is checked
 * against it within the 4-bit query rounding. The full-bit kernels on the 8-bit query
 * (run_q8: nibble codes, B <= 4, and byte codes, B = 5 and 8) must equal scalar bit for
 * bit (integer sums, then the same float roundings
 * lane by lane), scalar must equal the integer definition written out per dim, the
 * query bytes must be within delta/2 of the rotated query, and every estimate must be
 * within the documented quantisation bound (delta_j/2) |kappa| sum_i |u_i| (plus a few
 * roundings) of a float64 evaluation of the float estimator; the 1-bit doc shape on
 * the 8-bit query likewise (|u_i| = 1/2); inputs add all-0 and
 * all-max codes, constant and one-spike query tokens, m = 1..70 (several 32-lane
 * chunks) and every token count around the 8-token block. A level the CPU lacks prints
 * "skipped: <level> not supported by this CPU". The centroid-interaction doc shape
 * (run_ci) must equal scalar bit for bit and the plain maximum of its rows, for m = 1..
 * 256 (every pass width and tail), any row stride, token counts 0, 1 and more, floors or
 * -inf to start from, and rows holding ties, +0 and -0, infinities and NaN (which never
 * wins a comparison, in scalar as in SIMD). The popcount form's list estimates
 * (run_est1_pop) must equal scalar bit for bit for factors of every half. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/cpu.h"
#include "core/rng.h"
#include "quant/kernels.h"
#include "quant/rabitq.h"
#include "core/alloc.h"

#define MQ 33 /* query tokens at most (m = 33: m_pad 40, one token past a 32-wide chunk) */

/* gamma_n = n u / (1 - n u) with u = 2^-24: a float dot product of n terms computed in
 * any order, with or without FMA, is within gamma_n * sum_i |a_i b_i| of the exact value
 * (Higham, Accuracy and Stability of Numerical Algorithms, 3.1). Two such computations
 * differ by at most twice that. */
static double gamma_n(uint32_t n)
{
    const double u = 0x1p-24;
    return n * u / (1.0 - n * u);
}

/* sum_i |u_i q_i| for one B-bit code (u_i = T_i - (2^B-1)/2, exact) and one query token. */
static double dot_terms(const float *q, const uint8_t *code, uint32_t bits, uint32_t D)
{
    double s = 0, off = qm_codeB_offset(bits);
    for (uint32_t i = 0; i < D; i++) s += fabs(((double)qm_codeB_get(code, bits, i) - off) * q[i]);
    return s;
}

/* Bound on |a - b| for two d-term dot products with terms of total magnitude `terms`. */
static double dot_bound(uint32_t D, double terms) { return 2.0 * gamma_n(D) * terms + 1e-30; }

/* Bound on the difference of two B-bit estimates qc + alpha + kappa * ip (the factor
 * arithmetic is shared code, so only ip differs): kappa carries ip's bound, and the
 * product and the two additions round once each (u relative to their magnitudes). */
static double est_bound(uint32_t D, double terms, float qc, float alpha, float kappa)
{
    const double u = 0x1p-24;
    double k = fabs(kappa);
    return k * dot_bound(D, terms) * (1.0 + 4 * u) +
           4 * u * (fabs(qc) + fabs(alpha) + k * terms) * 2.0;
}

/* The 1-bit doc forms on n tokens with centroids cid (rows of S, ld = m), from -inf and
 * from a random floor (max-accumulation must keep a floor that no token beats):
 * - interleaved LUT: the variant equals scalar bit for bit, and both equal the maxima of
 *   the single-token LUT estimates qm_est1(qc, f, qm_lut_ip(...)) (same sums, same order;
 *   LUT_TOL would be the fallback, it is not needed);
 * - popcount: the variant equals scalar bit for bit, and it is within the 4-bit query
 *   rounding (kappa * delta * d_pad / 4) of the LUT form. */
static int doc_forms(const quant_kernels *ref, const quant_kernels *k, const quant_qset *qs,
                     const uint8_t *c1, const quant_f1 *f1, size_t n, const uint32_t *cid,
                     const float *S, cm_rng *r)
{
    uint32_t m = qs->m, D = qs->dim_pad;
    float la[MQ], lb[MQ], pa[MQ], pb[MQ], want[MQ];
    int ok = 1;
    for (int floor_init = 0; floor_init < 2; floor_init++) {
        for (uint32_t j = 0; j < m; j++) {
            float f0 = floor_init ? (float)cm_rng_gauss(r) : -INFINITY;
            la[j] = lb[j] = pa[j] = pb[j] = want[j] = f0;
        }
        quant_est1_doc_max_lut(ref, qs, c1, f1, n, cid, S, m, la);
        quant_est1_doc_max_lut(k, qs, c1, f1, n, cid, S, m, lb);
        quant_est1_doc_max_pop(ref, qs, c1, f1, n, cid, S, m, pa);
        quant_est1_doc_max_pop(k, qs, c1, f1, n, cid, S, m, pb);
        float kmax = 0.0f;
        for (size_t t = 0; t < n; t++) {
            float kp = fabsf(qm_f16_to_f32(f1[t].kappa));
            kmax = kp > kmax ? kp : kmax;
            for (uint32_t j = 0; j < m; j++) {
                float ip = qm_lut_ip(qs->lut + (size_t)j * D * 4, c1 + t * D / 8, D);
                float e = qm_est1(S[cid[t] * m + j], &f1[t], ip);
                want[j] = e > want[j] ? e : want[j];
            }
        }
        for (uint32_t j = 0; j < m; j++) {
            ok &= memcmp(&la[j], &lb[j], 4) == 0 && memcmp(&la[j], &want[j], 4) == 0;
            ok &= memcmp(&pa[j], &pb[j], 4) == 0;
            float tol = kmax * qs->delta[j] * (float)D / 4.0f + 1e-4f * (1.0f + fabsf(la[j]));
            ok &= n == 0 ? pa[j] == la[j] : fabsf(pa[j] - la[j]) <= tol;
        }
    }
    return ok;
}

static void run(const quant_kernels *ref, const quant_kernels *k, uint32_t dim, cm_rng *r)
{
    quant_rotation rot;
    CHECK_OK(quant_rotation_init(&rot, dim, 77, NULL), NULL);
    uint32_t D = rot.dim_pad, W = D / 64;
    const size_t NMAX = 67;
    const uint32_t ms[] = {1, 3, 8, 13, 32, MQ};
    float *x = cm_malloc((size_t)NMAX * dim * 4), *vr = cm_malloc((size_t)NMAX * D * 4);
    float *cr = cm_malloc(D * 4), *q = cm_malloc(MQ * dim * 4);
    uint8_t *c1 = cm_malloc(NMAX * D / 8), *cB = cm_malloc(NMAX * D);
    quant_f1 *f1 = cm_malloc(NMAX * sizeof *f1);
    quant_fB *fB = cm_malloc(NMAX * sizeof *fB);
    uint32_t *cid = cm_calloc(NMAX, 4), *cid4 = cm_malloc(NMAX * 4);
    float *S = cm_malloc(MQ * 4), *S4 = cm_malloc(4 * MQ * 4); /* 4 centroid rows, ld = m */
    for (size_t t = 0; t < NMAX; t++) cid4[t] = (uint32_t)cm_rng_below(r, 4);
    quant_qset qs;
    CHECK_OK(quant_qset_init(&qs, D, MQ, NULL), NULL);
    float *fa = cm_malloc(NMAX * MQ * 4), *fb = cm_malloc(NMAX * MQ * 4);
    uint32_t *wa = cm_malloc(NMAX * MQ * 4), *wb = cm_malloc(NMAX * MQ * 4), pa[67], pb[67];

    for (uint32_t bits = 1; bits <= 8; bits++) {
        for (size_t i = 0; i < NMAX * dim; i++) x[i] = (float)cm_rng_gauss(r);
        quant_rotate_n(&rot, NMAX, x, dim, vr, D);
        quant_rotate(&rot, x, cr); /* token 0 equals its centroid: zero residual */
        CHECK_OK(quant_encode(D, bits, NMAX, vr, cr, NULL, c1, f1, cB, fB, NULL), NULL);
        /* Half of the B-bit codes random bytes (every nibble/byte value occurs). */
        size_t cbB = qm_codeB_bytes(D, bits);
        for (size_t i = NMAX / 2 * cbB; i < NMAX * cbB; i++) {
            unsigned v = (unsigned)cm_rng_next(r), mask = (1u << bits) - 1u;
            cB[i] = (uint8_t)(bits <= 4 ? v & (mask | mask << 4) : v & mask);
        }
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            uint32_t m = ms[mi];
            for (size_t i = 0; i < (size_t)m * dim; i++) q[i] = (float)cm_rng_gauss(r);
            if (m == 3) memset(q, 0, dim * 4); /* a zero query token */
            quant_qset_set(&qs, &rot, q, m);
            for (uint32_t j = 0; j < m; j++) S[j] = (float)cm_rng_gauss(r);
            for (uint32_t j = 0; j < 4 * m; j++) S4[j] = (float)cm_rng_gauss(r);
            const size_t ns[] = {0, 1, 7, 8, 9, 15, 16, 17, NMAX};
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                size_t n = ns[ni];
                int ok_lut = 1, ok_pop = 1, ok_multi = 1, ok_B = 1, ok_est = 1, ok_doc = 1;
                for (uint32_t j = 0; j < m; j++) {
                    const float *lut = qs.lut + (size_t)j * D * 4;
                    ref->ip1_lut(lut, D, c1, n, fa);
                    k->ip1_lut(lut, D, c1, n, fb);
                    ok_lut &= n == 0 || memcmp(fa, fb, n * 4) == 0;
                    const uint64_t *pl = qs.planes + (size_t)j * 4 * W;
                    ref->ip1_pop(pl, W, c1, n, wa, pa);
                    k->ip1_pop(pl, W, c1, n, wb, pb);
                    ok_pop &= n == 0 || (memcmp(wa, wb, n * 4) == 0 && memcmp(pa, pb, n * 4) == 0);
                    float qc = S[j];
                    quant_est1_list_lut(ref, &qs, j, c1, f1, n, qc, fa);
                    quant_est1_list_lut(k, &qs, j, c1, f1, n, qc, fb);
                    ok_est &= n == 0 || memcmp(fa, fb, n * 4) == 0;
                    quant_est1_list_pop(ref, &qs, j, c1, f1, n, qc, fa);
                    quant_est1_list_pop(k, &qs, j, c1, f1, n, qc, fb);
                    ok_est &= n == 0 || memcmp(fa, fb, n * 4) == 0;
                }
                ref->ip1_pop_multi(qs.planes_t, qs.m_pad, m, W, c1, n, wa, pa);
                k->ip1_pop_multi(qs.planes_t, qs.m_pad, m, W, c1, n, wb, pb);
                ok_multi &= n == 0 || (memcmp(wa, wb, n * m * 4) == 0 && memcmp(pa, pb, n * 4) == 0);
                ref->ipB_multi(qs.q, m, D, bits, cB, n, fa);
                k->ipB_multi(qs.q, m, D, bits, cB, n, fb);
                /* tolB[j]: the largest estimate bound over the tokens, which bounds the
                 * difference of the two maxima. */
                double tolB[MQ] = {0};
                for (size_t i = 0; i < n * m; i++) {
                    size_t t = i / m, j = i % m;
                    double terms = dot_terms(qs.q + j * D, cB + t * cbB, bits, D);
                    ok_B &= fabs((double)fa[i] - (double)fb[i]) <= dot_bound(D, terms);
                    double tb = est_bound(D, terms, S[cid[t] * m + j],
                                          qm_f16_to_f32(fB[t].alpha), fB[t].kappa);
                    tolB[j] = tb > tolB[j] ? tb : tolB[j];
                }
                float ma[MQ], mb[MQ], ba[MQ], bb[MQ];
                for (uint32_t j = 0; j < m; j++) ma[j] = mb[j] = ba[j] = bb[j] = -INFINITY;
                quant_est1_doc_max_lut(ref, &qs, c1, f1, n, cid, S, m, ma);
                quant_est1_doc_max_lut(k, &qs, c1, f1, n, cid, S, m, mb);
                quant_estB_doc_max_float(ref, &qs, bits, cB, fB, n, cid, S, m, ba);
                quant_estB_doc_max_float(k, &qs, bits, cB, fB, n, cid, S, m, bb);
                ok_doc &= doc_forms(ref, k, &qs, c1, f1, n, cid4, S4, r);
                for (uint32_t j = 0; j < m; j++) {
                    ok_est &= memcmp(&ma[j], &mb[j], 4) == 0;
                    ok_est &= n == 0 ? (ba[j] == -INFINITY && bb[j] == -INFINITY)
                                     : fabs((double)ba[j] - (double)bb[j]) <= tolB[j];
                }
                CHECKF(ok_lut, "%s ip1_lut d=%u n=%zu m=%u", k->name, dim, n, m);
                CHECKF(ok_pop, "%s ip1_pop d=%u n=%zu m=%u", k->name, dim, n, m);
                CHECKF(ok_multi, "%s ip1_pop_multi d=%u n=%zu m=%u", k->name, dim, n, m);
                CHECKF(ok_B, "%s ipB_multi d=%u B=%u n=%zu m=%u", k->name, dim, bits, n, m);
                CHECKF(ok_est, "%s estimates d=%u B=%u n=%zu m=%u", k->name, dim, bits, n, m);
                CHECKF(ok_doc, "%s 1-bit doc forms d=%u B=%u n=%zu m=%u", k->name, dim, bits, n, m);
            }
        }
    }
    /* The scalar LUT and popcount sums agree with direct bit arithmetic (so the
     * reference itself is pinned down, not only its copies). */
    quant_qset_set(&qs, &rot, q, 1);
    int ok = 1;
    for (size_t t = 0; t < NMAX; t++) {
        double s = 0;
        uint32_t ws = 0, pc = 0;
        for (uint32_t i = 0; i < D; i++) {
            unsigned b = qm_code1_bit(c1 + t * D / 8, i);
            s += (b - 0.5) * qs.q[i];
            unsigned qu = 0;
            for (int p = 0; p < 4; p++) qu |= (unsigned)((qs.planes[p * W + i / 64] >> (i % 64)) & 1) << p;
            ws += b * qu;
            pc += b;
        }
        ref->ip1_lut(qs.lut, D, c1 + t * D / 8, 1, fa);
        ref->ip1_pop(qs.planes, W, c1 + t * D / 8, 1, wa, pa);
        ok &= fabs(fa[0] - s) < 1e-4 && wa[0] == ws && pa[0] == pc;
    }
    CHECKF(ok, "scalar reference vs direct bit sums d=%u", dim);
    quant_qset_free(&qs);
    cm_free(x);
    cm_free(vr);
    cm_free(cr);
    cm_free(q);
    cm_free(c1);
    cm_free(cB);
    cm_free(f1);
    cm_free(fB);
    cm_free(cid);
    cm_free(cid4);
    cm_free(S);
    cm_free(S4);
    cm_free(fa);
    cm_free(fb);
    cm_free(wa);
    cm_free(wb);
}

/* ---- B-bit codes on the 8-bit query ---- */

#define MQ8 70 /* three 32-lane chunks, the last one partial */

static int q8_query_ok(const quant_qset *qs)
{
    uint32_t D = qs->dim_pad, mp = qs->m_pad;
    int ok = 1;
    for (uint32_t j = 0; j < mp; j++) {
        int32_t s = 0;
        for (uint32_t p = 0; p < D; p++) {
            unsigned qu = qs->q8_t[((size_t)(p / 4) * mp + j) * 4 + p % 4];
            s += (int32_t)qu;
            if (j >= qs->m) {
                ok &= qu == 0;
                continue;
            }
            double x = qs->q[(size_t)j * D + p];
            double back = qs->q8_lo[j] + (double)qs->q8_delta[j] * qu;
            /* half a step, plus the float roundings of (q - lo) / delta: a few relative
             * 2^-24 errors of a value up to 255 steps (8 of them, 1.2e-4 of a step) */
            ok &= fabs(back - x) <= (0.5 + 255 * 8 * 0x1p-24) * qs->q8_delta[j] + 1e-6 * fabs(x) + 1e-30;
        }
        ok &= s == qs->q8_sum[j];
    }
    /* the two-token copy (m <= 8): token j's bytes in dwords 2j and 2j + 1, zero after */
    for (uint32_t g = 0; qs->m <= 8 && g < D / 4; g++)
        for (uint32_t l = 0; l < 16; l++)
            for (uint32_t b = 0; b < 4; b++) {
                uint8_t want = l / 2 < qs->m ? qs->q8_t[((size_t)g * mp + l / 2) * 4 + b] : 0;
                ok &= qs->q8_pair[((size_t)g * 16 + l) * 4 + b] == want;
            }
    return ok;
}

static void run_q8(const quant_kernels *ref, const quant_kernels *k, uint32_t dim, cm_rng *r)
{
    quant_rotation rot;
    CHECK_OK(quant_rotation_init(&rot, dim, 91, NULL), NULL);
    uint32_t D = rot.dim_pad;
    enum { NMAX = 67 };
    const uint32_t ms[] = {1, 2, 5, 8, 9, 16, 17, 31, 32, 33, 48, MQ8};
    /* nibble codes (B <= 4) and byte codes (B >= 5: 5 leaves the top bits clear, 8 uses
     * the whole byte) */
    const uint32_t bit_list[] = {1, 2, 3, 4, 5, 8};
    const size_t ns[] = {0, 1, 2, 7, 8, 9, 15, 16, 17, 23, NMAX};
    float *x = cm_malloc((size_t)NMAX * dim * 4), *vr = cm_malloc((size_t)NMAX * D * 4);
    float *cr = cm_malloc(4 * (size_t)D * 4), *q = cm_malloc((size_t)MQ8 * dim * 4);
    uint8_t *c1 = cm_malloc(NMAX * D / 8), *cB = cm_malloc((size_t)NMAX * D);
    quant_f1 *f1 = cm_malloc(NMAX * sizeof *f1);
    quant_fB *fB = cm_malloc(NMAX * sizeof *fB);
    uint32_t *cid = cm_malloc(NMAX * 4);
    float *S = cm_malloc(4 * MQ8 * 4); /* 4 centroid rows, ld = m */
    int32_t *aa = cm_malloc((size_t)NMAX * MQ8 * 4), *ab = cm_malloc((size_t)NMAX * MQ8 * 4);
    int32_t sa[NMAX], sbb[NMAX];
    quant_qset qs;
    CHECK_OK(quant_qset_init(&qs, D, MQ8, NULL), NULL);
    for (size_t bi = 0; bi < sizeof bit_list / sizeof bit_list[0]; bi++) {
        uint32_t bits = bit_list[bi], cb = qm_codeB_bytes(D, bits);
        int32_t centre = bits <= 4 ? 8 : 128; /* kernels.h, docB_q8_max */
        for (size_t i = 0; i < (size_t)NMAX * dim; i++) x[i] = (float)cm_rng_gauss(r);
        for (uint32_t c = 0; c < 4; c++) {
            float cc[4096];
            for (uint32_t i = 0; i < dim; i++) cc[i] = 0.3f * (float)cm_rng_gauss(r);
            quant_rotate(&rot, cc, cr + (size_t)c * D);
        }
        for (size_t t = 0; t < NMAX; t++) cid[t] = (uint32_t)cm_rng_below(r, 4);
        quant_rotate_n(&rot, NMAX, x, dim, vr, D);
        memcpy(vr, cr + (size_t)cid[0] * D, D * 4); /* token 0: zero residual */
        CHECK_OK(quant_encode(D, bits, NMAX, vr, cr, cid, c1, f1, cB, fB, NULL), NULL);
        /* Adversarial codes: tokens 1-2 all 0, 3-4 all max, 40.. random bytes. */
        unsigned mask = (1u << bits) - 1u, full = bits <= 4 ? mask | mask << 4 : mask;
        memset(cB + 1 * cb, 0, 2 * cb);
        memset(cB + 3 * cb, (int)full, 2 * cb);
        for (size_t i = 40 * (size_t)cb; i < (size_t)NMAX * cb; i++)
            cB[i] = (uint8_t)((unsigned)cm_rng_next(r) & full);
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            uint32_t m = ms[mi];
            for (size_t i = 0; i < (size_t)m * dim; i++) q[i] = (float)cm_rng_gauss(r);
            if (m >= 3) {
                memset(q + dim, 0, dim * 4); /* a zero token: delta = 0 */
                for (uint32_t i = 0; i < dim; i++) q[2 * dim + i] = i == dim / 2 ? 50.0f : 1e-3f;
            }
            quant_qset_set(&qs, &rot, q, m);
            CHECKF(q8_query_ok(&qs), "q8 query d=%u m=%u", dim, m);
            for (uint32_t j = 0; j < 4 * m; j++) S[j] = (float)cm_rng_gauss(r);
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                size_t n = ns[ni];
                int ok_raw = 1, ok_def = 1, ok_doc = 1, ok_err = 1;
                if (bits <= 4) { /* the raw integer kernel takes nibble codes only */
                    ref->ipB4_q8(qs.q8_t, qs.m_pad, m, D, cB, n, aa, sa);
                    k->ipB4_q8(qs.q8_t, qs.m_pad, m, D, cB, n, ab, sbb);
                    ok_raw &= n == 0 || (memcmp(aa, ab, n * m * 4) == 0 && memcmp(sa, sbb, n * 4) == 0);
                }
                /* the definition, per dim; mdef: its estimates' maxima, as the kernels take
                 * them (kernels.h: the same float operations, so scalar equals them) */
                double tol[MQ8];
                float mdef[MQ8];
                for (uint32_t j = 0; j < m; j++) {
                    tol[j] = 0;
                    mdef[j] = -INFINITY;
                }
                for (size_t t = 0; t < n; t++) {
                    const uint8_t *code = cB + t * cb;
                    int32_t st = 0;
                    for (uint32_t i = 0; i < D; i++) st += (int32_t)qm_codeB_get(code, bits, i);
                    ok_def &= bits > 4 || st == sa[t];
                    float alpha = qm_f16_to_f32(fB[t].alpha), kappa = fB[t].kappa;
                    double off = qm_codeB_offset(bits), su = 0;
                    for (uint32_t i = 0; i < D; i++) su += fabs(qm_codeB_get(code, bits, i) - off);
                    for (uint32_t j = 0; j < m; j++) {
                        int64_t a = 0;
                        double ipx = 0;
                        for (uint32_t i = 0; i < D; i++) {
                            unsigned qu = qs.q8_t[((size_t)(i / 4) * qs.m_pad + j) * 4 + i % 4];
                            a += ((int64_t)qm_codeB_get(code, bits, i) - centre) * qu;
                        }
                        for (uint32_t i = 0; i < D; i++)
                            ipx += (qm_codeB_get(code, bits, i) - off) * (double)qs.q[(size_t)j * D + i];
                        ok_def &= bits > 4 || a == aa[t * m + j];
                        /* the q8 estimate against float64 of the float estimator */
                        double cs = S[cid[t] * m + j], ex = cs + alpha + (double)kappa * ipx;
                        float hsq = ((float)centre - (float)off) * (float)qs.q8_sum[j];
                        float ysum = (float)st - (float)off * (float)D;
                        float ip = qm_q8_ip(qs.q8_delta[j], qs.q8_lo[j], hsq, (int32_t)a, ysum);
                        float e = (float)(cs + alpha) + kappa * ip;
                        mdef[j] = e > mdef[j] ? e : mdef[j];
                        double mag = fabs(qs.q8_delta[j]) * (fabs((double)a) + fabs(hsq)) +
                                     fabs(qs.q8_lo[j] * ysum);
                        double bound = fabs(kappa) * (0.5 * qs.q8_delta[j] * su) * (1 + 1e-5) +
                                       64 * 0x1p-24 * (fabs(cs) + fabs(alpha) + fabs(kappa) * mag) +
                                       1e-30;
                        ok_err &= fabs(e - ex) <= bound;
                        tol[j] = bound > tol[j] ? bound : tol[j];
                    }
                }
                for (int floor_init = 0; floor_init < 2; floor_init++) {
                    float ma[MQ8], mb[MQ8], mf[MQ8];
                    for (uint32_t j = 0; j < m; j++)
                        ma[j] = mb[j] = mf[j] = floor_init ? (float)cm_rng_gauss(r) : -INFINITY;
                    quant_estB_doc_max_q8(ref, &qs, bits, cB, fB, n, cid, S, m, ma);
                    quant_estB_doc_max_q8(k, &qs, bits, cB, fB, n, cid, S, m, mb);
                    quant_estB_doc_max_float(ref, &qs, bits, cB, fB, n, cid, S, m, mf);
                    for (uint32_t j = 0; j < m; j++) {
                        ok_doc &= memcmp(&ma[j], &mb[j], 4) == 0;
                        if (!floor_init && n > 0) ok_def &= memcmp(&ma[j], &mdef[j], 4) == 0;
                        /* maxima of values each within tol of float64: within 2 tol of
                         * the float path's (itself within rounding of float64) */
                        if (n == 0) ok_doc &= ma[j] == mf[j];
                        else ok_err &= fabs((double)ma[j] - mf[j]) <= 2 * tol[j] + 1e-5 * (1 + fabs(mf[j]));
                    }
                }
                /* the 1-bit doc shape on the 8-bit query: bit for bit across levels,
                 * and within (delta_j/2) |kappa| d/2 (|u_i| = 1/2) of float64 */
                int ok_1 = 1, ok_1err = 1;
                double tol1[MQ8];
                for (uint32_t j = 0; j < m; j++) tol1[j] = 0;
                for (size_t t = 0; t < n; t++) {
                    const uint8_t *code = c1 + t * (D / 8);
                    float alpha = qm_f16_to_f32(f1[t].alpha), kappa = qm_f16_to_f32(f1[t].kappa);
                    for (uint32_t j = 0; j < m; j++) {
                        double ipx = 0;
                        for (uint32_t i = 0; i < D; i++)
                            ipx += (qm_code1_bit(code, i) - 0.5) * (double)qs.q[(size_t)j * D + i];
                        double cs = S[cid[t] * m + j];
                        double bound = fabs(kappa) * 0.25 * qs.q8_delta[j] * D * (1 + 1e-5) +
                                       64 * 0x1p-24 * (fabs(cs) + fabs(alpha) + fabs(kappa) *
                                       (fabs(ipx) + qs.q8_delta[j] * 2.0 * qs.q8_sum[j] +
                                        fabs(qs.q8_lo[j]) * D)) + 1e-30;
                        double prev = tol1[j];
                        tol1[j] = bound > prev ? bound : prev;
                    }
                }
                for (int floor_init = 0; floor_init < 2; floor_init++) {
                    float ma[MQ8], mb[MQ8];
                    double mx[MQ8];
                    for (uint32_t j = 0; j < m; j++) {
                        ma[j] = mb[j] = floor_init ? (float)cm_rng_gauss(r) : -INFINITY;
                        mx[j] = ma[j];
                    }
                    quant_est1_doc_max_q8(ref, &qs, c1, f1, n, cid, S, m, ma);
                    quant_est1_doc_max_q8(k, &qs, c1, f1, n, cid, S, m, mb);
                    for (size_t t = 0; t < n; t++) {
                        const uint8_t *code = c1 + t * (D / 8);
                        float alpha = qm_f16_to_f32(f1[t].alpha), kappa = qm_f16_to_f32(f1[t].kappa);
                        for (uint32_t j = 0; j < m; j++) {
                            double ipx = 0;
                            for (uint32_t i = 0; i < D; i++)
                                ipx += (qm_code1_bit(code, i) - 0.5) * (double)qs.q[(size_t)j * D + i];
                            double ex = (double)S[cid[t] * m + j] + alpha + (double)kappa * ipx;
                            mx[j] = ex > mx[j] ? ex : mx[j];
                        }
                    }
                    for (uint32_t j = 0; j < m; j++) {
                        ok_1 &= memcmp(&ma[j], &mb[j], 4) == 0;
                        if (n == 0) ok_1 &= ma[j] == mx[j];
                        else ok_1err &= fabs((double)ma[j] - mx[j]) <= tol1[j];
                    }
                }
                CHECKF(ok_1, "%s doc1_q8_max d=%u n=%zu m=%u", k->name, dim, n, m);
                CHECKF(ok_1err, "1-bit q8 estimate error bound d=%u n=%zu m=%u", dim, n, m);
                if (bits <= 4) CHECKF(ok_raw, "%s ipB4_q8 d=%u B=%u n=%zu m=%u", k->name, dim, bits, n, m);
                CHECKF(ok_def, "scalar docB_q8_max (and ipB4_q8) vs definition d=%u B=%u n=%zu m=%u",
                       dim, bits, n, m);
                CHECKF(ok_doc, "%s docB_q8_max d=%u B=%u n=%zu m=%u", k->name, dim, bits, n, m);
                CHECKF(ok_err, "q8 estimate error bound d=%u B=%u n=%zu m=%u", dim, bits, n, m);
            }
        }
    }
    quant_qset_free(&qs);
    cm_free(x);
    cm_free(vr);
    cm_free(cr);
    cm_free(q);
    cm_free(c1);
    cm_free(cB);
    cm_free(f1);
    cm_free(fB);
    cm_free(cid);
    cm_free(S);
    cm_free(aa);
    cm_free(ab);
}

/* The centroid-interaction kernel (ci_max) against scalar, and scalar against its
 * definition. */
static void run_ci(const quant_kernels *ref, const quant_kernels *k, cm_rng *r)
{
    enum { K = 37, MMAX = QUANT_QTOK_MAX, NMAX = 50 };
    static float S[(K + 1) * (MMAX + 5)];
    uint32_t cid[NMAX];
    const uint32_t ms[] = {1, 3, 8, 12, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 100, 129, 256};
    const size_t ns[] = {0, 1, 2, 7, 50};
    int ok = 1, ok_def = 1;
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
        for (int adv = 0; adv < 2; adv++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                uint32_t m = ms[mi];
                size_t ld = m + (size_t)(cm_rng_below(r, 5)), n = ns[ni];
                for (size_t i = 0; i < (size_t)K * ld; i++) {
                    float v = (float)cm_rng_gauss(r);
                    if (adv) { /* few distinct values: ties, signed zeros, inf, NaN */
                        const float pick[] = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN};
                        v = pick[cm_rng_below(r, 7)];
                    }
                    S[i] = v;
                }
                for (size_t t = 0; t < n; t++) cid[t] = (uint32_t)cm_rng_below(r, K);
                float a[MMAX], b[MMAX];
                for (uint32_t j = 0; j < m; j++)
                    a[j] = b[j] = (cm_rng_next(r) & 1) ? -INFINITY : (adv ? 0.0f : (float)cm_rng_gauss(r));
                float def[MMAX];
                memcpy(def, a, m * sizeof(float));
                quant_ci_doc_max(ref, cid, n, S, ld, m, a);
                quant_ci_doc_max(k, cid, n, S, ld, m, b);
                for (uint32_t j = 0; j < m; j++) {
                    ok &= memcmp(&a[j], &b[j], sizeof(float)) == 0;
                    float mx = def[j];
                    for (size_t t = 0; t < n; t++) {
                        float v = S[(size_t)cid[t] * ld + j];
                        if (v > mx) mx = v;
                    }
                    /* the definition: the first-seen of the largest non-NaN values */
                    ok_def &= memcmp(&mx, &a[j], sizeof(float)) == 0;
                }
                CHECKF(ok, "%s ci_max m=%u ld=%zu n=%zu adversarial=%d", k->name, m, ld, n, adv);
                CHECKF(ok_def, "scalar ci_max vs the maximum m=%u n=%zu adversarial=%d", m, n, adv);
            }
}

/* The probe selection's row scan (first_above) against scalar, and scalar against its
 * definition: m around the 8- and 16-lane widths and the one-vector paths, row counts
 * around the four-row groups, the first passing row anywhere (or none); plain draws,
 * and adversarial ones of few values (ties with the threshold pass nothing, NaN on
 * either side passes nothing, -inf thresholds let any finite score pass). */
static void run_first_above(const quant_kernels *ref, const quant_kernels *k, cm_rng *r)
{
    enum { MMAX = QUANT_QTOK_MAX, NMAX = 70 };
    static float S[NMAX * MMAX];
    float thr[MMAX];
    const uint32_t ms[] = {1, 2, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 64, 100, 256};
    const size_t ns[] = {1, 3, 4, 5, 8, 9, 69, 70};
    const float pick[] = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN};
    int ok = 1, ok_def = 1;
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (int adv = 0; adv < 2; adv++)
                for (int rep = 0; rep < 4; rep++) {
                    uint32_t m = ms[mi];
                    size_t n = ns[ni];
                    for (uint32_t j = 0; j < m; j++)
                        thr[j] = adv ? pick[cm_rng_below(r, 7)] : 1.0f + (float)cm_rng_uniform(r);
                    /* every score at or below its threshold, then one row made to pass
                     * in one column (or none, rep 0) */
                    for (size_t t = 0; t < n; t++)
                        for (uint32_t j = 0; j < m; j++) {
                            float v = adv ? pick[cm_rng_below(r, 7)] : thr[j] - (float)cm_rng_uniform(r);
                            if (!(v <= thr[j]) && !isnan(v)) v = thr[j]; /* ties pass nothing */
                            S[t * m + j] = v;
                        }
                    for (int e = 0; e < rep; e++) {
                        size_t t = (size_t)cm_rng_below(r, (uint32_t)n);
                        uint32_t j = (uint32_t)cm_rng_below(r, m);
                        if (isfinite(thr[j])) S[t * m + j] = thr[j] + 0.25f;
                        else if (thr[j] == -INFINITY) S[t * m + j] = 0.0f;
                    }
                    size_t want = n;
                    for (size_t t = 0; t < n && want == n; t++)
                        for (uint32_t j = 0; j < m; j++)
                            if (S[t * m + j] > thr[j]) {
                                want = t;
                                break;
                            }
                    size_t a = quant_first_above(ref, S, n, m, thr);
                    size_t b = quant_first_above(k, S, n, m, thr);
                    ok &= a == b;
                    ok_def &= a == want;
                    CHECKF(ok, "%s first_above m=%u n=%zu adversarial=%d: %zu, scalar %zu", k->name,
                           m, n, adv, b, a);
                    CHECKF(ok_def, "scalar first_above m=%u n=%zu adversarial=%d: %zu, want %zu",
                           m, n, adv, a, want);
                    if (!ok || !ok_def) return;
                }
}

/* The 8-bit centroid rows (quant_c8_encode, ip8_q8, quant_c8_scores). Encoding: every
 * code within +-127, csum their sum, and each rotated coordinate within scale/2 (one
 * rounding of the quotient on top) of scale x code; all-zero and tiny rows get scale 0.
 * The integer kernel equals scalar bit for bit and scalar equals its definition (the
 * one-spike row holds +-127 against query bytes up to 255: AVX2's saturation case), for
 * row counts around the 8-row block and 4-row group and m = 1..70 (8-, 16- and 32-lane
 * tails). Scores: each level's quant_c8_scores (ids repeated and out of order, row
 * stride ld > m, counts around the prefetch distance) equals scalar's bit for bit and
 * lies within the documented bound of the float64 <q_j, c_k>; a row with extreme
 * entries (one spike, the rest tiny) saturates nothing. */
static void run_c8(const quant_kernels *ref, const quant_kernels *k, uint32_t dim, cm_rng *r)
{
    quant_rotation rot;
    CHECK_OK(quant_rotation_init(&rot, dim, 57, NULL), NULL);
    uint32_t D = rot.dim_pad;
    enum { K = 41, NMAX = K, MC = 70 };
    float *c = cm_malloc((size_t)K * dim * 4), *q = cm_malloc((size_t)MC * dim * 4);
    float *y = cm_malloc((size_t)D * 4), *qy = cm_malloc((size_t)MC * D * 4);
    float scale[K];
    int32_t csum[K];
    int8_t *codes = cm_malloc((size_t)K * D);
    int32_t *aa = cm_malloc((size_t)NMAX * MC * 4), *ab = cm_malloc((size_t)NMAX * MC * 4);
    size_t ldmax = MC + 3;
    float *Sa = cm_malloc((size_t)K * ldmax * 4), *Sb = cm_malloc((size_t)K * ldmax * 4);
    uint32_t ids[NMAX];
    quant_qset qs;
    CHECK_OK(quant_qset_init(&qs, D, MC, NULL), NULL);
    for (uint32_t kk = 0; kk < K; kk++)
        for (uint32_t i = 0; i < dim; i++) {
            float v = (float)cm_rng_gauss(r);
            if (kk == 0) v = 0.0f;                  /* all zero */
            if (kk == 1) v = 1e-35f * v;            /* tiny: under 2^-100 after rotation */
            if (kk == 2) v = i == 0 ? 50.0f : 1e-3f * v; /* one spike */
            c[(size_t)kk * dim + i] = v;
        }
    quant_c8_encode(&rot, c, K, codes, scale, csum);
    int enc_ok = 1;
    for (uint32_t kk = 0; kk < K; kk++) {
        quant_rotate(&rot, c + (size_t)kk * dim, y);
        int32_t sum = 0;
        for (uint32_t i = 0; i < D; i++) {
            int8_t v = codes[(size_t)kk * D + i];
            sum += v;
            enc_ok &= v != -128;
            enc_ok &= fabs((double)y[i] - (double)scale[kk] * v) <=
                      0.5 * scale[kk] * (1.0 + 1e-5) + 0x1p-100;
        }
        enc_ok &= sum == csum[kk];
        if (kk < 2) enc_ok &= scale[kk] == 0.0f;
    }
    CHECKF(enc_ok, "quant_c8_encode d=%u: codes, sums or rounding bound", dim);
    const uint32_t ms[] = {1, 3, 8, 9, 16, 17, 31, 32, 33, 48, 64, MC};
    const size_t ns[] = {0, 1, 3, 4, 5, 7, 8, 9, 16, 17, 23, NMAX};
    int ip_ok = 1, def_ok = 1, sc_ok = 1, bound_ok = 1;
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        uint32_t m = ms[mi];
        for (size_t i = 0; i < (size_t)m * dim; i++) q[i] = (float)cm_rng_gauss(r);
        if (m > 2) /* a constant token and a one-spike token */
            for (uint32_t i = 0; i < dim; i++) {
                q[i] = 0.25f;
                q[dim + i] = i == dim / 2 ? 3.0f : 0.0f;
            }
        quant_qset_set(&qs, &rot, q, m);
        quant_rotate_n(&rot, m, q, dim, qy, D);
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            size_t n = ns[ni], ld = m + cm_rng_below(r, 4);
            for (size_t t = 0; t < n; t++) ids[t] = (uint32_t)cm_rng_below(r, K);
            /* the kernel on gathered rows, against scalar and the definition */
            int8_t *rows = cm_malloc(n * D + 1);
            for (size_t t = 0; t < n; t++) memcpy(rows + t * D, codes + (size_t)ids[t] * D, D);
            ref->ip8_q8(qs.q8_t, qs.m_pad, m, D, rows, n, aa);
            k->ip8_q8(qs.q8_t, qs.m_pad, m, D, rows, n, ab);
            ip_ok &= n == 0 || memcmp(aa, ab, n * m * 4) == 0;
            for (size_t t = 0; t < n; t++)
                for (uint32_t j = 0; j < m; j++) {
                    int64_t a = 0;
                    for (uint32_t i = 0; i < D; i++)
                        a += (int64_t)rows[t * D + i] *
                             qs.q8_t[((size_t)(i / 4) * qs.m_pad + j) * 4 + i % 4];
                    def_ok &= a == aa[t * m + j];
                }
            cm_free(rows);
            /* scores: scattered rows, bit for bit and within the bound */
            for (size_t i = 0; i < (size_t)K * ld; i++) Sa[i] = Sb[i] = -7.0f;
            quant_c8_scores(ref, &qs, codes, scale, csum, ids, n, Sa, ld);
            quant_c8_scores(k, &qs, codes, scale, csum, ids, n, Sb, ld);
            sc_ok &= memcmp(Sa, Sb, (size_t)K * ld * 4) == 0;
            for (size_t t = 0; t < n; t++) {
                uint32_t kk = ids[t];
                for (uint32_t j = 0; j < m; j++) {
                    const float *qj = qy + (size_t)j * D;
                    double l1q = 0.0, l1c = 0.0;
                    float lo = qj[0], hi = qj[0];
                    for (uint32_t i = 0; i < D; i++) {
                        lo = qj[i] < lo ? qj[i] : lo;
                        hi = qj[i] > hi ? qj[i] : hi;
                        l1q += fabs(qj[i]);
                        l1c += fabs((double)scale[kk] * codes[(size_t)kk * D + i]);
                    }
                    double exact = 0.0; /* <q_j, c_k>: the rotation keeps inner products */
                    for (uint32_t i = 0; i < dim; i++)
                        exact += (double)q[(size_t)j * dim + i] * c[(size_t)kk * dim + i];
                    double bound = 0.5 * scale[kk] * l1q + 0.5 * ((double)hi - lo) / 255.0 * l1c +
                                   1e-5 * (1.0 + l1q) + 1e-5 * l1c;
                    bound_ok &= fabs(Sa[(size_t)kk * ld + j] - exact) <= bound;
                }
            }
            /* rows not asked for stay untouched */
            for (uint32_t kk = 0; kk < K; kk++) {
                int asked = 0;
                for (size_t t = 0; t < n; t++) asked |= ids[t] == kk;
                for (uint32_t j = 0; j < ld; j++)
                    if (!asked || j >= m) sc_ok &= Sa[(size_t)kk * ld + j] == -7.0f;
            }
            /* the first n rows in order (ids NULL) as the same rows by id:
             * bit for bit, and nothing past them written */
            for (size_t t = 0; t < n; t++) ids[t] = (uint32_t)t;
            float *Sc = cm_malloc((size_t)K * ld * 4 + 4);
            for (size_t i = 0; i < (size_t)K * ld; i++) Sa[i] = Sc[i] = -7.0f;
            quant_c8_scores(ref, &qs, codes, scale, csum, ids, n, Sa, ld);
            quant_c8_scores(k, &qs, codes, scale, csum, NULL, n, Sc, ld);
            sc_ok &= memcmp(Sa, Sc, (size_t)K * ld * 4) == 0;
            cm_free(Sc);
        }
    }
    CHECKF(ip_ok, "%s ip8_q8 d=%u differs from scalar", k->name, dim);
    CHECKF(def_ok, "scalar ip8_q8 d=%u differs from its definition", dim);
    CHECKF(sc_ok, "%s quant_c8_scores d=%u differs from scalar (or wrote outside its rows)",
           k->name, dim);
    CHECKF(bound_ok, "quant_c8_scores d=%u outside the documented bound", dim);
    quant_qset_free(&qs);
    cm_free(c);
    cm_free(q);
    cm_free(y);
    cm_free(qy);
    cm_free(codes);
    cm_free(aa);
    cm_free(ab);
    cm_free(Sa);
    cm_free(Sb);
}

/* est1_pop: the variant equals scalar bit for bit, and scalar equals qm_est1 of
 * qm_pop_ip token by token, for token counts around the 8- and 16-lane steps, sums over
 * their whole range, and factors of every half: normal, subnormal, zero of either sign,
 * infinities and NaNs (which the scalar decoder turns into large finite values, and a
 * hardware conversion would not). */
static void run_est1_pop(const quant_kernels *ref, const quant_kernels *k, uint32_t D, cm_rng *r)
{
    enum { NMAX = 70 };
    const uint32_t ns[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, NMAX};
    uint32_t dp = (D + 63) / 64 * 64, ws[NMAX], pc[NMAX];
    quant_f1 f1[NMAX];
    float ea[NMAX + 1], eb[NMAX + 1];
    int same = 1, def = 1, bounds = 1;
    for (int rep = 0; rep < 20; rep++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            uint32_t n = ns[ni];
            for (uint32_t t = 0; t < n; t++) {
                pc[t] = (uint32_t)cm_rng_below(r, dp + 1);
                ws[t] = (uint32_t)cm_rng_below(r, 15 * (uint64_t)pc[t] + 1);
                uint64_t x = cm_rng_next(r);
                f1[t].kappa = (uint16_t)x;
                f1[t].alpha = (uint16_t)(x >> 16);
                f1[t].f_error = (uint16_t)(x >> 32);
                if (rep == 0 && t % 5 == 1) f1[t].alpha = (uint16_t)(0x7c00u | (t & 0x83ffu)); /* Inf/NaN */
                if (rep == 0 && t % 5 == 2) f1[t].kappa = (uint16_t)(t & 0x83ffu);             /* subnormal, zero */
            }
            float qc = (float)(cm_rng_uniform(r) * 4 - 2), delta = (float)cm_rng_uniform(r) * 0.1f,
                  vlow = (float)(cm_rng_uniform(r) * 2 - 1);
            int32_t squ = (int32_t)cm_rng_below(r, 15 * (uint64_t)dp + 1);
            ea[n] = eb[n] = -3.0f; /* one past the end stays untouched */
            ref->est1_pop(ws, pc, f1, n, qc, delta, vlow, dp, squ, ea);
            k->est1_pop(ws, pc, f1, n, qc, delta, vlow, dp, squ, eb);
            same &= memcmp(ea, eb, (n + 1) * sizeof(float)) == 0;
            bounds &= ea[n] == -3.0f && eb[n] == -3.0f;
            for (uint32_t t = 0; t < n; t++) {
                float want = qm_est1(qc, &f1[t], qm_pop_ip(delta, vlow, dp, squ, ws[t], pc[t]));
                def &= memcmp(&want, &ea[t], sizeof want) == 0;
            }
        }
    CHECKF(same, "%s est1_pop d=%u differs from scalar", k->name, D);
    CHECKF(def, "scalar est1_pop d=%u differs from qm_est1(qm_pop_ip)", D);
    CHECKF(bounds, "%s est1_pop d=%u wrote past its n tokens", k->name, D);
}

/* A query set that skips its LUTs (luts 0) holds every other field as one that builds
 * them, bit for bit, and zero LUTs; for m around the 8-lane padding and the two-token
 * form's m <= 8, over sets refilled with other lengths. */
static void test_qset_without_luts(uint32_t dim, cm_rng *r)
{
    quant_rotation rot;
    CHECK_OK(quant_rotation_init(&rot, dim, 23, NULL), NULL);
    enum { MC = 40 };
    quant_qset a, b;
    CHECK_OK(quant_qset_init(&a, rot.dim_pad, MC, NULL), NULL);
    CHECK_OK(quant_qset_init(&b, rot.dim_pad, MC, NULL), NULL);
    b.luts = 0;
    float *q = cm_malloc((size_t)MC * dim * sizeof(float));
    const uint32_t ms[] = {MC, 1, 8, 9, 3, 17, MC};
    size_t mp = a.m_pad, d = a.dim_pad, W = a.n_words;
    int same = 1, zero = 1;
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        uint32_t m = ms[mi];
        for (size_t i = 0; i < (size_t)m * dim; i++) q[i] = (float)cm_rng_gauss(r);
        quant_qset_set(&a, &rot, q, m);
        quant_qset_set(&b, &rot, q, m);
        same &= a.m == b.m && memcmp(a.q, b.q, mp * d * 4) == 0 &&
                memcmp(a.planes, b.planes, mp * 4 * W * 8) == 0 &&
                memcmp(a.planes_t, b.planes_t, mp * 4 * W * 8) == 0 &&
                memcmp(a.delta, b.delta, mp * 4) == 0 && memcmp(a.vlow, b.vlow, mp * 4) == 0 &&
                memcmp(a.sum_qu, b.sum_qu, mp * 4) == 0 && memcmp(a.q8_t, b.q8_t, mp * d) == 0 &&
                memcmp(a.q8_delta, b.q8_delta, mp * 4) == 0 &&
                memcmp(a.q8_lo, b.q8_lo, mp * 4) == 0 && memcmp(a.q8_sum, b.q8_sum, mp * 4) == 0 &&
                memcmp(a.q8_pair, b.q8_pair, d * 16) == 0;
        for (size_t i = 0; i < mp * d * 4; i++) zero &= b.lut[i] == 0.0f && b.lut_t[i] == 0.0f;
    }
    CHECKF(same, "query set without LUTs d=%u: a field differs from the set with them", dim);
    CHECKF(zero, "query set without LUTs d=%u: LUTs written", dim);
    quant_qset_free(&a);
    quant_qset_free(&b);
    cm_free(q);
}

int main(void)
{
    const quant_kernels *ref = quant_kernels_for(CM_SIMD_SCALAR);
    const uint32_t dims[] = {33, 100, 128, 150, 200, 300};
    cm_rng r;
    cm_rng_seed(&r, 31337, 0);
    const cm_simd_level levels[] = {CM_SIMD_SCALAR, CM_SIMD_AVX2, CM_SIMD_AVX512};
    for (int l = 0; l < 3; l++) {
        if (!cm_cpu_supports(levels[l])) {
            printf("skipped: %s not supported by this CPU\n", cm_simd_level_name(levels[l]));
            continue;
        }
        const quant_kernels *k = quant_kernels_for(levels[l]);
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) run(ref, k, dims[i], &r);
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) run_q8(ref, k, dims[i], &r);
        run_ci(ref, k, &r);
        run_first_above(ref, k, &r);
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) run_c8(ref, k, dims[i], &r);
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) run_est1_pop(ref, k, dims[i], &r);
        printf("%s: compared with scalar\n", k->name);
    }
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) test_qset_without_luts(dims[i], &r);
    CHECK(quant_kernels_active() == quant_kernels_for(cm_simd_level_get()));
    return check_report();
}
