/* Tuning and calibration through the public API: realistic pseudo-queries (lengths,
 * no copies of corpus tokens), the build's calibrated defaults (stored, reported, used
 * by chimera_index_params_default and scaled for a larger k), the recorded source (none
 * for a corpus in memory), the held-out tune (its split, its interval, its bad inputs),
 * and the confidence interval's floor (a few perfect queries do not certify 0.99). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "chimera_impl.h"
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
        uint32_t lo = 1000, hi = 0, short_ = 0, sum = 0;
        for (int64_t i = 0; i < chimera_queries_count(q); i++) {
            uint32_t m = chimera_queries_len(q, i);
            lo = m < lo ? m : lo;
            hi = m > hi ? m : hi;
            short_ += m <= 8;
            sum += m;
        }
        CHECKF(lo >= 4 && hi <= 32 && hi - lo >= 20, "lengths %u..%u, expected spread in 4..32", lo, hi);
        /* log-uniform lengths: 38% of 4-8 tokens (uniform gave 17%), mean 13.25 (uniform
         * 18); bounds three standard errors wide over 200 queries */
        CHECKF(short_ >= 56 && short_ <= 98, "%u of 200 queries of 4-8 tokens, expected ~77",
               short_);
        CHECKF(sum >= 200 * 11.5 && sum <= 200 * 15.0, "mean length %.2f, expected ~13.25",
               sum / 200.0);
        CHECKF(fabs(data_sample_mean_len() - 13.2513) < 1e-3, "expected length %.4f",
               data_sample_mean_len());
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

/* The recall a build reports for each calibrated setting is that setting's, as stored:
 * on the calibration's own held-out pseudo-queries, against their exact top k, a search
 * with the index's defaults (the stored setting, its probe floor's scale included) gets
 * exactly the reported mean. Every k where exact search is the whole truth (a corpus
 * this small), the largest where it is the held-out queries' truth. */
