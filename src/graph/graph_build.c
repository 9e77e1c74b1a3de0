/* Construction and validation of the centroid proximity graph (CAGRA, Ootomo et al.
 * ICDE 2024; docs/algorithms.md §2.1, §2.2, §2.5), on the CPU.
 *
 * Pipeline: kNN graph of intermediate_degree (K_in) neighbours per node by inner
 * product -> each row sorted best first -> rank-based detour counting and selection of
 * `degree` edges -> reverse graph -> merge with the first degree/2 pruned edges
 * protected -> reachability repair -> n x degree uint32 row-major.
 *
 * kNN. Exact: tiled sgemm over all pairs (n^2 d 2 flop: 1.1e12 at n = 65536, d = 128,
 * 10-40 s on two cores depending on the BLAS kernels) -- used up to n = 32768.
 * Partitioned (above that): P = overlap * n / partition_size random pivots; each node
 * joins the partitions of its `overlap` (4) nearest pivots as a column, and its kNN
 * row is computed exactly against the members of its ROW_PASSES (2) nearest pivots'
 * partitions, one pass per rank, so every row is written by one task per pass
 * (no locks; later passes de-duplicate). Cost n * ROW_PASSES * partition_size * d * 2
 * flop, ~16x less than exact at n = 65536 and falling as 1/n relative to it. One
 * neighbour-of-neighbour round (NN-descent's local join over the 16 best on both
 * hops) then recovers neighbours across partition boundaries. This is the "cluster
 * hierarchy" builder of algorithms.md §2.5 without k-means (src/graph may not depend on
 * src/cluster); CAGRA itself builds from an approximate (IVF-PQ or NN-descent) graph,
 * and pruning plus reverse edges tolerate a few missing neighbours. Measured on
 * K = 65,536 clustered centroids: Recall@32 of the final search 0.981 from this
 * graph versus 0.992 from the exact kNN graph at itopk 64. Ties and duplicates
 * (keep the highest ip) make the result independent of the thread schedule.
 *
 * Pruning follows current cuVS (`kern_fused_prune`): for node A and each neighbour D
 * at rank kAD, every B' in D's list that is also in A's list at a rank kAB > kAD
 * counts one detour for the edge A->B'; edges are then taken in ascending (detour,
 * rank) order. The paper's extra condition (rank of B' in D's list < kAB) is dropped,
 * as cuVS dropped it. A per-worker n-byte array maps A's neighbours to 1 + rank (set and
 * cleared per node): one L2-resident load per lookup, ~3x faster than a small hash.
 *
 * Reverse edges and merge follow algorithms.md §2.2 steps 3-4 with a serial, therefore
 * deterministic, column-major fill of the reverse lists (cuVS uses atomics and its
 * order varies run to run).
 *
 * Departures: (1) reachability repair instead of CAGRA's optional MST pass: a BFS from
 * the entry points finds unreachable nodes; each gets an in-edge from its best
 * reachable kNN neighbour, written over that neighbour's last (least important)
 * slot, and the BFS repeats. Clustered centroids can leave small islands that no
 * search reaches (none appeared in the tests' fixtures, but nothing prevents them). (2) Rows that cannot be filled from the kNN
 * list (tiny n, sparse partitions) are padded with deterministic random nodes, so
 * the graph has no invalid entries and GPU kernels need no sentinel checks. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "core/blas.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/rng.h"
#include "graph/dot.h"
#include "graph/graph.h"
#include "graph/heap.h"
#include "core/alloc.h"

#define DEFAULT_DEGREE 32
#define DEFAULT_N_ENTRY 64
#define DEFAULT_SEED 1234
#define DEFAULT_PART_SIZE 2048
#define DEFAULT_OVERLAP 4
#define EXACT_MAX_N 32768
#define MAX_OVERLAP 16
#define ROW_PASSES 2 /* partitions each node's kNN row is computed in */
#define TILE_ROWS 256
#define TILE_COLS 2048
#define REPAIR_ROUNDS 16
#define INVALID UINT32_MAX

/* ---- kNN lists -------------------------------------------------------------------- */

typedef struct knn_ctx {
    const float *v;
    uint32_t n, d, kin;
    uint32_t *id;     /* n x kin (heap, then sorted best first) */
    float *ip;        /* n x kin */
    uint32_t *cnt;    /* n */
    float **tiles;    /* per worker, TILE_ROWS * TILE_COLS */
    cm_progress *prog;
    /* partitioned mode */
    const uint32_t *members, *mem_off, *owners, *own_off, *order;
    int dedup;        /* later passes: candidates may already be listed */
    _Atomic int failed;
} knn_ctx;

static void offer_row(knn_ctx *c, uint32_t gi, const float *s, const uint32_t *col_ids,
                      uint32_t col0, uint32_t nc, int dedup)
{
    float *ip = c->ip + (size_t)gi * c->kin;
    uint32_t *id = c->id + (size_t)gi * c->kin;
    for (uint32_t j = 0; j < nc; j++) {
        uint32_t gj = col_ids ? col_ids[j] : col0 + j;
        if (gj == gi) continue;
        /* Cheap reject before the heap call: most candidates lose to the current worst. */
        if (c->cnt[gi] == c->kin && s[j] < ip[0]) continue;
        gh_push(ip, id, &c->cnt[gi], c->kin, s[j], gj, dedup);
    }
}

