/* The CPU backend: the reference implementation of the device interface (backend.h),
 * with the quant/ SIMD kernels.
 *
 * Centroid scores S = C Q^T [K x m], the centroid term of every estimate, come from an
 * 8-bit copy of the centroids made at upload (c8_make; quant_c8_scores: a quarter of
 * the bytes of the float centroids and integer dot products against the 8-bit query; a
 * score moves by a fifth of the 4-bit estimator's error, bench/RESULTS.md section
 * 5.11). A brute probe computes S in full, one pass over the 8-bit rows, and takes each
 * token's best n_probe + n_probe / 4 + 16 by them; those are scored again in float and
 * the n_probe best kept, so that the probe's choice and scores are the float ones unless
 * the 8-bit error moves one of them past n_probe / 4 + 16 others (on a real corpus none
 * came within 16 places of that: CPU_PROBE_SPARE; the worst-case error bound, which
 * could prove it, proved it for only 37-60% of the tokens at n_probe 32-64, so it is not
 * checked). With the full float sgemm this replaced, a brute
 * probe took 1.5x as long on a real corpus (K = 47,488, bench/RESULTS.md section 5.28).
 * A graph probe (BE_PROBE_GRAPH; probe=auto from CPU_GRAPH_AUTO_K
 * centroids up) never computes the full S: each token's walk starts from its best
 * centroids among a fixed sample of ~16 sqrt(K), scored from their 8-bit rows, and the
 * rows of S that document scoring reads (<q_j, c> for the centroid of every token of
 * every refined document) are computed afterwards, once per centroid and query, from
 * the same 8-bit rows -- or in full when those documents hold more tokens than there
 * are centroids (bench/RESULTS.md section 5.8, docs/algorithms.md §2.6).
 *
 * Refinement follows docs/design.md §2.3: for each query token, its probed posting
 * lists are estimated with the 1-bit list kernel (popcount form; the LUT form is exact in
 * the query but slower on CPUs, bench/bench_quant.c), each estimate max-reduced into
 * M[document][token], then each touched document's partial score sums M, with the
 * imputed floor for tokens that saw none of its tokens. The estimates are grouped by
 * document with a radix sort on the document id, then summed in one pass: a table
 * indexed by document (a direct map), looked up once per estimate, stalled on those
 * lookups once the corpus had ~10^5 documents, and filled and summed m cells for every
 * document touched (bench/RESULTS.md section 5.16). Each cell counts max(M, floor): see
 * cpu_refine.
 *
 * Threads: in throughput mode every worker runs its own queries single-threaded; in
 * latency mode (one worker, n_threads > 1) the full S, the graph walks of the query tokens
 * and the document scoring of a chunk are split over a pool. Scratch is allocated at
 * upload for the configured maxima; refinement's entry buffers (21 bytes a posting entry
 * the query probes: ~4 MB at 32 tokens x 64 probes of ~100 entries) grow on demand to
 * the largest query seen (rarely, amortised), never per query. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/pool.h"
#include "core/topk.h"
#include "graph/dot.h"
#include "graph/graph.h"
#include "quant/centroids8.h"
#include "quant/kernels.h"
#include "quant/rabitq.h"
#include "core/alloc.h"

/* A brute probe's candidates per query token by the 8-bit scores, scored again in
 * float: n_probe + n_probe / CPU_PROBE_SPARE + CPU_PROBE_EXTRA. On a real corpus (K =
 * 47,488, 6,031 query tokens) the float n_probe best sat at most 5-8 places past
 * n_probe by the 8-bit scores at n_probe 32 (8 tokens), 9-16 at 64 (5 tokens), 3-4 at 8
 * (6 tokens); everywhere else closer (bench/RESULTS.md section 5.28). */
#define CPU_PROBE_SPARE 4
#define CPU_PROBE_EXTRA 16
/* Centroid rows a pool task scores when S is computed in full in latency mode. */
#define CPU_S_TASK_ROWS 2048

/* Centroid rows per kernel call when S is computed row by row (CPU_S_LAZY). */
#define CPU_LAZY_ROWS 128
#define CPU_DOCS_AHEAD 4    /* documents between prefetches of their centroid ids and use */
#define CPU_ROWS_AHEAD 4    /* float centroid rows between prefetch and use (a brute probe) */
#define CPU_LISTS_AHEAD 2   /* posting lists between prefetches of their heads and use */
#define CPU_RADIX_BITS 11 /* document-id bits per pass of refinement's radix sort */
#define CPU_ENTRIES_MIN 4096 /* refinement's entry buffers at upload (they grow on demand) */
_Static_assert(QUANT_QTOK_MAX <= 256, "refinement keeps an entry's query token in a byte");

/* A graph probe seeds each query token's walk with its CPU_SEEDS best centroids among a
 * fixed strided sample of about CPU_SAMPLE_PER_ROOT * sqrt(K) of them, scored from
 * their 8-bit rows (docs/algorithms.md §2.6). At K = 99,328 (n_probe 16) a sample of
 * 4 sqrt(K) left the walks at probe recall 0.970-0.976; 16 sqrt(K) gives 0.993-0.999
 * with a shorter list, and its 8-bit rows cost less than the float sgemm (whose
 * packing of the sample was a quarter of a graph probe) did for the smaller sample
 * (bench/bench_probe.c, bench/RESULTS.md section 5.13). */
#define CPU_SEEDS 16
#define CPU_SAMPLE_PER_ROOT 16

/* probe=auto walks the graph (and computes S lazily) from this many centroids up, when
 * the query's k_refine documents hold fewer tokens (on average) than
 * CPU_GRAPH_AUTO_SHARE of the centroids; below it, or with more tokens to score, the full
 * S and the brute selection over it are cheaper (bench/RESULTS.md section 5.8).
 * Measured again with S from the 8-bit centroids (section 5.28, two threads, k = 10 at
 * 8-16 probes, k = 100 at 16 / 300): at K = 15,744 the brute probe is 1.0-1.2x faster,
 * at K = 24,896 the walk 1.02-1.13x at k = 10 and even at k = 100, at K = 47,488 (a real
 * corpus) the walk 1.13-1.24x at k = 10. */
#define CPU_GRAPH_AUTO_K 24576
/* At K = 99,328, k = 100, n_probe 24 (section 5.28, two threads): documents holding
 * 0.25 K tokens were searched 1.2-1.4x faster by the walk, 0.5 K about even, and 1.0 K
 * even in throughput mode and 1.24x slower in latency mode (there the full S is split
 * over the pool). The real corpus at k = 100, n_probe 32: 0.5 K even. */
