/* Posting lists of a fine-grained IVF: for every centroid the ids of the tokens
 * assigned to it, in CSR layout (offsets[k + 1], ids[n]), ids ascending within a list.
 * Token ids are uint32_t: the lists are the GPU-resident part of the index, where half
 * the bytes matter, and a shard holds fewer than 2^32 tokens (larger corpora shard). */
#ifndef CHIMERA_CLUSTER_POSTINGS_H
#define CHIMERA_CLUSTER_POSTINGS_H

#include <stdint.h>

#include "chimera.h"

typedef struct ivf_postings {
    uint32_t k;
    int64_t n;
    int64_t *offsets; /* k + 1; list c is ids[offsets[c] .. offsets[c+1]) */
    uint32_t *ids;    /* n */
} ivf_postings;

typedef struct ivf_postings_stats {
    int64_t min, median, max; /* list sizes */
    double mean;
    double imbalance; /* k * sum n_c^2 / n^2 (1 = perfectly balanced; Faiss's measure) */
    uint32_t n_empty;
} ivf_postings_stats;

/* Builds the lists from assign[n] (assign[i] = centroid of token i, < k) by a stable
 * counting sort. out is zeroed on failure.
 * @return CHIMERA_OK, _INVALID_ARG (k == 0, n >= 2^32, an assignment >= k), _NOMEM. */
chimera_status ivf_postings_build(const uint32_t *assign, int64_t n, uint32_t k,
                                  ivf_postings *out, chimera_error *err);
void ivf_postings_free(ivf_postings *p);

/* Size statistics (O(k) scratch; returns -1 when out of memory, else 0). */
int ivf_postings_stats_get(const ivf_postings *p, ivf_postings_stats *st);

#endif
