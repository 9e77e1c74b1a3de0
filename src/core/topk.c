/* Top-k min-heap (see topk.h). The root holds the worst of the kept entries. */
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
