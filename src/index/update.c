/* Add, delete, update and compact (update.h gives the storage and the protocol).
 *
 * Every call is a `change`: take the writer lock, open the index as it is, write new
 * sections (in place for add/delete/update, into a new directory for compact), edit a
 * copy of the meta, commit, release. An error anywhere before the commit aborts the
 * writer, which removes what it wrote; the index is then as it was. */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/assign.h"
#include "cluster/kmeans.h"
#include "cluster/postings.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/pool.h"
#include "core/progress.h"
#include "index/defaults.h"
#include "index/index.h"
#include "index/store.h"
#include "index/metadata.h"
#include "index/update.h"
#include "quant/rabitq.h"

#define ROWS_PER_BLOCK 4096
/* Up to this many centroids, new tokens are assigned exactly (a blocked sgemm against
 * all of them); above, through two levels (two_level_make). */
#define EXACT_ASSIGN_MAX_K 4096

typedef struct change {
    const char *dir;
    ix_update_opts o;
    ix_store_lock *lock;
    ix_index ix;
    int opened;
    ix_store_writer *w;
    cJSON *meta;      /* the edited copy */
    uint32_t next_seq;
    char (*drop)[FMT_NAME_BYTES];
    uint32_t n_drop, cap_drop;
    /* document metadata (metadata.h): the database, when the index has one */
    ix_meta *md;
    int md_repaired;           /* log entries replayed when it was found behind */
    const char *md_op, *md_fmt; /* the change to it, if any: "replace", "upsert", "delete" */
    char md_section[FMT_NAME_BYTES];
} change;

static chimera_status nomem(chimera_error *err)
{
    return cm_fail(err, CHIMERA_ERR_NOMEM, "index update: out of memory");
}

/* The caller's cancel callback, polled between blocks of work (never after the commit
 * point: a change that committed is reported as done). */
static int cancelled(const ix_update_opts *o) { return o && o->cancel && o->cancel(o->cancel_user); }

static chimera_status cancel_fail(const char *dir, chimera_error *err)
{
    return cm_fail(err, CHIMERA_ERR_CANCELLED, "%s: cancelled; the index is as it was", dir);
}

static uint32_t max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }

/* The largest seq the meta's segment and tombstone lists use, + 1, or its next_seq if
 * larger: a section name is never used twice in the life of an index directory. */
static uint32_t first_free_seq(const ix_index *ix, const cJSON *meta)
{
    uint32_t seq = 1;
    for (uint32_t i = 0; i < ix->n_segs; i++) seq = max_u32(seq, ix->segs[i].seq + 1);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(meta, "tombstones"), *it;
    cJSON_ArrayForEach(it, t)
    {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(it, "seq");
        if (cJSON_IsNumber(s) && s->valuedouble >= 0 && s->valuedouble < 1e9)
            seq = max_u32(seq, (uint32_t)s->valuedouble + 1);
    }
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(meta, "next_seq");
    if (cJSON_IsNumber(n) && n->valuedouble >= 0 && n->valuedouble < 1e9)
        seq = max_u32(seq, (uint32_t)n->valuedouble);
    return seq;
}

static chimera_status drop_section(change *c, const char *name, chimera_error *err)
{
    if (c->n_drop == c->cap_drop) {
        uint32_t cap = c->cap_drop ? 2 * c->cap_drop : 32;
        char(*d)[FMT_NAME_BYTES] = cm_realloc(c->drop, cap * sizeof *d);
        if (!d) return nomem(err);
        c->drop = d;
        c->cap_drop = cap;
    }
    snprintf(c->drop[c->n_drop++], FMT_NAME_BYTES, "%s", name);
    return CHIMERA_OK;
}

/* The database holds every metadata change the index committed (ix_meta_begin replayed
 * what it lacked), so the sections that carried those changes to it, and the log
 * entries naming them, are spent: this change's commit drops them and leaves its own
 * entry alone in the log. Kept, they would pile up with every change until the
 * manifest outgrew FMT_MAX_SECTIONS. A crash before the commit drops nothing; after
 * it, the database at worst lacks only this change, which the log still names. */
static chimera_status drop_spent_metadata_changes(change *c, chimera_error *err)
{
    for (uint32_t i = 0; i < ix_store_n_sections(c->ix.st); i++) {
        const char *name = ix_store_section_at(c->ix.st, i)->name;
        if (ix_section_is_metadata_change(name)) CM_TRY(drop_section(c, name, err));
    }
    ix_meta_clear_log(c->meta);
    return CHIMERA_OK;
}

static chimera_status change_begin(change *c, const char *dir, const ix_update_opts *opts,
                                   int in_place, int meta_flags, chimera_error *err)
{
    memset(c, 0, sizeof *c);
    c->dir = dir;
    if (opts) c->o = *opts;
    CM_TRY(ix_store_require_dir(dir, err));
    CM_TRY(ix_store_lock_acquire(dir, c->o.lock_timeout_ms, &c->lock, err));
    store *st;
    /* A compaction (the one writer that is not in place) rewrites every section under
     * fresh checksums, so it verifies the old ones first: copied, damage would become
     * undetectable. */
    CM_TRY(ix_store_open(dir, !in_place, &st, err));
    chimera_status s = ix_open_store(st, &c->ix, err);
    if (s != CHIMERA_OK) {
        cm_fail_prefix(err, "%s", dir);
        return s;
    }
    c->opened = 1;
    c->meta = cJSON_Duplicate(ix_store_meta(c->ix.st), 1);
    if (!c->meta) return nomem(err);
    c->next_seq = first_free_seq(&c->ix, c->meta);
    CM_TRY(ix_meta_begin(dir, &c->ix, meta_flags, &c->md, &c->md_repaired, err));
    if (in_place) {
        ix_store_write_opts wo = {.no_sync = c->o.no_sync};
        CM_TRY(ix_store_delta_begin(dir, c->ix.st, c->lock, &wo, &c->w, err));
        if (c->md) CM_TRY(drop_spent_metadata_changes(c, err));
    }
    return CHIMERA_OK;
}

static void change_end(change *c)
{
    ix_meta_end(c->md, 0); /* NULL after a commit */
    ix_store_writer_abort(c->w); /* NULL after a commit */
    cJSON_Delete(c->meta);
    if (c->opened) ix_close(&c->ix);
    cm_free(c->drop);
    ix_store_lock_release(c->lock);
    memset(c, 0, sizeof *c);
}

/* Drops every per-segment section of segment sg. */
static chimera_status drop_segment(change *c, const ix_segment *sg, chimera_error *err)
{
    for (int i = 0; i < IX_N_SECTIONS; i++) {
        if (ix_sections[i].scope != IX_SEGMENT) continue;
        char nm[FMT_NAME_BYTES + 16];
        snprintf(nm, sizeof nm, "s%u_%s", sg->seq, ix_sections[i].name);
        if (ix_store_find(c->ix.st, nm) >= 0) CM_TRY(drop_section(c, nm, err));
    }
    return CHIMERA_OK;
}

static void meta_set(cJSON *o, const char *key, double v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    cJSON_AddNumberToObject(o, key, v);
}

/* Tuned profiles were measured on the documents of their time: count the documents
 * changed since in each (profile.c treats a profile as stale once they are a fifth of
 * the index). */
static void profiles_note_change(change *c, int64_t changed)
{
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(c->meta, "profiles"), *it;
    cJSON_ArrayForEach(it, arr)
    {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(it, "changed_docs");
        double prev = cJSON_IsNumber(o) ? o->valuedouble : 0;
        meta_set(it, "changed_docs", prev + (double)changed);
    }
    /* the calibrated defaults and the recorded source age the same way */
    ix_defaults_note_change(c->meta, changed);
}

