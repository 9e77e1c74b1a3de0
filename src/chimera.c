/* The public API (include/chimera.h): argument checks at the boundary, handle structs,
 * and the translation between public and internal types. Internal modules trust their
 * inputs; this file is where caller mistakes become statuses. Errors go to the caller's
 * chimera_error of each call, never into a handle: handles are read-only after open, so
 * one may be used from many threads at once (search scheduling and its per-call scratch
 * live in search/session.c, profile storage in index/profile.c). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chimera.h"
#include "chimera_impl.h"
#include "backend/backend.h"
#include "core/blas.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/mapreg.h"
#include "core/rng.h"
#include "core/clock.h"
#include "data/corpus.h"
#include "data/synth.h"
#include "data/trec.h"
#include "index/defaults.h"
#include "index/index.h"
#include "index/profile.h"
#include "index/metadata.h"
#include "index/update.h"
#include "search/filter.h"
#include "search/eval.h"
#include "core/progress.h"
#include "search/exact.h"
#include "search/pipeline.h"
#include "search/session.h"
#include "search/tune.h"
#include "core/alloc.h"


struct chimera_queries {
    data_queries q;
};

struct chimera_run {
    data_trec_run r;
};

struct chimera_filter {
    int64_t *ids;
    int64_t n;
    int exclude;
};

/* One generation of an index as a handle sees it: the mapped index and the search
 * sessions over it. Counted: the handle holds one reference, and every call that uses
 * it one more for its duration, so a refresh can move the handle to a new generation
 * while searches finish on the old one, which is freed by whoever lets go of it last. */
typedef struct index_view {
    ix_index ix;
    /* Per-search scratch (engines and their threads), pooled: the one part of the view
     * a search changes, behind its own lock (search/session.h). */
    sp_sessions *sessions;
    int refs; /* guarded by the handle's mu */
} index_view;

struct chimera_index {
    char *dir;
    int verify;
    pthread_mutex_t mu; /* guards view and every view's refs */
    index_view *view;
};

/* The build's calibration of the default search parameters (ix_build_opts.calibrate),
 * defined with the tuning below. */
typedef struct calibrate_ctx {
    int n_threads;
    uint64_t seed;
} calibrate_ctx;
static chimera_status calibrate_index(void *user, const data_corpus *c, const char *dir,
                                      ix_defaults *out, chimera_error *err);

static void view_free(index_view *v)
{
    if (!v) return;
    sp_sessions_free(v->sessions);
    ix_close(&v->ix);
    cm_free(v);
}

static chimera_status view_open(const char *dir, int verify, index_view **out, chimera_error *err)
{
    *out = NULL;
    index_view *v = cm_calloc(1, sizeof *v);
    if (!v) return cm_fail(err, CHIMERA_ERR_NOMEM, "index: out of memory");
    chimera_status s = ix_open(dir, verify, &v->ix, err);
    if (s != CHIMERA_OK) {
        cm_free(v);
        return s;
    }
    s = sp_sessions_new(&v->ix, &v->sessions, err);
    if (s != CHIMERA_OK) {
        ix_close(&v->ix);
        cm_free(v);
        return s;
    }
    v->refs = 1;
    *out = v;
    return CHIMERA_OK;
}

/* The handle's current view, held until view_put. The handle is logically immutable to
 * its readers; only the reference count changes, under the handle's lock. */
static index_view *view_get(const chimera_index *h)
{
    chimera_index *m = (chimera_index *)h;
    pthread_mutex_lock(&m->mu);
    index_view *v = m->view;
    v->refs++;
    pthread_mutex_unlock(&m->mu);
    return v;
}

static void view_put(const chimera_index *h, index_view *v)
{
    chimera_index *m = (chimera_index *)h;
    pthread_mutex_lock(&m->mu);
    int last = --v->refs == 0;
    pthread_mutex_unlock(&m->mu);
    if (last) view_free(v);
}

/* Methods take an optional `err`: point a NULL one at a scratch record so the rest of
 * the call can write it unconditionally, and start from a clear one. */
#define ERR_OPTIONAL(err)                                                                      \
    chimera_error err##_scratch_;                                                              \
    if (!(err)) (err) = &err##_scratch_;                                                       \
    cm_error_clear(err)

/* n_threads of an options struct: 0 (one per CPU) to CHIMERA_MAX_THREADS. */
static chimera_status check_threads(int n_threads, const char *what, chimera_error *err)
{
    if (n_threads < 0 || n_threads > CHIMERA_MAX_THREADS)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "%s: n_threads %d, expected 0 (one per CPU) to %d", what, n_threads,
                       CHIMERA_MAX_THREADS);
    return CHIMERA_OK;
}

const char *chimera_status_str(chimera_status status)
{
    switch (status) {
    case CHIMERA_OK: return "CHIMERA_OK";
    case CHIMERA_ERR_INVALID_ARG: return "CHIMERA_ERR_INVALID_ARG";
    case CHIMERA_ERR_NOMEM: return "CHIMERA_ERR_NOMEM";
    case CHIMERA_ERR_IO: return "CHIMERA_ERR_IO";
    case CHIMERA_ERR_FORMAT: return "CHIMERA_ERR_FORMAT";
    case CHIMERA_ERR_CORRUPT: return "CHIMERA_ERR_CORRUPT";
    case CHIMERA_ERR_VERSION: return "CHIMERA_ERR_VERSION";
    case CHIMERA_ERR_DIM: return "CHIMERA_ERR_DIM";
    case CHIMERA_ERR_VALUE: return "CHIMERA_ERR_VALUE";
    case CHIMERA_ERR_EMPTY: return "CHIMERA_ERR_EMPTY";
    case CHIMERA_ERR_DEVICE: return "CHIMERA_ERR_DEVICE";
    case CHIMERA_ERR_UNSUPPORTED: return "CHIMERA_ERR_UNSUPPORTED";
    case CHIMERA_ERR_CANCELLED: return "CHIMERA_ERR_CANCELLED";
    case CHIMERA_ERR_INTERNAL: return "CHIMERA_ERR_INTERNAL";
    case CHIMERA_ERR_BUSY: return "CHIMERA_ERR_BUSY";
    case CHIMERA_ERR_CONFLICT: return "CHIMERA_ERR_CONFLICT";
    }
    return "CHIMERA_ERR_UNKNOWN";
}

const char *chimera_version(void) { return CHIMERA_VERSION_STRING; }

/* ---- enums: names for front ends ----------------------------------------------------- */

/* The names of an enum's values, indexed by value (0..n-1). */
static const char *const impute_names[] = {"probe", "zero", "min"};
static const char *const probe_names[] = {"auto", "brute", "graph"};
static const char *const backend_names[] = {"auto", "cpu", "cuda"};
static const char *const rerank_names[] = {"none", "f16", "bf16", "f32"};

static const char *enum_name(const char *const *names, size_t n, int v)
{
    return v >= 0 && (size_t)v < n ? names[v] : NULL;
}

static int enum_parse(const char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; name && i < n; i++)
        if (strcmp(name, names[i]) == 0) return (int)i;
    return -1;
}

#define ENUM_HELPERS(type, names)                                                          \
    const char *type##_name(type v)                                                        \
    {                                                                                      \
        return enum_name(names, sizeof names / sizeof names[0], (int)v);                   \
    }                                                                                      \
    chimera_status type##_parse(const char *name, type *out)                               \
    {                                                                                      \
        int v = enum_parse(names, sizeof names / sizeof names[0], name);                   \
        if (v < 0 || !out) return CHIMERA_ERR_INVALID_ARG;                                 \
        *out = (type)v;                                                                    \
        return CHIMERA_OK;                                                                 \
    }

ENUM_HELPERS(chimera_impute, impute_names)
ENUM_HELPERS(chimera_probe, probe_names)
ENUM_HELPERS(chimera_backend, backend_names)
ENUM_HELPERS(chimera_rerank, rerank_names)

/* ---- options initialisers: zero is every field's default ----------------------------- */

void chimera_corpus_opts_default(chimera_corpus_opts *o) { if (o) memset(o, 0, sizeof *o); }
void chimera_exact_opts_default(chimera_exact_opts *o) { if (o) memset(o, 0, sizeof *o); }
void chimera_build_opts_default(chimera_build_opts *o) { if (o) memset(o, 0, sizeof *o); }
void chimera_open_opts_default(chimera_open_opts *o) { if (o) memset(o, 0, sizeof *o); }
void chimera_search_opts_default(chimera_search_opts *o) { if (o) memset(o, 0, sizeof *o); }
void chimera_synth_opts_default(chimera_synth_opts *o) { if (o) memset(o, 0, sizeof *o); }

const char *chimera_simd_level(void) { return cm_simd_level_name(cm_simd_level_get()); }

const char *chimera_blas_suggested_coretype(void) { return cm_blas_suggested_coretype(); }

size_t chimera_mapping_describe(const void *addr, char *buf, size_t n)
{
    if (!buf) n = 0;
    return cm_map_describe(addr, buf, n);
}

void chimera_runtime_info_get(chimera_runtime_info *info)
{
    memset(info, 0, sizeof *info);
    info->simd = cm_simd_level_name(cm_simd_level_get());
    info->blas_core = cm_blas_corename();
    info->blas_suggested_coretype = cm_blas_suggested_coretype();
    info->n_cpus = cm_cpu_count();
    info->cuda_compiled = backend_cuda_compiled();
    info->n_cuda_devices = backend_cuda_device_count(info->cuda_status, sizeof info->cuda_status);
    info->blas_threads_kept = cm_blas_threads_kept();
}

/* ---- corpus ------------------------------------------------------------------------ */

static chimera_status corpus_alloc(chimera_corpus **out, chimera_error *err)
{
    *out = cm_calloc(1, sizeof **out);
    return *out ? CHIMERA_OK : cm_fail(err, CHIMERA_ERR_NOMEM, "corpus: out of memory");
}

chimera_status chimera_corpus_open(const char *tokens_npy, const char *doclens_npy,
                                   const char *ids_path, const chimera_corpus_opts *opts,
                                   chimera_corpus **out, chimera_error *err)
{
    if (!out) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "corpus_open: out is NULL");
    *out = NULL;
    if (!tokens_npy || !doclens_npy)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "corpus_open: tokens and doclens paths are required");
    chimera_corpus *h;
    CM_TRY(corpus_alloc(&h, err));
    chimera_status s = data_corpus_open(&h->c, tokens_npy, doclens_npy, ids_path, opts, err);
    if (s != CHIMERA_OK) {
        cm_free(h);
        return s;
    }
    h->src_tokens = cm_strdup(tokens_npy);
    h->src_doclens = cm_strdup(doclens_npy);
    h->src_ids = ids_path ? cm_strdup(ids_path) : NULL;
    if (!h->src_tokens || !h->src_doclens || (ids_path && !h->src_ids)) {
        chimera_corpus_close(h);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "corpus: out of memory");
    }
    *out = h;
    return CHIMERA_OK;
}

chimera_status chimera_corpus_wrap(const float *tokens, int64_t n_tokens, uint32_t dim,
                                   const int64_t *doclens, int64_t n_docs, const int64_t *ids,
                                   const chimera_corpus_opts *opts, chimera_corpus **out,
                                   chimera_error *err)
{
    if (!out) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "corpus_wrap: out is NULL");
    *out = NULL;
    chimera_corpus *h;
    CM_TRY(corpus_alloc(&h, err));
    chimera_status s =
        data_corpus_wrap(&h->c, tokens, n_tokens, dim, doclens, n_docs, ids, opts, err);
    if (s != CHIMERA_OK) {
        cm_free(h);
        return s;
    }
    *out = h;
    return CHIMERA_OK;
}

int64_t chimera_corpus_n_docs(const chimera_corpus *c) { return c ? c->c.n_docs : 0; }
int64_t chimera_corpus_n_tokens(const chimera_corpus *c) { return c ? c->c.n_tokens : 0; }
uint32_t chimera_corpus_dim(const chimera_corpus *c) { return c ? c->c.dim : 0; }

