/* Spherical k-means for unit vectors under inner product, flat or hierarchical.
 *
 * Centroids are unit vectors (re-normalised after every update), so nearest-by-inner-
 * product is nearest-by-L2 and the objective reported is the mean cosine distance
 * 1 - <x, c(x)> over the training sample (lower is better; Lloyd steps never raise it).
 *
 * Flat: Lloyd iterations with exact sgemm assignment. Hierarchical (algorithms.md §4.2):
 * round(sqrt(K)) coarse clusters, fine clusters shared out to them in proportion to
 * their sizes and trained on their members only, then a few fine-tune iterations on
 * the whole sample with the two-level assignment of cluster/assign.h. The fine
 * centroids come out grouped by coarse cluster (children of coarse m are the rows
 * [child_off[m], child_off[m+1])), which is what ivf_assigner_new takes. */
#ifndef CHIMERA_CLUSTER_KMEANS_H
#define CHIMERA_CLUSTER_KMEANS_H

#include <stdint.h>

#include "chimera.h"
#include "core/pool.h"

typedef enum ivf_kmeans_mode {
    KMEANS_AUTO = 0, /* hierarchical when k >= 4096; below it flat, or, where flat Lloyd
                        would cost over 2e10 multiply-adds, trained hierarchically and
                        returned without the coarse level (n_coarse 0) */
    KMEANS_FLAT = 1,
    KMEANS_HIERARCHICAL = 2,
} ivf_kmeans_mode;

typedef enum ivf_kmeans_init {
    KMEANS_INIT_AUTO = 0,     /* k-means++ when k * n_train * d <= 2^30 (about half a second
                                 of scalar work), else random; the per-coarse-cluster runs
                                 of the hierarchical mode always seed at random */
    KMEANS_INIT_RANDOM = 1,   /* k distinct random training points (Faiss) */
    KMEANS_INIT_PLUSPLUS = 2, /* k-means++ (Arthur & Vassilvitskii), cosine distance */
} ivf_kmeans_init;

/* Zero in any field means its default. */
typedef struct ivf_kmeans_opts {
    ivf_kmeans_mode mode;
    ivf_kmeans_init init;
    uint32_t n_iter;             /* Lloyd iterations per level (0: 10) */
    uint32_t max_points_per_centroid; /* training sample cap = k * this (0: 64) */
    uint64_t seed;               /* (0: 1234) */
    uint32_t n_coarse;           /* hierarchical: coarse clusters (0: round(sqrt(k))) */
    int32_t n_finetune;          /* hierarchical: full fine-tune iterations (0: 2, < 0: none) */
    uint32_t n_probe_coarse;     /* hierarchical fine-tune: coarse clusters probed (0: 4) */
    cm_pool *pool;               /* worker threads (NULL: the calling thread only) */
    chimera_progress_fn progress; /* optional */
    void *progress_user;
    struct cm_watch *watch;      /* optional (core/progress.h): once it is stopped, the
                                    training ends early with CHIMERA_ERR_CANCELLED */
} ivf_kmeans_opts;

#define KMEANS_TRACE_MAX 64

typedef struct ivf_kmeans_result {
    uint32_t k, d;
    float *centroids;     /* k x d, unit rows, 64-byte aligned */
    /* Hierarchical from 4096 clusters only (NULL / 0 when flat, and when KMEANS_AUTO
     * trained hierarchically below 4096): */
    uint32_t n_coarse;
    float *coarse;        /* n_coarse x d, unit rows */
    uint32_t *child_off;  /* n_coarse + 1 */
    /* Diagnostics. */
    int64_t n_train;      /* points actually trained on (after sampling) */
    double objective;     /* final mean cosine distance on the training sample */
    uint32_t n_empty_repaired; /* empty clusters split over the whole run */
    /* Objective after the assignment step of each Lloyd iteration of the last level
     * (flat: every iteration; hierarchical: the fine-tune iterations). */
    uint32_t n_trace;
    double trace[KMEANS_TRACE_MAX];
} ivf_kmeans_result;

/* Clusters x [n x d] (row stride ldx floats; rows should be unit vectors) into k
 * clusters. out is filled on success and zeroed on failure.
 * @return CHIMERA_OK, _INVALID_ARG (k == 0, d == 0, k > n: there must be at least one
 *         point per centroid), _NOMEM.
 * @note Deterministic for a given seed, whatever the pool size. */
chimera_status ivf_kmeans_train(const float *x, int64_t n, uint32_t d, size_t ldx, uint32_t k,
                                const ivf_kmeans_opts *opts, ivf_kmeans_result *out,
                                chimera_error *err);

void ivf_kmeans_result_free(ivf_kmeans_result *r);

#endif