static chimera_status change_commit(change *c, ix_update_report *rep, chimera_error *err)
{
    const char **names = cm_malloc((c->n_drop + 1) * sizeof *names);
    if (!names) return nomem(err);
    for (uint32_t i = 0; i < c->n_drop; i++) names[i] = c->drop[i];
    cJSON_DeleteItemFromObjectCaseSensitive(c->meta, "next_seq");
    cJSON_AddNumberToObject(c->meta, "next_seq", c->next_seq);
    uint64_t gen = ix_store_generation(c->ix.st);
    chimera_status s = CHIMERA_OK;
    if (c->md && c->md_op)
        s = ix_meta_prepare(c->md, c->meta, gen + 1, c->md_op, c->md_fmt,
                            c->md_section[0] ? c->md_section : NULL, err);
    if (s == CHIMERA_OK) s = ix_store_delta_commit(c->w, c->meta, names, c->n_drop, err);
    else ix_store_writer_abort(c->w);
    c->w = NULL; /* consumed */
    cm_free(names);
    /* the database follows the manifest: committed after it, or rolled back */
    ix_meta_end(c->md, s == CHIMERA_OK);
    c->md = NULL;
    if (s == CHIMERA_OK && rep) rep->generation = gen + 1;
    return s;
}

/* ---- meta editing ---------------------------------------------------------------------- */

/* The meta's "segments" array, created from the counts of an index that has only its
 * base (which lacks it). */
static cJSON *meta_segments(change *c)
{
    cJSON *a = cJSON_GetObjectItemCaseSensitive(c->meta, "segments");
    if (a) return a;
    a = cJSON_AddArrayToObject(c->meta, "segments");
    cJSON *b = cJSON_CreateObject();
    cJSON_AddNumberToObject(b, "seq", 0);
    cJSON_AddNumberToObject(b, "docs", (double)c->ix.segs[0].n_docs);
    cJSON_AddNumberToObject(b, "tokens", (double)c->ix.segs[0].n_tokens);
    cJSON_AddItemToArray(a, b);
    return a;
}

static void meta_add_segment(cJSON *arr, uint32_t seq, int64_t docs, int64_t tokens, uint32_t lists)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "seq", seq);
    cJSON_AddNumberToObject(o, "docs", (double)docs);
    cJSON_AddNumberToObject(o, "tokens", (double)tokens);
    cJSON_AddNumberToObject(o, "lists", lists);
    cJSON_AddItemToArray(arr, o);
}

/* ---- writing a segment ----------------------------------------------------------------- */

/* Writes section `id` of the list for segment seq (0: the plain name) from memory. */
static chimera_status put(ix_store_writer *w, uint32_t seq, int id, uint32_t ndim, uint64_t d0,
                          uint64_t d1, const void *data, chimera_error *err)
{
    char nm[FMT_NAME_BYTES + 16];
    if (seq) snprintf(nm, sizeof nm, "s%u_%s", seq, ix_sections[id].name);
    else snprintf(nm, sizeof nm, "%s", ix_sections[id].name);
    ix_store_type t = {ix_sections[id].dtype, ndim, {d0, d1, 0, 0}};
    uint64_t bytes = ix_fmt_dtype_size(t.dtype) * d0 * (ndim > 1 ? d1 : 1);
    return ix_store_writer_add_typed(w, nm, &t, data, bytes, err);
}

static chimera_status begin(ix_store_writer *w, uint32_t seq, int id, uint32_t ndim, uint64_t d0,
                            uint64_t d1, chimera_error *err)
{
    char nm[FMT_NAME_BYTES + 16];
    if (seq) snprintf(nm, sizeof nm, "s%u_%s", seq, ix_sections[id].name);
    else snprintf(nm, sizeof nm, "%s", ix_sections[id].name);
    ix_store_type t = {ix_sections[id].dtype, ndim, {d0, d1, 0, 0}};
    return ix_store_section_begin(w, nm, &t, err);
}

/* A new segment held in memory (add). */
typedef struct new_seg {
    int64_t n_docs, n_tokens;
    uint32_t n_lists;
    int64_t *doc_off, *doc_ids;
    uint32_t *id_order;
    uint32_t *tok_cid;
    float *sim;        /* similarity of each token to its centroid */
    double assign_recall; /* the assignment's exact-nearest fraction, on a sample */
    uint8_t *d1, *dB, *c1;
    quant_f1 *f1, *cf1;
    quant_fB *fB;
    uint32_t *post_cid, *post_tok, *post_doc;
    int64_t *post_off;
} new_seg;

static void new_seg_free(new_seg *g)
{
    cm_free(g->doc_off);
    cm_free(g->doc_ids);
    cm_free(g->id_order);
    cm_free(g->tok_cid);
    cm_free(g->sim);
    cm_free(g->d1);
    cm_free(g->dB);
    cm_free(g->c1);
    cm_free(g->f1);
    cm_free(g->cf1);
    cm_free(g->fB);
    cm_free(g->post_cid);
    cm_free(g->post_tok);
    cm_free(g->post_doc);
    cm_free(g->post_off);
    memset(g, 0, sizeof *g);
}

/* The two-level structure that makes assignment cheap for many centroids, as the
 * build's hierarchical k-means leaves it (cluster/assign.h): the index does not keep
 * that structure, so an add makes one over the centroids themselves: k-means of the K
 * centroids into round(sqrt(K)) coarse groups, the centroids regrouped by their nearest
 * coarse centroid (a permuted copy; perm maps back). A row is then compared with every
 * coarse centroid and exactly with the children of the best ASSIGN_PROBE_COARSE, about
 * (sqrt(K) + 16 K / sqrt(K)) inner products in sgemm blocks instead of K. */
#define ASSIGN_PROBE_COARSE 16

typedef struct two_level {
    ivf_kmeans_result km;
    float *cent;     /* [K x dim] grouped by coarse centroid */
    uint32_t *perm;  /* cent row -> index centroid */
    uint32_t *child_off;
} two_level;

static void two_level_free(two_level *t)
{
    ivf_kmeans_result_free(&t->km);
    cm_free(t->cent);
    cm_free(t->perm);
    cm_free(t->child_off);
}

static chimera_status two_level_make(const ix_index *ix, cm_pool *pool, two_level *t,
                                     chimera_error *err)
{
    memset(t, 0, sizeof *t);
    const uint32_t K = ix->n_clusters, d = ix->dim;
    uint32_t nc = (uint32_t)(sqrt((double)K) + 0.5);
    /* flat, whatever it costs: these groups route a token's search, and the measured
     * assignment recall of adds (chimera_update_report) is of this structure */
    ivf_kmeans_opts ko = {.mode = KMEANS_FLAT, .seed = 4321, .pool = pool,
                          .max_points_per_centroid = K};
    CM_TRY(ivf_kmeans_train(ix->centroids, K, d, d, nc, &ko, &t->km, err));
    nc = t->km.k;
    uint32_t *cc = cm_malloc((size_t)K * sizeof *cc);
    t->cent = cm_malloc((size_t)K * d * sizeof *t->cent);
    t->perm = cm_malloc((size_t)K * sizeof *t->perm);
    t->child_off = cm_calloc((size_t)nc + 1, sizeof *t->child_off);
    ivf_assigner *a = NULL;
    ivf_assign_opts ao = {.pool = pool};
    chimera_status s = CHIMERA_OK;
    if (!cc || !t->cent || !t->perm || !t->child_off) s = nomem(err);
    if (s == CHIMERA_OK) s = ivf_assigner_new(t->km.centroids, nc, d, NULL, 0, NULL, &ao, &a, err);
    if (s == CHIMERA_OK) {
        ivf_assign_exact(a, ix->centroids, K, d, cc, NULL);
        for (uint32_t k = 0; k < K; k++) t->child_off[cc[k] + 1]++;
        for (uint32_t c = 0; c < nc; c++) t->child_off[c + 1] += t->child_off[c];
        uint32_t *fill = cm_malloc((size_t)nc * sizeof *fill);
        if (!fill) s = nomem(err);
        else {
            memcpy(fill, t->child_off, (size_t)nc * sizeof *fill);
            for (uint32_t k = 0; k < K; k++) {
                uint32_t r = fill[cc[k]]++;
                t->perm[r] = k;
                memcpy(t->cent + (size_t)r * d, ix->centroids + (size_t)k * d, d * sizeof(float));
            }
            cm_free(fill);
        }
    }
    ivf_assigner_free(a);
    cm_free(cc);
    if (s != CHIMERA_OK) two_level_free(t);
    return s;
}

/* Nearest centroid (inner product) of every token: exactly (a blocked sgemm against all
 * of them) for few centroids, through a two-level structure over them otherwise (above).
 * Blocks of rows go one after another, each spread over the pool. conv: per-worker row
 * buffers (float16 input is converted into them). */