#define CPU_GRAPH_AUTO_SHARE 0.6

/* What w->S holds for the current query. */
enum {
    CPU_S_FULL = 0,    /* all K rows */
    CPU_S_PENDING = 1, /* nothing yet: computed in full by the first stage that needs it */
    CPU_S_LAZY = 2,    /* rows k with bit k of S_have set only (a graph probe) */
};

typedef struct cpu_worker {
    quant_qset qs;
    const float *S;      /* [K x m] centroid scores of the current query (S_own) */
    float *S_own;        /* [K x max_m] */
    uint32_t m;
    const float *q;      /* current query tokens (caller's, valid during the query) */
    int S_state;         /* CPU_S_* */
    uint64_t *S_have;    /* [K bits] lazy mode: rows of S_own computed for this query; a
                            bitmap, not per-row stamps: 12 KiB at K = 10^5 stays in L1
                            while the refined documents' tokens test it at random */
    uint32_t *lz_id;     /* [CPU_LAZY_ROWS] centroids of one lazy block */
    uint64_t walked;     /* probes returned by graph walks since upload (probes_walked) */
    uint64_t rows_lazy;  /* rows computed by lazy_flush since upload, and K for each
                            switch from lazy rows to the full S (rows_computed) */
    float *smp_s;        /* [n_sample x max_m] the sample's scores for the current query */
    uint32_t *seed_id;   /* [max_m x CPU_SEEDS] each token's seeds, best first */
    uint32_t *seed_n;    /* [max_m] seeds found (0: the walk starts at the entry points) */
    uint32_t n_probe;
    uint32_t *probe_cid; /* [max_m x max_probe] */
    float *probe_qc;
    /* refinement: every posting entry of the query, then grouped by document */
    float *ent_est;                 /* [cap_ent] the estimates, in the order computed */
    uint8_t *ent_tok;               /* [cap_ent] the query token of each */
    uint64_t *ent_key;              /* [cap_ent] (document << 32) | entry: sorted by document */
    uint64_t *ent_tmp;              /* [cap_ent] the radix sort's second buffer */
    size_t cap_ent;
    float *keep_s;                  /* [2 max_refine] refinement's selection buffer (cm_topsel) */
    int64_t *keep_i;
    float *sel_s;                   /* selection heaps [max_m][room] (cpu_upload) */
    int64_t *sel_i;
    cm_topk *sel;                   /* [max_m], one per query token */
    float *sel_thr;                 /* [max_m], each heap's entry threshold */
    float *cand_s;                  /* [room] a brute probe's candidates scored in float */
    int64_t *cand_i;
} cpu_worker;

typedef struct cpu_ctx {
    be_resident r;
    be_config cfg;
    cpu_worker *w;
    const quant_kernels *kt;
    cm_pool *pool;       /* latency mode only */
    graph g;             /* a view of the resident graph (never graph_free'd) */
    uint32_t auto_refine; /* probe=auto walks the graph for a query whose k_refine is at
                             most this (0: never; CPU_GRAPH_AUTO_K) */
    uint32_t n_sample;   /* seed sample: centroids smp_id; their 8-bit rows (c8 codes, */
    uint32_t *smp_id;    /* scale, sum, side by side: smp8) made with the searcher */
    quant_c8_table *smp8;
    graph_searcher *gs;  /* built on first graph probe request, under gs_mu: the workers
                            of one engine probe concurrently, and the first two graph
                            probes would otherwise both build it (one leaked) */
    quant_c8_table *c8; /* the 8-bit centroids S is computed from (c8_make) */
    graph_dot_fn dot;    /* the float scores of a brute probe's candidates */
    pthread_mutex_t gs_mu;
    uint64_t lazy_tokens; /* refined documents' tokens up to which S stays lazy */
} cpu_ctx;

/* ---- upload ------------------------------------------------------------------------ */

/* The 8-bit centroids S is computed from (shared by every engine over the same
 * centroids, quant/centroids8.h). */
static chimera_status c8_make(cpu_ctx *c, chimera_error *err)
{
    return quant_c8_table_get(c->r.shared_key, c->r.rot, c->r.centroids, c->r.n_clusters,
                              &c->c8, err);
}

static void cpu_free(void *vctx)
{
    cpu_ctx *c = vctx;
    if (!c) return;
    if (c->w)
        for (int i = 0; i < c->cfg.n_workers; i++) {
            cpu_worker *w = &c->w[i];
            quant_qset_free(&w->qs);
            cm_free(w->S_own);
            cm_free(w->S_have);
            cm_free(w->lz_id);
            cm_free(w->smp_s);
            cm_free(w->seed_id);
            cm_free(w->seed_n);
            cm_free(w->probe_cid);
            cm_free(w->probe_qc);
            cm_free(w->ent_est);
            cm_free(w->ent_tok);
            cm_free(w->ent_key);
            cm_free(w->ent_tmp);
            cm_free(w->keep_s);
            cm_free(w->keep_i);
            cm_free(w->sel_s);
            cm_free(w->sel_i);
            cm_free(w->sel);
            cm_free(w->sel_thr);
            cm_free(w->cand_s);
            cm_free(w->cand_i);
        }
    cm_free(c->w);
    cm_free(c->smp_id);
    quant_c8_table_release(c->smp8);
    graph_searcher_free(c->gs);
    quant_c8_table_release(c->c8);
    pthread_mutex_destroy(&c->gs_mu);
    cm_pool_free(c->pool);
    cm_free(c);
}

