/* CPU search over the centroid graph (CAGRA single-CTA search, docs/algorithms.md §2.4, as a
 * sequential loop), plus the brute-force reference it is measured against.
 *
 * Per query token: the sorted candidate list (itopk entries, best first, each with an
 * "expanded" flag -- CAGRA keeps it in the id's MSB, here a byte array) starts from
 * the graph's fixed entry points; each iteration takes the search_width best
 * unexpanded candidates as parents, computes the inner product of every unvisited
 * child, and merges the children into the list; it stops when every listed candidate
 * has been expanded (or at max_iterations). The first k entries are the answer.
 *
 * Departures from CAGRA, and why: (1) the visited set is an epoch array of n uint32
 * per worker (hnsw.c's idea) instead of a small hash that is periodically reset: on a
 * CPU 4n bytes per thread is affordable at n <= 10^7, lookups never collide, and it
 * is reset in O(1) by bumping the epoch; a GPU port would use CAGRA's hash. (2) Seeds
 * are the graph's fixed entry points rather than fresh random nodes per query, so a
 * search is a pure function of (graph, query). (3) Insertion into the sorted list is a
 * memmove (itopk <= a few hundred) instead of bitonic merges, which suit a warp and
 * not a core. Children of a parent are prefetched before their dot products, because
 * the vectors (512 B each at d = 128) are random reads from a table larger than L2, and
 * a node's graph row as it enters the list, well before it is expanded (at K = 99,328
 * the row's load was the walk's largest stall: 1.07-1.24x on the probe).
 * No allocation happens in graph_search: all scratch lives in the searcher. */
#include <math.h>
#include <string.h>

#include "core/blas.h"
#include "core/error.h"
#include "graph/dot.h"
#include "graph/graph.h"
#include "graph/heap.h"
#include "core/alloc.h"

#define MAX_WIDTH 16

typedef struct worker {
    uint32_t *visited; /* n: epoch stamps */
    uint32_t epoch;
    uint32_t *bid;     /* cap: candidate ids, best first */
    float *bip;
    uint8_t *done;     /* cap: expanded flags */
    uint32_t *kids;    /* MAX_WIDTH * degree */
    uint64_t n_search, n_dist, n_expand; /* counters for graph_searcher_counters */
    char pad[64];      /* keeps two workers' counters off one cache line */
} worker;

struct graph_searcher {
    const graph *g;
    const float *v;
    uint32_t d, itopk, width, max_iter, max_k, cap;
    int n_workers;
    graph_dot_fn dot;
    worker *w;
};

void graph_searcher_free(graph_searcher *s)
{
    if (!s) return;
    if (s->w)
        for (int i = 0; i < s->n_workers; i++) {
            cm_free(s->w[i].visited);
            cm_free(s->w[i].bid);
            cm_free(s->w[i].bip);
            cm_free(s->w[i].done);
            cm_free(s->w[i].kids);
        }
    cm_free(s->w);
    cm_free(s);
}

static uint32_t round32(uint32_t x) { return (x + 31) / 32 * 32; }

/* Default list length for k results: max(64, 3k) rounded up to 32. CAGRA's default is
 * 64 whatever k; measured on K = 65,536 clustered centroids (bench_ivf), 2k gave
 * Recall@32 0.981 and Recall@64 0.978, 3k gave 0.992 and 0.996, at ~1.4x the work. */
static uint32_t default_itopk(uint32_t k) { return round32(3 * k > 64 ? 3 * k : 64); }

/* A seeded walk starts beside its answer and needs less room for the way there:
 * max(32, 2.5k) rounded up to 8. On K = 99,328 centroids with the CPU backend's seeds,
 * n_probe 16: probe recall 0.993-0.999 at 40 on two query sets, where 2k (32) gave
 * 0.990-0.998 and 48 adds another 0.001-0.002 for a longer walk (bench/RESULTS.md
 * section 5.13). */
static uint32_t seeded_itopk(uint32_t k)
{
    uint32_t l = (5 * k / 2 + 7) / 8 * 8;
    return l > 32 ? l : 32;
}

