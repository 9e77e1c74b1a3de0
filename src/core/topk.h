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

/* Top-k by selection, for a stream of which many candidates enter (refinement: thousands
 * of documents for a few hundred places, arriving in no order of score). A candidate
 * that beats the bar (the k-th best kept at the last cut) is appended to a buffer of cap
 * > k slots; a full buffer is cut to its best k by quickselect, which raises the bar.
 * The same total order, the same k best and, after cm_topsel_sort, the same order as
 * cm_topk (NaN scores must not be pushed either), in O(1) expected work per candidate
 * where a heap sifts through log2(k) levels of unpredictable branches. */
typedef struct cm_topsel {
    uint32_t k, cap, n;
    int has_bar;  /* a cut was made: (bar_s, bar_i) is the k-th best kept */
    float bar_s;
    int64_t bar_i;
    float *score; /* [cap], the caller's */
    int64_t *id;
} cm_topsel;

/* cap > k, the length of score and id (2k: a cut every k entries at most). */
void cm_topsel_init(cm_topsel *t, uint32_t k, uint32_t cap, float *score, int64_t *id);

/* Keeps the best k of the buffer in [0, k) and sets the bar; called by push. */
void cm_topsel_cut(cm_topsel *t);

static inline void cm_topsel_push(cm_topsel *t, float score, int64_t id)
{
    if (t->has_bar && !cm_rank_better(score, id, t->bar_s, t->bar_i)) return;
    if (t->n == t->cap) {
        cm_topsel_cut(t);
        if (!cm_rank_better(score, id, t->bar_s, t->bar_i)) return;
    }
    t->score[t->n] = score;
    t->id[t->n++] = id;
}

/* Ends the stream: the best min(k, pushed) entries, best first, in score/id[0..n). */
void cm_topsel_sort(cm_topsel *t);

#endif
