/* Nearest-centroid assignment (inner product): exact blocked sgemm and the two-level
 * (coarse, then fine) search over the structure hierarchical k-means produces.
 *
 * Follows the IVF assignment of Faiss and cuVS (docs/algorithms.md §4.4): distances come
 * from GEMM, never from per-pair dot products, because BLAS is 10-50x faster per flop
 * than scalar loops. Every sgemm call is single-threaded (core/blas.h) and the pool
 * parallelises over row blocks, so results do not depend on the thread count.
 *
 * Hierarchical search, per block of rows (hier_block_rows): one sgemm against all coarse
 * centroids, a top-p selection per row, then the (row, coarse cluster) pairs are
 * bucketed by cluster (counting sort) so that each cluster's children -- contiguous
 * rows of the fine centroid matrix -- meet all rows that probe it in one gathered
 * sgemm. Without the bucketing each pair would be a matrix-vector product, which is
 * memory-bound and ~10x slower.
 *
 * Departure: cuVS assigns with the fine centroids of the single best mesocluster only
 * during its fine-tune; probing p > 1 coarse clusters costs p times more but recovers
 * most rows whose nearest fine centroid sits just across a coarse boundary (fine
 * clusters are small, so boundaries are everywhere). ivf_assign_recall measures it. */
#include <math.h>
#include <string.h>

#include "cluster/assign.h"
#include "core/blas.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/alloc.h"

/* Rows per hierarchical block: enough that each probed coarse cluster meets about
 * HIER_ROWS_PER_BUCKET of them (rows * p / M on average), because each of its sgemms
 * packs the cluster's children again and a GEMM of a few dozen rows runs at a fraction
 * of the kernel's speed (at M = 315, p = 8, blocks of 1,024 rows gave 26 rows per
 * bucket and ~10 GFLOP/s). Bounded below by HIER_ROWS_MIN and above by the coarse
 * score matrix's budget (rows x M floats per worker). */
#define HIER_ROWS_PER_BUCKET 192
#define HIER_ROWS_MIN 1024
#define HIER_COARSE_BYTES ((size_t)32 << 20)
#define MAX_PROBE_COARSE 64

static inline int better(float a, uint32_t ia, float b, uint32_t ib)
{
    return a > b || (a == b && ia < ib);
}

void ivf_argmax_block(const float *x, int n, size_t ldx, const float *c, uint32_t k,
                      uint32_t d, uint32_t id_base, uint32_t *best_id, float *best_ip,
                      float *scratch)
{
    for (uint32_t j0 = 0; j0 < k; j0 += IVF_TILE_COLS) {
        uint32_t kc = k - j0 < IVF_TILE_COLS ? k - j0 : IVF_TILE_COLS;
        cm_sgemm_nt(n, (int)kc, (int)d, 1.0f, x, (int)ldx, c + (size_t)j0 * d, (int)d, 0.0f,
                    scratch, (int)kc);
        for (int i = 0; i < n; i++) {
            const float *s = scratch + (size_t)i * kc;
            float b = -INFINITY;
            uint32_t bj = 0;
            for (uint32_t j = 0; j < kc; j++)
                if (s[j] > b) {
                    b = s[j];
                    bj = j;
                }
            uint32_t id = id_base + j0 + bj;
            if (better(b, id, best_ip[i], best_id[i])) {
                best_ip[i] = b;
                best_id[i] = id;
            }
        }
    }
}

typedef struct worker_scratch {
    float *tile;       /* IVF_TILE_ROWS * IVF_TILE_COLS */
    float *coarse_ip;  /* block_rows * n_coarse */
    uint32_t *probe;   /* block_rows * p: coarse ids per row */
    uint32_t *cnt;     /* n_coarse + 1 */
    uint32_t *pair;    /* block_rows * p: rows bucketed by coarse id */
    float *gather;     /* IVF_TILE_ROWS * d */
    uint32_t *pid;     /* IVF_TILE_ROWS */
    float *pip;        /* IVF_TILE_ROWS */
    float *row_ip;     /* block_rows: the block's best inner products when the caller
                          wants none */
} worker_scratch;

struct ivf_assigner {
    const float *c, *coarse;
    const uint32_t *child_off;
    uint32_t k, d, n_coarse, p;
    uint32_t block_rows;       /* rows per hierarchical block (hier_block_rows) */
    cm_pool *pool;
    int n_workers;
    worker_scratch *ws;
};