void chimera_corpus_close(chimera_corpus *c)
{
    if (!c) return;
    data_corpus_free(&c->c);
    cm_free(c->src_tokens);
    cm_free(c->src_doclens);
    cm_free(c->src_ids);
    cm_free(c);
}

/* ---- queries ----------------------------------------------------------------------- */

chimera_status chimera_queries_read(const char *queries_npy, const char *qlens_npy,
                                    chimera_queries **out, chimera_error *err)
{
    if (!out) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "queries_read: out is NULL");
    *out = NULL;
    if (!queries_npy) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "queries_read: path is NULL");
    chimera_queries *h = cm_calloc(1, sizeof *h);
    if (!h) return cm_fail(err, CHIMERA_ERR_NOMEM, "queries: out of memory");
    chimera_status s = data_queries_open(&h->q, queries_npy, qlens_npy, err);
    if (s != CHIMERA_OK) {
        cm_free(h);
        return s;
    }
    *out = h;
    return CHIMERA_OK;
}

chimera_status chimera_queries_new(const float *tokens, int64_t n_queries, uint32_t dim,
                                   const int64_t *qlens, uint32_t m, chimera_queries **out,
                                   chimera_error *err)
{
    if (!out) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "queries_new: out is NULL");
    *out = NULL;
    chimera_queries *h = cm_calloc(1, sizeof *h);
    if (!h) return cm_fail(err, CHIMERA_ERR_NOMEM, "queries: out of memory");
    chimera_status s = data_queries_new(&h->q, tokens, n_queries, dim, qlens, m, err);
    if (s != CHIMERA_OK) {
        cm_free(h);
        return s;
    }
    *out = h;
    return CHIMERA_OK;
}

int64_t chimera_queries_count(const chimera_queries *q) { return q ? q->q.n : 0; }
uint32_t chimera_queries_dim(const chimera_queries *q) { return q ? q->q.dim : 0; }

chimera_status chimera_queries_slice(const chimera_queries *q, int64_t start, int64_t count,
                                     chimera_queries **out, chimera_error *err)
{
    if (!out) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "queries_slice: out is NULL");
    *out = NULL;
    if (!q || start < 0 || count <= 0 || start + count > q->q.n)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "queries_slice: [%lld, +%lld) is outside the %lld queries",
                       (long long)start, (long long)count, (long long)(q ? q->q.n : 0));
    int64_t *lens = cm_malloc((size_t)count * sizeof *lens);
    if (!lens) return cm_fail(err, CHIMERA_ERR_NOMEM, "queries: out of memory");
    for (int64_t i = 0; i < count; i++) lens[i] = q->q.off[start + i + 1] - q->q.off[start + i];
    chimera_status s = chimera_queries_new(q->q.tokens + q->q.off[start] * q->q.dim, count,
                                           q->q.dim, lens, 0, out, err);
    cm_free(lens);
    return s;
}

uint32_t chimera_queries_len(const chimera_queries *q, int64_t i)
{
    if (!q || i < 0 || i >= q->q.n) return 0;
    return (uint32_t)(q->q.off[i + 1] - q->q.off[i]);
}

const float *chimera_queries_tokens(const chimera_queries *q, int64_t i)
{
    if (!q || i < 0 || i >= q->q.n) return NULL;
    return q->q.tokens + (size_t)q->q.off[i] * q->q.dim;
}

void chimera_queries_free(chimera_queries *q)
{
    if (!q) return;
    data_queries_free(&q->q);
    cm_free(q);
}

/* ---- exact search ------------------------------------------------------------------ */

chimera_status chimera_corpus_search(const chimera_corpus *corpus, const chimera_queries *queries,
                                     uint32_t k, const chimera_exact_opts *opts, int64_t *ids,
                                     float *scores, chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (!corpus || !queries || !ids || !scores)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "chimera_corpus_search: corpus, queries, ids and scores are required");
    chimera_exact_opts o = {0};
    if (opts) o = *opts;
    CM_TRY(check_threads(o.n_threads, "exact search", err));
    if (!o.cancel)
        return sp_exact_search(&corpus->c, &queries->q, k, o.n_threads, o.progress,
                               o.progress_user, ids, scores, err);
    cm_watch watch;
    cm_watch_init(&watch, o.progress, o.progress_user, o.cancel, o.cancel_user);
    return sp_exact_search_watch(&corpus->c, &queries->q, k, o.n_threads, &watch, ids, scores,
                                 err);
}

/* ---- runs and evaluation ----------------------------------------------------------- */

chimera_status chimera_results_write(const char *path, int64_t n_queries, uint32_t k,
                                     const int64_t *ids, const float *scores, const char *tag,
                                     chimera_error *err)
{
    if (!path || !ids || !scores || n_queries < 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "results_write: path, ids and scores are required");
    return data_trec_write(path, n_queries, k, ids, scores, tag ? tag : "chimera", err);
}

static chimera_status run_read(const char *path, int is_qrels, chimera_run **out,
                               chimera_error *err)
{
    if (!out) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "run_read: out is NULL");
    *out = NULL;
    if (!path) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "run_read: path is NULL");
    chimera_run *h = cm_calloc(1, sizeof *h);
    if (!h) return cm_fail(err, CHIMERA_ERR_NOMEM, "run: out of memory");
    chimera_status s = data_trec_read(path, is_qrels, &h->r, err);
    if (s != CHIMERA_OK) {
        cm_free(h);
        return s;
    }
    *out = h;
    return CHIMERA_OK;
}

chimera_status chimera_run_read(const char *path, chimera_run **out, chimera_error *err)
{
    return run_read(path, 0, out, err);
}

chimera_status chimera_run_read_qrels(const char *path, chimera_run **out, chimera_error *err)
{
    return run_read(path, 1, out, err);
}

int64_t chimera_run_n_queries(const chimera_run *run) { return run ? run->r.n_q : 0; }

int64_t chimera_run_depth(const chimera_run *run)
{
    int64_t depth = 0;
    for (int64_t q = 0; run && q < run->r.n_q; q++) {
        int64_t n = run->r.q_off[q + 1] - run->r.q_off[q];
        if (n > depth) depth = n;
    }
    return depth;
}

void chimera_run_free(chimera_run *run)
{
    if (!run) return;
    data_trec_free(&run->r);
    cm_free(run);
}

chimera_status chimera_run_eval_recall(const chimera_run *run, const chimera_run *truth,
                                       uint32_t k, double *recall, int64_t *n_queries,
                                       chimera_error *err)
{
    if (!run || !truth || !recall || run->r.is_qrels || truth->r.is_qrels)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "chimera_run_eval_recall: needs two runs and an output");
    return sp_eval_recall(&run->r, &truth->r, k, recall, n_queries, err);
}

chimera_status chimera_run_eval_qrels(const chimera_run *run, const chimera_run *qrels,
                                      double *mrr10, double *ndcg10, int64_t *n_queries,
                                      chimera_error *err)
{
    if (!run || !qrels || !mrr10 || !ndcg10 || run->r.is_qrels || !qrels->r.is_qrels)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "chimera_run_eval_qrels: needs a run, qrels and outputs");
    return sp_eval_qrels(&run->r, &qrels->r, mrr10, ndcg10, n_queries, err);
}

/* ---- synthetic corpora ------------------------------------------------------------- */

chimera_status chimera_synth_write(const char *out_dir, const chimera_synth_opts *opts,
                                   chimera_error *err)
{
    if (!out_dir)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "chimera_synth_write: out_dir is NULL");
    return data_synth_write(out_dir, opts, err);
}

/* ---- index ------------------------------------------------------------------------- */

chimera_status chimera_index_build(const chimera_corpus *corpus, const char *dir,
                                   const chimera_build_opts *opts, chimera_build_report *report,
                                   chimera_error *err)
{
    if (!corpus || !dir)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "index_build: corpus and dir are required");
    chimera_build_opts o = {0};
    if (opts) o = *opts;
    if (o.bits > 8)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "index_build: bits = %u, expected 1..8", o.bits);
    CM_TRY(check_threads(o.n_threads, "index_build", err));
    if (!chimera_rerank_name(o.rerank))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "index_build: rerank %d, expected 0..3 (none, f16, bf16, f32)", (int)o.rerank);
    if (o.graph_degree > GRAPH_DEGREE_MAX)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "index_build: graph degree %u, expected 1..%d (0: default)", o.graph_degree,
                       GRAPH_DEGREE_MAX);
    calibrate_ctx cal = {o.n_threads, o.seed};
    ix_build_opts bo = {.bits = o.bits, .n_clusters = o.n_clusters,
                        .graph_degree = o.graph_degree, .n_threads = o.n_threads,
                        .seed = o.seed, .no_sync = o.no_sync, .progress = o.progress,
                        .progress_user = o.progress_user, .cancel = o.cancel,
                        .cancel_user = o.cancel_user, .rerank = (int)o.rerank,
                        .calibrate = o.no_calibrate ? NULL : calibrate_index,
                        .calibrate_user = &cal,
                        .source_tokens = corpus->src_tokens,
                        .source_doclens = corpus->src_doclens,
                        .source_ids = corpus->src_ids,
                        .codebook = o.codebook ? &o.codebook->cb : NULL};
    ix_build_report r;
    chimera_status s = ix_build(&corpus->c, dir, &bo, &r, err);
    if (report) {
        memset(report, 0, sizeof *report);
        report->n_phases = r.n_phases;
        for (int i = 0; i < r.n_phases && i < CHIMERA_MAX_PHASES; i++) {
            report->phase[i] = r.phase[i];
            report->seconds[i] = r.seconds[i];
        }
        report->total_seconds = r.total_seconds;
        report->peak_rss_bytes = r.peak_rss;
        report->n_clusters = r.n_clusters;
        report->assign_recall = r.assign_recall;
        report->index_bytes = r.bytes_written;
        report->calibrate_target = r.defaults.n ? r.defaults.target : 0;
        report->n_calibrated = r.defaults.n;
        for (int i = 0; i < r.defaults.n; i++) {
            const ix_default *e = &r.defaults.d[i];
            report->calibrated[i] = (chimera_calibration){
                e->k, e->params.n_probe, e->params.k_refine, e->params.k_fullbit,
                e->params.chunks, e->recall, e->recall_low, e->reached, e->params.k_interaction,
                e->params.impute_scale};
        }
    }
    return s;
}

chimera_status chimera_index_open(const char *dir, const chimera_open_opts *opts,
                                  chimera_index **out, chimera_error *err)
{
    if (!out) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "index_open: out is NULL");
    *out = NULL;
    if (!dir) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "index_open: dir is NULL");
    chimera_index *h = cm_calloc(1, sizeof *h);
    if (!h) return cm_fail(err, CHIMERA_ERR_NOMEM, "index: out of memory");
    h->verify = opts && opts->verify;
    h->dir = cm_malloc(strlen(dir) + 1);
    if (!h->dir || pthread_mutex_init(&h->mu, NULL) != 0) {
        cm_free(h->dir);
        cm_free(h);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "index: out of memory");
    }
    strcpy(h->dir, dir);
    chimera_status s = view_open(dir, h->verify, &h->view, err);
    if (s != CHIMERA_OK) {
        pthread_mutex_destroy(&h->mu);
        cm_free(h->dir);
        cm_free(h);
        return s;
    }
    *out = h;
    return CHIMERA_OK;
}

void chimera_index_close(chimera_index *index)
{
    if (!index) return;
    view_free(index->view); /* no call is in flight: the handle's is the last reference */
    pthread_mutex_destroy(&index->mu);
    cm_free(index->dir);
    cm_free(index);
}