static chimera_status cpu_upload(void *vctx, const be_resident *r, const be_config *cfg,
                                 chimera_error *err)
{
    cpu_ctx *c = vctx;
    c->r = *r;
    c->cfg = *cfg;
    if (c->cfg.n_workers < 1) c->cfg.n_workers = 1;
    c->kt = quant_kernels_active();
    c->dot = graph_dot_get();
    int latency = c->cfg.n_workers == 1 && c->cfg.n_threads > 1; /* the pool, below */
    c->lazy_tokens = r->n_clusters;
    /* The choice is made per query, by its own k_refine (cpu_probe), not once by the
     * engine's largest: an engine sized for a deep search (a tune's first, generous
     * trial; a server after one deep request) would otherwise probe every shallow query
     * by brute force, slower than a search of that depth alone (bench/RESULTS.md 5.26). */
    double per_doc = (double)r->n_tokens / (double)(r->n_docs > 0 ? r->n_docs : 1);
    double refine = CPU_GRAPH_AUTO_SHARE * (double)c->lazy_tokens /
                    (per_doc > 0 ? per_doc : 1);
    uint32_t from_k = cfg->graph_auto_k ? cfg->graph_auto_k : CPU_GRAPH_AUTO_K;
    int graph_ok = r->n_clusters >= from_k && r->degree > 0;
    c->auto_refine = !graph_ok ? 0 : refine < UINT32_MAX ? (uint32_t)refine : UINT32_MAX;
    c->g = (graph){.n = r->n_clusters, .degree = r->degree, .adj = (uint32_t *)r->graph_adj,
                   .n_entry = r->n_entry, .entry = (uint32_t *)r->graph_entry};
    CM_TRY(c8_make(c, err));
    if (latency) {
        c->pool = cm_pool_new(c->cfg.n_threads);
        if (!c->pool) return cm_fail(err, CHIMERA_ERR_NOMEM, "cpu backend: cannot start threads");
    }
    int nw = c->cfg.n_workers;
    uint32_t mm = cfg->max_m, mp = cfg->max_probe ? cfg->max_probe : 1;
    /* a selection heap's room: a brute probe's candidates, or a graph probe's seeds */
    uint32_t ms = mp + mp / CPU_PROBE_SPARE + CPU_PROBE_EXTRA;
    if (ms < CPU_SEEDS) ms = CPU_SEEDS;
    /* the seed sample: every (K / n_sample)-th centroid */
    double ns = ceil(CPU_SAMPLE_PER_ROOT * sqrt((double)r->n_clusters));
    c->n_sample = ns < (double)r->n_clusters ? (uint32_t)ns : r->n_clusters;
    if (c->n_sample == 0) c->n_sample = 1;
    c->smp_id = cm_calloc(c->n_sample, sizeof(uint32_t));
    if (!c->smp_id)
        return cm_fail(err, CHIMERA_ERR_NOMEM, "cpu backend: out of memory");
    for (uint32_t i = 0; i < c->n_sample && r->n_clusters; i++)
        c->smp_id[i] = (uint32_t)((uint64_t)i * r->n_clusters / c->n_sample);
    c->w = cm_calloc((size_t)nw, sizeof *c->w);
    if (!c->w) return cm_fail(err, CHIMERA_ERR_NOMEM, "cpu backend: out of memory");
    for (int i = 0; i < nw; i++) {
        cpu_worker *w = &c->w[i];
        CM_TRY(quant_qset_init(&w->qs, r->dim_pad, mm, err));
        /* the LUTs serve only the LUT form of the 1-bit doc shape (quant_est1_doc_max) */
        w->qs.luts = !c->kt->doc1_q8_default;
        w->S_own = cm_aligned_alloc(64, (size_t)r->n_clusters * mm * sizeof(float));
        w->S_have = cm_calloc(((size_t)r->n_clusters + 63) / 64 + 1, sizeof(uint64_t));
        w->lz_id = cm_malloc(CPU_LAZY_ROWS * sizeof(uint32_t));
        w->smp_s = cm_malloc((size_t)c->n_sample * mm * sizeof(float));
        w->seed_id = cm_malloc((size_t)mm * CPU_SEEDS * sizeof(uint32_t));
        w->seed_n = cm_malloc((size_t)mm * sizeof(uint32_t));
        if (!w->S_have || !w->lz_id || !w->smp_s || !w->seed_id || !w->seed_n)
            return cm_fail(err, CHIMERA_ERR_NOMEM, "cpu backend: out of memory for worker scratch");
        w->probe_cid = cm_malloc((size_t)mm * mp * sizeof(uint32_t));
        w->probe_qc = cm_malloc((size_t)mm * mp * sizeof(float));
        w->cap_ent = CPU_ENTRIES_MIN;
        w->ent_est = cm_malloc(w->cap_ent * sizeof(float));
        w->ent_tok = cm_malloc(w->cap_ent);
        w->ent_key = cm_malloc(w->cap_ent * sizeof(uint64_t));
        w->ent_tmp = cm_malloc(w->cap_ent * sizeof(uint64_t));
        uint32_t kr = cfg->max_refine ? cfg->max_refine : 1;
        w->keep_s = cm_malloc(2 * (size_t)kr * sizeof(float));
        w->keep_i = cm_malloc(2 * (size_t)kr * sizeof(int64_t));
        w->sel_s = cm_malloc((size_t)mm * ms * sizeof(float));
        w->sel_i = cm_malloc((size_t)mm * ms * sizeof(int64_t));
        w->sel = cm_malloc((size_t)mm * sizeof(cm_topk));
        w->sel_thr = cm_malloc((size_t)mm * sizeof(float));
        w->cand_s = cm_malloc((size_t)ms * sizeof(float));
        w->cand_i = cm_malloc((size_t)ms * sizeof(int64_t));
        if (!w->S_own || !w->probe_cid || !w->probe_qc || !w->ent_est || !w->ent_tok ||
            !w->ent_key || !w->ent_tmp || !w->keep_s || !w->keep_i || !w->sel_s ||
            !w->sel_i || !w->sel || !w->sel_thr || !w->cand_s || !w->cand_i)
            return cm_fail(err, CHIMERA_ERR_NOMEM, "cpu backend: out of memory for worker scratch");
    }
    return CHIMERA_OK;
}

/* ---- query ------------------------------------------------------------------------- */

typedef struct s_job {
    const cpu_ctx *c;
    cpu_worker *w;
} s_job;

static void s_task(void *ctx, int64_t t, int wi)
{
    (void)wi;
    const s_job *j = ctx;
    const quant_c8_table *t8 = j->c->c8;
    size_t r0 = (size_t)t * CPU_S_TASK_ROWS, n = j->c->r.n_clusters - r0, dp = t8->dim_pad;
    if (n > CPU_S_TASK_ROWS) n = CPU_S_TASK_ROWS;
    quant_c8_scores(j->c->kt, &j->w->qs, t8->codes + r0 * dp, t8->scale + r0, t8->sum + r0,
                    NULL, n, j->w->S_own + r0 * j->w->m, j->w->m);
}

/* All K rows of S_own from the 8-bit centroids: one pass in order (the hardware
 * prefetcher follows), split over the pool in latency mode. */