void ivf_assigner_free(ivf_assigner *a)
{
    if (!a) return;
    if (a->ws)
        for (int w = 0; w < a->n_workers; w++) {
            worker_scratch *s = &a->ws[w];
            cm_free(s->tile);
            cm_free(s->coarse_ip);
            cm_free(s->probe);
            cm_free(s->cnt);
            cm_free(s->pair);
            cm_free(s->gather);
            cm_free(s->pid);
            cm_free(s->pip);
            cm_free(s->row_ip);
        }
    cm_free(a->ws);
    cm_free(a);
}

static uint32_t hier_block_rows(uint32_t M, uint32_t p)
{
    uint64_t rows = ((uint64_t)HIER_ROWS_PER_BUCKET * M + p - 1) / p;
    uint64_t cap = HIER_COARSE_BYTES / (sizeof(float) * (uint64_t)M);
    if (rows > cap) rows = cap;
    if (rows < HIER_ROWS_MIN) rows = HIER_ROWS_MIN;
    return (uint32_t)((rows + 255) / 256 * 256);
}

chimera_status ivf_assigner_new(const float *centroids, uint32_t k, uint32_t d,
                                const float *coarse, uint32_t n_coarse,
                                const uint32_t *child_off, const ivf_assign_opts *opts,
                                ivf_assigner **out, chimera_error *err)
{
    *out = NULL;
    if (!centroids || k == 0 || d == 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "assigner: need k >= 1 centroids of d >= 1");
    if (coarse) {
        if (n_coarse == 0 || !child_off || child_off[0] != 0 || child_off[n_coarse] != k)
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                           "assigner: child_off must run from 0 to k = %u", k);
        for (uint32_t m = 0; m < n_coarse; m++)
            if (child_off[m] > child_off[m + 1])
                return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                               "assigner: child_off decreases at %u", m);
    }
    ivf_assigner *a = cm_malloc(sizeof *a);
    if (!a) return cm_fail(err, CHIMERA_ERR_NOMEM, "assigner: out of memory");
    memset(a, 0, sizeof *a);
    a->c = centroids;
    a->k = k;
    a->d = d;
    a->coarse = coarse;
    a->n_coarse = coarse ? n_coarse : 0;
    a->child_off = child_off;
    a->pool = opts ? opts->pool : NULL;
    a->p = opts && opts->n_probe_coarse ? opts->n_probe_coarse : 8;
    if (a->p > MAX_PROBE_COARSE) a->p = MAX_PROBE_COARSE;
    if (a->n_coarse && a->p > a->n_coarse) a->p = a->n_coarse;
    a->block_rows = a->n_coarse ? hier_block_rows(a->n_coarse, a->p) : 0;
    a->n_workers = cm_pool_size(a->pool);
    a->ws = cm_malloc(sizeof *a->ws * (size_t)a->n_workers);
    if (!a->ws) goto nomem;
    memset(a->ws, 0, sizeof *a->ws * (size_t)a->n_workers);
    for (int w = 0; w < a->n_workers; w++) {
        worker_scratch *s = &a->ws[w];
        s->tile = cm_aligned_alloc(64, sizeof(float) * IVF_TILE_ROWS * IVF_TILE_COLS);
        s->gather = cm_aligned_alloc(64, sizeof(float) * IVF_TILE_ROWS * d);
        s->pid = cm_malloc(sizeof(uint32_t) * IVF_TILE_ROWS);
        s->pip = cm_malloc(sizeof(float) * IVF_TILE_ROWS);
        if (!s->tile || !s->gather || !s->pid || !s->pip) goto nomem;
        if (a->n_coarse) {
            size_t br = a->block_rows;
            s->coarse_ip = cm_aligned_alloc(64, sizeof(float) * br * a->n_coarse);
            s->probe = cm_malloc(sizeof(uint32_t) * br * a->p);
            s->pair = cm_malloc(sizeof(uint32_t) * br * a->p);
            s->row_ip = cm_malloc(sizeof(float) * br);
            s->cnt = cm_malloc(sizeof(uint32_t) * (a->n_coarse + 1));
            if (!s->coarse_ip || !s->probe || !s->pair || !s->cnt || !s->row_ip) goto nomem;
        }
    }
    *out = a;
    return CHIMERA_OK;
nomem:
    ivf_assigner_free(a);
    return cm_fail(err, CHIMERA_ERR_NOMEM, "assigner: out of memory for scratch");
}