static void exact_task(void *ctx, int64_t task, int worker)
{
    knn_ctx *c = ctx;
    uint32_t r0 = (uint32_t)task * TILE_ROWS;
    uint32_t nr = c->n - r0 < TILE_ROWS ? c->n - r0 : TILE_ROWS;
    float *tile = c->tiles[worker];
    for (uint32_t c0 = 0; c0 < c->n; c0 += TILE_COLS) {
        uint32_t nc = c->n - c0 < TILE_COLS ? c->n - c0 : TILE_COLS;
        cm_sgemm_nt((int)nr, (int)nc, (int)c->d, 1.0f, c->v + (size_t)r0 * c->d, (int)c->d,
                    c->v + (size_t)c0 * c->d, (int)c->d, 0.0f, tile, (int)nc);
        for (uint32_t i = 0; i < nr; i++)
            offer_row(c, r0 + i, tile + (size_t)i * nc, NULL, c0, nc, 0);
    }
    cm_progress_add(c->prog, nr);
}

static void partition_task(void *ctx, int64_t task, int worker)
{
    knn_ctx *c = ctx;
    uint32_t p = c->order[task];
    uint32_t nb = c->mem_off[p + 1] - c->mem_off[p];
    uint32_t no = c->own_off[p + 1] - c->own_off[p];
    const uint32_t *mem = c->members + c->mem_off[p], *own = c->owners + c->own_off[p];
    if (nb < 2 || no == 0) return;
    float *buf = cm_aligned_alloc(64, sizeof(float) * (size_t)nb * c->d);
    float *rows = cm_aligned_alloc(64, sizeof(float) * (size_t)TILE_ROWS * c->d);
    if (!buf || !rows) {
        atomic_store(&c->failed, 1);
        cm_free(buf);
        cm_free(rows);
        return;
    }
    for (uint32_t i = 0; i < nb; i++)
        memcpy(buf + (size_t)i * c->d, c->v + (size_t)mem[i] * c->d, sizeof(float) * c->d);
    float *tile = c->tiles[worker];
    for (uint32_t r0 = 0; r0 < no; r0 += TILE_ROWS) {
        uint32_t nr = no - r0 < TILE_ROWS ? no - r0 : TILE_ROWS;
        for (uint32_t i = 0; i < nr; i++)
            memcpy(rows + (size_t)i * c->d, c->v + (size_t)own[r0 + i] * c->d,
                   sizeof(float) * c->d);
        for (uint32_t c0 = 0; c0 < nb; c0 += TILE_COLS) {
            uint32_t nc = nb - c0 < TILE_COLS ? nb - c0 : TILE_COLS;
            cm_sgemm_nt((int)nr, (int)nc, (int)c->d, 1.0f, rows, (int)c->d,
                        buf + (size_t)c0 * c->d, (int)c->d, 0.0f, tile, (int)nc);
            for (uint32_t i = 0; i < nr; i++)
                offer_row(c, own[r0 + i], tile + (size_t)i * nc, mem + c0, 0, nc, c->dedup);
        }
    }
    cm_free(buf);
    cm_free(rows);
    cm_progress_add(c->prog, no);
}

/* want of n indices, ascending, by selection sampling (cm_select). */
static void sample_sorted(uint32_t n, uint32_t want, cm_rng *rng, uint32_t *out)
{
    cm_select sel;
    cm_select_begin(&sel, n, want);
    for (int64_t i, got = 0; (i = cm_select_next(&sel, rng)) >= 0; got++) out[got] = (uint32_t)i;
}

/* Partition membership: each node joins the partitions of its `overlap` best pivots;
 * top[i * overlap + r] is node i's r-th best pivot. */
