/* Extended RaBitQ encoding and query preparation (Gao & Long, SIGMOD 2024; Gao et al.,
 * SIGMOD 2025; docs/algorithms.md §1.2-1.5). Layouts and factor meanings: quant/quant_math.h.
 *
 * A token v with centroid c, both already rotated (quant_rotate), is coded in one call
 * into its 1-bit plane + quant_f1 and, optionally, its B-bit code + quant_fB
 * (B = 1..8). The MSB plane of the B-bit code equals the 1-bit plane, so an index may
 * keep only the B-bit codes on the host and extract the GPU plane with
 * quant_codeB_msb(). A query set holds everything the kernels need for m query tokens:
 * rotated tokens, LUTs (per token and query-interleaved) and 4-bit planes, built once per
 * query into reused buffers. */
#ifndef CHIMERA_QUANT_RABITQ_H
#define CHIMERA_QUANT_RABITQ_H

#include <stddef.h>
#include <stdint.h>

#include "chimera.h"
#include "quant/quant_math.h"
#include "quant/rotation.h"

#define QUANT_BITS_MAX 8
#define QUANT_QTOK_MAX 256 /* query tokens per query set (kernel stack buffers) */

/* The unrounded factors of one token, for tests and measurements. cos* is the cosine
 * between the centred code and the residual (RaBitQ's <o-bar, o>). */
typedef struct quant_exact_factors {
    double norm_r;
    double kappa1, alpha1, f_error1, cos1;
    double kappaB, alphaB, f_errorB, cosB;
} quant_exact_factors;

/* Bytes of scratch quant_encode_one needs for dim_pad. */
size_t quant_encode_work_bytes(uint32_t dim_pad);

/* Codes one token. v_rot, c_rot: dim_pad floats. work: quant_encode_work_bytes() bytes,
 * 8-byte aligned. code1 (dim_pad/8 bytes) and f1 are always written; codeB
 * (qm_codeB_bytes) and fB only when non-NULL; exact when non-NULL. A zero residual
 * (v == c) gets kappa = alpha = f_error = 0, so its estimate is exactly <q, c>.
 * The ex-code uses the rescale search (docs/algorithms.md §1.3): exhaustive for B <= 4;
 * for B >= 5 a window of t that tests and measurements find holding the best t. */
void quant_encode_one(uint32_t dim_pad, uint32_t bits, const float *v_rot, const float *c_rot,
                      void *work, uint8_t *code1, quant_f1 *f1, uint8_t *codeB, quant_fB *fB,
                      quant_exact_factors *exact);

/* Codes n tokens; token i uses centroid row cid[i] of c_rot (cid NULL: row 0 for all).
 * Rows are dim_pad floats. codesB/fB may be NULL. Returns CHIMERA_OK,
 * CHIMERA_ERR_INVALID_ARG (bits or dim_pad out of range) or CHIMERA_ERR_NOMEM. */
chimera_status quant_encode(uint32_t dim_pad, uint32_t bits, size_t n, const float *v_rot,
                            const float *c_rot, const uint32_t *cid, uint8_t *codes1,
                            quant_f1 *f1, uint8_t *codesB, quant_fB *fB, chimera_error *err);

/* The 1-bit plane (bit B-1 of each T_i) of n B-bit codes. */
void quant_codeB_msb(uint32_t dim_pad, uint32_t bits, size_t n, const uint8_t *codesB,
                     uint8_t *codes1);

/* Per-query state for m <= m_cap query tokens. Buffers are 64-byte aligned; rows beyond m
 * (up to m_pad = m_cap rounded up to 8) are zero so SIMD kernels may read whole vectors.
 * Memory: about m_pad * dim_pad * 37 + dim_pad * 16 bytes, of which lut and lut_t take 16 each
 * (lut_t: 64 KiB at dim_pad = 128, m_cap = 32, so it stays in L2 while a query's
 * documents are scored; 1.3 MiB at the caps dim_pad = 320, m_cap = 256). */
typedef struct quant_qset {
    uint32_t dim_pad, n_words; /* n_words = dim_pad / 64 */
    uint32_t m, m_cap, m_pad;
    float *q;          /* [m_cap][dim_pad] rotated tokens */
    float *lut;        /* [m_cap][dim_pad/4][16] centred LUTs */
    float *lut_t;      /* [dim_pad/4][16][m_pad]: query-interleaved LUTs (1-bit doc kernel) */
    uint64_t *planes;  /* [m_cap][4][n_words]: token-major 4-bit planes (list kernels) */
    uint64_t *planes_t; /* [n_words][4][m_pad]: query-interleaved planes (doc kernels) */
    float *delta, *vlow;
    int32_t *sum_qu;
    /* 8-bit query for the full-bit kernels (quant_math.h, qm_query8):
     * q8_t [dim_pad/4][m_pad][4] bytes, zero for j >= m; per token delta, lo, sum. */
    uint8_t *q8_t;
    float *q8_delta, *q8_lo;
    int32_t *q8_sum;
    /* for m <= 8: q8_t's rows with token j's 4 bytes in dwords 2j and 2j + 1,
     * [dim_pad/4][16][4] bytes, zero past 2m (the AVX-512 doc kernels' two-token form) */
    uint8_t *q8_pair;
    /* 1 (quant_qset_init's default): quant_qset_set builds lut and lut_t. 0: it leaves
     * them as they are (zero from init), for a caller that never reads them (the LUT forms,
     * quant_est1_list_lut and quant_est1_doc_max_lut, need them): the CPU backend where
     * the 1-bit doc form is the 8-bit query's (AVX-512) and the search's host stage,
     * which scores full-bit codes only; building them was ~3% of a query at 10^7
     * tokens. Every other field is the same either way. */
    int luts;
} quant_qset;

/* Allocates a query set. Returns CHIMERA_OK, CHIMERA_ERR_INVALID_ARG (m_cap 0 or above
 * QUANT_QTOK_MAX, dim_pad not a multiple of 64) or CHIMERA_ERR_NOMEM (*qs then empty). */
chimera_status quant_qset_init(quant_qset *qs, uint32_t dim_pad, uint32_t m_cap,
                               chimera_error *err);
void quant_qset_free(quant_qset *qs);

/* Fills the set from m (<= m_cap) unrotated tokens (m x rot->dim floats). */
void quant_qset_set(quant_qset *qs, const quant_rotation *rot, const float *q, uint32_t m);

#endif