chimera_status chimera_index_refresh(chimera_index *index, int *changed, chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (changed) *changed = 0;
    if (!index) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "index_refresh: index is NULL");
    /* the manifest alone says whether there is anything new */
    uint64_t gen, data, cur_gen, cur_data;
    CM_TRY(ix_peek(index->dir, &gen, &data, err));
    index_view *cur = view_get(index);
    ix_profile_identity(&cur->ix, &cur_gen, &cur_data);
    view_put(index, cur);
    int same = gen == cur_gen && data == cur_data;
    if (same) return CHIMERA_OK;
    index_view *v;
    CM_TRY(view_open(index->dir, index->verify, &v, err));
    /* engines that can follow (a GPU's: new segments and the bitmap only) move over */
    index_view *prev = view_get(index);
    sp_sessions_adopt(v->sessions, prev->sessions);
    view_put(index, prev);
    pthread_mutex_lock(&index->mu);
    index_view *old = index->view;
    index->view = v;
    int last = --old->refs == 0; /* the handle's reference moves to the new view */
    pthread_mutex_unlock(&index->mu);
    if (last) view_free(old);
    if (changed) *changed = 1;
    return CHIMERA_OK;
}

uint64_t chimera_index_generation(const chimera_index *index)
{
    if (!index) return 0;
    index_view *v = view_get(index);
    uint64_t g, data;
    ix_profile_identity(&v->ix, &g, &data);
    view_put(index, v);
    return g;
}

chimera_status chimera_index_check(const chimera_index *index, chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (!index) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "index_check: index is NULL");
    index_view *v = view_get(index);
    chimera_status s = ix_check(&v->ix, err);
    view_put(index, v);
    return s;
}

int64_t chimera_index_n_docs(const chimera_index *index)
{
    if (!index) return 0;
    index_view *v = view_get(index);
    int64_t n = v->ix.n_docs - v->ix.n_deleted;
    view_put(index, v);
    return n;
}

int64_t chimera_index_ids(const chimera_index *index, int64_t *ids, int64_t cap)
{
    if (!index) return 0;
    index_view *v = view_get(index);
    int64_t n = 0;
    for (uint32_t si = 0; si < v->ix.n_segs; si++) {
        const ix_segment *sg = &v->ix.segs[si];
        for (int64_t d = 0; d < sg->n_docs; d++) {
            if (ix_is_deleted(&v->ix, sg->doc_base + d)) continue;
            if (ids && n < cap) ids[n] = sg->doc_ids[d];
            n++;
        }
    }
    view_put(index, v);
    return n;
}

uint32_t chimera_index_dim(const chimera_index *index)
{
    if (!index) return 0;
    index_view *v = view_get(index);
    uint32_t d = v->ix.dim;
    view_put(index, v);
    return d;
}

/* ---- changes ----------------------------------------------------------------------- */

void chimera_update_opts_default(chimera_update_opts *o) { if (o) memset(o, 0, sizeof *o); }

static void to_ix_opts(const chimera_update_opts *o, ix_update_opts *io)
{
    memset(io, 0, sizeof *io);
    if (!o) return;
    io->missing_ok = o->missing_ok;
    io->no_sync = o->no_sync;
    io->lock_timeout_ms = o->lock_timeout_ms;
    io->progress = o->progress;
    io->progress_user = o->progress_user;
    io->cancel = o->cancel;
    io->cancel_user = o->cancel_user;
    io->n_threads = o->n_threads;
    io->filter_timeout_ms = o->filter_timeout_ms;
}

static void to_report(const ix_update_report *r, chimera_update_report *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    out->docs_added = r->docs_added;
    out->tokens_added = r->tokens_added;
    out->docs_deleted = r->docs_deleted;
    out->ids_missing = r->ids_missing;
    out->generation = r->generation;
    out->seconds = r->seconds;
    out->assign_seconds = r->assign_seconds;
    out->encode_seconds = r->encode_seconds;
    out->write_seconds = r->write_seconds;
    out->drift_below = r->drift_below;
    out->merged = r->merged;
    out->n_docs = r->n_docs;
    out->n_deleted = r->n_deleted;
    out->n_segments = r->n_segments;
    out->peak_rss_bytes = r->peak_rss;
    out->assign_recall = r->assign_recall;
    out->meta_repaired = r->meta_repaired;
    out->meta_records = r->meta_records;
}

/* A whole file into memory (cm_malloc'd). */
static chimera_status slurp(const char *path, char **text, size_t *len, chimera_error *err)
{
    *text = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 0;
    for (;;) {
        if (*len == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            char *t = cm_realloc(*text, cap);
            if (!t) {
                fclose(f);
                cm_free(*text);
                *text = NULL;
                return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", path);
            }
            *text = t;
        }
        size_t r = fread(*text + *len, 1, cap - *len, f);
        *len += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        cm_free(*text);
        *text = NULL;
        return cm_fail(err, CHIMERA_ERR_IO, "%s: read failed", path);
    }
    return CHIMERA_OK;
}

static chimera_status add_or_update(const char *dir, const chimera_corpus *docs, int replace,
                                    const chimera_update_opts *opts, chimera_update_report *report,
                                    chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (!dir || !docs)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "index_%s: dir and docs are required",
                       replace ? "update" : "add");
    if (opts) CM_TRY(check_threads(opts->n_threads, replace ? "index_update" : "index_add", err));
    ix_update_opts io;
    ix_update_report r;
    to_ix_opts(opts, &io);
    char *mt = NULL;
    size_t ml = 0;
    if (opts && opts->metadata) CM_TRY(slurp(opts->metadata, &mt, &ml, err));
    chimera_status s = ix_add(dir, &docs->c, replace, mt, ml, opts ? opts->metadata : NULL, &io,
                              &r, err);
    cm_free(mt);
    to_report(&r, report);
    return s;
}

chimera_status chimera_index_add(const char *dir, const chimera_corpus *docs,
                                 const chimera_update_opts *opts, chimera_update_report *report,
                                 chimera_error *err)
{
    return add_or_update(dir, docs, 0, opts, report, err);
}

chimera_status chimera_index_update(const char *dir, const chimera_corpus *docs,
                                    const chimera_update_opts *opts,
                                    chimera_update_report *report, chimera_error *err)
{
    return add_or_update(dir, docs, 1, opts, report, err);
}

chimera_status chimera_ids_read(const char *path, int64_t **ids, int64_t *n, chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (!path || !ids || !n) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "ids_read: path, ids and n are required");
    *ids = NULL;
    *n = 0;
    return data_ids_read(path, ids, n, err);
}

void chimera_ids_free(int64_t *ids) { cm_free(ids); }

chimera_status chimera_index_delete(const char *dir, const int64_t *ids, int64_t n,
                                    const chimera_update_opts *opts,
                                    chimera_update_report *report, chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (!dir || (!ids && n > 0) || n < 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "index_delete: dir and n >= 0 ids are required");
    ix_update_opts io;
    ix_update_report r;
    to_ix_opts(opts, &io);
    chimera_status s = ix_delete(dir, ids, n, &io, &r, err);
    to_report(&r, report);
    return s;
}

chimera_status chimera_index_delete_where(const char *dir, const char *filter,
                                          const char *const *args, int n_args,
                                          const chimera_update_opts *opts,
                                          chimera_update_report *report, chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (!dir || !filter || n_args < 0 || (n_args > 0 && !args))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "index_delete_where: dir, a filter and n_args >= 0 arguments are required");
    ix_update_opts io;
    ix_update_report r;
    to_ix_opts(opts, &io);
    chimera_status s = ix_delete_where(dir, filter, args, n_args, &io, &r, err);
    to_report(&r, report);
    return s;
}

chimera_status chimera_index_meta_import(const char *dir, const char *path, int csv,
                                         const chimera_update_opts *opts,
                                         chimera_update_report *report, chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (!dir || !path)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "index_meta_import: dir and path are required");
    ix_update_opts io;
    ix_update_report r;
    int64_t n = 0;
    to_ix_opts(opts, &io);
    chimera_status s = ix_meta_import(dir, path, csv != 0, &io, &r, &n, err);
    r.meta_records = n;
    to_report(&r, report);
    return s;
}

chimera_status chimera_index_compact(const char *dir, const chimera_update_opts *opts,
                                     chimera_update_report *report, chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (!dir) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "index_compact: dir is required");
    ix_update_opts io;
    ix_update_report r;
    to_ix_opts(opts, &io);
    chimera_status s;
    if (opts && opts->recluster) {
        CM_TRY(check_threads(opts->n_threads, "index_compact", err));
        /* new centroids: the defaults are measured again on them, as a build's */
        calibrate_ctx cal = {opts->n_threads, opts->seed};
        ix_recluster_opts ro = {opts->n_clusters, opts->n_threads, opts->seed, calibrate_index, &cal};
        s = ix_recluster(dir, &io, &ro, &r, err);
    } else {
        s = ix_compact(dir, &io, &r, err);
    }
    to_report(&r, report);
    return s;
}

chimera_status chimera_index_info_read(const char *dir, chimera_index_info *info,
                                       chimera_error *err)
{
    if (!dir || !info) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "index_info: dir and info are required");
    return ix_info(dir, info, err);
}

/* ---- search ------------------------------------------------------------------------ */

chimera_status chimera_filter_new(const int64_t *ids, int64_t n, int exclude,
                                  chimera_filter **out, chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (!out) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "filter_new: out is NULL");
    *out = NULL;
    if (n < 0 || (n > 0 && !ids))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "filter_new: %lld ids", (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0)
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                           "filter_new: id %lld (entry %lld) is negative; ids are >= 0",
                           (long long)ids[i], (long long)i);
    chimera_filter *f = cm_calloc(1, sizeof *f);
    if (f) f->ids = cm_malloc((size_t)(n ? n : 1) * sizeof *f->ids);
    if (!f || !f->ids) {
        if (f) cm_free(f->ids);
        cm_free(f);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "filter_new: out of memory");
    }
    if (n) memcpy(f->ids, ids, (size_t)n * sizeof *ids);
    f->n = n;
    f->exclude = exclude != 0;
    *out = f;
    return CHIMERA_OK;
}

chimera_status chimera_filter_sql(const chimera_index *index, const char *expr,
                                  const char *const *args, int n_args, int timeout_ms,
                                  chimera_filter **out, chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (!out) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "filter_sql: out is NULL");
    *out = NULL;
    if (!index || !expr || n_args < 0 || (n_args > 0 && !args))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "filter_sql: index, expr and args are required");
    index_view *v = view_get(index);
    int64_t *ids = NULL, n = 0;
    chimera_status s = ix_meta_filter(index->dir, &v->ix, expr, args, n_args, timeout_ms, &ids,
                                      &n, err);
    view_put(index, v);
    if (s == CHIMERA_OK) s = chimera_filter_new(ids, n, 0, out, err);
    cm_free(ids);
    return s;
}

void chimera_filter_free(chimera_filter *f)
{
    if (!f) return;
    cm_free(f->ids);
    cm_free(f);
}

int64_t chimera_filter_ids(const chimera_filter *f, int64_t *ids, int64_t cap, int *exclude)
{
    if (exclude) *exclude = f ? f->exclude : 0;
    if (!f) return 0;
    int64_t n = cap < f->n ? cap : f->n;
    if (ids && n > 0) memcpy(ids, f->ids, (size_t)n * sizeof *ids);
    return f->n;
}

/* The filters of one call resolved against the view it searches: each distinct filter
 * once. per_query[i]: query i's resolved filter, or NULL. */
typedef struct call_filters {
    const chimera_filter **keys;
    sp_filter *resolved;
    int n;
    const sp_filter **per_query;
} call_filters;

static void call_filters_free(call_filters *cf)
{
    for (int i = 0; i < cf->n; i++) sp_filter_free(&cf->resolved[i]);
    cm_free(cf->keys);
    cm_free(cf->resolved);
    cm_free(cf->per_query);
    memset(cf, 0, sizeof *cf);
}

