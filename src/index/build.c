/* Index build: sample -> k-means -> assignment -> posting lists + centroid graph ->
 * RaBitQ encoding -> sections (layout in index.h), committed crash-safely by store.
 *
 * Memory. The token matrix is read through its mapping in blocks and never copied
 * whole; the training sample (at most 64 points per centroid) is the one float32
 * copy. Everything else held in memory is the output itself (codes, factors, lists),
 * so peak RSS is about the index size plus the sample, plus whatever pages of the
 * mapped matrix the kernel keeps cached.
 *
 * Determinism. Every random step takes the build seed; k-means, assignment, the graph
 * and the encoder are independent of the thread count, so the same input, seed and
 * parameters give byte-identical sections.
 *
 * Clusters. K defaults to about one per 100 tokens (ix_auto_clusters): Chimera's
 * filtering relies on fine clusters (small residuals sharpen the 1-bit estimate and
 * posting lists stay short), the regime of docs/design.md §3: K ~ ntok/512 .. ntok/64.
 * k-means runs hierarchically above 4096 clusters (cluster/kmeans.h) and the same
 * two-level structure assigns every token; the fraction of tokens that get their exact
 * nearest centroid is measured on a sample and reported. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cluster/assign.h"
#include "cluster/kmeans.h"
#include "cluster/postings.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/pool.h"
#include "core/progress.h"
#include "core/rng.h"
#include "index/index.h"
#include "core/alloc.h"

#define ROWS_PER_TASK 4096
#define TRAIN_POINTS_PER_CENTROID 64

uint32_t ix_auto_clusters(int64_t n_tokens)
{
    int64_t k = (n_tokens / 100 + 32) / 64 * 64;
    if (k > n_tokens / 4) k = n_tokens / 4;
    if (k < 1) k = 1;
    if (k > (1 << 24)) k = 1 << 24;
    return (uint32_t)k;
}

typedef struct phase_clock {
    ix_build_report *r;
    double t0;
} phase_clock;

static void phase_start(phase_clock *pc) { pc->t0 = cm_now(); }

static void phase_end(phase_clock *pc, const char *name)
{
    ix_build_report *r = pc->r;
    if (r->n_phases < IX_MAX_PHASES) {
        r->phase[r->n_phases] = name;
        r->seconds[r->n_phases++] = cm_now() - pc->t0;
    }
}

/* ---- parallel passes over the token matrix ------------------------------------------ */

typedef struct pass_ctx {
    const data_corpus *c;
    cm_progress *prog;
    /* assignment */
    ivf_assigner *assigner;
    uint32_t *assign;
    /* encoding */
    const quant_rotation *rot;
    const float *c_rot;
    uint32_t bits;
    uint8_t *d1, *dB;
    quant_f1 *f1;
    quant_fB *fB;
    float **conv, **rot_buf; /* per worker: ROWS_PER_TASK x dim, x dim_pad */
    chimera_status status;  /* first failure (set under no lock: any failure is fatal) */
} pass_ctx;

static void assign_task(void *ctx, int64_t t, int w)
{
    pass_ctx *p = ctx;
    int64_t r0 = t * ROWS_PER_TASK, n = p->c->n_tokens - r0;
    if (n > ROWS_PER_TASK) n = ROWS_PER_TASK;
    const float *rows = data_corpus_rows(p->c, r0, n, p->conv[w]);
    ivf_assign(p->assigner, rows, n, p->c->dim, p->assign + r0, NULL);
    cm_progress_add(p->prog, (uint64_t)n);
}

static void encode_task(void *ctx, int64_t t, int w)
{
    pass_ctx *p = ctx;
    int64_t r0 = t * ROWS_PER_TASK, n = p->c->n_tokens - r0;
    if (n > ROWS_PER_TASK) n = ROWS_PER_TASK;
    uint32_t dp = p->rot->dim_pad;
    const float *rows = data_corpus_rows(p->c, r0, n, p->conv[w]);
    quant_rotate_n(p->rot, (size_t)n, rows, p->c->dim, p->rot_buf[w], dp);
    chimera_error err;
    size_t c1 = qm_code1_bytes(dp), cB = qm_codeB_bytes(dp, p->bits);
    if (quant_encode(dp, p->bits, (size_t)n, p->rot_buf[w], p->c_rot, p->assign + r0,
                     p->d1 + (size_t)r0 * c1, p->f1 + r0, p->dB + (size_t)r0 * cB, p->fB + r0,
                     &err) != CHIMERA_OK)
        p->status = err.code;
    cm_progress_add(p->prog, (uint64_t)n);
}