static chimera_status assign_tokens(const ix_index *ix, const data_corpus *d, new_seg *g,
                                    cm_pool *pool, float **conv, const ix_update_opts *o,
                                    chimera_error *err)
{
    int64_t N = d->n_tokens;
    const uint32_t K = ix->n_clusters;
    int exact = K <= EXACT_ASSIGN_MAX_K;
    two_level t = {0};
    if (!exact) CM_TRY(two_level_make(ix, pool, &t, err));
    ivf_assigner *a;
    ivf_assign_opts ao = {.pool = pool, .n_probe_coarse = ASSIGN_PROBE_COARSE};
    chimera_status s = exact ? ivf_assigner_new(ix->centroids, K, ix->dim, NULL, 0, NULL, &ao, &a, err)
                             : ivf_assigner_new(t.cent, K, ix->dim, t.km.centroids, t.km.k,
                                                t.child_off, &ao, &a, err);
    for (int64_t r0 = 0; r0 < N && s == CHIMERA_OK; r0 += ROWS_PER_BLOCK) {
        if (cancelled(o)) {
            s = CHIMERA_ERR_CANCELLED;
            break;
        }
        int64_t n = N - r0 < ROWS_PER_BLOCK ? N - r0 : ROWS_PER_BLOCK;
        const float *rows = data_corpus_rows(d, r0, n, conv[0]);
        if (exact) ivf_assign_exact(a, rows, n, d->dim, g->tok_cid + r0, g->sim + r0);
        else {
            ivf_assign(a, rows, n, d->dim, g->tok_cid + r0, g->sim + r0);
            for (int64_t i = 0; i < n; i++) g->tok_cid[r0 + i] = t.perm[g->tok_cid[r0 + i]];
        }
    }
    if (s == CHIMERA_OK && !exact && g->n_tokens > 0) {
        /* how often the two levels find the exact nearest centroid, on a sample */
        int64_t ns = N < 2000 ? N : 2000;
        const float *rows = data_corpus_rows(d, 0, ns < ROWS_PER_BLOCK ? ns : ROWS_PER_BLOCK, conv[0]);
        g->assign_recall = ivf_assign_recall(a, rows, ns < ROWS_PER_BLOCK ? ns : ROWS_PER_BLOCK,
                                             d->dim, 2000, 99);
    } else {
        g->assign_recall = 1.0;
    }
    ivf_assigner_free(a);
    two_level_free(&t);
    return s;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Codes, and the cluster-major copy by the clusters the segment uses. */
/* One block of rows rotated and encoded, on the pool (encode_tokens). */
typedef struct encode_job {
    const ix_index *ix;
    const data_corpus *d;
    new_seg *g;
    const float *crot;
    const uint32_t *local;
    float **conv, **vrot; /* per worker */
    const ix_update_opts *o;
    atomic_int status;     /* a failure (any failure is fatal) */
    atomic_int stopped;    /* the cancel callback asked to stop, or a block failed */
} encode_job;

static void encode_block(void *ctx, int64_t t, int w)
{
    encode_job *j = ctx;
    if (atomic_load(&j->stopped)) return;
    if (cancelled(j->o)) {
        atomic_store(&j->stopped, 1);
        return;
    }
    const uint32_t dp = j->ix->dim_pad, B = j->ix->bits;
    const size_t c1 = qm_code1_bytes(dp), cB = qm_codeB_bytes(dp, B);
    int64_t r0 = t * ROWS_PER_BLOCK, n = j->d->n_tokens - r0;
    if (n > ROWS_PER_BLOCK) n = ROWS_PER_BLOCK;
    const float *rows = data_corpus_rows(j->d, r0, n, j->conv[w]);
    quant_rotate_n(&j->ix->rot, (size_t)n, rows, j->d->dim, j->vrot[w], dp);
    chimera_error e;
    chimera_status s = quant_encode(dp, B, (size_t)n, j->vrot[w], j->crot, j->local + r0,
                                    j->g->d1 + (size_t)r0 * c1, j->g->f1 + r0,
                                    j->g->dB + (size_t)r0 * cB, j->g->fB + r0, &e);
    if (s != CHIMERA_OK) {
        atomic_store(&j->status, (int)s);
        atomic_store(&j->stopped, 1);
    }
}

static chimera_status encode_tokens(const ix_index *ix, const data_corpus *d, new_seg *g,
                                    cm_pool *pool, float **conv, float **vrot,
                                    const ix_update_opts *o, chimera_error *err)
{
    const uint32_t dp = ix->dim_pad, B = ix->bits;
    const int64_t N = d->n_tokens;
    const size_t c1 = qm_code1_bytes(dp), cB = qm_codeB_bytes(dp, B);
    chimera_status s = CHIMERA_OK;
    /* the clusters used, increasing: the segment's lists */
    uint32_t *u = cm_malloc((size_t)N * sizeof *u), *local = cm_malloc((size_t)N * sizeof *local);
    float *crot = NULL;
    if (!u || !local) goto oom;
    memcpy(u, g->tok_cid, (size_t)N * sizeof *u);
    qsort(u, (size_t)N, sizeof *u, cmp_u32);
    uint32_t nu = 0;
    for (int64_t i = 0; i < N; i++)
        if (nu == 0 || u[nu - 1] != u[i]) u[nu++] = u[i];
    g->n_lists = nu;
    for (int64_t t = 0; t < N; t++) { /* list of each token: binary search in u */
        uint32_t lo = 0, hi = nu;
        while (lo < hi) {
            uint32_t mid = (lo + hi) / 2;
            if (u[mid] < g->tok_cid[t]) lo = mid + 1;
            else hi = mid;
        }
        local[t] = lo;
    }
    /* the used centroids, rotated (not all K: an add of a few tokens stays cheap) */
    float *cu = cm_malloc((size_t)nu * ix->dim * sizeof *cu);
    crot = cm_aligned_alloc(64, (size_t)nu * dp * sizeof(float));
    if (!cu || !crot) {
        cm_free(cu);
        goto oom;
    }
    for (uint32_t l = 0; l < nu; l++)
        memcpy(cu + (size_t)l * ix->dim, ix->centroids + (size_t)u[l] * ix->dim,
               ix->dim * sizeof(float));
    quant_rotate_n(&ix->rot, nu, cu, ix->dim, crot, dp);
    cm_free(cu);
    g->d1 = cm_aligned_alloc(64, (size_t)N * c1);
    g->dB = cm_aligned_alloc(64, (size_t)N * cB);
    g->f1 = cm_malloc((size_t)N * sizeof *g->f1);
    g->fB = cm_malloc((size_t)N * sizeof *g->fB);
    g->c1 = cm_aligned_alloc(64, (size_t)N * c1);
    g->cf1 = cm_malloc((size_t)N * sizeof *g->cf1);
    g->post_cid = cm_malloc((size_t)nu * sizeof *g->post_cid);
    g->post_off = cm_calloc((size_t)nu + 1, sizeof *g->post_off);
    g->post_tok = cm_malloc((size_t)N * sizeof *g->post_tok);
    g->post_doc = cm_malloc((size_t)N * sizeof *g->post_doc);
    if (!g->d1 || !g->dB || !g->f1 || !g->fB || !g->c1 || !g->cf1 || !g->post_cid ||
        !g->post_off || !g->post_tok || !g->post_doc)
        goto oom;
    memcpy(g->post_cid, u, (size_t)nu * sizeof *u);
    {
        encode_job j = {ix, d, g, crot, local, conv, vrot, o, CHIMERA_OK, 0};
        cm_pool_run(pool, (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, encode_block, &j);
        s = (chimera_status)atomic_load(&j.status);
        if (s == CHIMERA_OK && atomic_load(&j.stopped)) s = CHIMERA_ERR_CANCELLED;
        if (s != CHIMERA_OK && s != CHIMERA_ERR_CANCELLED)
            s = cm_fail(err, s, "add: encoding failed (%s)", chimera_status_str(s));
    }
    if (s != CHIMERA_OK) goto done;
    /* counting sort by list; within a list, tokens in order (as a build lays them out) */
    for (int64_t t = 0; t < N; t++) g->post_off[local[t] + 1]++;
    for (uint32_t l = 0; l < nu; l++) g->post_off[l + 1] += g->post_off[l];
    int64_t *fill = cm_malloc((size_t)(nu + 1) * sizeof *fill);
    if (!fill) goto oom;
    memcpy(fill, g->post_off, (size_t)(nu + 1) * sizeof *fill);
    for (int64_t doc = 0; doc < g->n_docs; doc++)
        for (int64_t t = g->doc_off[doc]; t < g->doc_off[doc + 1]; t++) {
            int64_t p = fill[local[t]]++;
            g->post_tok[p] = (uint32_t)t;
            g->post_doc[p] = (uint32_t)doc;
            memcpy(g->c1 + (size_t)p * c1, g->d1 + (size_t)t * c1, c1);
            g->cf1[p] = g->f1[t];
        }
    cm_free(fill);
    goto done;
oom:
    s = nomem(err);
done:
    cm_free(u);
    cm_free(local);
    cm_free(crot);
    return s;
}

static chimera_status write_new_segment(ix_store_writer *w, uint32_t seq, const ix_index *ix,
                                        const new_seg *g, chimera_error *err)
{
    const uint64_t N = (uint64_t)g->n_tokens, D = (uint64_t)g->n_docs, L = g->n_lists;
    const uint64_t c1 = qm_code1_bytes(ix->dim_pad), cB = qm_codeB_bytes(ix->dim_pad, ix->bits);
    CM_TRY(put(w, seq, IX_SEC_post_off, 1, L + 1, 0, g->post_off, err));
    CM_TRY(put(w, seq, IX_SEC_post_tok, 1, N, 0, g->post_tok, err));
    CM_TRY(put(w, seq, IX_SEC_post_doc, 1, N, 0, g->post_doc, err));
    CM_TRY(put(w, seq, IX_SEC_c1_codes, 2, N, c1, g->c1, err));
    CM_TRY(put(w, seq, IX_SEC_c1_fact, 2, N, 3, g->cf1, err));
    CM_TRY(put(w, seq, IX_SEC_d1_codes, 2, N, c1, g->d1, err));
    CM_TRY(put(w, seq, IX_SEC_d1_fact, 2, N, 3, g->f1, err));
    CM_TRY(put(w, seq, IX_SEC_tok_cid, 1, N, 0, g->tok_cid, err));
    CM_TRY(put(w, seq, IX_SEC_dB_codes, 2, N, cB, g->dB, err));
    CM_TRY(put(w, seq, IX_SEC_dB_fact, 2, N, sizeof(quant_fB), g->fB, err));
    CM_TRY(put(w, seq, IX_SEC_doc_off, 1, D + 1, 0, g->doc_off, err));
    CM_TRY(put(w, seq, IX_SEC_doc_ids, 1, D, 0, g->doc_ids, err));
    CM_TRY(put(w, seq, IX_SEC_post_cid, 1, L, 0, g->post_cid, err));
    return put(w, seq, IX_SEC_id_order, 1, D, 0, g->id_order, err);
}

/* ---- relayout: segments [s0, s1) rewritten as one, streamed ------------------------------- */

typedef struct relayout_out {
    int64_t n_docs, n_tokens;
    uint32_t n_lists;
    ivf_postings_stats pst; /* list size statistics over all clusters */
} relayout_out;

/* The documents of segments [s0, s1) (without the deleted ones when drop_deleted) as
 * one segment, written section by section: nothing is decoded or re-quantized, rows
 * are copied in their new order. sparse: lists only for clusters that have tokens
 * (post_cid); otherwise one list per cluster. Memory: a number per document and per
 * cluster. */
static chimera_status relayout(const ix_index *ix, uint32_t s0, uint32_t s1, int drop_deleted,
                               int sparse, ix_store_writer *w, uint32_t seq, relayout_out *out,
                               cm_progress *prog, const ix_update_opts *o, chimera_error *err)
{
    const int64_t d0 = ix->segs[s0].doc_base;
    const int64_t nd = (s1 < ix->n_segs ? ix->segs[s1].doc_base : ix->n_docs) - d0;
    const uint32_t K = ix->n_clusters;
    const size_t c1 = qm_code1_bytes(ix->dim_pad), cB = qm_codeB_bytes(ix->dim_pad, ix->bits);
    chimera_status s = CHIMERA_OK;
    int64_t *newdoc = cm_malloc((size_t)nd * sizeof *newdoc);
    int64_t *doc_off = cm_malloc((size_t)(nd + 1) * sizeof *doc_off);
    int64_t *ids = cm_malloc((size_t)(nd + 1) * sizeof *ids);
    int64_t *count = cm_calloc((size_t)K + 1, sizeof *count);
    uint32_t *order = NULL;
    if (!newdoc || !doc_off || !ids || !count) goto oom;
    int64_t kept = 0, toks = 0;
    doc_off[0] = 0;
    for (int64_t d = 0; d < nd; d++) {
        int64_t g = d0 + d;
        if (drop_deleted && ix_is_deleted(ix, g)) {
            newdoc[d] = -1;
            continue;
        }
        const ix_segment *sg = ix_doc_segment(ix, g);
        int64_t l = g - sg->doc_base, len = sg->doc_off[l + 1] - sg->doc_off[l];
        newdoc[d] = kept;
        ids[kept] = sg->doc_ids[l];
        toks += len;
        doc_off[++kept] = toks;
    }
    out->n_docs = kept;
    out->n_tokens = toks;
    if (toks == 0) { /* a segment without tokens is one open refuses */
        s = cm_fail(err, CHIMERA_ERR_EMPTY,
                    "the %lld documents left hold no tokens (every document that has tokens "
                    "is deleted), and an index without tokens cannot be opened; nothing was "
                    "changed", (long long)kept);
        goto done;
    }
    /* list sizes */
    for (uint32_t si = s0; si < s1; si++) {
        const ix_segment *sg = &ix->segs[si];
        for (uint32_t l = 0; l < sg->n_lists; l++) {
            uint32_t c = sg->post_cid ? sg->post_cid[l] : l;
            for (int64_t p = sg->post_off[l]; p < sg->post_off[l + 1]; p++)
                if (newdoc[sg->doc_base + sg->post_doc[p] - d0] >= 0) count[c]++;
        }
    }
    uint32_t nl = 0;
    for (uint32_t c = 0; c < K; c++) nl += !sparse || count[c] > 0;
    out->n_lists = nl;
    { /* statistics as a build reports them (meta.postings) */
        int64_t *offs = cm_malloc(((size_t)K + 1) * sizeof *offs);
        if (!offs) goto oom;
        offs[0] = 0;
        for (uint32_t c = 0; c < K; c++) offs[c + 1] = offs[c] + count[c];
        ivf_postings pl = {.k = K, .n = offs[K], .offsets = offs};
        int bad = ivf_postings_stats_get(&pl, &out->pst);
        cm_free(offs);
        if (bad) goto oom;
    }
    order = cm_malloc((size_t)(kept + 1) * sizeof *order);
    if (!order) goto oom;
    if ((s = ix_id_order_compute(ids, kept, order, err)) != CHIMERA_OK) goto done;

    /* cluster-major: post_off (and post_cid), then one pass per section over the lists */
    if ((s = begin(w, seq, IX_SEC_post_off, 1, (uint64_t)nl + 1, 0, err)) != CHIMERA_OK) goto done;
    int64_t acc = 0;
    if ((s = ix_store_section_write(w, &acc, sizeof acc, err)) != CHIMERA_OK) goto done;
    for (uint32_t c = 0; c < K && s == CHIMERA_OK; c++)
        if (!sparse || count[c] > 0) {
            acc += count[c];
            s = ix_store_section_write(w, &acc, sizeof acc, err);
        }
    if (s != CHIMERA_OK || (s = ix_store_section_end(w, err)) != CHIMERA_OK) goto done;
    if (sparse) {
        if ((s = begin(w, seq, IX_SEC_post_cid, 1, nl, 0, err)) != CHIMERA_OK) goto done;
        for (uint32_t c = 0; c < K && s == CHIMERA_OK; c++)
            if (count[c] > 0) s = ix_store_section_write(w, &c, sizeof c, err);
        if (s != CHIMERA_OK || (s = ix_store_section_end(w, err)) != CHIMERA_OK) goto done;
    }
    const int cm_secs[4] = {IX_SEC_post_tok, IX_SEC_post_doc, IX_SEC_c1_codes, IX_SEC_c1_fact};
    for (int k = 0; k < 4 && s == CHIMERA_OK; k++) {
        if (cancelled(o)) {
            s = CHIMERA_ERR_CANCELLED;
            goto done;
        }
        int id = cm_secs[k];
        uint64_t width = id == IX_SEC_c1_codes ? c1 : id == IX_SEC_c1_fact ? 3 : 0;
        s = begin(w, seq, id, width ? 2 : 1, (uint64_t)toks, width, err);
        for (uint32_t c = 0; c < K && s == CHIMERA_OK; c++)
            for (uint32_t si = s0; si < s1 && s == CHIMERA_OK; si++) {
                const ix_segment *sg = &ix->segs[si];
                int64_t p0, n;
                ix_segment_list(sg, c, &p0, &n);
                for (int64_t p = p0; p < p0 + n && s == CHIMERA_OK; p++) {
                    uint32_t ld = sg->post_doc[p];
                    int64_t nd_ = newdoc[sg->doc_base + ld - d0];
                    if (nd_ < 0) continue;
                    uint32_t v;
                    switch (id) {
                    case IX_SEC_post_tok:
                        v = (uint32_t)(doc_off[nd_] + (sg->post_tok[p] - sg->doc_off[ld]));
                        s = ix_store_section_write(w, &v, 4, err);
                        break;
                    case IX_SEC_post_doc:
                        v = (uint32_t)nd_;
                        s = ix_store_section_write(w, &v, 4, err);
                        break;
                    case IX_SEC_c1_codes:
                        s = ix_store_section_write(w, sg->c1_codes + (size_t)p * c1, c1, err);
                        break;
                    default:
                        s = ix_store_section_write(w, &sg->c1_fact[p], sizeof(quant_f1), err);
                    }
                }
            }
        if (s == CHIMERA_OK) s = ix_store_section_end(w, err);
        if (prog) cm_progress_add(prog, 1);
    }
    /* doc-major: each kept document's rows, in document order */
    const int dm_secs[5] = {IX_SEC_d1_codes, IX_SEC_d1_fact, IX_SEC_tok_cid, IX_SEC_dB_codes,
                            IX_SEC_dB_fact};
    for (int k = 0; k < 5 && s == CHIMERA_OK; k++) {
        if (cancelled(o)) {
            s = CHIMERA_ERR_CANCELLED;
            goto done;
        }
        int id = dm_secs[k];
        size_t row = id == IX_SEC_d1_codes ? c1 : id == IX_SEC_d1_fact ? sizeof(quant_f1)
                   : id == IX_SEC_tok_cid ? 4 : id == IX_SEC_dB_codes ? cB : sizeof(quant_fB);
        uint64_t width = id == IX_SEC_d1_codes ? c1 : id == IX_SEC_d1_fact ? 3
                       : id == IX_SEC_dB_codes ? cB : id == IX_SEC_dB_fact ? sizeof(quant_fB) : 0;
        s = begin(w, seq, id, width ? 2 : 1, (uint64_t)toks, width, err);
        for (int64_t d = 0; d < nd && s == CHIMERA_OK; d++) {
            if (newdoc[d] < 0) continue;
            const ix_segment *sg = ix_doc_segment(ix, d0 + d);
            int64_t l = d0 + d - sg->doc_base, t0 = sg->doc_off[l], n = sg->doc_off[l + 1] - t0;
            const uint8_t *src = id == IX_SEC_d1_codes ? sg->d1_codes
                               : id == IX_SEC_d1_fact ? (const uint8_t *)sg->d1_fact
                               : id == IX_SEC_tok_cid ? (const uint8_t *)sg->tok_cid
                               : id == IX_SEC_dB_codes ? sg->dB_codes
                                                       : (const uint8_t *)sg->dB_fact;
            s = ix_store_section_write(w, src + (size_t)t0 * row, (size_t)n * row, err);
        }
        if (s == CHIMERA_OK) s = ix_store_section_end(w, err);
        if (prog) cm_progress_add(prog, 1);
    }
    /* the stored vectors, doc-major like the codes, when every segment merged has them (a
     * segment an older library appended without them leaves the merged one without: the
     * re-rank tier then needs a rebuild, as it already did) */
    int vec = ix->vec_type != CHIMERA_RERANK_NONE;
    for (uint32_t si = s0; si < s1; si++) vec = vec && ix->segs[si].vectors;
    if (vec && s == CHIMERA_OK) {
        int id = ix_vec_section(ix->vec_type);
        size_t row = ix->dim * ix_vec_elem_bytes(ix->vec_type);
        if (cancelled(o)) {
            s = CHIMERA_ERR_CANCELLED;
            goto done;
        }
        s = begin(w, seq, id, 2, (uint64_t)toks, ix->dim, err);
        for (int64_t d = 0; d < nd && s == CHIMERA_OK; d++) {
            if (newdoc[d] < 0) continue;
            const ix_segment *sg = ix_doc_segment(ix, d0 + d);
            int64_t l = d0 + d - sg->doc_base, t0 = sg->doc_off[l], n = sg->doc_off[l + 1] - t0;
            s = ix_store_section_write(w, (const uint8_t *)sg->vectors + (size_t)t0 * row,
                                       (size_t)n * row, err);
        }
        if (s == CHIMERA_OK) s = ix_store_section_end(w, err);
    }
    if (s == CHIMERA_OK) s = put(w, seq, IX_SEC_doc_off, 1, (uint64_t)kept + 1, 0, doc_off, err);
    if (s == CHIMERA_OK) s = put(w, seq, IX_SEC_doc_ids, 1, (uint64_t)kept, 0, ids, err);
    if (s == CHIMERA_OK) s = put(w, seq, IX_SEC_id_order, 1, (uint64_t)kept, 0, order, err);
    goto done;
oom:
    s = nomem(err);
done:
    cm_free(newdoc);
    cm_free(doc_off);
    cm_free(ids);
    cm_free(count);
    cm_free(order);
    return s;
}

/* Merges the appended segments 1 .. n_segs-1 into one new segment (deleted documents
 * stay: global numbers, and the tombstones naming them, keep their meaning). */
static chimera_status merge_appended(change *c, chimera_error *err)
{
    uint32_t seq = c->next_seq++;
    relayout_out ro;
    CM_TRY(relayout(&c->ix, 1, c->ix.n_segs, 0, 1, c->w, seq, &ro, NULL, NULL, err));
    for (uint32_t i = 1; i < c->ix.n_segs; i++) CM_TRY(drop_segment(c, &c->ix.segs[i], err));
    cJSON *arr = meta_segments(c);
    while (cJSON_GetArraySize(arr) > 1) cJSON_DeleteItemFromArray(arr, 1);
    meta_add_segment(arr, seq, ro.n_docs, ro.n_tokens, ro.n_lists);
    return CHIMERA_OK;
}

/* Writes the tombstone list for docs[0..n) (global documents, increasing), merging the
 * existing lists into it when there are IX_MERGE_SEGMENTS of them. */
static chimera_status write_tombstones(change *c, const uint32_t *docs, int64_t n, int *merged,
                                       chimera_error *err)
{
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(c->meta, "tombstones");
    if (!arr) arr = cJSON_AddArrayToObject(c->meta, "tombstones");
    uint32_t *all = NULL;
    int64_t total = n;
    if (c->ix.n_tombstone_lists >= IX_MERGE_SEGMENTS) {
        /* one list of every deletion the base bitmap does not hold, and the new ones */
        const void *base;
        uint64_t bytes;
        CM_TRY(ix_store_section(c->ix.st, "deleted", &base, &bytes));
        const uint8_t *bm = base;
        all = cm_malloc((size_t)(c->ix.n_deleted + n + 1) * sizeof *all);
        if (!all) return nomem(err);
        total = 0;
        for (int64_t d = 0; d < c->ix.n_docs; d++) {
            int in_base = d < c->ix.segs[0].n_docs && ((bm[d >> 3] >> (d & 7)) & 1);
            if (ix_is_deleted(&c->ix, d) && !in_base) all[total++] = (uint32_t)d;
        }
        memcpy(all + total, docs, (size_t)n * sizeof *all); /* never deleted yet: disjoint */
        total += n;
        qsort(all, (size_t)total, sizeof *all, cmp_u32);
        const cJSON *it;
        cJSON_ArrayForEach(it, arr)
        {
            const cJSON *sq = cJSON_GetObjectItemCaseSensitive(it, "seq");
            char nm[FMT_NAME_BYTES + 16];
            snprintf(nm, sizeof nm, "t%u_del", (unsigned)sq->valuedouble);
            chimera_status st = drop_section(c, nm, err);
            if (st != CHIMERA_OK) {
                cm_free(all);
                return st;
            }
        }
        while (cJSON_GetArraySize(arr) > 0) cJSON_DeleteItemFromArray(arr, 0);
        docs = all;
        *merged = 1;
    }
    uint32_t seq = c->next_seq++;
    char nm[FMT_NAME_BYTES + 16];
    snprintf(nm, sizeof nm, "t%u_del", seq);
    ix_store_type t = {"u32", 1, {(uint64_t)total, 0, 0, 0}};
    chimera_status s = ix_store_writer_add_typed(c->w, nm, &t, docs, (uint64_t)total * 4, err);
    cm_free(all);
    CM_TRY(s);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "seq", seq);
    cJSON_AddNumberToObject(o, "count", (double)total);
    cJSON_AddItemToArray(arr, o);
    return CHIMERA_OK;
}

static void fill_report(ix_update_report *rep, const change *c, int64_t docs_after,
                        int64_t deleted_after, uint32_t segs_after, double t0)
{
    if (!rep) return;
    rep->n_docs = docs_after;
    rep->n_deleted = deleted_after;
    rep->n_segments = segs_after;
    rep->seconds = cm_now() - t0;
    rep->peak_rss = cm_peak_rss_bytes();
    rep->meta_repaired = c->md_repaired;
    if (!rep->generation) rep->generation = ix_store_generation(c->ix.st);
}

/* ---- the operations ------------------------------------------------------------------ */

static int cmp_u32_docs(const void *a, const void *b) { return cmp_u32(a, b); }

chimera_status ix_add(const char *dir, const data_corpus *docs, int replace,
                      const char *meta_text, size_t meta_len, const char *meta_source,
                      const ix_update_opts *opts, ix_update_report *report, chimera_error *err)
{
    double t0 = cm_now();
    ix_update_report rep_local, *rep = report ? report : &rep_local;
    memset(rep, 0, sizeof *rep);
    rep->drift_below = -1;
    if (!docs->ids)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "%s: documents to %s need ids (--ids: int64, one per document)", dir,
                       replace ? "update" : "add");
    change c;
    new_seg g = {0};
    uint32_t *tomb = NULL;
    cm_pool *pool = NULL;
    float **conv = NULL, **vrot = NULL;
    int nw = 0;
    chimera_status s = change_begin(&c, dir, opts, 1, meta_text ? IX_META_CREATE : 0, err);
    if (s != CHIMERA_OK) goto done;
    ix_index *ix = &c.ix;
    if (docs->dim != ix->dim) {
        s = cm_fail(err, CHIMERA_ERR_DIM, "%s: the documents have dimension %u, the index %u; "
                    "nothing was %s", dir, docs->dim, ix->dim, replace ? "updated" : "added");
        goto done;
    }
    if (ix->n_docs + docs->n_docs >= (int64_t)UINT32_MAX ||
        ix->n_tokens + docs->n_tokens >= (int64_t)UINT32_MAX) {
        s = cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                    "%s: %lld documents / %lld tokens in all; an index holds fewer than 2^32 of "
                    "each (compact it, or shard)", dir, (long long)(ix->n_docs + docs->n_docs),
                    (long long)(ix->n_tokens + docs->n_tokens));
        goto done;
    }
    if (docs->n_tokens == 0) { /* a segment without tokens is one open refuses */
        s = cm_fail(err, CHIMERA_ERR_EMPTY,
                    "%s: the batch's %lld documents hold no tokens; a batch needs at least one "
                    "(%s). Nothing was %s", dir, (long long)docs->n_docs,
                    replace ? "to empty documents, delete them" : "empty documents alone add "
                    "nothing to search", replace ? "updated" : "added");
        goto done;
    }
    /* ids: new ones for add; present ones for update (their documents are deleted) */
    tomb = cm_malloc((size_t)(docs->n_docs + 1) * sizeof *tomb);
    if (!tomb) goto oom;
    int64_t n_tomb = 0;
    for (int64_t i = 0; i < docs->n_docs; i++) {
        int64_t at = ix_find_id(ix, docs->ids[i]);
        if (!replace && at >= 0) {
            s = cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                        "%s: id %lld (document %lld of the batch) is already in the index; use "
                        "update to replace it. Nothing was added", dir, (long long)docs->ids[i],
                        (long long)i);
            goto done;
        }
        if (replace && at < 0 && !c.o.missing_ok) {
            s = cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                        "%s: id %lld (document %lld of the batch) is not in the index, so it "
                        "cannot be updated (missing_ok, the CLI's --missing-ok, adds it). "
                        "Nothing was updated", dir,
                        (long long)docs->ids[i], (long long)i);
            goto done;
        }
        if (at >= 0) tomb[n_tomb++] = (uint32_t)at;
        else if (replace) rep->ids_missing++;
    }
    qsort(tomb, (size_t)n_tomb, sizeof *tomb, cmp_u32_docs);

    /* the new segment */
    g.n_docs = docs->n_docs;
    g.n_tokens = docs->n_tokens;
    g.doc_off = cm_malloc((size_t)(g.n_docs + 1) * sizeof *g.doc_off);
    g.doc_ids = cm_malloc((size_t)(g.n_docs + 1) * sizeof *g.doc_ids);
    g.id_order = cm_malloc((size_t)(g.n_docs + 1) * sizeof *g.id_order);
    g.tok_cid = cm_malloc((size_t)g.n_tokens * sizeof *g.tok_cid);
    g.sim = cm_malloc((size_t)g.n_tokens * sizeof *g.sim);
    pool = cm_pool_new(c.o.n_threads);
    nw = cm_pool_size(pool);
    conv = cm_calloc((size_t)nw, sizeof *conv);
    vrot = cm_calloc((size_t)nw, sizeof *vrot);
    if (!g.doc_off || !g.doc_ids || !g.id_order || !g.tok_cid || !g.sim || !pool || !conv || !vrot)
        goto oom;
    for (int i = 0; i < nw; i++) {
        conv[i] = cm_aligned_alloc(64, (size_t)ROWS_PER_BLOCK * docs->dim * sizeof(float));
        vrot[i] = cm_aligned_alloc(64, (size_t)ROWS_PER_BLOCK * ix->dim_pad * sizeof(float));
        if (!conv[i] || !vrot[i]) goto oom;
    }
    memcpy(g.doc_off, docs->doc_off, (size_t)(g.n_docs + 1) * sizeof *g.doc_off);
    memcpy(g.doc_ids, docs->ids, (size_t)g.n_docs * sizeof *g.doc_ids);
    if ((s = ix_id_order_compute(g.doc_ids, g.n_docs, g.id_order, err)) != CHIMERA_OK) goto done;
    double ta = cm_now();
    if ((s = assign_tokens(ix, docs, &g, pool, conv, &c.o, err)) != CHIMERA_OK) goto cancel_or_done;
    double tb = cm_now();
    if ((s = encode_tokens(ix, docs, &g, pool, conv, vrot, &c.o, err)) != CHIMERA_OK)
        goto cancel_or_done;
    double tc = cm_now();
    rep->assign_seconds = tb - ta;
    rep->encode_seconds = tc - tb;
    rep->assign_recall = g.assign_recall;

    /* drift: the new tokens' centroid similarity against the build's 10th percentile */
    const cJSON *bld = cJSON_GetObjectItemCaseSensitive(c.meta, "build");
    const cJSON *p10 = cJSON_GetObjectItemCaseSensitive(bld, "assign_sim_p10");
    if (cJSON_IsNumber(p10)) {
        int64_t below = 0;
        for (int64_t t = 0; t < g.n_tokens; t++) below += g.sim[t] < (float)p10->valuedouble;
        rep->drift_below = (double)below / (double)g.n_tokens;
        cJSON *dr = cJSON_GetObjectItemCaseSensitive(c.meta, "drift");
        if (!dr) dr = cJSON_AddObjectToObject(c.meta, "drift");
        const cJSON *ot = cJSON_GetObjectItemCaseSensitive(dr, "tokens");
        const cJSON *ob = cJSON_GetObjectItemCaseSensitive(dr, "below_p10");
        double tot = (cJSON_IsNumber(ot) ? ot->valuedouble : 0) + (double)g.n_tokens;
        double bel = (cJSON_IsNumber(ob) ? ob->valuedouble : 0) + (double)below;
        meta_set(dr, "tokens", tot);
        meta_set(dr, "below_p10", bel);
    }

    /* write: merge the appended segments first when there are many, then the new one */
    uint32_t segs_after = ix->n_segs + 1;
    if (ix->n_segs - 1 >= IX_MERGE_SEGMENTS) {
        if ((s = merge_appended(&c, err)) != CHIMERA_OK) goto done;
        rep->merged = 1;
        segs_after = 3;
    }
    uint32_t seq = c.next_seq++;
    if ((s = write_new_segment(c.w, seq, ix, &g, err)) != CHIMERA_OK) goto done;
    if (ix->vec_type != CHIMERA_RERANK_NONE) { /* the index keeps its vectors: these too */
        char nm[FMT_NAME_BYTES + 16];
        snprintf(nm, sizeof nm, "s%u_%s", seq, ix_sections[ix_vec_section(ix->vec_type)].name);
        if ((s = ix_vec_write(c.w, nm, ix->vec_type, docs, err)) != CHIMERA_OK) goto done;
    }
    meta_add_segment(meta_segments(&c), seq, g.n_docs, g.n_tokens, g.n_lists);
    meta_load_info minfo = {0};
    if (meta_text) { /* the batch's records: stored beside its segment, and upserted */
        snprintf(c.md_section, sizeof c.md_section, "s%u_meta", seq);
        ix_store_type t = {"u8", 1, {(uint64_t)meta_len, 0, 0, 0}};
        if ((s = ix_store_writer_add_typed(c.w, c.md_section, &t, meta_text, meta_len, err)) !=
                CHIMERA_OK ||
            (s = ix_meta_load(c.md, META_INPUT_JSONL, META_LOAD_UPSERT, meta_text, meta_len,
                              meta_source ? meta_source : "metadata", &minfo, err)) != CHIMERA_OK)
            goto done;
        rep->meta_records = minfo.n_records;
        c.md_op = "upsert";
        c.md_fmt = "jsonl";
    }
    if (n_tomb > 0 && (s = write_tombstones(&c, tomb, n_tomb, &rep->merged, err)) != CHIMERA_OK)
        goto done;
    int64_t docs_after = ix->n_docs + g.n_docs, del_after = ix->n_deleted + n_tomb;
    profiles_note_change(&c, g.n_docs + n_tomb);
    meta_set(c.meta, "n_docs", (double)docs_after);
    meta_set(c.meta, "n_tokens", (double)(ix->n_tokens + g.n_tokens));
    meta_set(c.meta, "n_deleted", (double)del_after);
    rep->write_seconds = cm_now() - tc;
    double tw = cm_now();
    if (cancelled(&c.o)) {
        s = CHIMERA_ERR_CANCELLED;
        goto cancel_or_done;
    }
    if ((s = change_commit(&c, rep, err)) != CHIMERA_OK) goto done;
    rep->write_seconds += cm_now() - tw;
    rep->docs_added = g.n_docs;
    rep->tokens_added = g.n_tokens;
    rep->docs_deleted = n_tomb;
    fill_report(rep, &c, docs_after, del_after, segs_after, t0);
    goto done;