chimera_status graph_searcher_new(const graph *g, const float *vecs, uint32_t d,
                                  const graph_search_params *params, uint32_t max_k,
                                  int n_workers, graph_searcher **out, chimera_error *err)
{
    *out = NULL;
    if (!g || !vecs || d == 0 || g->n == 0 || max_k == 0 || n_workers < 1)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "graph search: need a graph, vectors, d >= 1, max_k >= 1, workers >= 1");
    graph_searcher *s = cm_calloc(1, sizeof *s);
    if (!s) return cm_fail(err, CHIMERA_ERR_NOMEM, "graph search: out of memory");
    s->g = g;
    s->v = vecs;
    s->d = d;
    s->max_k = max_k;
    s->itopk = params && params->itopk ? params->itopk : 0; /* 0: from k per search */
    s->width = params && params->search_width ? params->search_width : 1;
    if (s->width > MAX_WIDTH) s->width = MAX_WIDTH;
    s->max_iter = params && params->max_iterations ? params->max_iterations : UINT32_MAX;
    /* The list must hold the entry points too (they seed it), and at least k. */
    uint32_t need = default_itopk(max_k);
    if (s->itopk > need) need = s->itopk;
    if (max_k > need) need = max_k;
    s->cap = need > g->n_entry ? need : g->n_entry;
    s->n_workers = n_workers;
    s->dot = graph_dot_get();
    s->w = cm_calloc((size_t)n_workers, sizeof(worker));
    if (!s->w) goto nomem;
    for (int i = 0; i < n_workers; i++) {
        worker *w = &s->w[i];
        w->visited = cm_calloc(g->n, sizeof(uint32_t));
        w->bid = cm_malloc(sizeof(uint32_t) * s->cap);
        w->bip = cm_malloc(sizeof(float) * s->cap);
        w->done = cm_malloc(s->cap);
        w->kids = cm_malloc(sizeof(uint32_t) * ((size_t)MAX_WIDTH * g->degree + 1));
        if (!w->visited || !w->bid || !w->bip || !w->done || !w->kids) goto nomem;
    }
    *out = s;
    return CHIMERA_OK;
nomem:
    graph_searcher_free(s);
    return cm_fail(err, CHIMERA_ERR_NOMEM, "graph search: out of memory for %d workers' scratch",
                   n_workers);
}

/* Inserts (id, ip) into the sorted list of length *len (capacity L); 0 when it did not
 * make the list. */
static inline int list_insert(worker *w, uint32_t *len, uint32_t L, uint32_t id, float ip)
{
    uint32_t n = *len;
    if (n == L) {
        if (!gh_better(ip, id, w->bip[n - 1], w->bid[n - 1])) return 0;
        n--; /* the last entry falls off */
    }
    uint32_t pos = n;
    while (pos > 0 && gh_better(ip, id, w->bip[pos - 1], w->bid[pos - 1])) pos--;
    memmove(w->bid + pos + 1, w->bid + pos, sizeof(uint32_t) * (n - pos));
    memmove(w->bip + pos + 1, w->bip + pos, sizeof(float) * (n - pos));
    memmove(w->done + pos + 1, w->done + pos, n - pos);
    w->bid[pos] = id;
    w->bip[pos] = ip;
    w->done[pos] = 0;
    *len = n + 1;
    return 1;
}

