/* Index build: sample -> k-means -> assignment -> posting lists + centroid graph ->
 * RaBitQ encoding -> sections (index/sections.h), committed crash-safely by store.
 * Each stage is a function named for it (stage_sample, stage_train, stage_assign,
 * stage_graph, stage_encode, stage_write) over one build_state that owns every buffer;
 * ix_build times them and frees the state once.
 *
 * Memory. The token matrix is read through its mapping in blocks and never copied
 * whole; the training sample (ix_codebook_sample_size: at most 64 points per centroid,
 * 2^21 rows past 32,768 centroids) is the one float32 copy, freed after assignment.
 * Everything else held in memory is the output itself (codes, factors, lists), freed
 * once written, so peak RSS is about the larger of the sample and the index, plus
 * whatever pages of the mapped matrix the kernel keeps cached.
 *
 * Determinism. Every random step takes the build seed; k-means, assignment, the graph
 * and the encoder are independent of the thread count, so the same input, seed and
 * parameters give byte-identical sections.
 *
 * Clusters. K defaults to about one per 100 tokens (ix_auto_clusters): Chimera's
 * filtering relies on fine clusters (small residuals sharpen the 1-bit estimate and
 * posting lists stay short), the regime of docs/design.md §3: K ~ ntok/512 .. ntok/64.
 * From 4096 clusters k-means runs hierarchically (cluster/kmeans.h) and the same
 * two-level structure assigns every token; below that assignment is exact (k-means may
 * still train hierarchically there, but returns no coarse level). The fraction of
 * tokens that get their exact nearest centroid is measured on a sample and reported. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/assign.h"
#include "cluster/kmeans.h"
#include "cluster/postings.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/pool.h"
#include "core/progress.h"
#include "core/rng.h"
#include "index/codebook.h"
#include "index/defaults.h"
#include "index/index.h"
#include "index/store.h"
#include "core/alloc.h"

#define ROWS_PER_TASK 4096
/* Rows per call of the assigner: it splits them over the pool itself, and its
 * two-level search wants blocks of thousands of rows per worker (cluster/assign.c).
 * A corpus gets at least ~64 calls (progress points, each one a chance to cancel)
 * unless that would make them smaller than ROWS_PER_TASK. */
#define ASSIGN_ROWS 65536
#define ASSIGN_MIN_CALLS 64
/* rows of the sample that only measures a given codebook (assignment recall) */
#define CHECK_SAMPLE 20000

uint32_t ix_auto_clusters(int64_t n_tokens)
{
    /* rounded to a multiple of 64 only from 64 up: below, rounding would leave a few
     * thousand tokens in one cluster */
    int64_t k = n_tokens / 100;
    if (k >= 64) k = (k + 32) / 64 * 64;
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
    cm_watch *watch; /* set once the caller cancels: the remaining tasks are skipped */
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
    float *assign_conv;      /* ASSIGN_ROWS x dim: float16 rows converted (else NULL) */
    chimera_status status;  /* first failure (set under no lock: any failure is fatal) */
} pass_ctx;

static void assign_block(pass_ctx *p, int64_t r0, int64_t max_rows)
{
    if (cm_watch_flag(p->watch)) return;
    int64_t n = p->c->n_tokens - r0;
    if (n > max_rows) n = max_rows;
    const float *rows = data_corpus_rows(p->c, r0, n, p->assign_conv);
    ivf_assign(p->assigner, rows, n, p->c->dim, p->assign + r0, NULL);
    cm_progress_add(p->prog, (uint64_t)n);
}

