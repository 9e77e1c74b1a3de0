/* RaBitQ inner-product kernels: one table of function pointers per SIMD level, and the
 * estimator entry points built on them (quant_est*).
 *
 * Shapes (docs/design.md §2.4):
 *   list  one query token against n tokens of one posting list (candidate refinement):
 *         all tokens share a centroid, so <q, c> is one scalar `qc`.
 *   doc   all m query tokens against each of a document's n tokens (document scoring):
 *         token t has centroid cid[t]; cscore + cid[t]*ld holds <q_j, c> for j < m (the
 *         row of S = C Q^T the caller computed for the probe). The result is
 *         max-accumulated: out_max[j] = max(out_max[j], max_t est(q_j, v_t)), so the
 *         caller initialises out_max (-INFINITY, or an imputed floor) and may feed a
 *         document in pieces; the document's score is sum_j out_max[j]. Returning the
 *         n x m matrix instead would cost a write and a re-read of 4*m bytes per token,
 *         more than the token's own 16-byte code.
 *   full  the doc shape on B-bit codes (full-bit rescoring on the host).
 *
 * Raw kernels (the table) compute only <u, q'>-type sums: integer popcount sums, which
 * every variant reproduces bit for bit, or float sums. The factor arithmetic
 * (quant_math.h) is applied by the shared code in kernels.c, so the variants differ only
 * in the inner products.
 *
 * The doc-shape kernels (doc1_lut_max, docB_q8_max, doc1_q8_max) also apply the
 * factors themselves, lane by lane in the scalar order, so they too match scalar bit
 * for bit.
 *
 * Default 1-bit list form: the popcount form on the 4-bit query (quant_est1_list); the
 * float-LUT form (quant_est1_list_lut) is exact in the query but slower on CPUs (see
 * bench/bench_quant.c); the GPU backend uses the LUT form. Default 1-bit doc form: with
 * AVX-512 VNNI the integer form on the 8-bit query (byte dot products, query tokens in
 * the lanes), elsewhere the query-interleaved float LUT (one table row per group and
 * nibble holds all m query tokens, so one token costs d/4 contiguous vector adds per 8
 * query tokens). Default full-bit form (B = 1..8): the integer form on the 8-bit query
 * at every level (quant_estB_doc_max). */
#ifndef CHIMERA_QUANT_KERNELS_H
#define CHIMERA_QUANT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "core/cpu.h"
#include "quant/rabitq.h"

