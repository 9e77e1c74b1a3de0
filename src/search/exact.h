/* Exact (brute-force) Chamfer search: the ground truth for every recall figure. */
#ifndef CHIMERA_SEARCH_EXACT_H
#define CHIMERA_SEARCH_EXACT_H

#include <stdint.h>

#include "chimera.h"
#include "data/corpus.h"

/* Top-k documents of every query by exact Chamfer score, best first (ties: the earlier
 * document). ids receive user ids (rows when the corpus has none); missing slots are
 * -1 / -inf. A document whose score is not finite (NaN or infinity in a corpus opened
 * without its value check) is never returned. n_threads <= 0: one per CPU. */
chimera_status sp_exact_search(const data_corpus *c, const data_queries *q, uint32_t k,
                               int n_threads, chimera_progress_fn progress, void *progress_user,
                               int64_t *ids, float *scores, chimera_error *err);

/* The same scores by a plain triple loop in double precision, for tests: out[i*n_docs + d]
 * is query i's Chamfer score against document d (-inf for empty documents). */
/* The same, cancellable: watch (core/progress.h; NULL: never stops) reports progress and
 * polls the caller's cancel callback; once it stops, the remaining blocks are skipped and
 * the call returns CHIMERA_ERR_CANCELLED (ids and scores unspecified). */
struct cm_watch;
chimera_status sp_exact_search_watch(const data_corpus *c, const data_queries *q, uint32_t k,
                                     int n_threads, struct cm_watch *watch, int64_t *ids,
                                     float *scores, chimera_error *err);

/* Exact Chamfer top-k of each query among its own candidates: cand[i*n_cand + r] are
 * document rows (-1: none; repeats are scored once). ids get user ids, best first,
 * padded with -1 / -inf. Cost: the candidates' tokens times the query's, no pass over
 * the corpus (the build's calibration scores a generous search's candidates with it).
 * k <= 1024. */
chimera_status sp_exact_rescore(const data_corpus *c, const data_queries *q, const int64_t *cand,
                                uint32_t n_cand, uint32_t k, int n_threads, int64_t *ids,
                                float *scores, chimera_error *err);

void sp_exact_scores_naive(const data_corpus *c, const data_queries *q, double *out);

#endif
