/* Exact Chamfer search by blocked sgemm (and, at the end, exact scores of given
 * candidates by the re-rank tier's kernel).
 *
 * For a batch of queries (all their tokens stacked: mq rows) and a block of whole
 * documents (at most BLOCK_ROWS token rows; a longer document is walked in chunks), one
 * sgemm gives every (document token, query token) inner product, C[row][j]. A running
 * max over a document's rows (contiguous, vectorised) gives max_v <q_j, v> for every
 * query token j at once; summing each query's span of that vector gives the document's
 * score for every query of the batch. Scores go to per-worker, per-query top-k heaps,
 * merged at the end of the batch.
 *
 * Blocks are whole documents so no partial maxima cross tasks; workers take blocks
 * from the pool's atomic counter, so uneven documents balance. The token matrix is
 * read straight from its mapping (float32) or converted per chunk (float16): one pass
 * per query batch, so a matrix larger than RAM streams through the page cache. The
 * batch size (up to 256 queries / 4096 query tokens) is chosen so the score block
 * (BLOCK_ROWS x mq floats, 8 MiB) stays in L2/L3 while the gemm is efficient.
 *
 * Cost: 2 * n_tokens * n_query_tokens * dim flops; bench/bench_exact.c reports the
 * achieved GFLOP/s against the machine's sgemm peak. */
#include <math.h>
#include <string.h>

#include "core/blas.h"
#include "core/error.h"
#include "core/pool.h"
#include "core/progress.h"
#include "core/topk.h"
#include "core/cpu.h"
#include "search/exact.h"
#include "search/rerank.h"
#include "core/alloc.h"

#define BLOCK_ROWS 512
#define BATCH_ROWS 4096
#define BATCH_QUERIES 256

typedef struct worker {
    float *c;      /* BLOCK_ROWS x mq_cap */
    float *conv;   /* BLOCK_ROWS x dim, float16 conversion */
    float *runmax; /* mq_cap */
    int bad;       /* whether one of the document's products is NaN or infinite */
    float *hs;     /* BATCH_QUERIES x k */
    int64_t *hi;
    cm_topk heap[BATCH_QUERIES];
} worker;

typedef struct job {
    const data_corpus *c;
    const data_queries *q;
    uint32_t k;
    int64_t q0, q1, mq; /* batch: queries [q0, q1), mq token rows */
    const int64_t *blk; /* block b = documents [blk[b], blk[b+1]) */
    worker *w;
    cm_progress *prog;
    cm_watch *watch; /* NULL: not cancellable */
} job;

static void finish_doc(const job *jb, worker *w, int64_t doc)
{
    const int64_t *qo = jb->q->off, base = qo[jb->q0];
    for (int64_t j = jb->q0; j < jb->q1; j++) {
        float s = 0;
        for (int64_t t = qo[j] - base; t < qo[j + 1] - base; t++) s += w->runmax[t];
        /* a corpus opened without its value check may hold NaN or infinity: such a
         * document ranks nowhere (a heap never takes NaN, topk.h), as in the rescoring,
         * wherever the value lies (a running maximum passes over a NaN product) */
        if (isfinite(s) && !w->bad) cm_topk_push(&w->heap[j - jb->q0], s, doc);
    }
}

static void run_block(void *ctx, int64_t b, int wi)
{
    const job *jb = ctx;
    const data_corpus *c = jb->c;
    worker *w = &jb->w[wi];
    if (cm_watch_flag(jb->watch)) return; /* cancelled: skip the rest */
    const int64_t d0 = jb->blk[b], d1 = jb->blk[b + 1];
    const int64_t r0 = c->doc_off[d0], r1 = c->doc_off[d1], mq = jb->mq;
    const float *qt = jb->q->tokens + jb->q->off[jb->q0] * (int64_t)c->dim;
    int64_t doc = d0;
    while (doc < d1 && c->doc_off[doc + 1] == c->doc_off[doc]) doc++; /* skip empty */
    for (int64_t r = r0; r < r1; r += BLOCK_ROWS) {
        int64_t n = r1 - r < BLOCK_ROWS ? r1 - r : BLOCK_ROWS;
        const float *rows = data_corpus_rows(c, r, n, w->conv);
        cm_sgemm_nt((int)n, (int)mq, (int)c->dim, 1.0f, rows, (int)c->dim, qt, (int)c->dim, 0.0f,
                    w->c, (int)mq);
        for (int64_t i = 0; i < n; i++) {
            int64_t row = r + i;
            const float *cr = w->c + i * mq;
            float *rm = w->runmax;
            if (row == c->doc_off[doc]) {
                memcpy(rm, cr, (size_t)mq * sizeof *rm);
                w->bad = 0;
            } else {
                for (int64_t j = 0; j < mq; j++) rm[j] = cr[j] > rm[j] ? cr[j] : rm[j];
            }
            /* a corpus that may hold NaN or infinity: x - x is 0 for a finite product,
             * NaN otherwise (a test per product cost 13% of exact search on a checked
             * corpus, so only here) */
            if (c->unchecked)
                for (int64_t j = 0; j < mq; j++) w->bad |= cr[j] - cr[j] != 0.0f;
            if (row + 1 == c->doc_off[doc + 1]) {
                finish_doc(jb, w, doc);
                doc++;
                while (doc < d1 && c->doc_off[doc + 1] == c->doc_off[doc]) doc++;
            }
        }
    }
    cm_progress_add(jb->prog, (uint64_t)(r1 - r0));
}