static chimera_status build_partitions(knn_ctx *c, uint32_t part_size, uint32_t *overlap_io,
                                       uint64_t seed, uint32_t **members_out,
                                       uint32_t **off_out, uint32_t **top_out, uint32_t *P_out)
{
    const uint32_t n = c->n, d = c->d;
    uint32_t overlap = *overlap_io;
    uint32_t P = (uint32_t)(((double)overlap * n + part_size - 1) / part_size);
    if (P < 1) P = 1;
    if (P > n) P = n;
    if (overlap > P) overlap = P;
    *overlap_io = overlap;
    chimera_status st = CHIMERA_ERR_NOMEM;
    uint32_t *piv = cm_malloc(sizeof(uint32_t) * P);
    float *pv = cm_aligned_alloc(64, sizeof(float) * (size_t)P * d);
    uint32_t *top = cm_malloc(sizeof(uint32_t) * (size_t)n * overlap);
    uint32_t *off = cm_calloc((size_t)P + 1, sizeof(uint32_t));
    uint32_t *members = cm_malloc(sizeof(uint32_t) * (size_t)n * overlap);
    float *s = cm_aligned_alloc(64, sizeof(float) * (size_t)TILE_ROWS * P);
    uint32_t *pos = cm_malloc(sizeof(uint32_t) * P);
    if (!piv || !pv || !top || !off || !members || !s || !pos) goto done;
    cm_rng rng;
    cm_rng_seed(&rng, seed, 0x7069766f74ull);
    sample_sorted(n, P, &rng, piv);
    for (uint32_t p = 0; p < P; p++)
        memcpy(pv + (size_t)p * d, c->v + (size_t)piv[p] * d, sizeof(float) * d);
    /* Serial: n * P * d * 2 flop is ~1% of the partition kNN that follows. */
    float best[MAX_OVERLAP];
    for (uint32_t r0 = 0; r0 < n; r0 += TILE_ROWS) {
        uint32_t nr = n - r0 < TILE_ROWS ? n - r0 : TILE_ROWS;
        cm_sgemm_nt((int)nr, (int)P, (int)d, 1.0f, c->v + (size_t)r0 * d, (int)d, pv, (int)d, 0.0f,
                    s, (int)P);
        for (uint32_t i = 0; i < nr; i++) {
            uint32_t *t = top + (size_t)(r0 + i) * overlap, m = 0;
            const float *row = s + (size_t)i * P;
            for (uint32_t p = 0; p < P; p++) {
                if (m == overlap && row[p] <= best[m - 1]) continue;
                uint32_t q = m < overlap ? m++ : overlap - 1;
                while (q > 0 && row[p] > best[q - 1]) {
                    best[q] = best[q - 1];
                    t[q] = t[q - 1];
                    q--;
                }
                best[q] = row[p];
                t[q] = p;
            }
        }
    }
    for (size_t q = 0; q < (size_t)n * overlap; q++) off[top[q] + 1]++;
    for (uint32_t p = 0; p < P; p++) off[p + 1] += off[p];
    memcpy(pos, off, sizeof(uint32_t) * P);
    for (size_t q = 0; q < (size_t)n * overlap; q++)
        members[pos[top[q]]++] = (uint32_t)(q / overlap);
    *members_out = members;
    *off_out = off;
    *top_out = top;
    *P_out = P;
    members = NULL;
    off = NULL;
    top = NULL;
    st = CHIMERA_OK;
done:
    cm_free(piv);
    cm_free(pv);
    cm_free(top);
    cm_free(off);
    cm_free(members);
    cm_free(s);
    cm_free(pos);
    return st;
}

/* Owners of pass r: the nodes whose r-th best pivot is p; each node is an owner exactly
 * once per pass, so a pass writes every kNN row from one task only. order: partitions
 * costliest (owners x members) first, so long tasks do not end up last. */
static chimera_status pass_owners(const uint32_t *top, uint32_t n, uint32_t overlap, uint32_t r,
                                  uint32_t P, const uint32_t *mem_off, uint32_t *owners,
                                  uint32_t *own_off, uint32_t *order)
{
    uint32_t *pos = cm_malloc(sizeof(uint32_t) * P);
    if (!pos) return CHIMERA_ERR_NOMEM;
    memset(own_off, 0, sizeof(uint32_t) * ((size_t)P + 1));
    for (uint32_t i = 0; i < n; i++) own_off[top[(size_t)i * overlap + r] + 1]++;
    for (uint32_t p = 0; p < P; p++) own_off[p + 1] += own_off[p];
    memcpy(pos, own_off, sizeof(uint32_t) * P);
    for (uint32_t i = 0; i < n; i++) owners[pos[top[(size_t)i * overlap + r]]++] = i;
    cm_free(pos);
    for (uint32_t p = 0; p < P; p++) order[p] = p;
    for (uint32_t gap = P / 2; gap > 0; gap /= 2) /* Shell sort: O(P^1.3) */
        for (uint32_t i = gap; i < P; i++) {
            uint32_t v = order[i], j = i;
            uint64_t sv = (uint64_t)(mem_off[v + 1] - mem_off[v]) * (own_off[v + 1] - own_off[v]);
            while (j >= gap) {
                uint32_t u = order[j - gap];
                uint64_t su = (uint64_t)(mem_off[u + 1] - mem_off[u]) * (own_off[u + 1] - own_off[u]);
                if (su > sv || (su == sv && u < v)) break;
                order[j] = u;
                j -= gap;
            }
            order[j] = v;
        }
    return CHIMERA_OK;
}

static void sort_task(void *ctx, int64_t task, int worker)
{
    (void)worker;
    knn_ctx *c = ctx;
    uint32_t i0 = (uint32_t)task * 1024, i1 = i0 + 1024 < c->n ? i0 + 1024 : c->n;
    for (uint32_t i = i0; i < i1; i++) {
        gh_sort(c->ip + (size_t)i * c->kin, c->id + (size_t)i * c->kin, c->cnt[i]);
        for (uint32_t q = c->cnt[i]; q < c->kin; q++) c->id[(size_t)i * c->kin + q] = INVALID;
    }
}

/* One round of neighbour-of-neighbour refinement (the "local join" of NN-descent,
 * restricted to the REFINE_FANOUT best neighbours on both hops): a partition sees
 * only the nodes that joined it, so a node near a partition boundary misses true
 * neighbours across it; its neighbours' lists were computed in other partitions and
 * usually contain them. Reads the old lists, writes new ones, so the result does not
 * depend on the order nodes are processed in. */
#define REFINE_FANOUT 16

