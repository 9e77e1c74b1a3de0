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
        for (size_t t = 0; t < nb; t++)
            est[t0 + t] = qm_est1(qc, &f1[t0 + t], qm_pop_ip(delta, vlow, d, squ, ws[t], pc[t]));
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
    assert(bits >= 1 && bits <= 4);
    if (n == 0 || qs->m == 0) return;
    table(kt)->docB4_q8_max(qs, bits, codesB, fB, n, cid, cscore, ld, out_max);
}

void quant_estB_doc_max(const quant_kernels *kt, const quant_qset *qs, uint32_t bits,
                        const uint8_t *codesB, const quant_fB *fB, size_t n, const uint32_t *cid,
                        const float *cscore, size_t ld, float *out_max)
{
    if (bits <= 4) quant_estB_doc_max_q8(kt, qs, bits, codesB, fB, n, cid, cscore, ld, out_max);
    else quant_estB_doc_max_float(kt, qs, bits, codesB, fB, n, cid, cscore, ld, out_max);
}
