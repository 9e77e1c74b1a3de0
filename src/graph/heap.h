/* A bounded min-heap of (inner product, node id) pairs keeping the best k, with the
 * total order "higher ip wins, equal ip prefers the smaller id" so that results do not
 * depend on arrival order. Optional de-duplication keeps the highest ip seen per id
 * (candidates may arrive from several partitions with last-ulp differences), which
 * makes the final set a function of the candidate multiset alone. Private to
 * src/graph; the arrays are the caller's. */
#ifndef CHIMERA_GRAPH_HEAP_H
#define CHIMERA_GRAPH_HEAP_H

#include <stdint.h>

static inline int gh_better(float a, uint32_t ia, float b, uint32_t ib)
{
    return a > b || (a == b && ia < ib);
}

static inline void gh_sift_down(float *ip, uint32_t *id, uint32_t n, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && gh_better(ip[w], id[w], ip[l], id[l])) w = l;
        if (r < n && gh_better(ip[w], id[w], ip[r], id[r])) w = r;
        if (w == i) return;
        float tf = ip[i];
        ip[i] = ip[w];
        ip[w] = tf;
        uint32_t ti = id[i];
        id[i] = id[w];
        id[w] = ti;
        i = w;
    }
}

static inline void gh_sift_up(float *ip, uint32_t *id, uint32_t i)
{
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!gh_better(ip[p], id[p], ip[i], id[i])) return;
        float tf = ip[i];
        ip[i] = ip[p];
        ip[p] = tf;
        uint32_t ti = id[i];
        id[i] = id[p];
        id[p] = ti;
        i = p;
    }
}

/* Offers (s, j) to the heap of capacity k holding *n entries. */
static inline void gh_push(float *ip, uint32_t *id, uint32_t *n, uint32_t k, float s, uint32_t j,
                           int dedup)
{
    if (*n == k && !gh_better(s, j, ip[0], id[0])) return;
    if (dedup)
        for (uint32_t q = 0; q < *n; q++)
            if (id[q] == j) {
                if (s > ip[q]) {
                    ip[q] = s;
                    gh_sift_down(ip, id, *n, q);
                }
                return;
            }
    if (*n < k) {
        ip[*n] = s;
        id[*n] = j;
        gh_sift_up(ip, id, (*n)++);
    } else {
        ip[0] = s;
        id[0] = j;
        gh_sift_down(ip, id, k, 0);
    }
}

/* Sorts the heap best-first in place (heap sort; the heap is consumed). */
static inline void gh_sort(float *ip, uint32_t *id, uint32_t n)
{
    for (uint32_t m = n; m > 1; m--) {
        float tf = ip[0];
        ip[0] = ip[m - 1];
        ip[m - 1] = tf;
        uint32_t ti = id[0];
        id[0] = id[m - 1];
        id[m - 1] = ti;
        gh_sift_down(ip, id, m - 1, 0);
    }
}

#endif
