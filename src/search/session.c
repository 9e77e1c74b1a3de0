/* Search sessions and the scheduling of one call's queries over a session's workers
 * (session.h says why sessions are pooled).
 *
 * Scheduling. In throughput mode the queries are cut into blocks of at most
 * SEARCH_BLOCK, small enough that every worker gets several (uneven queries balance);
 * workers take blocks from the pool's counter. In latency mode there
 * is one worker and blocks of one query, and the backend gets all the threads. Neither
 * depends on which session runs the call, so results are the same whichever session,
 * and however many other searches, run at the same time.
 *
 * The pool's lock guards only its idle list: it is held to take or return a session,
 * never while one is made, freed (which joins threads) or searched. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/pool.h"
#include "search/session.h"
#include "core/alloc.h"

/* Queries per task in throughput mode, at most: tasks few enough that taking one costs
 * nothing beside its queries. */
#define SEARCH_BLOCK 16

typedef struct sp_session {
    struct sp_session *next; /* in the idle list */
    sp_engine *engine;
    cm_pool *pool;
    sp_params max; /* the engine's maxima */
    uint32_t max_m;
    int workers, threads;
    char backend[16]; /* as asked for ("auto" stays "auto") */
} sp_session;

struct sp_sessions {
    const ix_index *ix;
    pthread_mutex_t mu;
    sp_session *idle; /* guarded by mu */
};

static void session_free(sp_session *ss)
{
    if (!ss) return;
    sp_engine_free(ss->engine);
    cm_pool_free(ss->pool);
    cm_free(ss);
}

chimera_status sp_sessions_new(const ix_index *ix, sp_sessions **out, chimera_error *err)
{
    *out = NULL;
    sp_sessions *s = cm_calloc(1, sizeof *s);
    if (!s) return cm_fail(err, CHIMERA_ERR_NOMEM, "search sessions: out of memory");
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        cm_free(s);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "search sessions: cannot create a lock");
    }
    s->ix = ix;
    *out = s;
    return CHIMERA_OK;
}

void sp_sessions_free(sp_sessions *s)
{
    if (!s) return;
    while (s->idle) {
        sp_session *ss = s->idle;
        s->idle = ss->next;
        session_free(ss);
    }
    pthread_mutex_destroy(&s->mu);
    cm_free(s);
}

void sp_sessions_adopt(sp_sessions *to, sp_sessions *from)
{
    pthread_mutex_lock(&from->mu);
    sp_session *list = from->idle;
    from->idle = NULL;
    pthread_mutex_unlock(&from->mu);
    while (list) {
        sp_session *ss = list;
        list = ss->next;
        chimera_error err;
        if (sp_engine_refresh(ss->engine, to->ix, &err) != CHIMERA_OK) {
            session_free(ss); /* made anew when a search needs one */
            continue;
        }
        pthread_mutex_lock(&to->mu);
        ss->next = to->idle;
        to->idle = ss;
        pthread_mutex_unlock(&to->mu);
    }
}

static int same_shape(const sp_session *ss, const char *backend, int workers, int threads)
{
    return strcmp(ss->backend, backend) == 0 && ss->workers == workers && ss->threads == threads;
}

static int fits(const sp_session *ss, const char *backend, int workers, int threads,
                const sp_params *p, uint32_t max_m)
{
    return same_shape(ss, backend, workers, threads) && max_m <= ss->max_m &&
           p->k <= ss->max.k && p->n_probe <= ss->max.n_probe &&
           p->n_probe_room <= ss->max.n_probe && p->k_fullbit_filtered <= ss->max.k_fullbit &&
           p->k_refine_filtered <= ss->max.k_refine &&
           p->k_refine <= ss->max.k_refine && p->k_fullbit <= ss->max.k_fullbit &&
           p->rerank_depth <= ss->max.rerank_depth;
}

#define MAX2(a, b) ((a) > (b) ? (a) : (b))