cancel_or_done:
    if (s == CHIMERA_ERR_CANCELLED) cancel_fail(dir, err);
    goto done;
oom:
    s = nomem(err);
done:
    new_seg_free(&g);
    cm_free(tomb);
    for (int i = 0; conv && i < nw; i++) cm_free(conv[i]);
    for (int i = 0; vrot && i < nw; i++) cm_free(vrot[i]);
    cm_free(conv);
    cm_free(vrot);
    cm_pool_free(pool);
    change_end(&c);
    return s;
}

/* The deletion of ids inside a begun change: tombstones and the metadata records of the
 * deleted documents in one commit; without missing_ok an id not in the index fails it.
 * The records of ids not in the index are left alone, whether or not anything else is
 * deleted, so a delete's effect on the database never depends on the rest of its list;
 * the ids whose records go are stored with the commit ("d<seq>_ids"), so that a replay
 * after a crash removes exactly those (metadata.h). */
static chimera_status delete_in_change(change *c, const int64_t *ids, int64_t n, int missing_ok,
                                       ix_update_report *rep, double t0, chimera_error *err)
{
    uint32_t *docs = cm_malloc((size_t)(n + 1) * sizeof *docs);
    int64_t *found = cm_malloc((size_t)(n + 1) * sizeof *found);
    if (!docs || !found) {
        cm_free(docs);
        cm_free(found);
        return nomem(err);
    }
    chimera_status s = CHIMERA_OK;
    int64_t nd = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t at = ix_find_id(&c->ix, ids[i]);
        if (at < 0) {
            if (!missing_ok) {
                s = cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                            "%s: id %lld (entry %lld) is not in the index (missing_ok, the "
                            "CLI's --missing-ok, skips such ids). Nothing was deleted",
                            c->dir, (long long)ids[i], (long long)i);
                goto done;
            }
            rep->ids_missing++;
            continue;
        }
        found[nd] = ids[i];
        docs[nd++] = (uint32_t)at;
    }
    int64_t n_found = nd;
    qsort(docs, (size_t)nd, sizeof *docs, cmp_u32_docs);
    int64_t u = 0; /* an id listed twice deletes its document once */
    for (int64_t i = 0; i < nd; i++)
        if (u == 0 || docs[u - 1] != docs[i]) docs[u++] = docs[i];
    nd = u;
    if (nd == 0) { /* nothing to commit */
        fill_report(rep, c, c->ix.n_docs, c->ix.n_deleted, c->ix.n_segs, t0);
        goto done;
    }
    if ((s = write_tombstones(c, docs, nd, &rep->merged, err)) != CHIMERA_OK) goto done;
    meta_set(c->meta, "n_deleted", (double)(c->ix.n_deleted + nd));
    if (c->md) { /* their metadata goes in the same commit */
        snprintf(c->md_section, sizeof c->md_section, "d%u_ids", c->next_seq++);
        ix_store_type t = {"i64", 1, {(uint64_t)n_found, 0, 0, 0}};
        if ((s = ix_store_writer_add_typed(c->w, c->md_section, &t, found,
                                           (uint64_t)n_found * sizeof *found, err)) != CHIMERA_OK ||
            (s = ix_meta_delete(c->md, found, n_found, err)) != CHIMERA_OK)
            goto done;
        c->md_op = "delete";
        c->md_fmt = "i64";
    }
    profiles_note_change(c, nd);
    if (!cJSON_GetObjectItemCaseSensitive(c->meta, "segments")) meta_segments(c);
    if ((s = change_commit(c, rep, err)) != CHIMERA_OK) goto done;
    rep->docs_deleted = nd;
    fill_report(rep, c, c->ix.n_docs, c->ix.n_deleted + nd, c->ix.n_segs, t0);