static void encode_task(void *ctx, int64_t t, int w)
{
    pass_ctx *p = ctx;
    if (cm_watch_flag(p->watch)) return;
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

/* One section to write: its shape (the element type comes from the list). */
typedef struct section_out {
    uint32_t ndim;
    uint64_t d0, d1;
    const void *data;
} section_out;

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
    cJSON_AddNumberToObject(b, "assign_sim_p10", r->assign_sim_p10);
    if (o->rerank) cJSON_AddStringToObject(b, "rerank", chimera_rerank_name(o->rerank));
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

/* ---- the stages ------------------------------------------------------------------- */

/* Everything the stages share; build_state_free releases what is set. */
typedef struct build_state {
    const data_corpus *c;
    ix_build_opts o;         /* defaults filled in; progress goes through watch */
    cm_watch watch;          /* the caller's progress and cancel callbacks */
    ix_build_report *rep;
    uint32_t k, d, dp;
    int64_t N;
    cm_pool *pool;
    int nw;
    float **conv, **rot_buf; /* per worker: ROWS_PER_TASK x dim, x dim_pad */
    float *sample;           /* stage_sample: n_train x dim */
    int64_t n_train;
    ivf_kmeans_result km;    /* stage_train */
    ivf_assigner *assigner;  /* stage_assign */
    uint32_t *assign;        /* N: centroid of each token */
    ivf_postings post;       /* stage_graph */
    ivf_postings_stats pst;
    graph g;
    quant_rotation *rot;     /* stage_encode */
    float *c_rot;
    uint8_t *d1, *dB, *c1;
    quant_f1 *f1, *cf1;
    quant_fB *fB;
    uint32_t *post_doc;
} build_state;

static chimera_status nomem(chimera_error *err)
{
    return cm_fail(err, CHIMERA_ERR_NOMEM, "build: out of memory");
}

/* The training sample: exactly n_train rows, each kept with probability n_train / N
 * (ix_codebook_sample), in order; also the per-worker block buffers the later passes
 * use. With a given codebook nothing is trained, and the sample only measures it. */
static chimera_status stage_sample(build_state *b, chimera_error *err)
{
    const uint32_t d = b->d;
    b->n_train = b->o.codebook ? (b->N < CHECK_SAMPLE ? b->N : CHECK_SAMPLE)
                               : ix_codebook_sample_size(b->k, b->N);
    b->sample = cm_aligned_alloc(64, (size_t)b->n_train * d * sizeof(float));
    b->conv = cm_calloc((size_t)b->nw, sizeof *b->conv);
    b->rot_buf = cm_calloc((size_t)b->nw, sizeof *b->rot_buf);
    if (!b->sample || !b->conv || !b->rot_buf) return nomem(err);
    for (int i = 0; i < b->nw; i++) {
        b->conv[i] = cm_aligned_alloc(64, (size_t)ROWS_PER_TASK * d * sizeof(float));
        b->rot_buf[i] = cm_aligned_alloc(64, (size_t)ROWS_PER_TASK * b->dp * sizeof(float));
        if (!b->conv[i] || !b->rot_buf[i]) return nomem(err);
    }
    return ix_codebook_sample(b->c, b->n_train, b->o.seed, 0, b->sample, err);
}

/* k-means on the sample (flat, or hierarchical for many clusters: cluster/kmeans.h),
 * or a copy of the codebook given (shards of one corpus share theirs). */
static chimera_status stage_train(build_state *b, chimera_error *err)
{
    ix_codebook cb;
    if (b->o.codebook) CM_TRY(ix_codebook_copy(b->o.codebook, &cb, err));
    else
        CM_TRY(ix_codebook_train(b->sample, b->n_train, b->d, b->k, b->o.seed, b->pool,
                                 b->o.progress, b->o.progress_user, &b->watch, &cb, err));
    b->km.k = cb.k;
    b->km.d = cb.d;
    b->km.centroids = cb.centroids;
    b->km.n_coarse = cb.n_coarse;
    b->km.coarse = cb.coarse;
    b->km.child_off = cb.child_off;
    b->km.n_train = b->n_train;
    return CHIMERA_OK;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Every token to its centroid, and the accuracy of that on the sample. The assigner
 * parallelises each block over the pool itself, so blocks go one after another. */
static chimera_status stage_assign(build_state *b, chimera_error *err)
{
    ivf_assign_opts ao = {.pool = b->pool};
    CM_TRY(ivf_assigner_new(b->km.centroids, b->k, b->d, b->km.coarse, b->km.n_coarse,
                            b->km.child_off, &ao, &b->assigner, err));
    b->assign = cm_malloc((size_t)b->N * sizeof *b->assign);
    if (!b->assign) return nomem(err);
    float *conv = NULL;
    if (b->c->dtype != CM_F32 &&
        !(conv = cm_aligned_alloc(64, (size_t)ASSIGN_ROWS * b->d * sizeof(float))))
        return nomem(err);
    cm_progress prog;
    cm_progress_begin(&prog, b->o.progress, b->o.progress_user, "assign", (uint64_t)b->N);
    pass_ctx p = {.c = b->c, .prog = &prog, .watch = &b->watch, .assigner = b->assigner,
                  .assign = b->assign, .assign_conv = conv};
    int64_t rows = b->N / ASSIGN_MIN_CALLS;
    rows = rows < ROWS_PER_TASK ? ROWS_PER_TASK : rows > ASSIGN_ROWS ? ASSIGN_ROWS : rows;
    for (int64_t r0 = 0; r0 < b->N; r0 += rows) assign_block(&p, r0, rows);
    cm_progress_end(&prog);
    cm_free(conv);
    if (cm_watch_flag(&b->watch)) return CHIMERA_ERR_CANCELLED; /* assign is partial */
    b->rep->assign_recall =
        ivf_assign_recall(b->assigner, b->sample, b->n_train, b->d, 20000, b->o.seed + 7);
    /* The 10th percentile of a token's similarity to its centroid, on (part of) the
     * training sample: the yardstick for tokens appended later (update.h, "Drift"). */
    int64_t ns = b->n_train < 20000 ? b->n_train : 20000;
    uint32_t *ids = cm_malloc((size_t)ns * sizeof *ids);
    float *ips = cm_malloc((size_t)ns * sizeof *ips);
    if (!ids || !ips) {
        cm_free(ids);
        cm_free(ips);
        return nomem(err);
    }
    ivf_assign(b->assigner, b->sample, ns, b->d, ids, ips);
    qsort(ips, (size_t)ns, sizeof *ips, cmp_float);
    b->rep->assign_sim_p10 = ips[ns / 10];
    cm_free(ids);
    cm_free(ips);
    return CHIMERA_OK;
}

/* The posting lists (and their statistics) and the proximity graph over the centroids. */
static chimera_status stage_graph(build_state *b, chimera_error *err)
{
    CM_TRY(ivf_postings_build(b->assign, b->N, b->k, &b->post, err));
    if (ivf_postings_stats_get(&b->post, &b->pst) != 0) return nomem(err);
    graph_build_opts go = {.degree = b->o.graph_degree, .seed = b->o.seed ? b->o.seed : 1234,
                           .pool = b->pool, .progress = b->o.progress,
                           .progress_user = b->o.progress_user};
    return graph_build(b->km.centroids, b->k, b->d, &go, &b->g, err);
}

/* RaBitQ encoding, doc-major, then the cluster-major copy of the 1-bit plane and the
 * document of every posting position. */
static chimera_status stage_encode(build_state *b, chimera_error *err)
{
    const uint32_t d = b->d, dp = b->dp, k = b->k;
    const int64_t N = b->N;
    CM_TRY(quant_rotation_init(b->rot, d, b->o.seed, err));
    size_t cb1 = qm_code1_bytes(dp), cbB = qm_codeB_bytes(dp, b->o.bits);
    b->c_rot = cm_aligned_alloc(64, (size_t)k * dp * sizeof(float));
    b->d1 = cm_aligned_alloc(64, (size_t)N * cb1);
    b->dB = cm_aligned_alloc(64, (size_t)N * cbB);
    b->f1 = cm_malloc((size_t)N * sizeof *b->f1);
    b->fB = cm_malloc((size_t)N * sizeof *b->fB);
    b->c1 = cm_aligned_alloc(64, (size_t)N * cb1);
    b->cf1 = cm_malloc((size_t)N * sizeof *b->cf1);
    b->post_doc = cm_malloc((size_t)N * sizeof *b->post_doc);
    if (!b->c_rot || !b->d1 || !b->dB || !b->f1 || !b->fB || !b->c1 || !b->cf1 || !b->post_doc)
        return nomem(err);
    quant_rotate_n(b->rot, k, b->km.centroids, d, b->c_rot, dp);
    cm_progress prog;
    cm_progress_begin(&prog, b->o.progress, b->o.progress_user, "encode", (uint64_t)N);
    pass_ctx p = {.c = b->c, .prog = &prog, .watch = &b->watch, .assign = b->assign,
                  .rot = b->rot, .c_rot = b->c_rot, .bits = b->o.bits, .d1 = b->d1, .dB = b->dB,
                  .f1 = b->f1, .fB = b->fB, .conv = b->conv, .rot_buf = b->rot_buf,
                  .status = CHIMERA_OK};
    cm_pool_run(b->pool, (N + ROWS_PER_TASK - 1) / ROWS_PER_TASK, encode_task, &p);
    cm_progress_end(&prog);
    if (cm_watch_flag(&b->watch)) return CHIMERA_ERR_CANCELLED; /* codes are partial */
    if (p.status != CHIMERA_OK)
        return cm_fail(err, p.status, "build: encoding failed (%s)",
                       chimera_status_str(p.status));
    /* token -> document, then the cluster-major gather */
    uint32_t *tok_doc = b->post_doc; /* reuse: first token->doc, then position->doc */
    uint32_t *tmp = cm_malloc((size_t)N * sizeof *tmp);
    if (!tmp) return nomem(err);
    const data_corpus *c = b->c;
    for (int64_t dd = 0; dd < c->n_docs; dd++)
        for (int64_t t = c->doc_off[dd]; t < c->doc_off[dd + 1]; t++) tmp[t] = (uint32_t)dd;
    for (int64_t i = 0; i < N; i++) {
        uint32_t t = b->post.ids[i];
        memcpy(b->c1 + (size_t)i * cb1, b->d1 + (size_t)t * cb1, cb1);
        b->cf1[i] = b->f1[t];
        tok_doc[i] = tmp[t];
    }
    cm_free(tmp);
    return CHIMERA_OK;
}

/* Every section of the list (index/sections.h), in its order and with its element
 * type; the shapes and data are filled here by section id. */
static chimera_status stage_write(build_state *b, ix_store_writer *w, chimera_error *err)
{
    const data_corpus *c = b->c;
    const uint64_t K = b->k, n = (uint64_t)b->N, D = (uint64_t)c->n_docs;
    const uint64_t cb1 = qm_code1_bytes(b->dp), cbB = qm_codeB_bytes(b->dp, b->o.bits);
    const uint64_t rbytes = quant_rotation_serialized_size(b->rot);
    chimera_status s = CHIMERA_ERR_NOMEM;
    int64_t *doc_ids = cm_malloc((size_t)(c->n_docs + 1) * sizeof *doc_ids);
    uint32_t *id_order = cm_malloc((size_t)(c->n_docs + 1) * sizeof *id_order);
    uint8_t *deleted = cm_calloc((size_t)(c->n_docs + 8) / 8, 1);
    uint8_t *rbuf = cm_malloc(rbytes);
    if (!doc_ids || !id_order || !deleted || !rbuf) {
        s = nomem(err);
        goto done;
    }
    for (int64_t i = 0; i < c->n_docs; i++) doc_ids[i] = data_corpus_id(c, i);
    if ((s = ix_id_order_compute(doc_ids, c->n_docs, id_order, err)) != CHIMERA_OK) goto done;
    quant_rotation_serialize(b->rot, rbuf);
    const section_out out[IX_N_SECTIONS] = {
        [IX_SEC_rotation] = {1, rbytes, 0, rbuf},
        [IX_SEC_centroids] = {2, K, b->d, b->km.centroids},
        [IX_SEC_graph_adj] = {2, K, b->g.degree, b->g.adj},
        [IX_SEC_graph_entry] = {1, b->g.n_entry, 0, b->g.entry},
        [IX_SEC_post_off] = {1, K + 1, 0, b->post.offsets},
        [IX_SEC_post_tok] = {1, n, 0, b->post.ids},
        [IX_SEC_post_doc] = {1, n, 0, b->post_doc},
        [IX_SEC_c1_codes] = {2, n, cb1, b->c1},
        [IX_SEC_c1_fact] = {2, n, 3, b->cf1},
        [IX_SEC_d1_codes] = {2, n, cb1, b->d1},
        [IX_SEC_d1_fact] = {2, n, 3, b->f1},
        [IX_SEC_tok_cid] = {1, n, 0, b->assign},
        [IX_SEC_dB_codes] = {2, n, cbB, b->dB},
        [IX_SEC_dB_fact] = {2, n, sizeof(quant_fB), b->fB},
        [IX_SEC_doc_off] = {1, D + 1, 0, c->doc_off},
        [IX_SEC_doc_ids] = {1, D, 0, doc_ids},
        [IX_SEC_deleted] = {1, (D + 7) / 8, 0, deleted},
        [IX_SEC_id_order] = {1, D, 0, id_order},
    };
    uint64_t total = 0;
    for (int i = 0; i < IX_N_SECTIONS; i++) {
        const section_out *o = &out[i];
        if (i == IX_SEC_post_cid) continue; /* dense lists: one per cluster */
        if (i == IX_SEC_vectors_f32 || i == IX_SEC_vectors_bf16 || i == IX_SEC_vectors_f16) {
            /* at most one, streamed from the corpus (never held in memory) */
            if (!b->o.rerank || i != ix_vec_section(b->o.rerank)) continue;
            if ((s = ix_vec_write(w, ix_sections[i].name, b->o.rerank, c, err)) != CHIMERA_OK)
                goto done;
            total += (uint64_t)n * c->dim * ix_vec_elem_bytes(b->o.rerank);
            continue;
        }
        ix_store_type t = {ix_sections[i].dtype, o->ndim, {o->d0, o->d1, 0, 0}};
        uint64_t bytes = ix_fmt_dtype_size(t.dtype) * o->d0 * (o->ndim > 1 ? o->d1 : 1);
        total += bytes;
        s = ix_store_writer_add_typed(w, ix_sections[i].name, &t, o->data, bytes, err);
        if (s != CHIMERA_OK) goto done;
    }
    b->rep->bytes_written = total;
done:
    cm_free(rbuf);
    cm_free(doc_ids);
    cm_free(id_order);
    cm_free(deleted);
    return s;
}

/* Peak memory: the training sample is dead once assignment is measured, and the
 * encoded arrays once written (the calibration reads the written index), so each goes
 * as soon as its last stage ends rather than with the build. */
#define RELEASE(ptr)                                                                     \
    do {                                                                                 \
        cm_free(ptr);                                                                    \
        (ptr) = NULL;                                                                    \
    } while (0)

static void release_sample(build_state *b) { RELEASE(b->sample); }

static void release_written(build_state *b)
{
    RELEASE(b->c_rot);
    RELEASE(b->assign);
    RELEASE(b->post_doc);
    RELEASE(b->d1);
    RELEASE(b->dB);
    RELEASE(b->c1);
    RELEASE(b->f1);
    RELEASE(b->fB);
    RELEASE(b->cf1);
    ivf_postings_free(&b->post);
    ivf_assigner_free(b->assigner);
    b->assigner = NULL;
    ivf_kmeans_result_free(&b->km);
}

static void build_state_free(build_state *b)
{
    if (b->conv)
        for (int i = 0; i < b->nw; i++) cm_free(b->conv[i]);
    if (b->rot_buf)
        for (int i = 0; i < b->nw; i++) cm_free(b->rot_buf[i]);
    cm_free(b->conv);
    cm_free(b->rot_buf);
    release_sample(b);
    release_written(b);
    cm_free(b->rot);
    graph_free(&b->g);
    cm_pool_free(b->pool);
}

/* ---- the build --------------------------------------------------------------------- */

static chimera_status calibrate_stage(const data_corpus *c, const ix_build_opts *o,
                                      ix_store_writer *w, const cJSON *meta, ix_defaults *out,
                                      const char **tmp, chimera_error *err)
{
    CM_TRY(ix_store_writer_preview(w, meta, tmp, err));
    return o->calibrate(o->calibrate_user, c, *tmp, out, err);
}

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
    if (o.rerank < CHIMERA_RERANK_NONE || o.rerank > CHIMERA_RERANK_F32)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "build: rerank %d, expected 0..3 (none, "
                       "f16, bf16, f32)", o.rerank);
    /* graph_build would refuse it too, but only after sampling and k-means */
    if (o.graph_degree > GRAPH_DEGREE_MAX)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "build: --graph-degree %u, expected 1..%d",
                       o.graph_degree, GRAPH_DEGREE_MAX);
    if (c->n_tokens < 1 || c->n_tokens >= (int64_t)UINT32_MAX || c->n_docs >= (int64_t)UINT32_MAX)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "build: %lld tokens; an index holds 1 .. 2^32-1 tokens (shard larger corpora)",
                       (long long)c->n_tokens);
    uint32_t k = o.n_clusters ? o.n_clusters : ix_auto_clusters(c->n_tokens);
    if (o.codebook) {
        /* a shard of a corpus: the codebook fixes the clusters, and its seed the rotation
         * and every other random step, so all shards encode alike */
        if (o.codebook->d != c->dim)
            return cm_fail(err, CHIMERA_ERR_DIM, "build: the codebook is for dimension %u, the "
                           "corpus has %u", o.codebook->d, c->dim);
        if (o.n_clusters && o.n_clusters != o.codebook->k)
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "build: %u clusters asked for, the "
                           "codebook has %u", o.n_clusters, o.codebook->k);
        k = o.codebook->k;
        o.seed = o.codebook->seed;
    } else if ((int64_t)k > c->n_tokens)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "build: %u clusters for only %lld tokens", k,
                       (long long)c->n_tokens);
    rep->n_clusters = k;

    chimera_status s = CHIMERA_OK;
    const char *stage = "start"; /* the stage running, for a cancellation's message */
    ix_store_writer *w = NULL;
    cJSON *meta = NULL;
    ix_defaults defaults = {0};
    phase_clock pc = {rep, 0};
    build_state b = {.c = c, .rep = rep, .k = k, .d = c->dim, .dp = quant_dim_pad(c->dim),
                     .N = c->n_tokens};
    b.pool = cm_pool_new(o.n_threads);
    b.nw = cm_pool_size(b.pool);
    o.n_threads = b.nw;
    b.o = o;
    /* Every stage reports progress through the watch, so each progress point (about 200
     * a phase, in k-means and the graph too) also polls the caller's cancel callback;
     * the stages are checked between, and the writer's abort removes the temporary
     * directory, leaving the index at out_dir as it was. */
    cm_watch_init(&b.watch, o.progress, o.progress_user, o.cancel, o.cancel_user);
    if (o.progress || o.cancel) {
        b.o.progress = cm_watch_progress;
        b.o.progress_user = &b.watch;
    }
    b.rot = cm_malloc(sizeof *b.rot);
    if (!b.pool || !b.rot) {
        s = nomem(err);
        goto done;
    }

    /* Fail early on an unusable target, before hours of work. */
    ix_store_write_opts wo = {.no_sync = o.no_sync, .check_generation = o.check_generation,
                              .expect_generation = o.expect_generation};
    s = ix_store_writer_begin(out_dir, &wo, &w, err);
    if (s != CHIMERA_OK) goto done;

    /* The phase names are the manifest's meta.build.seconds keys (`chimera info`). */