/* Takes an idle session that fits the call, or makes one. When none fits, one idle
 * session is retired (so idle sessions never outnumber the searches that ran at once);
 * if it had the call's shape, the new one takes the larger of its maxima and the
 * call's, so callers alternating between, say, k = 10 and k = 100 settle on one session
 * instead of rebuilding it each time. */
static chimera_status session_take(sp_sessions *s, const char *backend, int workers,
                                   int threads, const sp_params *p, uint32_t max_m,
                                   sp_session **out, chimera_error *err)
{
    *out = NULL;
    sp_session *stale = NULL;
    pthread_mutex_lock(&s->mu);
    for (sp_session **pp = &s->idle; *pp; pp = &(*pp)->next)
        if (fits(*pp, backend, workers, threads, p, max_m)) {
            *out = *pp;
            *pp = (*pp)->next;
            break;
        }
    if (!*out && s->idle) {
        sp_session **victim = &s->idle;
        for (sp_session **pp = &s->idle; *pp; pp = &(*pp)->next)
            if (same_shape(*pp, backend, workers, threads)) {
                victim = pp;
                break;
            }
        stale = *victim;
        *victim = stale->next;
    }
    pthread_mutex_unlock(&s->mu);
    if (*out) {
        (*out)->next = NULL;
        return CHIMERA_OK;
    }
    sp_params mx = *p;
    if (mx.n_probe_room > mx.n_probe) mx.n_probe = mx.n_probe_room;
    if (mx.k_fullbit_filtered > mx.k_fullbit) mx.k_fullbit = mx.k_fullbit_filtered;
    if (mx.k_refine_filtered > mx.k_refine) mx.k_refine = mx.k_refine_filtered;
    uint32_t mm = max_m;
    if (stale && same_shape(stale, backend, workers, threads)) {
        mx.k = MAX2(mx.k, stale->max.k);
        mx.n_probe = MAX2(mx.n_probe, stale->max.n_probe);
        mx.k_refine = MAX2(mx.k_refine, stale->max.k_refine);
        mx.k_fullbit = MAX2(mx.k_fullbit, stale->max.k_fullbit);
        mx.rerank_depth = MAX2(mx.rerank_depth, stale->max.rerank_depth);
        mm = MAX2(mm, stale->max_m);
    }
    /* freed before the new one is made, so a device holds at most one extra copy */
    session_free(stale);
    sp_session *ss = cm_calloc(1, sizeof *ss);
    if (!ss) return cm_fail(err, CHIMERA_ERR_NOMEM, "search: out of memory");
    chimera_status st = sp_engine_new(s->ix, backend, workers, threads, &mx, mm, &ss->engine, err);
    if (st != CHIMERA_OK) {
        cm_free(ss);
        return st;
    }
    ss->pool = cm_pool_new(workers);
    if (!ss->pool) {
        session_free(ss);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "search: cannot start threads");
    }
    ss->max = mx;
    ss->max_m = mm;
    ss->workers = workers;
    ss->threads = threads;
    snprintf(ss->backend, sizeof ss->backend, "%s", backend);
    *out = ss;
    return CHIMERA_OK;
}

static void session_give(sp_sessions *s, sp_session *ss)
{
    pthread_mutex_lock(&s->mu);
    ss->next = s->idle;
    s->idle = ss;
    pthread_mutex_unlock(&s->mu);
}

/* ---- one call's queries over a session's workers ------------------------------------ */

typedef struct search_job {
    sp_engine *engine;
    const data_queries *q;
    const sp_params *p;
    const sp_filter *const *filters; /* per query, or NULL */
    int64_t *ids;
    float *scores;
    double *latency;
    sp_stats *stats;        /* per worker */
    chimera_status *status; /* per worker */
    chimera_error *errs;    /* per worker */
    int64_t block;          /* queries per task */
} search_job;