typedef struct refine_ctx {
    const knn_ctx *k;
    uint32_t *nid;   /* n x kin, out */
    float *nip;      /* n x kin, out */
    uint32_t *ncnt;  /* n, out */
    uint32_t **stamp; /* per worker, n */
    uint32_t *epoch;  /* per worker */
    graph_dot_fn dot;
    cm_progress *prog;
} refine_ctx;

static void refine_task(void *ctx, int64_t task, int worker)
{
    refine_ctx *c = ctx;
    const knn_ctx *k = c->k;
    const uint32_t kin = k->kin, d = k->d;
    uint32_t *stamp = c->stamp[worker];
    uint32_t i0 = (uint32_t)task * 256, i1 = i0 + 256 < k->n ? i0 + 256 : k->n;
    for (uint32_t i = i0; i < i1; i++) {
        uint32_t ep = ++c->epoch[worker];
        if (ep == 0) { /* wrapped: restart the stamps */
            memset(stamp, 0, sizeof(uint32_t) * k->n);
            ep = c->epoch[worker] = 1;
        }
        float *hip = c->nip + (size_t)i * kin;
        uint32_t *hid = c->nid + (size_t)i * kin, hn = 0;
        const uint32_t *li = k->id + (size_t)i * kin;
        const float *pi = k->ip + (size_t)i * kin;
        stamp[i] = ep;
        for (uint32_t a = 0; a < k->cnt[i]; a++) {
            stamp[li[a]] = ep;
            gh_push(hip, hid, &hn, kin, pi[a], li[a], 0);
        }
        const float *vi = k->v + (size_t)i * d;
        uint32_t fa = k->cnt[i] < REFINE_FANOUT ? k->cnt[i] : REFINE_FANOUT;
        for (uint32_t a = 0; a < fa; a++) {
            const uint32_t *lj = k->id + (size_t)li[a] * kin;
            uint32_t fb = k->cnt[li[a]] < REFINE_FANOUT ? k->cnt[li[a]] : REFINE_FANOUT;
            for (uint32_t b = 0; b < fb; b++) {
                uint32_t l = lj[b];
                if (stamp[l] == ep) continue;
                stamp[l] = ep;
                float sc = c->dot(vi, k->v + (size_t)l * d, d);
                if (hn == kin && sc < hip[0]) continue;
                gh_push(hip, hid, &hn, kin, sc, l, 0);
            }
        }
        gh_sort(hip, hid, hn);
        for (uint32_t q = hn; q < kin; q++) hid[q] = INVALID;
        c->ncnt[i] = hn;
    }
    cm_progress_add(c->prog, i1 - i0);
}

/* ---- pruning ---------------------------------------------------------------------- */

typedef struct prune_ctx {
    const uint32_t *knn;
    const uint32_t *cnt;
    uint32_t n, kin, degree;
    uint32_t *out;      /* n x degree, INVALID-padded */
    uint8_t **rank;     /* per worker, n: 1 + rank in the current node's list, 0 = absent */
    uint32_t **det;     /* per worker, kin */
    cm_progress *prog;
} prune_ctx;

static void prune_task(void *ctx, int64_t task, int worker)
{
    prune_ctx *c = ctx;
    const uint32_t kin = c->kin;
    uint32_t *det = c->det[worker];
    uint8_t *rank = c->rank[worker];
    uint32_t a0 = (uint32_t)task * 256, a1 = a0 + 256 < c->n ? a0 + 256 : c->n;
    for (uint32_t a = a0; a < a1; a++) {
        const uint32_t *L = c->knn + (size_t)a * kin;
        const uint32_t na = c->cnt[a];
        for (uint32_t r = 0; r < na; r++) {
            rank[L[r]] = (uint8_t)(r + 1);
            det[r] = 0;
        }
        for (uint32_t kad = 0; kad + 1 < na; kad++) {
            const uint32_t *LD = c->knn + (size_t)L[kad] * kin;
            const uint32_t nd = c->cnt[L[kad]];
            for (uint32_t q = 0; q < nd; q++) {
                uint32_t r = rank[LD[q]];
                if (r > kad + 1) det[r - 1]++;
            }
        }
        for (uint32_t r = 0; r < na; r++) rank[L[r]] = 0;
        /* Ascending (detour, rank): a stable selection over at most kin entries. */
        uint32_t *o = c->out + (size_t)a * c->degree, m = 0;
        for (uint32_t want = 0; m < c->degree; want++) {
            uint32_t any_left = 0;
            for (uint32_t r = 0; r < na && m < c->degree; r++) {
                if (det[r] == want) o[m++] = L[r];
                else if (det[r] > want) any_left = 1;
            }
            if (!any_left) break;
        }
        for (; m < c->degree; m++) o[m] = INVALID;
    }
    cm_progress_add(c->prog, a1 - a0);
}

/* ---- reachability ----------------------------------------------------------------- */