/* Splits documents into blocks of at most BLOCK_ROWS rows (or one long document). */
static int64_t *make_blocks(const data_corpus *c, int64_t *n_blocks)
{
    int64_t *blk = cm_malloc((size_t)(c->n_docs + 1) * sizeof *blk), n = 0, d = 0;
    if (!blk) return NULL;
    while (d < c->n_docs) {
        blk[n++] = d;
        int64_t start = c->doc_off[d];
        d++;
        while (d < c->n_docs && c->doc_off[d + 1] - start <= BLOCK_ROWS) d++;
    }
    blk[n] = c->n_docs;
    *n_blocks = n;
    return blk;
}

chimera_status sp_exact_search(const data_corpus *c, const data_queries *q, uint32_t k,
                               int n_threads, chimera_progress_fn progress, void *progress_user,
                               int64_t *ids, float *scores, chimera_error *err)
{
    if (!progress) return sp_exact_search_watch(c, q, k, n_threads, NULL, ids, scores, err);
    cm_watch watch;
    cm_watch_init(&watch, progress, progress_user, NULL, NULL);
    return sp_exact_search_watch(c, q, k, n_threads, &watch, ids, scores, err);
}

chimera_status sp_exact_search_watch(const data_corpus *c, const data_queries *q, uint32_t k,
                                     int n_threads, cm_watch *watch, int64_t *ids,
                                     float *scores, chimera_error *err)
{
    if (k == 0) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "exact search: k must be > 0");
    if (q->dim != c->dim)
        return cm_fail(err, CHIMERA_ERR_DIM,
                       "exact search: queries have dimension %u, the corpus %u", q->dim, c->dim);
    int64_t mq_cap = BATCH_ROWS;
    for (int64_t i = 0; i < q->n; i++)
        if (q->off[i + 1] - q->off[i] > mq_cap) mq_cap = q->off[i + 1] - q->off[i];
    cm_pool *pool = cm_pool_new(n_threads);
    int64_t n_blocks = 0, *blk = make_blocks(c, &n_blocks);
    int nw = cm_pool_size(pool);
    worker *w = cm_calloc((size_t)nw, sizeof *w);
    chimera_status s = CHIMERA_OK;
    if (!pool || !blk || !w) {
        s = cm_fail(err, CHIMERA_ERR_NOMEM, "exact search: out of memory");
        goto done;
    }
    for (int i = 0; i < nw; i++) {
        w[i].c = cm_aligned_alloc(64, (size_t)BLOCK_ROWS * mq_cap * sizeof(float));
        w[i].conv = cm_aligned_alloc(64, (size_t)BLOCK_ROWS * c->dim * sizeof(float));
        w[i].runmax = cm_aligned_alloc(64, (size_t)mq_cap * sizeof(float));
        w[i].hs = cm_malloc((size_t)BATCH_QUERIES * k * sizeof(float));
        w[i].hi = cm_malloc((size_t)BATCH_QUERIES * k * sizeof(int64_t));
        if (!w[i].c || !w[i].conv || !w[i].runmax || !w[i].hs || !w[i].hi) {
            s = cm_fail(err, CHIMERA_ERR_NOMEM,
                        "exact search: out of memory for per-thread buffers (k = %u)", k);
            goto done;
        }
    }
    cm_progress prog;
    cm_progress_begin(&prog, watch ? cm_watch_progress : NULL, watch, "exact search",
                      (uint64_t)c->n_tokens * (uint64_t)((q->n + BATCH_QUERIES - 1) / BATCH_QUERIES));
    for (int64_t q0 = 0; q0 < q->n;) {
        int64_t q1 = q0 + 1;
        while (q1 < q->n && q1 - q0 < BATCH_QUERIES && q->off[q1 + 1] - q->off[q0] <= mq_cap) q1++;
        if (cm_watch_stopped(watch)) {
            s = cm_fail(err, CHIMERA_ERR_CANCELLED, "exact search: cancelled");
            goto done;
        }
        job jb = {c, q, k, q0, q1, q->off[q1] - q->off[q0], blk, w, &prog, watch};
        for (int i = 0; i < nw; i++)
            for (int64_t j = 0; j < q1 - q0; j++)
                cm_topk_init(&w[i].heap[j], k, w[i].hs + j * k, w[i].hi + j * k);
        cm_pool_run(pool, n_blocks, run_block, &jb);
        /* Merge the workers' heaps into worker 0's, then emit. */
        for (int64_t j = 0; j < q1 - q0; j++) {
            cm_topk *h = &w[0].heap[j];
            for (int i = 1; i < nw; i++)
                for (uint32_t e = 0; e < w[i].heap[j].n; e++)
                    cm_topk_push(h, w[i].heap[j].score[e], w[i].heap[j].id[e]);
            int64_t *oi = ids + (q0 + j) * k;
            cm_topk_emit(h, oi, scores + (q0 + j) * k);
            for (uint32_t r = 0; r < k; r++)
                if (oi[r] >= 0) oi[r] = data_corpus_id(c, oi[r]);
        }
        q0 = q1;
    }
    if (cm_watch_stopped(watch)) {
        s = cm_fail(err, CHIMERA_ERR_CANCELLED, "exact search: cancelled");
        goto done;
    }
    cm_progress_end(&prog);