/* ---- sections ---------------------------------------------------------------------- */

static chimera_status put(store_writer *w, const char *name, const char *dtype, uint32_t ndim,
                          uint64_t d0, uint64_t d1, const void *data, uint64_t *total,
                          chimera_error *err)
{
    store_type t = {dtype, ndim, {d0, d1, 0, 0}};
    uint64_t bytes = fmt_dtype_size(dtype) * d0 * (ndim > 1 ? d1 : 1);
    *total += bytes;
    return store_writer_add_typed(w, name, &t, data, bytes, err);
}

static cJSON *build_meta(const data_corpus *c, const ix_build_opts *o, uint32_t dim_pad,
                         uint32_t k, const graph *g, const ivf_postings_stats *ps,
                         const ix_build_report *r)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "dim", c->dim);
    cJSON_AddNumberToObject(m, "dim_pad", dim_pad);
    cJSON_AddNumberToObject(m, "bits", o->bits);
    cJSON_AddNumberToObject(m, "n_docs", (double)c->n_docs);
    cJSON_AddNumberToObject(m, "n_tokens", (double)c->n_tokens);
    cJSON_AddNumberToObject(m, "n_clusters", k);
    cJSON_AddNumberToObject(m, "graph_degree", g->degree);
    cJSON_AddNumberToObject(m, "graph_entries", g->n_entry);
    /* documents marked in the deletion bitmap; open checks the two agree */
    cJSON_AddNumberToObject(m, "n_deleted", 0);
    cJSON *b = cJSON_AddObjectToObject(m, "build");
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    cJSON_AddStringToObject(b, "seed", seed);
    cJSON_AddNumberToObject(b, "threads", o->n_threads);
    cJSON_AddStringToObject(b, "source_dtype", cm_dtype_name(c->dtype));
    cJSON_AddNumberToObject(b, "assign_recall", r->assign_recall);
    cJSON_AddNumberToObject(b, "graph_repair_edges", g->n_repair_edges);
    cJSON *ph = cJSON_AddObjectToObject(b, "seconds");
    for (int i = 0; i < r->n_phases; i++) cJSON_AddNumberToObject(ph, r->phase[i], r->seconds[i]);
    cJSON_AddNumberToObject(b, "peak_rss_bytes", (double)cm_peak_rss_bytes());
    cJSON *p = cJSON_AddObjectToObject(m, "postings");
    cJSON_AddNumberToObject(p, "min", (double)ps->min);
    cJSON_AddNumberToObject(p, "median", (double)ps->median);
    cJSON_AddNumberToObject(p, "max", (double)ps->max);
    cJSON_AddNumberToObject(p, "mean", ps->mean);
    cJSON_AddNumberToObject(p, "imbalance", ps->imbalance);
    cJSON_AddNumberToObject(p, "empty", ps->n_empty);
    return m;
}

/* ---- the build --------------------------------------------------------------------- */

