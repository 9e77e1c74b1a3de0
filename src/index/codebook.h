/* The codebook: what an index's quantizer is trained to (the IVF centroids, with the
 * coarse level that assigns tokens to them when there are many) and the seed its
 * rotation derives from. A build normally trains its own; shards of one corpus share
 * one (chimera.h, "Shards"), so that every shard assigns, encodes and scores a token
 * exactly as a single index would, and their scores can be merged.
 *
 * Training is split into its parts so that a distributed build can run them where the
 * data is: ix_codebook_sample draws the build's training sample (the same rows, in the
 * same order, as a single build of the corpus), ix_codebook_train runs the build's
 * k-means on it, and ix_codebook_accumulate / ix_codebook_update are one Lloyd step
 * split into the sums and counts a process computes over its own points (which can be
 * added up across processes) and the update from their totals.
 *
 * The serialized form (ix_codebook_serialize) is self-checking: a magic, the shape and
 * an xxHash of everything, so a truncated or altered copy is refused by name. */
#ifndef CHIMERA_INDEX_CODEBOOK_H
#define CHIMERA_INDEX_CODEBOOK_H

#include <stddef.h>
#include <stdint.h>

#include "chimera.h"
#include "core/pool.h"
#include "core/progress.h"
#include "data/corpus.h"

typedef struct ix_codebook {
    uint32_t k, d;        /* centroids, dimension */
    uint64_t seed;        /* the build seed: the rotation, and everything a build derives */
    float *centroids;     /* k x d, unit rows (grouped by coarse cluster when n_coarse) */
    uint32_t n_coarse;    /* 0: flat (exact assignment) */
    float *coarse;        /* n_coarse x d */
    uint32_t *child_off;  /* n_coarse + 1: the children of coarse m are rows
                             [child_off[m], child_off[m + 1]) */
} ix_codebook;

/* The build's training sample for k centroids over n tokens: 64 points per centroid
 * (IX_TRAIN_POINTS_PER_CENTROID) while that is at most IX_TRAIN_POINTS_MAX rows, then
 * IX_TRAIN_POINTS_MAX rows but never under IX_TRAIN_POINTS_MIN_PER_CENTROID per
 * centroid; never more than the n tokens. The sample is the build's largest buffer
 * (float32, 3.3 GB at 64 per centroid for 10^7 tokens at d = 128), and half of it
 * trains a codebook as good there: bench/RESULTS.md section 4. */
#define IX_TRAIN_POINTS_PER_CENTROID 64
#define IX_TRAIN_POINTS_MIN_PER_CENTROID 32
#define IX_TRAIN_POINTS_MAX ((int64_t)1 << 21)
int64_t ix_codebook_sample_size(uint32_t k, int64_t n_tokens);

/* n rows of c, each kept with probability n / n_tokens (cm_select, seeded by `seed`),
 * in row order, into out [n x dim] as float32; `stream` separates independent draws
 * (a build uses 0). */
chimera_status ix_codebook_sample(const data_corpus *c, int64_t n, uint64_t seed,
                                  uint64_t stream, float *out, chimera_error *err);

/* The build's k-means (cluster/kmeans.h) on x [n x d] into k centroids. pool and watch
 * may be NULL. */
chimera_status ix_codebook_train(const float *x, int64_t n, uint32_t d, uint32_t k,
                                 uint64_t seed, cm_pool *pool, chimera_progress_fn progress,
                                 void *progress_user, cm_watch *watch, ix_codebook *out,
                                 chimera_error *err);

/* Assigns x [n x d] to the codebook's centroids (two-level when it has a coarse level)
 * and adds every point to its centroid's sum (sums: k x d) and count (counts: k);
 * *sim_sum (may be NULL) accumulates the points' similarity to their centroid. */
chimera_status ix_codebook_accumulate(const ix_codebook *cb, const float *x, int64_t n,
                                      cm_pool *pool, double *sums, int64_t *counts,
                                      double *sim_sum, chimera_error *err);

/* Every centroid with members becomes the normalised sum of them; centroids without
 * (or whose members cancel out) stay. Returns how many stayed for want of members. */
uint32_t ix_codebook_update(ix_codebook *cb, const double *sums, const int64_t *counts);

size_t ix_codebook_serialized_size(const ix_codebook *cb);
void ix_codebook_serialize(const ix_codebook *cb, void *buf);
/* @return CHIMERA_OK, _FORMAT (not a codebook, truncated, checksum or shape wrong; the
 *         message says which), _VALUE (a non-finite centroid), _NOMEM. */
chimera_status ix_codebook_deserialize(const void *buf, size_t n, ix_codebook *out,
                                       chimera_error *err);

/* A deep copy (the build keeps its own). */
chimera_status ix_codebook_copy(const ix_codebook *cb, ix_codebook *out, chimera_error *err);
void ix_codebook_free(ix_codebook *cb);

#endif
