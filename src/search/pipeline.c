/* The 3-stage pipeline (see pipeline.h) and its host stage.
 *
 * Chunking (Algorithm 3). The k_refine candidates come from refinement sorted by partial
 * score; chunk i is the next slice of that list. When the device has scored chunks
 * 0..i by full 1-bit Chamfer score, the host ranks every candidate scored so far (a
 * prefix of the list) by that score and computes the full-bit score of each document in
 * the top ceil((i+1)/c * k_fullbit) that it has not scored yet. With c = 1 this is
 * exactly "1-bit score all k_refine, full-bit the top k_fullbit"; with more chunks the
 * host starts earlier and, rarely, scores a few documents that a later chunk pushes out
 * (counted as n_fullbit, the paper's k^_full-bit, section 5.3).
 *
 * Threads. Where there is something to overlap with (a GPU backend, or one worker with
 * several threads: latency mode), each worker has a companion host thread, woken per
 * query and fed chunk by chunk through a mutex/condvar pair: the worker thread drives
 * the backend, the host thread rescores. Where there is not (the CPU backend with one
 * thread a worker: throughput mode, where every core already runs a worker of its
 * own), the worker rescores each chunk itself right after scoring it: the same steps
 * in the same order, so the same results, without two threads a core handing every
 * query back and forth (bench/RESULTS.md section 5.18). In latency mode the covered
 * form's full-bit stage (every candidate full-bit scored, no chunks) is split over a
 * pool of the query's threads (covered_split), with the same results. Scratch for all
 * of these is allocated at engine creation for the configured maxima.
 *
 * Full-bit scores need <q_j, c> for each token's centroid, from the 8-bit centroids
 * (quant/centroids8.h) on every backend, so that all give the same scores. When the
 * backend computed the centroid scores on the host anyway (the CPU backend) they are
 * reused; otherwise (a GPU keeps its own on the device) the host computes the rows its
 * documents need, once a query per centroid, SP_LAZY_ROWS at a time (sp_worker.S_lazy). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/pool.h"
#include "core/topk.h"
#include "quant/centroids8.h"
#include "quant/kernels.h"
#include "quant/rabitq.h"
#include "search/pipeline.h"
#include "search/rerank.h"
#include "core/alloc.h"

#define SP_MAX_CHUNKS 64
#define SP_LAZY_ROWS 128 /* centroid rows a block of the host's own S (sp_worker.S_lazy) */
/* Latency mode's split full-bit stage (covered_split): parts a thread (documents differ
 * in length, so a few parts a thread balance), the fewest candidates split (waking the
 * pool costs tens of microseconds, a document a few) and the fewest a part (so that a
 * query of few candidates wakes few threads of a large pool). */
#define SP_PARTS_PER_THREAD 4
#define SP_SPLIT_MIN 64
#define SP_PART_MIN 16

/* One part of a split full-bit stage: its best documents and its first bad one. */
typedef struct sp_part {
    float *fin_s; /* [max(k, max rerank_depth) + 1] */
    int64_t *fin_i;
    cm_topk fin;
    int64_t bad_doc; /* the part's first document whose score is unusable, or -1 */
    float bad_score;
} sp_part;

typedef struct sp_worker {
    struct sp_engine *e;
    /* device side */
    uint32_t *cand;
    float *partial, *s1;
    float *dh_s;        /* [max k_refine + 1] the direct path's running top by 1-bit score */
    int64_t *dh_i;
    /* host side */
    quant_qset qs;
    /* When the backend keeps the centroid scores S on the device (host_centroid_scores
     * NULL), the host computes the rows its full-bit stage needs, once a query, in blocks
     * of SP_LAZY_ROWS from the 8-bit centroids (a gemv per document token cost 3-4x the
     * whole full-bit stage, bench/RESULTS.md section 6.1). Host thread only, but reset by
     * the worker while that thread is idle. */
    float *S_lazy;       /* [K x m]: row k valid for this query when bit k of S_have is set */
    uint64_t *S_have;    /* [K bits] */
    uint32_t *lz_id;     /* [SP_LAZY_ROWS] centroids of the next block */
    uint64_t rows_lazy;  /* rows lazy_flush computed, a running count (sp_stats.n_rows) */
    uint8_t *scored;     /* [max_refine] full-bit done */
    float *sel_s, *fin_s;
    int64_t *sel_i, *fin_i;
    /* handoff */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int job, quit, host_done;
    uint32_t chunks_ready, n_chunks;
    uint32_t chunk_end[SP_MAX_CHUNKS + 1];
    const sp_params *p;
    const float *q;
    uint32_t m;
    const float *S;
    uint64_t n_fullbit;
    int split;           /* this query's full-bit stage ran split over the host pool */
    double t_fullbit;
    cm_topk fin;
    int64_t bad_doc;     /* first document whose full-bit score is unusable (score_usable) */
    float bad_score;
    /* the exact re-rank (worker thread, after the host stage) */
    sp_rerank_scratch rr;
    uint32_t *rr_docs;   /* [max(k, max rerank_depth)] the documents re-scored */
    float *rr_exact;     /* their exact scores */
    float *rr_s;         /* [max k + 1] the best k of them */
    int64_t *rr_i;
} sp_worker;

struct sp_engine {
    const ix_index *ix;
    cm_backend be;
    be_resident res;
    be_segment *segs; /* res.segments */
    sp_params max;
    uint32_t max_m;
    int n_workers;
    int overlap;      /* a host thread a worker (see Threads above) */
    sp_worker *w;
    const quant_kernels *kt;
    quant_c8_table *c8; /* the host's centroid rows, where the backend keeps S (S_lazy) */
    /* latency mode (one worker, several threads; any backend): the covered form's
     * full-bit scoring split over host_pool (see covered_split) */
    cm_pool *host_pool;
    sp_part *parts; /* [n_parts] */
    uint32_t n_parts;
};

/* ---- host stage -------------------------------------------------------------------- */

/* Non-finite values. A healthy index never yields a non-finite score for a non-empty
 * document: open checks every centroid and queries are checked finite, so only the
 * factors can be at fault, and checking them all is O(N) (ix_check does). Search
 * instead checks what it computes with. The full-bit factors of each re-scored document
 * are tested as they are used (a few compares per token next to m * dim_pad
 * multiply-adds), since the kernels take maxima and a NaN estimate may simply lose every
 * comparison and vanish instead of showing in the score; and the half floats (alpha)
 * are tested by their bits, because the host's decoder (qm_f16_to_f32) turns Inf/NaN
 * into large finite values. The 1-bit stages (on the device) are checked through their
 * scores: a NaN or +inf partial or 1-bit score is reported (a GPU decodes halves in
 * hardware, so a bad 1-bit factor shows there as a NaN or infinite score), where they
 * run: a search whose full-bit stage covers its candidates computes no 1-bit score
 * (sp_search) and so reports no bad 1-bit factor, which could not change its results
 * either (`chimera check` finds it). A bad 1-bit
 * factor that yields a finite estimate, or one a maximum discards, only skews which
 * documents are re-scored, not the scores returned; open's samples catch a damaged
 * section and `chimera check` every value. Every finding is CHIMERA_ERR_CORRUPT naming
 * the section, never a result. */
