/* Kernel dispatch and the estimator entry points (docs/algorithms.md §1.5, §1.7).
 *
 * The table is chosen once per process from cm_simd_level_get() (pthread_once); this is
 * the module's only mutable global. The entry points run a raw kernel over a block of
 * tokens into a stack buffer and then apply the factor arithmetic of quant_math.h, which
 * is the same code for every level: variants can only differ in their inner products,
 * and the tests compare exactly those. The epilogue pass re-reads the block from L1,
 * a few percent of the kernel time (bench/bench_quant.c). */
#include <assert.h>
#include <math.h>
#include <pthread.h>

#include "quant/kernels_impl.h"
#include "core/alloc.h"

#define LIST_BLOCK 64

const quant_kernels *quant_kernels_for(cm_simd_level level)
{
    switch (level) {
    case CM_SIMD_AVX512: return &quant_kernels_avx512;
    case CM_SIMD_AVX2: return &quant_kernels_avx2;
    default: return &quant_kernels_scalar;
    }
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const quant_kernels *active;

static void pick(void) { active = quant_kernels_for(cm_simd_level_get()); }

const quant_kernels *quant_kernels_active(void)
{
    pthread_once(&once, pick);
    return active;
}

static const quant_kernels *table(const quant_kernels *kt)
{
    return kt ? kt : quant_kernels_active();
}

void quant_est1_list_lut(const quant_kernels *kt, const quant_qset *qs, uint32_t j,
                         const uint8_t *codes1, const quant_f1 *f1, size_t n, float qc,
                         float *est)
{
    assert(qs->luts); /* quant_qset.luts */
    kt = table(kt);
    uint32_t d = qs->dim_pad, cb = qm_code1_bytes(d);
    const float *lut = qs->lut + (size_t)j * d * 4;
    for (size_t t0 = 0; t0 < n; t0 += LIST_BLOCK) {
        size_t nb = n - t0 < LIST_BLOCK ? n - t0 : LIST_BLOCK;
        kt->ip1_lut(lut, d, codes1 + t0 * cb, nb, est + t0);
        for (size_t t = 0; t < nb; t++) est[t0 + t] = qm_est1(qc, &f1[t0 + t], est[t0 + t]);
    }
}

void quant_est1_list_pop(const quant_kernels *kt, const quant_qset *qs, uint32_t j,
                         const uint8_t *codes1, const quant_f1 *f1, size_t n, float qc,
                         float *est)
{
    kt = table(kt);
    uint32_t d = qs->dim_pad, W = qs->n_words, cb = qm_code1_bytes(d);
    const uint64_t *planes = qs->planes + (size_t)j * 4 * W;
    float delta = qs->delta[j], vlow = qs->vlow[j];
    int32_t squ = qs->sum_qu[j];
    uint32_t ws[LIST_BLOCK], pc[LIST_BLOCK];
    for (size_t t0 = 0; t0 < n; t0 += LIST_BLOCK) {
        size_t nb = n - t0 < LIST_BLOCK ? n - t0 : LIST_BLOCK;
        kt->ip1_pop(planes, W, codes1 + t0 * cb, nb, ws, pc);
        kt->est1_pop(ws, pc, f1 + t0, nb, qc, delta, vlow, d, squ, est + t0);
    }
}

void quant_est1_list(const quant_kernels *kt, const quant_qset *qs, uint32_t j,
                     const uint8_t *codes1, const quant_f1 *f1, size_t n, float qc, float *est)
{
    quant_est1_list_pop(kt, qs, j, codes1, f1, n, qc, est);
}

void quant_est1_doc_max_lut(const quant_kernels *kt, const quant_qset *qs, const uint8_t *codes1,
                            const quant_f1 *f1, size_t n, const uint32_t *cid,
                            const float *cscore, size_t ld, float *out_max)
{
    assert(qs->luts); /* quant_qset.luts */
    if (n == 0 || qs->m == 0) return;
    table(kt)->doc1_lut_max(qs->lut_t, qs->m_pad, qs->m, qs->dim_pad, codes1, f1, n, cid, cscore,
                            ld, out_max);
}

void quant_est1_doc_max(const quant_kernels *kt, const quant_qset *qs, const uint8_t *codes1,
                        const quant_f1 *f1, size_t n, const uint32_t *cid, const float *cscore,
                        size_t ld, float *out_max)
{
    if (table(kt)->doc1_q8_default)
        quant_est1_doc_max_q8(kt, qs, codes1, f1, n, cid, cscore, ld, out_max);
    else
        quant_est1_doc_max_lut(kt, qs, codes1, f1, n, cid, cscore, ld, out_max);
}

void quant_c8_encode(const quant_rotation *rot, const float *c, size_t n, int8_t *codes,
                     float *scale, int32_t *csum)
{
    uint32_t d = rot->dim_pad;
    float y[QUANT_DIM_MAX];
    for (size_t k = 0; k < n; k++) {
        quant_rotate(rot, c + k * rot->dim, y);
        int8_t *code = codes + k * d;
        float mx = 0.0f;
        for (uint32_t i = 0; i < d; i++) mx = fabsf(y[i]) > mx ? fabsf(y[i]) : mx;
        int32_t sum = 0;
        float s = mx / 127.0f;
        if (!(mx >= 0x1p-100f)) s = 0.0f;
        /* divide by the scale itself: round(y / s) is then the nearest multiple of s up
         * to one rounding of the quotient; |y / s| <= 127 (+ that rounding), so adding a
         * half and truncating rounds to nearest (ties away from zero) */
        for (uint32_t i = 0; i < d; i++) {
            float v = s > 0.0f ? y[i] / s : 0.0f;
            int32_t r = (int32_t)(v + (v >= 0.0f ? 0.5f : -0.5f));
            code[i] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
            sum += code[i];
        }
        scale[k] = s;
        csum[k] = sum;
    }
}

/* Rows fetched this many ahead of the one being copied (a block of 8 rows is a few
 * hundred cycles of work; a miss to memory costs about as much). */
#define QUANT_C8_AHEAD 16

void quant_c8_scores(const quant_kernels *kt, const quant_qset *qs, const int8_t *codes,
                     const float *scale, const int32_t *csum, const uint32_t *ids, size_t n,
                     float *S, size_t ld)
{
    uint32_t d = qs->dim_pad, m = qs->m;
    if (n == 0 || m == 0) return;
    kt = table(kt);
    _Alignas(64) int8_t rows[QUANT_Q8_BLOCK * QUANT_DIM_MAX];
    int32_t a[QUANT_Q8_BLOCK * QUANT_QTOK_MAX];
    for (size_t t0 = 0; t0 < n; t0 += QUANT_Q8_BLOCK) {
        size_t nb = n - t0 < QUANT_Q8_BLOCK ? n - t0 : QUANT_Q8_BLOCK;
        if (!ids) { /* rows in order: read in place, the hardware prefetcher follows */
            kt->ip8_q8(qs->q8_t, qs->m_pad, m, d, codes + t0 * d, nb, a);
            kt->c8_finish(a, nb, m, qs->q8_delta, qs->q8_lo, scale + t0, csum + t0, NULL,
                          S + t0 * ld, ld);
            continue;
        }
        for (size_t t = 0; t < nb; t++) {
            if (t0 + t + QUANT_C8_AHEAD < n) {
                uint32_t f = ids[t0 + t + QUANT_C8_AHEAD];
                for (uint32_t o = 0; o < d; o += 64) __builtin_prefetch(codes + (size_t)f * d + o);
                __builtin_prefetch(scale + f);
                __builtin_prefetch(csum + f);
                __builtin_prefetch(S + (size_t)f * ld, 1);
            }
            memcpy(rows + t * d, codes + (size_t)ids[t0 + t] * d, d);
        }
        kt->ip8_q8(qs->q8_t, qs->m_pad, m, d, rows, nb, a);
        kt->c8_finish(a, nb, m, qs->q8_delta, qs->q8_lo, scale, csum, ids + t0, S, ld);
    }
}

size_t quant_first_above(const quant_kernels *kt, const float *S, size_t n, uint32_t m,
                         const float *thr)
{
    if (n == 0 || m == 0) return n;
    return table(kt)->first_above(S, n, m, thr);
}

void quant_ci_doc_max(const quant_kernels *kt, const uint32_t *cid, size_t n,
                      const float *cscore, size_t ld, uint32_t m, float *out_max)
{
    if (n == 0 || m == 0) return;
    table(kt)->ci_max(cid, n, cscore, ld, m, out_max);
}

void quant_est1_doc_max_q8(const quant_kernels *kt, const quant_qset *qs, const uint8_t *codes1,
                           const quant_f1 *f1, size_t n, const uint32_t *cid,
                           const float *cscore, size_t ld, float *out_max)
{
    if (n == 0 || qs->m == 0) return;
    table(kt)->doc1_q8_max(qs, codes1, f1, n, cid, cscore, ld, out_max);
}

void quant_est1_doc_max_pop(const quant_kernels *kt, const quant_qset *qs, const uint8_t *codes1,
                            const quant_f1 *f1, size_t n, const uint32_t *cid,
                            const float *cscore, size_t ld, float *out_max)
{
    kt = table(kt);
    uint32_t d = qs->dim_pad, W = qs->n_words, m = qs->m, cb = qm_code1_bytes(d);
    uint32_t ws[QUANT_DOC_BLOCK * QUANT_QTOK_MAX], pc[QUANT_DOC_BLOCK];
    for (size_t t0 = 0; t0 < n; t0 += QUANT_DOC_BLOCK) {
        size_t nb = n - t0 < QUANT_DOC_BLOCK ? n - t0 : QUANT_DOC_BLOCK;
        kt->ip1_pop_multi(qs->planes_t, qs->m_pad, m, W, codes1 + t0 * cb, nb, ws, pc);
        for (size_t t = 0; t < nb; t++) {
            const quant_f1 *f = &f1[t0 + t];
            float alpha = qm_f16_to_f32(f->alpha), kappa = qm_f16_to_f32(f->kappa);
            const float *cs = cscore + (size_t)cid[t0 + t] * ld;
            for (uint32_t j = 0; j < m; j++) {
                float ip = qm_pop_ip(qs->delta[j], qs->vlow[j], d, qs->sum_qu[j],
                                     ws[t * m + j], pc[t]);
                float e = qm_est(cs[j], alpha, kappa, ip);
                out_max[j] = e > out_max[j] ? e : out_max[j];
            }
        }
    }
}

void quant_estB_doc_max_float(const quant_kernels *kt, const quant_qset *qs, uint32_t bits,
                              const uint8_t *codesB, const quant_fB *fB, size_t n,
                              const uint32_t *cid, const float *cscore, size_t ld,
                              float *out_max)
{
    kt = table(kt);
    uint32_t d = qs->dim_pad, m = qs->m, cb = qm_codeB_bytes(d, bits);
    float ip[QUANT_DOC_BLOCK * QUANT_QTOK_MAX];
    for (size_t t0 = 0; t0 < n; t0 += QUANT_DOC_BLOCK) {
        size_t nb = n - t0 < QUANT_DOC_BLOCK ? n - t0 : QUANT_DOC_BLOCK;
        kt->ipB_multi(qs->q, m, d, bits, codesB + t0 * cb, nb, ip);
        for (size_t t = 0; t < nb; t++) {
            const quant_fB *f = &fB[t0 + t];
            float alpha = qm_f16_to_f32(f->alpha), kappa = f->kappa;
            const float *cs = cscore + (size_t)cid[t0 + t] * ld;
            for (uint32_t j = 0; j < m; j++) {
                float e = qm_est(cs[j], alpha, kappa, ip[t * m + j]);
                out_max[j] = e > out_max[j] ? e : out_max[j];
            }
        }
    }
}

void quant_estB_doc_max_q8(const quant_kernels *kt, const quant_qset *qs, uint32_t bits,
                           const uint8_t *codesB, const quant_fB *fB, size_t n,
                           const uint32_t *cid, const float *cscore, size_t ld,
                           float *out_max)
{
    assert(bits >= 1 && bits <= 8);
    if (n == 0 || qs->m == 0) return;
    table(kt)->docB_q8_max(qs, bits, codesB, fB, n, cid, cscore, ld, out_max);
}

void quant_estB_doc_max(const quant_kernels *kt, const quant_qset *qs, uint32_t bits,
                        const uint8_t *codesB, const quant_fB *fB, size_t n, const uint32_t *cid,
                        const float *cscore, size_t ld, float *out_max)
{
    quant_estB_doc_max_q8(kt, qs, bits, codesB, fB, n, cid, cscore, ld, out_max);
}
