/* Exact search is the ground truth, so it is checked against a naive triple loop in
 * double precision on random and synthetic corpora of several shapes: the same top-k
 * documents in the same order (up to float rounding between near-equal scores), scores
 * within a float tolerance, for 1-3 threads; plus the edges: k larger than the corpus
 * (padding), documents longer than a block, empty documents (never returned), user ids,
 * float16 tokens, variable-length queries, duplicate documents (ties go to the earlier
 * row), and a wrong query dimension. sp_exact_rescore (the exact top-k among given
 * candidates) is checked against the same naive scores. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tmpdir.h"
#include "core/f16.h"
#include "core/npy.h"
#include "core/progress.h"
#include "core/rng.h"
#include "data/synth.h"
#include "search/exact.h"
#include "core/alloc.h"

/* Float scores of a sum of 32 maxima of 128-d dot products: relative error ~1e-6. */
#define SCORE_TOL 1e-4

typedef struct {
    float *tok;
    int64_t *lens, n_docs, n_tok;
    float *q;
    int64_t *qlens, nq;
    uint32_t dim;
} fixture;

static void random_unit(cm_rng *r, float *v, uint32_t d)
{
    double n = 0;
    for (uint32_t i = 0; i < d; i++) {
        v[i] = (float)cm_rng_gauss(r);
        n += (double)v[i] * v[i];
    }
    for (uint32_t i = 0; i < d; i++) v[i] = (float)(v[i] / sqrt(n));
}

static fixture random_fixture(uint64_t seed, int64_t n_docs, uint32_t dim, int64_t nq,
                              int max_len, int allow_empty)
{
    fixture f = {0};
    cm_rng r;
    cm_rng_seed(&r, seed, 0);
    f.n_docs = n_docs;
    f.dim = dim;
    f.nq = nq;
    f.lens = cm_malloc((size_t)n_docs * sizeof *f.lens);
    for (int64_t i = 0; i < n_docs; i++) {
        f.lens[i] = 1 + (int64_t)cm_rng_below(&r, (uint64_t)max_len);
        if (allow_empty && cm_rng_below(&r, 5) == 0) f.lens[i] = 0;
        f.n_tok += f.lens[i];
    }
    f.tok = cm_malloc((size_t)(f.n_tok + 1) * dim * sizeof(float));
    for (int64_t t = 0; t < f.n_tok; t++) random_unit(&r, f.tok + t * dim, dim);
    f.qlens = cm_malloc((size_t)nq * sizeof *f.qlens);
    int64_t total = 0;
    for (int64_t i = 0; i < nq; i++) total += (f.qlens[i] = 1 + (int64_t)cm_rng_below(&r, 40));
    f.q = cm_malloc((size_t)total * dim * sizeof(float));
    for (int64_t t = 0; t < total; t++) random_unit(&r, f.q + t * dim, dim);
    return f;
}

static void fixture_free(fixture *f)
{
    cm_free(f->tok);
    cm_free(f->lens);
    cm_free(f->q);
    cm_free(f->qlens);
}

/* Compares sp_exact_search with the naive scores for every query. */
static void compare(const data_corpus *c, const data_queries *q, uint32_t k, int threads,
                    const char *what)
{
    int64_t *ids = cm_malloc((size_t)q->n * k * sizeof *ids);
    float *sc = cm_malloc((size_t)q->n * k * sizeof *sc);
    double *naive = cm_malloc((size_t)q->n * c->n_docs * sizeof *naive);
    chimera_error err;
    CHECK_OK(sp_exact_search(c, q, k, threads, NULL, NULL, ids, sc, &err), &err);
    sp_exact_scores_naive(c, q, naive);
    int64_t n_valid = 0;
    for (int64_t d = 0; d < c->n_docs; d++) n_valid += c->doc_off[d + 1] > c->doc_off[d];
    int bad = 0;
    for (int64_t i = 0; i < q->n && bad < 5; i++) {
        const double *ns = naive + i * c->n_docs;
        for (uint32_t r = 0; r < k; r++) {
            int64_t id = ids[i * k + r];
            if ((int64_t)r >= n_valid) {
                if (id != -1 || sc[i * k + r] != -INFINITY) bad++;
                continue;
            }
            /* map the user id back to a row */
            int64_t row = -1;
            for (int64_t d = 0; d < c->n_docs; d++)
                if (data_corpus_id(c, d) == id) row = d;
            if (row < 0 || c->doc_off[row + 1] == c->doc_off[row]) {
                bad++;
                continue;
            }
            if (fabs(ns[row] - sc[i * k + r]) > SCORE_TOL) bad++;
            /* rank r must hold the r-th best naive score (up to the tolerance) */
            int64_t better = 0;
            for (int64_t d = 0; d < c->n_docs; d++) better += ns[d] > ns[row] + SCORE_TOL;
            if (better > (int64_t)r) bad++;
        }
    }
    CHECKF(bad == 0, "%s: %d mismatches against the naive search (k=%u, threads=%d)", what, bad,
           k, threads);
    cm_free(ids);
    cm_free(sc);
    cm_free(naive);
}