static int fB_usable(const quant_fB *f)
{
    return isfinite(f->kappa) && (f->alpha & 0x7c00u) != 0x7c00u;
}

/* The full-bit Chamfer estimate of `doc` from the centroid scores S ([K x m], the rows of
 * its tokens' centroids at least); -inf for an empty document, NaN when one of its
 * tokens has a non-finite factor. */
static float fullbit_score(const ix_index *ix, const quant_kernels *kt, const quant_qset *qs,
                           const float *S, uint32_t m, uint32_t doc)
{
    const ix_segment *sg = ix_doc_segment(ix, doc);
    int64_t ld = doc - sg->doc_base, t0 = sg->doc_off[ld], n = sg->doc_off[ld + 1] - t0;
    if (n == 0) return -INFINITY;
    for (int64_t t = 0; t < n; t++)
        if (!fB_usable(&sg->dB_fact[t0 + t])) return NAN;
    size_t cB = qm_codeB_bytes(ix->dim_pad, ix->bits);
    float mx[QUANT_QTOK_MAX];
    for (uint32_t j = 0; j < m; j++) mx[j] = -INFINITY;
    const uint32_t *cid = sg->tok_cid + t0;
    quant_estB_doc_max(kt, qs, ix->bits, sg->dB_codes + (size_t)t0 * cB, sg->dB_fact + t0,
                       (size_t)n, cid, S, m, mx);
    float s = 0.0f;
    for (uint32_t j = 0; j < m; j++) s += mx[j];
    return s;
}

/* Prefetching for documents scored in turn, which lie at random in the token arrays.
 * Finding a document's tokens is itself a random read (its doc_off entry), and a
 * prefetch of its data must wait for it: when that read missed the caches, the scoring
 * behind it stalled too (7% of a k = 100 query's samples on the real corpus,
 * bench/RESULTS.md 5.29). So two stages: the entry IX_DOC_OFF_AHEAD documents ahead,
 * then all of the next document's data, whose entry is in the cache by then. */
#define SP_DOC_PREFETCH_MAX (8 << 10) /* bytes of codes (the hardware prefetcher follows) */

/* Every cache line of [a, a + bytes). */
static void prefetch_lines(const void *a, size_t bytes)
{
    if (bytes == 0) return;
    uintptr_t p = (uintptr_t)a & ~(uintptr_t)63, end = (uintptr_t)a + bytes;
    for (; p < end; p += 64) __builtin_prefetch((const void *)p);
}

/* The token data fullbit_score reads for `doc`: its codes, factors and centroid ids, of
 * its first SP_DOC_PREFETCH_MAX bytes of codes' tokens. */
static void prefetch_doc_data(const ix_index *ix, uint32_t doc)
{
    const ix_segment *sg = ix_doc_segment(ix, doc);
    int64_t ld = doc - sg->doc_base, t0 = sg->doc_off[ld], n = sg->doc_off[ld + 1] - t0;
    size_t cb = qm_codeB_bytes(ix->dim_pad, ix->bits), nt = (size_t)n;
    if (nt > SP_DOC_PREFETCH_MAX / cb) nt = SP_DOC_PREFETCH_MAX / cb;
    prefetch_lines(sg->dB_codes + (size_t)t0 * cb, nt * cb);
    prefetch_lines(sg->dB_fact + t0, nt * sizeof *sg->dB_fact);
    prefetch_lines(sg->tok_cid + t0, nt * sizeof *sg->tok_cid);
}

/* ---- the host's own centroid scores (a backend that keeps S on the device) --------- */

/* Rows lz_id[0..nb) of w->S_lazy (w->qs holds the query). */
static void lazy_flush(sp_worker *w, uint32_t nb)
{
    const quant_c8_table *t = w->e->c8;
    quant_c8_scores(w->e->kt, &w->qs, t->codes, t->scale, t->sum, w->lz_id, nb, w->S_lazy,
                    w->m);
    w->rows_lazy += nb;
}

/* The rows of S computed one by one so far, by the backend and by the host stage: a
 * running count, read around each query (sp_stats.n_rows). */
static uint64_t rows_so_far(const sp_engine *e, const sp_worker *w, int worker)
{
    const struct cm_backend_i *be = e->be.iface;
    return (be->rows_computed ? be->rows_computed(e->be.ctx, worker) : 0) + w->rows_lazy;
}

/* Queues the rows of doc's tokens' centroids not computed yet in this query, nb queued
 * before; flushes full blocks. @return the number queued now. */
static uint32_t lazy_need(sp_worker *w, uint32_t doc, uint32_t nb)
{
    const ix_segment *sg = ix_doc_segment(w->e->ix, doc);
    int64_t ld = doc - sg->doc_base;
    uint64_t *have = w->S_have;
    for (int64_t t = sg->doc_off[ld]; t < sg->doc_off[ld + 1]; t++) {
        uint32_t k = sg->tok_cid[t];
        uint64_t bit = (uint64_t)1 << (k & 63);
        if (have[k >> 6] & bit) continue;
        have[k >> 6] |= bit;
        w->lz_id[nb] = k;
        if (++nb == SP_LAZY_ROWS) {
            lazy_flush(w, nb);
            nb = 0;
        }
    }
    return nb;
}

/* The query's centroid scores for the host stage: the backend's, else w->S_lazy with no
 * row computed yet. Called by the worker while its host thread is idle. */
static void host_scores_begin(sp_engine *e, sp_worker *w, int worker)
{
    const struct cm_backend_i *be = e->be.iface;
    if (be->host_centroid_scores) {
        w->S = be->host_centroid_scores(e->be.ctx, worker);
        return;
    }
    memset(w->S_have, 0, ((size_t)e->ix->n_clusters + 63) / 64 * sizeof(uint64_t));
    w->S = w->S_lazy;
}

/* Makes w->S hold the rows the documents of candidates cs[0..n) need, skipping those
 * already re-scored (cs NULL: candidates 0..n, none re-scored yet). */