static chimera_status call_filters_resolve(const ix_index *ix, const chimera_search_opts *o,
                                           int64_t nq, call_filters *cf, chimera_error *err)
{
    memset(cf, 0, sizeof *cf);
    if (!o || (!o->filter && !o->query_filters)) return CHIMERA_OK;
    cf->keys = cm_calloc((size_t)nq + 1, sizeof *cf->keys);
    cf->resolved = cm_calloc((size_t)nq + 1, sizeof *cf->resolved);
    cf->per_query = cm_calloc((size_t)nq + 1, sizeof *cf->per_query);
    if (!cf->keys || !cf->resolved || !cf->per_query) {
        call_filters_free(cf);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "search: out of memory for filters");
    }
    for (int64_t i = 0; i < nq; i++) {
        const chimera_filter *f = o->query_filters ? o->query_filters[i] : o->filter;
        if (!f) continue;
        int at = -1;
        for (int j = 0; j < cf->n && at < 0; j++)
            if (cf->keys[j] == f) at = j;
        if (at < 0) {
            chimera_status s = sp_filter_resolve(ix, f->ids, f->n, f->exclude,
                                                 &cf->resolved[cf->n], err);
            if (s != CHIMERA_OK) {
                call_filters_free(cf);
                return s;
            }
            cf->keys[cf->n] = f;
            at = cf->n++;
        }
        cf->per_query[i] = &cf->resolved[at];
    }
    return CHIMERA_OK;
}

void chimera_search_params_default(uint32_t k, chimera_search_params *p)
{
    if (!p) return;
    /* Measured on the demo corpus (bench/RESULTS.md): these reach Recall@10 0.99 and
     * Recall@100 0.98 against exact search; `chimera tune` finds faster settings for a
     * given target. k_refine is a multiple of k_fullbit because refinement is cheap per
     * document next to full 1-bit scoring of all its tokens. */
    if (k == 0) k = 10;
    if (!p->n_probe) p->n_probe = k <= 10 ? 8 : 16;
    if (!p->k_fullbit) p->k_fullbit = k * 4 > 40 ? k * 4 : 40;
    if (!p->k_refine) p->k_refine = p->k_fullbit * 4;
    if (!p->chunks) p->chunks = 4;
    if (p->impute_scale == 0) p->impute_scale = 1.0f;
}

static chimera_status search_view(index_view *v, const data_queries *q, uint32_t k,
                                  const chimera_search_params *params,
                                  const chimera_search_opts *opts, int64_t *ids, float *scores,
                                  chimera_search_profile *profile, chimera_error *err);

/* The zero fields of *p: the index's calibrated setting for k, then the library's. A
 * field the caller set is kept even when it came with others left to the index. */
static int view_params_default(const ix_index *ix, uint32_t k, chimera_search_params *p)
{
    chimera_search_params cal;
    int used = ix_defaults_find(ix, k, &cal);
    if (used) {
        /* k_interaction is a fraction of k_refine: taken only with it */
        if (!p->k_interaction && !p->k_refine) p->k_interaction = cal.k_interaction;
        if (!p->n_probe) p->n_probe = cal.n_probe;
        if (!p->k_refine) p->k_refine = cal.k_refine;
        if (!p->k_fullbit) p->k_fullbit = cal.k_fullbit;
        if (!p->chunks) p->chunks = cal.chunks;
        if (p->impute_scale == 0) p->impute_scale = cal.impute_scale; /* 0 when none */
    }
    chimera_search_params_default(k, p);
    return used;
}

int chimera_index_params_default(const chimera_index *index, uint32_t k, chimera_search_params *p)
{
    if (!p) return 0;
    if (!index) {
        chimera_search_params_default(k, p);
        return 0;
    }
    index_view *v = view_get(index);
    int used = view_params_default(&v->ix, k ? k : 10, p);
    view_put(index, v);
    return used;
}

chimera_status chimera_index_search(const chimera_index *h, const chimera_queries *queries,
                                    uint32_t k, const chimera_search_params *params,
                                    const chimera_search_opts *opts, int64_t *ids,
                                    float *scores, chimera_search_profile *profile,
                                    chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (!h || !queries || !ids || !scores || k == 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "search: index, queries, ids, scores and k > 0 are required");
    const data_queries *q = &queries->q;
    index_view *v = view_get(h);
    chimera_status s = search_view(v, q, k, params, opts, ids, scores, profile, err);
    view_put(h, v);
    return s;
}

/* The fields of a tuned profile (params->recall) where *cp has zeros. err is not NULL. */
static chimera_status params_from_profile(const ix_index *ix, uint32_t k,
                                          chimera_search_params *cp, chimera_error *err)
{
    if (!(cp->recall > 0 && cp->recall <= 1)) /* NaN too */
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "search: recall %g, expected a target in (0, 1] (a tuned profile's), "
                       "or 0 for none", cp->recall);
    chimera_search_params t;
    chimera_status s = ix_profile_find(ix, k, cp->recall, &t, err);
    if (s == CHIMERA_ERR_EMPTY && !err->msg[0]) /* none (a stale one has its message) */
        return cm_fail(err, s, "search: the index has no tuned profile for k=%u at recall >= "
                       "%.3f; tune one first (chimera tune, chimera_index_tune)", k, cp->recall);
    if (s != CHIMERA_OK) return s;
    if (!cp->n_probe) cp->n_probe = t.n_probe;
    if (!cp->k_fullbit) cp->k_fullbit = t.k_fullbit;
    if (!cp->chunks) cp->chunks = t.chunks;
    if (!cp->impute && !(cp->chosen & CHIMERA_CHOSE_IMPUTE)) cp->impute = t.impute;
    if (!cp->probe && !(cp->chosen & CHIMERA_CHOSE_PROBE)) cp->probe = t.probe;
    if (!cp->rerank_depth) cp->rerank_depth = t.rerank_depth;
    /* a fraction of k_refine (a profile without interaction stores k_refine): taken
     * only with it, as the calibrated one (view_params_default) */
    if (!cp->k_interaction && !cp->k_refine) cp->k_interaction = t.k_interaction;
    if (!cp->k_refine) cp->k_refine = t.k_refine;
    if (cp->impute_scale == 0) cp->impute_scale = t.impute_scale;
    return CHIMERA_OK;
}

/* chunks, impute and probe in their ranges, each refusal naming its field. */
static chimera_status params_check_enums(const chimera_search_params *cp, chimera_error *err)
{
    if (cp->chunks > 64)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "search: chunks %u: expected 1..64 (0 for the default)", cp->chunks);
    if (!chimera_impute_name(cp->impute))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "search: impute %d is not a chimera_impute (probe, zero or min)",
                       (int)cp->impute);
    if (!chimera_probe_name(cp->probe))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "search: probe %d is not a chimera_probe (auto, brute or graph)",
                       (int)cp->probe);
    return CHIMERA_OK;
}

/* What a search of `ix` with these params runs: the caller's fields, then a tuned
 * profile's (params->recall), then the index's calibrated and the library's defaults,
 * made consistent, and (filtered) the deeper depths a query with a filter is given when
 * they were left to the index or a profile. Validates what it reads. */
static chimera_status resolve_params(const ix_index *ix, uint32_t k,
                                     const chimera_search_params *params, int filtered,
                                     sp_params *out, chimera_error *err)
{
    chimera_search_params cp = {0};
    if (params) cp = *params;
    /* A filter's top-k are close to one another (the best of a subset, not of the
     * corpus), so ranking them takes more full-bit scores: queries with a filter re-score
     * twice the default k_fullbit (bench/RESULTS.md section 5.3); an explicit k_fullbit
     * is kept, and queries without a filter are searched as in an unfiltered call. A
     * tuned profile's depths count as the index's own: it was tuned without a filter. */
    int own_k_fullbit = cp.k_fullbit != 0, own_k_refine = cp.k_refine != 0;
    if (!(cp.impute_scale >= 0 && cp.impute_scale <= 1)) /* NaN too */
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "search: impute_scale %g, expected a value in (0, 1], or 0 for the "
                       "index's calibrated scale", (double)cp.impute_scale);
    CM_TRY(params_check_enums(&cp, err));
    if (cp.chosen & ~(CHIMERA_CHOSE_IMPUTE | CHIMERA_CHOSE_PROBE))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "search: chosen 0x%x is not a set of CHIMERA_CHOSE_* flags", cp.chosen);
    uint32_t own_k_fullbit_v = cp.k_fullbit;
    if (cp.recall != 0) CM_TRY(params_from_profile(ix, k, &cp, err));
    view_params_default(ix, k, &cp);
    if (cp.k_fullbit < k) cp.k_fullbit = k;
    if (cp.rerank_depth) {
        /* re-scored exactly: the top rerank_depth by full-bit score, so at least that
         * many must have one */
        if (cp.rerank_depth > (1u << 24))
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "search: rerank_depth %u is too large "
                           "(at most %u)", cp.rerank_depth, 1u << 24);
        if (ix->vec_type == CHIMERA_RERANK_NONE)
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                           "search: rerank_depth %u needs the index's original vectors, and this "
                           "index stores none: rebuild it with --rerank f16 (or bf16, f32; "
                           "chimera_build_opts.rerank)", cp.rerank_depth);
        if (!ix->vec_complete)
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                           "search: rerank_depth %u needs the original vectors of every document, "
                           "and segment %u of the index has none (appended by a library without "
                           "the re-rank tier); rebuild the index with --rerank %s",
                           cp.rerank_depth, ix->vec_missing_seq,
                           chimera_rerank_name(ix->vec_type));
        if (cp.k_fullbit < cp.rerank_depth) cp.k_fullbit = cp.rerank_depth;
    }
    if (cp.k_refine < cp.k_fullbit) cp.k_refine = cp.k_fullbit;
    if (cp.k_interaction >= cp.k_refine) cp.k_interaction = 0; /* off */
    if (cp.k_interaction && cp.k_interaction < cp.k_fullbit) cp.k_interaction = cp.k_fullbit;
    if (cp.n_probe > ix->n_clusters) cp.n_probe = ix->n_clusters;
    CM_TRY(params_check_enums(&cp, err)); /* as a profile or the defaults filled them */
    if (cp.k_refine > (1u << 24)) { /* named by what raised it: k_refine is at least both */
        if (k > (1u << 24) || own_k_fullbit_v > (1u << 24))
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                           "search: %s %u is too large: a search refines at most %u documents",
                           k > (1u << 24) ? "k" : "k_fullbit",
                           k > (1u << 24) ? k : own_k_fullbit_v, 1u << 24);
        if (own_k_refine)
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                           "search: k_refine %u is too large: a search refines at most %u "
                           "documents", cp.k_refine, 1u << 24);
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "search: k %u asks for k_refine %u by default, past the %u documents a "
                       "search refines: give k_refine and k_fullbit, or a smaller k", k,
                       cp.k_refine, 1u << 24);
    }
    *out = (sp_params){.k = k, .n_probe = cp.n_probe, .k_refine = cp.k_refine,
                   .k_fullbit = cp.k_fullbit, .chunks = cp.chunks,
                   .impute = (be_impute)cp.impute, .impute_scale = cp.impute_scale,
                   .probe = (be_probe_mode)cp.probe, .rerank_depth = cp.rerank_depth,
                   .k_interaction = cp.k_interaction};
    if (filtered && !own_k_fullbit) { /* only the queries that have a filter */
        uint32_t scored1 = cp.k_interaction ? cp.k_interaction : cp.k_refine;
        if (!own_k_refine && !cp.k_interaction && !cp.rerank_depth &&
            cp.k_refine <= cp.k_fullbit) {
            /* default parameters of the covered form (k_refine = k_fullbit, the
             * calibration's since 0.8.1): the candidates the 1-bit form gave a filtered
             * query, where its doubling was measured (k_refine 4 k_fullbit, the best
             * 2 k_fullbit of them by 1-bit score re-scored). Not with the re-rank,
             * whose depth raised both and whose filtered queries re-rank that depth. */
            uint64_t kr = (uint64_t)cp.k_fullbit * 4;
            out->k_refine_filtered = kr < (1u << 24) ? (uint32_t)kr : (1u << 24);
            scored1 = out->k_refine_filtered;
        }
        out->k_fullbit_filtered = 2 * cp.k_fullbit < scored1 ? 2 * cp.k_fullbit : scored1;
    }
    { /* room for the deeper probing of selective filters and of queries whose probed
       * clusters hold too few documents (pipeline.h) */
        uint64_t room = (uint64_t)cp.n_probe * SP_WIDEN_PROBE_MAX; /* >= the filter's */
        if (room < SP_WIDEN_PROBE_FLOOR) room = SP_WIDEN_PROBE_FLOOR;
        if (room > SP_PROBE_ROOM_MAX) room = SP_PROBE_ROOM_MAX;
        out->n_probe_room = room < ix->n_clusters ? (uint32_t)room : ix->n_clusters;
        if (out->n_probe_room < out->n_probe) out->n_probe_room = out->n_probe;
    }
    return CHIMERA_OK;
}