done:
    if (w)
        for (int i = 0; i < nw; i++) {
            cm_free(w[i].c);
            cm_free(w[i].conv);
            cm_free(w[i].runmax);
            cm_free(w[i].hs);
            cm_free(w[i].hi);
        }
    cm_free(w);
    cm_free(blk);
    cm_pool_free(pool);
    return s;
}

void sp_exact_scores_naive(const data_corpus *c, const data_queries *q, double *out)
{
    float *row = cm_malloc(c->dim * sizeof *row);
    for (int64_t i = 0; i < q->n; i++) {
        for (int64_t d = 0; d < c->n_docs; d++) {
            double total = 0;
            if (c->doc_off[d + 1] == c->doc_off[d]) {
                out[i * c->n_docs + d] = -INFINITY;
                continue;
            }
            for (int64_t t = q->off[i]; t < q->off[i + 1]; t++) {
                const float *qt = q->tokens + t * (int64_t)c->dim;
                double best = -INFINITY;
                for (int64_t r = c->doc_off[d]; r < c->doc_off[d + 1]; r++) {
                    const float *v = data_corpus_rows(c, r, 1, row);
                    double dot = 0;
                    for (uint32_t x = 0; x < c->dim; x++) dot += (double)qt[x] * v[x];
                    if (dot > best) best = dot;
                }
                total += best;
            }
            out[i * c->n_docs + d] = total;
        }
    }
    cm_free(row);
}

/* ---- exact scores of given candidates ------------------------------------------------ */

/* A few hundred scattered documents a query: no blocks of whole documents to share one
 * sgemm across, and a small sgemm per document spends most of its time writing and
 * re-reading its m x rows product (rerank.h). So each document is scored by the
 * re-rank tier's maxsim kernel against the query transposed once, the maxima kept in
 * registers. */
typedef struct rescore_job {
    const data_corpus *c;
    const data_queries *q;
    const int64_t *cand;
    uint32_t nc, k;
    int64_t *ids;
    float *scores;
    float **conv, **qt; /* per worker: RESCORE_ROWS x dim (float16 conversion), dim x m_pad */
    sp_maxsim_fn maxsim;
} rescore_job;

#define RESCORE_ROWS SP_RERANK_ROWS

