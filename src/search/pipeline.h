/* The 3-stage search pipeline (paper section 3.2, Algorithm 3) over a device backend.
 *
 *   1. candidate generation   backend: query_begin + probe (n_probe clusters per token)
 *   2. candidate refinement   backend: refine -> top k_refine documents by partial
 *                              1-bit Chamfer score; then, when k_interaction < k_refine,
 *                              backend: score_ci -> the top k_interaction of them by
 *                              centroid-interaction score (each token scored by its
 *                              centroid: PLAID's filter, no code read)
 *   3. document scoring       backend: score1 on chunk i of those documents while
 *                              the host computes full-bit scores of the documents that
 *                              entered the running top (i/c) * k_fullbit by 1-bit score
 *
 * The answer is the top k by full-bit score; with the exact re-rank tier (rerank_depth),
 * the top k by exact score of the top rerank_depth by full-bit score, computed on the
 * host from the index's stored vectors after the host stage (whatever the backend: the
 * vectors are never on a device). When rerank_depth >= k_fullbit the host stage is
 * skipped: it would full-bit score exactly the top k_fullbit by 1-bit score, all of which
 * the re-rank scores again, so those go to the re-rank directly. When k_fullbit covers
 * every candidate (k_fullbit >= the number refinement kept) the device's 1-bit scores
 * are skipped: they would only order the host's work, which scores every candidate
 * anyway. Each engine worker runs one query at a time on two threads: the device stage
 * on the worker's own thread and the host stage on a companion thread fed chunk by
 * chunk, so they overlap on any backend (pipeline.c, Threads). */
#ifndef CHIMERA_SEARCH_PIPELINE_H
#define CHIMERA_SEARCH_PIPELINE_H

#include <stdint.h>

#include "backend/backend.h"
#include "chimera.h"
#include "index/index.h"

/* A search filter resolved against one opened index (search/filter.h): the documents a
 * query may return. */
typedef struct sp_filter {
    uint8_t *allow;  /* [ceil(n_docs / 8)]: bit set = may be returned (deleted ones clear) */
    uint32_t *docs;  /* the allowed documents, increasing */
    int64_t n;       /* how many */
} sp_filter;

typedef struct sp_params {
    uint32_t k, n_probe, k_refine, k_fullbit, chunks;
    be_impute impute;
    float impute_scale;      /* the probe floor's scale in (0, 1] (backend.h, be_probe_floor);
                                0: 1, the unscaled n_probe-th centroid score */
    be_probe_mode probe;
    const sp_filter *filter; /* NULL: every document */
    uint32_t n_probe_room;   /* the largest n_probe a filtered query may probe (>= n_probe;
                                0: n_probe): engines are sized for it */
    uint32_t k_fullbit_filtered; /* k_fullbit of a query with a filter (0: k_fullbit); <=
                                    its k_refine. Engines are sized for the larger */
    uint32_t k_refine_filtered;  /* k_refine of a query with a filter (0: k_refine).
                                    Engines are sized for the larger */
    uint32_t rerank_depth;   /* 0: off; else the top max(k, rerank_depth) by full-bit score
                                (by 1-bit score when rerank_depth >= k_fullbit) are
                                re-scored exactly (search/rerank.h) and the best k of
                                them returned; needs the index's vectors, and k_fullbit >=
                                rerank_depth to have that many */
    uint32_t k_interaction;  /* 0 or >= k_refine: off; else refinement's documents are
                                ranked by centroid-interaction score and only the best
                                k_interaction (>= k_fullbit) go on to 1-bit scoring; not on
                                the direct path, which scores every allowed document */
} sp_params;

/* Per-query measurements (summed over queries by the caller). */
typedef struct sp_stats {
    double t_generate, t_refine, t_score1, t_fullbit_wait, t_fullbit, t_total; /* seconds */
    double t_rerank, t_interaction;
    uint64_t tokens_refined, docs_touched, n_refined, n_scored1, n_fullbit, n_reranked;
    uint64_t n_rows;               /* centroid-score rows computed one by one */
    uint64_t n_probed;             /* clusters probed per query token, every round */
    uint64_t n_walked;             /* of those, found by a graph walk (per token) */
    uint64_t n_split;              /* queries whose full-bit stage was split over a pool */
    uint64_t bytes_up, bytes_down; /* across the device interface */
} sp_stats;