chimera_status chimera_index_params_resolve(const chimera_index *index, uint32_t k,
                                           const chimera_search_params *params, int filtered,
                                           chimera_search_params *out, chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (!index || !out || k == 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "params_resolve: index, out and k > 0 are required");
    index_view *v = view_get(index);
    sp_params p;
    chimera_status s = resolve_params(&v->ix, k, params, filtered != 0, &p, err);
    view_put(index, v);
    if (s != CHIMERA_OK) return s;
    *out = (chimera_search_params){
        .n_probe = p.n_probe,
        .k_refine = filtered && p.k_refine_filtered ? p.k_refine_filtered : p.k_refine,
        .k_fullbit = filtered && p.k_fullbit_filtered ? p.k_fullbit_filtered : p.k_fullbit,
        .chunks = p.chunks, .impute = (chimera_impute)p.impute,
        .probe = (chimera_probe)p.probe, .rerank_depth = p.rerank_depth,
        .k_interaction = p.k_interaction, .impute_scale = p.impute_scale,
        .recall = params ? params->recall : 0, .chosen = params ? params->chosen : 0};
    return CHIMERA_OK;
}

static chimera_status search_view(index_view *v, const data_queries *q, uint32_t k,
                                  const chimera_search_params *params,
                                  const chimera_search_opts *opts, int64_t *ids, float *scores,
                                  chimera_search_profile *profile, chimera_error *err)
{
    if (q->dim != v->ix.dim)
        return cm_fail(err, CHIMERA_ERR_DIM, "search: queries have dimension %u, the index %u",
                       q->dim, v->ix.dim);
    /* an empty run with success would read as "no document matches" */
    if (v->ix.n_deleted == v->ix.n_docs)
        return cm_fail(err, CHIMERA_ERR_EMPTY,
                       "search: all %lld documents of the index are deleted (section "
                       "'deleted'); there is nothing to search", (long long)v->ix.n_docs);
    sp_params p;
    CM_TRY(resolve_params(&v->ix, k, params, opts && (opts->filter || opts->query_filters),
                          &p, err));
    uint32_t max_m = 0;
    for (int64_t i = 0; i < q->n; i++)
        if ((uint32_t)(q->off[i + 1] - q->off[i]) > max_m) max_m = (uint32_t)(q->off[i + 1] - q->off[i]);
    if (max_m > QUANT_QTOK_MAX)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "search: a query has %u tokens (at most %d)",
                       max_m, QUANT_QTOK_MAX);
    chimera_search_opts o = {0};
    if (opts) o = *opts;
    CM_TRY(check_threads(o.n_threads, "search", err));
    const char *bname = chimera_backend_name(o.backend);
    if (!bname)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "search: backend %d, expected 0..2",
                       (int)o.backend);
    sp_run_opts ro = {bname, o.n_threads > 0 ? o.n_threads : cm_cpu_count(), o.latency_mode};
    call_filters cf;
    CM_TRY(call_filters_resolve(&v->ix, &o, q->n, &cf, err));
    chimera_status s = sp_sessions_search(v->sessions, q, &p, cf.per_query, max_m, &ro, ids,
                                          scores, profile, err);
    call_filters_free(&cf);
    return s;
}

/* ---- tuning and profiles ----------------------------------------------------------- */

double chimera_results_eval_recall(const int64_t *run, uint32_t run_k, const int64_t *truth,
                                   uint32_t truth_k, int64_t n_queries, uint32_t k)
{
    if (!run || !truth || n_queries <= 0 || k == 0) return 0.0;
    return sp_eval_recall_ids(run, run_k, truth, truth_k, n_queries, k);
}

chimera_status chimera_run_topk_ids(const chimera_run *run, int64_t n_queries, uint32_t k,
                                    int64_t *ids, chimera_error *err)
{
    if (!run || !ids || n_queries < 0 || k == 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "run_topk_ids: run, ids and k > 0 are required");
    return sp_eval_run_ids(&run->r, n_queries, k, ids, err);
}

chimera_status chimera_corpus_sample_queries(const chimera_corpus *corpus, int64_t n,
                                             uint32_t m, uint64_t seed,
                                             chimera_queries **out, chimera_error *err)
{
    if (!out) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "sample_queries: out is NULL");
    *out = NULL;
    if (!corpus) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "sample_queries: corpus is NULL");
    chimera_queries *h = cm_calloc(1, sizeof *h);
    if (!h) return cm_fail(err, CHIMERA_ERR_NOMEM, "queries: out of memory");
    chimera_status s = data_queries_sample(&h->q, &corpus->c, n, m, seed, err);
    if (s != CHIMERA_OK) {
        cm_free(h);
        return s;
    }
    *out = h;
    return CHIMERA_OK;
}

typedef struct sp_tune_ctx {
    const chimera_index *h;
    const chimera_queries *q;
    const int64_t *truth;
    uint32_t truth_k, k;
    const chimera_search_opts *opts;
    int64_t *ids;
    float *scores;
    chimera_error *err;
    int rerank; /* tune with the exact re-rank tier on (chimera_index_tune) */
    uint32_t dim;   /* the index's, and its mean document length: for tune_cost_eval */
    double doc_len;
    uint32_t n_clusters; /* the index's: for tune_cost_eval */
    float impute_scale; /* every search's, where the setting leaves it at 0 */
} sp_tune_ctx;

/* The setting with the re-rank tier on: every document the full-bit stage scores is
 * re-scored exactly, so the backward procedure's k_fullbit is the re-rank's depth. */
static void tune_rerank(uint32_t k, chimera_search_params *p)
{
    if (p->rerank_depth) return; /* the walk's own choice (the frontier's) */
    chimera_search_params d = *p;
    chimera_search_params_default(k, &d);
    p->rerank_depth = d.k_fullbit > k ? d.k_fullbit : k;
}

/* The probe floor's scale a search of ix at top-k takes when left at 0: the index's
 * calibrated one, else 1. A tune measures with it and writes it into its result, so
 * that a saved profile reproduces it whatever the index calibrates later. */
static float view_impute_scale(const ix_index *ix, uint32_t k)
{
    chimera_search_params d = {0};
    view_params_default(ix, k, &d);
    return d.impute_scale;
}

static void tune_result_scale(chimera_tune_result *res, float scale)
{
    res->best.impute_scale = scale;
    for (int i = 0; i < res->n_points; i++) res->points[i].params.impute_scale = scale;
}

/* One search of the tuning queries at p (with the re-rank tier when tuning it): its
 * recall, and in *sp and *prof what ran and what it measured. */
static chimera_status tune_run(sp_tune_ctx *t, const chimera_search_params *p,
                               chimera_search_params *sp, chimera_search_profile *prof,
                               double *recall)
{
    *sp = *p;
    if (sp->impute_scale == 0) sp->impute_scale = t->impute_scale;
    if (t->rerank) tune_rerank(t->k, sp);
    CM_TRY(chimera_index_search(t->h, t->q, t->k, sp, t->opts, t->ids, t->scores, prof, t->err));
    *recall = sp_eval_recall_ids(t->ids, t->k, t->truth, t->truth_k, t->q->q.n, t->k);
    return CHIMERA_OK;
}

static chimera_status tune_eval(void *vctx, const chimera_search_params *p, double *recall,
                                double *qps)
{
    sp_tune_ctx *t = vctx;
    chimera_search_profile prof = {0};
    chimera_search_params sp;
    CM_TRY(tune_run(t, p, &sp, &prof, recall));
    *qps = prof.seconds > 0 ? (double)t->q->q.n / prof.seconds : 0;
    return CHIMERA_OK;
}

/* As tune_eval, with the search's modelled cost per query (sp_tune_cost) in place of
 * its measured rate: the build's calibration chooses by it. */
static chimera_status tune_cost_eval(void *vctx, const chimera_search_params *p, double *recall,
                                     double *cost, double *qps)
{
    sp_tune_ctx *t = vctx;
    chimera_search_profile prof = {0};
    chimera_search_params sp;
    CM_TRY(tune_run(t, p, &sp, &prof, recall));
    *cost = sp_tune_cost(&prof, &sp, t->q->q.n, t->q->q.off[t->q->q.n], t->dim, t->doc_len,
                         t->n_clusters);
    *qps = prof.seconds > 0 ? (double)t->q->q.n / prof.seconds : 0;
    return CHIMERA_OK;
}

/* The held-out half of a tune: per-query recall statistics of one setting. */
typedef struct check_ctx {
    const chimera_index *h;
    const chimera_queries *q;
    const int64_t *truth;
    uint32_t truth_k, k;
    const chimera_search_opts *opts;
    int64_t *ids;
    float *scores;
    chimera_error *err;
    int rerank; /* as sp_tune_ctx.rerank */
    float impute_scale; /* as sp_tune_ctx.impute_scale */
} check_ctx;

static chimera_status check_eval(void *vctx, const chimera_search_params *p, double *mean,
                                 double *sd, int64_t *n, double *qps)
{
    check_ctx *t = vctx;
    chimera_search_profile prof = {0};
    chimera_search_params sp = *p;
    if (sp.impute_scale == 0) sp.impute_scale = t->impute_scale;
    if (t->rerank) tune_rerank(t->k, &sp);
    CM_TRY(chimera_index_search(t->h, t->q, t->k, &sp, t->opts, t->ids, t->scores, &prof, t->err));
    sp_eval_recall_stats(t->ids, t->k, t->truth, t->truth_k, t->q->q.n, t->k, mean, sd, n);
    *qps = prof.seconds > 0 ? (double)t->q->q.n / prof.seconds : 0;
    return CHIMERA_OK;
}

/* Whether a search with opts runs on a CUDA device: there a 1-bit pass costs the host
 * little, so the backward walk, which measures time and keeps a 1-bit pass where it
 * pays, tunes; on the CPU the covered form's frontier (tune.h), by the CPU's cost model. */
static int tune_on_device(const chimera_search_opts *opts)
{
    chimera_backend be = opts ? opts->backend : CHIMERA_BACKEND_AUTO;
    char why[128];
    return be == CHIMERA_BACKEND_CUDA ||
           (be == CHIMERA_BACKEND_AUTO && backend_cuda_device_count(why, sizeof why) > 0);
}