static void host_scores_for(sp_worker *w, const int64_t *cs, uint32_t n)
{
    if (w->S != w->S_lazy) return;
    uint32_t nb = 0;
    for (uint32_t r = 0; r < n; r++) {
        uint32_t c = cs ? (uint32_t)cs[r] : r;
        if (!cs || !w->scored[c]) nb = lazy_need(w, w->cand[c], nb);
    }
    if (nb) lazy_flush(w, nb);
}

/* Whether doc's full-bit score s can be ranked: finite, or -inf for an empty document
 * (never pushed NaN, topk.h; a query with an unusable score fails). */
static int score_usable(const ix_index *ix, uint32_t doc, float s)
{
    if (isfinite(s)) return 1;
    const ix_segment *sg = ix_doc_segment(ix, doc);
    int64_t ld = doc - sg->doc_base;
    return !isnan(s) && sg->doc_off[ld + 1] == sg->doc_off[ld];
}

/* doc's full-bit score s into fin when usable; else, when *bad_doc is still -1, doc is
 * the first unusable one. */
static void keep_score(const ix_index *ix, cm_topk *fin, uint32_t doc, float s,
                       int64_t *bad_doc, float *bad_score)
{
    if (score_usable(ix, doc, s)) {
        cm_topk_push(fin, s, doc);
    } else if (*bad_doc < 0) {
        *bad_doc = doc;
        *bad_score = s;
    }
}

/* Candidate c's full-bit score into w->fin. */
static void rescore(sp_worker *w, uint32_t c)
{
    const sp_engine *e = w->e;
    w->scored[c] = 1;
    float s = fullbit_score(e->ix, e->kt, &w->qs, w->S, w->m, w->cand[c]);
    w->n_fullbit++;
    keep_score(e->ix, &w->fin, w->cand[c], s, &w->bad_doc, &w->bad_score);
}

/* The covered form's full-bit stage in latency mode: candidates [0, n) cut into
 * e->n_parts contiguous parts scored on the host pool's threads, each part into a heap
 * of its own, then every part's heap pushed into w->fin. Each document's score is the
 * one the worker alone computes, and the top of the union of the parts' tops is the top
 * of all (ties by id, topk.h), so the results are the serial loop's; the parts are
 * contiguous and taken in order, so the first unusable score of the first part that has
 * one is the serial loop's first. Reads only what the query has set up (w->qs, w->S, w->m, w->cand,
 * w->fin.k); writes only its own part. */
typedef struct split_job {
    sp_engine *e;
    sp_worker *w;
    uint32_t n, n_parts; /* candidates, and the parts they are cut into */
} split_job;

/* The covered form's run: the full-bit scores of candidates [c0, c1), in order, into
 * *fin (keep_score: *bad_doc, when -1, gets the first unusable). */
static void score_run(const sp_engine *e, const sp_worker *w, uint32_t c0, uint32_t c1,
                      cm_topk *fin, int64_t *bad_doc, float *bad_score)
{
    for (uint32_t c = c0; c < c0 + IX_DOC_OFF_AHEAD && c < c1; c++)
        ix_doc_prefetch_off(e->ix, w->cand[c]);
    for (uint32_t c = c0; c < c1; c++) {
        if (c + IX_DOC_OFF_AHEAD < c1) ix_doc_prefetch_off(e->ix, w->cand[c + IX_DOC_OFF_AHEAD]);
        if (c + 1 < c1) prefetch_doc_data(e->ix, w->cand[c + 1]);
        float s = fullbit_score(e->ix, e->kt, &w->qs, w->S, w->m, w->cand[c]);
        keep_score(e->ix, fin, w->cand[c], s, bad_doc, bad_score);
    }
}

static void split_task(void *ctx, int64_t part, int thread)
{
    (void)thread;
    const split_job *j = ctx;
    sp_part *pt = &j->e->parts[part];
    uint32_t c0 = (uint32_t)((uint64_t)j->n * (uint64_t)part / j->n_parts);
    uint32_t c1 = (uint32_t)((uint64_t)j->n * (uint64_t)(part + 1) / j->n_parts);
    cm_topk_init(&pt->fin, j->w->fin.k, pt->fin_s, pt->fin_i);
    pt->bad_doc = -1;
    score_run(j->e, j->w, c0, c1, &pt->fin, &pt->bad_doc, &pt->bad_score);
}

static void covered_split(sp_engine *e, sp_worker *w, uint32_t n)
{
    uint32_t parts = n / SP_PART_MIN < e->n_parts ? n / SP_PART_MIN : e->n_parts;
    split_job j = {e, w, n, parts ? parts : 1};
    cm_pool_run(e->host_pool, j.n_parts, split_task, &j);
    for (uint32_t p = 0; p < j.n_parts; p++) {
        const sp_part *pt = &e->parts[p];
        for (uint32_t r = 0; r < pt->fin.n; r++)
            cm_topk_push(&w->fin, pt->fin.score[r], pt->fin.id[r]);
        if (w->bad_doc < 0 && pt->bad_doc >= 0) {
            w->bad_doc = pt->bad_doc;
            w->bad_score = pt->bad_score;
        }
    }
    w->n_fullbit = n;
    w->split = 1;
}

/* Rescoring after chunk i (0-based) of n_chunks; the first chunk_end[i+1] candidates
 * have 1-bit scores. */
static void host_step(sp_worker *w, uint32_t i)
{
    sp_engine *e = w->e;
    const sp_params *p = w->p;
    uint32_t seen = w->chunk_end[i + 1];
    uint64_t target = ((uint64_t)(i + 1) * p->k_fullbit + w->n_chunks - 1) / w->n_chunks;
    if (target > seen) target = seen;
    cm_topk sel;
    cm_topk_init(&sel, (uint32_t)target, w->sel_s, w->sel_i);
    for (uint32_t c = 0; c < seen; c++) cm_topk_push(&sel, w->s1[c], c);
    host_scores_for(w, sel.id, sel.n);
    for (uint32_t r = 0; r < IX_DOC_OFF_AHEAD && r < sel.n; r++)
        ix_doc_prefetch_off(e->ix, w->cand[sel.id[r]]);
    for (uint32_t r = 0; r < sel.n; r++) {
        uint32_t c = (uint32_t)sel.id[r];
        /* later chunks find most of sel scored already: fetch only for those not */
        if (r + IX_DOC_OFF_AHEAD < sel.n && !w->scored[sel.id[r + IX_DOC_OFF_AHEAD]])
            ix_doc_prefetch_off(e->ix, w->cand[sel.id[r + IX_DOC_OFF_AHEAD]]);
        if (w->scored[c]) continue;
        if (r + 1 < sel.n && !w->scored[sel.id[r + 1]])
            prefetch_doc_data(e->ix, w->cand[sel.id[r + 1]]);
        rescore(w, c);
    }
}

