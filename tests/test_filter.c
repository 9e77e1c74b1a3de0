/* Search filters (chimera_filter, chimera_search_opts.filter / query_filters): at every
 * selectivity from half the corpus down to a single document, and for exclusion,
 *   - every result is an allowed document (a filter is never violated), and there are
 *     exactly min(k, allowed) results;
 *   - Recall@10 against exact search over the allowed documents only is at least the
 *     unfiltered search's Recall@10 against unfiltered exact search, minus 0.02 (the
 *     filter acts inside the pipeline, and selective filters score their documents
 *     directly, so a filter never costs recall);
 *   - per-query filters give each query its own set;
 *   - deleted documents and ids the index does not hold are never returned, even when
 *     a filter lists them. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/alloc.h"
#include "core/rng.h"
#include "data/synth.h"
#include "tmpdir.h"

#define K 10

typedef struct fixture {
    data_synth_corpus s;
    int64_t *off;
    chimera_index *index;
    chimera_queries *q;
    int64_t nq;
    char dir[512];
} fixture;

/* Exact top-K over the documents whose row is allowed (ids are rows). */
static void exact_subset(const fixture *f, const uint8_t *allowed, int64_t *truth)
{
    chimera_error err;
    int64_t nd = 0, nt = 0;
    for (int64_t d = 0; d < f->s.n_docs; d++)
        if (allowed[d]) nd++, nt += f->s.doclens[d];
    float *tok = cm_malloc((size_t)(nt ? nt : 1) * f->s.dim * sizeof *tok);
    int64_t *lens = cm_malloc((size_t)(nd ? nd : 1) * sizeof *lens);
    int64_t *ids = cm_malloc((size_t)(nd ? nd : 1) * sizeof *ids);
    int64_t j = 0, t = 0;
    for (int64_t d = 0; d < f->s.n_docs; d++) {
        if (!allowed[d]) continue;
        memcpy(tok + (size_t)t * f->s.dim, f->s.tokens + (size_t)f->off[d] * f->s.dim,
               (size_t)f->s.doclens[d] * f->s.dim * sizeof *tok);
        t += f->s.doclens[d];
        lens[j] = f->s.doclens[d];
        ids[j++] = d;
    }
    chimera_corpus *c = NULL;
    CHECK_OK(chimera_corpus_wrap(tok, nt, f->s.dim, lens, nd, ids, NULL, &c, &err), &err);
    float *sc = cm_malloc((size_t)f->nq * K * sizeof *sc);
    if (c) CHECK_OK(chimera_corpus_search(c, f->q, K, NULL, truth, sc, &err), &err);
    chimera_corpus_close(c);
    cm_free(sc);
    cm_free(tok);
    cm_free(lens);
    cm_free(ids);
}

/* Searches with filter (NULL: none) and checks every result is allowed and the count is
 * min(K, allowed); returns Recall@K against the exact search over the allowed rows. */
static double filtered_recall(const fixture *f, const uint8_t *allowed, int64_t n_allowed,
                              const chimera_filter *filter, const char *what)
{
    chimera_error err;
    int64_t *ids = cm_malloc((size_t)f->nq * K * sizeof *ids), *truth = cm_malloc((size_t)f->nq * K * sizeof *truth);
    float *sc = cm_malloc((size_t)f->nq * K * sizeof *sc);
    chimera_search_opts so = {.n_threads = 2, .filter = filter};
    CHECK_OK(chimera_index_search(f->index, f->q, K, NULL, &so, ids, sc, NULL, &err), &err);
    int64_t want = n_allowed < K ? n_allowed : K, bad = 0, short_ = 0;
    for (int64_t i = 0; i < f->nq; i++) {
        int64_t got = 0;
        for (int r = 0; r < K; r++) {
            int64_t id = ids[i * K + r];
            if (id < 0) continue;
            got++;
            bad += id >= f->s.n_docs || !allowed[id];
        }
        short_ += got != want;
    }
    CHECKF(bad == 0, "%s: %lld results outside the filter", what, (long long)bad);
    CHECKF(short_ == 0, "%s: %lld queries without min(k, %lld) results", what, (long long)short_,
           (long long)n_allowed);
    exact_subset(f, allowed, truth);
    double r = chimera_results_eval_recall(ids, K, truth, K, f->nq, K);
    cm_free(ids);
    cm_free(truth);
    cm_free(sc);
    return r;
}