chimera_status chimera_index_tune(const chimera_index *index, const chimera_queries *queries,
                                  const int64_t *truth_ids, uint32_t truth_k, uint32_t k,
                                  double target_recall, const chimera_search_opts *opts,
                                  chimera_tune_result *res, chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (!index || !queries || !truth_ids || !res || k == 0 || truth_k < k ||
        !(target_recall > 0) || target_recall > 1)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "tune: needs an index, queries, truth with >= k results each, k > 0 and a "
                       "target in (0, 1]");
    int64_t n = queries->q.n;
    sp_tune_ctx t = {index,
                     queries,
                     truth_ids,
                     truth_k,
                     k,
                     opts,
                     cm_malloc((size_t)n * k * sizeof(int64_t)),
                     cm_malloc((size_t)n * k * sizeof(float)),
                     err,
                     0,
                     0,
                     0,
                     0,
                     0};
    chimera_status s = CHIMERA_ERR_NOMEM;
    if (!t.ids || !t.scores) s = cm_fail(err, CHIMERA_ERR_NOMEM, "tune: out of memory");
    index_view *v = view_get(index); /* the generation measured (a refresh may follow) */
    /* A target the 4-bit estimates alone rarely reach, on an index that keeps its
     * vectors: tune with the exact re-rank on (bench/RESULTS.md section 5.5). */
    t.rerank = target_recall >= 0.99 && v->ix.vec_complete;
    t.impute_scale = view_impute_scale(&v->ix, k);
    t.dim = v->ix.dim;
    t.doc_len = v->ix.n_docs ? (double)v->ix.n_tokens / (double)v->ix.n_docs : 1;
    t.n_clusters = v->ix.n_clusters;
    if (t.ids && t.scores && tune_on_device(opts)) {
        s = sp_tune_backward(tune_eval, &t, k, target_recall, v->ix.n_clusters, v->ix.n_docs, res);
    } else if (t.ids && t.scores) {
        check_ctx c = {index, queries, truth_ids, truth_k, k, opts, t.ids, t.scores, err, t.rerank,
                       t.impute_scale};
        /* the check is these queries again with z = 0: an interval of no width, so the
         * cheapest measured setting whose recall on them meets the target is kept */
        s = sp_tune_frontier_heldout(tune_cost_eval, &t, check_eval, &c, k, target_recall, 0,
                                     v->ix.n_clusters, v->ix.n_docs, t.rerank, res);
        if (s == CHIMERA_ERR_NOMEM) cm_fail(err, s, "tune: out of memory");
        /* no held-out part: those fields stay zero (res->recall is on these queries) */
        res->n_heldout = 0;
        res->heldout_recall = res->heldout_low = res->heldout_high = 0;
        res->heldout_need = 0;
        res->tune_target = 0;
    }
    if (s == CHIMERA_OK) tune_result_scale(res, t.impute_scale);
    if (s == CHIMERA_OK && t.rerank) { /* what was measured, in the result and its profile */
        tune_rerank(k, &res->best);
        for (int i = 0; i < res->n_points; i++) tune_rerank(k, &res->points[i].params);
    }
    if (s == CHIMERA_OK) /* which index was measured, so that saving can refuse another one */
        ix_profile_identity(&v->ix, &res->index_generation, &res->index_data_id);
    view_put(index, v);
    cm_free(t.ids);
    cm_free(t.scores);
    return s;
}

chimera_status chimera_index_profile_save(const char *dir, uint32_t k, double target_recall,
                                          const chimera_tune_result *res, chimera_error *err)
{
    if (!dir || !res || k == 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "profile_save: dir, result and k are required");
    ix_profile p = {k, target_recall, res->recall, res->qps, res->reached, res->best};
    return ix_profile_save(dir, &p, res->index_data_id, res->index_generation, err);
}

chimera_status chimera_index_profile_get(const chimera_index *index, uint32_t k,
                                         double target_recall, chimera_search_params *out,
                                         chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (!index || !out)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "profile_get: index and out are required");
    index_view *v = view_get(index);
    chimera_status s = ix_profile_find(&v->ix, k, target_recall, out, err);
    view_put(index, v);
    return s;
}

int chimera_index_profile_list(const chimera_index *index, chimera_profile_entry *out, int max)
{
    if (!index) return 0;
    index_view *v = view_get(index);
    int n = ix_profile_list(&v->ix, out, max);
    view_put(index, v);
    return n;
}

int chimera_index_profile_pick(const chimera_index *index, uint32_t k, double target_recall)
{
    if (!index) return -1;
    index_view *v = view_get(index);
    int i = ix_profile_pick(&v->ix, k, target_recall);
    view_put(index, v);
    return i;
}

/* ---- held-out tuning, calibration, the recorded source ---------------------------------- */

/* qsort has no context argument: the ids being ordered, per thread (builds may run in
 * several threads at once). */
static _Thread_local const int64_t *cal_sort_ids;

static int cmp_by_id(const void *a, const void *b)
{
    int64_t x = cal_sort_ids[*(const int64_t *)a], y = cal_sort_ids[*(const int64_t *)b];
    return (x > y) - (x < y);
}

/* Queries [a, b) of the permutation perm, with their truth rows, as a new query set. */
static chimera_status pick_queries(const data_queries *q, const int64_t *perm, int64_t a,
                                   int64_t b, const int64_t *truth, uint32_t truth_k,
                                   chimera_queries **out, int64_t **out_truth, chimera_error *err)
{
    *out = NULL;
    *out_truth = NULL;
    int64_t n = b - a, rows = 0;
    for (int64_t i = a; i < b; i++) rows += q->off[perm[i] + 1] - q->off[perm[i]];
    float *tok = cm_malloc((size_t)(rows ? rows : 1) * q->dim * sizeof(float));
    int64_t *lens = cm_malloc((size_t)(n ? n : 1) * sizeof *lens);
    int64_t *tr = cm_malloc((size_t)(n ? n : 1) * truth_k * sizeof *tr);
    chimera_status s = CHIMERA_OK;
    if (!tok || !lens || !tr) s = cm_fail(err, CHIMERA_ERR_NOMEM, "tune: out of memory");
    for (int64_t i = a, r = 0; s == CHIMERA_OK && i < b; i++) {
        int64_t j = perm[i], len = q->off[j + 1] - q->off[j];
        memcpy(tok + (size_t)r * q->dim, q->tokens + (size_t)q->off[j] * q->dim,
               (size_t)len * q->dim * sizeof(float));
        r += len;
        lens[i - a] = len;
        memcpy(tr + (size_t)(i - a) * truth_k, truth + (size_t)j * truth_k, truth_k * sizeof *tr);
    }
    if (s == CHIMERA_OK) s = chimera_queries_new(tok, n, q->dim, lens, 0, out, err);
    cm_free(tok);
    cm_free(lens);
    if (s != CHIMERA_OK) {
        cm_free(tr);
        return s;
    }
    *out_truth = tr;
    return CHIMERA_OK;
}

/* The held-out tune over queries already split: tuning part (tq, tt), held-out part
 * (hq, ht), every search with the floor's scale impute_scale (0: the index's). Shared by
 * chimera_index_tune_heldout and the build's calibration. */
static chimera_status tune_split(const chimera_index *index, const chimera_queries *tq,
                                 const int64_t *tt, const chimera_queries *hq, const int64_t *ht,
                                 uint32_t truth_k, uint32_t k, double target,
                                 const chimera_search_params *grow_from, double ceiling,
                                 float impute_scale, const chimera_search_opts *opts,
                                 chimera_tune_result *res, chimera_error *err)
{
    int64_t nt = tq->q.n, nh = hq->q.n, nmax = nt > nh ? nt : nh;
    int64_t *ids = cm_malloc((size_t)nmax * k * sizeof *ids);
    float *sc = cm_malloc((size_t)nmax * k * sizeof *sc);
    chimera_status s;
    if (!ids || !sc) {
        s = cm_fail(err, CHIMERA_ERR_NOMEM, "tune: out of memory");
    } else {
        index_view *v = view_get(index);
        /* as chimera_index_tune: a target of 0.99 or more on an index with its vectors is
         * tuned with the exact re-rank on (the build's calibration, at 0.95, never is) */
        int rerank = target >= 0.99 && v->ix.vec_complete;
        float scale = impute_scale > 0 ? impute_scale : view_impute_scale(&v->ix, k);
        sp_tune_ctx t = {index, tq, tt, truth_k, k, opts, ids, sc, err, rerank, v->ix.dim,
                         v->ix.n_docs ? (double)v->ix.n_tokens / (double)v->ix.n_docs : 1,
                         v->ix.n_clusters, scale};
        check_ctx c = {index, hq, ht, truth_k, k, opts, ids, sc, err, rerank, scale};
        int64_t live = v->ix.n_docs - v->ix.n_deleted;
        int device = tune_on_device(opts);
        if (grow_from)
            s = sp_tune_grow_heldout(tune_cost_eval, &t, check_eval, &c, k, target, 1.96,
                                     v->ix.n_clusters, live, grow_from, ceiling, res);
        else if (device)
            s = sp_tune_heldout(tune_eval, &t, check_eval, &c, k, target, 1.96, v->ix.n_clusters,
                                live, res);
        else
            s = sp_tune_frontier_heldout(tune_cost_eval, &t, check_eval, &c, k, target, 1.96,
                                         v->ix.n_clusters, live, rerank, res);
        if (s == CHIMERA_ERR_NOMEM) cm_fail(err, s, "tune: out of memory");
        if (s == CHIMERA_OK && rerank) { /* what was measured, in the result and profile */
            tune_rerank(k, &res->best);
            for (int i = 0; i < res->n_points; i++) tune_rerank(k, &res->points[i].params);
        }
        if (s == CHIMERA_OK) {
            tune_result_scale(res, scale);
            ix_profile_identity(&v->ix, &res->index_generation, &res->index_data_id);
            res->n_tune = nt;
        }
        view_put(index, v);
    }
    cm_free(ids);
    cm_free(sc);
    return s;
}

#define TUNE_MIN_QUERIES 20

chimera_status chimera_index_tune_heldout(const chimera_index *index, const chimera_queries *queries,
                                          const int64_t *truth_ids, uint32_t truth_k, uint32_t k,
                                          double target_recall, double heldout_fraction,
                                          uint64_t seed, const chimera_search_opts *opts,
                                          chimera_tune_result *res, chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (!index || !queries || !truth_ids || !res || k == 0 || truth_k < k ||
        !(target_recall > 0) || target_recall > 1)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "tune: needs an index, queries, truth with >= k results each, k > 0 and a "
                       "target in (0, 1]");
    if (heldout_fraction == 0) heldout_fraction = 0.5;
    if (!(heldout_fraction > 0 && heldout_fraction < 1))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "tune: held-out fraction %g, expected a value in (0, 1)", heldout_fraction);
    int64_t n = queries->q.n;
    int64_t nh = (int64_t)llround((double)n * heldout_fraction);
    if (n < TUNE_MIN_QUERIES || nh < TUNE_MIN_QUERIES / 2 || n - nh < TUNE_MIN_QUERIES / 2)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "tune: %lld queries are too few for a held-out check: need at least %d, "
                       "with %d or more on each side of the split (a few hundred give a useful "
                       "confidence interval)", (long long)n, TUNE_MIN_QUERIES, TUNE_MIN_QUERIES / 2);
    int64_t *perm = cm_malloc((size_t)n * sizeof *perm);
    if (!perm) return cm_fail(err, CHIMERA_ERR_NOMEM, "tune: out of memory");
    /* a seeded Fisher-Yates shuffle: the split is reproducible and not the file's order
     * (query logs are often sorted by time or topic) */
    cm_rng r;
    cm_rng_seed(&r, seed, 0x7e57);
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)cm_rng_below(&r, (uint64_t)i + 1), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    chimera_queries *tq = NULL, *hq = NULL;
    int64_t *tt = NULL, *ht = NULL;
    chimera_status s = pick_queries(&queries->q, perm, 0, n - nh, truth_ids, truth_k, &tq, &tt, err);
    if (s == CHIMERA_OK)
        s = pick_queries(&queries->q, perm, n - nh, n, truth_ids, truth_k, &hq, &ht, err);
    if (s == CHIMERA_OK)
        s = tune_split(index, tq, tt, hq, ht, truth_k, k, target_recall, NULL, 0, 0, opts, res,
                       err);
    chimera_queries_free(tq);
    chimera_queries_free(hq);
    cm_free(tt);
    cm_free(ht);
    cm_free(perm);
    return s;
}