typedef struct quant_kernels {
    const char *name; /* "scalar", "avx2", "avx512" */
    /* ip[t] = <b_t - 1/2, q'> from a centred LUT (qm_lut_build) for n 1-bit codes. */
    void (*ip1_lut)(const float *lut, uint32_t dim_pad, const uint8_t *codes, size_t n,
                    float *ip);
    /* wsum[t] = sum_i b_ti qu_i, pop[t] = sum_i b_ti; planes: one query's [4][n_words]. */
    void (*ip1_pop)(const uint64_t *planes, uint32_t n_words, const uint8_t *codes, size_t n,
                    uint32_t *wsum, uint32_t *pop);
    /* wsum[t*m + j] for m query tokens; planes_t: [n_words][4][m_pad] (quant_qset). */
    void (*ip1_pop_multi)(const uint64_t *planes_t, size_t m_pad, uint32_t m, uint32_t n_words,
                          const uint8_t *codes, size_t n, uint32_t *wsum, uint32_t *pop);
    /* The whole 1-bit doc shape on the query-interleaved LUT lut_t ([dim_pad/4][16][m_pad],
     * quant_qset): for each token t, ip_j = sum over g = 0, 1, ... of its nibble's row
     * (qm_lut_t_row), e = qm_est(cscore[cid[t]*ld + j], alpha_t, kappa_t, ip_j) evaluated
     * as (qc + alpha) + kappa * ip without FMA, out_max[j] = max(out_max[j], e) for j < m.
     * Every variant matches scalar bit for bit, and ip_j equals qm_lut_ip's. */
    void (*doc1_lut_max)(const float *lut_t, uint32_t m_pad, uint32_t m, uint32_t dim_pad,
                         const uint8_t *codes, const quant_f1 *f1, size_t n, const uint32_t *cid,
                         const float *cscore, size_t ld, float *out_max);
    /* ip[t*m + j] = <T_t - (2^B-1)/2, q'_j>; q: [m][dim_pad] rotated query tokens. */
    void (*ipB_multi)(const float *q, uint32_t m, uint32_t dim_pad, uint32_t bits,
                      const uint8_t *codes, size_t n, float *ip);
    /* The integer core of the B <= 4 full-bit form on the 8-bit query (quant_math.h,
     * qm_query8): for n nibble codes (dim_pad/2 bytes each) a[t*m + j] =
     * sum_i (T_ti - 8) qu_ji and st[t] = sum_i T_ti; q8_t as in quant_qset. Exact
     * integers, so every variant matches scalar bit for bit. */
    void (*ipB4_q8)(const uint8_t *q8_t, uint32_t m_pad, uint32_t m, uint32_t dim_pad,
                    const uint8_t *codes, size_t n, int32_t *a, int32_t *st);
    /* The whole B-bit doc shape (B = 1..8) on the 8-bit query: for each token t and
     * j < m, with c = 8 for nibble codes (B <= 4) and 128 for byte codes (B >= 5),
     * a_tj = sum_i (T_ti - c) qu_ji and st_t = sum_i T_ti (exact integers),
     * ip = qm_q8_ip(q8_delta[j], q8_lo[j], (c - off) * q8_sum[j], a_tj, st_t - off * d_pad),
     * e = (cscore[cid[t]*ld + j] + alpha_t) + kappa_t * ip, unfused, and
     * out_max[j] = max(out_max[j], e). Every variant matches scalar bit for bit. */
    void (*docB_q8_max)(const quant_qset *qs, uint32_t bits, const uint8_t *codes,
                         const quant_fB *fB, size_t n, const uint32_t *cid, const float *cscore,
                         size_t ld, float *out_max);
    /* The 1-bit doc shape on the 8-bit query: as docB_q8_max with the 1-bit plane's
     * sums (a = -A, hsq = -SQ/2, st = popcount, off = 1/2; quant_math.h) and the f16
     * factors of quant_f1. Every variant matches scalar bit for bit. */
    void (*doc1_q8_max)(const quant_qset *qs, const uint8_t *codes, const quant_f1 *f1, size_t n,
                        const uint32_t *cid, const float *cscore, size_t ld, float *out_max);
    /* The centroid-interaction doc shape (no codes): every token stands for its
     * centroid, out_max[j] = max(out_max[j], cscore[cid[t]*ld + j]) for j < m, in token
     * order as `s > out_max[j] ? s : out_max[j]`. Maxima only, so every variant matches
     * scalar bit for bit. */
    void (*ci_max)(const uint32_t *cid, size_t n, const float *cscore, size_t ld, uint32_t m,
                   float *out_max);
    /* The integer core of the 8-bit centroid rows' scores (quant_c8_scores): for n rows
     * of dim_pad signed bytes, a[t*m + j] = sum_i rows[t*dim_pad + i] qu_ji; q8_t as in
     * quant_qset; row values within +-127 (quant_c8_encode). Exact integers: every
     * variant matches scalar bit for bit. */
    void (*ip8_q8)(const uint8_t *q8_t, uint32_t m_pad, uint32_t m, uint32_t dim_pad,
                   const int8_t *rows, size_t n, int32_t *a);
    /* The 8-bit centroid rows' scores from ip8_q8's sums (quant_c8_scores): for t < n and
     * j < m, with k = ids ? ids[t] : t, out[k*ld + j] = scale[k] (delta[j] a[t*m + j] +
     * lo[j] csum[k]), each product rounded on its own (no FMA). Every variant matches
     * scalar bit for bit. */
    void (*c8_finish)(const int32_t *a, size_t n, uint32_t m, const float *delta,
                      const float *lo, const float *scale, const int32_t *csum,
                      const uint32_t *ids, float *out, size_t ld);
    /* The probe's column selection (backend/cpu): over a row-major score matrix S
     * [n x m], the first row t with S[t*m + j] > thr[j] for some j < m, or n when none,
     * compared as `s > thr` (NaN on either side never passes). Comparisons only: every
     * variant returns scalar's. */
    size_t (*first_above)(const float *S, size_t n, uint32_t m, const float *thr);
    /* The popcount form's 1-bit list estimates from ip1_pop's sums: est[t] = qm_est1(qc,
     * &f1[t], qm_pop_ip(delta, vlow, dim_pad, sum_qu, wsum[t], pop[t])), each operation
     * as quant_math.h writes it (no FMA) and the halves decoded as qm_f16_to_f32 does.
     * Every variant matches scalar bit for bit. */
    void (*est1_pop)(const uint32_t *wsum, const uint32_t *pop, const quant_f1 *f1, size_t n,
                     float qc, float delta, float vlow, uint32_t dim_pad, int32_t sum_qu,
                     float *est);
    /* Nonzero where doc1_q8_max is this level's faster 1-bit doc form, so that
     * quant_est1_doc_max takes it: AVX-512 (VNNI, 1.6x the LUT form at d = 128, m = 32);
     * scalar and AVX2 keep the LUT form, which their byte products do not beat
     * (bench/bench_quant.c). */
    int doc1_q8_default;
} quant_kernels;