static void test_random_shapes(void)
{
    struct {
        int64_t docs;
        uint32_t dim;
        int max_len;
        uint32_t k;
    } cases[] = {{50, 128, 20, 10}, {40, 96, 700, 7}, {30, 13, 4, 40}, {200, 64, 60, 100}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        fixture f = random_fixture(11 + ci, cases[ci].docs, cases[ci].dim, 9, cases[ci].max_len, 0);
        data_corpus c;
        data_queries q;
        chimera_error err;
        CHECK_OK(data_corpus_wrap(&c, f.tok, f.n_tok, f.dim, f.lens, f.n_docs, NULL, NULL, &err),
                 &err);
        CHECK_OK(data_queries_new(&q, f.q, f.nq, f.dim, f.qlens, 0, &err), &err);
        for (int threads = 1; threads <= 3; threads++) compare(&c, &q, cases[ci].k, threads, "random");
        data_queries_free(&q);
        data_corpus_free(&c);
        fixture_free(&f);
    }
}

/* Asks to stop on its (n+1)-th poll (n < 0: never); counts the polls. */
typedef struct stop_after {
    int n;
    int polls;
} stop_after;

static int stop_poll(void *user)
{
    stop_after *st = user;
    return st->n >= 0 && st->polls++ >= st->n;
}

/* A cancelled exact search returns CHIMERA_ERR_CANCELLED with a message (at the first
 * poll, and mid-search from worker threads); a cancel callback that never stops leaves
 * the results exactly those of the plain search. */
static void check_cancel(const data_corpus *c, const data_queries *q)
{
    const uint32_t k = 10;
    const size_t n = (size_t)q->n * k;
    int64_t *ids = cm_malloc(n * sizeof *ids), *ids2 = cm_malloc(n * sizeof *ids2);
    float *sc = cm_malloc(n * sizeof *sc), *sc2 = cm_malloc(n * sizeof *sc2);
    chimera_error err;
    CHECK_OK(sp_exact_search(c, q, k, 2, NULL, NULL, ids, sc, &err), &err);
    stop_after never = {-1, 0};
    cm_watch w;
    cm_watch_init(&w, NULL, NULL, stop_poll, &never);
    CHECK_OK(sp_exact_search_watch(c, q, k, 2, &w, ids2, sc2, &err), &err);
    CHECK(memcmp(ids, ids2, n * sizeof *ids) == 0 && memcmp(sc, sc2, n * sizeof *sc) == 0);
    static const int at[] = {0, 1, 5, 40};
    for (size_t i = 0; i < sizeof at / sizeof *at; i++)
        for (int threads = 1; threads <= 2; threads++) {
            stop_after st = {at[i], 0};
            cm_watch_init(&w, NULL, NULL, stop_poll, &st);
            memset(&err, 0, sizeof err);
            chimera_status s = sp_exact_search_watch(c, q, k, threads, &w, ids2, sc2, &err);
            CHECKF(s == CHIMERA_ERR_CANCELLED && strstr(err.msg, "cancelled"),
                   "exact search cancelled at poll %d (%d threads): %s: %s", at[i], threads,
                   chimera_status_str(s), err.msg);
            CHECKF(st.polls == at[i] + 1, "exact search: %d polls, expected %d (none after "
                   "the stop)", st.polls, at[i] + 1);
        }
    cm_free(ids);
    cm_free(ids2);
    cm_free(sc);
    cm_free(sc2);
}