static void *host_main(void *arg)
{
    sp_worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->quit && !w->job) pthread_cond_wait(&w->cv, &w->mu);
        if (w->quit) break;
        pthread_mutex_unlock(&w->mu);
        double t0 = cm_now();
        quant_qset_set(&w->qs, &w->e->ix->rot, w->q, w->m);
        for (uint32_t i = 0; i < w->n_chunks; i++) {
            pthread_mutex_lock(&w->mu);
            while (w->chunks_ready <= i) pthread_cond_wait(&w->cv, &w->mu);
            pthread_mutex_unlock(&w->mu);
            host_step(w, i);
        }
        pthread_mutex_lock(&w->mu);
        w->t_fullbit = cm_now() - t0;
        w->job = 0;
        w->host_done = 1;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* ---- engine ------------------------------------------------------------------------ */

/* What the backend keeps of ix: segs [ix->n_segs] is filled and referenced by *r. */
static void resident_of(const ix_index *ix, be_segment *segs, be_resident *r)
{
    for (uint32_t i = 0; i < ix->n_segs; i++) {
        const ix_segment *sg = &ix->segs[i];
        segs[i] = (be_segment){
            .key = sg->key, .doc_base = sg->doc_base, .n_docs = sg->n_docs,
            .n_tokens = sg->n_tokens, .n_lists = sg->n_lists, .post_cid = sg->post_cid,
            .post_off = sg->post_off, .post_doc = sg->post_doc, .c1_codes = sg->c1_codes,
            .c1_fact = sg->c1_fact, .d1_codes = sg->d1_codes, .d1_fact = sg->d1_fact,
            .tok_cid = sg->tok_cid, .doc_off = sg->doc_off};
    }
    *r = (be_resident){
        .shared_key = ix->shared_key, .dim = ix->dim, .dim_pad = ix->dim_pad,
        .n_clusters = ix->n_clusters, .degree = ix->degree, .n_entry = ix->n_entry,
        .n_docs = ix->n_docs, .n_tokens = ix->n_tokens, .rot = &ix->rot,
        .centroids = ix->centroids, .graph_adj = ix->g.adj, .graph_entry = ix->g.entry,
        .n_segments = ix->n_segs, .segments = segs, .deleted = ix->deleted};
}

chimera_status sp_engine_refresh(sp_engine *e, const ix_index *ix, chimera_error *err)
{
    const struct cm_backend_i *be = e->be.iface;
    if (!be->refresh)
        return cm_fail(err, CHIMERA_ERR_UNSUPPORTED, "search: the %s backend makes its engine "
                       "anew on a refresh", e->be.name);
    be_segment *segs = cm_calloc(ix->n_segs, sizeof *segs);
    if (!segs) return cm_fail(err, CHIMERA_ERR_NOMEM, "search: out of memory");
    be_resident r;
    resident_of(ix, segs, &r);
    chimera_status s = be->refresh(e->be.ctx, &r, err);
    if (s != CHIMERA_OK) {
        cm_free(segs);
        return s;
    }
    cm_free(e->segs);
    e->segs = segs;
    e->res = r;
    e->ix = ix;
    return CHIMERA_OK;
}

void sp_engine_free(sp_engine *e)
{
    if (!e) return;
    if (e->w)
        for (int i = 0; i < e->n_workers; i++) {
            sp_worker *w = &e->w[i];
            if (w->thread_started) {
                pthread_mutex_lock(&w->mu);
                w->quit = 1;
                pthread_cond_broadcast(&w->cv);
                pthread_mutex_unlock(&w->mu);
                pthread_join(w->thread, NULL);
                pthread_mutex_destroy(&w->mu);
                pthread_cond_destroy(&w->cv);
            }
            quant_qset_free(&w->qs);
            cm_free(w->cand);
            cm_free(w->dh_s);
            cm_free(w->dh_i);
            cm_free(w->partial);
            cm_free(w->s1);
            cm_free(w->S_lazy);
            cm_free(w->S_have);
            cm_free(w->lz_id);
            cm_free(w->scored);
            cm_free(w->sel_s);
            cm_free(w->sel_i);
            cm_free(w->fin_s);
            cm_free(w->fin_i);
            sp_rerank_scratch_free(&w->rr);
            cm_free(w->rr_docs);
            cm_free(w->rr_exact);
            cm_free(w->rr_s);
            cm_free(w->rr_i);
        }
    cm_free(e->w);
    cm_pool_free(e->host_pool);
    for (uint32_t p = 0; e->parts && p < e->n_parts; p++) {
        cm_free(e->parts[p].fin_s);
        cm_free(e->parts[p].fin_i);
    }
    cm_free(e->parts);
    quant_c8_table_release(e->c8);
    backend_free(&e->be);
    cm_free(e->segs);
    cm_free(e);
}

const char *sp_engine_backend(const sp_engine *e) { return e->be.name; }