static void search_task(void *ctx, int64_t t, int w)
{
    search_job *j = ctx;
    const data_queries *q = j->q;
    int64_t i0 = t * j->block, i1 = i0 + j->block < q->n ? i0 + j->block : q->n;
    for (int64_t i = i0; i < i1 && j->status[w] == CHIMERA_OK; i++) {
        sp_params pq = *j->p;
        if (j->filters) pq.filter = j->filters[i];
        double t0 = cm_now();
        j->status[w] = sp_search(j->engine, w, q->tokens + q->off[i] * q->dim,
                                 (uint32_t)(q->off[i + 1] - q->off[i]), &pq, j->ids + i * j->p->k,
                                 j->scores + i * j->p->k, &j->stats[w], &j->errs[w]);
        if (j->latency) j->latency[i] = cm_now() - t0;
    }
}

/* Sums the workers' measurements into the caller's profile (its latency array kept). */
static void profile_reduce(chimera_search_profile *profile, const sp_stats *stats, int workers,
                           double seconds, const char *backend)
{
    double *lat = profile->latency;
    memset(profile, 0, sizeof *profile);
    profile->latency = lat;
    profile->seconds = seconds;
    for (int w = 0; w < workers; w++) {
        profile->t_generate += stats[w].t_generate;
        profile->t_refine += stats[w].t_refine;
        profile->t_score1 += stats[w].t_score1;
        profile->t_fullbit += stats[w].t_fullbit;
        profile->t_fullbit_wait += stats[w].t_fullbit_wait;
        profile->t_rerank += stats[w].t_rerank;
        profile->t_interaction += stats[w].t_interaction;
        profile->n_scored1 += stats[w].n_scored1;
        profile->n_rows += stats[w].n_rows;
        profile->n_probed += stats[w].n_probed;
        profile->n_walked += stats[w].n_walked;
        profile->n_reranked += stats[w].n_reranked;
        profile->tokens_refined += stats[w].tokens_refined;
        profile->docs_touched += stats[w].docs_touched;
        profile->n_refined += stats[w].n_refined;
        profile->n_fullbit += stats[w].n_fullbit;
        profile->bytes_up += stats[w].bytes_up;
        profile->bytes_down += stats[w].bytes_down;
    }
    snprintf(profile->backend, sizeof profile->backend, "%s", backend);
}

chimera_status sp_sessions_search(sp_sessions *s, const data_queries *q, const sp_params *p,
                                  const sp_filter *const *filters, uint32_t max_m,
                                  const sp_run_opts *o, int64_t *ids, float *scores,
                                  chimera_search_profile *profile, chimera_error *err)
{
    int workers = o->latency_mode ? 1 : o->n_threads;
    if (workers > q->n) workers = (int)q->n;
    if (workers < 1) workers = 1;
    int be_threads = o->latency_mode ? o->n_threads : 1;
    sp_stats *stats = cm_calloc((size_t)workers, sizeof *stats);
    chimera_status *status = cm_calloc((size_t)workers, sizeof *status);
    chimera_error *errs = cm_calloc((size_t)workers, sizeof *errs);
    sp_session *ss = NULL;
    chimera_status st = CHIMERA_OK;
    if (!stats || !status || !errs) {
        st = cm_fail(err, CHIMERA_ERR_NOMEM, "search: out of memory");
        goto done;
    }
    st = session_take(s, o->backend, workers, be_threads, p, max_m, &ss, err);
    if (st != CHIMERA_OK) goto done;
    int64_t block = o->latency_mode ? 1 : q->n / (4 * (int64_t)workers);
    if (block > SEARCH_BLOCK) block = SEARCH_BLOCK;
    if (block < 1) block = 1;
    search_job j = {ss->engine, q,     p,      filters, ids, scores,
                    profile ? profile->latency : NULL, stats, status, errs, block};
    double t0 = cm_now();
    cm_pool_run(ss->pool, (q->n + block - 1) / block, search_task, &j);
    double el = cm_now() - t0;
    for (int w = 0; w < workers; w++)
        if (status[w] != CHIMERA_OK) {
            st = status[w];
            if (err) *err = errs[w];
            break;
        }
    if (profile) profile_reduce(profile, stats, workers, el, sp_engine_backend(ss->engine));
    session_give(s, ss);
done:
    cm_free(stats);
    cm_free(status);
    cm_free(errs);
    return st;
}