/* BFS from the entries; seen[i] = 1 for reachable nodes. Returns their number. */
static uint32_t bfs(const graph *g, uint8_t *seen, uint32_t *queue)
{
    memset(seen, 0, g->n);
    uint32_t head = 0, tail = 0;
    for (uint32_t e = 0; e < g->n_entry; e++)
        if (g->entry[e] < g->n && !seen[g->entry[e]]) {
            seen[g->entry[e]] = 1;
            queue[tail++] = g->entry[e];
        }
    while (head < tail) {
        const uint32_t *row = g->adj + (size_t)queue[head++] * g->degree;
        for (uint32_t q = 0; q < g->degree; q++) {
            uint32_t v = row[q];
            if (v < g->n && !seen[v]) {
                seen[v] = 1;
                queue[tail++] = v;
            }
        }
    }
    return tail;
}

static int row_has(const uint32_t *row, uint32_t len, uint32_t v)
{
    for (uint32_t q = 0; q < len; q++)
        if (row[q] == v) return 1;
    return 0;
}

/* Gives every unreachable node an in-edge from a reachable neighbour (see the top
 * comment). knn rows are sorted best first. Returns the number of edges rewired. */
static uint32_t repair(graph *g, const float *v, uint32_t d, const uint32_t *knn,
                       const uint32_t *cnt, uint32_t kin, uint8_t *seen, uint32_t *queue,
                       uint8_t *budget)
{
    uint32_t total = 0;
    const uint32_t cap = g->degree / 4 ? g->degree / 4 : 1;
    memset(budget, 0, g->n);
    for (int round = 0; round < REPAIR_ROUNDS; round++) {
        if (bfs(g, seen, queue) == g->n) break;
        uint32_t added = 0;
        for (uint32_t u = 0; u < g->n; u++) {
            if (seen[u]) continue;
            uint32_t donor = INVALID;
            for (uint32_t r = 0; r < cnt[u] && donor == INVALID; r++) {
                uint32_t w = knn[(size_t)u * kin + r];
                if (seen[w] && budget[w] < cap) donor = w;
            }
            if (donor == INVALID && round >= REPAIR_ROUNDS / 2) {
                /* No reachable kNN neighbour: link from the closest entry point. */
                float best = -INFINITY;
                for (uint32_t e = 0; e < g->n_entry; e++) {
                    uint32_t w = g->entry[e];
                    if (budget[w] >= cap) continue;
                    float s = 0;
                    for (uint32_t t = 0; t < d; t++) s += v[(size_t)u * d + t] * v[(size_t)w * d + t];
                    if (s > best) {
                        best = s;
                        donor = w;
                    }
                }
            }
            if (donor == INVALID) continue;
            uint32_t *row = g->adj + (size_t)donor * g->degree;
            if (!row_has(row, g->degree, u)) {
                row[g->degree - 1 - budget[donor]] = u;
                budget[donor]++;
                added++;
            }
            seen[u] = 1; /* reachable through the new edge (its own out-edges follow next BFS) */
        }
        total += added;
        if (!added && round >= REPAIR_ROUNDS / 2) break;
    }
    return total;
}

/* ---- build ------------------------------------------------------------------------ */

void graph_free(graph *g)
{
    if (!g) return;
    cm_free(g->adj);
    cm_free(g->entry);
    memset(g, 0, sizeof *g);
}

/* The build in stages, each a function named for it: graph_knn (exact or partitioned
 * kNN lists, sorted best first), graph_refine (one neighbour-of-neighbour round, after
 * the partitioned kNN), graph_prune (detour counting and selection), graph_merge
 * (reverse edges merged in, rows padded), graph_repair (reachability). gb_state holds
 * what they pass on; graph_build allocates the output and frees the state. Every stage
 * fails only for want of memory. */
typedef struct gb_state {
    const float *v;
    uint32_t n, d, degree, kin;
    uint64_t seed;
    graph_knn_mode mode;
    const graph_build_opts *o;
    int n_workers;
    float **tiles;  /* per worker, TILE_ROWS * TILE_COLS */
    knn_ctx kc;     /* the kNN lists (id, ip, cnt) */
    uint32_t *pruned; /* n x degree, INVALID-padded */
    cm_progress prog;
} gb_state;

/* Partitioned kNN: partitions, then ROW_PASSES passes over them (see the top comment). */
static chimera_status knn_partitioned(gb_state *b)
{
    const graph_build_opts *o = b->o;
    knn_ctx *kc = &b->kc;
    const uint32_t n = b->n;
    chimera_status st = CHIMERA_ERR_NOMEM;
    uint32_t *members = NULL, *mem_off = NULL, *top = NULL, *owners = NULL, *own_off = NULL,
             *order = NULL, P = 0;
    uint32_t psize = o->partition_size ? o->partition_size : DEFAULT_PART_SIZE;
    if (psize < b->kin + 1) psize = b->kin + 1;
    uint32_t overlap = o->partition_overlap ? o->partition_overlap : DEFAULT_OVERLAP;
    if (overlap > MAX_OVERLAP) overlap = MAX_OVERLAP;
    if (build_partitions(kc, psize, &overlap, b->seed, &members, &mem_off, &top, &P) !=
        CHIMERA_OK)
        goto done;
    uint32_t passes = ROW_PASSES < overlap ? ROW_PASSES : overlap;
    owners = cm_malloc(sizeof(uint32_t) * n);
    own_off = cm_malloc(sizeof(uint32_t) * ((size_t)P + 1));
    order = cm_malloc(sizeof(uint32_t) * P);
    if (!owners || !own_off || !order) goto done;
    kc->members = members;
    kc->mem_off = mem_off;
    kc->owners = owners;
    kc->own_off = own_off;
    kc->order = order;
    cm_progress_begin(&b->prog, o->progress, o->progress_user, "graph knn", (uint64_t)n * passes);
    for (uint32_t r = 0; r < passes; r++) {
        if (pass_owners(top, n, overlap, r, P, mem_off, owners, own_off, order) != CHIMERA_OK)
            goto done;
        kc->dedup = r > 0;
        cm_pool_run(o->pool, P, partition_task, kc);
        if (atomic_load(&kc->failed)) goto done;
    }
    st = CHIMERA_OK;
done:
    kc->members = kc->mem_off = kc->owners = kc->own_off = kc->order = NULL;
    cm_free(members);
    cm_free(mem_off);
    cm_free(top);
    cm_free(owners);
    cm_free(own_off);
    cm_free(order);
    return st;
}