chimera_status sp_engine_new(const ix_index *ix, const char *backend, int n_workers,
                             int n_threads, const sp_params *max, uint32_t max_m,
                             sp_engine **out, chimera_error *err)
{
    *out = NULL;
    sp_engine *e = cm_calloc(1, sizeof *e);
    if (!e) return cm_fail(err, CHIMERA_ERR_NOMEM, "search: out of memory");
    e->ix = ix;
    e->max = *max;
    e->max_m = max_m;
    e->n_workers = n_workers < 1 ? 1 : n_workers;
    e->kt = quant_kernels_active();
    e->segs = cm_calloc(ix->n_segs, sizeof *e->segs);
    if (!e->segs) {
        cm_free(e);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "search: out of memory");
    }
    chimera_status s = backend_new(backend, &e->be, err);
    if (s != CHIMERA_OK) {
        cm_free(e->segs);
        cm_free(e);
        return s;
    }
    resident_of(ix, e->segs, &e->res);
    be_config cfg = {.n_workers = e->n_workers, .n_threads = n_threads, .max_m = max_m,
                     .max_probe = max->n_probe, .max_refine = max->k_refine};
    s = e->be.iface->upload(e->be.ctx, &e->res, &cfg, err);
    if (s != CHIMERA_OK) goto fail;
    if (!e->be.iface->host_centroid_scores) {
        s = quant_c8_table_get(ix->shared_key, &ix->rot, ix->centroids, ix->n_clusters, &e->c8,
                               err);
        if (s != CHIMERA_OK) goto fail;
    }
    /* the CPU backend's 1-bit scoring runs on the worker's own core (or its pool's) */
    e->overlap = strcmp(e->be.name, "cpu") != 0 || (e->n_workers == 1 && n_threads > 1);
    e->w = cm_calloc((size_t)e->n_workers, sizeof *e->w);
    if (!e->w) goto nomem;
    for (int i = 0; i < e->n_workers; i++) {
        sp_worker *w = &e->w[i];
        w->e = e;
        s = quant_qset_init(&w->qs, ix->dim_pad, max_m, err);
        if (s != CHIMERA_OK) goto fail;
        w->qs.luts = 0; /* the host stage scores full-bit codes only: no 1-bit LUT form */
        uint32_t kr = max->k_refine, kf = max->k_fullbit, k = max->k;
        /* the final heap holds the re-rank's depth when that is deeper than k */
        uint32_t kfin = max->rerank_depth > k ? max->rerank_depth : k;
        w->cand = cm_malloc((size_t)kr * sizeof *w->cand);
        w->dh_s = cm_malloc((size_t)(kr + 1) * sizeof *w->dh_s);
        w->dh_i = cm_malloc((size_t)(kr + 1) * sizeof *w->dh_i);
        w->partial = cm_malloc((size_t)kr * sizeof *w->partial);
        w->s1 = cm_malloc((size_t)kr * sizeof *w->s1);
        if (!e->be.iface->host_centroid_scores) {
            /* [K x max_m] floats, as a CPU backend's S */
            size_t K = ix->n_clusters, s_bytes = 0;
            if (cm_mul_size(K, (size_t)max_m * sizeof(float), &s_bytes) != 0) goto nomem;
            w->S_lazy = cm_malloc(s_bytes);
            w->S_have = cm_malloc((K + 63) / 64 * sizeof(uint64_t));
            w->lz_id = cm_malloc(SP_LAZY_ROWS * sizeof(uint32_t));
            if (!w->S_lazy || !w->S_have || !w->lz_id) goto nomem;
        }
        w->scored = cm_malloc(kr);
        w->sel_s = cm_malloc((size_t)(kf + 1) * sizeof(float));
        w->sel_i = cm_malloc((size_t)(kf + 1) * sizeof(int64_t));
        w->fin_s = cm_malloc((size_t)(kfin + 1) * sizeof(float));
        w->fin_i = cm_malloc((size_t)(kfin + 1) * sizeof(int64_t));
        if (!w->cand || !w->dh_s || !w->dh_i || !w->partial || !w->s1 || !w->scored ||
            !w->sel_s || !w->sel_i || !w->fin_s || !w->fin_i)
            goto nomem;
        if (max->rerank_depth) {
            s = sp_rerank_scratch_init(&w->rr, ix->dim, max_m, err);
            if (s != CHIMERA_OK) goto fail;
            w->rr_docs = cm_malloc((size_t)kfin * sizeof *w->rr_docs);
            w->rr_exact = cm_malloc((size_t)kfin * sizeof *w->rr_exact);
            w->rr_s = cm_malloc((size_t)(k + 1) * sizeof *w->rr_s);
            w->rr_i = cm_malloc((size_t)(k + 1) * sizeof *w->rr_i);
            if (!w->rr_docs || !w->rr_exact || !w->rr_s || !w->rr_i) goto nomem;
        }
        if (!e->overlap) continue;
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        if (pthread_create(&w->thread, NULL, host_main, w) != 0) {
            pthread_mutex_destroy(&w->mu);
            pthread_cond_destroy(&w->cv);
            s = cm_fail(err, CHIMERA_ERR_NOMEM, "search: cannot start a host thread");
            goto fail;
        }
        w->thread_started = 1;
    }
    if (e->n_workers == 1 && n_threads > 1) {
        uint32_t kfin = max->rerank_depth > max->k ? max->rerank_depth : max->k;
        e->host_pool = cm_pool_new(n_threads);
        e->n_parts = (uint32_t)n_threads * SP_PARTS_PER_THREAD;
        e->parts = cm_calloc(e->n_parts, sizeof *e->parts);
        if (!e->host_pool) {
            s = cm_fail(err, CHIMERA_ERR_NOMEM, "search: cannot start threads");
            goto fail;
        }
        if (!e->parts) goto nomem;
        for (uint32_t p = 0; p < e->n_parts; p++) {
            e->parts[p].fin_s = cm_malloc((size_t)(kfin + 1) * sizeof(float));
            e->parts[p].fin_i = cm_malloc((size_t)(kfin + 1) * sizeof(int64_t));
            if (!e->parts[p].fin_s || !e->parts[p].fin_i) goto nomem;
        }
    }
    *out = e;
    return CHIMERA_OK;
nomem:
    s = cm_fail(err, CHIMERA_ERR_NOMEM, "search: out of memory for worker scratch");
fail:
    sp_engine_free(e);
    return s;
}

/* ---- one query --------------------------------------------------------------------- */

/* The direct path (see sp_search in pipeline.h): every allowed document scored by its
 * full 1-bit Chamfer estimate, batch by batch (a backend scores at most max k_refine
 * documents per call), keeping the best k_refine as refinement's result would be. */
static chimera_status direct_candidates(sp_engine *e, int worker, const sp_params *p,
                                        uint32_t *n_cand, chimera_error *err)
{
    const struct cm_backend_i *be = e->be.iface;
    sp_worker *w = &e->w[worker];
    const sp_filter *f = p->filter;
    cm_topk h;
    cm_topk_init(&h, p->k_refine, w->dh_s, w->dh_i);
    uint32_t B = e->max.k_refine;
    for (int64_t i0 = 0; i0 < f->n; i0 += B) {
        uint32_t nb = f->n - i0 < B ? (uint32_t)(f->n - i0) : B;
        CM_TRY(be->score1(e->be.ctx, worker, f->docs + i0, nb, w->s1, err));
        for (uint32_t i = 0; i < nb; i++) {
            if (isnan(w->s1[i]) || w->s1[i] == INFINITY)
                return cm_fail(err, CHIMERA_ERR_CORRUPT,
                               "search: document row %u got a %g 1-bit score: section 'd1_fact' "
                               "holds non-finite or implausible factors (run chimera check)",
                               f->docs[i0 + i], (double)w->s1[i]);
            cm_topk_push(&h, w->s1[i], f->docs[i0 + i]);
        }
    }
    cm_topk_sort(&h);
    for (uint32_t i = 0; i < h.n; i++) {
        w->cand[i] = (uint32_t)h.id[i];
        w->partial[i] = h.score[i];
    }
    *n_cand = h.n;
    return CHIMERA_OK;
}