static void full_scores(const cpu_ctx *c, cpu_worker *w)
{
    s_job j = {c, w};
    int64_t n_tasks = ((int64_t)c->r.n_clusters + CPU_S_TASK_ROWS - 1) / CPU_S_TASK_ROWS;
    if (c->pool) {
        cm_pool_run(c->pool, n_tasks, s_task, &j);
    } else {
        for (int64_t t = 0; t < n_tasks; t++) s_task(&j, t, 0);
    }
    w->S = w->S_own;
}

/* The rows of S_own for this query's first nb gathered centroids (w->lz_id). */
static void lazy_flush(const cpu_ctx *c, cpu_worker *w, uint32_t nb)
{
    quant_c8_scores(c->kt, &w->qs, c->c8->codes, c->c8->scale, c->c8->sum, w->lz_id, nb,
                    w->S_own, w->m);
    w->rows_lazy += nb;
}

static inline void prefetch_doc_off(const be_resident *r, uint32_t d)
{
    const be_segment *sg = be_doc_segment(r, d);
    __builtin_prefetch(&sg->doc_off[d - sg->doc_base]);
}

/* The first cache lines of document d's centroid ids (its offsets should be in cache);
 * the hardware prefetcher follows a long document's further lines. */
static inline void prefetch_doc_cids(const be_resident *r, uint32_t d)
{
    const be_segment *sg = be_doc_segment(r, d);
    int64_t ld = d - sg->doc_base, n = sg->doc_off[ld + 1] - sg->doc_off[ld];
    if (n > 128) n = 128;
    const char *a = (const char *)(sg->tok_cid + sg->doc_off[ld]), *b = a + n * 4;
    for (const char *p = a; p < b; p += 64) __builtin_prefetch(p);
    if (b > a) __builtin_prefetch(b - 1); /* a range that starts mid-line ends a line on */
}

/* The first lines of document d's token data a scoring kernel reads (its centroid ids,
 * and for 1-bit scoring its codes and factors): the documents lie at random in the
 * token arrays, and the first loads of each stalled the kernel on memory. */
static inline void prefetch_doc_head(const be_resident *r, uint32_t d, uint32_t cb,
                                     int ids_only)
{
    const be_segment *sg = be_doc_segment(r, d);
    int64_t t0 = sg->doc_off[d - sg->doc_base];
    __builtin_prefetch(sg->tok_cid + t0);
    if (ids_only) return;
    const char *a = (const char *)(sg->d1_codes + (size_t)t0 * cb);
    for (int i = 0; i < 4; i++) __builtin_prefetch(a + 64 * i);
    __builtin_prefetch(sg->d1_fact + t0);
}

/* Makes S usable for the tokens of docs[0..n): in full when nothing was computed yet,
 * and in lazy mode the rows of those tokens' centroids not computed before in this
 * query (CPU_LAZY_ROWS at a time, from the 8-bit centroids). Runs on the worker's
 * thread only, before any pool task or the host thread reads those rows. */
static void ensure_scores(const cpu_ctx *c, cpu_worker *w, const uint32_t *docs, uint32_t n)
{
    const be_resident *r = &c->r;
    if (w->S_state == CPU_S_LAZY) {
        /* past lazy_tokens one pass over every row is cheaper than gathering rows
         * (bench/RESULTS.md section 5.8); rows computed so far are recomputed */
        uint64_t n_tok = 0;
        for (uint32_t i = 0; i < n && n_tok <= c->lazy_tokens; i++) {
            const be_segment *sg = be_doc_segment(r, docs[i]);
            int64_t ld = docs[i] - sg->doc_base;
            n_tok += (uint64_t)(sg->doc_off[ld + 1] - sg->doc_off[ld]);
        }
        if (n_tok > c->lazy_tokens) {
            w->S_state = CPU_S_PENDING;
            w->rows_lazy += c->r.n_clusters; /* all of them now, counted as rows */
        }
    }
    if (w->S_state == CPU_S_PENDING) {
        full_scores(c, w);
        w->S_state = CPU_S_FULL;
    }
    if (w->S_state != CPU_S_LAZY) return;
    uint32_t nb = 0;
    uint64_t *have = w->S_have;
    for (uint32_t i = 0; i < n; i++) {
        /* the documents lie at random in the token arrays: the loads of their first
         * centroid ids stalled this loop; fetch their offsets, then their ids, ahead */
        if (i + 2 * CPU_DOCS_AHEAD < n) prefetch_doc_off(r, docs[i + 2 * CPU_DOCS_AHEAD]);
        if (i + CPU_DOCS_AHEAD < n) prefetch_doc_cids(r, docs[i + CPU_DOCS_AHEAD]);
        const be_segment *sg = be_doc_segment(r, docs[i]);
        int64_t ld = docs[i] - sg->doc_base;
        for (int64_t t = sg->doc_off[ld]; t < sg->doc_off[ld + 1]; t++) {
            uint32_t k = sg->tok_cid[t];
            uint64_t bit = (uint64_t)1 << (k & 63);
            if (have[k >> 6] & bit) continue;
            have[k >> 6] |= bit;
            w->lz_id[nb] = k;
            if (++nb == CPU_LAZY_ROWS) {
                lazy_flush(c, w, nb);
                nb = 0;
            }
        }
    }
    if (nb) lazy_flush(c, w, nb);
}

static chimera_status cpu_query_begin(void *vctx, int worker, const float *q, uint32_t m,
                                      chimera_error *err)
{
    cpu_ctx *c = vctx;
    cpu_worker *w = &c->w[worker];
    if (m == 0 || m > c->cfg.max_m)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cpu backend: query of %u tokens (max %u)",
                       m, c->cfg.max_m);
    w->m = m;
    w->q = q;
    quant_qset_set(&w->qs, c->r.rot, q, m);
    /* S waits for the probe: a graph probe computes only the rows scoring needs */
    w->S = w->S_own;
    w->S_state = CPU_S_PENDING;
    return CHIMERA_OK;
}

typedef struct g_job {
    const cpu_ctx *c;
    cpu_worker *w;
    uint32_t n_probe;
} g_job;

/* The seed sample's 8-bit rows side by side (a copy of the c8 table's rows smp_id, so
 * that scoring the sample reads one contiguous block); under gs_mu, after c8_make. */
static chimera_status sample_make(cpu_ctx *c, chimera_error *err)
{
    if (c->smp8) return CHIMERA_OK;
    uint32_t n = c->n_sample, dp = c->r.dim_pad;
    quant_c8_table *t = quant_c8_table_new(n, dp);
    if (!t) return cm_fail(err, CHIMERA_ERR_NOMEM, "cpu backend: out of memory for the seed sample");
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = c->smp_id[i];
        memcpy(t->codes + (size_t)i * dp, c->c8->codes + (size_t)k * dp, dp);
        t->scale[i] = c->c8->scale[k];
        t->sum[i] = c->c8->sum[k];
    }
    c->smp8 = t;
    return CHIMERA_OK;
}