/* 1. kNN lists of kin neighbours, each sorted best first and INVALID-padded. */
static chimera_status graph_knn(gb_state *b)
{
    knn_ctx *kc = &b->kc;
    const uint32_t n = b->n;
    kc->v = b->v;
    kc->n = n;
    kc->d = b->d;
    kc->kin = b->kin;
    kc->tiles = b->tiles;
    kc->prog = &b->prog;
    kc->id = cm_malloc(sizeof(uint32_t) * (size_t)n * b->kin);
    kc->ip = cm_malloc(sizeof(float) * (size_t)n * b->kin);
    kc->cnt = cm_calloc(n, sizeof(uint32_t));
    if (!kc->id || !kc->ip || !kc->cnt) return CHIMERA_ERR_NOMEM;
    for (int w = 0; w < b->n_workers; w++) {
        b->tiles[w] = cm_aligned_alloc(64, sizeof(float) * TILE_ROWS * TILE_COLS);
        if (!b->tiles[w]) return CHIMERA_ERR_NOMEM;
    }
    if (b->mode == GRAPH_KNN_EXACT) {
        cm_progress_begin(&b->prog, b->o->progress, b->o->progress_user, "graph knn", n);
        cm_pool_run(b->o->pool, (n + TILE_ROWS - 1) / TILE_ROWS, exact_task, kc);
    } else {
        CM_TRY(knn_partitioned(b));
    }
    cm_progress_end(&b->prog);
    cm_pool_run(b->o->pool, (n + 1023) / 1024, sort_task, kc);
    return CHIMERA_OK;
}

/* 2. One neighbour-of-neighbour round over the kNN lists; the new lists replace them. */
static chimera_status graph_refine(gb_state *b)
{
    knn_ctx *kc = &b->kc;
    const uint32_t n = b->n, kin = b->kin;
    const int n_workers = b->n_workers;
    refine_ctx rc;
    memset(&rc, 0, sizeof rc);
    rc.k = kc;
    rc.dot = graph_dot_get();
    rc.prog = &b->prog;
    rc.nid = cm_malloc(sizeof(uint32_t) * (size_t)n * kin);
    rc.nip = cm_malloc(sizeof(float) * (size_t)n * kin);
    rc.ncnt = cm_malloc(sizeof(uint32_t) * n);
    rc.stamp = cm_calloc((size_t)n_workers, sizeof(uint32_t *));
    rc.epoch = cm_calloc((size_t)n_workers, sizeof(uint32_t));
    int ok = rc.nid && rc.nip && rc.ncnt && rc.stamp && rc.epoch;
    for (int w = 0; ok && w < n_workers; w++) ok = (rc.stamp[w] = cm_calloc(n, sizeof(uint32_t))) != NULL;
    if (ok) {
        cm_progress_begin(&b->prog, b->o->progress, b->o->progress_user, "graph knn refine", n);
        cm_pool_run(b->o->pool, (n + 255) / 256, refine_task, &rc);
        cm_progress_end(&b->prog);
        cm_free(kc->id);
        cm_free(kc->ip);
        cm_free(kc->cnt);
        kc->id = rc.nid;
        kc->ip = rc.nip;
        kc->cnt = rc.ncnt;
        rc.nid = NULL;
        rc.nip = NULL;
        rc.ncnt = NULL;
    }
    for (int w = 0; rc.stamp && w < n_workers; w++) cm_free(rc.stamp[w]);
    cm_free(rc.stamp);
    cm_free(rc.epoch);
    cm_free(rc.nid);
    cm_free(rc.nip);
    cm_free(rc.ncnt);
    return ok ? CHIMERA_OK : CHIMERA_ERR_NOMEM;
}

