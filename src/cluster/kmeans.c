/* Spherical k-means (flat and hierarchical) for fine-grained IVF over unit vectors.
 *
 * Follows Faiss's Clustering (algorithms.md §4.1) for the flat loop -- training sample capped
 * at max_points_per_centroid * k, random or k-means++ seeding, Lloyd iterations with
 * GEMM assignment, spherical update, empty-cluster splitting -- and cuVS's balanced
 * hierarchical scheme (algorithms.md §4.2) for large k: sqrt(k) coarse clusters, fine
 * clusters shared out in proportion to coarse sizes and trained per coarse cluster,
 * then a few fine-tune iterations over the whole sample.
 *
 * Departures, and why:
 * - Empty-cluster split perturbs only the new copy (Faiss perturbs both copies by
 *   1 +- 1/1024). Leaving the donor centroid untouched means every point keeps the
 *   centroid it had, so the assignment objective is non-increasing over iterations --
 *   a property the tests check -- and the split still divides the donor's members
 *   along the perturbation direction.
 * - The donor is drawn by picking a random training point and taking its cluster
 *   (probability n_j / n, retried while n_j < 2) instead of Faiss's sweep with
 *   probability (n_j - 1)/(n - k), which costs O(k) per empty cluster and is too slow
 *   at k = 10^6.
 * - The fine-tune assigns with the two-level search (top n_probe_coarse coarse
 *   clusters, then their children) rather than cuVS's exact full assignment: exact
 *   costs n*k*d*2 flop per iteration (3.4e13 at 2M x 65536 x 128, minutes on two
 *   cores) while the two-level search costs n*(M + p*k/M)*d*2, ~50x less.
 * - No cuVS "balancing" pull of small clusters towards big ones: fine clusters of
 *   a few dozen points are what the IVF wants, and the split repair already removes
 *   empty ones. XXX: very small clusters are left as they are.
 * - Per-coarse-cluster training runs one cluster per pool task with single-threaded
 *   sgemm inside (hundreds of independent problems parallelise better than one
 *   problem's row blocks); the coarse level and the fine-tune parallelise over rows.
 * Determinism: every random draw comes from (seed, stream) streams that do not depend
 * on the thread schedule, and assignment ties go to the smaller id. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cluster/assign.h"
#include "cluster/kmeans.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/rng.h"
#include "core/alloc.h"

#define DEFAULT_ITER 10
#define DEFAULT_PPC 64      /* algorithms.md §4.3: 32-256 samples per centroid */
#define DEFAULT_SEED 1234
#define DEFAULT_FINETUNE 2  /* cuVS: max(n_iters / 10, 2) */
#define DEFAULT_PROBE 4
#define COARSE_PPC 256      /* coarse level trains on at most 256 points per cluster */
#define HIER_MIN_K 4096     /* from here on the result keeps its coarse level (kmeans.h) */
/* Flat Lloyd costs n_train x k x d multiply-adds an iteration, and k-means at ~100 tokens
 * a cluster samples n_train ~ 64 k: at d = 32 and k = 2,304 that was 2.9 s of a 5.8 s
 * build. Past this budget (for all iterations) the hierarchical scheme trains instead,
 * at a tenth of the cost, with the same search recall at fixed settings (bench/RESULTS.md
 * 5.32); below HIER_MIN_K it still returns a flat codebook (the coarse level dropped), so
 * assignment stays exact there. */
#define FLAT_MAX_MACS 2e10
#define SPLIT_EPS (1.0f / 1024.0f)
#define PLUSPLUS_MAX_WORK ((double)(1u << 30)) /* k*n*d multiply-adds, ~0.5 s scalar */
#define EXACT_ROWS_PER_TASK (IVF_TILE_ROWS * 4)

/* ---- small helpers ---------------------------------------------------------------- */

static void normalize(float *v, uint32_t d)
{
    double s = 0;
    for (uint32_t t = 0; t < d; t++) s += (double)v[t] * v[t];
    if (s <= 0) return;
    float inv = (float)(1.0 / sqrt(s));
    for (uint32_t t = 0; t < d; t++) v[t] *= inv;
}

static float dot(const float *a, const float *b, uint32_t d)
{
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    uint32_t t = 0;
    for (; t + 4 <= d; t += 4) {
        s0 += a[t] * b[t];
        s1 += a[t + 1] * b[t + 1];
        s2 += a[t + 2] * b[t + 2];
        s3 += a[t + 3] * b[t + 3];
    }
    for (; t < d; t++) s0 += a[t] * b[t];
    return (s0 + s1) + (s2 + s3);
}