/* The calibration (chimera_index_build's note; ix_build_opts.calibrate).
 *
 * Cost. The truth is the exact top-k among each query's candidates from one generous
 * search (n_probe 64, a deep refinement), not a pass of exact search over the corpus
 * (except on small corpora, below): that pass costs n_query_tokens x n_tokens x dim and
 * would cost as much as the build itself on a large corpus, while the candidates of a
 * generous search hold the exact top-k but for a rare document. The queries are as many
 * as CAL_TOKENS_PER_QUERY tokens of corpus pay for, between CAL_MIN_QUERIES and
 * CAL_MAX_QUERIES: every trial is a search of a third of them, so the cost grows with
 * the query count, while the build's grows with the tokens. The most was 192 until
 * 0.14.1: on 10^7 tokens the k = 100 walk then tuned on 32 queries, and per-query
 * Recall@100 has a heavy tail (4 of those 32 got 0.10-0.68 at 11 / 452 / 452, against
 * 4% of the sample's other queries below 0.8), so its tuning recall there was 0.919
 * where the whole sample's was 0.958 (exact truth), and it went to 1,019 documents;
 * with 480 (80 tuning queries) it stops at 679, and the calibration takes 5% of that
 * build, 11 s of 216 (bench/RESULTS.md 5.36).
 *
 * k = 100 uses half of them (the first half: a sixth tunes, a third checks). A query's
 * Recall@100 averages 100 hits, so it varies far less from query to query than its
 * Recall@10 (held-out 95% intervals of +-0.006 on 64 queries against +-0.015), and half
 * the queries still certify; while each of its searches costs about three times one at
 * k = 10.
 *
 * How deep the generous search. A true top-k document missing from its candidates is
 * counted wrong for every setting that finds it, and the deeper a setting, the more of
 * them it finds. On the real corpus (bench/RESULTS.md 5.29) the candidates of 64 probes,
 * k_refine 1,200 and k_fullbit 300 held 98.2% of the exact top 100 (the rest cut by
 * refinement or by the 1-bit pass, none by the pool's depth of 300), so the k = 100
 * walk's tuning recall fell from 0.977 to 0.959 as its settings deepened and its held-out
 * checks stayed at 0.938 (against exact truth: 0.953 rising to 0.975); it climbed a
 * plateau that was not there and reported the bits short of 0.95. So for the first half
 * of the queries (the k = 100 ones, which k = 10 uses too) the search refines
 * 1 / CAL_DEEP_SHARE of the documents (at least the others' 1,200, at most CAL_DEEP_MAX)
 * and full-bit scores a quarter of them: on the real corpus 4,000 and 1,000, whose best
 * 300 hold 99.7% of the exact top 100, for about twice the search's time on half the
 * queries. A fixed 4,000 cost 2-7x the search on corpora of 2,500-20,000 documents,
 * where 1,200 are already 6-48% of them. The pool stays CAL_POOL x kmax for every
 * query: a shallower one costs about as much (the generous search's cost is its
 * probing) and misses true top-10 documents that the deeper settings being measured
 * then find and are counted wrong for.
 *
 * Small corpora: exact truth. Corpora of very short documents need a deeper search
 * still: on 19,000 documents of 4-12 tokens the candidates held 92-93% of the exact top
 * 100, and the k = 100 walk ended at its 128 probes and 5,164 documents, reporting
 * 0.916 where fresh queries get 0.951-0.956. That depth is the full-bit stage's, which
 * on clustered corpora (whose candidates miss nothing) outnumbers what 64 probes reach,
 * so the search widens its probing and costs 4x. But on a small corpus an exact pass
 * costs about what the generous search does: at most CAL_EXACT_MACS multiply-adds (the
 * sample's expected query tokens x corpus tokens x dim; 0.24 s on two cores at 1.2e10,
 * against 0.17-0.25 s for the generous search of 96 queries). There the pass is the
 * truth, and the generous search runs only on the tuning queries, at the usual depth,
 * for the ceiling. The ceiling stays its Recall@k against its own candidates' exact top
 * k: what the bits allow where a search finds the true documents. Against exact truth
 * it would measure the generous search's depth, which deeper settings pass. On that
 * corpus of 4-12 tokens 0.12.2's k = 100 default became 26 / 6400 / 6400, reporting
 * 0.9500 where fresh queries get 0.9503, at 1.8x the queries/s (bench/RESULTS.md 5.30).
 *
 * Corpora up to three times that: exact truth for the held-out queries of the largest
 * k. Between 1.7e10 and 5.1e10 multiply-adds the candidates still missed 2-3.5% of the
 * exact top 100 (19,000 documents of 16-24 and 24-40 tokens), and the k = 100 defaults
 * they certified got 0.9495 and 0.9513 on fresh queries, reported at 0.9675 and 0.9656.
 * There the pass runs over the k = 100 held-out third of the sample only, which the
 * deep generous search then skips, so the reported Recall@100 is the stored setting's
 * against exact search; the tuning queries keep the candidates' truth, whose bias the
 * walk's raised targets absorb (bench/RESULTS.md 5.33). */
#define CAL_TARGET 0.95
#define CAL_MIN_QUERIES 96
#define CAL_MAX_QUERIES 480
#define CAL_TOKENS_PER_QUERY 20000
#define CAL_POOL 3
#define CAL_DEEP_SHARE 15
#define CAL_DEEP_MAX 4000
#define CAL_EXACT_MACS 1.7e10
#define CAL_SEED 0xca11b

/* The number of pseudo-queries the calibration samples for n_tokens tokens of corpus: a
 * multiple of 6 (calibrate_index's parts). */
static int64_t cal_n_queries(int64_t n_tokens)
{
    int64_t nq = n_tokens / CAL_TOKENS_PER_QUERY;
    nq = nq < CAL_MIN_QUERIES ? CAL_MIN_QUERIES : nq > CAL_MAX_QUERIES ? CAL_MAX_QUERIES : nq;
    return nq / 6 * 6;
}

/* The probe floor's scale (chimera_search_params.impute_scale) is chosen first, for each
 * k: the one of CAL_SCALES whose refinement ranks best on that k's tuning queries, at
 * the library's n_probe with every refined document scored in full (k_fullbit = k_refine
 * = CAL_SCALE_DEPTH k), so that recall there is refinement's alone. The first is the
 * prior, and another is taken only where it beats the best so far by CAL_SCALE_GAIN:
 * 0.85 was at least as good as 1 on the real queries of every corpus of
 * bench/RESULTS.md section 5.12 (by 0 to 0.05 of Recall@10), while a few dozen tuning
 * queries separate them only where the gap is wide.
 *
 * Per k, since the best scale at k = 100 can differ from k = 10's: on a flat d = 256
 * corpus 0.55 at k = 10, while at k = 100 (20 / 301 / 301) 0.55 gave Recall@100 0.962
 * and 0.85 gave 0.982, and the k = 100 default the walk found at 0.85 refines 200
 * documents where at 0.55 it needed 452 (bench/RESULTS.md 5.31). The k = 100 scale costs
 * 0.04-0.35 s a build (the most on clustered corpora, whose probing widens at that depth;
 * bench/RESULTS.md 5.32).
 * Cheaper ways chose worse: a climb from k = 10's scale to better neighbours stayed at
 * it where the scales differ by less than CAL_SCALE_GAIN at depth 800, and a depth of
 * 3k picked scales that needed deeper defaults on three corpora of twelve.
 *
 * Below 1 the scales run downward, and the walk down stops early: on those twelve
 * corpora, at both k, recall over the scales rose to one peak and fell, never rising
 * again after a fall, and where 0.85, 1 and 0.7 ranked alike (clustered corpora at
 * k = 100, where the depth holds every true document whatever the floor) so did the
 * rest, within CAL_SCALE_GAIN. The same scales are picked for two or three searches
 * fewer on most corpora (bench/RESULTS.md 5.32). */
static const float CAL_SCALES[] = {0.85f, 1.0f, 0.7f, 0.55f, 0.4f};
#define CAL_SCALE_DEPTH 8
#define CAL_SCALE_GAIN 0.002

static chimera_status calibrate_scale(const chimera_index *ix, const chimera_queries *q,
                                      const int64_t *truth, uint32_t truth_k, uint32_t k,
                                      const chimera_search_opts *so, float *out,
                                      chimera_error *err)
{
    int64_t n = q->q.n;
    int64_t *ids = cm_malloc((size_t)n * k * sizeof *ids);
    float *sc = cm_malloc((size_t)n * k * sizeof *sc);
    chimera_status s = CHIMERA_OK;
    if (!ids || !sc) s = cm_fail(err, CHIMERA_ERR_NOMEM, "calibrate: out of memory");
    double best = -1, first = 0;
    int alike = 1; /* every scale so far ranked as the first did */
    *out = 1.0f;
    for (size_t i = 0; s == CHIMERA_OK && i < sizeof CAL_SCALES / sizeof *CAL_SCALES; i++) {
        chimera_search_params p = {0};
        chimera_search_params_default(k, &p);
        p.k_fullbit = p.k_refine = CAL_SCALE_DEPTH * k;
        p.impute_scale = CAL_SCALES[i];
        s = chimera_index_search(ix, q, k, &p, so, ids, sc, NULL, err);
        if (s != CHIMERA_OK) break;
        double r = sp_eval_recall_ids(ids, k, truth, truth_k, n, k);
        if (r > best + CAL_SCALE_GAIN) {
            best = r;
            *out = CAL_SCALES[i];
        }
        if (i == 0) first = r;
        alike = alike && r == first;
        /* from 0.7 down: stop at a scale that ranks below the best, or where 0.85, 1 and
         * 0.7 all rank alike (the floor does not matter at this depth) */
        if (i >= 2 && (r < best || alike)) break;
    }
    cm_free(ids);
    cm_free(sc);
    return s;
}

/* The k the calibration calibrates on corpus c, into kv (increasing); returns how many:
 * 10 and 100, each where it is at most a fifth of the *live (non-empty) documents. */
static uint32_t cal_ks(const data_corpus *c, uint32_t kv[2], int64_t *live)
{
    *live = 0;
    for (int64_t d = 0; d < c->n_docs; d++) *live += c->doc_off[d + 1] > c->doc_off[d];
    static const uint32_t ks[] = {10, 100};
    uint32_t nk = 0;
    for (int i = 0; i < 2; i++)
        if ((int64_t)ks[i] * 5 <= *live) kv[nk++] = ks[i];
    return nk;
}

/* Which truth (chimera_impl.h). Decided on the sample's expected length, not on the
 * lengths drawn, so that the corpus alone decides. The held-out band needs k = 100:
 * with one k its held-out queries are two thirds of the sample, and a corpus of under
 * 500 documents is refined a thousand documents deep, so its candidates miss little. */
chimera_calibration_truth_kind chimera_calibration_truth(const data_corpus *c)
{
    int64_t live;
    uint32_t kv[2], nk = cal_ks(c, kv, &live);
    double q_tokens =
        (double)cal_n_queries(c->n_tokens) * data_sample_mean_len();
    double macs = (double)c->n_tokens * q_tokens * c->dim;
    if (macs <= CAL_EXACT_MACS) return CAL_TRUTH_EXACT;
    return macs <= 3 * CAL_EXACT_MACS && nk == 2 ? CAL_TRUTH_EXACT_HELDOUT
                                                 : CAL_TRUTH_CANDIDATES;
}

/* The sample's order for the parts (calibrate_index): the first k's tuning queries
 * [0, u) and [3u, 4u), then its held-out ones [u, 3u) and [4u, 6u); the second k takes
 * the first half of each, [0, u) and [u, 3u). perm has 6u entries. */
static void cal_order(int64_t u, int64_t *perm)
{
    int64_t w = 0;
    for (int64_t i = 0; i < u; i++) perm[w++] = i;
    for (int64_t i = 3 * u; i < 4 * u; i++) perm[w++] = i;
    for (int64_t i = u; i < 3 * u; i++) perm[w++] = i;
    for (int64_t i = 4 * u; i < 6 * u; i++) perm[w++] = i;
}

chimera_status chimera_calibration_heldout(const chimera_corpus *c, uint64_t seed, uint32_t k,
                                           chimera_queries **out, chimera_error *err)
{
    ERR_OPTIONAL(err);
    *out = NULL;
    int64_t live;
    uint32_t kv[2], nk = cal_ks(&c->c, kv, &live);
    if (!(nk > 0 && kv[0] == k) && !(nk > 1 && kv[1] == k))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "calibration: k %u is not calibrated on "
                       "this corpus (10 and 100, each at most a fifth of its non-empty "
                       "documents)", k);
    int64_t nq = cal_n_queries(c->c.n_tokens), u = nq / 6;
    data_queries q;
    CM_TRY(data_queries_sample(&q, &c->c, nq, 0, seed ^ CAL_SEED, err));
    int64_t *perm = cm_malloc((size_t)nq * sizeof *perm);
    int64_t *none = cm_calloc((size_t)nq, sizeof *none);
    int64_t *tr = NULL;
    chimera_status s = CHIMERA_OK;
    if (!perm || !none) s = cm_fail(err, CHIMERA_ERR_NOMEM, "calibration: out of memory");
    if (s == CHIMERA_OK) {
        cal_order(u, perm);
        s = pick_queries(&q, perm, 2 * u, k == 10 ? nq : 4 * u, none, 1, out, &tr, err);
    }
    data_queries_free(&q);
    cm_free(perm);
    cm_free(none);
    cm_free(tr);
    return s;
}