/* 3. Detour counting and selection of `degree` edges per node into b->pruned. */
static chimera_status graph_prune(gb_state *b)
{
    const int n_workers = b->n_workers;
    chimera_status st = CHIMERA_ERR_NOMEM;
    prune_ctx pc;
    memset(&pc, 0, sizeof pc);
    pc.knn = b->kc.id;
    pc.cnt = b->kc.cnt;
    pc.n = b->n;
    pc.kin = b->kin;
    pc.degree = b->degree;
    pc.prog = &b->prog;
    pc.rank = cm_calloc((size_t)n_workers, sizeof(uint8_t *));
    pc.det = cm_calloc((size_t)n_workers, sizeof(uint32_t *));
    b->pruned = pc.out = cm_malloc(sizeof(uint32_t) * (size_t)b->n * b->degree);
    if (!pc.rank || !pc.det || !pc.out) goto done;
    for (int w = 0; w < n_workers; w++) {
        pc.rank[w] = cm_calloc(b->n, 1);
        pc.det[w] = cm_malloc(sizeof(uint32_t) * b->kin);
        if (!pc.rank[w] || !pc.det[w]) goto done;
    }
    cm_progress_begin(&b->prog, b->o->progress, b->o->progress_user, "graph prune", b->n);
    cm_pool_run(b->o->pool, (b->n + 255) / 256, prune_task, &pc);
    cm_progress_end(&b->prog);
    st = CHIMERA_OK;
done:
    for (int w = 0; w < n_workers; w++) {
        if (pc.rank) cm_free(pc.rank[w]);
        if (pc.det) cm_free(pc.det[w]);
    }
    cm_free(pc.rank);
    cm_free(pc.det);
    return st;
}

/* 4. Reverse lists, column-major so low-rank (important) edges reverse first; then
 * each row is [first degree/2 pruned] + [reverse not yet present] + [rest of pruned],
 * padded from the kNN list and then with deterministic random nodes. */
static chimera_status graph_merge(gb_state *b, graph *out)
{
    const uint32_t n = b->n, degree = b->degree, kin = b->kin;
    const uint32_t *pruned = b->pruned;
    uint32_t *rev = cm_malloc(sizeof(uint32_t) * (size_t)n * degree);
    uint32_t *rcnt = cm_calloc(n, sizeof(uint32_t));
    if (!rev || !rcnt) {
        cm_free(rev);
        cm_free(rcnt);
        return CHIMERA_ERR_NOMEM;
    }
    for (uint32_t k = 0; k < degree; k++)
        for (uint32_t s = 0; s < n; s++) {
            uint32_t t = pruned[(size_t)s * degree + k];
            if (t != INVALID && rcnt[t] < degree) rev[(size_t)t * degree + rcnt[t]++] = s;
        }
    const uint32_t prot = degree / 2;
    for (uint32_t a = 0; a < n; a++) {
        uint32_t *row = out->adj + (size_t)a * degree, m = 0;
        const uint32_t *pr = pruned + (size_t)a * degree;
        for (uint32_t q = 0; q < prot; q++)
            if (pr[q] != INVALID) row[m++] = pr[q];
        for (uint32_t q = 0; q < rcnt[a] && m < degree; q++) {
            uint32_t v = rev[(size_t)a * degree + q];
            if (v != a && !row_has(row, m, v)) row[m++] = v;
        }
        for (uint32_t q = prot; q < degree && m < degree; q++)
            if (pr[q] != INVALID && !row_has(row, m, pr[q])) row[m++] = pr[q];
        for (uint32_t q = 0; q < b->kc.cnt[a] && m < degree; q++) {
            uint32_t v = b->kc.id[(size_t)a * kin + q];
            if (!row_has(row, m, v)) row[m++] = v;
        }
        if (m < degree) {
            cm_rng rng;
            cm_rng_seed(&rng, b->seed, 0x706164ull + a);
            /* degree <= n - 1, so a free node exists; a short scan from a random start
             * finds one when rejection sampling would be slow (n close to degree). */
            while (m < degree) {
                uint32_t v = (uint32_t)cm_rng_below(&rng, n);
                for (uint32_t step = 0; step < n && (v == a || row_has(row, m, v)); step++)
                    v = v + 1 == n ? 0 : v + 1;
                row[m++] = v;
            }
        }
    }
    cm_free(rev);
    cm_free(rcnt);
    return CHIMERA_OK;
}

/* 5. Reachability from the entry points (repair() above). */
static chimera_status graph_repair(gb_state *b, graph *out)
{
    uint32_t *queue = cm_malloc(sizeof(uint32_t) * b->n);
    uint8_t *seen = cm_malloc(b->n), *budget = cm_malloc(b->n);
    chimera_status st = CHIMERA_ERR_NOMEM;
    if (queue && seen && budget) {
        out->n_repair_edges =
            repair(out, b->v, b->d, b->kc.id, b->kc.cnt, b->kin, seen, queue, budget);
        st = CHIMERA_OK;
    }
    cm_free(queue);
    cm_free(seen);
    cm_free(budget);
    return st;
}