static void test_synthetic(void)
{
    chimera_synth_opts o = {.n_docs = 300, .dim = 128, .n_queries = 20, .seed = 5};
    data_synth_corpus s;
    chimera_error err;
    CHECK_OK(data_synth_generate(&o, &s, &err), &err);
    data_corpus c;
    data_queries q;
    CHECK_OK(data_corpus_wrap(&c, s.tokens, s.n_tokens, s.dim, s.doclens, s.n_docs, NULL, NULL, &err), &err);
    CHECK_OK(data_queries_new(&q, s.queries, s.n_queries, s.dim, NULL, s.query_len, &err), &err);
    compare(&c, &q, 50, 2, "synthetic");
    check_cancel(&c, &q);
    data_queries_free(&q);
    data_corpus_free(&c);
    data_synth_free(&s);
}

static void test_edges(void)
{
    chimera_error err;
    /* empty documents, user ids, k > n_docs */
    fixture f = random_fixture(3, 25, 32, 4, 10, 1);
    int64_t *ids = cm_malloc(25 * sizeof *ids);
    for (int i = 0; i < 25; i++) ids[i] = 1000 - 7 * i;
    chimera_corpus_opts allow = {.allow_empty = 1};
    data_corpus c;
    data_queries q;
    CHECK_OK(data_corpus_wrap(&c, f.tok, f.n_tok, f.dim, f.lens, f.n_docs, ids, &allow, &err), &err);
    CHECK_OK(data_queries_new(&q, f.q, f.nq, f.dim, f.qlens, 0, &err), &err);
    compare(&c, &q, 40, 2, "empty docs + ids + padding");

    /* wrong dimension */
    data_queries q2;
    CHECK_OK(data_queries_new(&q2, f.q, 1, 16, NULL, 2, &err), &err);
    int64_t oi[4];
    float os[4];
    CHECK_STATUS(sp_exact_search(&c, &q2, 4, 1, NULL, NULL, oi, os, &err), CHIMERA_ERR_DIM, &err);
    CHECK(strstr(err.msg, "dimension 16") != NULL);
    CHECK_STATUS(sp_exact_search(&c, &q, 0, 1, NULL, NULL, oi, os, &err), CHIMERA_ERR_INVALID_ARG,
                 &err);
    data_queries_free(&q2);
    data_queries_free(&q);
    data_corpus_free(&c);
    cm_free(ids);
    fixture_free(&f);

    /* duplicates: identical documents tie; the earlier row must win, deterministically */
    float tok[3 * 4 * 8];
    int64_t lens[4] = {3, 3, 3, 3};
    cm_rng r;
    cm_rng_seed(&r, 9, 0);
    for (int i = 0; i < 3 * 8; i++) tok[i] = (float)cm_rng_gauss(&r);
    for (int dcopy = 1; dcopy < 4; dcopy++) memcpy(tok + dcopy * 24, tok, 24 * sizeof(float));
    float big[4 * 24];
    memcpy(big, tok, sizeof big);
    CHECK_OK(data_corpus_wrap(&c, big, 12, 8, lens, 4, NULL, NULL, &err), &err);
    CHECK_OK(data_queries_new(&q, tok, 1, 8, NULL, 2, &err), &err);
    int64_t ti[4];
    float ts[4];
    CHECK_OK(sp_exact_search(&c, &q, 4, 2, NULL, NULL, ti, ts, &err), &err);
    CHECK(ti[0] == 0 && ti[1] == 1 && ti[2] == 2 && ti[3] == 3);
    CHECK(ts[0] == ts[3]);
    data_queries_free(&q);
    data_corpus_free(&c);
}

/* sp_exact_rescore's results against the naive scores: each query's top k among its
 * distinct valid candidates (not -1, in the corpus, not empty, not inf_doc), best first,
 * each once, then -1 / -inf padding. */
