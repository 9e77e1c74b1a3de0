/* The exact re-rank tier: exact Chamfer scores of a query against documents of an
 * index that stores its original vectors (index sections vectors_*, built with
 * --rerank), on the host whatever the backend (pipeline.h runs it after the full-bit
 * stage, on the top rerank_depth documents, or straight after 1-bit scoring when the
 * depth covers k_fullbit).
 *
 * The score is the one chimera_corpus_search computes: sum over query tokens of the
 * largest inner product with a document token. The query is transposed once per call
 * into qt [dim][m_pad] (m_pad: m rounded up to 8, zero columns after m), so that one
 * document row against all query tokens is a run of broadcast multiply-adds into
 * m_pad / 8 vector accumulators, and the maxima over the document's rows are taken in
 * the same registers: no m x n product matrix is written and re-read, which is what a
 * small sgemm per document (or per block of documents) spent most of its time on at
 * these shapes (m ~ 32, a few dozen rows). Half and bfloat16 rows are widened to
 * float32 in blocks of SP_RERANK_ROWS (F16C, or a shift), small enough (16 KiB at
 * d = 128) that the kernel reads them back from L1; float32 rows are read in place from
 * the mapping, a block at a time too. While a block is scored the next one (of the same
 * document or the next) is fetched into L2. Scratch is the caller's, allocated once per
 * worker, so scoring allocates nothing.
 *
 * Kernels (a scalar reference and AVX2 + FMA, chosen once by the SIMD level; the
 * AVX-512 level uses the AVX2 one, which scores 12, 6, 4 or 3 rows at a time as m_pad
 * is 8, 16, 24 or more, so that 12 independent accumulators hide the multiply-add
 * latency; AVX-512 multiply-adds run at the same lanes per cycle on the machines
 * measured, bench/RESULTS.md section 5.15): maxsim max-accumulates
 * mx[j] = max(mx[j], <row_r, q_j>) over n rows for j < m_pad, and adds (x - x) of every
 * product to *bad, which stays 0 unless a product is NaN or infinite (a maximum would
 * drop a NaN silently).
 *
 * bfloat16 vectors are scored against the query rounded to bfloat16, at every level:
 * where the CPU has AVX-512 BF16 a kernel multiplies the stored pairs of values by the
 * query's pairs as they lie (vdpbf16ps, twice the multiply-adds of an FMA an
 * instruction), and the other levels compute the same products (exact in float32) on
 * widened rows, so that a search returns the same documents whichever CPU runs it. The
 * query's rounding costs a score about what the documents' own rounding does
 * (bench/RESULTS.md section 5.17 measures the recall). */
#ifndef CHIMERA_SEARCH_RERANK_H
#define CHIMERA_SEARCH_RERANK_H

#include <stddef.h>
#include <stdint.h>

#include "chimera.h"
#include "index/index.h"

#define SP_RERANK_ROWS 32

typedef struct sp_rerank_scratch {
    float *rows;    /* [SP_RERANK_ROWS x dim] widened rows of a half / bfloat16 document */
    float *qt;      /* [dim x m_pad] the query, transposed and zero-padded */
    float *mx;      /* [m_pad] a document's running maxima */
    uint32_t *qp;   /* [(dim + 1) / 2 x m_pad] the query in bfloat16 pairs, for
                     * sp_maxsim_bf16_avx512: dimensions 2p (low half) and 2p + 1 */
    uint32_t max_m;
} sp_rerank_scratch;

chimera_status sp_rerank_scratch_init(sp_rerank_scratch *s, uint32_t dim, uint32_t max_m,
                                      chimera_error *err);
void sp_rerank_scratch_free(sp_rerank_scratch *s);

/* out[i] = exact Chamfer score of query q (m x dim, m <= s->max_m) against global
 * document docs[i] of ix (ix->vec_type set and ix->vec_complete): -inf for an empty
 * document, NaN when one of its stored values is not finite (a damaged section). */
void sp_rerank_score(const ix_index *ix, const uint32_t *docs, uint32_t n, const float *q,
                     uint32_t m, sp_rerank_scratch *s, float *out);

/* The query's padded width: m rounded up to 8. */
static inline uint32_t sp_rerank_pad(uint32_t m) { return (m + 7) / 8 * 8; }

/* qt [dim x sp_rerank_pad(m)] = the query q (m x dim) transposed, zero past column m;
 * each value rounded to bfloat16 when bf16 (the bf16 tier's query). */
void sp_rerank_transpose(const float *q, uint32_t m, uint32_t dim, int bf16, float *qt);

/* The kernels (see above); m_pad is a multiple of 8. */
typedef void (*sp_maxsim_fn)(const float *rows, uint32_t n, uint32_t dim, const float *qt,
                             uint32_t m_pad, float *mx, float *bad);
void sp_maxsim_scalar(const float *rows, uint32_t n, uint32_t dim, const float *qt,
                      uint32_t m_pad, float *mx, float *bad);
void sp_maxsim_avx2(const float *rows, uint32_t n, uint32_t dim, const float *qt,
                    uint32_t m_pad, float *mx, float *bad);
sp_maxsim_fn sp_maxsim_for(int simd_level);

/* qp = qt [dim x m_pad] in bfloat16 pairs (see sp_rerank_scratch), each value rounded to
 * the nearest bfloat16; dimension dim (past an odd dim) is 0. */
void sp_bf16_pairs(const float *qt, uint32_t dim, uint32_t m_pad, uint32_t *qp);

/* maxsim on n stored bfloat16 rows as they lie against the query in pairs (qp, see
 * sp_rerank_scratch): AVX-512 BF16 only (cm_bf16_dot_in_use). Its scalar twin is
 * sp_maxsim_scalar on the widened rows and the query rounded to bfloat16. */
void sp_maxsim_bf16_avx512(const uint16_t *rows, uint32_t n, uint32_t dim, const uint32_t *qp,
                           uint32_t m_pad, float *mx, float *bad);

/* Widening of n stored elements to float32. */
typedef void (*sp_widen_fn)(const uint16_t *src, size_t n, float *dst);
void sp_f16_widen_avx2(const uint16_t *src, size_t n, float *dst);
void sp_bf16_widen_avx2(const uint16_t *src, size_t n, float *dst);

#endif