static void rescore_query(void *ctx, int64_t i, int wi)
{
    rescore_job *jb = ctx;
    const data_corpus *c = jb->c;
    const uint32_t d = c->dim;
    const float *q = jb->q->tokens + (size_t)jb->q->off[i] * d;
    uint32_t m = (uint32_t)(jb->q->off[i + 1] - jb->q->off[i]), mp = sp_rerank_pad(m);
    float *qt = jb->qt[wi], mx[4096];
    sp_rerank_transpose(q, m, d, 0, qt);
    float hs[1024];
    int64_t hi[1024];
    cm_topk h;
    cm_topk_init(&h, jb->k, hs, hi);
    for (uint32_t r = 0; r < jb->nc; r++) {
        int64_t doc = jb->cand[(size_t)i * jb->nc + r];
        if (doc < 0 || doc >= c->n_docs) continue;
        /* a candidate listed twice is scored once */
        int dup = 0;
        for (uint32_t s = 0; s < r && !dup; s++) dup = jb->cand[(size_t)i * jb->nc + s] == doc;
        if (dup) continue;
        int64_t t0 = c->doc_off[doc], t1 = c->doc_off[doc + 1];
        if (t1 == t0) continue;
        for (uint32_t j = 0; j < mp; j++) mx[j] = -INFINITY;
        float bad = 0.0f;
        for (int64_t b = t0; b < t1; b += RESCORE_ROWS) {
            int64_t rows = t1 - b < RESCORE_ROWS ? t1 - b : RESCORE_ROWS;
            const float *v = data_corpus_rows(c, b, rows, jb->conv[wi]);
            jb->maxsim(v, (uint32_t)rows, d, qt, mp, mx, &bad);
        }
        float s = 0; /* in query-token order, as exact search sums */
        for (uint32_t j = 0; j < m; j++) s += mx[j];
        /* a corpus opened without its value check may hold NaN or infinity: such a
         * document ranks nowhere (a heap never takes NaN, topk.h) */
        if (bad == 0.0f) cm_topk_push(&h, s, doc);
    }
    cm_topk_sort(&h);
    for (uint32_t r = 0; r < jb->k; r++) {
        int64_t doc = r < h.n ? h.id[r] : -1;
        jb->ids[(size_t)i * jb->k + r] = doc < 0 ? -1 : data_corpus_id(c, doc);
        jb->scores[(size_t)i * jb->k + r] = r < h.n ? h.score[r] : -INFINITY;
    }
}

chimera_status sp_exact_rescore(const data_corpus *c, const data_queries *q, const int64_t *cand,
                                uint32_t n_cand, uint32_t k, int n_threads, int64_t *ids,
                                float *scores, chimera_error *err)
{
    if (k == 0 || k > 1024 || q->dim != c->dim)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "exact rescore: k %u (1..1024), query dim %u, corpus dim %u", k, q->dim,
                       c->dim);
    uint32_t max_m = 0;
    for (int64_t i = 0; i < q->n; i++)
        if ((uint64_t)(q->off[i + 1] - q->off[i]) > max_m) max_m = (uint32_t)(q->off[i + 1] - q->off[i]);
    if (max_m > 4096)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "exact rescore: a query has %u tokens", max_m);
    cm_pool *pool = cm_pool_new(n_threads);
    int nw = pool ? cm_pool_size(pool) : 0;
    rescore_job jb = {c, q, cand, n_cand, k, ids, scores, NULL, NULL,
                      sp_maxsim_for(cm_simd_level_get())};
    jb.qt = cm_calloc((size_t)(nw ? nw : 1), sizeof *jb.qt);
    jb.conv = cm_calloc((size_t)(nw ? nw : 1), sizeof *jb.conv);
    int ok = pool && jb.qt && jb.conv;
    for (int w = 0; ok && w < nw; w++) {
        jb.qt[w] = cm_malloc((size_t)c->dim * sp_rerank_pad(max_m ? max_m : 1) * sizeof(float));
        jb.conv[w] = cm_malloc((size_t)RESCORE_ROWS * c->dim * sizeof(float));
        ok = jb.qt[w] && jb.conv[w];
    }
    if (ok) cm_pool_run(pool, q->n, rescore_query, &jb);
    for (int w = 0; w < nw; w++) {
        if (jb.qt) cm_free(jb.qt[w]);
        if (jb.conv) cm_free(jb.conv[w]);
    }
    cm_free(jb.qt);
    cm_free(jb.conv);
    cm_pool_free(pool);
    return ok ? CHIMERA_OK : cm_fail(err, CHIMERA_ERR_NOMEM, "exact rescore: out of memory");
}