static void g_task(void *ctx, int64_t j, int wi)
{
    const g_job *g = ctx;
    size_t o = (size_t)j * g->n_probe, so = (size_t)j * CPU_SEEDS;
    const float *q = g->w->q + (size_t)j * g->c->r.dim;
    if (g->w->seed_n[j])
        graph_search_seeded(g->c->gs, wi, q, g->n_probe, g->w->seed_id + so, NULL,
                            g->w->seed_n[j], g->w->probe_cid + o, g->w->probe_qc + o);
    else
        graph_search(g->c->gs, wi, q, g->n_probe, g->w->probe_cid + o, g->w->probe_qc + o);
}

/* Each column j < m of S [n x m]: its best k rows into w->sel[j], sorted best first.
 * One pass over S in its row-major order with m heaps side by side. A pass per column
 * (stride m floats) read a cache line per row m times over: ~200 MB per query at
 * K = 10^5, m = 32, from a 13 MB S that does not stay in cache. Rows arrive in
 * increasing order for every heap, so ties resolve as with one heap per column. Only
 * scores above -inf enter a heap: it holds fewer than k where they are -inf or NaN.
 * Past the first rows few rows beat any heap's threshold (the seed sample at K = 99,328:
 * 590 of 5,043 rows, m = 10, k = 16), so the rows that do are found by a vector compare
 * of whole rows against the thresholds (quant_first_above), not a compare and branch per
 * score: 76-82 -> 63-65 us a query there. What is left is the heaps' ~110 pushes per
 * column; a buffer cut by quickselect (cm_topsel), whose bar rises only at a cut, let
 * more rows through and took 80 us. */
static void select_columns(const quant_kernels *kt, cpu_worker *w, const float *S, uint32_t n,
                           uint32_t m, uint32_t k)
{
    float *thr = w->sel_thr;
    for (uint32_t j = 0; j < m; j++) {
        cm_topk_init(&w->sel[j], k, w->sel_s + (size_t)j * k, w->sel_i + (size_t)j * k);
        thr[j] = cm_topk_threshold(&w->sel[j]);
    }
    for (uint32_t i = 0;; i++) {
        i += (uint32_t)quant_first_above(kt, S + (size_t)i * m, n - i, m, thr);
        if (i >= n) break;
        const float *row = S + (size_t)i * m;
        for (uint32_t j = 0; j < m; j++)
            if (row[j] > thr[j]) {
                cm_topk_push(&w->sel[j], row[j], i);
                thr[j] = cm_topk_threshold(&w->sel[j]);
            }
    }
    for (uint32_t j = 0; j < m; j++) cm_topk_sort(&w->sel[j]);
}

/* Token j's n_probe best centroids into *h, sorted best first: its candidates by the
 * 8-bit scores (w->sel[j], after select_columns) scored again in float with the graph
 * walk's inner product, so a centroid both probes find gets the same score; ties rank
 * the smaller id first (cm_topk). */
static void float_best(const cpu_ctx *c, cpu_worker *w, uint32_t j, uint32_t n_probe,
                       cm_topk *h)
{
    const cm_topk *cand = &w->sel[j];
    const float *qj = w->q + (size_t)j * c->r.dim;
    cm_topk_init(h, n_probe, w->cand_s, w->cand_i);
    size_t row = (size_t)c->r.dim * sizeof(float);
    for (uint32_t a = 0; a < cand->n; a++) {
        /* the candidates' rows lie at random in the float centroids, which outgrow the
         * caches: fetched a few rows ahead (the loads stalled 80% of this loop) */
        if (a + CPU_ROWS_AHEAD < cand->n) {
            size_t next = (size_t)cand->id[a + CPU_ROWS_AHEAD];
            const char *f = (const char *)(c->r.centroids + next * c->r.dim);
            for (size_t o = 0; o < row; o += 64) __builtin_prefetch(f + o);
        }
        uint32_t k = (uint32_t)cand->id[a];
        float s = c->dot(c->r.centroids + (size_t)k * c->r.dim, qj, c->r.dim);
        if (s > -INFINITY) cm_topk_push(h, s, k);
    }
    cm_topk_sort(h);
}