chimera_status ix_build(const data_corpus *c, const char *out_dir, const ix_build_opts *opts,
                        ix_build_report *report, chimera_error *err)
{
    ix_build_opts o = *opts;
    if (!o.bits) o.bits = 4;
    if (!o.graph_degree) o.graph_degree = 32;
    ix_build_report rep_local, *rep = report ? report : &rep_local;
    memset(rep, 0, sizeof *rep);
    double t_start = cm_now();
    if (o.bits > QUANT_BITS_MAX)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "build: --bits %u, expected 1..%d", o.bits,
                       QUANT_BITS_MAX);
    /* graph_build would refuse it too, but only after sampling and k-means */
    if (o.graph_degree > GRAPH_DEGREE_MAX)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "build: --graph-degree %u, expected 1..%d",
                       o.graph_degree, GRAPH_DEGREE_MAX);
    if (c->n_tokens < 1 || c->n_tokens >= (int64_t)UINT32_MAX || c->n_docs >= (int64_t)UINT32_MAX)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "build: %lld tokens; an index holds 1 .. 2^32-1 tokens (shard larger corpora)",
                       (long long)c->n_tokens);
    uint32_t k = o.n_clusters ? o.n_clusters : ix_auto_clusters(c->n_tokens);
    if ((int64_t)k > c->n_tokens)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "build: %u clusters for only %lld tokens", k,
                       (long long)c->n_tokens);
    rep->n_clusters = k;
    const uint32_t d = c->dim, dp = quant_dim_pad(d);
    const int64_t N = c->n_tokens;

    chimera_status s = CHIMERA_OK;
    store_writer *w = NULL;
    cm_pool *pool = cm_pool_new(o.n_threads);
    int nw = cm_pool_size(pool);
    o.n_threads = nw;
    float *sample = NULL, *c_rot = NULL, **conv = NULL, **rot_buf = NULL;
    uint32_t *assign = NULL, *post_doc = NULL;
    uint8_t *d1 = NULL, *dB = NULL, *c1 = NULL, *deleted = NULL;
    quant_f1 *f1 = NULL, *cf1 = NULL;
    quant_fB *fB = NULL;
    int64_t *doc_ids = NULL;
    kmeans_result km = {0};
    ivf_assigner *assigner = NULL;
    ivf_postings post = {0};
    graph g = {0};
    quant_rotation *rot = cm_malloc(sizeof *rot);
    cJSON *meta = NULL;
    phase_clock pc = {rep, 0};
    cm_progress prog;
    if (!pool || !rot) goto nomem;

    /* Fail early on an unusable target, before hours of work. */
    store_write_opts wo = {.no_sync = o.no_sync};
    s = store_writer_begin(out_dir, &wo, &w, err);
    if (s != CHIMERA_OK) goto done;

    /* 1. training sample: each row kept with probability n_train / N */
    phase_start(&pc);
    int64_t n_train = (int64_t)k * TRAIN_POINTS_PER_CENTROID;
    if (n_train > N) n_train = N;
    sample = cm_aligned_alloc(64, (size_t)n_train * d * sizeof(float));
    conv = cm_calloc((size_t)nw, sizeof *conv);
    rot_buf = cm_calloc((size_t)nw, sizeof *rot_buf);
    if (!sample || !conv || !rot_buf) goto nomem;
    for (int i = 0; i < nw; i++) {
        conv[i] = cm_aligned_alloc(64, (size_t)ROWS_PER_TASK * d * sizeof(float));
        rot_buf[i] = cm_aligned_alloc(64, (size_t)ROWS_PER_TASK * dp * sizeof(float));
        if (!conv[i] || !rot_buf[i]) goto nomem;
    }
    {
        /* Selection sampling (Knuth's algorithm S): exactly n_train rows, in order. */
        cm_rng r;
        cm_rng_seed(&r, o.seed, 0x5a5a);
        int64_t taken = 0;
        for (int64_t i = 0; i < N && taken < n_train; i++) {
            if ((double)(N - i) * cm_rng_uniform(&r) < (double)(n_train - taken)) {
                const float *row = data_corpus_rows(c, i, 1, conv[0]);
                memcpy(sample + (size_t)taken * d, row, d * sizeof(float));
                taken++;
            }
        }
    }
    phase_end(&pc, "sample");

    /* 2. k-means */
    phase_start(&pc);
    kmeans_opts ko = {.seed = o.seed ? o.seed : 1234, .pool = pool, .progress = o.progress,
                      .progress_user = o.progress_user,
                      .max_points_per_centroid = TRAIN_POINTS_PER_CENTROID};
    s = kmeans_train(sample, n_train, d, d, k, &ko, &km, err);
    if (s != CHIMERA_OK) goto done;
    phase_end(&pc, "kmeans");

    /* 3. assignment of every token, and its accuracy on a sample. The assigner
     * parallelises each block over the pool itself, so blocks go one after another. */
    phase_start(&pc);
    ivf_assign_opts ao = {.pool = pool};
    s = ivf_assigner_new(km.centroids, k, d, km.coarse, km.n_coarse, km.child_off, &ao,
                         &assigner, err);
    if (s != CHIMERA_OK) goto done;
    assign = cm_malloc((size_t)N * sizeof *assign);
    if (!assign) goto nomem;
    {
        cm_progress_begin(&prog, o.progress, o.progress_user, "assign", (uint64_t)N);
        pass_ctx p = {.c = c, .prog = &prog, .assigner = assigner, .assign = assign, .conv = conv};
        int64_t n_tasks = (N + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
        for (int64_t t = 0; t < n_tasks; t++) assign_task(&p, t, 0);
        cm_progress_end(&prog);
        rep->assign_recall = ivf_assign_recall(assigner, sample, n_train, d, 20000, o.seed + 7);
    }
    phase_end(&pc, "assign");

    /* 4. posting lists and the centroid graph */
    phase_start(&pc);
    s = ivf_postings_build(assign, N, k, &post, err);
    if (s != CHIMERA_OK) goto done;
    ivf_postings_stats pst;
    if (ivf_postings_stats_get(&post, &pst) != 0) goto nomem;
    graph_build_opts go = {.degree = o.graph_degree, .seed = o.seed ? o.seed : 1234,
                           .pool = pool, .progress = o.progress, .progress_user = o.progress_user};
    s = graph_build(km.centroids, k, d, &go, &g, err);
    if (s != CHIMERA_OK) goto done;
    phase_end(&pc, "graph");

    /* 5. RaBitQ encoding, doc-major, then the cluster-major copy of the 1-bit plane */
    phase_start(&pc);
    s = quant_rotation_init(rot, d, o.seed, err);
    if (s != CHIMERA_OK) goto done;
    size_t cb1 = qm_code1_bytes(dp), cbB = qm_codeB_bytes(dp, o.bits);
    c_rot = cm_aligned_alloc(64, (size_t)k * dp * sizeof(float));
    d1 = cm_aligned_alloc(64, (size_t)N * cb1);
    dB = cm_aligned_alloc(64, (size_t)N * cbB);
    f1 = cm_malloc((size_t)N * sizeof *f1);
    fB = cm_malloc((size_t)N * sizeof *fB);
    c1 = cm_aligned_alloc(64, (size_t)N * cb1);
    cf1 = cm_malloc((size_t)N * sizeof *cf1);
    post_doc = cm_malloc((size_t)N * sizeof *post_doc);
    if (!c_rot || !d1 || !dB || !f1 || !fB || !c1 || !cf1 || !post_doc) goto nomem;
    quant_rotate_n(rot, k, km.centroids, d, c_rot, dp);
    {
        cm_progress_begin(&prog, o.progress, o.progress_user, "encode", (uint64_t)N);
        pass_ctx p = {.c = c, .prog = &prog, .assign = assign, .rot = rot, .c_rot = c_rot,
                      .bits = o.bits, .d1 = d1, .dB = dB, .f1 = f1, .fB = fB, .conv = conv,
                      .rot_buf = rot_buf, .status = CHIMERA_OK};
        cm_pool_run(pool, (N + ROWS_PER_TASK - 1) / ROWS_PER_TASK, encode_task, &p);
        cm_progress_end(&prog);
        if (p.status != CHIMERA_OK) {
            s = cm_fail(err, p.status, "build: encoding failed (%s)", chimera_status_str(p.status));
            goto done;
        }
    }
    /* token -> document, then the cluster-major gather */
    {
        uint32_t *tok_doc = post_doc; /* reuse: first token->doc, then position->doc */
        uint32_t *tmp = cm_malloc((size_t)N * sizeof *tmp);
        if (!tmp) goto nomem;
        for (int64_t dd = 0; dd < c->n_docs; dd++)
            for (int64_t t = c->doc_off[dd]; t < c->doc_off[dd + 1]; t++) tmp[t] = (uint32_t)dd;
        for (int64_t i = 0; i < N; i++) {
            uint32_t t = post.ids[i];
            memcpy(c1 + (size_t)i * cb1, d1 + (size_t)t * cb1, cb1);
            cf1[i] = f1[t];
            tok_doc[i] = tmp[t];
        }
        cm_free(tmp);
    }
    phase_end(&pc, "encode");

    /* 6. sections */
    phase_start(&pc);
    doc_ids = cm_malloc((size_t)(c->n_docs + 1) * sizeof *doc_ids);
    deleted = cm_calloc((size_t)(c->n_docs + 8) / 8, 1);
    if (!doc_ids || !deleted) goto nomem;
    for (int64_t i = 0; i < c->n_docs; i++) doc_ids[i] = data_corpus_id(c, i);
    {
        uint8_t *rbuf = cm_malloc(quant_rotation_serialized_size(rot));
        if (!rbuf) goto nomem;
        quant_rotation_serialize(rot, rbuf);
        uint64_t tot = 0, K = k, n = (uint64_t)N, D = (uint64_t)c->n_docs;
        if ((s = put(w, "rotation", "u8", 1, quant_rotation_serialized_size(rot), 0, rbuf, &tot, err)) ||
            (s = put(w, "centroids", "f32", 2, K, d, km.centroids, &tot, err)) ||
            (s = put(w, "graph_adj", "u32", 2, K, g.degree, g.adj, &tot, err)) ||
            (s = put(w, "graph_entry", "u32", 1, g.n_entry, 0, g.entry, &tot, err)) ||
            (s = put(w, "post_off", "i64", 1, K + 1, 0, post.offsets, &tot, err)) ||
            (s = put(w, "post_tok", "u32", 1, n, 0, post.ids, &tot, err)) ||
            (s = put(w, "post_doc", "u32", 1, n, 0, post_doc, &tot, err)) ||
            (s = put(w, "c1_codes", "u8", 2, n, cb1, c1, &tot, err)) ||
            (s = put(w, "c1_fact", "u16", 2, n, 3, cf1, &tot, err)) ||
            (s = put(w, "d1_codes", "u8", 2, n, cb1, d1, &tot, err)) ||
            (s = put(w, "d1_fact", "u16", 2, n, 3, f1, &tot, err)) ||
            (s = put(w, "tok_cid", "u32", 1, n, 0, assign, &tot, err)) ||
            (s = put(w, "dB_codes", "u8", 2, n, cbB, dB, &tot, err)) ||
            (s = put(w, "dB_fact", "u8", 2, n, sizeof(quant_fB), fB, &tot, err)) ||
            (s = put(w, "doc_off", "i64", 1, D + 1, 0, c->doc_off, &tot, err)) ||
            (s = put(w, "doc_ids", "i64", 1, D, 0, doc_ids, &tot, err)) ||
            (s = put(w, "deleted", "u8", 1, (D + 7) / 8, 0, deleted, &tot, err))) {
            cm_free(rbuf);
            goto done;
        }
        cm_free(rbuf);
        rep->bytes_written = tot;
    }
    phase_end(&pc, "write");
    rep->total_seconds = cm_now() - t_start;
    meta = build_meta(c, &o, dp, k, &g, &pst, rep);
    if (!meta) goto nomem;
    cJSON_AddNumberToObject(cJSON_GetObjectItem(meta, "build"), "total_seconds", rep->total_seconds);
    s = store_writer_commit(w, meta, err);
    w = NULL; /* consumed */
    rep->total_seconds = cm_now() - t_start;
    rep->peak_rss = cm_peak_rss_bytes();
    goto done;

nomem:
    s = cm_fail(err, CHIMERA_ERR_NOMEM, "build: out of memory");
done:
    if (w) store_writer_abort(w);
    cJSON_Delete(meta);
    if (conv)
        for (int i = 0; i < nw; i++) cm_free(conv[i]);
    if (rot_buf)
        for (int i = 0; i < nw; i++) cm_free(rot_buf[i]);
    cm_free(conv);
    cm_free(rot_buf);
    cm_free(sample);
    cm_free(c_rot);
    cm_free(assign);
    cm_free(post_doc);
    cm_free(d1);
    cm_free(dB);
    cm_free(c1);
    cm_free(f1);
    cm_free(fB);
    cm_free(cf1);
    cm_free(doc_ids);
    cm_free(deleted);
    cm_free(rot);
    ivf_assigner_free(assigner);
    ivf_postings_free(&post);
    graph_free(&g);
    kmeans_result_free(&km);
    cm_pool_free(pool);
    return s;
}