static void check_rescore(const data_corpus *c, const data_queries *q, const int64_t *cand,
                          uint32_t nc, uint32_t k, int64_t inf_doc, const char *what)
{
    int64_t *ids = cm_malloc((size_t)q->n * k * sizeof *ids);
    float *sc = cm_malloc((size_t)q->n * k * sizeof *sc);
    double *naive = cm_malloc((size_t)q->n * c->n_docs * sizeof *naive);
    unsigned char *in = cm_malloc((size_t)c->n_docs);
    chimera_error err;
    CHECK_OK(sp_exact_rescore(c, q, cand, nc, k, 2, ids, sc, &err), &err);
    sp_exact_scores_naive(c, q, naive);
    int bad = 0;
    for (int64_t i = 0; i < q->n; i++) {
        const double *ns = naive + i * c->n_docs;
        memset(in, 0, (size_t)c->n_docs);
        int64_t n_valid = 0;
        for (uint32_t j = 0; j < nc; j++) {
            int64_t d = cand[(size_t)i * nc + j];
            if (d < 0 || d >= c->n_docs || d == inf_doc || c->doc_off[d + 1] == c->doc_off[d] ||
                in[d])
                continue;
            in[d] = 1;
            n_valid++;
        }
        for (uint32_t rk = 0; rk < k; rk++) {
            int64_t id = ids[i * k + rk], row = -1;
            if ((int64_t)rk >= n_valid) {
                bad += id != -1 || sc[i * k + rk] != -INFINITY;
                continue;
            }
            for (int64_t d = 0; d < c->n_docs; d++)
                if (data_corpus_id(c, d) == id) row = d;
            if (row < 0 || in[row] != 1) { /* not a valid candidate, or returned twice */
                bad++;
                continue;
            }
            in[row] = 2;
            bad += fabs(ns[row] - sc[i * k + rk]) > SCORE_TOL;
            int64_t better = 0;
            for (int64_t d = 0; d < c->n_docs; d++) better += in[d] && ns[d] > ns[row] + SCORE_TOL;
            bad += better > (int64_t)rk;
        }
    }
    CHECKF(bad == 0, "rescore %s: %d mismatches against the naive scores", what, bad);
    cm_free(ids);
    cm_free(sc);
    cm_free(naive);
    cm_free(in);
}

/* sp_exact_rescore: each query's own candidates (repeats, -1, rows past the corpus, empty
 * documents among them), documents longer than the kernel's row block, an odd dimension,
 * user ids, fewer valid candidates than k (padding), a document holding an infinite value
 * in a corpus opened without its value check (never returned), and float16 tokens
 * (converted a block at a time). */
static void test_rescore(void)
{
    struct {
        int64_t docs;
        uint32_t dim;
        int max_len;
        uint32_t k, nc;
    } cases[] = {{60, 128, 90, 10, 30}, {40, 13, 5, 8, 12}, {80, 96, 40, 20, 16}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        fixture f = random_fixture(40 + ci, cases[ci].docs, cases[ci].dim, 7, cases[ci].max_len, 1);
        int64_t *uid = cm_malloc((size_t)f.n_docs * sizeof *uid);
        for (int64_t d = 0; d < f.n_docs; d++) uid[d] = 5000 + 3 * d;
        /* the last non-empty document gets an infinite value, past the value check */
        int64_t inf_doc = -1, off = 0;
        for (int64_t d = 0; d < f.n_docs; d++)
            if (f.lens[d]) inf_doc = d;
        for (int64_t d = 0; d < inf_doc; d++) off += f.lens[d];
        f.tok[(size_t)off * f.dim] = INFINITY;
        chimera_corpus_opts allow = {.allow_empty = 1, .skip_value_check = 1};
        data_corpus c;
        data_queries q;
        chimera_error err;
        CHECK_OK(data_corpus_wrap(&c, f.tok, f.n_tok, f.dim, f.lens, f.n_docs, uid, &allow, &err),
                 &err);
        CHECK_OK(data_queries_new(&q, f.q, f.nq, f.dim, f.qlens, 0, &err), &err);
        uint32_t nc = cases[ci].nc;
        int64_t *cand = cm_malloc((size_t)q.n * nc * sizeof *cand);
        cm_rng r;
        cm_rng_seed(&r, 77 + ci, 0);
        for (int64_t i = 0; i < q.n; i++)
            for (uint32_t j = 0; j < nc; j++) {
                uint64_t x = cm_rng_below(&r, 10);
                int64_t *cj = &cand[(size_t)i * nc + j];
                if (x == 0) *cj = -1;
                else if (x == 1) *cj = f.n_docs + (int64_t)j; /* past the corpus */
                else if (x == 2 && j > 0) *cj = cand[(size_t)i * nc + j - 1]; /* a repeat */
                else if (x == 3) *cj = inf_doc;
                else *cj = (int64_t)cm_rng_below(&r, (uint64_t)f.n_docs);
            }
        char what[32];
        snprintf(what, sizeof what, "case %zu", ci);
        check_rescore(&c, &q, cand, nc, cases[ci].k, inf_doc, what);
        if (ci == 0) { /* the same corpus as float16 tokens */
            char tok16[512], len[512];
            test_path(tok16, sizeof tok16, "rescore16.npy");
            test_path(len, sizeof len, "rescore_lens.npy");
            uint16_t *h = cm_malloc((size_t)f.n_tok * f.dim * sizeof *h);
            for (int64_t t = 0; t < f.n_tok * (int64_t)f.dim; t++) h[t] = cm_f32_to_f16(f.tok[t]);
            int64_t s16[2] = {f.n_tok, f.dim}, sl[1] = {f.n_docs};
            CHECK_OK(cm_npy_write(tok16, CM_F16, 2, s16, h, &err), &err);
            CHECK_OK(cm_npy_write(len, CM_I64, 1, sl, f.lens, &err), &err);
            data_corpus c16;
            CHECK_OK(data_corpus_open(&c16, tok16, len, NULL, &allow, &err), &err);
            check_rescore(&c16, &q, cand, nc, cases[ci].k, inf_doc, "float16");
            data_corpus_free(&c16);
            cm_free(h);
        }
        cm_free(cand);
        data_queries_free(&q);
        data_corpus_free(&c);
        cm_free(uid);
        fixture_free(&f);
    }
}