/* Centroid interaction (pipeline.h, stage 2): the *n_cand refined documents in w->cand
 * ranked by their centroid-interaction score, the best `keep` of them (ties: the smaller
 * document) replacing the list, best first, their partial scores replaced by it, so
 * chunk 0 holds the most promising documents as before. The score is only a ranking: the
 * 1-bit and full-bit stages score every kept document anew. */
static chimera_status interaction_candidates(sp_engine *e, int worker, uint32_t keep,
                                             uint32_t *n_cand, chimera_error *err)
{
    sp_worker *w = &e->w[worker];
    uint32_t n = *n_cand;
    CM_TRY(e->be.iface->score_ci(e->be.ctx, worker, w->cand, n, w->s1, err));
    cm_topk h;
    cm_topk_init(&h, keep, w->dh_s, w->dh_i);
    for (uint32_t c = 0; c < n; c++) {
        if (isnan(w->s1[c]) || w->s1[c] == INFINITY)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "search: document row %u got a %g centroid-interaction score: "
                           "section 'centroids' or 'tok_cid' is damaged (run chimera check)",
                           w->cand[c], (double)w->s1[c]);
        cm_topk_push(&h, w->s1[c], w->cand[c]);
    }
    cm_topk_sort(&h);
    for (uint32_t i = 0; i < h.n; i++) {
        w->cand[i] = (uint32_t)h.id[i];
        w->partial[i] = h.score[i];
    }
    *n_cand = h.n;
    return CHIMERA_OK;
}

/* The exact re-rank: the documents in w->fin (the best by full-bit score) re-scored
 * exactly from the stored vectors; the best k of them by that score go to ids/scores
 * (internal document numbers).
 * Stored vectors are checked finite by open (a sample) and by chimera check (all), so a
 * non-finite exact score means a damaged section and fails the query like a non-finite
 * estimate does. */
static chimera_status rerank(sp_engine *e, sp_worker *w, const float *q, uint32_t m, uint32_t k,
                             int64_t *ids, float *scores, uint32_t *n_out, chimera_error *err)
{
    const ix_index *ix = e->ix;
    uint32_t n = w->fin.n;
    for (uint32_t r = 0; r < n; r++) w->rr_docs[r] = (uint32_t)w->fin.id[r];
    sp_rerank_score(ix, w->rr_docs, n, q, m, &w->rr, w->rr_exact);
    cm_topk best;
    cm_topk_init(&best, k, w->rr_s, w->rr_i);
    for (uint32_t r = 0; r < n; r++) {
        float s = w->rr_exact[r];
        if (isnan(s) || s == INFINITY) {
            const ix_segment *sg = ix_doc_segment(ix, w->rr_docs[r]);
            char nm[48];
            const char *base = ix_sections[ix_vec_section(ix->vec_type)].name;
            if (sg->seq) snprintf(nm, sizeof nm, "s%u_%s", sg->seq, base);
            else snprintf(nm, sizeof nm, "%s", base);
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "search: document row %u got a %g exact score: section '%s' holds "
                           "non-finite vectors (run chimera check)", w->rr_docs[r], (double)s, nm);
        }
        cm_topk_push(&best, s, w->rr_docs[r]);
    }
    cm_topk_emit(&best, ids, scores);
    *n_out = n;
    return CHIMERA_OK;
}

/* A search whose re-rank covers the full-bit stage (sp_search): every candidate 1-bit
 * scored on the device in one call, and the top k_fullbit of them by that score put in
 * w->fin for the re-rank; when k_fullbit covers every candidate, all of them, unscored
 * (their 1-bit scores would pick them all: the exact scores alone rank them). */
static chimera_status covered_candidates(sp_engine *e, int worker, const sp_params *p,
                                         uint32_t n_cand, int *scored1, chimera_error *err)
{
    sp_worker *w = &e->w[worker];
    cm_topk_init(&w->fin, p->rerank_depth > p->k ? p->rerank_depth : p->k, w->fin_s, w->fin_i);
    w->n_fullbit = 0;
    w->t_fullbit = 0;
    *scored1 = n_cand > p->k_fullbit;
    if (!*scored1) { /* fin holds max(k, depth) >= k_fullbit >= n_cand: all enter */
        for (uint32_t c = 0; c < n_cand; c++) cm_topk_push(&w->fin, -(float)c, w->cand[c]);
        return CHIMERA_OK;
    }
    CM_TRY(e->be.iface->score1(e->be.ctx, worker, w->cand, n_cand, w->s1, err));
    cm_topk sel;
    cm_topk_init(&sel, p->k_fullbit, w->sel_s, w->sel_i);
    for (uint32_t c = 0; c < n_cand; c++) {
        if (isnan(w->s1[c]) || w->s1[c] == INFINITY)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "search: document row %u got a %g 1-bit score: section 'd1_fact' holds "
                           "non-finite or implausible factors (run chimera check)", w->cand[c],
                           (double)w->s1[c]);
        cm_topk_push(&sel, w->s1[c], w->cand[c]);
    }
    for (uint32_t r = 0; r < sel.n; r++) cm_topk_push(&w->fin, sel.score[r], sel.id[r]);
    return CHIMERA_OK;
}

/* The device's 1-bit scores of chunk i's candidates (w->s1), checked; after a failure
 * (s, or this chunk's) the chunk's scores are -inf, so that the host stage still ends.
 * @return s, or this chunk's failure. */
static chimera_status score_chunk(sp_engine *e, int worker, uint32_t i, chimera_status s,
                                  chimera_error *err)
{
    sp_worker *w = &e->w[worker];
    uint32_t c0 = w->chunk_end[i], c1 = w->chunk_end[i + 1];
    if (s == CHIMERA_OK && c1 > c0)
        s = e->be.iface->score1(e->be.ctx, worker, w->cand + c0, c1 - c0, w->s1 + c0, err);
    for (uint32_t c = c0; c < c1 && s == CHIMERA_OK; c++)
        if (isnan(w->s1[c]) || w->s1[c] == INFINITY)
            s = cm_fail(err, CHIMERA_ERR_CORRUPT,
                        "search: document row %u got a %g 1-bit score: section 'd1_fact' "
                        "holds non-finite or implausible factors (run chimera check)",
                        w->cand[c], (double)w->s1[c]);
    if (s != CHIMERA_OK)
        for (uint32_t c = c0; c < c1; c++) w->s1[c] = -INFINITY; /* let the host finish */
    return s;
}

static be_floor floor_of(const sp_params *p)
{
    return (be_floor){p->impute, p->impute_scale > 0 ? p->impute_scale : 1.0f};
}