done:
    cm_free(docs);
    cm_free(found);
    return s;
}

chimera_status ix_delete(const char *dir, const int64_t *ids, int64_t n, const ix_update_opts *opts,
                         ix_update_report *report, chimera_error *err)
{
    double t0 = cm_now();
    ix_update_report rep_local, *rep = report ? report : &rep_local;
    memset(rep, 0, sizeof *rep);
    rep->drift_below = -1;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0)
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                           "%s: id %lld (entry %lld) is negative; ids are >= 0. Nothing was "
                           "deleted", dir, (long long)ids[i], (long long)i);
    change c;
    chimera_status s = change_begin(&c, dir, opts, 1, 0, err);
    if (s == CHIMERA_OK) s = delete_in_change(&c, ids, n, c.o.missing_ok, rep, t0, err);
    change_end(&c);
    return s;
}

chimera_status ix_delete_where(const char *dir, const char *expr, const char *const *args,
                               int n_args, const ix_update_opts *opts, ix_update_report *report,
                               chimera_error *err)
{
    double t0 = cm_now();
    ix_update_report rep_local, *rep = report ? report : &rep_local;
    memset(rep, 0, sizeof *rep);
    rep->drift_below = -1;
    change c;
    int64_t *ids = NULL, n = 0;
    chimera_status s = change_begin(&c, dir, opts, 1, 0, err);
    if (s == CHIMERA_OK && !c.md)
        s = cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                    "%s has no document metadata to filter on (chimera meta import)", dir);
    if (s == CHIMERA_OK)
        s = ix_meta_select(c.md, expr, args, n_args, c.o.filter_timeout_ms, &ids, &n, err);
    if (s == CHIMERA_OK && cancelled(&c.o)) s = cancel_fail(dir, err);
    if (s == CHIMERA_OK) s = delete_in_change(&c, ids, n, 1, rep, t0, err);
    cm_free(ids);
    change_end(&c);
    return s;
}

