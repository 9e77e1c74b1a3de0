/* Tuning and calibration through the public API: realistic pseudo-queries (lengths,
 * no copies of corpus tokens), the build's calibrated defaults (stored, reported, used
 * by chimera_index_params_default and scaled for a larger k), the recorded source (none
 * for a corpus in memory), the held-out tune (its split, its interval, its bad inputs),
 * and the confidence interval's floor (a few perfect queries do not certify 0.99). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "search/tune.h"
#include "tmpdir.h"

static chimera_corpus *synth_corpus(const char *name, int64_t docs, uint32_t dim, int64_t nq,
                                    chimera_queries **q)
{
    char dir[512], tok[600], len[600], qp[600];
    test_path(dir, sizeof dir, name);
    chimera_synth_opts so = {.n_docs = docs, .dim = dim, .n_queries = nq, .query_len = 12,
                             .seed = 9, .max_len = 80};
    chimera_error err;
    CHECK_OK(chimera_synth_write(dir, &so, &err), &err);
    snprintf(tok, sizeof tok, "%s/tokens.npy", dir);
    snprintf(len, sizeof len, "%s/doclens.npy", dir);
    snprintf(qp, sizeof qp, "%s/queries.npy", dir);
    chimera_corpus *c = NULL;
    CHECK_OK(chimera_corpus_open(tok, len, NULL, NULL, &c, &err), &err);
    if (q) CHECK_OK(chimera_queries_read(qp, NULL, q, &err), &err);
    return c;
}

static void test_pseudo_queries(void)
{
    /* a tiny corpus in memory: every query token can be compared with every corpus token */
    enum { N = 300, D = 16, DOCS = 30 };
    float *tok = malloc(N * D * sizeof *tok);
    int64_t lens[DOCS];
    srand(3);
    for (int i = 0; i < N * D; i++) tok[i] = (float)((double)rand() / RAND_MAX) - 0.5f;
    for (int i = 0; i < N; i++) {
        double n2 = 0;
        for (int x = 0; x < D; x++) n2 += tok[i * D + x] * tok[i * D + x];
        for (int x = 0; x < D; x++) tok[i * D + x] *= (float)(2.0 / sqrt(n2)); /* norm 2 */
    }
    for (int d = 0; d < DOCS; d++) lens[d] = N / DOCS;
    chimera_corpus *c = NULL;
    chimera_queries *q = NULL;
    chimera_error err;
    CHECK_OK(chimera_corpus_wrap(tok, N, D, lens, DOCS, NULL, NULL, &c, &err), &err);
    CHECK_OK(chimera_corpus_sample_queries(c, 200, 0, 7, &q, &err), &err);
    if (q) {
        uint32_t lo = 1000, hi = 0;
        for (int64_t i = 0; i < chimera_queries_count(q); i++) {
            uint32_t m = chimera_queries_len(q, i);
            lo = m < lo ? m : lo;
            hi = m > hi ? m : hi;
        }
        CHECKF(lo >= 4 && hi <= 32 && hi - lo >= 20, "lengths %u..%u, expected spread in 4..32", lo, hi);
        /* perturbed, not copies: exact search of each query against the corpus scores
         * below a query made of exact copies (every max would be the token's norm^2) */
        int64_t ids[1];
        float sc[1];
        chimera_exact_opts eo = {.n_threads = 1};
        chimera_queries *q1 = NULL;
        CHECK_OK(chimera_queries_slice(q, 5, 1, &q1, &err), &err);
        if (q1) {
            CHECK_OK(chimera_corpus_search(c, q1, 1, &eo, ids, sc, &err), &err);
            uint32_t m = chimera_queries_len(q1, 0);
            /* norm 2 kept: a copy would score 4 per token; noise of relative norm >= 0.2
             * keeps every token's best match below that */
            CHECKF(sc[0] < 4.0f * m * 0.999f && sc[0] > 0, "score %g for %u tokens", sc[0], m);
        }
        chimera_queries_free(q1);
    }
    chimera_queries_free(q);
    CHECK_OK(chimera_corpus_sample_queries(c, 10, 8, 7, &q, &err), &err);
    for (int64_t i = 0; q && i < chimera_queries_count(q); i++) CHECK(chimera_queries_len(q, i) == 8);
    chimera_queries_free(q);
    CHECK_STATUS(chimera_corpus_sample_queries(c, 0, 0, 7, &q, &err), CHIMERA_ERR_INVALID_ARG, &err);
    /* a corpus in memory records no source */
    char dir[512];
    test_path(dir, sizeof dir, "mem");
    chimera_build_opts bo = {.n_threads = 2, .no_sync = 1, .no_calibrate = 1};
    CHECK_OK(chimera_index_build(c, dir, &bo, NULL, &err), &err);
    chimera_index *ix = NULL;
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    chimera_corpus *src = NULL;
    CHECK_STATUS(chimera_index_source_open(ix, &src, &err), CHIMERA_ERR_EMPTY, &err);
    CHECK(strstr(err.msg, "--tokens") != NULL);
    /* uncalibrated: the library's defaults */
    chimera_search_params p = {0}, lib = {0};
    chimera_search_params_default(10, &lib);
    CHECK(chimera_index_params_default(ix, 10, &p) == 0);
    CHECK(memcmp(&p, &lib, sizeof p) == 0);
    chimera_index_close(ix);
    chimera_corpus_close(c);
    free(tok);
}

