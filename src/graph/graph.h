/* Proximity graph over the IVF centroids (CAGRA-style), built and searched on the CPU.
 *
 * The graph is a fixed out-degree adjacency array: n x degree uint32 node ids,
 * row-major, no padding entries, no self loops, no duplicates in a row -- the layout a
 * GPU kernel reads with one coalesced load per row. Build: approximate or exact kNN
 * graph (inner product), CAGRA rank-based pruning to `degree`, reverse edges merged
 * in, then reachability from the entry points repaired. Search: greedy best-first
 * search with a fixed-size sorted candidate list (itopk), `search_width` parents per
 * step, a per-worker visited-epoch array and fixed entry points; returns the top k
 * nodes by inner product. Vectors are borrowed from the caller (n x d, row-major);
 * they should be unit vectors (centroids of spherical k-means), though only inner
 * products are used. */
#ifndef CHIMERA_GRAPH_GRAPH_H
#define CHIMERA_GRAPH_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "chimera.h"
#include "core/pool.h"

typedef enum graph_knn_mode {
    GRAPH_KNN_AUTO = 0,      /* exact when n <= 32768, partitioned above */
    GRAPH_KNN_EXACT = 1,     /* tiled sgemm over all pairs: n^2 * d * 2 flop */
    GRAPH_KNN_PARTITION = 2, /* overlapping pivot partitions, exact inside, one refinement */
} graph_knn_mode;

/* Largest out-degree graph_build accepts with the default intermediate degree: that is
 * 2 * degree, and pruning ranks neighbours in 8 bits (at most 255). */
#define GRAPH_DEGREE_MAX 127

/* Zero in any field means its default. */
typedef struct graph_build_opts {
    uint32_t degree;              /* out-degree of the final graph (0: 32) */
    uint32_t intermediate_degree; /* k of the kNN graph fed to pruning (0: 2 * degree) */
    graph_knn_mode knn;
    uint32_t n_entry;             /* entry points stored with the graph (0: 64) */
    uint32_t partition_size;      /* PARTITION: target points per partition (0: 2048) */
    uint32_t partition_overlap;   /* PARTITION: partitions each point joins (0: 4, max 16) */
    uint64_t seed;                /* (0: 1234) */
    cm_pool *pool;                /* NULL: the calling thread only */
    chimera_progress_fn progress; /* optional */
    void *progress_user;
} graph_build_opts;

typedef struct graph {
    uint32_t n, degree;
    uint32_t *adj;      /* n x degree */
    uint32_t n_entry;
    uint32_t *entry;    /* n_entry distinct node ids, where every search starts */
    /* Build diagnostics. */
    double knn_seconds, prune_seconds;
    uint32_t n_repair_edges; /* edges rewired to make every node reachable */
} graph;

/* Builds the graph over vecs [n x d]. degree is lowered to n - 1 when n is small
 * (n == 1 gives degree 0). out is zeroed on failure.
 * @return CHIMERA_OK, _INVALID_ARG (n == 0, d == 0, intermediate < degree), _NOMEM. */
chimera_status graph_build(const float *vecs, uint32_t n, uint32_t d,
                           const graph_build_opts *opts, graph *out, chimera_error *err);
void graph_free(graph *g);

typedef struct graph_check_stats {
    uint32_t n_reachable; /* nodes reachable from the entry points */
} graph_check_stats;

/* Validates a graph (hnsw_validate_graph in spirit): degree <= n - 1, every id < n, no
 * self loops, no duplicate edge in a row, entry ids valid and distinct, every node
 * reachable from the entry points. st (may be NULL) receives the reachable count.
 * @return CHIMERA_OK or _CORRUPT (the message names the first bad node), _NOMEM. */
chimera_status graph_check(const graph *g, graph_check_stats *st, chimera_error *err);

/* Zero in any field means its default. */
typedef struct graph_search_params {
    uint32_t itopk;          /* candidate list length (0: max(64, 3k) rounded up to 32;
                                seeded walks max(32, 2.5k) rounded up to 8) */
    uint32_t search_width;   /* parents expanded per iteration (0: 1) */
    uint32_t max_iterations; /* (0: until every candidate in the list is expanded) */
} graph_search_params;

typedef struct graph_searcher graph_searcher;

/* A searcher with scratch for n_workers concurrent searches (worker ids 0 ..
 * n_workers - 1, as core/pool.h hands out) returning up to max_k results each. g and
 * vecs [g->n x d] are borrowed and must outlive the searcher.
 * @return CHIMERA_OK, _INVALID_ARG, _NOMEM. */
chimera_status graph_searcher_new(const graph *g, const float *vecs, uint32_t d,
                                  const graph_search_params *params, uint32_t max_k,
                                  int n_workers, graph_searcher **out, chimera_error *err);
void graph_searcher_free(graph_searcher *s);

/* Top-k nodes by inner product with q [d], best first (ties: smaller id), written to
 * ids[k] and ips[k] (ips may be NULL). Slots past the returned count (k > n) get
 * UINT32_MAX / -inf. k is capped at max_k. Never allocates. Returns the count. */
uint32_t graph_search(graph_searcher *s, int worker, const float *q, uint32_t k, uint32_t *ids,
                      float *ips);

/* graph_search started from n_seed caller-chosen nodes instead of the graph's entry
 * points (ids >= n and repeats are skipped; at most the list length are kept, best
 * first). seed_ips: their inner products with q when the caller has them (NULL: computed
 * here). A seed near the answer spares the walk its way there and the local optima on
 * it: the CPU backend seeds each query token with its best centroids among a fixed
 * sample it scores from 8-bit rows (docs/algorithms.md §2.6). Unless params set itopk,
 * a seeded walk keeps a shorter list than graph_search. Never allocates. */
uint32_t graph_search_seeded(graph_searcher *s, int worker, const float *q, uint32_t k,
                             const uint32_t *seeds, const float *seed_ips, uint32_t n_seed,
                             uint32_t *ids, float *ips);

/* Totals over all workers since creation: searches, inner products computed, nodes
 * expanded. For tuning and benchmarks; read when no search is running. */
void graph_searcher_counters(const graph_searcher *s, uint64_t *n_search, uint64_t *n_dist,
                             uint64_t *n_expand);

/* graph_search for nq queries q [nq x ldq]: results in ids/ips [nq x k]. Spread over
 * the pool (NULL: the calling thread), whose size must not exceed n_workers. */
void graph_search_batch(graph_searcher *s, cm_pool *pool, const float *q, int64_t nq,
                        size_t ldq, uint32_t k, uint32_t *ids, float *ips);

/* Exact top-k by inner product against all n vectors (blocked sgemm), the reference
 * for recall: same output contract as graph_search_batch. scratch-free for callers;
 * allocates internally. @return CHIMERA_OK or _NOMEM. */
chimera_status graph_brute_force(const float *vecs, uint32_t n, uint32_t d, const float *q,
                                 int64_t nq, size_t ldq, uint32_t k, cm_pool *pool,
                                 uint32_t *ids, float *ips, chimera_error *err);

#endif