typedef struct sp_engine sp_engine;

/* The direct path's threshold, in units of k_refine (see sp_search). */
#define SP_DIRECT_REFINES 4
/* The largest factor a filter deepens probing by (see sp_search). */
#define SP_FILTER_PROBE_MAX 4
/* The largest factor probing widens by when the probed clusters hold too few documents
 * (see sp_search); at least SP_FILTER_PROBE_MAX, since n_probe_room serves both. */
#define SP_WIDEN_PROBE_MAX 8
/* ... and up to at least this many clusters whatever n_probe (a calibrated n_probe of 8
 * on a corpus of topics of 75 documents needed 128 for a top-100) */
#define SP_WIDEN_PROBE_FLOOR 256
/* The room never exceeds what every backend probes (the CUDA backend's limit, 4096),
 * though it never falls below the n_probe asked for. */
#define SP_PROBE_ROOM_MAX 4096

/* An engine over an opened index with `n_workers` concurrent queries, each device call
 * allowed `n_threads` threads (latency mode: 1 worker, n threads), and scratch sized for
 * `max` (k, n_probe, k_refine, k_fullbit maxima; m up to max_m). */
chimera_status sp_engine_new(const ix_index *ix, const char *backend, int n_workers,
                             int n_threads, const sp_params *max, uint32_t max_m,
                             sp_engine **out, chimera_error *err);
void sp_engine_free(sp_engine *e);

/* Moves an idle engine to a newer view of the same index (after an add or delete): its
 * backend takes only what changed (backend.h: refresh). @return CHIMERA_OK, or anything
 * else when the engine cannot follow (a backend without refresh, such as the CPU one,
 * whose engines cost nothing to make; other shared data): then it must be made anew,
 * and it is unchanged. */
chimera_status sp_engine_refresh(sp_engine *e, const ix_index *ix, chimera_error *err);
const char *sp_engine_backend(const sp_engine *e);

/* Searches one query (m x dim tokens) on `worker`: ids (user ids) and scores [p->k], best
 * first, padded with -1 / -inf.
 *
 * With p->filter, only allowed documents are returned, and the filter acts inside the
 * pipeline, never on a finished top-k: refinement skips disallowed documents, so they
 * take none of the k_refine places. When the allowed set is small (at most
 * SP_DIRECT_REFINES x k_refine documents, or a hundredth of the index), probing cannot
 * be relied on to reach enough of them, so refinement is replaced by the full 1-bit
 * score of every allowed document (the "direct" path: it costs what scoring that many
 * documents costs, and misses none); the same happens when a filtered refinement found
 * fewer than k documents while more are allowed. Either way min(k, allowed) results.
 * A filtered refinement probes deeper, n_probe x min(SP_FILTER_PROBE_MAX, 1 /
 * sqrt(selectivity)) clusters (up to p->n_probe_room): a subset's best documents rank
 * lower in the corpus, so their tokens sit in clusters further from the query's.
 *
 * Without a filter, when the probed clusters hold fewer documents than k_fullbit (and
 * the index more), probing doubles until they do or n_probe reaches p->n_probe_room
 * (SP_WIDEN_PROBE_MAX x n_probe, at least SP_WIDEN_PROBE_FLOOR): on a strongly clustered corpus every cluster near a
 * query's tokens holds the same few documents, and a top-100 search would otherwise
 * return fewer than 100. The extra probing counts in the refine stage's time. */
chimera_status sp_search(sp_engine *e, int worker, const float *q, uint32_t m,
                         const sp_params *p, int64_t *ids, float *scores, sp_stats *st,
                         chimera_error *err);

/* The exhaustive reference: full-bit estimated Chamfer score of every document for one
 * query, brute force over all tokens, with the centroid scores of every backend's
 * full-bit stage (from the 8-bit centroids, quant/centroids8.h) (for tests: with every
 * cluster probed and k_refine = k_fullbit = n_docs the pipeline must equal this top-k). */
chimera_status sp_fullbit_all(const ix_index *ix, const float *q, uint32_t m, float *scores,
                              chimera_error *err);

#endif