/* Copies `want` rows of x, chosen by selection sampling (cm_select) from the stream
 * (seed, stream), in row order, to out[want x d] (contiguous). */
static void sample_rows(const float *x, int64_t n, size_t ldx, uint32_t d, int64_t want,
                        uint64_t seed, uint64_t stream, float *out)
{
    cm_rng rng;
    cm_rng_seed(&rng, seed, stream);
    cm_select sel;
    cm_select_begin(&sel, n, want);
    int64_t got = 0;
    for (int64_t i; (i = cm_select_next(&sel, &rng)) >= 0; got++)
        memcpy(out + (size_t)got * d, x + (size_t)i * ldx, sizeof(float) * d);
}

/* ---- flat Lloyd ------------------------------------------------------------------- */

typedef struct flat_run {
    const float *x;
    int64_t n;
    size_t ldx;
    uint32_t d, k;
    float *cent;        /* k x d: out */
    uint32_t *assign;   /* n */
    float *ip;          /* n */
    float **tiles;      /* per worker */
    cm_pool *pool;      /* NULL: serial (cm_pool_run runs the tasks inline) */
    cm_progress *prog;  /* may be NULL */
    const uint32_t *parent; /* k: coarse parent of each centroid, for sibling splits */
    cm_watch *watch;    /* may be NULL; stopped: the iterations end early */
} flat_run;

static void assign_task(void *ctx, int64_t task, int worker)
{
    flat_run *f = ctx;
    if (cm_watch_flag(f->watch)) return; /* cancelled: the iteration is dropped */
    int64_t r0 = task * EXACT_ROWS_PER_TASK;
    int64_t r1 = r0 + EXACT_ROWS_PER_TASK < f->n ? r0 + EXACT_ROWS_PER_TASK : f->n;
    for (int64_t b = r0; b < r1; b += IVF_TILE_ROWS) {
        int nb = (int)(r1 - b < IVF_TILE_ROWS ? r1 - b : IVF_TILE_ROWS);
        for (int i = 0; i < nb; i++) {
            f->assign[b + i] = 0;
            f->ip[b + i] = -INFINITY;
        }
        ivf_argmax_block(f->x + (size_t)b * f->ldx, nb, f->ldx, f->cent, f->k, f->d, 0,
                         f->assign + b, f->ip + b, f->tiles[worker]);
    }
    cm_progress_add(f->prog, (uint64_t)(r1 - r0));
}

static void assign_exact(flat_run *f)
{
    int64_t n_tasks = (f->n + EXACT_ROWS_PER_TASK - 1) / EXACT_ROWS_PER_TASK;
    cm_pool_run(f->pool, n_tasks, assign_task, f);
}

static double objective(const float *ip, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += 1.0 - (double)ip[i];
    return n ? s / (double)n : 0.0;
}

/* Centroid update from the current assignment: cent = normalize(sum of members), then
 * empty clusters are split off random donors. sums: k x d scratch, counts: k.
 * Returns the number of empty clusters repaired. */
static uint32_t update(flat_run *f, float *sums, int64_t *counts, cm_rng *rng)
{
    const uint32_t d = f->d, k = f->k;
    memset(sums, 0, sizeof(float) * (size_t)k * d);
    memset(counts, 0, sizeof(int64_t) * k);
    for (int64_t i = 0; i < f->n; i++) {
        uint32_t c = f->assign[i];
        const float *xi = f->x + (size_t)i * f->ldx;
        float *s = sums + (size_t)c * d;
        for (uint32_t t = 0; t < d; t++) s[t] += xi[t];
        counts[c]++;
    }
    for (uint32_t c = 0; c < k; c++) {
        if (!counts[c]) continue;
        float *s = sums + (size_t)c * d;
        double nn = 0;
        for (uint32_t t = 0; t < d; t++) nn += (double)s[t] * s[t];
        /* Members that cancel out (antipodal points) leave the old centroid. */
        if (nn > 1e-30) {
            normalize(s, d);
            memcpy(f->cent + (size_t)c * d, s, sizeof(float) * d);
        }
    }
    uint32_t repaired = 0;
    for (uint32_t c = 0; c < k; c++) {
        if (counts[c]) continue;
        uint32_t donor = UINT32_MAX;
        /* Prefer a donor with the same coarse parent, so the new centroid is found by the
         * two-level assignment; fall back to any donor. */
        for (int attempt = 0; attempt < 128 && donor == UINT32_MAX; attempt++) {
            uint32_t j = f->assign[cm_rng_below(rng, (uint64_t)f->n)];
            if (counts[j] < 2) continue;
            if (f->parent && attempt < 64 && f->parent[j] != f->parent[c]) continue;
            donor = j;
        }
        if (donor == UINT32_MAX) continue; /* every cluster is a singleton: nothing to split */
        float *dst = f->cent + (size_t)c * d;
        const float *src = f->cent + (size_t)donor * d;
        for (uint32_t t = 0; t < d; t++) dst[t] = src[t] * (t % 2 ? 1 - SPLIT_EPS : 1 + SPLIT_EPS);
        normalize(dst, d);
        counts[c] = counts[donor] / 2;
        counts[donor] -= counts[c];
        repaired++;
    }
    return repaired;
}