static chimera_status cpu_probe(void *vctx, int worker, uint32_t n_probe, uint32_t k_refine,
                                be_probe_mode mode, uint32_t *cids, float *qc, chimera_error *err)
{
    cpu_ctx *c = vctx;
    cpu_worker *w = &c->w[worker];
    uint32_t K = c->r.n_clusters, m = w->m;
    if (n_probe == 0 || n_probe > c->cfg.max_probe)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cpu backend: n_probe %u (max %u)", n_probe,
                       c->cfg.max_probe);
    if (n_probe > K) n_probe = K;
    if (k_refine == 0 || k_refine > c->cfg.max_refine) k_refine = c->cfg.max_refine;
    if (mode == BE_PROBE_GRAPH ||
        (mode == BE_PROBE_AUTO && k_refine <= c->auto_refine)) {
        /* a lock per graph-probed query: uncontended it costs far less than the probe */
        pthread_mutex_lock(&c->gs_mu);
        chimera_status s = CHIMERA_OK;
        if (!c->gs) {
            /* in latency mode the pool's threads walk for the query's tokens */
            int nw = c->pool ? cm_pool_size(c->pool) : c->cfg.n_workers;
            graph_search_params gp = {.itopk = c->cfg.graph_list};
            s = graph_searcher_new(&c->g, c->r.centroids, c->r.dim, &gp, c->cfg.max_probe, nw,
                                   &c->gs, err);
            if (s == CHIMERA_OK) s = sample_make(c, err);
            if (s != CHIMERA_OK) {
                graph_searcher_free(c->gs);
                c->gs = NULL;
            }
        }
        pthread_mutex_unlock(&c->gs_mu);
        CM_TRY(s);
        /* seeds: each token's best of the sample by its 8-bit rows' scores; the walk
         * scores the seeds it starts from exactly */
        uint32_t n_s = c->n_sample;
        quant_c8_scores(c->kt, &w->qs, c->smp8->codes, c->smp8->scale, c->smp8->sum,
                        NULL, n_s, w->smp_s, m);
        select_columns(c->kt, w, w->smp_s, n_s, m, CPU_SEEDS);
        for (uint32_t j = 0; j < m; j++) {
            const cm_topk *h = &w->sel[j];
            for (uint32_t a = 0; a < h->n; a++)
                w->seed_id[(size_t)j * CPU_SEEDS + a] = c->smp_id[h->id[a]];
            w->seed_n[j] = h->n;
        }
        g_job gj = {c, w, n_probe};
        if (c->pool) cm_pool_run(c->pool, m, g_task, &gj);
        else
            for (uint32_t j = 0; j < m; j++) g_task(&gj, j, worker);
        w->walked += (uint64_t)m * n_probe;
        if (w->S_state == CPU_S_PENDING) { /* rows of S as scoring asks for them */
            memset(w->S_have, 0, ((size_t)K + 63) / 64 * sizeof(uint64_t));
            w->S = w->S_own;
            w->S_state = CPU_S_LAZY;
        }
    } else {
        ensure_scores(c, w, NULL, 0);
        uint64_t nc = (uint64_t)n_probe + n_probe / CPU_PROBE_SPARE + CPU_PROBE_EXTRA;
        select_columns(c->kt, w, w->S, K, m, nc < K ? (uint32_t)nc : K);
        for (uint32_t j = 0; j < m; j++) {
            /* Only scores above -inf enter the heap, so it holds fewer than n_probe when
             * centroid scores are -inf or NaN (centroids of huge magnitude overflow the
             * dot product). The slots past h->n were never written: pad them as the
             * graph search does, with ids refinement skips. */
            cm_topk h;
            float_best(c, w, j, n_probe, &h);
            for (uint32_t p = 0; p < n_probe; p++) {
                w->probe_cid[(size_t)j * n_probe + p] = p < h.n ? (uint32_t)h.id[p] : UINT32_MAX;
                w->probe_qc[(size_t)j * n_probe + p] = p < h.n ? h.score[p] : -INFINITY;
            }
        }
    }
    w->n_probe = n_probe;
    if (cids) memcpy(cids, w->probe_cid, (size_t)m * n_probe * sizeof *cids);
    if (qc) memcpy(qc, w->probe_qc, (size_t)m * n_probe * sizeof *qc);
    return CHIMERA_OK;
}

/* Room for n posting entries in the worker's entry buffers (grown, never shrunk: sized
 * by the largest query so far). */
static int ensure_entries(cpu_worker *w, size_t n)
{
    if (n <= w->cap_ent) return 0;
    size_t cap = w->cap_ent * 2 > n ? w->cap_ent * 2 : n;
    float *e = cm_realloc(w->ent_est, cap * sizeof(float));
    if (!e) return -1;
    w->ent_est = e;
    uint8_t *t = cm_realloc(w->ent_tok, cap);
    if (!t) return -1;
    w->ent_tok = t;
    uint64_t *k = cm_realloc(w->ent_key, cap * sizeof(uint64_t));
    if (!k) return -1;
    w->ent_key = k;
    k = cm_realloc(w->ent_tmp, cap * sizeof(uint64_t));
    if (!k) return -1;
    w->ent_tmp = k;
    w->cap_ent = cap;
    return 0;
}

/* Sorts key[0..n) stably by the upper 32 bits (a document id below 2^bits): LSD radix,
 * in as few passes of at most CPU_RADIX_BITS as the bits need, each pass over
 * equally wide digits (17 bits: two of 9). Returns the buffer that holds the result (key
 * or tmp). The histograms of every pass come from one read of the keys. */
static uint64_t *sort_by_doc(uint64_t *key, uint64_t *tmp, size_t n, uint32_t bits)
{
    enum { MAX_PASSES = (32 + CPU_RADIX_BITS - 1) / CPU_RADIX_BITS };
    uint32_t hist[MAX_PASSES << CPU_RADIX_BITS];
    uint32_t passes = (bits + CPU_RADIX_BITS - 1) / CPU_RADIX_BITS;
    if (passes == 0 || n < 2) return key;
    uint32_t db = (bits + passes - 1) / passes, nb = 1u << db, mask = nb - 1;
    memset(hist, 0, (size_t)passes * nb * sizeof *hist);
    /* every pass's histogram in one read; passes (at most 3) spelled out, since a loop
     * over them per key was a third of the sort */
    _Static_assert(MAX_PASSES <= 3, "the histogram loop counts at most three digits");
    uint32_t *h0 = hist, *h1 = hist + nb, *h2 = hist + 2 * nb;
    if (passes == 1)
        for (size_t i = 0; i < n; i++) h0[(uint32_t)(key[i] >> 32) & mask]++;
    else if (passes == 2)
        for (size_t i = 0; i < n; i++) {
            uint32_t d = (uint32_t)(key[i] >> 32);
            h0[d & mask]++;
            h1[(d >> db) & mask]++;
        }
    else
        for (size_t i = 0; i < n; i++) {
            uint32_t d = (uint32_t)(key[i] >> 32);
            h0[d & mask]++;
            h1[(d >> db) & mask]++;
            h2[(d >> (2 * db)) & mask]++;
        }
    for (uint32_t p = 0; p < passes; p++) {
        uint32_t *h = hist + (p << db), sum = 0, shift = 32 + p * db;
        for (uint32_t b = 0; b < nb; b++) {
            uint32_t c = h[b];
            h[b] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) tmp[h[(key[i] >> shift) & mask]++] = key[i];
        uint64_t *t = key;
        key = tmp;
        tmp = t;
    }
    return key;
}

/* The first lines of cluster cid's entries in every segment (1-bit codes, factors and
 * document ids): each list lies at random in those arrays, and the first loads of
 * each stalled refinement's estimates. */
static inline void prefetch_list_head(const be_resident *r, uint32_t cid, uint32_t cb)
{
    if (cid >= r->n_clusters) return;
    for (uint32_t si = 0; si < r->n_segments; si++) {
        const be_segment *sg = &r->segments[si];
        int64_t p0, n;
        be_segment_list(sg, cid, &p0, &n);
        if (n == 0) continue;
        const char *a = (const char *)(sg->c1_codes + (size_t)p0 * cb);
        size_t bytes = (size_t)n * cb;
        for (size_t b = 0; b < 256 && b < bytes; b += 64) __builtin_prefetch(a + b);
        __builtin_prefetch(sg->c1_fact + p0);
        __builtin_prefetch(sg->post_doc + p0);
    }
}