chimera_status graph_build(const float *vecs, uint32_t n, uint32_t d,
                           const graph_build_opts *opts, graph *out, chimera_error *err)
{
    memset(out, 0, sizeof *out);
    graph_build_opts o;
    if (opts)
        o = *opts;
    else
        memset(&o, 0, sizeof o);
    if (!vecs || n == 0 || d == 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "graph: need n >= 1 vectors of d >= 1");
    uint32_t degree = o.degree ? o.degree : DEFAULT_DEGREE;
    uint32_t kin = o.intermediate_degree ? o.intermediate_degree : 2 * degree;
    if (kin < degree)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "graph: intermediate degree %u < degree %u", kin, degree);
    if (kin > 255)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "graph: intermediate degree %u > 255", kin);
    if (degree > n - 1) degree = n - 1;
    if (kin > n - 1) kin = n - 1;
    const uint32_t n_entry = o.n_entry ? (o.n_entry < n ? o.n_entry : n) : (DEFAULT_N_ENTRY < n ? DEFAULT_N_ENTRY : n);
    gb_state b = {.v = vecs, .n = n, .d = d, .degree = degree, .kin = kin,
                  .seed = o.seed ? o.seed : DEFAULT_SEED, .mode = o.knn, .o = &o,
                  .n_workers = cm_pool_size(o.pool)};
    if (b.mode == GRAPH_KNN_AUTO) b.mode = n <= EXACT_MAX_N ? GRAPH_KNN_EXACT : GRAPH_KNN_PARTITION;

    chimera_status st = CHIMERA_ERR_NOMEM;
    b.tiles = cm_calloc((size_t)b.n_workers, sizeof(float *));
    out->n = n;
    out->degree = degree;
    out->n_entry = n_entry;
    out->adj = cm_malloc(sizeof(uint32_t) * ((size_t)n * degree + 1));
    out->entry = cm_malloc(sizeof(uint32_t) * n_entry);
    if (!b.tiles || !out->adj || !out->entry) goto done;

    /* Entry points: distinct random nodes. */
    {
        cm_rng rng;
        cm_rng_seed(&rng, b.seed, 0x656e747279ull);
        sample_sorted(n, n_entry, &rng, out->entry);
    }
    if (degree == 0) { /* n == 1 */
        st = CHIMERA_OK;
        goto done;
    }
    double t0 = cm_now();
    if ((st = graph_knn(&b)) != CHIMERA_OK) goto done;
    if (b.mode == GRAPH_KNN_PARTITION && (st = graph_refine(&b)) != CHIMERA_OK) goto done;
    cm_free(b.kc.ip);
    b.kc.ip = NULL;
    out->knn_seconds = cm_now() - t0;
    t0 = cm_now();
    if ((st = graph_prune(&b)) != CHIMERA_OK) goto done;
    if ((st = graph_merge(&b, out)) != CHIMERA_OK) goto done;
    cm_free(b.pruned);
    b.pruned = NULL;
    if ((st = graph_repair(&b, out)) != CHIMERA_OK) goto done;
    out->prune_seconds = cm_now() - t0;
done:
    if (st != CHIMERA_OK) {
        cm_fail(err, st, "graph: out of memory building over n = %u (degree %u, kNN %u)", n,
                degree, kin);
        graph_free(out);
    }
    if (b.tiles)
        for (int w = 0; w < b.n_workers; w++) cm_free(b.tiles[w]);
    cm_free(b.tiles);
    cm_free(b.pruned);
    cm_free(b.kc.id);
    cm_free(b.kc.ip);
    cm_free(b.kc.cnt);
    return st;
}

/* ---- checker ---------------------------------------------------------------------- */

chimera_status graph_check(const graph *g, graph_check_stats *st, chimera_error *err)
{
    if (st) st->n_reachable = 0;
    if (!g || g->n == 0 || !g->adj || !g->entry)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "graph: empty or missing arrays");
    if (g->degree > g->n - 1)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "graph: degree %u exceeds n - 1 = %u", g->degree,
                       g->n - 1);
    if (g->n_entry == 0 || g->n_entry > g->n)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "graph: %u entry points for %u nodes",
                       g->n_entry, g->n);
    for (uint32_t a = 0; a < g->n; a++) {
        const uint32_t *row = g->adj + (size_t)a * g->degree;
        for (uint32_t q = 0; q < g->degree; q++) {
            if (row[q] >= g->n)
                return cm_fail(err, CHIMERA_ERR_CORRUPT,
                               "graph: node %u edge %u points to %u >= n = %u", a, q, row[q], g->n);
            if (row[q] == a)
                return cm_fail(err, CHIMERA_ERR_CORRUPT, "graph: node %u has a self loop (edge %u)",
                               a, q);
            if (row_has(row, q, row[q]))
                return cm_fail(err, CHIMERA_ERR_CORRUPT, "graph: node %u lists %u twice", a,
                               row[q]);
        }
    }
    for (uint32_t e = 0; e < g->n_entry; e++) {
        if (g->entry[e] >= g->n)
            return cm_fail(err, CHIMERA_ERR_CORRUPT, "graph: entry %u is node %u >= n", e,
                           g->entry[e]);
        if (row_has(g->entry, e, g->entry[e]))
            return cm_fail(err, CHIMERA_ERR_CORRUPT, "graph: entry node %u listed twice",
                           g->entry[e]);
    }
    uint8_t *seen = cm_malloc(g->n);
    uint32_t *queue = cm_malloc(sizeof(uint32_t) * g->n);
    if (!seen || !queue) {
        cm_free(seen);
        cm_free(queue);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "graph check: out of memory");
    }
    uint32_t reach = bfs(g, seen, queue);
    uint32_t first = 0;
    while (first < g->n && seen[first]) first++;
    cm_free(seen);
    cm_free(queue);
    if (st) st->n_reachable = reach;
    if (reach != g->n)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "graph: %u of %u nodes unreachable from the entry points (first: %u)",
                       g->n - reach, g->n, first);
    return CHIMERA_OK;
}