/* The table of one level (every level is compiled in on x86-64; whether the CPU can run
 * it is cm_cpu_supports()'s business). */
const quant_kernels *quant_kernels_for(cm_simd_level level);

/* The table for cm_simd_level_get(), chosen once (pthread_once). */
const quant_kernels *quant_kernels_active(void);

/* In every entry point kt may be NULL (the active table). */

/* 8-bit centroid rows: centroid scores that read a quarter of the float rows' bytes
 * (the CPU backend's lazily computed rows of S, backend/cpu). Centroid k [rot->dim
 * floats] is rotated like a query token, y = R c_k [dim_pad], and stored as
 * codes[k*dim_pad + i] = round(y_i / scale[k]) with scale[k] = max_i |y_i| / 127 and
 * csum[k] = sum_i codes[k*dim_pad + i]; |y_i - scale[k] codes| <= scale[k] / 2. A row
 * with max |y_i| below 2^-100 gets scale 0 and zero codes. Finite input only. */
void quant_c8_encode(const quant_rotation *rot, const float *c, size_t n, int8_t *codes,
                     float *scale, int32_t *csum);
/* For t < n and j < qs->m, with k = ids[t]: S[k*ld + j] = scale[k] (q8_delta_j a_j +
 * q8_lo_j csum[k]), a_j = sum_i codes[k*dim_pad + i] qu_ji (ip8_q8): the inner product
 * of the 8-bit query token (quant_math.h, qm_query8) with the 8-bit row, so it differs
 * from <q_j, c_k> by at most (scale[k] / 2) sum_i |q'_ji| + (delta_j / 2) sum_i |scale[k]
 * codes_ki| (q' = R q_j) plus float rounding: at d = 128 about a fifth of the 4-bit
 * estimator's error, which it adds to in quadrature. With ids, the rows are random reads
 * of a large table: gathered a block at a time, prefetched ahead. ids NULL means k = t:
 * the first n rows, read in place. */
void quant_c8_scores(const quant_kernels *kt, const quant_qset *qs, const int8_t *codes,
                     const float *scale, const int32_t *csum, const uint32_t *ids, size_t n,
                     float *S, size_t ld);

/* The first row t < n of S [n x m] (row-major) with S[t*m + j] > thr[j] for some j < m,
 * or n: the rows a running per-column selection must look at (NaN never passes). */
size_t quant_first_above(const quant_kernels *kt, const float *S, size_t n, uint32_t m,
                         const float *thr);

/* list shape, 1-bit: est[t] = estimate of <q_j, v_t>. Default form (popcount). */
void quant_est1_list(const quant_kernels *kt, const quant_qset *qs, uint32_t j,
                     const uint8_t *codes1, const quant_f1 *f1, size_t n, float qc, float *est);
void quant_est1_list_pop(const quant_kernels *kt, const quant_qset *qs, uint32_t j,
                         const uint8_t *codes1, const quant_f1 *f1, size_t n, float qc,
                         float *est);
