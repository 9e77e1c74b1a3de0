/* The exact re-rank tier: exact Chamfer scores of a query against documents of an
 * index that stores its original vectors (index sections vectors_*, built with
 * --rerank), on the host whatever the backend (pipeline.h runs it after the full-bit
 * stage, on the top rerank_depth documents).
 *
 * The score is the one chimera_corpus_search computes: sum over query tokens of the
 * largest inner product with a document token. The kernel is exact.c's: documents are
 * gathered, whole or in pieces, into blocks of at most SP_RERANK_ROWS rows converted to
 * float32 (F16C for half floats where the CPU has it, a shift for bfloat16), one sgemm
 * per block gives every (row, query token) inner product, and a running maximum per
 * document over its rows gives the per-token maxima. Blocks of several short documents
 * keep the sgemm in its efficient range; a long document spans blocks. Scratch is the
 * caller's, allocated once per worker, so scoring allocates nothing. */
#ifndef CHIMERA_SEARCH_RERANK_H
#define CHIMERA_SEARCH_RERANK_H

#include <stddef.h>
#include <stdint.h>

#include "chimera.h"
#include "index/index.h"

#define SP_RERANK_ROWS 256

typedef struct sp_rerank_scratch {
    float *rows;    /* [SP_RERANK_ROWS x dim] a block of document rows in float32 */
    float *c;       /* [SP_RERANK_ROWS x max_m] their inner products with the query */
    float *run;     /* [max_m] the running maxima of the document a block boundary cut */
    float bad;      /* and whether it met a non-finite product (rerank.c) */
    uint32_t *seg;  /* [SP_RERANK_ROWS x 4] the block's pieces of documents */
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

/* Widening of n stored elements to float32 (kernels per SIMD level, chosen once). */
typedef void (*sp_widen_fn)(const uint16_t *src, size_t n, float *dst);
void sp_f16_widen_avx2(const uint16_t *src, size_t n, float *dst);
void sp_bf16_widen_avx2(const uint16_t *src, size_t n, float *dst);

#endif
