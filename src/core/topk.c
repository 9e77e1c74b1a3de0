/* Top-k min-heap (see topk.h). The root holds the worst of the kept entries. */
#include <assert.h>
#include <math.h>

#include "core/topk.h"

static void sift_down(cm_topk *h, uint32_t i, uint32_t n)
{
    float s = h->score[i];
    int64_t id = h->id[i];
    for (;;) {
        uint32_t l = 2 * i + 1;
        if (l >= n) break;
        /* pick the worse child */
        uint32_t c = l;
        if (l + 1 < n && cm_rank_better(h->score[l], h->id[l], h->score[l + 1], h->id[l + 1]))
            c = l + 1;
        if (!cm_rank_better(s, id, h->score[c], h->id[c])) break;
        h->score[i] = h->score[c];
        h->id[i] = h->id[c];
        i = c;
    }
    h->score[i] = s;
    h->id[i] = id;
}

void cm_topk_push(cm_topk *h, float score, int64_t id)
{
    if (h->k == 0) return;
    if (h->n < h->k) {
        uint32_t i = h->n++;
        while (i > 0) {
            uint32_t parent = (i - 1) / 2;
            if (!cm_rank_better(h->score[parent], h->id[parent], score, id)) break;
            h->score[i] = h->score[parent];
            h->id[i] = h->id[parent];
            i = parent;
        }
        h->score[i] = score;
        h->id[i] = id;
        return;
    }
    if (!cm_rank_better(score, id, h->score[0], h->id[0])) return;
    h->score[0] = score;
    h->id[0] = id;
    sift_down(h, 0, h->n);
}

void cm_topk_sort(cm_topk *h)
{
    /* Heap sort: repeatedly move the worst to the end. */
    for (uint32_t end = h->n; end > 1; end--) {
        float s = h->score[0];
        int64_t id = h->id[0];
        h->score[0] = h->score[end - 1];
        h->id[0] = h->id[end - 1];
        h->score[end - 1] = s;
        h->id[end - 1] = id;
        sift_down(h, 0, end - 1);
    }
}

void cm_topk_emit(cm_topk *h, int64_t *ids, float *scores)
{
    cm_topk_sort(h);
    for (uint32_t i = 0; i < h->k; i++) {
        ids[i] = i < h->n ? h->id[i] : -1;
        scores[i] = i < h->n ? h->score[i] : -INFINITY;
    }
}

void cm_topsel_init(cm_topsel *t, uint32_t k, uint32_t cap, float *score, int64_t *id)
{
    assert(cap > k); /* a cut must leave room: the buffers are the caller's, cap long */
    *t = (cm_topsel){.k = k, .cap = cap, .score = score, .id = id};
}

static inline void swap_entry(float *s, int64_t *id, uint32_t a, uint32_t b)
{
    float ts = s[a];
    s[a] = s[b];
    s[b] = ts;
    int64_t ti = id[a];
    id[a] = id[b];
    id[b] = ti;
}

/* Reorders s/id[0..n) so that [0, k) hold the k best in some order (k < n): quickselect,
 * the pivot the median of three, so that input sorted either way stays linear. */
static void select_best(float *s, int64_t *id, uint32_t n, uint32_t k)
{
    uint32_t lo = 0, hi = n;
    while (hi - lo > 1) {
        uint32_t a = lo, b = lo + (hi - lo) / 2, c = hi - 1;
        if (cm_rank_better(s[b], id[b], s[a], id[a])) swap_entry(s, id, a, b);
        if (cm_rank_better(s[c], id[c], s[b], id[b])) swap_entry(s, id, b, c);
        if (cm_rank_better(s[b], id[b], s[a], id[a])) swap_entry(s, id, a, b);
        swap_entry(s, id, b, c); /* the median is the pivot, at hi - 1 */
        float ps = s[c];
        int64_t pi = id[c];
        uint32_t p = lo;
        for (uint32_t i = lo; i < c; i++)
            if (cm_rank_better(s[i], id[i], ps, pi)) swap_entry(s, id, i, p++);
        swap_entry(s, id, p, c);
        /* [lo, p) rank above the pivot at p, (p, hi) not */
        if (p == k || p + 1 == k) return;
        if (p > k) hi = p;
        else lo = p + 1;
    }
}

void cm_topsel_cut(cm_topsel *t)
{
    /* n > k here: push cuts a full buffer, sort one holding more than k */
    if (t->k == 0) { /* keeps nothing */
        t->n = 0;
        return;
    }
    select_best(t->score, t->id, t->n, t->k);
    t->n = t->k;
    uint32_t w = 0; /* the worst kept is the bar */
    for (uint32_t i = 1; i < t->n; i++)
        if (cm_rank_better(t->score[w], t->id[w], t->score[i], t->id[i])) w = i;
    t->has_bar = 1;
    t->bar_s = t->score[w];
    t->bar_i = t->id[w];
}

void cm_topsel_sort(cm_topsel *t)
{
    if (t->n > t->k) cm_topsel_cut(t);
    /* a heap of the n kept, sorted as cm_topk sorts */
    cm_topk h = {t->n, t->n, t->score, t->id};
    for (uint32_t i = t->n / 2; i-- > 0;) sift_down(&h, i, t->n);
    cm_topk_sort(&h);
}