void quant_est1_list_lut(const quant_kernels *kt, const quant_qset *qs, uint32_t j,
                         const uint8_t *codes1, const quant_f1 *f1, size_t n, float qc,
                         float *est);

/* doc shape, 1-bit, max-accumulated into out_max[qs->m]. Default form: the table's
 * (doc1_q8_default): the 8-bit query (quant_est1_doc_max_q8) with AVX-512, whose error
 * (quant_math.h, qm_query8) is under 1% of the 1-bit estimator's, else the
 * query-interleaved float LUT (quant_est1_doc_max_lut), exact in the query and several
 * times faster than the popcount form on the 4-bit query (quant_est1_doc_max_pop), which
 * is kept for comparison (bench/bench_quant.c). */
void quant_est1_doc_max(const quant_kernels *kt, const quant_qset *qs, const uint8_t *codes1,
                        const quant_f1 *f1, size_t n, const uint32_t *cid, const float *cscore,
                        size_t ld, float *out_max);
void quant_est1_doc_max_lut(const quant_kernels *kt, const quant_qset *qs, const uint8_t *codes1,
                            const quant_f1 *f1, size_t n, const uint32_t *cid,
                            const float *cscore, size_t ld, float *out_max);
void quant_est1_doc_max_pop(const quant_kernels *kt, const quant_qset *qs, const uint8_t *codes1,
                            const quant_f1 *f1, size_t n, const uint32_t *cid,
                            const float *cscore, size_t ld, float *out_max);
/* The 1-bit doc shape on the 8-bit query (quant_math.h, qm_query8). */
void quant_est1_doc_max_q8(const quant_kernels *kt, const quant_qset *qs, const uint8_t *codes1,
                           const quant_f1 *f1, size_t n, const uint32_t *cid,
                           const float *cscore, size_t ld, float *out_max);

/* The centroid-interaction score's doc shape, max-accumulated into out_max[m]: each
 * token's estimate replaced by its centroid's score <q_j, c> (PLAID's centroid
 * interaction; the first term of every RaBitQ estimate), so no code is read: one row of
 * S per token against the 1-bit form's dim_pad/8-byte code and m dot products. A
 * document's sum_j out_max[j] ranks candidates before 1-bit scoring (search/pipeline.h). */
void quant_ci_doc_max(const quant_kernels *kt, const uint32_t *cid, size_t n,
                      const float *cscore, size_t ld, uint32_t m, float *out_max);

/* full shape, B-bit codes, max-accumulated into out_max[qs->m]. Default form: the
 * integer kernels on the 8-bit query (quant_estB_doc_max_q8): for B = 4 at d = 128,
 * m = 32, 5.0x faster than the float dots with AVX-512 VNNI, 3.2x with AVX2 and 1.3x in
 * scalar code (bench/bench_quant.c, bench/RESULTS.md section 2.2), and within
 * (delta_j/2) |kappa| sum_i |u_i| of them (quant_math.h, qm_query8: RMS about 1/25 of
 * the B = 4 estimator's own error). At B = 8 that error is of the order of the
 * estimator's own (whose kappa shrinks as the code's range grows), yet ranks as the float
 * dots do: the same Recall@100 on a real corpus at every setting measured
 * (bench/RESULTS.md section 5.25). */
void quant_estB_doc_max(const quant_kernels *kt, const quant_qset *qs, uint32_t bits,
                        const uint8_t *codesB, const quant_fB *fB, size_t n, const uint32_t *cid,
                        const float *cscore, size_t ld, float *out_max);
void quant_estB_doc_max_float(const quant_kernels *kt, const quant_qset *qs, uint32_t bits,
                              const uint8_t *codesB, const quant_fB *fB, size_t n,
                              const uint32_t *cid, const float *cscore, size_t ld,
                              float *out_max);
/* bits must be 1..8. */
void quant_estB_doc_max_q8(const quant_kernels *kt, const quant_qset *qs, uint32_t bits,
                           const uint8_t *codesB, const quant_fB *fB, size_t n,
                           const uint32_t *cid, const float *cscore, size_t ld,
                           float *out_max);

#endif