/* A corpus opened without its value check, documents holding infinity or NaN in their
 * first token or in their last: exact search returns every other document, in the naive
 * order, and never those (a running maximum over the rows passes over a NaN product). */
static void test_nonfinite(void)
{
    fixture f = random_fixture(61, 20, 16, 5, 6, 0);
    enum { N_BAD = 4 };
    int64_t off = 0, bad_doc[N_BAD] = {3, 11, -1, -1};
    for (int64_t d = 12, b = 2; d < f.n_docs && b < N_BAD; d++) /* two of several tokens */
        if (f.lens[d] >= 2) bad_doc[b++] = d;
    CHECKF(bad_doc[3] >= 0, "no documents of several tokens");
    for (int64_t d = 0; d < f.n_docs; d++) {
        int64_t last = off + f.lens[d] - 1;
        if (d == bad_doc[0]) f.tok[(size_t)off * f.dim + 2] = INFINITY;
        if (d == bad_doc[1]) f.tok[(size_t)off * f.dim + 5] = NAN;
        if (d == bad_doc[2]) f.tok[(size_t)last * f.dim + 1] = NAN;
        if (d == bad_doc[3]) f.tok[(size_t)last * f.dim + 3] = -INFINITY;
        off += f.lens[d];
    }
    chimera_corpus_opts skip = {.skip_value_check = 1};
    data_corpus c;
    data_queries q;
    chimera_error err;
    CHECK_OK(data_corpus_wrap(&c, f.tok, f.n_tok, f.dim, f.lens, f.n_docs, NULL, &skip, &err),
             &err);
    CHECK_OK(data_queries_new(&q, f.q, f.nq, f.dim, f.qlens, 0, &err), &err);
    uint32_t k = (uint32_t)f.n_docs;
    int64_t *ids = cm_malloc((size_t)q.n * k * sizeof *ids);
    float *sc = cm_malloc((size_t)q.n * k * sizeof *sc);
    double *naive = cm_malloc((size_t)q.n * c.n_docs * sizeof *naive);
    CHECK_OK(sp_exact_search(&c, &q, k, 2, NULL, NULL, ids, sc, &err), &err);
    sp_exact_scores_naive(&c, &q, naive);
    int bad = 0;
    for (int64_t i = 0; i < q.n; i++) {
        for (uint32_t r = 0; r < k; r++) {
            int64_t id = ids[i * k + r];
            if (r >= k - N_BAD) { /* the non-finite documents leave padding */
                bad += id != -1 || sc[i * k + r] != -INFINITY;
                continue;
            }
            int listed = id < 0;
            for (int b = 0; b < N_BAD; b++) listed |= id == bad_doc[b];
            if (listed) {
                bad++;
                continue;
            }
            bad += fabs(naive[i * c.n_docs + id] - sc[i * k + r]) > SCORE_TOL;
            if (r > 0 && sc[i * k + r] > sc[i * k + r - 1]) bad++;
        }
    }
    CHECKF(bad == 0, "non-finite documents: %d mismatches", bad);
    cm_free(ids);
    cm_free(sc);
    cm_free(naive);
    data_queries_free(&q);
    data_corpus_free(&c);
    fixture_free(&f);
}

int main(void)
{
    test_random_shapes();
    test_synthetic();
    test_edges();
    test_rescore();
    test_nonfinite();
    return check_report();
}