/* Seeds f->cent from the rows of f->x. */
static void seed_centroids(flat_run *f, ivf_kmeans_init init, cm_rng *rng, int64_t *idx_scratch,
                           float *dist_scratch)
{
    const uint32_t d = f->d, k = f->k;
    if (init == KMEANS_INIT_PLUSPLUS) {
        /* D(x) = 1 - max <x, c> is half the squared L2 distance between unit vectors, so
         * sampling in proportion to D is k-means++'s D^2 weighting. */
        int64_t first = (int64_t)cm_rng_below(rng, (uint64_t)f->n);
        memcpy(f->cent, f->x + (size_t)first * f->ldx, sizeof(float) * d);
        normalize(f->cent, d);
        double total = 0;
        for (int64_t i = 0; i < f->n; i++) {
            float v = 1.0f - dot(f->x + (size_t)i * f->ldx, f->cent, d);
            dist_scratch[i] = v > 0 ? v : 0;
            total += dist_scratch[i];
        }
        for (uint32_t c = 1; c < k; c++) {
            int64_t pick = (int64_t)cm_rng_below(rng, (uint64_t)f->n);
            if (total > 0) {
                double r = cm_rng_uniform(rng) * total, acc = 0;
                for (int64_t i = 0; i < f->n; i++) {
                    acc += dist_scratch[i];
                    if (acc > r) {
                        pick = i;
                        break;
                    }
                }
            }
            float *cc = f->cent + (size_t)c * d;
            memcpy(cc, f->x + (size_t)pick * f->ldx, sizeof(float) * d);
            normalize(cc, d);
            total = 0;
            for (int64_t i = 0; i < f->n; i++) {
                float v = 1.0f - dot(f->x + (size_t)i * f->ldx, cc, d);
                if (v < dist_scratch[i]) dist_scratch[i] = v > 0 ? v : 0;
                total += dist_scratch[i];
            }
        }
        return;
    }
    cm_select sel;
    cm_select_begin(&sel, f->n, k);
    for (int64_t i, got = 0; (i = cm_select_next(&sel, rng)) >= 0; got++) idx_scratch[got] = i;
    /* Selection sampling returns sorted indices; shuffle so centroid ids carry no order. */
    for (uint32_t i = k; i > 1; i--) {
        uint32_t j = (uint32_t)cm_rng_below(rng, i);
        int64_t t = idx_scratch[i - 1];
        idx_scratch[i - 1] = idx_scratch[j];
        idx_scratch[j] = t;
    }
    for (uint32_t c = 0; c < k; c++) {
        memcpy(f->cent + (size_t)c * d, f->x + (size_t)idx_scratch[c] * f->ldx,
               sizeof(float) * d);
        normalize(f->cent + (size_t)c * d, d);
    }
}

/* Runs seeding + n_iter Lloyd iterations. Allocates its own k- and n-sized scratch.
 * trace (may be NULL) receives up to KMEANS_TRACE_MAX objective values. */
static chimera_status flat_kmeans(flat_run *f, ivf_kmeans_init init, uint32_t n_iter, uint64_t seed,
                                  uint64_t stream, double *trace, uint32_t *n_trace,
                                  uint32_t *n_repaired, double *obj)
{
    cm_rng rng;
    cm_rng_seed(&rng, seed, stream);
    float *sums = cm_aligned_alloc(64, sizeof(float) * (size_t)f->k * f->d);
    int64_t *counts = cm_malloc(sizeof(int64_t) * (size_t)f->k);
    int64_t *idx = NULL;
    float *dist = NULL;
    if (init == KMEANS_INIT_PLUSPLUS)
        dist = cm_malloc(sizeof(float) * (size_t)f->n);
    else
        idx = cm_malloc(sizeof(int64_t) * (size_t)f->k);
    chimera_status st = CHIMERA_ERR_NOMEM;
    if (!sums || !counts || (!idx && !dist)) goto done;
    seed_centroids(f, init, &rng, idx, dist);
    for (uint32_t it = 0; it < n_iter; it++) {
        assign_exact(f);
        /* cancelled: tasks were skipped and their assignments are garbage, which
         * update() must not index with */
        if (cm_watch_flag(f->watch)) {
            st = CHIMERA_ERR_CANCELLED;
            goto done;
        }
        double o = objective(f->ip, f->n);
        if (trace && *n_trace < KMEANS_TRACE_MAX) trace[(*n_trace)++] = o;
        *obj = o;
        *n_repaired += update(f, sums, counts, &rng);
    }
    st = CHIMERA_OK;
done:
    cm_free(sums);
    cm_free(counts);
    cm_free(idx);
    cm_free(dist);
    return st;
}