chimera_status ix_compact(const char *dir, const ix_update_opts *opts, ix_update_report *report,
                          chimera_error *err)
{
    double t0 = cm_now();
    ix_update_report rep_local, *rep = report ? report : &rep_local;
    memset(rep, 0, sizeof *rep);
    rep->drift_below = -1;
    change c;
    ix_store_writer *w = NULL;
    chimera_status s = change_begin(&c, dir, opts, 0, 0, err);
    if (s != CHIMERA_OK) goto done;
    ix_index *ix = &c.ix;
    /* the metadata database goes along as it is (repaired when it was behind) */
    ix_meta_end(c.md, 0);
    c.md = NULL;
    if (ix->n_segs == 1 && ix->n_deleted == 0) { /* already compact */
        fill_report(rep, &c, ix->n_docs, 0, 1, t0);
        goto done;
    }
    if (ix->n_deleted == ix->n_docs) {
        s = cm_fail(err, CHIMERA_ERR_EMPTY,
                    "%s: all %lld documents are deleted; compacting would leave an empty index, "
                    "which Chimera does not write (delete the directory instead)", dir,
                    (long long)ix->n_docs);
        goto done;
    }
    ix_store_write_opts wo = {.no_sync = c.o.no_sync, .lock = c.lock};
    if ((s = ix_store_writer_begin(dir, &wo, &w, err)) != CHIMERA_OK) goto done;
    /* the shared sections, byte for byte */
    for (int i = 0; i < IX_N_SECTIONS && s == CHIMERA_OK; i++) {
        if (ix_sections[i].scope != IX_SHARED) continue;
        int64_t at = ix_store_find(ix->st, ix_sections[i].name);
        const ix_store_section_desc *sd = ix_store_section_at(ix->st, (uint32_t)at);
        ix_store_type t = {sd->dtype, sd->ndim, {0}};
        memcpy(t.shape, sd->shape, sizeof t.shape);
        s = ix_store_writer_add_typed(w, sd->name, sd->dtype ? &t : NULL, sd->data, sd->bytes, err);
    }
    if (s != CHIMERA_OK) goto done;
    cm_progress prog;
    cm_progress_begin(&prog, c.o.progress, c.o.progress_user, "compact", 9);
    relayout_out ro;
    s = relayout(ix, 0, ix->n_segs, 1, 0, w, 0, &ro, &prog, &c.o, err);
    cm_progress_end(&prog);
    if (s == CHIMERA_ERR_CANCELLED || (s == CHIMERA_OK && cancelled(&c.o))) {
        s = cancel_fail(dir, err);
        goto done;
    }
    if (s != CHIMERA_OK) goto done;
    uint8_t *zeros = cm_calloc((size_t)(ro.n_docs + 8) / 8, 1);
    if (!zeros) goto oom;
    s = put(w, 0, IX_SEC_deleted, 1, (uint64_t)(ro.n_docs + 7) / 8, 0, zeros, err);
    cm_free(zeros);
    if (s != CHIMERA_OK) goto done;
    {
        char *mp = ix_meta_path(dir);
        if (!mp) goto oom;
        s = ix_store_writer_copy_file(w, IX_META_FILE, mp, err);
        cm_free(mp);
        if (s != CHIMERA_OK) goto done;
    }
    ix_meta_clear_log(c.meta); /* its sections stay behind; the database holds them */
    cJSON_DeleteItemFromObjectCaseSensitive(c.meta, "segments");
    cJSON_DeleteItemFromObjectCaseSensitive(c.meta, "tombstones");
    cJSON_DeleteItemFromObjectCaseSensitive(c.meta, "next_seq");
    meta_set(c.meta, "n_docs", (double)ro.n_docs);
    meta_set(c.meta, "n_tokens", (double)ro.n_tokens);
    meta_set(c.meta, "n_deleted", 0);
    cJSON *pj = cJSON_GetObjectItemCaseSensitive(c.meta, "postings");
    if (pj) {
        meta_set(pj, "min", (double)ro.pst.min);
        meta_set(pj, "median", (double)ro.pst.median);
        meta_set(pj, "max", (double)ro.pst.max);
        meta_set(pj, "mean", ro.pst.mean);
        meta_set(pj, "imbalance", ro.pst.imbalance);
        meta_set(pj, "empty", ro.pst.n_empty);
    }
    s = ix_store_writer_commit(w, c.meta, err);
    w = NULL; /* consumed */
    if (s != CHIMERA_OK) goto done;
    rep->docs_deleted = ix->n_deleted;
    rep->merged = 1;
    rep->generation = ix_store_generation(ix->st) + 1;
    fill_report(rep, &c, ro.n_docs, 0, 1, t0);
    goto done;
oom:
    s = nomem(err);
done:
    ix_store_writer_abort(w);
    change_end(&c);
    return s;
}