static chimera_status cpu_refine(void *vctx, int worker, uint32_t k_refine, be_floor imp,
                                 const uint8_t *allow, uint32_t *docs, float *partial,
                                 uint32_t *n_out, be_refine_stats *stats, chimera_error *err)
{
    cpu_ctx *c = vctx;
    cpu_worker *w = &c->w[worker];
    const be_resident *r = &c->r;
    uint32_t m = w->m, np = w->n_probe, cb = qm_code1_bytes(r->dim_pad);
    if (k_refine == 0 || k_refine > c->cfg.max_refine)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cpu backend: k_refine %u (max %u)",
                       k_refine, c->cfg.max_refine);
    if (m > c->cfg.max_m) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cpu backend: no query");
    /* every probed list's entries, in every segment: appended documents are found
     * exactly as built ones */
    size_t n_ent = 0;
    for (size_t i = 0; i < (size_t)m * np; i++) {
        uint32_t cid = w->probe_cid[i];
        if (cid >= r->n_clusters) continue; /* a graph search that found fewer */
        for (uint32_t si = 0; si < r->n_segments; si++) {
            int64_t p0, n;
            be_segment_list(&r->segments[si], cid, &p0, &n);
            n_ent += (size_t)n;
        }
    }
    if (n_ent > UINT32_MAX)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "cpu backend: %zu posting entries in one query (at most 2^32 - 1); "
                       "probe fewer clusters", n_ent);
    if (ensure_entries(w, n_ent) != 0)
        return cm_fail(err, CHIMERA_ERR_NOMEM, "cpu backend: out of memory (refine)");
    /* 1. estimate every entry, each list at once; an entry's key is its document and
     * its place in these arrays */
    size_t e0 = 0, n_lists = (size_t)m * np;
    float floor_[QUANT_QTOK_MAX];
    for (size_t i = 0; i < CPU_LISTS_AHEAD && i < n_lists; i++)
        prefetch_list_head(r, w->probe_cid[i], cb);
    for (uint32_t j = 0; j < m; j++) {
        float min_seen = INFINITY;
        for (uint32_t p = 0; p < np; p++) {
            size_t li = (size_t)j * np + p; /* the list's place among the probed */
            uint32_t cid = w->probe_cid[li];
            float qc = w->probe_qc[li];
            if (li + CPU_LISTS_AHEAD < n_lists)
                prefetch_list_head(r, w->probe_cid[li + CPU_LISTS_AHEAD], cb);
            if (cid >= r->n_clusters) continue;
            for (uint32_t si = 0; si < r->n_segments; si++) {
                const be_segment *sg = &r->segments[si];
                int64_t p0, n;
                be_segment_list(sg, cid, &p0, &n);
                if (n == 0) continue;
                float *est = w->ent_est + e0;
                quant_est1_list(c->kt, &w->qs, j, sg->c1_codes + (size_t)p0 * cb,
                                sg->c1_fact + p0, (size_t)n, qc, est);
                uint64_t base = sg->doc_base;
                const uint32_t *pd = sg->post_doc + p0;
                uint64_t *key = w->ent_key + e0;
                for (int64_t t = 0; t < n; t++) {
                    key[t] = (base + pd[t]) << 32 | (uint64_t)(e0 + (size_t)t);
                    if (est[t] < min_seen) min_seen = est[t];
                }
                memset(w->ent_tok + e0, (int)j, (size_t)n);
                e0 += (size_t)n;
            }
        }
        switch (imp.impute) {
        case BE_IMPUTE_ZERO: floor_[j] = 0.0f; break;
        case BE_IMPUTE_MIN_SEEN: floor_[j] = min_seen < INFINITY ? min_seen : 0.0f; break;
        default: floor_[j] = be_probe_floor(w->probe_qc[(size_t)j * np + np - 1], imp.scale); break;
        }
    }
    /* 2. group by document */
    uint32_t bits = 0;
    while (bits < 32 && (int64_t)((uint64_t)1 << bits) < r->n_docs) bits++;
    const uint64_t *key = sort_by_doc(w->ent_key, w->ent_tmp, n_ent, bits);
    /* 3. each document's partial score. The floor stands for what the document's
     * unprobed tokens score, so a probed estimate counts only where it beats it: each
     * query token adds max(M, floor), as WARP initialises its table with m_i before
     * taking maxima (a seen document must never rank below an unseen one). A document's
     * entries arrive grouped by query token (the sort is stable and the entries were
     * made token by token), so its score is the floors' sum plus, for each token it was
     * seen at, what its best estimate there adds over the floor: work in its entries
     * rather than in m (a row of m cells, filled and summed per document, cost more
     * than the sort). The best k_refine by selection, not a heap: thousands of documents
     * for a few hundred places, so many enter (bench/RESULTS.md section 5.23). */
    cm_topsel h;
    cm_topsel_init(&h, k_refine, 2 * k_refine, w->keep_s, w->keep_i);
    /* A floor of -inf (probes a graph search left empty) adds nothing when the document
     * was seen at that token and makes its score -inf when not; a NaN floor makes every
     * score NaN, as max(M, NaN) summed would, and a document whose score is NaN is not
     * kept (NaN must not enter the selection, core/topk.h). */
    float floor_sum = 0.0f, base[QUANT_QTOK_MAX];
    uint32_t n_open = 0;
    for (uint32_t j = 0; j < m; j++) {
        int open = floor_[j] == -INFINITY;
        n_open += (uint32_t)open;
        base[j] = open ? 0.0f : floor_[j];
        floor_sum += base[j];
    }
    const float *est = w->ent_est;
    const uint8_t *tok = w->ent_tok;
    uint64_t touched = 0;
    for (size_t i = 0; i < n_ent;) {
        uint32_t d = (uint32_t)(key[i] >> 32);
        size_t i1 = i + 1;
        while (i1 < n_ent && (uint32_t)(key[i1] >> 32) == d) i1++;
        touched++;
        if (((r->deleted[d >> 3] >> (d & 7)) & 1) ||
            (allow && !((allow[d >> 3] >> (d & 7)) & 1))) {
            i = i1;
            continue;
        }
        float sum = floor_sum;
        uint32_t open_seen = 0;
        while (i < i1) {
            uint32_t j = tok[(uint32_t)key[i]];
            float best = floor_[j];
            for (; i < i1 && tok[(uint32_t)key[i]] == j; i++)
                if (est[(uint32_t)key[i]] > best) best = est[(uint32_t)key[i]];
            open_seen += floor_[j] == -INFINITY;
            sum += best - base[j];
        }
        if (open_seen < n_open) sum = -INFINITY;
        if (sum == sum) cm_topsel_push(&h, sum, d);
    }
    cm_topsel_sort(&h);
    for (uint32_t i = 0; i < h.n; i++) {
        docs[i] = (uint32_t)h.id[i];
        if (partial) partial[i] = h.score[i];
    }
    *n_out = h.n;
    /* the rows 1-bit and full-bit scoring of these documents read (pipeline.c reads S on
     * its host thread while score1 runs) */
    ensure_scores(c, w, docs, h.n);
    if (stats) {
        stats->tokens_scored = n_ent;
        stats->docs_touched = touched;
    }
    return CHIMERA_OK;
}