/* ---- exact ------------------------------------------------------------------------ */

typedef struct job {
    ivf_assigner *a;
    const float *x;
    int64_t n;
    size_t ldx;
    uint32_t *ids;
    float *ips;
    int64_t rows_per_task;
} job;

static void exact_rows(ivf_assigner *a, worker_scratch *s, const float *x, int64_t n,
                       size_t ldx, uint32_t *ids, float *ips)
{
    for (int64_t r0 = 0; r0 < n; r0 += IVF_TILE_ROWS) {
        int nr = (int)(n - r0 < IVF_TILE_ROWS ? n - r0 : IVF_TILE_ROWS);
        for (int i = 0; i < nr; i++) {
            s->pid[i] = 0;
            s->pip[i] = -INFINITY;
        }
        ivf_argmax_block(x + (size_t)r0 * ldx, nr, ldx, a->c, a->k, a->d, 0, s->pid, s->pip,
                         s->tile);
        for (int i = 0; i < nr; i++) {
            ids[r0 + i] = s->pid[i];
            if (ips) ips[r0 + i] = s->pip[i];
        }
    }
}

static void exact_task(void *ctx, int64_t task, int worker)
{
    job *j = ctx;
    int64_t r0 = task * j->rows_per_task;
    int64_t nr = j->n - r0 < j->rows_per_task ? j->n - r0 : j->rows_per_task;
    exact_rows(j->a, &j->a->ws[worker], j->x + (size_t)r0 * j->ldx, nr, j->ldx, j->ids + r0,
               j->ips ? j->ips + r0 : NULL);
}

/* ---- hierarchical ----------------------------------------------------------------- */

/* One block of at most a->block_rows rows. */
static void hier_rows(ivf_assigner *a, worker_scratch *s, const float *x, int n, size_t ldx,
                      uint32_t *ids, float *ips)
{
    const uint32_t M = a->n_coarse, p = a->p, d = a->d;
    cm_sgemm_nt(n, (int)M, (int)d, 1.0f, x, (int)ldx, a->coarse, (int)d, 0.0f, s->coarse_ip,
                (int)M);
    /* Top-p coarse ids per row by insertion into a sorted run of p (p is small). */
    float top_ip[MAX_PROBE_COARSE];
    for (int i = 0; i < n; i++) {
        const float *row = s->coarse_ip + (size_t)i * M;
        uint32_t *top = s->probe + (size_t)i * p;
        uint32_t cnt = 0;
        for (uint32_t m = 0; m < M; m++) {
            float v = row[m];
            if (cnt == p && v <= top_ip[p - 1]) continue;
            uint32_t pos = cnt < p ? cnt++ : p - 1;
            while (pos > 0 && v > top_ip[pos - 1]) {
                top_ip[pos] = top_ip[pos - 1];
                top[pos] = top[pos - 1];
                pos--;
            }
            top_ip[pos] = v;
            top[pos] = m;
        }
        ids[i] = UINT32_MAX;
        ips[i] = -INFINITY;
    }
    /* Bucket the (row, coarse) pairs by coarse id. */
    memset(s->cnt, 0, sizeof(uint32_t) * (M + 1));
    for (size_t q = 0; q < (size_t)n * p; q++) s->cnt[s->probe[q] + 1]++;
    for (uint32_t m = 0; m < M; m++) s->cnt[m + 1] += s->cnt[m];
    for (size_t q = 0; q < (size_t)n * p; q++)
        s->pair[s->cnt[s->probe[q]]++] = (uint32_t)(q / p);
    /* cnt[m] is now the end of bucket m, i.e. the start of bucket m + 1. */
    uint32_t start = 0;
    for (uint32_t m = 0; m < M; m++) {
        uint32_t end = s->cnt[m];
        uint32_t c0 = a->child_off[m], nc = a->child_off[m + 1] - c0;
        for (uint32_t b0 = start; nc && b0 < end; b0 += IVF_TILE_ROWS) {
            int nb = (int)(end - b0 < IVF_TILE_ROWS ? end - b0 : IVF_TILE_ROWS);
            for (int i = 0; i < nb; i++) {
                memcpy(s->gather + (size_t)i * d, x + (size_t)s->pair[b0 + i] * ldx,
                       sizeof(float) * d);
                s->pid[i] = 0;
                s->pip[i] = -INFINITY;
            }
            ivf_argmax_block(s->gather, nb, d, a->c + (size_t)c0 * d, nc, d, c0, s->pid, s->pip,
                             s->tile);
            for (int i = 0; i < nb; i++) {
                uint32_t r = s->pair[b0 + i];
                if (better(s->pip[i], s->pid[i], ips[r], ids[r])) {
                    ips[r] = s->pip[i];
                    ids[r] = s->pid[i];
                }
            }
        }
        start = end;
    }
    /* A row whose probed coarse clusters all lack children (possible only when k-means
     * left a coarse cluster childless) falls back to the exact search. */
    for (int i = 0; i < n; i++)
        if (ids[i] == UINT32_MAX) {
            s->pid[0] = 0;
            s->pip[0] = -INFINITY;
            ivf_argmax_block(x + (size_t)i * ldx, 1, ldx, a->c, a->k, d, 0, s->pid, s->pip,
                             s->tile);
            ids[i] = s->pid[0];
            ips[i] = s->pip[0];
        }
}