chimera_status ix_meta_import(const char *dir, const char *path, int csv, const ix_update_opts *opts,
                              ix_update_report *report, int64_t *n_records, chimera_error *err)
{
    double t0 = cm_now();
    ix_update_report rep_local, *rep = report ? report : &rep_local;
    memset(rep, 0, sizeof *rep);
    rep->drift_below = -1;
    *n_records = 0;
    /* the file whole: it is stored in the index as the import's record (metadata.h) */
    char *text = NULL;
    size_t len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    for (size_t cap = 0;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            char *t = cm_realloc(text, cap);
            if (!t) {
                fclose(f);
                cm_free(text);
                return nomem(err);
            }
            text = t;
        }
        size_t r = fread(text + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    int rerr = ferror(f);
    fclose(f);
    if (rerr) {
        cm_free(text);
        return cm_fail(err, CHIMERA_ERR_IO, "%s: read failed", path);
    }
    change c;
    /* every record replaced: a database the log cannot repair is repaired here */
    chimera_status s = change_begin(&c, dir, opts, 1, IX_META_CREATE | IX_META_NO_REPLAY, err);
    if (s == CHIMERA_OK) {
        snprintf(c.md_section, sizeof c.md_section, "m%u_meta", c.next_seq++);
        ix_store_type t = {"u8", 1, {(uint64_t)len, 0, 0, 0}};
        meta_load_info info = {0};
        s = ix_store_writer_add_typed(c.w, c.md_section, &t, text, len, err);
        if (s == CHIMERA_OK)
            s = ix_meta_load(c.md, csv ? META_INPUT_CSV : META_INPUT_JSONL, META_LOAD_REPLACE,
                             text, len, path, &info, err);
        c.md_op = "replace";
        c.md_fmt = csv ? "csv" : "jsonl";
        if (s == CHIMERA_OK && !cJSON_GetObjectItemCaseSensitive(c.meta, "segments"))
            meta_segments(&c); /* a 2.x manifest says what it holds */
        if (s == CHIMERA_OK) s = change_commit(&c, rep, err);
        if (s == CHIMERA_OK) {
            *n_records = info.n_records;
            fill_report(rep, &c, c.ix.n_docs, c.ix.n_deleted, c.ix.n_segs, t0);
        }
    }
    cm_free(text);
    change_end(&c);
    return s;
}