int main(void)
{
    chimera_error err;
    fixture f;
    memset(&f, 0, sizeof f);
    chimera_synth_opts so = {.n_docs = 3000, .dim = 64, .n_queries = 40, .query_len = 12,
                             .seed = 41, .min_len = 8, .max_len = 60, .vocab = 6000, .n_topics = 60};
    CHECK_OK(data_synth_generate(&so, &f.s, &err), &err);
    f.off = cm_malloc((size_t)(f.s.n_docs + 1) * sizeof *f.off);
    f.off[0] = 0;
    for (int64_t d = 0; d < f.s.n_docs; d++) f.off[d + 1] = f.off[d] + f.s.doclens[d];
    chimera_corpus *c = NULL;
    CHECK_OK(chimera_corpus_wrap(f.s.tokens, f.s.n_tokens, f.s.dim, f.s.doclens, f.s.n_docs, NULL,
                                 NULL, &c, &err), &err);
    CHECK_OK(chimera_queries_new(f.s.queries, f.s.n_queries, f.s.dim, NULL, f.s.query_len, &f.q,
                                 &err), &err);
    f.nq = f.s.n_queries;
    test_path(f.dir, sizeof f.dir, "idx");
    chimera_build_opts bo = {.seed = 7, .no_sync = 1};
    if (c) CHECK_OK(chimera_index_build(c, f.dir, &bo, NULL, &err), &err);
    chimera_corpus_close(c);
    CHECK_OK(chimera_index_open(f.dir, NULL, &f.index, &err), &err);
    if (!f.index || !f.q) return check_report();

    int64_t D = f.s.n_docs;
    uint8_t *allowed = cm_malloc((size_t)D);
    int64_t *list = cm_malloc((size_t)D * sizeof *list);
    memset(allowed, 1, (size_t)D);
    double base = filtered_recall(&f, allowed, D, NULL, "no filter");
    printf("no filter: Recall@10 %.4f\n", base);
    CHECK(base > 0.8);
    cm_rng rng;
    cm_rng_seed(&rng, 5, 0);
    const double sel[] = {0.5, 0.3, 0.1, 0.01, 0.001, 1.0 / 3000}; /* 0.5, 0.3: refinement */
    for (int exclude = 0; exclude < 2; exclude++)
        for (size_t si = 0; si < sizeof sel / sizeof sel[0]; si++) {
            if (exclude && sel[si] < 0.01) continue; /* excluding 0.1% changes nothing */
            int64_t n = 0;
            for (int64_t d = 0; d < D; d++) {
                int in = cm_rng_uniform(&rng) < sel[si];
                if (in) list[n++] = d;
                allowed[d] = exclude ? !in : in;
            }
            if (!exclude && n == 0) { /* at least one document */
                list[n++] = 17;
                allowed[17] = 1;
            }
            chimera_filter *flt = NULL;
            CHECK_OK(chimera_filter_new(list, n, exclude, &flt, &err), &err);
            char what[64];
            snprintf(what, sizeof what, "%s %.4f%%", exclude ? "exclude" : "allow", 100 * sel[si]);
            int64_t n_allowed = exclude ? D - n : n;
            double r = filtered_recall(&f, allowed, n_allowed, flt, what);
            printf("%-18s (%5lld allowed): Recall@10 %.4f against exact over them\n", what,
                   (long long)n_allowed, r);
            CHECKF(r >= base - 0.02, "%s: Recall@10 %.4f, unfiltered %.4f", what, r, base);
            chimera_filter_free(flt);
        }

    /* per-query filters: query i may return only rows congruent to i mod 7 */
    {
        chimera_filter *qf[64] = {0};
        for (int64_t i = 0; i < f.nq; i++) {
            int64_t n = 0;
            for (int64_t d = i % 7; d < D; d += 7) list[n++] = d;
            CHECK_OK(chimera_filter_new(list, n, 0, &qf[i], &err), &err);
        }
        int64_t *ids = cm_malloc((size_t)f.nq * K * sizeof *ids);
        float *sc = cm_malloc((size_t)f.nq * K * sizeof *sc);
        chimera_search_opts so2 = {.n_threads = 2, .query_filters = (const chimera_filter *const *)qf};
        CHECK_OK(chimera_index_search(f.index, f.q, K, NULL, &so2, ids, sc, NULL, &err), &err);
        int64_t bad = 0;
        for (int64_t i = 0; i < f.nq * K; i++) bad += ids[i] < 0 || ids[i] % 7 != (i / K) % 7;
        CHECKF(bad == 0, "per-query filters: %lld results outside their query's set", (long long)bad);
        for (int64_t i = 0; i < f.nq; i++) chimera_filter_free(qf[i]);
        cm_free(ids);
        cm_free(sc);
    }

    /* deleted documents and unknown ids stay out even when listed */
    {
        int64_t del[3] = {3, 4, 5}, lst[6] = {3, 4, 5, 6, 999999, 123456};
        chimera_update_opts uo = {.no_sync = 1};
        CHECK_OK(chimera_index_delete(f.dir, del, 3, &uo, NULL, &err), &err);
        int changed;
        CHECK_OK(chimera_index_refresh(f.index, &changed, &err), &err);
        chimera_filter *flt = NULL;
        CHECK_OK(chimera_filter_new(lst, 6, 0, &flt, &err), &err);
        int64_t ids[40 * K];
        float sc[40 * K];
        chimera_search_opts so3 = {.n_threads = 1, .filter = flt};
        CHECK_OK(chimera_index_search(f.index, f.q, K, NULL, &so3, ids, sc, NULL, &err), &err);
        int ok = 1;
        for (int64_t i = 0; i < f.nq; i++)
            ok &= ids[i * K] == 6 && ids[i * K + 1] == -1;
        CHECKF(ok, "a filter listing deleted and unknown ids returned them (or lost the one "
                   "live document)");
        chimera_filter_free(flt);
        int64_t neg = -1;
        CHECK_STATUS(chimera_filter_new(&neg, 1, 0, &flt, &err), CHIMERA_ERR_INVALID_ARG, &err);
        CHECK(strstr(err.msg, "negative") != NULL);
    }
    cm_free(allowed);
    cm_free(list);
    chimera_index_close(f.index);
    chimera_queries_free(f.q);
    cm_free(f.off);
    data_synth_free(&f.s);
    return check_report();
}
