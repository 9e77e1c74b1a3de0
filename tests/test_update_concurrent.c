/* Deletes committed while searches run: one thread deletes documents in 20 commits
 * through chimera_index_delete while four threads search one handle and refresh it
 * (chimera_index_refresh) between searches. A search that starts after the handle saw
 * generation g must not return a document deleted by a commit up to g, and no search
 * may fail; refresh and search race on the handle's view by design (a search finishes
 * on the view it started with). scripts/test.sh also runs this under ThreadSanitizer. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "core/alloc.h"
#include "data/synth.h"
#include "tmpdir.h"

#define N_SEARCHERS 4
#define N_BATCHES 20
#define K 20

typedef struct shared {
    char dir[512];
    chimera_index *index;
    chimera_queries *q;
    int64_t nq;
    atomic_int done;
    atomic_int searches; /* completed, over all threads */
} shared;

typedef struct searcher {
    shared *sh;
    int searches, stale, failures;
    char first[300];
} searcher;

/* Document row d is deleted by batch d % N_BATCHES if that is even (half the batches
 * delete, half would be too many to leave results). The build is generation 1 and batch
 * i commits generation 2 + i. */
static int deleted_by(int64_t row, uint64_t gen)
{
    int64_t b = row % N_BATCHES;
    return b % 2 == 0 && (uint64_t)(b / 2) + 2 <= gen;
}

static void *search_main(void *arg)
{
    searcher *s = arg;
    shared *sh = s->sh;
    int64_t *ids = cm_malloc((size_t)sh->nq * K * sizeof *ids);
    float *sc = cm_malloc((size_t)sh->nq * K * sizeof *sc);
    chimera_search_opts so = {.n_threads = 1};
    while (ids && sc && !atomic_load(&sh->done)) {
        chimera_error err;
        int changed;
        if (chimera_index_refresh(sh->index, &changed, &err) != CHIMERA_OK) {
            if (!s->failures++) snprintf(s->first, sizeof s->first, "refresh: %s", err.msg);
            continue;
        }
        uint64_t g = chimera_index_generation(sh->index); /* the search sees g or later */
        if (chimera_index_search(sh->index, sh->q, K, NULL, &so, ids, sc, NULL, &err) != CHIMERA_OK) {
            if (!s->failures++) snprintf(s->first, sizeof s->first, "search: %s", err.msg);
            continue;
        }
        s->searches++;
        atomic_fetch_add(&sh->searches, 1);
        for (int64_t i = 0; i < sh->nq * K; i++)
            if (ids[i] >= 0 && deleted_by(ids[i], g) && !s->stale++)
                snprintf(s->first, sizeof s->first, "document %lld returned at generation %llu",
                         (long long)ids[i], (unsigned long long)g);
    }
    cm_free(ids);
    cm_free(sc);
    return NULL;
}

int main(void)
{
    chimera_error err;
    shared sh;
    memset(&sh, 0, sizeof sh);
    data_synth_corpus s;
    chimera_synth_opts so = {.n_docs = 800, .dim = 32, .n_queries = 16, .query_len = 8,
                             .seed = 31, .min_len = 8, .max_len = 40, .vocab = 3000, .n_topics = 30};
    CHECK_OK(data_synth_generate(&so, &s, &err), &err);
    chimera_corpus *c = NULL;
    CHECK_OK(chimera_corpus_wrap(s.tokens, s.n_tokens, s.dim, s.doclens, s.n_docs, NULL, NULL, &c,
                                 &err), &err);
    CHECK_OK(chimera_queries_new(s.queries, s.n_queries, s.dim, NULL, s.query_len, &sh.q, &err), &err);
    sh.nq = s.n_queries;
    test_path(sh.dir, sizeof sh.dir, "idx");
    chimera_build_opts bo = {.n_clusters = 64, .seed = 2, .n_threads = 1, .no_sync = 1};
    if (c) CHECK_OK(chimera_index_build(c, sh.dir, &bo, NULL, &err), &err);
    if (c) CHECK_OK(chimera_index_open(sh.dir, NULL, &sh.index, &err), &err);
    if (!sh.index || !sh.q) return check_report();
    searcher w[N_SEARCHERS];
    pthread_t th[N_SEARCHERS];
    for (int t = 0; t < N_SEARCHERS; t++) {
        memset(&w[t], 0, sizeof w[t]);
        w[t].sh = &sh;
        CHECK(pthread_create(&th[t], NULL, search_main, &w[t]) == 0);
    }
    /* the deleter: batch i deletes rows with row % N_BATCHES == 2 i (ids are rows) */
    int64_t *ids = cm_malloc((size_t)s.n_docs * sizeof *ids);
    int commits = 0;
    for (int i = 0; i < N_BATCHES / 2; i++) {
        int64_t n = 0;
        for (int64_t d = 2 * i; d < s.n_docs; d += N_BATCHES) ids[n++] = d;
        chimera_update_opts uo = {.no_sync = 1};
        chimera_update_report rep;
        CHECK_OK(chimera_index_delete(sh.dir, ids, n, &uo, &rep, &err), &err);
        CHECK(rep.generation == (uint64_t)i + 2);
        commits++;
        /* let the searchers see this generation a few times before the next commit */
        int seen = atomic_load(&sh.searches);
        for (int spin = 0; spin < 20000 && atomic_load(&sh.searches) < seen + 2 * N_SEARCHERS; spin++) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
    atomic_store(&sh.done, 1);
    int searches = 0, stale = 0, failures = 0;
    for (int t = 0; t < N_SEARCHERS; t++) {
        pthread_join(th[t], NULL);
        CHECKF(w[t].stale == 0 && w[t].failures == 0, "searcher %d: %d stale results, %d failures: %s",
               t, w[t].stale, w[t].failures, w[t].first);
        searches += w[t].searches;
        stale += w[t].stale;
        failures += w[t].failures;
    }
    /* at the end the handle sees every deletion */
    int changed;
    CHECK_OK(chimera_index_refresh(sh.index, &changed, &err), &err);
    CHECK(chimera_index_n_docs(sh.index) == s.n_docs - s.n_docs / 2);
    printf("%d delete commits under %d searching threads: %d searches, %d returned a deleted "
           "document, %d failed\n", commits, N_SEARCHERS, searches, stale, failures);
    CHECK(searches > 0);
    cm_free(ids);
    chimera_index_close(sh.index);
    chimera_queries_free(sh.q);
    chimera_corpus_close(c);
    data_synth_free(&s);
    return check_report();
}