/* ---- hierarchical ----------------------------------------------------------------- */

typedef struct hier_ctx {
    const float *x;
    size_t ldx;
    uint32_t d, n_iter;
    uint64_t seed;
    ivf_kmeans_init init;
    const int64_t *members;  /* training rows grouped by coarse cluster */
    const int64_t *mem_off;  /* n_coarse + 1 */
    const uint32_t *order;   /* coarse clusters, largest first */
    const uint32_t *child_off;
    float *cent;             /* k x d */
    float **tiles;
    cm_progress *prog;
    cm_watch *watch;
    _Atomic int failed;
    _Atomic uint32_t repaired;
    double *obj_sum;         /* per coarse cluster: sum of cosine distances */
} hier_ctx;

static void fine_task(void *ctx, int64_t task, int worker)
{
    hier_ctx *h = ctx;
    uint32_t m = h->order[task];
    int64_t nm = h->mem_off[m + 1] - h->mem_off[m];
    uint32_t km = h->child_off[m + 1] - h->child_off[m];
    h->obj_sum[m] = 0;
    if (km == 0 || nm == 0) return;
    if (cm_watch_flag(h->watch)) {
        atomic_store(&h->failed, 1);
        return;
    }
    float *buf = cm_aligned_alloc(64, sizeof(float) * (size_t)nm * h->d);
    uint32_t *as = cm_malloc(sizeof(uint32_t) * (size_t)nm);
    float *ip = cm_malloc(sizeof(float) * (size_t)nm);
    if (!buf || !as || !ip) {
        atomic_store(&h->failed, 1);
        goto done;
    }
    for (int64_t i = 0; i < nm; i++)
        memcpy(buf + (size_t)i * h->d, h->x + (size_t)h->members[h->mem_off[m] + i] * h->ldx,
               sizeof(float) * h->d);
    flat_run f = {buf, nm, h->d, h->d, km, h->cent + (size_t)h->child_off[m] * h->d, as, ip,
                  h->tiles + worker, NULL, NULL, NULL, h->watch};
    /* tiles + worker: the serial run uses tiles[0] of the array it is given. */
    uint32_t rep = 0, nt = 0;
    double obj = 0;
    if (flat_kmeans(&f, h->init, h->n_iter, h->seed, 0x66696e65ull + m, NULL, &nt, &rep, &obj) !=
        CHIMERA_OK) {
        atomic_store(&h->failed, 1);
        goto done;
    }
    h->obj_sum[m] = obj * (double)nm;
    atomic_fetch_add(&h->repaired, rep);
done:
    cm_progress_add(h->prog, (uint64_t)nm);
    cm_free(buf);
    cm_free(as);
    cm_free(ip);
}

/* Shares k fine clusters among coarse clusters in proportion to their sizes: every
 * non-empty coarse cluster gets >= 1 and never more than it has points. */
static void share_out(const int64_t *size, uint32_t M, int64_t n, uint32_t k, uint32_t *km)
{
    int64_t sum = 0;
    for (uint32_t m = 0; m < M; m++) {
        double ideal = (double)k * (double)size[m] / (double)n;
        int64_t v = (int64_t)ideal;
        if (v < 1 && size[m] > 0) v = 1;
        if (v > size[m]) v = size[m];
        km[m] = (uint32_t)v;
        sum += v;
    }
    /* Fix the total one cluster at a time where the deficit (or surplus) against the
     * ideal share is largest: O(M) per step, at most M steps. */
    while (sum < k) {
        uint32_t best = UINT32_MAX;
        double bd = -1e300;
        for (uint32_t m = 0; m < M; m++) {
            if ((int64_t)km[m] >= size[m]) continue;
            double def = (double)k * (double)size[m] / (double)n - km[m];
            if (def > bd) {
                bd = def;
                best = m;
            }
        }
        if (best == UINT32_MAX) break; /* cannot happen when k <= n */
        km[best]++;
        sum++;
    }
    while (sum > k) {
        uint32_t best = UINT32_MAX;
        double bd = 1e300;
        for (uint32_t m = 0; m < M; m++) {
            if (km[m] <= 1) continue;
            double def = (double)k * (double)size[m] / (double)n - km[m];
            if (def < bd) {
                bd = def;
                best = m;
            }
        }
        if (best == UINT32_MAX) break;
        km[best]--;
        sum--;
    }
}