static void test_calibrated(void)
{
    chimera_queries *q = NULL;
    chimera_corpus *c = synth_corpus("cal", 800, 32, 60, &q);
    if (!c || !q) return;
    char dir[512];
    test_path(dir, sizeof dir, "cal-idx");
    chimera_error err;
    chimera_build_opts bo = {.n_threads = 2, .no_sync = 1};
    chimera_build_report rep;
    CHECK_OK(chimera_index_build(c, dir, &bo, &rep, &err), &err);
    CHECKF(rep.n_calibrated == 2 && rep.calibrated[0].k == 10 && rep.calibrated[1].k == 100,
           "calibrated %d settings", rep.n_calibrated);
    int has_phase = 0;
    for (int i = 0; i < rep.n_phases; i++) has_phase |= strcmp(rep.phase[i], "calibrate") == 0;
    CHECK(has_phase);
    CHECK(rep.calibrate_target == 0.95);
    for (int i = 0; i < rep.n_calibrated; i++) {
        const chimera_calibration *cal = &rep.calibrated[i];
        CHECK(cal->recall_low <= cal->recall && cal->recall <= 1);
        CHECK(cal->k_fullbit >= cal->k && cal->k_refine >= cal->k_fullbit && cal->n_probe >= 1);
        CHECK(!cal->reached || cal->recall_low >= 0.95);
    }
    chimera_index_info info;
    CHECK_OK(chimera_index_info_read(dir, &info, &err), &err);
    CHECK(info.n_calibrated == rep.n_calibrated && info.has_source && !info.calibration_stale);
    /* as stored: cJSON may print a double's last bit away */
    for (int i = 0; i < rep.n_calibrated; i++) {
        const chimera_calibration *a = &info.calibrated[i], *b = &rep.calibrated[i];
        CHECK(a->k == b->k && a->n_probe == b->n_probe && a->k_refine == b->k_refine &&
              a->k_fullbit == b->k_fullbit && a->chunks == b->chunks && a->recall == b->recall &&
              fabs(a->recall_low - b->recall_low) < 1e-12 && a->reached == b->reached);
    }
    chimera_index *ix = NULL;
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    if (ix) {
        chimera_search_params p = {0};
        CHECK(chimera_index_params_default(ix, 10, &p) == 1);
        CHECK(p.n_probe == rep.calibrated[0].n_probe && p.k_fullbit == rep.calibrated[0].k_fullbit &&
              p.k_refine == rep.calibrated[0].k_refine && p.chunks == rep.calibrated[0].chunks);
        memset(&p, 0, sizeof p);
        CHECK(chimera_index_params_default(ix, 50, &p) == 1); /* the k = 100 setting */
        CHECK(p.n_probe == rep.calibrated[1].n_probe && p.k_fullbit == rep.calibrated[1].k_fullbit);
        memset(&p, 0, sizeof p);
        p.n_probe = 3; /* a field the caller set is kept */
        CHECK(chimera_index_params_default(ix, 200, &p) == 1);
        CHECK(p.n_probe == 3 && p.k_fullbit == rep.calibrated[1].k_fullbit * 2);
        /* the source: the files the build read */
        chimera_corpus *src = NULL;
        CHECK_OK(chimera_index_source_open(ix, &src, &err), &err);
        CHECK(src && chimera_corpus_n_docs(src) == 800);
        chimera_corpus_close(src);

        /* the held-out tune: its inputs */
        int64_t nq = chimera_queries_count(q);
        int64_t *truth = malloc((size_t)nq * 10 * sizeof *truth);
        float *sc = malloc((size_t)nq * 10 * sizeof *sc);
        chimera_exact_opts eo = {.n_threads = 2};
        CHECK_OK(chimera_corpus_search(c, q, 10, &eo, truth, sc, &err), &err);
        chimera_tune_result *res = malloc(sizeof *res);
        chimera_search_opts so = {.n_threads = 2};
        chimera_queries *few = NULL;
        CHECK_OK(chimera_queries_slice(q, 0, 12, &few, &err), &err);
        CHECK_STATUS(chimera_index_tune_heldout(ix, few, truth, 10, 10, 0.9, 0, 1, &so, res, &err),
                     CHIMERA_ERR_INVALID_ARG, &err);
        CHECK(strstr(err.msg, "too few") != NULL);
        chimera_queries_free(few);
        CHECK_STATUS(chimera_index_tune_heldout(ix, q, truth, 10, 10, 1.5, 0, 1, &so, res, &err),
                     CHIMERA_ERR_INVALID_ARG, &err);
        CHECK_STATUS(chimera_index_tune_heldout(ix, q, truth, 10, 10, 0.9, 1.0, 1, &so, res, &err),
                     CHIMERA_ERR_INVALID_ARG, &err);
        CHECK_OK(chimera_index_tune_heldout(ix, q, truth, 10, 10, 0.9, 0, 1, &so, res, &err), &err);
        CHECK(res->n_tune == 30 && res->n_heldout == 30);
        CHECK(res->heldout_low <= res->heldout_recall && res->heldout_recall <= res->heldout_high);
        CHECK(!res->reached || res->heldout_low >= 0.9);
        CHECK(res->recall == res->heldout_recall && res->tune_target >= 0.9);
        /* another held-out fraction: another split */
        CHECK_OK(chimera_index_tune_heldout(ix, q, truth, 10, 10, 0.9, 0.25, 1, &so, res, &err),
                 &err);
        CHECK(res->n_tune == 45 && res->n_heldout == 15);
        free(res);
        free(truth);
        free(sc);
    }
    chimera_index_close(ix);
    chimera_queries_free(q);
    chimera_corpus_close(c);
}

static void test_interval(void)
{
    double lo, hi;
    int64_t need;
    /* five perfect queries do not certify 0.99 */
    sp_recall_interval(1.0, 0.0, 5, 10, 1.96, 0.99, &lo, &hi, &need);
    CHECKF(lo < 0.99 && hi == 1 && need > 5, "low %g need %lld", lo, (long long)need);
    /* many queries narrow it */
    sp_recall_interval(0.97, 0.05, 2000, 10, 1.96, 0.95, &lo, &hi, &need);
    CHECKF(lo > 0.967 && hi < 0.973 && need < 2000, "[%g, %g] need %lld", lo, hi, (long long)need);
    sp_recall_interval(0.5, 0.1, 0, 10, 1.96, 0.95, &lo, &hi, &need);
    CHECK(lo == 0 && hi == 1);
}

int main(void)
{
    test_interval();
    test_pseudo_queries();
    test_calibrated();
    return check_report();
}