static void hier_task(void *ctx, int64_t task, int worker)
{
    job *j = ctx;
    worker_scratch *s = &j->a->ws[worker];
    int64_t r0 = task * j->rows_per_task;
    int nb = (int)(j->n - r0 < j->rows_per_task ? j->n - r0 : j->rows_per_task);
    hier_rows(j->a, s, j->x + (size_t)r0 * j->ldx, nb, j->ldx, j->ids + r0,
              j->ips ? j->ips + r0 : s->row_ip);
}

static void run(ivf_assigner *a, const float *x, int64_t n, size_t ldx, uint32_t *ids,
                float *ips, int exact)
{
    if (n <= 0) return;
    int hier = !exact && a->n_coarse;
    int64_t rows = hier ? a->block_rows : IVF_TILE_ROWS * 4;
    int64_t n_tasks = (n + rows - 1) / rows;
    /* Equal tasks: n = 1.2 blocks would otherwise leave one worker a fifth of a block. */
    if (hier) rows = (n + n_tasks - 1) / n_tasks;
    job j = {a, x, n, ldx, ids, ips, rows};
    cm_pool_run(a->pool, n_tasks, hier ? hier_task : exact_task, &j);
}

void ivf_assign(ivf_assigner *a, const float *x, int64_t n, size_t ldx, uint32_t *ids,
                float *ips)
{
    run(a, x, n, ldx, ids, ips, 0);
}

void ivf_assign_exact(ivf_assigner *a, const float *x, int64_t n, size_t ldx, uint32_t *ids,
                      float *ips)
{
    run(a, x, n, ldx, ids, ips, 1);
}

double ivf_assign_recall(ivf_assigner *a, const float *x, int64_t n, size_t ldx,
                         uint32_t n_sample, uint64_t seed)
{
    if (n <= 0) return 1.0;
    int64_t ns = n <= (int64_t)n_sample || n_sample == 0 ? n : (int64_t)n_sample;
    float *rows = cm_aligned_alloc(64, sizeof(float) * (size_t)ns * a->d);
    uint32_t *id1 = cm_malloc(sizeof(uint32_t) * (size_t)ns);
    uint32_t *id2 = cm_malloc(sizeof(uint32_t) * (size_t)ns);
    float *ip1 = cm_malloc(sizeof(float) * (size_t)ns);
    float *ip2 = cm_malloc(sizeof(float) * (size_t)ns);
    double result = -1.0;
    if (!rows || !id1 || !id2 || !ip1 || !ip2) goto done;
    cm_rng rng;
    cm_rng_seed(&rng, seed, 0x61737369676eull);
    for (int64_t i = 0; i < ns; i++) {
        /* Sampled with replacement: an estimate needs no distinctness, and this needs no
         * n-sized permutation. */
        int64_t r = ns == n ? i : (int64_t)cm_rng_below(&rng, (uint64_t)n);
        memcpy(rows + (size_t)i * a->d, x + (size_t)r * ldx, sizeof(float) * a->d);
    }
    ivf_assign(a, rows, ns, a->d, id1, ip1);
    ivf_assign_exact(a, rows, ns, a->d, id2, ip2);
    int64_t hit = 0;
    for (int64_t i = 0; i < ns; i++) hit += id1[i] == id2[i] || ip1[i] >= ip2[i] - 1e-6f;
    result = (double)hit / (double)ns;
done:
    cm_free(rows);
    cm_free(id1);
    cm_free(id2);
    cm_free(ip1);
    cm_free(ip2);
    return result;
}