/* The hierarchical run in stages, each a function named for it: hier_coarse trains
 * the coarse level, hier_group sends every training point to its coarse cluster,
 * hier_fine shares out and trains the fine clusters per coarse cluster, hier_finetune
 * refines all of them together. hier_state holds what they pass on; hierarchical()
 * allocates and frees it. Each stage returns its status with the message set: its
 * callees' as they gave them, "out of memory" only for its own allocations. */
typedef struct hier_state {
    const float *x;
    int64_t n;
    size_t ldx;
    uint32_t d, k, M, n_iter;
    uint64_t seed;
    const ivf_kmeans_opts *o;
    float **tiles;
    ivf_kmeans_result *r;
    float *coarse;        /* M x d */
    uint32_t *child_off;  /* M + 1: fine clusters of coarse cluster m */
    uint32_t *cid;        /* n: coarse (then fine) cluster of each point */
    float *cip;           /* n */
    int64_t *size;        /* M + 1: members of coarse cluster m, as offsets after grouping */
    int64_t *members;     /* n: row ids grouped by coarse cluster */
    uint32_t *parent;     /* k: coarse parent of each fine cluster */
} hier_state;

static chimera_status hier_nomem(const hier_state *h, chimera_error *err)
{
    return cm_fail(err, CHIMERA_ERR_NOMEM, "kmeans: out of memory (k = %u, n = %lld)", h->k,
                   (long long)h->n);
}

/* 1. Coarse level on a subsample of at most COARSE_PPC points per coarse cluster. */
static chimera_status hier_coarse(hier_state *h, chimera_error *err)
{
    const ivf_kmeans_opts *o = h->o;
    const uint32_t d = h->d, M = h->M;
    int64_t nc = h->n;
    const float *cx = h->x;
    size_t cld = h->ldx;
    float *coarse_train = NULL;
    if ((double)h->n > (double)M * COARSE_PPC) {
        nc = (int64_t)M * COARSE_PPC;
        coarse_train = cm_aligned_alloc(64, sizeof(float) * (size_t)nc * d);
        if (!coarse_train) return hier_nomem(h, err);
        sample_rows(h->x, h->n, h->ldx, d, nc, h->seed, 0x636f61727365ull, coarse_train);
        cx = coarse_train;
        cld = d;
    }
    ivf_kmeans_init init = o->init;
    if (init == KMEANS_INIT_AUTO)
        init = (double)M * nc * d <= PLUSPLUS_MAX_WORK ? KMEANS_INIT_PLUSPLUS : KMEANS_INIT_RANDOM;
    cm_progress prog;
    cm_progress_begin(&prog, o->progress, o->progress_user, "kmeans coarse",
                      (uint64_t)nc * h->n_iter);
    flat_run f = {cx, nc, cld, d, M, h->coarse, h->cid, h->cip, h->tiles, o->pool, &prog, NULL,
                  o->watch};
    uint32_t nt = 0;
    double obj = 0;
    chimera_status st = flat_kmeans(&f, init, h->n_iter, h->seed, 0x636f61727365ull, NULL, &nt,
                                    &h->r->n_empty_repaired, &obj);
    cm_progress_end(&prog);
    cm_free(coarse_train);
    return st == CHIMERA_ERR_NOMEM ? hier_nomem(h, err) : st;
}

/* 2. Every training point to its coarse cluster (exact: M is small), grouped. */
static chimera_status hier_group(hier_state *h, chimera_error *err)
{
    const uint32_t M = h->M;
    ivf_assigner *as = NULL;
    ivf_assign_opts ao = {0, h->o->pool};
    CM_TRY(ivf_assigner_new(h->coarse, M, h->d, NULL, 0, NULL, &ao, &as, err));
    ivf_assign(as, h->x, h->n, h->ldx, h->cid, NULL);
    ivf_assigner_free(as);
    for (int64_t i = 0; i < h->n; i++) h->size[h->cid[i] + 1]++;
    for (uint32_t m = 0; m < M; m++) h->size[m + 1] += h->size[m];
    /* size[] holds offsets now; members[] groups row ids by coarse cluster. */
    int64_t *pos = cm_malloc(sizeof(int64_t) * (size_t)M);
    if (!pos) return hier_nomem(h, err);
    memcpy(pos, h->size, sizeof(int64_t) * M);
    for (int64_t i = 0; i < h->n; i++) h->members[pos[h->cid[i]]++] = i;
    cm_free(pos);
    return CHIMERA_OK;
}