#define STAGE(name, call)                                                                      \
    do {                                                                                       \
        stage = name;                                                                          \
        if (cm_watch_stopped(&b.watch)) goto cancelled;                                        \
        phase_start(&pc);                                                                      \
        s = (call);                                                                            \
        if (cm_watch_flag(&b.watch)) goto cancelled; /* whatever the stage returned */        \
        if (s != CHIMERA_OK) goto done;                                                        \
        phase_end(&pc, name);                                                                  \
    } while (0)
    STAGE("sample", stage_sample(&b, err));
    STAGE("kmeans", stage_train(&b, err));
    STAGE("assign", stage_assign(&b, err));
    release_sample(&b);
    STAGE("graph", stage_graph(&b, err));
    STAGE("encode", stage_encode(&b, err));
    STAGE("write", stage_write(&b, w, err));
    release_written(&b);
    /* The calibration measures the written index (a preview of the manifest in the
     * temporary directory makes it openable), so that its defaults are committed with
     * it: one commit, one generation, and no reader ever sees the index without them. */
    if (o.calibrate) {
        meta = build_meta(c, &o, b.dp, k, &b.g, &b.pst, rep);
        const char *tmp = NULL;
        if (!meta) {
            s = nomem(err);
            goto done;
        }
        STAGE("calibrate", calibrate_stage(c, &o, w, meta, &defaults, &tmp, err));
        cJSON_Delete(meta);
        meta = NULL;
    }
