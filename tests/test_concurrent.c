/* One opened index and one corpus, used from many threads at once through the public
 * API (chimera.h: an opened handle is read-only; search scratch is pooled inside it).
 *
 * Eight threads search one index handle concurrently, each running every configuration
 * of a mixed set several times in its own order: k = 10 and 100, different n_probe,
 * k_refine, k_fullbit, chunks, impute and probe modes, throughput and latency mode, one
 * and two threads per call. Every result must be byte-identical (ids and scores) to the
 * same configuration run alone on a fresh handle from one thread. Meanwhile three more
 * threads run exact search on one corpus handle with different k and thread counts,
 * also byte-identical to a run alone. Errors are per call: between its good calls each
 * thread makes calls that fail (queries of the wrong dimension, for search and exact
 * search; an out-of-range parameter), and each failing call's own chimera_error must
 * name its cause while every successful call, in whatever thread, comes back with a
 * clear error record (CHIMERA_OK, empty message) and untouched results. The test runs
 * in every build and, in scripts/test.sh, under ThreadSanitizer, which also checks
 * that no two calls touch the same memory without synchronisation. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/synth.h"
#include "tmpdir.h"
#include "core/alloc.h"

#define N_SEARCH_THREADS 8
#define N_EXACT_THREADS 3
#define ROUNDS 3
#define KMAX 100

typedef struct config {
    uint32_t k;
    chimera_search_params p;
    chimera_search_opts o;
} config;

static const config configs[] = {
    {10, {0}, {.n_threads = 1}},
    {100, {0}, {.n_threads = 2}},
    {10, {.n_probe = 4, .k_refine = 200, .k_fullbit = 50, .chunks = 2}, {.n_threads = 1}},
    {100, {.n_probe = 16, .impute = 1}, {.n_threads = 1}},
    {10, {.probe = 1, .chunks = 1}, {.n_threads = 2, .latency_mode = 1}},
    {10, {.probe = 2, .impute = 2, .n_probe = 12}, {.n_threads = 2}},
    {50, {.k_fullbit = 60, .k_refine = 300, .chunks = 8}, {.n_threads = 1, .latency_mode = 1}},
    /* the covered form in latency mode: full-bit scoring split over a pool */
    {100, {.k_fullbit = 240, .k_refine = 240}, {.n_threads = 2, .latency_mode = 1}},
};
#define N_CONFIGS ((int)(sizeof configs / sizeof configs[0]))

typedef struct exact_config {
    uint32_t k;
    int n_threads;
} exact_config;

static const exact_config exact_configs[] = {{10, 1}, {KMAX, 2}, {25, 1}};

/* Everything the threads share, read-only while they run. */
typedef struct fixture {
    chimera_corpus *corpus;
    chimera_index *index;
    chimera_queries *q, *q_bad; /* q_bad: another dimension */
    int64_t nq;
    int64_t *ref_ids[N_CONFIGS];
    float *ref_sc[N_CONFIGS];
    int64_t *exact_ids[N_EXACT_THREADS];
    float *exact_sc[N_EXACT_THREADS];
} fixture;

typedef struct worker {
    const fixture *f;
    int id;
    int mismatches, failures, leaks; /* counted here, checked by the main thread */
    char first_problem[512];
} worker;

static void note(worker *w, int *counter, const char *what, int cfg, const chimera_error *e)
{
    (*counter)++;
    if (!w->first_problem[0])
        snprintf(w->first_problem, sizeof w->first_problem, "thread %d, config %d: %s (%s: %.256s)",
                 w->id, cfg, what, chimera_status_str(e->code), e->msg);
}

/* A successful call must leave its error record clear. */
static int clear(const chimera_error *e) { return e->code == CHIMERA_OK && e->msg[0] == 0; }