chimera_status sp_search(sp_engine *e, int worker, const float *q, uint32_t m,
                         const sp_params *p, int64_t *ids, float *scores, sp_stats *st,
                         chimera_error *err)
{
    const struct cm_backend_i *be = e->be.iface;
    void *ctx = e->be.ctx;
    sp_worker *w = &e->w[worker];
    w->split = 0;
    if (m == 0 || m > e->max_m || p->k > e->max.k || p->n_probe > e->max.n_probe ||
        p->n_probe_room > e->max.n_probe ||
        p->k_refine > e->max.k_refine || p->k_fullbit > e->max.k_fullbit || p->chunks == 0 ||
        p->chunks > SP_MAX_CHUNKS || p->rerank_depth > e->max.rerank_depth)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "search: parameters exceed the engine's maxima");
    uint32_t kr_f = p->k_refine_filtered ? p->k_refine_filtered : p->k_refine;
    if (p->k_fullbit_filtered > e->max.k_fullbit || p->k_fullbit_filtered > kr_f ||
        kr_f > e->max.k_refine)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "search: parameters exceed the engine's maxima");
    sp_params pf;
    if (p->filter && (p->k_fullbit_filtered || p->k_refine_filtered)) {
        /* this query's own depths (pipeline.h) */
        pf = *p;
        if (p->k_fullbit_filtered) pf.k_fullbit = p->k_fullbit_filtered;
        pf.k_refine = kr_f;
        p = &pf; /* lives until the host thread is done with the query, below */
    }
    /* the rows of S computed one by one for this query's documents, by the backend and
     * by the host stage (read again once the host thread is done with the query) */
    uint64_t rows0 = rows_so_far(e, w, worker);
    uint64_t walked0 = be->probes_walked ? be->probes_walked(ctx, worker) : 0;
    double t0 = cm_now();
    CM_TRY(be->query_begin(ctx, worker, q, m, err));
    const sp_filter *f = p->filter;
    int direct = f && (f->n <= (int64_t)SP_DIRECT_REFINES * p->k_refine ||
                       f->n * 100 <= e->ix->n_docs);
    double t1 = cm_now();
    uint32_t n_cand = 0;
    be_refine_stats rs = {0};
    uint64_t probed = 0, touched = 0; /* over every round of probing */
    if (!direct) {
        uint32_t np = p->n_probe;
        if (f) { /* deeper for a selective filter (pipeline.h) */
            double deep = sqrt((double)e->ix->n_docs / (double)(f->n > 0 ? f->n : 1));
            if (deep > SP_FILTER_PROBE_MAX) deep = SP_FILTER_PROBE_MAX;
            double want = ceil(np * deep);
            uint32_t room = p->n_probe_room > np ? p->n_probe_room : np;
            np = want < room ? (uint32_t)want : room;
        }
        CM_TRY(be->probe(ctx, worker, np, p->k_refine, p->probe, NULL, NULL, err));
        probed += np;
        t1 = cm_now();
        CM_TRY(be->refine(ctx, worker, p->k_refine, floor_of(p), f ? f->allow : NULL, w->cand,
                          w->partial, &n_cand, &rs, err));
        /* the probed clusters hold fewer documents than full-bit scoring ranks (a strongly
         * clustered corpus: every cluster near the query's tokens holds the same few
         * documents, so a top-100 search would return 60): probe twice the clusters, up to
         * the room the engine was sized for (pipeline.h) */
        int64_t live = e->ix->n_docs - e->ix->n_deleted;
        uint32_t want = (int64_t)p->k_fullbit < live ? p->k_fullbit : (uint32_t)(live > 0 ? live : 0);
        uint32_t room = p->n_probe_room > np ? p->n_probe_room : np;
        while (!f && n_cand < want && np < room && np < e->ix->n_clusters) {
            np = np * 2 < room ? np * 2 : room;
            touched += rs.docs_touched;
            uint64_t scored = rs.tokens_scored;
            CM_TRY(be->probe(ctx, worker, np, p->k_refine, p->probe, NULL, NULL, err));
            probed += np;
            CM_TRY(be->refine(ctx, worker, p->k_refine, floor_of(p), NULL, w->cand, w->partial,
                              &n_cand, &rs, err));
            rs.tokens_scored += scored;
        }
        touched += rs.docs_touched;
        /* a filter that let through fewer than k of the probed documents, while more are
         * allowed: score them all instead */
        if (f && (int64_t)n_cand < f->n && n_cand < p->k) direct = 1;
    }
    uint32_t n_refined = n_cand;
    if (f && f->n == 0) n_cand = n_refined = 0;
    else if (direct) CM_TRY(direct_candidates(e, worker, p, &n_cand, err));
    double t2 = cm_now(), t2b = t2;
    if (!direct && p->k_interaction && p->k_interaction < n_cand) {
        CM_TRY(interaction_candidates(e, worker, p->k_interaction, &n_cand, err));
        t2b = cm_now();
    }
    /* -inf is a possible floor (a probe that found fewer clusters); NaN and +inf are not */
    for (uint32_t c = 0; c < n_cand; c++)
        if (isnan(w->partial[c]) || w->partial[c] == INFINITY)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "search: document row %u got a %g partial 1-bit score: section "
                           "'c1_fact' holds non-finite or implausible factors (run chimera "
                           "check)",
                           w->cand[c], (double)w->partial[c]);

    /* The re-rank tier re-scores every document the full-bit stage would score when its
     * depth covers k_fullbit (the usual case: k_fullbit is raised to the depth), so the
     * full-bit estimates would only be thrown away: the top k_fullbit by 1-bit score
     * (the documents the host would pick) go to the re-rank directly. Otherwise the
     * device scores chunks and the host stage rescores them (see Threads above). */
    double t3, t4, t_inline = 0; /* t_inline: the rescoring done between chunks */
    int scored1 = 1; /* the device 1-bit scored the candidates */
    if (p->rerank_depth && p->rerank_depth >= p->k_fullbit) {
        CM_TRY(covered_candidates(e, worker, p, n_cand, &scored1, err));
        t3 = t4 = cm_now();
    } else if (n_cand <= p->k_fullbit) {
        /* Full-bit scoring covers every candidate: the host would re-score them all
         * whatever their 1-bit scores, which only order the work, so the device scores
         * none (the same results; on the CPU a 1-bit scored document costs most of what a
         * full-bit one does, bench/RESULTS.md 5.19). */
        w->p = p;
        w->q = q;
        w->m = m;
        host_scores_begin(e, w, worker);
        w->n_fullbit = 0;
        w->bad_doc = -1;
        cm_topk_init(&w->fin, p->rerank_depth > p->k ? p->rerank_depth : p->k, w->fin_s, w->fin_i);
        quant_qset_set(&w->qs, &e->ix->rot, q, m);
        host_scores_for(w, NULL, n_cand);
        if (e->host_pool && n_cand >= SP_SPLIT_MIN) {
            covered_split(e, w, n_cand);
        } else {
            score_run(e, w, 0, n_cand, &w->fin, &w->bad_doc, &w->bad_score);
            w->n_fullbit = n_cand;
        }
        t3 = t4 = cm_now();
        w->t_fullbit = t_inline = t3 - t2b;
        scored1 = 0;
        if (w->bad_doc >= 0)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "search: document row %lld got a %g full-bit score: section 'dB_fact' "
                           "holds non-finite or implausible factors (run chimera check)",
                           (long long)w->bad_doc, (double)w->bad_score);
    } else {
        uint32_t nc = p->chunks < n_cand ? p->chunks : (n_cand ? n_cand : 1);
        if (e->overlap) pthread_mutex_lock(&w->mu);
        w->p = p;
        w->q = q;
        w->m = m;
        host_scores_begin(e, w, worker);
        w->n_chunks = nc;
        for (uint32_t i = 0; i <= nc; i++) w->chunk_end[i] = (uint32_t)((uint64_t)n_cand * i / nc);
        w->chunks_ready = 0;
        w->n_fullbit = 0;
        w->bad_doc = -1;
        w->host_done = 0;
        memset(w->scored, 0, n_cand ? n_cand : 1);
        cm_topk_init(&w->fin, p->rerank_depth > p->k ? p->rerank_depth : p->k, w->fin_s, w->fin_i);
        chimera_status s = CHIMERA_OK;
        if (e->overlap) {
            w->job = 1;
            pthread_cond_broadcast(&w->cv);
            pthread_mutex_unlock(&w->mu);
            for (uint32_t i = 0; i < nc; i++) {
                s = score_chunk(e, worker, i, s, err);
                pthread_mutex_lock(&w->mu);
                w->chunks_ready = i + 1;
                pthread_cond_broadcast(&w->cv);
                pthread_mutex_unlock(&w->mu);
            }
            t3 = cm_now();
            pthread_mutex_lock(&w->mu);
            while (!w->host_done) pthread_cond_wait(&w->cv, &w->mu);
            pthread_mutex_unlock(&w->mu);
            t4 = cm_now();
        } else { /* each chunk rescored as soon as it is scored: host_main's steps */
            double tf = 0;
            quant_qset_set(&w->qs, &e->ix->rot, q, m);
            for (uint32_t i = 0; i < nc; i++) {
                s = score_chunk(e, worker, i, s, err);
                double th = cm_now();
                host_step(w, i);
                tf += cm_now() - th;
            }
            w->t_fullbit = t_inline = tf;
            t3 = t4 = cm_now();
        }
        if (s != CHIMERA_OK) return s;
        if (w->bad_doc >= 0)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "search: document row %lld got a %g full-bit score: section 'dB_fact' "
                           "holds non-finite or implausible factors (run chimera check)",
                           (long long)w->bad_doc, (double)w->bad_score);
    }
    double t5 = t4;
    uint32_t n_rr = 0;
    if (p->rerank_depth) {
        CM_TRY(rerank(e, w, q, m, p->k, ids, scores, &n_rr, err));
        t5 = cm_now();
    } else {
        cm_topk_emit(&w->fin, ids, scores);
    }
    for (uint32_t r = 0; r < p->k; r++)
        if (ids[r] >= 0) ids[r] = ix_doc_id(e->ix, ids[r]);
    if (st) {
        st->t_generate += t1 - t0;
        st->t_refine += t2 - t1;
        st->t_interaction += t2b - t2;
        st->t_score1 += t3 - t2b - t_inline;
        st->t_fullbit_wait += t4 - t3;
        st->t_fullbit += w->t_fullbit;
        st->t_rerank += t5 - t4;
        st->n_reranked += n_rr;
        st->t_total += t5 - t0;
        st->tokens_refined += rs.tokens_scored;
        st->docs_touched += touched;
        st->n_probed += probed;
        st->n_refined += n_refined;
        st->n_scored1 += scored1 ? n_cand : 0;
        st->n_fullbit += w->n_fullbit;
        st->n_split += (uint64_t)w->split;
        st->n_rows += rows_so_far(e, w, worker) - rows0;
        /* the backend counts tokens x probes; the profile, probes per token as n_probed */
        if (be->probes_walked && m)
            st->n_walked += (be->probes_walked(ctx, worker) - walked0) / m;
        /* query tokens up; candidate ids + partial scores and chunk scores down */
        st->bytes_up += (uint64_t)m * e->ix->dim * sizeof(float) + (scored1 ? (uint64_t)n_cand * 4 : 0);
        st->bytes_down += (uint64_t)n_refined * (4 + 4) + (scored1 ? (uint64_t)n_cand * 4 : 0);
        if (t2b > t2) { /* the interaction's ids up and scores down */
            st->bytes_up += (uint64_t)n_refined * 4;
            st->bytes_down += (uint64_t)n_refined * 4;
        }
    }
    return CHIMERA_OK;
}