#undef STAGE
    stage = "commit";
    if (cm_watch_stopped(&b.watch)) goto cancelled;
    rep->total_seconds = cm_now() - t_start;
    meta = build_meta(c, &o, b.dp, k, &b.g, &b.pst, rep);
    if (!meta || !ix_defaults_to_meta(meta, &defaults) ||
        !ix_source_to_meta(meta, o.source_tokens, o.source_doclens, o.source_ids)) {
        s = nomem(err);
        goto done;
    }
    rep->defaults = defaults;
    cJSON_AddNumberToObject(cJSON_GetObjectItem(meta, "build"), "total_seconds", rep->total_seconds);
    if (o.carry_meta && (s = ix_store_writer_copy_file(w, "meta.sqlite", o.carry_meta, err)) !=
                            CHIMERA_OK)
        goto done;
    s = ix_store_writer_commit(w, meta, err);
    w = NULL; /* consumed */
    rep->total_seconds = cm_now() - t_start;
    rep->peak_rss = cm_peak_rss_bytes();
    goto done;
cancelled:
    s = cm_fail(err, CHIMERA_ERR_CANCELLED, "build: cancelled (at %s); %s is as it was",
                stage, out_dir);
done:
    if (w) ix_store_writer_abort(w);
    cJSON_Delete(meta);
    build_state_free(&b);
    return s;
}