/* The walk from n_seed seeds (their scores given in seed_ips, or computed when NULL). */
static uint32_t walk(graph_searcher *s, int worker_id, const float *q, uint32_t k,
                     const uint32_t *seeds, const float *seed_ips, uint32_t n_seed, int seeded,
                     uint32_t *ids, float *ips)
{
    const graph *g = s->g;
    worker *w = &s->w[worker_id];
    if (k > s->max_k) k = s->max_k;
    uint32_t L = s->itopk ? s->itopk : seeded ? seeded_itopk(k) : default_itopk(k);
    if (L < k) L = k;
    if (L > s->cap) L = s->cap;
    if (++w->epoch == 0) { /* wrapped after 2^32 searches: restart the stamps */
        memset(w->visited, 0, sizeof(uint32_t) * g->n);
        w->epoch = 1;
    }
    const uint32_t ep = w->epoch, d = s->d, deg = g->degree;
    uint32_t len = 0;
    for (uint32_t e = 0; e < n_seed; e++) {
        uint32_t id = seeds[e];
        if (id >= g->n || w->visited[id] == ep) continue;
        w->visited[id] = ep;
        list_insert(w, &len, L, id, seed_ips ? seed_ips[e] : s->dot(q, s->v + (size_t)id * d, d));
    }
    for (uint32_t it = 0; it < s->max_iter; it++) {
        uint32_t nk = 0, np = 0;
        for (uint32_t p = 0; p < len && np < s->width; p++) {
            if (w->done[p]) continue;
            w->done[p] = 1;
            np++;
            const uint32_t *row = g->adj + (size_t)w->bid[p] * deg;
            for (uint32_t j = 0; j < deg; j++) {
                uint32_t c = row[j];
                if (w->visited[c] == ep) continue;
                w->visited[c] = ep;
                w->kids[nk++] = c;
                const char *line = (const char *)(s->v + (size_t)c * d);
                for (uint32_t b = 0; b < d * sizeof(float); b += 64) __builtin_prefetch(line + b);
            }
        }
        if (np == 0) break;
        w->n_expand += np;
        w->n_dist += nk;
        for (uint32_t j = 0; j < nk; j++) {
            uint32_t c = w->kids[j];
            /* a listed node is expanded later unless pushed out: fetch its row of the
             * graph now, while other misses are outstanding, not when it is the parent */
            if (list_insert(w, &len, L, c, s->dot(q, s->v + (size_t)c * d, d))) {
                const char *adj = (const char *)(g->adj + (size_t)c * deg);
                for (uint32_t b = 0; b < deg * sizeof(uint32_t); b += 64)
                    __builtin_prefetch(adj + b);
            }
        }
    }
    w->n_search++;
    if (!seed_ips) w->n_dist += n_seed;
    uint32_t got = len < k ? len : k;
    for (uint32_t i = 0; i < k; i++) {
        ids[i] = i < got ? w->bid[i] : UINT32_MAX;
        if (ips) ips[i] = i < got ? w->bip[i] : -INFINITY;
    }
    return got;
}

uint32_t graph_search(graph_searcher *s, int worker_id, const float *q, uint32_t k,
                      uint32_t *ids, float *ips)
{
    return walk(s, worker_id, q, k, s->g->entry, NULL, s->g->n_entry, 0, ids, ips);
}

uint32_t graph_search_seeded(graph_searcher *s, int worker_id, const float *q, uint32_t k,
                             const uint32_t *seeds, const float *seed_ips, uint32_t n_seed,
                             uint32_t *ids, float *ips)
{
    return walk(s, worker_id, q, k, seeds, seed_ips, n_seed, 1, ids, ips);
}

void graph_searcher_counters(const graph_searcher *s, uint64_t *n_search, uint64_t *n_dist,
                             uint64_t *n_expand)
{
    uint64_t a = 0, b = 0, c = 0;
    for (int i = 0; i < s->n_workers; i++) {
        a += s->w[i].n_search;
        b += s->w[i].n_dist;
        c += s->w[i].n_expand;
    }
    *n_search = a;
    *n_dist = b;
    *n_expand = c;
}

typedef struct batch {
    graph_searcher *s;
    const float *q;
    int64_t nq;
    size_t ldq;
    uint32_t k;
    uint32_t *ids;
    float *ips;
} batch;

#define BATCH_CHUNK 32

static void batch_task(void *ctx, int64_t task, int worker_id)
{
    batch *b = ctx;
    int64_t i0 = task * BATCH_CHUNK, i1 = i0 + BATCH_CHUNK < b->nq ? i0 + BATCH_CHUNK : b->nq;
    for (int64_t i = i0; i < i1; i++)
        graph_search(b->s, worker_id, b->q + (size_t)i * b->ldq, b->k, b->ids + (size_t)i * b->k,
                     b->ips ? b->ips + (size_t)i * b->k : NULL);
}

void graph_search_batch(graph_searcher *s, cm_pool *pool, const float *q, int64_t nq,
                        size_t ldq, uint32_t k, uint32_t *ids, float *ips)
{
    if (k > s->max_k) k = s->max_k;
    batch b = {s, q, nq, ldq, k, ids, ips};
    int64_t nt = (nq + BATCH_CHUNK - 1) / BATCH_CHUNK;
    cm_pool_run(pool, nt, batch_task, &b);
}

/* ---- brute force ------------------------------------------------------------------ */

