/* Assignment of vectors to their nearest centroid by inner product.
 *
 * Two strategies:
 *   exact         blocked sgemm of a row block against every centroid, running argmax.
 *                 Cost n*K*d*2 flop; the right choice up to K of a few thousand.
 *   hierarchical  the two-level structure that hierarchical k-means leaves behind:
 *                 n_coarse coarse centroids, and fine centroids stored so that the
 *                 children of coarse centroid m are the contiguous rows
 *                 [child_off[m], child_off[m+1]). A row is compared with all coarse
 *                 centroids, then exactly with the children of its n_probe_coarse best.
 *                 Cost n*(M + p*K/M)*d*2 flop; approximate (see ivf_assign_recall).
 * (The centroid graph of src/graph is a third way; the index layer, which sees both
 * modules, can use graph_search with k = 1.)
 *
 * All functions are callable on any block of rows (the index build streams a mapped
 * token matrix), deterministic, and independent of the number of threads: ties go to
 * the smaller centroid id. */
#ifndef CHIMERA_CLUSTER_ASSIGN_H
#define CHIMERA_CLUSTER_ASSIGN_H

#include <stddef.h>
#include <stdint.h>

#include "chimera.h"
#include "core/pool.h"

/* Rows per sgemm block and centroid columns per tile of the exact kernel: 256 x 2048
 * floats = 2 MiB of scratch, an L2-sized C tile, and M = 256 keeps OpenBLAS's packed
 * panels efficient. */
#define IVF_TILE_ROWS 256
#define IVF_TILE_COLS 2048

/* Exact kernel for one block: for rows x[0..n) (row stride ldx floats, n <=
 * IVF_TILE_ROWS) and centroids c[0..k) (row stride d), updates (best_id, best_ip) of
 * every row where a centroid ranks better (higher ip; equal ip and smaller id).
 * Centroid j is reported as id_base + j. The caller initialises best_ip to -inf (or to
 * a previous result, which makes tiles and subsets composable). scratch: at least
 * IVF_TILE_ROWS * IVF_TILE_COLS floats. Single-threaded. */
void ivf_argmax_block(const float *x, int n, size_t ldx, const float *c, uint32_t k,
                      uint32_t d, uint32_t id_base, uint32_t *best_id, float *best_ip,
                      float *scratch);

typedef struct ivf_assign_opts {
    uint32_t n_probe_coarse; /* coarse clusters searched per row (0: 8) */
    cm_pool *pool;           /* threads for ivf_assign (NULL: the calling thread) */
} ivf_assign_opts;

typedef struct ivf_assigner ivf_assigner;

/* Creates an assigner over k centroids [k x d] (borrowed; must outlive it). With
 * coarse == NULL it is exact; otherwise coarse [n_coarse x d] and child_off
 * [n_coarse + 1] (child_off[n_coarse] == k) describe the two-level structure and are
 * borrowed too. Scratch for every pool worker is allocated here, so ivf_assign never
 * allocates.
 * @return CHIMERA_OK, _INVALID_ARG (k == 0, d == 0, inconsistent child_off), _NOMEM. */
chimera_status ivf_assigner_new(const float *centroids, uint32_t k, uint32_t d,
                                const float *coarse, uint32_t n_coarse,
                                const uint32_t *child_off, const ivf_assign_opts *opts,
                                ivf_assigner **out, chimera_error *err);
void ivf_assigner_free(ivf_assigner *a);

/* Assigns rows x[0..n) (stride ldx floats): ids[i] = the chosen centroid, ips[i] (may
 * be NULL) = its inner product with row i. Uses the pool given at creation. */
void ivf_assign(ivf_assigner *a, const float *x, int64_t n, size_t ldx, uint32_t *ids,
                float *ips);

/* Same with exact search whatever the assigner's kind (the reference). */
void ivf_assign_exact(ivf_assigner *a, const float *x, int64_t n, size_t ldx, uint32_t *ids,
                      float *ips);

/* Estimates the fraction of rows that ivf_assign gives their true nearest centroid:
 * n_sample rows drawn with `seed` (all rows if n <= n_sample) are assigned both ways;
 * a row counts as correct when its inner product is within 1e-6 of the exact best
 * (ties are not misses). Returns the fraction in [0, 1], or -1 when out of memory. */
double ivf_assign_recall(ivf_assigner *a, const float *x, int64_t n, size_t ldx,
                         uint32_t n_sample, uint64_t seed);

#endif