static void *search_thread(void *arg)
{
    worker *w = arg;
    const fixture *f = w->f;
    size_t n = (size_t)f->nq * KMAX;
    int64_t *ids = cm_malloc(n * sizeof *ids);
    float *sc = cm_malloc(n * sizeof *sc);
    if (!ids || !sc) {
        w->failures++;
        goto done;
    }
    for (int r = 0; r < ROUNDS; r++)
        for (int i = 0; i < N_CONFIGS; i++) {
            int c = (i + w->id + r) % N_CONFIGS; /* every thread in its own order */
            const config *cf = &configs[c];
            chimera_error err;
            memset(&err, 0x5a, sizeof err); /* the call must clear it */
            chimera_status s = chimera_index_search(f->index, f->q, cf->k, &cf->p, &cf->o, ids,
                                                    sc, NULL, &err);
            if (s != CHIMERA_OK) {
                note(w, &w->failures, "search failed", c, &err);
                continue;
            }
            if (!clear(&err)) note(w, &w->leaks, "a successful search left a message", c, &err);
            size_t m = (size_t)f->nq * cf->k;
            if (memcmp(ids, f->ref_ids[c], m * sizeof *ids) != 0 ||
                memcmp(sc, f->ref_sc[c], m * sizeof *sc) != 0)
                note(w, &w->mismatches, "results differ from the single-threaded run", c, &err);
            /* a failing call between the good ones: its error is its own */
            if ((i + w->id) % 3 == 0) {
                int64_t keep = ids[0];
                chimera_error bad;
                s = chimera_index_search(f->index, f->q_bad, cf->k, &cf->p, &cf->o, ids, sc, NULL,
                                         &bad);
                if (s != CHIMERA_ERR_DIM || bad.code != CHIMERA_ERR_DIM ||
                    !strstr(bad.msg, "dimension 32") || ids[0] != keep)
                    note(w, &w->failures, "wrong-dimension search not reported as such", c, &bad);
                chimera_search_params wrong = cf->p;
                wrong.chunks = 65;
                s = chimera_index_search(f->index, f->q, cf->k, &wrong, &cf->o, ids, sc, NULL, &bad);
                if (s != CHIMERA_ERR_INVALID_ARG || !strstr(bad.msg, "chunks"))
                    note(w, &w->failures, "chunks 65 not refused", c, &bad);
            }
        }
done:
    cm_free(ids);
    cm_free(sc);
    return NULL;
}

static void *exact_thread(void *arg)
{
    worker *w = arg;
    const fixture *f = w->f;
    const exact_config *ec = &exact_configs[w->id];
    size_t n = (size_t)f->nq * ec->k;
    int64_t *ids = cm_malloc(n * sizeof *ids);
    float *sc = cm_malloc(n * sizeof *sc);
    if (!ids || !sc) {
        w->failures++;
        goto done;
    }
    chimera_exact_opts eo = {.n_threads = ec->n_threads};
    for (int r = 0; r < ROUNDS; r++) {
        chimera_error err;
        memset(&err, 0x5a, sizeof err);
        chimera_status s = chimera_corpus_search(f->corpus, f->q, ec->k, &eo, ids, sc, &err);
        if (s != CHIMERA_OK) {
            note(w, &w->failures, "exact search failed", w->id, &err);
            continue;
        }
        if (!clear(&err)) note(w, &w->leaks, "a successful exact search left a message", w->id, &err);
        if (memcmp(ids, f->exact_ids[w->id], n * sizeof *ids) != 0 ||
            memcmp(sc, f->exact_sc[w->id], n * sizeof *sc) != 0)
            note(w, &w->mismatches, "exact results differ from the single-threaded run", w->id, &err);
        chimera_error bad;
        s = chimera_corpus_search(f->corpus, f->q_bad, ec->k, &eo, ids, sc, &bad);
        if (s != CHIMERA_ERR_DIM || !strstr(bad.msg, "dimension 32"))
            note(w, &w->failures, "wrong-dimension exact search not reported as such", w->id, &bad);
    }
done:
    cm_free(ids);
    cm_free(sc);
    return NULL;
}

/* The references: every configuration alone, from this thread, on its own handle (so
 * none of its pooled state is shared with the concurrent run). */
static int references(fixture *f, const char *dir)
{
    chimera_error err;
    chimera_index *alone;
    CHECK_OK(chimera_index_open(dir, NULL, &alone, &err), &err);
    if (!alone) return 0;
    int ok = 1;
    for (int c = 0; c < N_CONFIGS; c++) {
        size_t n = (size_t)f->nq * configs[c].k;
        f->ref_ids[c] = cm_malloc(n * sizeof(int64_t));
        f->ref_sc[c] = cm_malloc(n * sizeof(float));
        if (!f->ref_ids[c] || !f->ref_sc[c]) return 0;
        chimera_status s = chimera_index_search(alone, f->q, configs[c].k, &configs[c].p,
                                                &configs[c].o, f->ref_ids[c], f->ref_sc[c], NULL, &err);
        CHECK_OK(s, &err);
        ok = ok && s == CHIMERA_OK;
    }
    chimera_index_close(alone);
    for (int t = 0; t < N_EXACT_THREADS; t++) {
        size_t n = (size_t)f->nq * exact_configs[t].k;
        f->exact_ids[t] = cm_malloc(n * sizeof(int64_t));
        f->exact_sc[t] = cm_malloc(n * sizeof(float));
        if (!f->exact_ids[t] || !f->exact_sc[t]) return 0;
        chimera_exact_opts eo = {.n_threads = exact_configs[t].n_threads};
        chimera_status s = chimera_corpus_search(f->corpus, f->q, exact_configs[t].k, &eo,
                                                 f->exact_ids[t], f->exact_sc[t], &err);
        CHECK_OK(s, &err);
        ok = ok && s == CHIMERA_OK;
    }
    return ok;
}