/* 3. Share out and train the fine clusters, one coarse cluster per task. */
static chimera_status hier_fine(hier_state *h, chimera_error *err)
{
    const uint32_t M = h->M, k = h->k;
    const ivf_kmeans_opts *o = h->o;
    chimera_status st = CHIMERA_OK;
    int64_t *cnt = cm_malloc(sizeof(int64_t) * (size_t)M);
    uint32_t *km = cm_malloc(sizeof(uint32_t) * (size_t)M);
    uint32_t *order = cm_malloc(sizeof(uint32_t) * (size_t)M);
    double *obj_sum = cm_calloc(M, sizeof(double));
    if (!cnt || !km || !order || !obj_sum) {
        st = hier_nomem(h, err);
        goto done;
    }
    for (uint32_t m = 0; m < M; m++) cnt[m] = h->size[m + 1] - h->size[m];
    share_out(cnt, M, h->n, k, km);
    uint32_t *child_off = h->child_off;
    child_off[0] = 0;
    for (uint32_t m = 0; m < M; m++) child_off[m + 1] = child_off[m] + km[m];
    if (child_off[M] != k) {
        st = cm_fail(err, CHIMERA_ERR_INTERNAL, "kmeans: shared out %u of %u clusters",
                     child_off[M], k);
        goto done;
    }
    for (uint32_t m = 0; m < M; m++)
        for (uint32_t j = child_off[m]; j < child_off[m + 1]; j++) h->parent[j] = m;
    /* Largest first, so the long tasks do not end up last on one worker. */
    for (uint32_t m = 0; m < M; m++) order[m] = m;
    for (uint32_t i = 1; i < M; i++) { /* insertion sort is fine: M ~ sqrt(k) */
        uint32_t v = order[i], j = i;
        while (j > 0 && (cnt[order[j - 1]] < cnt[v] ||
                         (cnt[order[j - 1]] == cnt[v] && order[j - 1] > v))) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    cm_progress prog;
    hier_ctx hc = {h->x, h->ldx, h->d, h->n_iter, h->seed,
                   o->init == KMEANS_INIT_PLUSPLUS ? KMEANS_INIT_PLUSPLUS : KMEANS_INIT_RANDOM,
                   h->members, h->size, order, child_off, h->r->centroids, h->tiles, &prog,
                   o->watch, 0, 0, obj_sum};
    cm_progress_begin(&prog, o->progress, o->progress_user, "kmeans fine", (uint64_t)h->n);
    cm_pool_run(o->pool, M, fine_task, &hc);
    cm_progress_end(&prog);
    if (cm_watch_flag(o->watch)) {
        st = cm_fail(err, CHIMERA_ERR_CANCELLED, "kmeans: cancelled");
        goto done;
    }
    if (atomic_load(&hc.failed)) {
        st = hier_nomem(h, err);
        goto done;
    }
    h->r->n_empty_repaired += atomic_load(&hc.repaired);
    double sum = 0;
    for (uint32_t m = 0; m < M; m++) sum += obj_sum[m];
    h->r->objective = sum / (double)h->n;
done:
    cm_free(cnt);
    cm_free(km);
    cm_free(order);
    cm_free(obj_sum);
    return st;
}

/* 4. Fine-tune over the whole sample with the two-level assignment; the coarse
 * centroids follow as the normalised sums of their children's members. */
static chimera_status hier_finetune(hier_state *h, int n_finetune, uint32_t probe,
                                    chimera_error *err)
{
    const uint32_t M = h->M, k = h->k, d = h->d;
    const ivf_kmeans_opts *o = h->o;
    ivf_kmeans_result *r = h->r;
    ivf_assigner *as = NULL;
    ivf_assign_opts ao = {probe, o->pool};
    CM_TRY(ivf_assigner_new(r->centroids, k, d, h->coarse, M, h->child_off, &ao, &as, err));
    float *sums = cm_aligned_alloc(64, sizeof(float) * (size_t)k * d);
    int64_t *counts = cm_malloc(sizeof(int64_t) * (size_t)k);
    if (!sums || !counts) {
        cm_free(sums);
        cm_free(counts);
        ivf_assigner_free(as);
        return hier_nomem(h, err);
    }
    cm_rng rng;
    cm_rng_seed(&rng, h->seed, 0x74756e65ull);
    flat_run f = {h->x, h->n, h->ldx, d, k, r->centroids, h->cid, h->cip, h->tiles, o->pool,
                  NULL, h->parent, o->watch};
    cm_progress prog;
    cm_progress_begin(&prog, o->progress, o->progress_user, "kmeans finetune",
                      (uint64_t)n_finetune);
    for (int it = 0; it < n_finetune && !cm_watch_flag(o->watch); it++) {
        ivf_assign(as, h->x, h->n, h->ldx, h->cid, h->cip);
        double obj = objective(h->cip, h->n);
        if (r->n_trace < KMEANS_TRACE_MAX) r->trace[r->n_trace++] = obj;
        r->objective = obj;
        r->n_empty_repaired += update(&f, sums, counts, &rng);
        /* sums[] holds normalised member sums of non-empty clusters; rebuild each
         * coarse centroid from its children weighted by their counts. */
        for (uint32_t m = 0; m < M; m++) {
            float *cc = h->coarse + (size_t)m * d;
            memset(cc, 0, sizeof(float) * d);
            for (uint32_t j = h->child_off[m]; j < h->child_off[m + 1]; j++) {
                const float *cj = r->centroids + (size_t)j * d;
                float w = (float)counts[j];
                for (uint32_t t = 0; t < d; t++) cc[t] += w * cj[t];
            }
            normalize(cc, d);
        }
        cm_progress_add(&prog, 1);
    }
    cm_progress_end(&prog);
    cm_free(sums);
    cm_free(counts);
    ivf_assigner_free(as);
    if (cm_watch_flag(o->watch)) return cm_fail(err, CHIMERA_ERR_CANCELLED, "kmeans: cancelled");
    return CHIMERA_OK;
}

static chimera_status hierarchical(const float *x, int64_t n, size_t ldx, uint32_t d, uint32_t k,
                                   const ivf_kmeans_opts *o, float **tiles, ivf_kmeans_result *r,
                                   chimera_error *err)
{
    uint32_t M = o->n_coarse ? o->n_coarse : (uint32_t)(sqrt((double)k) + 0.5);
    if (M < 1) M = 1;
    if (M > k) M = k;
    const int n_finetune = o->n_finetune < 0 ? 0 : o->n_finetune ? o->n_finetune : DEFAULT_FINETUNE;
    const uint32_t probe = o->n_probe_coarse ? o->n_probe_coarse : DEFAULT_PROBE;
    hier_state h = {.x = x, .n = n, .ldx = ldx, .d = d, .k = k, .M = M,
                    .n_iter = o->n_iter ? o->n_iter : DEFAULT_ITER,
                    .seed = o->seed ? o->seed : DEFAULT_SEED, .o = o, .tiles = tiles, .r = r};
    chimera_status st;
    h.coarse = cm_aligned_alloc(64, sizeof(float) * (size_t)M * d);
    h.child_off = cm_malloc(sizeof(uint32_t) * ((size_t)M + 1));
    h.cid = cm_malloc(sizeof(uint32_t) * (size_t)n);
    h.cip = cm_malloc(sizeof(float) * (size_t)n);
    h.size = cm_calloc((size_t)M + 1, sizeof(int64_t));
    h.members = cm_malloc(sizeof(int64_t) * (size_t)n);
    h.parent = cm_malloc(sizeof(uint32_t) * (size_t)k);
    if (!h.coarse || !h.child_off || !h.cid || !h.cip || !h.size || !h.members || !h.parent) {
        st = hier_nomem(&h, err);
        goto done;
    }
    if ((st = hier_coarse(&h, err)) != CHIMERA_OK) goto done;
    if ((st = hier_group(&h, err)) != CHIMERA_OK) goto done;
    if ((st = hier_fine(&h, err)) != CHIMERA_OK) goto done;
    if (n_finetune > 0 && (st = hier_finetune(&h, n_finetune, probe, err)) != CHIMERA_OK)
        goto done;
    r->n_coarse = M;
    r->coarse = h.coarse;
    r->child_off = h.child_off;
    h.coarse = NULL;
    h.child_off = NULL;
done:
    cm_free(h.coarse);
    cm_free(h.child_off);
    cm_free(h.cid);
    cm_free(h.cip);
    cm_free(h.size);
    cm_free(h.members);
    cm_free(h.parent);
    return st;
}

/* ---- entry point ------------------------------------------------------------------ */

void ivf_kmeans_result_free(ivf_kmeans_result *r)
{
    if (!r) return;
    cm_free(r->centroids);
    cm_free(r->coarse);
    cm_free(r->child_off);
    memset(r, 0, sizeof *r);
}

chimera_status ivf_kmeans_train(const float *x, int64_t n, uint32_t d, size_t ldx, uint32_t k,
                                const ivf_kmeans_opts *opts, ivf_kmeans_result *out,
                                chimera_error *err)
{
    memset(out, 0, sizeof *out);
    ivf_kmeans_opts o;
    if (opts)
        o = *opts;
    else
        memset(&o, 0, sizeof o);
    if (!x || d == 0 || k == 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "kmeans: need data, d >= 1 and k >= 1");
    if (ldx < d) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "kmeans: row stride %zu < d = %u", ldx, d);
    if (n < (int64_t)k)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "kmeans: k = %u clusters need at least as many points (have %lld)", k,
                       (long long)n);
    const uint32_t ppc = o.max_points_per_centroid ? o.max_points_per_centroid : DEFAULT_PPC;
    const uint64_t seed = o.seed ? o.seed : DEFAULT_SEED;
    const uint32_t n_iter = o.n_iter ? o.n_iter : DEFAULT_ITER;
    /* Training sample: at most ppc points per centroid, drawn without replacement. */
    const int64_t nt = (double)n > (double)k * ppc ? (int64_t)k * ppc : n;
    ivf_kmeans_mode mode = o.mode;
    int flat_result = 0; /* trained hierarchically, returned flat (FLAT_MAX_MACS) */
    if (mode == KMEANS_AUTO) {
        double flat_macs = (double)nt * k * d * n_iter;
        mode = (k >= HIER_MIN_K || flat_macs > FLAT_MAX_MACS) ? KMEANS_HIERARCHICAL : KMEANS_FLAT;
        flat_result = mode == KMEANS_HIERARCHICAL && k < HIER_MIN_K;
    }
    if (k == 1) mode = KMEANS_FLAT;

    chimera_status st = CHIMERA_ERR_NOMEM;
    int n_workers = cm_pool_size(o.pool);
    float **tiles = cm_calloc((size_t)n_workers, sizeof(float *));
    float *train = NULL;
    uint32_t *as = NULL;
    float *ip = NULL;
    if (!tiles) goto done;
    for (int w = 0; w < n_workers; w++) {
        tiles[w] = cm_aligned_alloc(64, sizeof(float) * IVF_TILE_ROWS * IVF_TILE_COLS);
        if (!tiles[w]) goto done;
    }
    const float *tx = x;
    size_t tld = ldx;
    if (nt < n) {
        train = cm_aligned_alloc(64, sizeof(float) * (size_t)nt * d);
        if (!train) goto done;
        sample_rows(x, n, ldx, d, nt, seed, 0x73616d706c65ull, train);
        tx = train;
        tld = d;
    }
    out->k = k;
    out->d = d;
    out->n_train = nt;
    out->centroids = cm_aligned_alloc(64, sizeof(float) * (size_t)k * d);
    if (!out->centroids) goto done;

    if (mode == KMEANS_HIERARCHICAL) {
        st = hierarchical(tx, nt, tld, d, k, &o, tiles, out, err);
        if (st == CHIMERA_OK && flat_result) {
            cm_free(out->coarse);
            cm_free(out->child_off);
            out->coarse = NULL;
            out->child_off = NULL;
            out->n_coarse = 0;
        }
    } else {
        as = cm_malloc(sizeof(uint32_t) * (size_t)nt);
        ip = cm_malloc(sizeof(float) * (size_t)nt);
        if (!as || !ip) goto done;
        ivf_kmeans_init init = o.init;
        if (init == KMEANS_INIT_AUTO)
            init = (double)k * nt * d <= PLUSPLUS_MAX_WORK ? KMEANS_INIT_PLUSPLUS : KMEANS_INIT_RANDOM;
        cm_progress prog;
        cm_progress_begin(&prog, o.progress, o.progress_user, "kmeans", (uint64_t)nt * n_iter);
        flat_run f = {tx, nt, tld, d, k, out->centroids, as, ip, tiles, o.pool, &prog, NULL,
                      o.watch};
        st = flat_kmeans(&f, init, n_iter, seed, 0x666c6174ull, out->trace, &out->n_trace,
                         &out->n_empty_repaired, &out->objective);
        cm_progress_end(&prog);
        if (st != CHIMERA_OK) goto done;
    }
done:
    if (st == CHIMERA_ERR_NOMEM && (!err || err->code != CHIMERA_ERR_NOMEM))
        cm_fail(err, st, "kmeans: out of memory (k = %u, n = %lld, d = %u)", k, (long long)n, d);
    if (st != CHIMERA_OK) ivf_kmeans_result_free(out);
    if (tiles)
        for (int w = 0; w < n_workers; w++) cm_free(tiles[w]);
    cm_free(tiles);
    cm_free(train);
    cm_free(as);
    cm_free(ip);
    return st;
}