chimera_status sp_fullbit_all(const ix_index *ix, const float *q, uint32_t m, float *scores,
                              chimera_error *err)
{
    quant_qset qs;
    CM_TRY(quant_qset_init(&qs, ix->dim_pad, m, err));
    qs.luts = 0; /* full-bit codes only */
    quant_c8_table *c8 = NULL;
    float *S = cm_malloc((size_t)ix->n_clusters * m * sizeof(float));
    chimera_status st = S ? quant_c8_table_get(ix->shared_key, &ix->rot, ix->centroids,
                                               ix->n_clusters, &c8, err)
                          : cm_fail(err, CHIMERA_ERR_NOMEM, "search: out of memory");
    if (st != CHIMERA_OK) {
        cm_free(S);
        quant_qset_free(&qs);
        return st;
    }
    quant_qset_set(&qs, &ix->rot, q, m);
    const quant_kernels *kt = quant_kernels_active();
    /* the centroid scores every backend's full-bit stage uses */
    quant_c8_scores(kt, &qs, c8->codes, c8->scale, c8->sum, NULL, ix->n_clusters, S, m);
    quant_c8_table_release(c8);
    for (int64_t d = 0; d < ix->n_docs; d++)
        scores[d] = ix_is_deleted(ix, d) ? -INFINITY
                                         : fullbit_score(ix, kt, &qs, S, m, (uint32_t)d);
    cm_free(S);
    quant_qset_free(&qs);
    return CHIMERA_OK;
}