/* Per-document scores of a list of documents, in tasks of `grain` documents: the 1-bit
 * Chamfer estimate (score1) or the centroid interaction (score_ci), which differ only in
 * the kernel that takes each query token's maximum over the document's tokens. */
typedef struct score_job {
    const cpu_ctx *c;
    cpu_worker *w;
    const uint32_t *docs;
    float *scores;
    uint32_t n, grain;
    int interaction; /* 1: centroid interaction; 0: 1-bit estimates */
} score_job;

static void score_range(const score_job *j, uint32_t i0, uint32_t i1)
{
    const be_resident *r = &j->c->r;
    uint32_t m = j->w->m, cb = qm_code1_bytes(r->dim_pad);
    float mx[QUANT_QTOK_MAX];
    for (uint32_t i = i0; i < i1; i++) {
        if (i + 1 < i1) prefetch_doc_head(r, j->docs[i + 1], cb, j->interaction);
        const be_segment *sg = be_doc_segment(r, j->docs[i]);
        int64_t d = j->docs[i] - sg->doc_base;
        int64_t t0 = sg->doc_off[d], n = sg->doc_off[d + 1] - t0;
        for (uint32_t q = 0; q < m; q++) mx[q] = -INFINITY;
        if (j->interaction)
            quant_ci_doc_max(j->c->kt, sg->tok_cid + t0, (size_t)n, j->w->S, m, m, mx);
        else
            quant_est1_doc_max(j->c->kt, &j->w->qs, sg->d1_codes + (size_t)t0 * cb,
                               sg->d1_fact + t0, (size_t)n, sg->tok_cid + t0, j->w->S, m, mx);
        float s = 0.0f;
        for (uint32_t q = 0; q < m; q++) s += mx[q];
        j->scores[i] = n > 0 ? s : -INFINITY;
    }
}

static void score_task(void *ctx, int64_t t, int wi)
{
    (void)wi;
    const score_job *j = ctx;
    uint32_t i0 = (uint32_t)t * j->grain, i1 = i0 + j->grain < j->n ? i0 + j->grain : j->n;
    score_range(j, i0, i1);
}

/* A document list scored on the pool, or on the caller's thread when it is under two
 * tasks' worth. An interaction document costs a fraction of a 1-bit scored one, so its
 * tasks take four times the documents. */
static void score_docs(cpu_ctx *c, int worker, const uint32_t *docs, uint32_t n, float *scores,
                       int interaction)
{
    ensure_scores(c, &c->w[worker], docs, n);
    uint32_t grain = interaction ? 64 : 16;
    score_job j = {c, &c->w[worker], docs, scores, n, grain, interaction};
    if (c->pool && n > 2 * grain) cm_pool_run(c->pool, (n + grain - 1) / grain, score_task, &j);
    else score_range(&j, 0, n);
}

static chimera_status cpu_score1(void *vctx, int worker, const uint32_t *docs, uint32_t n,
                                 float *scores, chimera_error *err)
{
    (void)err;
    score_docs(vctx, worker, docs, n, scores, 0);
    return CHIMERA_OK;
}

static chimera_status cpu_score_ci(void *vctx, int worker, const uint32_t *docs, uint32_t n,
                                   float *scores, chimera_error *err)
{
    cpu_ctx *c = vctx;
    if (n > c->cfg.max_refine)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cpu backend: score_ci of %u documents "
                       "(max %u)", n, c->cfg.max_refine);
    score_docs(c, worker, docs, n, scores, 1);
    return CHIMERA_OK;
}

static const float *cpu_host_scores(void *vctx, int worker)
{
    cpu_ctx *c = vctx;
    ensure_scores(c, &c->w[worker], NULL, 0);
    return c->w[worker].S;
}

static uint64_t cpu_rows_computed(void *vctx, int worker)
{
    return ((cpu_ctx *)vctx)->w[worker].rows_lazy;
}

static uint64_t cpu_probes_walked(void *vctx, int worker)
{
    return ((cpu_ctx *)vctx)->w[worker].walked;
}

/* Every entry but host_centroid_scores, shared by the two faces of this backend. */
#define CPU_IFACE_ENTRIES                                                                  \
    .api_version = BE_API_VERSION, .upload = cpu_upload, .query_begin = cpu_query_begin,  \
    .probe = cpu_probe, .refine = cpu_refine, .score1 = cpu_score1, .release = cpu_free,  \
    .score_ci = cpu_score_ci,                                                             \
    .rows_computed = cpu_rows_computed, .probes_walked = cpu_probes_walked

static const struct cm_backend_i cpu_iface = {
    CPU_IFACE_ENTRIES,
    .host_centroid_scores = cpu_host_scores,
};

/* The same backend without host_centroid_scores: the search pipeline then treats it as
 * it treats a device (its own centroid scores, a host thread a worker; see
 * cpu_backend.h). */
static const struct cm_backend_i cpu_as_device_iface = {CPU_IFACE_ENTRIES};

chimera_status cpu_backend_new(cm_backend *out, chimera_error *err)
{
    cpu_ctx *c = cm_calloc(1, sizeof *c);
    if (!c) return cm_fail(err, CHIMERA_ERR_NOMEM, "cpu backend: out of memory");
    if (pthread_mutex_init(&c->gs_mu, NULL) != 0) {
        cm_free(c);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "cpu backend: cannot create a lock");
    }
    out->iface = &cpu_iface;
    out->ctx = c;
    out->name = "cpu";
    return CHIMERA_OK;
}

chimera_status cpu_backend_new_as_device(cm_backend *out, chimera_error *err)
{
    CM_TRY(cpu_backend_new(out, err));
    out->iface = &cpu_as_device_iface;
    out->name = "cpu-as-device";
    return CHIMERA_OK;
}
