/* Bounded top-k selection: a min-heap of the k best (score, id) pairs seen so far.
 *
 * Ordering is total and deterministic: higher score wins; equal scores prefer the
 * smaller id. So results do not depend on the order candidates arrive in (threads,
 * chunks), which the tests rely on. NaN scores must not be pushed. Storage is the
 * caller's (k slots each), so a heap lives in preallocated per-worker scratch. */
#ifndef CHIMERA_CORE_TOPK_H
#define CHIMERA_CORE_TOPK_H

#include <stdint.h>

typedef struct cm_topk {
    uint32_t k, n;
    float *score;
    int64_t *id;
} cm_topk;

/* True when (sa, ia) ranks strictly better than (sb, ib). */
static inline int cm_rank_better(float sa, int64_t ia, float sb, int64_t ib)
{
    return sa > sb || (sa == sb && ia < ib);
}

static inline void cm_topk_init(cm_topk *h, uint32_t k, float *score, int64_t *id)
{
    h->k = k;
    h->n = 0;
    h->score = score;
    h->id = id;
}

/* The score a candidate must beat to enter (-inf while the heap is not full). */
static inline float cm_topk_threshold(const cm_topk *h)
{
    return h->n < h->k ? -__builtin_inff() : h->score[0];
}

void cm_topk_push(cm_topk *h, float score, int64_t id);

/* Sorts the heap's contents best-first in place (the heap is consumed: n is kept, but
 * the arrays are no longer a heap). */
void cm_topk_sort(cm_topk *h);

/* Writes the best-first contents to ids/scores[0..k), padding with -1 / -inf. */
void cm_topk_emit(cm_topk *h, int64_t *ids, float *scores);

#endif