int main(void)
{
    chimera_error err;
    fixture f;
    memset(&f, 0, sizeof f);
    data_synth_corpus s;
    memset(&s, 0, sizeof s);
    chimera_synth_opts so = {.n_docs = 600, .dim = 64, .n_queries = 32, .query_len = 8,
                             .seed = 11, .min_len = 8, .max_len = 64, .vocab = 4000, .n_topics = 40};
    CHECK_OK(data_synth_generate(&so, &s, &err), &err);
    CHECK_OK(chimera_corpus_wrap(s.tokens, s.n_tokens, s.dim, s.doclens, s.n_docs, NULL, NULL,
                                 &f.corpus, &err), &err);
    CHECK_OK(chimera_queries_new(s.queries, s.n_queries, s.dim, NULL, s.query_len, &f.q, &err), &err);
    float *tok32 = cm_calloc((size_t)2 * 4 * 32, sizeof(float));
    for (int i = 0; tok32 && i < 8; i++) tok32[i * 32 + i] = 1.0f;
    CHECK_OK(chimera_queries_new(tok32, 2, 32, NULL, 4, &f.q_bad, &err), &err);
    char dir[512];
    test_path(dir, sizeof dir, "idx");
    chimera_build_opts bo = {.n_clusters = 64, .seed = 5, .n_threads = 2, .no_sync = 1};
    if (f.corpus) CHECK_OK(chimera_index_build(f.corpus, dir, &bo, NULL, &err), &err);
    if (f.corpus && f.q && f.q_bad) CHECK_OK(chimera_index_open(dir, NULL, &f.index, &err), &err);
    f.nq = chimera_queries_count(f.q);
    if (!f.index || !references(&f, dir)) goto done;

    worker w[N_SEARCH_THREADS + N_EXACT_THREADS];
    pthread_t th[N_SEARCH_THREADS + N_EXACT_THREADS];
    int started[N_SEARCH_THREADS + N_EXACT_THREADS] = {0};
    for (int t = 0; t < N_SEARCH_THREADS + N_EXACT_THREADS; t++) {
        memset(&w[t], 0, sizeof w[t]);
        w[t].f = &f;
        w[t].id = t < N_SEARCH_THREADS ? t : t - N_SEARCH_THREADS;
        started[t] = pthread_create(&th[t], NULL, t < N_SEARCH_THREADS ? search_thread : exact_thread,
                                    &w[t]) == 0;
        CHECK(started[t]);
    }
    int mism = 0, fail = 0, leaks = 0;
    for (int t = 0; t < N_SEARCH_THREADS + N_EXACT_THREADS; t++) {
        if (!started[t]) continue;
        pthread_join(th[t], NULL);
        CHECKF(w[t].mismatches == 0 && w[t].failures == 0 && w[t].leaks == 0,
               "%s thread %d: %d mismatches, %d failures, %d leaked messages; first: %s",
               t < N_SEARCH_THREADS ? "search" : "exact", w[t].id, w[t].mismatches, w[t].failures,
               w[t].leaks, w[t].first_problem);
        mism += w[t].mismatches;
        fail += w[t].failures;
        leaks += w[t].leaks;
    }
    printf("%d search threads x %d rounds x %d configurations on one index, %d exact threads x %d "
           "rounds on one corpus: %d results differ from single-threaded runs, %d failed calls, "
           "%d leaked messages\n",
           N_SEARCH_THREADS, ROUNDS, N_CONFIGS, N_EXACT_THREADS, ROUNDS, mism, fail, leaks);
    /* the handle is still good after all that */
    {
        int64_t *ids = cm_malloc((size_t)f.nq * 10 * sizeof *ids);
        float *sc = cm_malloc((size_t)f.nq * 10 * sizeof *sc);
        if (ids && sc) {
            CHECK_OK(chimera_index_search(f.index, f.q, 10, &configs[0].p, &configs[0].o, ids, sc,
                                          NULL, &err), &err);
            CHECK(memcmp(ids, f.ref_ids[0], (size_t)f.nq * 10 * sizeof *ids) == 0);
        }
        cm_free(ids);
        cm_free(sc);
    }
done:
    for (int c = 0; c < N_CONFIGS; c++) {
        cm_free(f.ref_ids[c]);
        cm_free(f.ref_sc[c]);
    }
    for (int t = 0; t < N_EXACT_THREADS; t++) {
        cm_free(f.exact_ids[t]);
        cm_free(f.exact_sc[t]);
    }
    chimera_index_close(f.index);
    chimera_queries_free(f.q);
    chimera_queries_free(f.q_bad);
    chimera_corpus_close(f.corpus);
    cm_free(tok32);
    data_synth_free(&s);
    return check_report();
}