static chimera_status calibrate_index(void *user, const data_corpus *c, const char *dir,
                                      ix_defaults *out, chimera_error *err)
{
    const calibrate_ctx *cc = user;
    memset(out, 0, sizeof *out);
    double t0 = cm_now();
    int64_t live;
    uint32_t kv[2], nk = cal_ks(c, kv, &live);
    if (nk == 0) return CHIMERA_OK; /* too few documents for a top-k worth calibrating */
    uint32_t kmax = kv[nk - 1], pool = kmax * CAL_POOL;
    /* Sample order: [0, u) tunes every k, [u, 3u) checks every k, and, with a second k,
     * [3u, 4u) tunes and [4u, 6u) checks the first k only. */
    int64_t nq = cal_n_queries(c->n_tokens), u = nq / 6;
    chimera_index *ix = NULL;
    chimera_queries *q = cm_calloc(1, sizeof *q), *qpart = NULL;
    int64_t *cand = cm_malloc((size_t)nq * pool * sizeof *cand);
    int64_t *cand_ids = cm_malloc((size_t)nq * pool * sizeof *cand_ids);
    float *csc = cm_malloc((size_t)nq * pool * sizeof *csc);
    int64_t *truth = cm_malloc((size_t)nq * kmax * sizeof *truth);
    int64_t *cand_truth = cm_malloc((size_t)nq * kmax * sizeof *cand_truth);
    float *tsc = cm_malloc((size_t)nq * kmax * sizeof *tsc);
    int64_t *order = NULL;
    chimera_queries *tq[2] = {NULL, NULL}, *hq[2] = {NULL, NULL};
    int64_t *tt[2] = {NULL, NULL}, *ht[2] = {NULL, NULL}, *perm = NULL;
    chimera_tune_result *res = cm_malloc(sizeof *res);
    chimera_status s = CHIMERA_OK;
    if (!q || !cand || !cand_ids || !csc || !truth || !cand_truth || !tsc || !res) {
        s = cm_fail(err, CHIMERA_ERR_NOMEM, "calibrate: out of memory");
        goto done;
    }
    if ((s = data_queries_sample(&q->q, c, nq, 0, cc->seed ^ CAL_SEED, err)) != CHIMERA_OK) goto done;
    if ((s = chimera_index_open(dir, NULL, &ix, err)) != CHIMERA_OK) goto done;
    chimera_search_opts so = {.n_threads = cc->n_threads};
    /* The truth: where an exact pass over the corpus costs at most CAL_EXACT_MACS, that
     * pass, and the generous search serves only the ceiling, on the tuning queries
     * ([0, u) and [3u, 4u)), at the usual depth. Where a pass over the k = 100
     * held-out queries ([u, 3u), a third; both k calibrated) costs at most that, the
     * pass for them and the generous search for the rest. Elsewhere the exact top-k
     * among a generous search's candidates, the search refining deeper for the k = 100
     * queries (the first 3u with a second k; k = 10 uses them too). */
    chimera_calibration_truth_kind truth_kind = chimera_calibration_truth(c);
    uint32_t refine = pool * 4 > 1000 ? pool * 4 : 1000, deep = refine;
    int64_t share = live / CAL_DEEP_SHARE;
    if (share > deep) deep = share > CAL_DEEP_MAX ? CAL_DEEP_MAX : (uint32_t)share;
    int64_t n_deep = nk == 2 ? 3 * u : 0;
    int64_t part_q0[2] = {0, n_deep}, part_n[2] = {n_deep, nq - n_deep};
    if (truth_kind == CAL_TRUTH_EXACT) { /* the tuning queries only, both at the usual depth */
        part_q0[1] = 3 * u;
        part_n[0] = part_n[1] = u;
    } else if (truth_kind == CAL_TRUTH_EXACT_HELDOUT) { /* all but [u, 3u) */
        part_q0[1] = 3 * u;
        part_n[0] = u;
        part_n[1] = nq - 3 * u;
    }
    for (int64_t i = 0; i < nq * pool; i++) cand[i] = -1; /* no candidates: not searched */
    for (int part = 0; part < 2; part++) {
        int64_t q0 = part_q0[part], qn = part_n[part];
        int deeper = part == 0 && truth_kind != CAL_TRUTH_EXACT && nk == 2;
        if (qn == 0) continue;
        if (qn < nq && (s = chimera_queries_slice(q, q0, qn, &qpart, err)) != CHIMERA_OK)
            goto done;
        chimera_search_params gp = {0};
        gp.n_probe = 64;
        gp.k_refine = deeper ? deep : refine;
        gp.k_fullbit = !deeper || deep / 4 < pool ? pool : deep / 4;
        s = chimera_index_search(ix, qpart ? qpart : q, pool, &gp, &so, cand + (size_t)q0 * pool,
                                 csc, NULL, err);
        chimera_queries_free(qpart);
        qpart = NULL;
        if (s != CHIMERA_OK) goto done;
    }
    memcpy(cand_ids, cand, (size_t)nq * pool * sizeof *cand);
    /* user ids -> corpus rows: the index was built from c in its order */
    if (c->ids) {
        order = cm_malloc((size_t)c->n_docs * sizeof *order);
        if (!order) {
            s = cm_fail(err, CHIMERA_ERR_NOMEM, "calibrate: out of memory");
            goto done;
        }
        for (int64_t d = 0; d < c->n_docs; d++) order[d] = d;
        cal_sort_ids = c->ids;
        qsort(order, (size_t)c->n_docs, sizeof *order, cmp_by_id);
        for (int64_t i = 0; i < nq * pool; i++) {
            if (cand[i] < 0) continue;
            int64_t lo = 0, hi = c->n_docs - 1;
            while (lo < hi) {
                int64_t mid = (lo + hi) / 2;
                if (c->ids[order[mid]] < cand[i]) lo = mid + 1;
                else hi = mid;
            }
            cand[i] = c->ids[order[lo]] == cand[i] ? order[lo] : -1;
        }
    }
    if ((s = sp_exact_rescore(c, &q->q, cand, pool, kmax, cc->n_threads, cand_truth, tsc,
                              err)) != CHIMERA_OK)
        goto done;
    if (truth_kind == CAL_TRUTH_EXACT) {
        s = sp_exact_search(c, &q->q, kmax, cc->n_threads, NULL, NULL, truth, tsc, err);
    } else {
        memcpy(truth, cand_truth, (size_t)nq * kmax * sizeof *truth);
        if (truth_kind == CAL_TRUTH_EXACT_HELDOUT &&
            (s = chimera_queries_slice(q, u, 2 * u, &qpart, err)) == CHIMERA_OK)
            s = sp_exact_search(c, &qpart->q, kmax, cc->n_threads, NULL, NULL,
                                truth + (size_t)u * kmax, tsc, err);
    }
    if (s != CHIMERA_OK) goto done;

    /* The sampled queries are independent draws: a third tunes, the rest checks.
     * Tuning runs a search per step and the check one per round, so the larger part
     * goes where it buys the most: a narrower interval (a lower bound nearer the mean)
     * for a few searches more. */
    perm = cm_malloc((size_t)nq * sizeof *perm);
    if (!perm) {
        s = cm_fail(err, CHIMERA_ERR_NOMEM, "calibrate: out of memory");
        goto done;
    }
    cal_order(u, perm);
    if ((s = pick_queries(&q->q, perm, 0, 2 * u, truth, kmax, &tq[0], &tt[0], err)) != CHIMERA_OK ||
        (s = pick_queries(&q->q, perm, 2 * u, nq, truth, kmax, &hq[0], &ht[0], err)) != CHIMERA_OK)
        goto done;
    if (nk == 2 &&
        ((s = pick_queries(&q->q, perm, 0, u, truth, kmax, &tq[1], &tt[1], err)) != CHIMERA_OK ||
         (s = pick_queries(&q->q, perm, 2 * u, 4 * u, truth, kmax, &hq[1], &ht[1], err)) !=
             CHIMERA_OK))
        goto done;
    for (uint32_t i = 0; i < nk; i++) {
        float scale;
        if ((s = calibrate_scale(ix, tq[i], tt[i], kmax, kv[i], &so, &scale, err)) != CHIMERA_OK)
            goto done;
        /* from half the library's defaults: cheaper settings are rarely enough, and the
         * walk pays for every step below the answer. In the covered form, k_refine =
         * k_fullbit (every refined document full-bit scored, no 1-bit pass; the walk
         * keeps the ratio): on the CPU a 1-bit scored document costs 0.7-1.2x a
         * full-bit one, and this form reached Recall 0.95 13-27% faster on two corpora
         * at k = 10 and 100 (bench/RESULTS.md 5.19). */
        chimera_search_params start = {0};
        chimera_search_params_default(kv[i], &start);
        /* every trial and check at the scale just chosen, which the default stores
         * (tune_split fills a 0 with it; the library's 1 would measure another floor) */
        start.impute_scale = 0;
        start.n_probe = (start.n_probe + 1) / 2;
        start.k_fullbit = (start.k_fullbit + 1) / 2;
        start.k_refine = start.k_fullbit;
        /* a larger k needs at least the probing a smaller one did (probing serves each
         * query token, whatever k): start there and skip those steps */
        if (out->n && out->d[out->n - 1].params.n_probe > start.n_probe)
            start.n_probe = out->d[out->n - 1].params.n_probe;
        /* the generous search's own Recall@k on the tuning queries: the ceiling of the
         * bits (its candidates, in the tuning queries' order) */
        int64_t nt = tq[i]->q.n;
        double ceiling = 0;
        for (int64_t j = 0; j < nt; j++)
            ceiling += sp_eval_recall_ids(cand_ids + (size_t)perm[j] * pool, pool,
                                          cand_truth + (size_t)perm[j] * kmax, kmax, 1, kv[i]);
        ceiling /= (double)nt;
        if ((s = tune_split(ix, tq[i], tt[i], hq[i], ht[i], kmax, kv[i], CAL_TARGET, &start,
                            ceiling, scale, &so, res, err)) != CHIMERA_OK)
            goto done;
        ix_default *e = &out->d[out->n++];
        e->k = kv[i];
        e->params = res->best;
        e->params.impute = 0; /* not tuned: the search's own default */
        e->params.probe = 0;
        e->recall = res->heldout_recall;
        e->recall_low = res->heldout_low;
        e->reached = res->reached;
    }
    out->target = CAL_TARGET;
    out->n_queries = nq;
done:
    chimera_index_close(ix);
    chimera_queries_free(q);
    chimera_queries_free(qpart);
    for (int i = 0; i < 2; i++) {
        chimera_queries_free(tq[i]);
        chimera_queries_free(hq[i]);
        cm_free(tt[i]);
        cm_free(ht[i]);
    }
    cm_free(perm);
    cm_free(cand);
    cm_free(cand_ids);
    cm_free(csc);
    cm_free(truth);
    cm_free(cand_truth);
    cm_free(tsc);
    cm_free(order);
    cm_free(res);
    out->seconds = cm_now() - t0;
    if (s != CHIMERA_OK) out->n = 0;
    return s;
}

chimera_status chimera_index_source_open(const chimera_index *index, chimera_corpus **out,
                                         chimera_error *err)
{
    ERR_OPTIONAL(err);
    if (!index || !out)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "source_open: index and out are required");
    *out = NULL;
    char *tok, *len, *ids;
    index_view *v = view_get(index);
    chimera_status s = ix_source_get(&v->ix, &tok, &len, &ids, err);
    view_put(index, v);
    if (s != CHIMERA_OK) return s;
    s = chimera_corpus_open(tok, len, ids, NULL, out, err);
    cm_free(tok);
    cm_free(len);
    cm_free(ids);
    return s;
}