static void check_reported_recall(const chimera_corpus *c, const char *dir,
                                  const chimera_build_report *rep)
{
    chimera_error err;
    chimera_calibration_truth_kind truth_kind = chimera_calibration_truth(&c->c);
    CHECK(truth_kind != CAL_TRUTH_CANDIDATES);
    int first = truth_kind == CAL_TRUTH_EXACT ? 0 : rep->n_calibrated - 1;
    chimera_index *ix = NULL;
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    for (int i = first; ix && i < rep->n_calibrated; i++) {
        uint32_t k = rep->calibrated[i].k;
        chimera_queries *hq = NULL;
        CHECK_OK(chimera_calibration_heldout(c, 0, k, &hq, &err), &err);
        if (!hq) continue;
        int64_t n = chimera_queries_count(hq);
        int64_t *truth = malloc((size_t)n * k * sizeof *truth);
        int64_t *ids = malloc((size_t)n * k * sizeof *ids);
        float *sc = malloc((size_t)n * k * sizeof *sc);
        chimera_exact_opts eo = {.n_threads = 2};
        CHECK_OK(chimera_corpus_search(c, hq, k, &eo, truth, sc, &err), &err);
        chimera_search_params p = {0};
        chimera_search_opts so = {.n_threads = 2};
        CHECK_OK(chimera_index_search(ix, hq, k, &p, &so, ids, sc, NULL, &err), &err);
        double r = chimera_results_eval_recall(ids, k, truth, k, n, k);
        CHECKF(fabs(r - rep->calibrated[i].recall) < 1e-9,
               "k=%u: the stored setting gets %.4f on the calibration's held-out queries, the "
               "build reported %.4f", k, r, rep->calibrated[i].recall);
        free(truth);
        free(ids);
        free(sc);
        chimera_queries_free(hq);
    }
    chimera_index_close(ix);
    chimera_queries *none = NULL;
    CHECK_STATUS(chimera_calibration_heldout(c, 0, 50, &none, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECK(none == NULL);
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
        /* the probe floor's scale: one of the calibration's, chosen per k */
        float s = cal->impute_scale;
        CHECKF(s == 1.0f || s == 0.85f || s == 0.7f || s == 0.55f || s == 0.4f,
               "calibrated impute_scale %g", (double)s);
    }
    check_reported_recall(c, dir, &rep);
    chimera_index_info info;
    CHECK_OK(chimera_index_info_read(dir, &info, &err), &err);
    CHECK(info.n_calibrated == rep.n_calibrated && info.has_source && !info.calibration_stale);
    /* as stored: cJSON may print a double's last bit away */
    for (int i = 0; i < rep.n_calibrated; i++) {
        const chimera_calibration *a = &info.calibrated[i], *b = &rep.calibrated[i];
        CHECKF(a->k == b->k && a->n_probe == b->n_probe && a->k_refine == b->k_refine &&
                   a->k_fullbit == b->k_fullbit && a->chunks == b->chunks &&
                   a->impute_scale == b->impute_scale &&
                   fabs(a->recall - b->recall) < 1e-12 &&
                   fabs(a->recall_low - b->recall_low) < 1e-12 && a->reached == b->reached,
               "k=%u stored %u/%u/%u %.17g %.17g, reported %u/%u/%u %.17g %.17g", b->k,
               a->n_probe, a->k_refine, a->k_fullbit, a->recall, a->recall_low, b->n_probe,
               b->k_refine, b->k_fullbit, b->recall, b->recall_low);
    }
    chimera_index *ix = NULL;
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    if (ix) {
        chimera_search_params p = {0};
        CHECK(chimera_index_params_default(ix, 10, &p) == 1);
        CHECK(p.n_probe == rep.calibrated[0].n_probe && p.k_fullbit == rep.calibrated[0].k_fullbit &&
              p.k_refine == rep.calibrated[0].k_refine && p.chunks == rep.calibrated[0].chunks &&
              p.impute_scale == rep.calibrated[0].impute_scale);
        memset(&p, 0, sizeof p);
        p.impute_scale = 0.3f; /* the caller's scale is kept */
        CHECK(chimera_index_params_default(ix, 10, &p) == 1 && p.impute_scale == 0.3f);
        /* a scale outside (0, 1] is refused by name, NaN too */
        {
            int64_t one_id[10];
            float one_sc[10];
            chimera_queries *one = NULL;
            CHECK_OK(chimera_queries_slice(q, 0, 1, &one, &err), &err);
            const float bad[] = {-0.5f, 1.5f, NAN};
            for (int i = 0; i < 3 && one; i++) {
                chimera_search_params bp = {.impute_scale = bad[i]};
                CHECK_STATUS(chimera_index_search(ix, one, 10, &bp, NULL, one_id, one_sc, NULL, &err),
                             CHIMERA_ERR_INVALID_ARG, &err);
                CHECKF(strstr(err.msg, "impute_scale") != NULL, "message: %s", err.msg);
            }
            chimera_queries_free(one);
        }
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
        /* the CPU, whose tune walks the covered form's frontier (a device would walk
         * backwards, checked below for the covered form) */
        chimera_search_opts so = {.n_threads = 2, .backend = CHIMERA_BACKEND_CPU};
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
        /* measured with the index's scale, and a saved profile gives it back */
        CHECK(res->best.impute_scale == rep.calibrated[0].impute_scale);
        CHECK_OK(chimera_index_profile_save(dir, 10, 0.9, res, &err), &err);
        chimera_index *ix2 = NULL;
        CHECK_OK(chimera_index_open(dir, NULL, &ix2, &err), &err);
        chimera_search_params tuned;
        if (ix2) CHECK_OK(chimera_index_profile_get(ix2, 10, 0.9, &tuned, &err), &err);
        CHECK(ix2 && tuned.impute_scale == res->best.impute_scale);
        chimera_index_close(ix2);
        /* another held-out fraction: another split */
        CHECK_OK(chimera_index_tune_heldout(ix, q, truth, 10, 10, 0.9, 0.25, 1, &so, res, &err),
                 &err);
        CHECK(res->n_tune == 45 && res->n_heldout == 15);
        /* on the CPU, on a real index: the held-out tune keeps the covered form, and its
         * points carry the rates the searches measured */
        CHECK(res->best.k_refine == res->best.k_fullbit && res->n_points > 0);
        for (int i = 0; i < res->n_points; i++) CHECK(res->points[i].qps > 0);
        /* the point-estimate tune: the cheapest measured setting whose recall on these
         * queries meets the target, the held-out fields zero */
        chimera_search_opts cpu = so;
        CHECK_OK(chimera_index_tune(ix, q, truth, 10, 10, 0.9, &cpu, res, &err), &err);
        CHECK(res->reached && res->recall >= 0.9 && res->n_heldout == 0 &&
              res->heldout_recall == 0 && res->tune_target == 0);
        CHECK(res->best.k_refine == res->best.k_fullbit &&
              res->best.impute_scale == rep.calibrated[0].impute_scale);
        int kept = 0;
        for (int i = 0; i < res->n_points; i++) {
            const chimera_search_params *a = &res->points[i].params, *b = &res->best;
            if (a->n_probe == b->n_probe && a->k_fullbit == b->k_fullbit) {
                kept = 1;
                CHECK(fabs(res->points[i].recall - res->recall) < 1e-12);
            }
        }
        CHECK(kept);
        /* a setting exactly at the target is kept (the interval has no width): the
         * target 1 is reached where some setting finds every true document */
        CHECK_OK(chimera_index_tune(ix, q, truth, 10, 10, 1.0, &cpu, res, &err), &err);
        int perfect = 0;
        for (int i = 0; i < res->n_points; i++) perfect |= res->points[i].recall == 1.0;
        CHECKF(res->reached == perfect && (!perfect || res->recall == 1.0),
               "target 1: reached %d, recall %.4f, a perfect point %d", res->reached, res->recall,
               perfect);
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

/* ---- the calibration's walk on a model: choice by cost ---------------------------------- */

/* A search model: recall rises with n_probe and with k_fullbit (each loss apart), and the
 * cost of each knob is set by the test, so the cheapest setting reaching the target is
 * known in advance. */
typedef struct cost_model {
    double per_probe, per_fullbit, per_refine;
    int calls;
} cost_model;

static double model_recall(const chimera_search_params *p)
{
    double rp = 1 - 0.4 * exp(-(double)p->n_probe / 6), rk = 1 - 0.4 * exp(-(double)p->k_fullbit / 30);
    return rp * rk;
}

static double model_cost(const cost_model *m, const chimera_search_params *p)
{
    return 1000 + m->per_probe * p->n_probe + m->per_fullbit * p->k_fullbit +
           m->per_refine * p->k_refine;
}

static chimera_status model_eval(void *ctx, const chimera_search_params *p, double *recall,
                                 double *cost, double *qps)
{
    cost_model *m = ctx;
    m->calls++;
    *recall = model_recall(p);
    *cost = model_cost(m, p);
    *qps = 1e9 / *cost;
    return CHIMERA_OK;
}

/* model_eval's cost as a measured rate, for the backward walk */
static chimera_status model_eval_qps(void *ctx, const chimera_search_params *p, double *recall,
                                     double *qps)
{
    double cost;
    return model_eval(ctx, p, recall, &cost, qps);
}

static chimera_status model_check(void *ctx, const chimera_search_params *p, double *mean,
                                  double *sd, int64_t *n, double *qps)
{
    (void)ctx;
    *mean = model_recall(p); /* held-out queries like the tuning ones, and many of them */
    *sd = 0.01;
    *n = 100000;
    *qps = 1;
    return CHIMERA_OK;
}

/* Held-out queries harder than the tuning ones (by 0.02) and few for their spread: the
 * interval cannot certify 0.95 below the ceiling, but the mean can reach it. */
static chimera_status model_check_hard(void *ctx, const chimera_search_params *p, double *mean,
                                       double *sd, int64_t *n, double *qps)
{
    (void)ctx;
    *mean = model_recall(p) - 0.02;
    *sd = 0.15;
    *n = 64;
    *qps = 1;
    return CHIMERA_OK;
}

/* model_check with recall that stops at 0.97 (a search at its bits' ceiling): no
 * setting gains there, on the tuning queries or the held-out ones. */
static chimera_status model_check_capped(void *ctx, const chimera_search_params *p,
                                         double *mean, double *sd, int64_t *n, double *qps)
{
    model_check(ctx, p, mean, sd, n, qps);
    *mean = *mean < 0.97 ? *mean : 0.97;
    return CHIMERA_OK;
}

/* The cheapest setting on the walk's own grid (each knob raised by half again from the
 * start, k_refine 4 k_fullbit) whose recall is at least r. */
static double grid_cheapest(const cost_model *m, const chimera_search_params *start, double r)
{
    double best = INFINITY;
    for (uint32_t np = start->n_probe; np <= 128; np = np * 3 / 2 + 1)
        for (uint32_t kf = start->k_fullbit; kf <= 640; kf = kf * 3 / 2 + 1) {
            chimera_search_params p = *start;
            p.n_probe = np;
            p.k_fullbit = kf;
            p.k_refine = kf * 4 > start->k_refine ? kf * 4 : start->k_refine;
            if (model_recall(&p) >= r && model_cost(m, &p) < best) best = model_cost(m, &p);
        }
    return best;
}

static void test_grow_by_cost(void)
{
    chimera_search_params start = {.n_probe = 4, .k_refine = 80, .k_fullbit = 20, .chunks = 4};
    /* probing dear (a large corpus: long posting lists), then full-bit scoring dear (long
     * documents): the same recall surface, opposite choices */
    cost_model dear_probe = {400, 2, 0.5, 0}, dear_fullbit = {20, 60, 0.5, 0};
    cost_model *models[2] = {&dear_probe, &dear_fullbit};
    chimera_tune_result *res = malloc(sizeof *res), *again = malloc(sizeof *again);
    chimera_search_params chosen[2];
    for (int i = 0; i < 2; i++) {
        cost_model *m = models[i];
        CHECK_OK(sp_tune_grow_heldout(model_eval, m, model_check, NULL, 10, 0.95, 1.96, 7000,
                                      20000, &start, 0, res),
                 NULL);
        CHECK(res->reached && res->heldout_low >= 0.95 && model_recall(&res->best) >= 0.95);
        /* near the cheapest setting of the grid that reaches the target (the walk is
         * greedy, so not always at it) */
        double cost = model_cost(m, &res->best), floor = grid_cheapest(m, &start, 0.95);
        CHECKF(cost <= 1.25 * floor, "model %d: %u/%u/%u costs %g, the grid's cheapest %g", i,
               res->best.n_probe, res->best.k_refine, res->best.k_fullbit, cost, floor);
        /* the measured points carry the modelled rate */
        CHECK(res->n_points > 1 && res->points[0].qps == 1e9 / model_cost(m, &start));
        chosen[i] = res->best;
        /* the same inputs, the same choice: nothing measured by a clock */
        CHECK_OK(sp_tune_grow_heldout(model_eval, m, model_check, NULL, 10, 0.95, 1.96, 7000,
                                      20000, &start, 0, again),
                 NULL);
        CHECK(memcmp(&again->best, &res->best, sizeof res->best) == 0);
    }
    CHECKF(chosen[0].n_probe < chosen[1].n_probe && chosen[0].k_fullbit > chosen[1].k_fullbit,
           "dear probing %u/%u, dear full-bit %u/%u", chosen[0].n_probe, chosen[0].k_fullbit,
           chosen[1].n_probe, chosen[1].k_fullbit);
    /* a target above what the search can reach (the ceiling): the walk stops near the
     * ceiling instead of climbing to the knobs' caps */
    dear_probe.calls = 0;
    CHECK_OK(sp_tune_grow_heldout(model_eval, &dear_probe, model_check_capped, NULL, 10, 0.999,
                                  1.96, 7000, 20000, &start, 0.97, res),
             NULL);
    CHECK(!res->reached && res->best.n_probe < 128 && dear_probe.calls < 30);
    /* a held-out mean short of a target below the ceiling: the walk grows on by the
     * shortfall rather than stopping where the interval, too wide to certify anything
     * near the ceiling, would send the tuning target past it; then by the held-out
     * queries until their mean stands one standard error (0.15 / 8) above the target,
     * and no further: the 95% bound would ask for a mean of 0.987, which only the caps
     * come near */
    CHECK_OK(sp_tune_grow_heldout(model_eval, &dear_probe, model_check_hard, NULL, 10, 0.95,
                                  1.96, 7000, 20000, &start, 0.995, res),
             NULL);
    double se = (res->heldout_recall - res->heldout_low) / 1.96;
    CHECKF(!res->reached && res->heldout_recall - se >= 0.95 && res->heldout_recall < 0.985 &&
               res->best.n_probe < 128 && res->best.k_fullbit < 640,
           "held-out mean %.4f (bound %.4f) at %u/%u/%u", res->heldout_recall, res->heldout_low,
           res->best.n_probe, res->best.k_refine, res->best.k_fullbit);
    free(res);
    free(again);
}

/* Recall that stops rising at 0.955 whatever the knobs (the 4-bit estimates' ranking),
 * under a ceiling (0.978) that overstates it, with held-out queries too few to certify
 * 0.95 at that mean. The check records how many trials the walk had run at its first call. */
typedef struct plateau_model {
    cost_model m;
    int calls_at_check; /* -1 until the first check */
    int checks;
} plateau_model;

static double plateau_recall(const chimera_search_params *p)
{
    double r = model_recall(p);
    return r < 0.955 ? r : 0.955;
}

static chimera_status plateau_eval(void *ctx, const chimera_search_params *p, double *recall,
                                   double *cost, double *qps)
{
    plateau_model *pm = ctx;
    model_eval(&pm->m, p, recall, cost, qps);
    *recall = plateau_recall(p);
    return CHIMERA_OK;
}

static chimera_status plateau_check(void *ctx, const chimera_search_params *p, double *mean,
                                    double *sd, int64_t *n, double *qps)
{
    plateau_model *pm = ctx;
    if (pm->calls_at_check < 0) pm->calls_at_check = pm->m.calls;
    pm->checks++;
    *mean = plateau_recall(p);
    *sd = 0.06; /* a lower bound near 0.94: the raised tuning target stays under the ceiling */
    *n = 64;
    *qps = 1;
    return CHIMERA_OK;
}

static void test_grow_plateau(void)
{
    chimera_search_params start = {.n_probe = 4, .k_refine = 80, .k_fullbit = 20, .chunks = 4};
    plateau_model pm = {{400, 2, 0.5, 0}, -1, 0};
    chimera_tune_result *res = malloc(sizeof *res);
    CHECK_OK(sp_tune_grow_heldout(plateau_eval, &pm, plateau_check, &pm, 10, 0.95, 1.96, 7000,
                                  20000, &start, 0.978, res),
             NULL);
    /* the first checked setting met the mean: after it the walk takes the step that
     * still gains (two trials here) and stops at the first flat one (three: each knob,
     * then both), with one more check; three flat steps used to follow (11 trials).
     * Then one round of doublings on the held-out queries (two trials, two checks),
     * which gain nothing either. */
    CHECKF(pm.calls_at_check >= 0 && pm.m.calls - pm.calls_at_check <= 8 && pm.checks <= 4,
           "%d trials before the first check, %d after, %d checks", pm.calls_at_check,
           pm.m.calls - pm.calls_at_check, pm.checks);
    CHECKF(!res->reached && res->heldout_recall >= 0.95 && plateau_recall(&res->best) >= 0.95,
           "kept %u/%u/%u at held-out mean %.4f", res->best.n_probe, res->best.k_refine,
           res->best.k_fullbit, res->heldout_recall);
    free(res);
}

/* Every count of p doubled: what two queries like p's one report. */
static chimera_search_profile twice(chimera_search_profile p)
{
    p.tokens_refined *= 2;
    p.docs_touched *= 2;
    p.n_refined *= 2;
    p.n_scored1 *= 2;
    p.n_fullbit *= 2;
    p.n_rows *= 2;
    p.n_probed *= 2;
    p.n_walked *= 2;
    return p;
}

static void test_cost_model(void)
{
    chimera_search_profile a = {.tokens_refined = 40000, .docs_touched = 12000,
                                .n_refined = 160, .n_scored1 = 160, .n_fullbit = 40};
    chimera_search_params p = {.n_probe = 8, .k_refine = 160, .k_fullbit = 40};
    double base = sp_tune_cost(&a, &p, 1, 32, 128, 80, 0);
    CHECK(base > 0);
    /* every count adds to the cost */
    chimera_search_profile b = a;
    b.tokens_refined *= 2;
    CHECK(sp_tune_cost(&b, &p, 1, 32, 128, 80, 0) > base);
    b = a;
    b.n_fullbit *= 2;
    CHECK(sp_tune_cost(&b, &p, 1, 32, 128, 80, 0) > base);
    b = a;
    b.n_scored1 *= 2;
    CHECK(sp_tune_cost(&b, &p, 1, 32, 128, 80, 0) > base);
    b = a;
    b.docs_touched *= 2;
    CHECK(sp_tune_cost(&b, &p, 1, 32, 128, 80, 0) > base);
    /* the exact re-rank of the full-bit scored documents: at 12 query tokens 1.2-3x their
     * full-bit scoring (d = 128), and more at a larger d */
    b = a;
    b.n_reranked = b.n_fullbit;
    chimera_search_profile f2 = a;
    f2.n_fullbit *= 2;
    double base12 = sp_tune_cost(&a, &p, 1, 12, 128, 80, 0);
    double rr = sp_tune_cost(&b, &p, 1, 12, 128, 80, 0) - base12;
    double fb = sp_tune_cost(&f2, &p, 1, 12, 128, 80, 0) - base12;
    CHECKF(rr > 1.2 * fb && rr < 3 * fb, "re-rank %g, full-bit %g", rr, fb);
    CHECK(sp_tune_cost(&b, &p, 1, 12, 256, 80, 0) - sp_tune_cost(&a, &p, 1, 12, 256, 80, 0) > rr);
    chimera_search_params q = p;
    q.n_probe = 16;
    CHECK(sp_tune_cost(&a, &q, 1, 32, 128, 80, 0) > base);
    /* per query: two queries with twice the counts cost the same each */
    b = twice(a);
    CHECK(fabs(sp_tune_cost(&b, &p, 2, 64, 128, 80, 0) - base) < 1e-9 * base);
    /* wider tokens and longer documents cost more to score */
    CHECK(sp_tune_cost(&a, &p, 1, 32, 256, 80, 0) > base &&
          sp_tune_cost(&a, &p, 1, 32, 128, 160, 0) > base);
    /* centroid interaction (the setting's k_interaction below k_refine): scoring a
     * quarter of the refined documents at 1 bit after it costs less than scoring them
     * all, more than scoring that quarter with no interaction */
    chimera_search_params pi = p;
    pi.k_interaction = 40;
    b = a;
    b.n_scored1 = b.n_refined / 4;
    chimera_search_profile c = b;
    double with = sp_tune_cost(&b, &pi, 1, 32, 128, 80, 0);
    CHECKF(with < base && with > sp_tune_cost(&c, &p, 1, 32, 128, 80, 0), "%g vs %g", with, base);
    /* k_interaction at or above k_refine is off: no interaction cost */
    pi.k_interaction = 160;
    CHECK(sp_tune_cost(&a, &pi, 1, 32, 128, 80, 0) == base);
    /* the interaction's share does not grow with the dimension, 1-bit scoring's does */
    pi.k_interaction = 40;
    double d256 = sp_tune_cost(&b, &pi, 1, 32, 256, 80, 0) - sp_tune_cost(&a, &p, 1, 32, 256, 80, 0);
    CHECK(d256 < with - base);
    /* full-bit scoring covering every refined document: no 1-bit pass, no 1-bit cost */
    chimera_search_profile cv = a, cv1 = a;
    cv.n_fullbit = cv1.n_fullbit = cv.n_refined;
    cv.n_scored1 = 0;
    chimera_search_params pc = p;
    pc.k_fullbit = pc.k_refine;
    CHECKF(sp_tune_cost(&cv, &pc, 1, 32, 128, 80, 0) < sp_tune_cost(&cv1, &pc, 1, 32, 128, 80, 0),
           "covered %g vs 1-bit scored %g", sp_tune_cost(&cv, &pc, 1, 32, 128, 80, 0),
           sp_tune_cost(&cv1, &pc, 1, 32, 128, 80, 0));
    /* centroid-score rows computed one by one add to the cost, per query */
    b = a;
    b.n_rows = 5000;
    double rows1 = sp_tune_cost(&b, &p, 1, 32, 128, 80, 0);
    CHECK(rows1 > base);
    b = twice(b);
    CHECK(fabs(sp_tune_cost(&b, &p, 2, 64, 128, 80, 0) - rows1) < 1e-9 * rows1);
    /* the probes that ran: the setting's n_probe where none were counted, every round of
     * a probing that widened where they were (8 + 16 + 32), per query */
    b = a;
    b.n_probed = 8;
    CHECK(fabs(sp_tune_cost(&b, &p, 1, 32, 128, 80, 0) - base) < 1e-9 * base);
    b.n_probed = 56;
    double widened = sp_tune_cost(&b, &p, 1, 32, 128, 80, 0);
    CHECK(widened > base && widened == sp_tune_cost(&a, &(chimera_search_params){.n_probe = 56,
                                                      .k_refine = 160, .k_fullbit = 40},
                                                    1, 32, 128, 80, 0));
    b = twice(b);
    CHECK(fabs(sp_tune_cost(&b, &p, 2, 64, 128, 80, 0) - widened) < 1e-9 * widened);
    /* a probe a graph walk found costs more than one selected from every centroid's
     * score, but a query that scored every centroid pays for those scores (by K): at
     * K = 50,000 a walk of 8 probes is far cheaper than the full scores, at K = 1,000
     * not; the walks' seeding grows with K too, more slowly; with K unknown (0) neither
     * is charged */
    chimera_search_profile wk = a, sel = a;
    wk.n_probed = sel.n_probed = 8;
    wk.n_walked = 8;
    double c_walk = sp_tune_cost(&wk, &p, 1, 32, 128, 80, 50000);
    double c_sel0 = sp_tune_cost(&sel, &p, 1, 32, 128, 80, 0);
    double c_sel = sp_tune_cost(&sel, &p, 1, 32, 128, 80, 50000);
    double c_walk1k = sp_tune_cost(&wk, &p, 1, 32, 128, 80, 1000);
    double c_sel1k = sp_tune_cost(&sel, &p, 1, 32, 128, 80, 1000);
    double c_walk0 = sp_tune_cost(&wk, &p, 1, 32, 128, 80, 0);
    CHECKF(c_walk0 > c_sel0 && c_walk > c_walk0 && c_walk < c_sel && c_walk1k > c_sel1k &&
               c_walk - c_walk0 < c_sel - c_sel0,
           "walked %g (K 0) %g (K 1,000) %g (K 50,000); selected %g, %g, %g", c_walk0,
           c_walk1k, c_walk, c_sel0, c_sel1k, c_sel);
    /* half the queries walked: the mean of the two, per query */
    chimera_search_profile half = twice(sel);
    half.n_walked = 8;
    double c_half = sp_tune_cost(&half, &p, 2, 64, 128, 80, 50000);
    CHECKF(fabs(c_half - 0.5 * (c_walk + c_sel)) < 1e-9 * c_half, "half walked %g, want %g",
           c_half, 0.5 * (c_walk + c_sel));
    /* a 1-bit scored document costs 0.5-0.95 of a full-bit one at every width and query
     * length (both take the maxima with one 8-bit query, bench/RESULTS.md 5.36), not the
     * fifth their bytes would say, also past the 32 query tokens measured (where the
     * fitted slopes alone would cross); and a document token costs the same order for
     * a query of 4 tokens as for one of 16 (the kernels take 16 query tokens a vector):
     * at 4 tokens more than half what it costs at 16, at 16 more than half of 32 */
    const uint32_t dims[] = {64, 128, 256};
    for (int i = 0; i < 3; i++) {
        chimera_search_params none = {0};
        chimera_search_profile one = {.n_scored1 = 100}, full = {.n_fullbit = 100};
        const int64_t lens[] = {4, 8, 16, 32, 128};
        for (int j = 0; j < 5; j++) {
            double r = sp_tune_cost(&one, &none, 1, lens[j], dims[i], 80, 0) /
                       sp_tune_cost(&full, &none, 1, lens[j], dims[i], 80, 0);
            CHECKF(r > 0.5 && r < 0.95, "d = %u, m = %lld: a 1-bit scored document %.2f of a "
                   "full-bit one", dims[i], (long long)lens[j], r);
        }
        double c4 = sp_tune_cost(&full, &none, 1, 4, dims[i], 80, 0);
        double c16 = sp_tune_cost(&full, &none, 1, 16, dims[i], 80, 0);
        double c32 = sp_tune_cost(&full, &none, 1, 32, dims[i], 80, 0);
        CHECKF(c4 > 0.5 * c16 && c16 > 0.5 * c32,
               "d = %u: a full-bit document %g ns at m = 4, %g at 16, %g at 32", dims[i], c4,
               c16, c32);
    }
    /* with S outgrowing the cache (K = 99,328), a document scored by a query that did
     * not walk costs more than one scored by a query that walked; at K = 8,000 the same */
    chimera_search_profile fs = {.n_fullbit = 100, .n_probed = 8}, fw = fs;
    fw.n_walked = 8;
    chimera_search_params none = {.n_probe = 8};
    double sel_doc = sp_tune_cost(&fs, &none, 1, 10, 128, 80, 99328) -
                     sp_tune_cost(&(chimera_search_profile){.n_probed = 8}, &none, 1, 10, 128,
                                  80, 99328);
    double walk_doc = sp_tune_cost(&fw, &none, 1, 10, 128, 80, 99328) -
                      sp_tune_cost(&(chimera_search_profile){.n_probed = 8, .n_walked = 8},
                                   &none, 1, 10, 128, 80, 99328);
    double small_sel = sp_tune_cost(&fs, &none, 1, 10, 128, 80, 8000) -
                       sp_tune_cost(&(chimera_search_profile){.n_probed = 8}, &none, 1, 10,
                                    128, 80, 8000);
    CHECKF(sel_doc > 1.1 * walk_doc && fabs(small_sel - walk_doc) < 1e-9 * walk_doc,
           "100 documents: %g (not walked, K = 99,328), %g (walked), %g (K = 8,000)", sel_doc,
           walk_doc, small_sel);
}

/* The walk keeps the start's k_refine and k_interaction per k_fullbit on every setting
 * it measures (centroid interaction on), and keeps k_interaction off when off. */
typedef struct ratio_log {
    cost_model m;
    int bad;
} ratio_log;

static chimera_status ratio_eval(void *ctx, const chimera_search_params *p, double *recall,
                                 double *cost, double *qps)
{
    ratio_log *l = ctx;
    if (p->k_refine < 12 * p->k_fullbit && p->k_refine < 20000) l->bad++;
    if (p->k_interaction < 3 * p->k_fullbit || p->k_interaction >= p->k_refine) l->bad++;
    return model_eval(&l->m, p, recall, cost, qps);
}

static void test_grow_ratios(void)
{
    chimera_search_params start = {.n_probe = 4, .k_refine = 240, .k_fullbit = 20,
                                   .k_interaction = 60, .chunks = 4};
    ratio_log l = {{20, 60, 0.5, 0}, 0};
    chimera_tune_result *res = malloc(sizeof *res);
    CHECK_OK(sp_tune_grow_heldout(ratio_eval, &l, model_check, NULL, 10, 0.95, 1.96, 7000, 20000,
                                  &start, 0, res),
             NULL);
    CHECKF(res->reached && l.bad == 0 && l.m.calls > 2 && res->best.k_fullbit > start.k_fullbit,
           "reached %d, %d settings off the ratios of %d, best k_fullbit %u", res->reached, l.bad,
           l.m.calls, res->best.k_fullbit);
    CHECK(res->best.k_interaction >= 3 * res->best.k_fullbit);
    /* off stays off */
    start.k_interaction = 0;
    start.k_refine = 80;
    CHECK_OK(sp_tune_grow_heldout(model_eval, &l.m, model_check, NULL, 10, 0.95, 1.96, 7000,
                                  20000, &start, 0, res),
             NULL);
    CHECK(res->reached && res->best.k_interaction == 0 && res->best.k_refine >= 4 * res->best.k_fullbit);
    for (int i = 0; i < res->n_points; i++) CHECK(res->points[i].params.k_interaction == 0);
    free(res);
}

/* A strongly clustered corpus, modelled: probing fewer than WIDE_PROBES clusters finds
 * too few documents, so the search doubles n_probe until it reaches them, refining again
 * each time (pipeline.h): it pays for every round and ranks as WIDE_PROBES would. */
#define WIDE_PROBES 64

static chimera_status widen_eval(void *ctx, const chimera_search_params *p, double *recall,
                                 double *cost, double *qps)
{
    cost_model *m = ctx;
    m->calls++;
    chimera_search_params ran = *p;
    double rounds = 0;
    for (ran.n_probe = p->n_probe; ran.n_probe < WIDE_PROBES; ran.n_probe *= 2)
        rounds += ran.n_probe;
    rounds += ran.n_probe;
    *recall = model_recall(&ran);
    *cost = model_cost(m, &ran) + m->per_probe * (rounds - ran.n_probe);
    *qps = 1e9 / *cost;
    return CHIMERA_OK;
}

static chimera_status widen_check(void *ctx, const chimera_search_params *p, double *mean,
                                  double *sd, int64_t *n, double *qps)
{
    double cost;
    widen_eval(ctx, p, mean, &cost, qps);
    *sd = 0.01;
    *n = 100000;
    *qps = 1;
    return CHIMERA_OK;
}

/* widen_eval's cost as a measured rate, for the backward walk */
static chimera_status widen_qps_eval(void *ctx, const chimera_search_params *p, double *recall,
                                     double *qps)
{
    double cost;
    return widen_eval(ctx, p, recall, &cost, qps);
}

/* Fewer probes a little dearer at every step ((64 / n_probe)^0.25: 7.5% at 48, 24% at
 * 27) with recall as at 64: no single step is clearly slower than the one before. */
static chimera_status drift_eval(void *ctx, const chimera_search_params *p, double *recall,
                                 double *qps)
{
    chimera_search_params at64 = *p;
    at64.n_probe = 64;
    double cost;
    model_eval(ctx, &at64, recall, &cost, qps);
    *qps = 1e9 / (cost * pow(64.0 / p->n_probe, 0.25));
    return CHIMERA_OK;
}

static void test_backward_widened(void)
{
    /* the backward walk starts at WIDE_PROBES and shrinks n_probe while recall holds;
     * fewer probes keep the recall (the search widens them again) and cost more */
    cost_model m = {400, 2, 0.5, 0};
    chimera_tune_result *res = malloc(sizeof *res);
    CHECK_OK(sp_tune_backward(widen_qps_eval, &m, 10, 0.95, 7000, 20000, res), NULL);
    double r, c, q;
    widen_eval(&m, &res->best, &r, &c, &q);
    CHECKF(res->reached && res->best.n_probe >= WIDE_PROBES && r >= 0.95,
           "reached %d at %u/%u/%u (recall %.4f)", res->reached, res->best.n_probe,
           res->best.k_refine, res->best.k_fullbit, r);
    /* small losses do not add up: the choice runs at no less than 0.85 of the fastest */
    CHECK_OK(sp_tune_backward(drift_eval, &m, 10, 0.95, 7000, 20000, res), NULL);
    double q64;
    chimera_search_params at64 = res->best;
    at64.n_probe = 64;
    drift_eval(&m, &at64, &r, &q64);
    drift_eval(&m, &res->best, &r, &c);
    CHECKF(res->reached && c >= 0.85 * q64, "drifted to %u probes: %.3f of the rate at 64",
           res->best.n_probe, c / q64);
    /* where fewer probes are cheaper, they are still taken */
    CHECK_OK(sp_tune_backward(model_eval_qps, &m, 10, 0.95, 7000, 20000, res), NULL);
    CHECKF(res->reached && res->best.n_probe < WIDE_PROBES / 2, "n_probe %u", res->best.n_probe);
    free(res);
}

static void test_grow_widened(void)
{
    chimera_search_params start = {.n_probe = 4, .k_refine = 80, .k_fullbit = 20, .chunks = 4};
    cost_model m = {400, 2, 0.5, 0};
    chimera_tune_result *res = malloc(sizeof *res);
    /* the walk meets the target at a few probes, which widen to WIDE_PROBES; starting
     * there costs less (the rounds before it are saved) for the same recall */
    CHECK_OK(sp_tune_grow_heldout(widen_eval, &m, widen_check, &m, 10, 0.95, 1.96, 7000, 20000,
                                  &start, 0, res),
             NULL);
    double r, c, q;
    CHECK_OK(widen_eval(&m, &res->best, &r, &c, &q), NULL);
    CHECKF(res->reached && res->best.n_probe >= WIDE_PROBES && r >= 0.95,
           "reached %d at %u/%u/%u (recall %.4f)", res->reached, res->best.n_probe,
           res->best.k_refine, res->best.k_fullbit, r);
    /* and no further: more probes than the search widens to cost more */
    CHECK(res->best.n_probe < 2 * WIDE_PROBES);
    /* where nothing widens, the doubling costs more and is not kept: the choice is the
     * walk's own (the model's cheapest, test_grow_by_cost) */
    CHECK_OK(sp_tune_grow_heldout(model_eval, &m, model_check, NULL, 10, 0.95, 1.96, 7000, 20000,
                                  &start, 0, res),
             NULL);
    /* the doubling was measured (a point of its own, or one the walk had met before:
     * a tune measures a setting once) */
    int doubled = 0;
    for (int i = 0; i < res->n_points; i++) {
        const chimera_search_params *pt = &res->points[i].params;
        doubled |= pt->n_probe == 2 * res->best.n_probe &&
                   pt->k_refine == res->best.k_refine && pt->k_fullbit == res->best.k_fullbit;
    }
    CHECKF(doubled && model_cost(&m, &res->best) <= 1.25 * grid_cheapest(&m, &start, 0.95),
           "without widening: %u/%u/%u chosen, doubled n_probe measured: %d",
           res->best.n_probe, res->best.k_refine, res->best.k_fullbit, doubled);
    free(res);
}

/* The backward walk's centroid-interaction step, on a model: refinement loses recall
 * unless it keeps many documents per full-bit scored one, and the interaction loses
 * recall when it passes on fewer than 2 k_fullbit; each 1-bit scored document costs
 * per_scored1, each refined one per_refined (the interaction's share). */
typedef struct ci_model {
    double per_scored1, per_refined;
} ci_model;

static chimera_status ci_eval(void *ctx, const chimera_search_params *p, double *recall,
                              double *qps)
{
    const ci_model *m = ctx;
    int ci = p->k_interaction && p->k_interaction < p->k_refine;
    double scored1 = ci ? p->k_interaction : p->k_refine;
    double kept = (double)p->k_refine / p->k_fullbit;
    *recall = model_recall(p) * (1 - 0.5 * exp(-kept / 2)) *
              (ci && p->k_interaction < 2 * p->k_fullbit ? 0.9 : 1);
    *qps = 1e9 / (1000 + 20.0 * p->n_probe + 10.0 * p->k_fullbit + m->per_scored1 * scored1 +
                  m->per_refined * p->k_refine);
    return CHIMERA_OK;
}

static void test_backward_interaction(void)
{
    chimera_tune_result *res = malloc(sizeof *res);
    /* 1-bit scoring dear, refinement cheap: the interaction is taken, as deep as the
     * recall allows and no deeper */
    ci_model dear = {50, 0.5};
    CHECK_OK(sp_tune_backward(ci_eval, &dear, 10, 0.95, 7000, 20000, res), NULL);
    const chimera_search_params *b = &res->best;
    CHECKF(res->reached && b->k_interaction && b->k_interaction < b->k_refine &&
               b->k_interaction >= 2 * b->k_fullbit && b->k_interaction < 3 * b->k_fullbit,
           "reached %d: %u/%u/%u ki %u", res->reached, b->n_probe, b->k_refine, b->k_fullbit,
           b->k_interaction);
    /* 1-bit scoring as cheap as the interaction itself: no gain, left off */
    ci_model cheap = {0.5, 0.5};
    CHECK_OK(sp_tune_backward(ci_eval, &cheap, 10, 0.95, 7000, 20000, res), NULL);
    CHECKF(res->reached && (!b->k_interaction || b->k_interaction >= b->k_refine),
           "ki %u kr %u", b->k_interaction, b->k_refine);
    free(res);
}

/* The backward walk's covered step, on a model: every full-bit scored document counts
 * fully toward recall and each refined-but-only-1-bit-scored one a third as much; a
 * 1-bit scored document costs per_scored1 against a full-bit one's 10, and nothing when
 * k_fullbit covers k_refine (the pipeline skips the pass). */
static chimera_status cov_eval(void *ctx, const chimera_search_params *p, double *recall,
                               double *qps)
{
    const double *per_scored1 = ctx;
    double eff = p->k_fullbit + (double)(p->k_refine - p->k_fullbit) / 3;
    *recall = (1 - 0.4 * exp(-(double)p->n_probe / 6)) * (1 - 0.4 * exp(-eff / 30));
    double s1 = p->k_fullbit < p->k_refine ? *per_scored1 * p->k_refine : 0;
    *qps = 1e9 / (1000 + 20.0 * p->n_probe + 10.0 * p->k_fullbit + s1);
    return CHIMERA_OK;
}

/* Held-out queries on which few probes lose far more than on the tuning ones (a fragile
 * pick), and many of them: the first walk's pick falls well short, raising the target by
 * each pick's whole shortfall ends at a deep setting (27 / 153 / 120 here), and a walk
 * between the first target and that one finds a cheaper setting that meets it too
 * (27 probes, k_fullbit 80). */
static chimera_status fragile_check(void *ctx, const chimera_search_params *p, double *mean,
                                    double *sd, int64_t *n, double *qps)
{
    *mean = model_recall(p) - (p->n_probe < 25 ? 0.03 : 0.005);
    *sd = 0.01;
    *n = 100000;
    *qps = 1e9 / model_cost(ctx, p);
    return CHIMERA_OK;
}

static void test_heldout_halving(void)
{
    cost_model m = {20, 60, 0.5, 0};
    chimera_tune_result *res = malloc(sizeof *res), *walk = malloc(sizeof *walk);
    /* what raising the target by each pick's whole shortfall alone keeps */
    double t = 0.95, mean, sd, q, lo = 0, hi;
    int64_t n, need;
    for (int attempt = 0; attempt < 6; attempt++) {
        CHECK_OK(sp_tune_backward(model_eval_qps, &m, 10, t, 7000, 20000, walk), NULL);
        fragile_check(&m, &walk->best, &mean, &sd, &n, &q);
        sp_recall_interval(mean, sd, n, 10, 1.96, 0.95, &lo, &hi, &need);
        if (attempt == 0)
            CHECKF(lo < 0.95, "first pick %u/%u/%u held out %.4f", walk->best.n_probe,
                   walk->best.k_refine, walk->best.k_fullbit, lo);
        if (lo >= 0.95) break;
        t += 0.95 - lo + 0.002;
    }
    CHECK(lo >= 0.95);
    double cost_raised = model_cost(&m, &walk->best);
    CHECK_OK(sp_tune_heldout(model_eval_qps, &m, fragile_check, &m, 10, 0.95, 1.96, 7000, 20000,
                             res), NULL);
    fragile_check(&m, &res->best, &mean, &sd, &n, &q);
    CHECKF(res->reached && res->heldout_low >= 0.95 && mean >= 0.95,
           "reached %d low %.4f mean %.4f", res->reached, res->heldout_low, mean);
    CHECKF(model_cost(&m, &res->best) < cost_raised, "kept %u/%u/%u cost %.0f, raised target's %u/%u/%u %.0f",
           res->best.n_probe, res->best.k_refine, res->best.k_fullbit, model_cost(&m, &res->best),
           walk->best.n_probe, walk->best.k_refine, walk->best.k_fullbit, cost_raised);
    free(res);
    free(walk);
}

static void test_backward_covered(void)
{
    chimera_tune_result *res = malloc(sizeof *res);
    /* 1-bit scoring nearly as dear as full-bit: the covered form is taken */
    double dear = 8;
    CHECK_OK(sp_tune_backward(cov_eval, &dear, 10, 0.95, 7000, 20000, res), NULL);
    const chimera_search_params *b = &res->best;
    double r, q;
    cov_eval(&dear, b, &r, &q);
    CHECKF(res->reached && b->k_fullbit == b->k_refine && r >= 0.95,
           "reached %d: %u/%u/%u recall %.4f", res->reached, b->n_probe, b->k_refine,
           b->k_fullbit, r);
    /* every trial leaves the impute scale to the index (0), which the result reports:
     * a trial at the library's 1 measured another setting than the one stored */
    for (int i = 0; i < res->n_points; i++) CHECK(res->points[i].params.impute_scale == 0);
    /* and no deeper than the target needs: a fifth fewer misses it */
    chimera_search_params less = *b;
    less.k_refine = less.k_fullbit = (uint32_t)(b->k_refine * 0.8);
    cov_eval(&dear, &less, &r, &q);
    CHECKF(r < 0.95, "covered %u reaches %.4f at %u", b->k_refine, r, less.k_refine);
    /* 1-bit scoring cheap: filtering many documents first stays the faster form */
    double cheap = 0.5;
    CHECK_OK(sp_tune_backward(cov_eval, &cheap, 10, 0.95, 7000, 20000, res), NULL);
    CHECKF(res->reached && b->k_fullbit < b->k_refine, "cheap: %u/%u/%u", b->n_probe,
           b->k_refine, b->k_fullbit);
    free(res);
}

/* ---- the frontier walk (chimera tune on the CPU) ------------------------------------------ */

/* The cheapest covered setting (k_refine = k_fullbit) of every n_probe up to 128 and
 * every depth from k to 640 whose model recall is at least r. */
static double covered_cheapest(const cost_model *m, double r)
{
    double best = INFINITY;
    for (uint32_t np = 1; np <= 128; np++)
        for (uint32_t d = 10; d <= 640; d++) {
            chimera_search_params p = {.n_probe = np, .k_refine = d, .k_fullbit = d};
            if (model_recall(&p) >= r && model_cost(m, &p) < best) best = model_cost(m, &p);
        }
    return best;
}

/* Recall that stops at 0.957 (the bits' cap), and held-out queries that lose 0.02 below
 * it and 0.0063 at it, many of them: only settings at the cap certify 0.95, and the first
 * pick's shortfall raises the tuning target past the cap. */
#define NEAR_CAP 0.957
static chimera_status near_cap_eval(void *ctx, const chimera_search_params *p, double *recall,
                                    double *cost, double *qps)
{
    model_eval(ctx, p, recall, cost, qps);
    if (*recall > NEAR_CAP) *recall = NEAR_CAP;
    return CHIMERA_OK;
}

static chimera_status near_cap_check(void *ctx, const chimera_search_params *p, double *mean,
                                     double *sd, int64_t *n, double *qps)
{
    double r = model_recall(p);
    (void)ctx;
    *mean = r < NEAR_CAP ? r - 0.02 : NEAR_CAP - 0.0063;
    *sd = 0.02;
    *n = 100000;
    *qps = 1;
    return CHIMERA_OK;
}

/* A search with an exact re-rank: model_eval's recall, less 0.05 unless the re-rank
 * reaches *(double *)ctx times k (k = 10) of the full-bit ranking, and each re-ranked
 * document costs 30 more. */
static chimera_status rerank_eval(void *ctx, const chimera_search_params *p, double *recall,
                                  double *cost, double *qps)
{
    cost_model m = {20, 60, 0.5, 0};
    model_eval(&m, p, recall, cost, qps);
    if (p->rerank_depth < *(const double *)ctx * 10) *recall -= 0.05;
    *cost += 30.0 * p->rerank_depth;
    *qps = 1e9 / *cost;
    return CHIMERA_OK;
}

static chimera_status rerank_check(void *ctx, const chimera_search_params *p, double *mean,
                                   double *sd, int64_t *n, double *qps)
{
    double cost;
    rerank_eval(ctx, p, mean, &cost, qps);
    *sd = 0.01;
    *n = 100000;
    return CHIMERA_OK;
}

static void test_frontier_rerank(void)
{
    chimera_tune_result *res = malloc(sizeof *res);
    /* the true top k within the first 2k of the full-bit ranking: the pick re-ranks 2k */
    double need = 1.5;
    CHECK_OK(sp_tune_frontier_heldout(rerank_eval, &need, rerank_check, &need, 10, 0.95, 1.96,
                                      7000, 20000, 1, res),
             NULL);
    CHECKF(res->reached && res->best.rerank_depth == 20, "re-rank %u", res->best.rerank_depth);
    /* every point re-ranks, at most its depth and 4k */
    for (int i = 0; i < res->n_points; i++) {
        const chimera_search_params *p = &res->points[i].params;
        CHECK(p->rerank_depth >= 10 && p->rerank_depth <= p->k_fullbit && p->rerank_depth <= 40);
    }
    /* within 3k: 2k loses recall, the walk's 4k is kept */
    need = 3;
    CHECK_OK(sp_tune_frontier_heldout(rerank_eval, &need, rerank_check, &need, 10, 0.95, 1.96,
                                      7000, 20000, 1, res),
             NULL);
    CHECKF(res->reached && res->best.rerank_depth == 40, "re-rank %u", res->best.rerank_depth);
    /* no re-rank: none set */
    cost_model m = {20, 60, 0.5, 0};
    CHECK_OK(sp_tune_frontier_heldout(model_eval, &m, model_check, NULL, 10, 0.95, 1.96, 7000,
                                      20000, 0, res),
             NULL);
    for (int i = 0; i < res->n_points; i++) CHECK(res->points[i].params.rerank_depth == 0);
    free(res);
}

static void test_frontier(void)
{
    cost_model dear_probe = {400, 2, 0.5, 0}, dear_fullbit = {20, 60, 0.5, 0};
    cost_model *models[2] = {&dear_probe, &dear_fullbit};
    chimera_tune_result *res = malloc(sizeof *res), *again = malloc(sizeof *again);
    chimera_search_params chosen[2];
    for (int i = 0; i < 2; i++) {
        cost_model *m = models[i];
        CHECK_OK(sp_tune_frontier_heldout(model_eval, m, model_check, NULL, 10, 0.95, 1.96, 7000,
                                          20000, 0, res),
                 NULL);
        const chimera_search_params *b = &res->best;
        CHECK(res->reached && res->heldout_low >= 0.95 && model_recall(b) >= 0.95);
        CHECK(b->k_refine == b->k_fullbit && b->impute_scale == 0);
        /* near the cheapest of all covered settings, though it measures only rungs of two
         * ladders and a step between them */
        double cost = model_cost(m, b), floor = covered_cheapest(m, 0.95);
        CHECKF(cost <= 1.12 * floor, "model %d: %u/%u/%u costs %g, the cheapest %g", i,
               b->n_probe, b->k_refine, b->k_fullbit, cost, floor);
        /* cheaper than where the backward walk, greedy from a generous start, ends */
        chimera_tune_result *bw = again;
        CHECK_OK(sp_tune_heldout(model_eval_qps, m, model_check, NULL, 10, 0.95, 1.96, 7000,
                                 20000, bw),
                 NULL);
        CHECKF(cost <= model_cost(m, &bw->best), "model %d: frontier %g, backward %u/%u/%u %g", i,
               cost, bw->best.n_probe, bw->best.k_refine, bw->best.k_fullbit,
               model_cost(m, &bw->best));
        /* every point carries the eval's own rate; a handful of trials per rung */
        CHECK(res->n_points > 3 && res->n_points <= 40);
        for (int j = 0; j < res->n_points; j++)
            CHECK(res->points[j].qps == 1e9 / model_cost(m, &res->points[j].params));
        chosen[i] = *b;
        /* the same inputs, the same choice */
        CHECK_OK(sp_tune_frontier_heldout(model_eval, m, model_check, NULL, 10, 0.95, 1.96, 7000,
                                          20000, 0, again),
                 NULL);
        CHECK(again->best.n_probe == res->best.n_probe && again->best.k_refine == res->best.k_refine &&
              again->best.k_fullbit == res->best.k_fullbit &&
              again->best.rerank_depth == res->best.rerank_depth &&
              again->best.chunks == res->best.chunks);
    }
    CHECKF(chosen[0].n_probe < chosen[1].n_probe && chosen[0].k_fullbit > chosen[1].k_fullbit,
           "dear probing %u/%u, dear full-bit %u/%u", chosen[0].n_probe, chosen[0].k_fullbit,
           chosen[1].n_probe, chosen[1].k_fullbit);
    /* held-out queries on which few probes lose far more: the pick that meets the tuning
     * target at few probes falls short, and what is kept meets the held-out target */
    CHECK_OK(sp_tune_frontier_heldout(model_eval, &dear_fullbit, fragile_check, &dear_fullbit, 10,
                                      0.95, 1.96, 7000, 20000, 0, res),
             NULL);
    double mean, sd, q;
    int64_t n;
    fragile_check(&dear_fullbit, &res->best, &mean, &sd, &n, &q);
    CHECKF(res->reached && res->heldout_low >= 0.95 && mean >= 0.95 && res->tune_target > 0.95,
           "fragile: reached %d, %u/%u/%u held out %.4f, tuning target %.4f", res->reached,
           res->best.n_probe, res->best.k_refine, res->best.k_fullbit, mean, res->tune_target);
    /* a target beyond every setting (the bits' cap): not reached, the highest recall kept */
    CHECK_OK(sp_tune_frontier_heldout(plateau_eval, &(plateau_model){{400, 2, 0.5, 0}, -1, 0},
                                      model_check, NULL, 10, 0.99, 1.96, 7000, 20000, 0, res),
             NULL);
    CHECKF(!res->reached && res->n_points > 0 && plateau_recall(&res->best) >= 0.955 - 1e-9,
           "out of reach: reached %d, %u/%u/%u", res->reached, res->best.n_probe,
           res->best.k_refine, res->best.k_fullbit);
    /* near the bits' cap: the first pick's shortfall raises the tuning target past all
     * the tuning queries reach (NEAR_CAP), and the walk takes that most instead of giving
     * up */
    CHECK_OK(sp_tune_frontier_heldout(near_cap_eval, &dear_fullbit, near_cap_check, NULL, 10, 0.95,
                                      1.96, 7000, 20000, 0, res),
             NULL);
    CHECKF(res->reached && res->heldout_low >= 0.95,
           "at the cap: reached %d, %u/%u/%u held out %.4f (bound %.4f), tuning target %.4f",
           res->reached, res->best.n_probe, res->best.k_refine, res->best.k_fullbit,
           res->heldout_recall, res->heldout_low, res->tune_target);
    /* k = 1, whose first depth rungs round to the same value: the ladder goes on past
     * them (the model needs ~60 documents) */
    CHECK_OK(sp_tune_frontier_heldout(model_eval, &dear_fullbit, model_check, NULL, 1, 0.9, 1.96,
                                      7000, 20000, 0, res),
             NULL);
    CHECKF(res->reached && res->best.k_fullbit > 2, "k = 1: reached %d at %u/%u/%u", res->reached,
           res->best.n_probe, res->best.k_refine, res->best.k_fullbit);
    /* a corpus of fewer documents than the ladder's depths and few centroids: every
     * setting within them */
    CHECK_OK(sp_tune_frontier_heldout(model_eval, &dear_probe, model_check, NULL, 10, 0.9, 1.96,
                                      20, 50, 0, res),
             NULL);
    for (int j = 0; j < res->n_points; j++)
        CHECK(res->points[j].params.n_probe <= 20 && res->points[j].params.k_fullbit <= 50);
    free(res);
    free(again);
}

/* The k = 100 default a calibration stores must hold on fresh pseudo-queries against
 * exact truth what its held-out check reported, within the two samples' noise (32
 * held-out queries, 100 fresh ones, Recall@100 varying a few hundredths from query to
 * query: about two standard errors). A truth missing documents that deep settings find
 * reports less than exact search measures. Three corpora of 19,000 documents, one for
 * each truth (chimera.c, calibrate_index), which the test checks they get:
 *   - 24-40 tokens at d = 80: the generous search's candidates, for the k = 100 queries
 *     refining a fifteenth of the documents (above 18,000 documents);
 *   - 24-40 tokens at d = 32: an exact pass for the k = 100 held-out queries, the
 *     candidates for the rest. There the candidates held 98% of the exact top 100, and
 *     the reported recall was 0.014 above what fresh queries got (bench/RESULTS.md 5.33);
 *     now the reported k = 100 recall is exactly the stored setting's on those queries;
 *   - 4-12 tokens: an exact pass, the corpus being small enough. There the candidates
 *     held 92-93% of the exact top 100, and the reported recall was 0.035 below exact
 *     search's (bench/RESULTS.md 5.30). */
static void check_calibrated_deep(const char *name, uint32_t dim, uint32_t min_len,
                                  uint32_t max_len, chimera_calibration_truth_kind truth_kind)
{
    char dir[512], tok[600], len[600], idx[600];
    test_path(dir, sizeof dir, name);
    chimera_synth_opts so = {.n_docs = 19000, .dim = dim, .n_queries = 1, .seed = 11,
                             .min_len = min_len, .max_len = max_len};
    chimera_error err;
    CHECK_OK(chimera_synth_write(dir, &so, &err), &err);
    snprintf(tok, sizeof tok, "%s/tokens.npy", dir);
    snprintf(len, sizeof len, "%s/doclens.npy", dir);
    chimera_corpus *c = NULL;
    CHECK_OK(chimera_corpus_open(tok, len, NULL, NULL, &c, &err), &err);
    if (!c) return;
    CHECKF(chimera_calibration_truth(&c->c) == truth_kind,
           "%s: %lld tokens: the calibration's truth is not the one this corpus is for", name,
           (long long)chimera_corpus_n_tokens(c));
    snprintf(idx, sizeof idx, "%s-idx", dir);
    chimera_build_opts bo = {.n_threads = 2, .no_sync = 1};
    chimera_build_report rep;
    CHECK_OK(chimera_index_build(c, idx, &bo, &rep, &err), &err);
    CHECKF(rep.n_calibrated == 2 && rep.calibrated[1].k == 100, "%s: calibrated %d settings",
           name, rep.n_calibrated);
    if (truth_kind != CAL_TRUTH_CANDIDATES && rep.n_calibrated == 2)
        check_reported_recall(c, idx, &rep);
    chimera_index *ix = NULL;
    chimera_queries *q = NULL;
    CHECK_OK(chimera_index_open(idx, NULL, &ix, &err), &err);
    CHECK_OK(chimera_corpus_sample_queries(c, 100, 0, 12345, &q, &err), &err);
    if (ix && q && rep.n_calibrated == 2) {
        enum { K = 100, NQ = 100 };
        int64_t *truth = malloc((size_t)NQ * K * sizeof *truth);
        int64_t *ids = malloc((size_t)NQ * K * sizeof *ids);
        float *sc = malloc((size_t)NQ * K * sizeof *sc);
        chimera_exact_opts eo = {.n_threads = 2};
        chimera_search_opts sop = {.n_threads = 2};
        CHECK_OK(chimera_corpus_search(c, q, K, &eo, truth, sc, &err), &err);
        CHECK_OK(chimera_index_search(ix, q, K, NULL, &sop, ids, sc, NULL, &err), &err);
        double hit = 0;
        for (int i = 0; i < NQ; i++)
            for (int r = 0; r < K; r++)
                for (int t = 0; t < K; t++)
                    if (ids[i * K + r] == truth[i * K + t]) {
                        hit++;
                        break;
                    }
        double recall = hit / (NQ * K), said = rep.calibrated[1].recall;
        printf("%s calibration: k = 100 default %u / %u / %u, held-out Recall@100 %.4f, "
               "on fresh pseudo-queries against exact truth %.4f\n", name,
               rep.calibrated[1].n_probe, rep.calibrated[1].k_refine, rep.calibrated[1].k_fullbit,
               said, recall);
        CHECKF(fabs(recall - said) < 0.03,
               "%s: k = 100 default: held-out Recall@100 %.4f reported, %.4f against exact truth",
               name, said, recall);
        free(truth);
        free(ids);
        free(sc);
    }
    chimera_queries_free(q);
    chimera_index_close(ix);
    chimera_corpus_close(c);
}

/* The truth on shapes alone (chimera_calibration_truth reads sizes and offsets only):
 * 96 pseudo-queries of 13.25 tokens on average, 1.7e10 and 5.1e10 multiply-adds. */
static chimera_calibration_truth_kind truth_of(int64_t n_docs, int64_t doc_len, uint32_t dim)
{
    data_corpus c = {.n_tokens = n_docs * doc_len, .dim = dim, .n_docs = n_docs};
    c.doc_off = malloc((size_t)(n_docs + 1) * sizeof *c.doc_off);
    for (int64_t d = 0; d <= n_docs; d++) c.doc_off[d] = d * doc_len;
    chimera_calibration_truth_kind t = chimera_calibration_truth(&c);
    free(c.doc_off);
    return t;
}

static void test_calibration_truth_rule(void)
{
    CHECK(truth_of(1000, 60, 128) == CAL_TRUTH_EXACT);           /* 9.8e9 */
    CHECK(truth_of(1000, 150, 128) == CAL_TRUTH_EXACT_HELDOUT);  /* 2.4e10 */
    CHECK(truth_of(1000, 350, 128) == CAL_TRUTH_CANDIDATES);     /* 5.7e10 */
    /* with one k (under 500 documents) there is no k = 100 held-out third */
    CHECK(truth_of(400, 350, 128) == CAL_TRUTH_CANDIDATES);      /* 2.3e10 */
    CHECK(truth_of(400, 150, 64) == CAL_TRUTH_EXACT);            /* 4.9e9 */
}

static void test_calibrated_deep(void)
{
    check_calibrated_deep("cal-deep", 80, 24, 40, CAL_TRUTH_CANDIDATES);
    check_calibrated_deep("cal-heldout", 32, 24, 40, CAL_TRUTH_EXACT_HELDOUT);
    check_calibrated_deep("cal-short", 32, 4, 12, CAL_TRUTH_EXACT);
}

int main(void)
{
    test_interval();
    test_cost_model();
    test_grow_by_cost();
    test_grow_ratios();
    test_grow_widened();
    test_grow_plateau();
    test_backward_widened();
    test_heldout_halving();
    test_backward_interaction();
    test_backward_covered();
    test_frontier();
    test_frontier_rerank();
    test_pseudo_queries();
    test_calibrated();
    test_calibration_truth_rule();
    test_calibrated_deep();
    return check_report();
}