#define BF_ROWS 128
#define BF_COLS 4096

typedef struct bf_ctx {
    const float *v, *q;
    uint32_t n, d, k;
    int64_t nq;
    size_t ldq;
    uint32_t *ids;
    float *ips;
    float **tiles;  /* per worker BF_ROWS * BF_COLS */
    uint32_t **hid; /* per worker BF_ROWS * k */
    float **hip;
} bf_ctx;

static void bf_task(void *ctx, int64_t task, int worker_id)
{
    bf_ctx *c = ctx;
    int64_t r0 = task * BF_ROWS;
    int nr = (int)(c->nq - r0 < BF_ROWS ? c->nq - r0 : BF_ROWS);
    uint32_t *hid = c->hid[worker_id], hn[BF_ROWS] = {0};
    float *hip = c->hip[worker_id], *tile = c->tiles[worker_id];
    for (uint32_t c0 = 0; c0 < c->n; c0 += BF_COLS) {
        uint32_t nc = c->n - c0 < BF_COLS ? c->n - c0 : BF_COLS;
        cm_sgemm_nt(nr, (int)nc, (int)c->d, 1.0f, c->q + (size_t)r0 * c->ldq, (int)c->ldq,
                    c->v + (size_t)c0 * c->d, (int)c->d, 0.0f, tile, (int)nc);
        for (int i = 0; i < nr; i++) {
            const float *s = tile + (size_t)i * nc;
            float *hp = hip + (size_t)i * c->k;
            uint32_t *hi = hid + (size_t)i * c->k;
            for (uint32_t j = 0; j < nc; j++) {
                if (hn[i] == c->k && s[j] < hp[0]) continue;
                gh_push(hp, hi, &hn[i], c->k, s[j], c0 + j, 0);
            }
        }
    }
    for (int i = 0; i < nr; i++) {
        float *hp = hip + (size_t)i * c->k;
        uint32_t *hi = hid + (size_t)i * c->k;
        gh_sort(hp, hi, hn[i]);
        for (uint32_t j = 0; j < c->k; j++) {
            c->ids[(size_t)(r0 + i) * c->k + j] = j < hn[i] ? hi[j] : UINT32_MAX;
            if (c->ips) c->ips[(size_t)(r0 + i) * c->k + j] = j < hn[i] ? hp[j] : -INFINITY;
        }
    }
}

chimera_status graph_brute_force(const float *vecs, uint32_t n, uint32_t d, const float *q,
                                 int64_t nq, size_t ldq, uint32_t k, cm_pool *pool,
                                 uint32_t *ids, float *ips, chimera_error *err)
{
    if (k == 0 || nq <= 0) return CHIMERA_OK;
    int nw = cm_pool_size(pool);
    bf_ctx c = {vecs, q, n, d, k, nq, ldq, ids, ips, NULL, NULL, NULL};
    chimera_status st = CHIMERA_OK;
    c.tiles = cm_calloc((size_t)nw, sizeof(float *));
    c.hid = cm_calloc((size_t)nw, sizeof(uint32_t *));
    c.hip = cm_calloc((size_t)nw, sizeof(float *));
    if (!c.tiles || !c.hid || !c.hip) goto nomem;
    for (int w = 0; w < nw; w++) {
        c.tiles[w] = cm_aligned_alloc(64, sizeof(float) * BF_ROWS * BF_COLS);
        c.hid[w] = cm_malloc(sizeof(uint32_t) * BF_ROWS * k);
        c.hip[w] = cm_malloc(sizeof(float) * BF_ROWS * k);
        if (!c.tiles[w] || !c.hid[w] || !c.hip[w]) goto nomem;
    }
    {
        int64_t nt = (nq + BF_ROWS - 1) / BF_ROWS;
        cm_pool_run(pool, nt, bf_task, &c);
    }
    goto done;
nomem:
    st = cm_fail(err, CHIMERA_ERR_NOMEM, "brute force: out of memory (k = %u)", k);
done:
    for (int w = 0; w < nw; w++) {
        if (c.tiles) cm_free(c.tiles[w]);
        if (c.hid) cm_free(c.hid[w]);
        if (c.hip) cm_free(c.hip[w]);
    }
    cm_free(c.tiles);
    cm_free(c.hid);
    cm_free(c.hip);
    return st;
}
