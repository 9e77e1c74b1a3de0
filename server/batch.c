/* batch.c — gathering concurrent search requests into one batched library call.
 *
 * The library's throughput mode spreads a call's queries over its threads, each thread
 * reusing its scratch for query after query; many clients each sending one query would,
 * searched one by one, get the latency mode's per-call overheads (thread wake-ups, a
 * session per concurrent caller) instead. So each index has one batcher thread: HTTP
 * threads queue parsed requests; the batcher takes everything queued and runs it as one
 * chimera_index_search, then answers every request from the shared output.
 *
 * When the batcher finds the queue empty it sleeps; the first request wakes it, and it
 * then waits up to the window (--batch-window-us, default 1000 µs) for company, unless
 * max_batch queries are already queued. Under load the window runs from the end of the
 * last call: the clients it answered come back just after it, and without the wait they
 * would form a second cohort that alternates with the first, each batch half the
 * clients. Measured on the demo corpus with 8 clients (bench/RESULTS.md, section 5.4):
 * mean batches of 4.2 queries with no window, 5.9 at 500 µs, 6.5 at 1000 µs, 7.8 at
 * 2000 µs, which costs a millisecond more per call. One client alone waits for nobody.
 *
 * Requests are grouped by what one call can share: k and the search parameters. Filters
 * are per query (chimera_search_opts.query_filters), so filtered and unfiltered requests
 * share a call. A request asking for a profile runs in a call of its own, so the stage
 * times it gets are its own. A batch of one query runs in latency mode (all threads on
 * it) when the batches before it were single queries too, the rest in throughput mode.
 * If a batched call fails, each of its requests is rerun alone, so one bad request
 * cannot fail its neighbours. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "server.h"

/* Calls of a single query in a row before one runs in latency mode (see run_group). */
#define SINGLES_FOR_LATENCY 3

struct srv_batcher {
    srv_index *ix;
    const srv_config *cfg;
    srv_metrics *m;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_search *head, *tail;
    int64_t queued;        /* queries queued */
    int stop;
    int singles;           /* consecutive calls of one query (the batcher thread's own) */
    int64_t last_nq;       /* queries of the last call */
    double last_end;       /* when it returned (srv_now) */
    pthread_t thread;
};

static void abs_deadline(struct timespec *ts, double t_mono)
{
    /* the condition variable is on CLOCK_MONOTONIC (see start) */
    ts->tv_sec = (time_t)t_mono;
    ts->tv_nsec = (long)((t_mono - (double)ts->tv_sec) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static int same_group(const srv_search *a, const srv_search *b)
{
    return !a->profile && !b->profile && a->k == b->k && a->params.n_probe == b->params.n_probe &&
           a->params.k_refine == b->params.k_refine && a->params.k_fullbit == b->params.k_fullbit &&
           a->params.chunks == b->params.chunks && a->params.impute == b->params.impute &&
           a->params.probe == b->params.probe && a->params.rerank_depth == b->params.rerank_depth &&
           a->params.k_interaction == b->params.k_interaction &&
           a->params.impute_scale == b->params.impute_scale && a->params.recall == b->params.recall &&
           a->params.chosen == b->params.chosen;
}

static void answer(srv_search *s, srv_answer *a)
{
    s->pending->answer = *a;
    s->pending->done(s->pending);
}

/* ix: the local index searched (NULL: a sharded one), for the setting that ran. */
static void answer_results(srv_search *s, const chimera_index *ix, const int64_t *ids,
                           const float *scores, const chimera_search_profile *prof,
                           int64_t batch_nq, double t_start)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *res = cJSON_AddArrayToObject(root, "results");
    int ok = root && res;
    for (int64_t i = 0; ok && i < s->nq; i++) {
        cJSON *r = cJSON_CreateObject();
        if (!r || !cJSON_AddItemToArray(res, r)) {
            cJSON_Delete(r);
            ok = 0;
            break;
        }
        cJSON *ia = cJSON_AddArrayToObject(r, "ids");
        cJSON *sa = cJSON_AddArrayToObject(r, "scores");
        ok = ia && sa;
        for (uint32_t j = 0; ok && j < s->k; j++) {
            int64_t id = ids[i * s->k + j];
            if (id < 0) break; /* padding: fewer hits than k */
            /* as integer text: a number cJSON prints from a double rounds ids past 2^53,
             * which indexes built outside the server may hold */
            char num[24];
            snprintf(num, sizeof num, "%lld", (long long)id);
            ok = cJSON_AddItemToArray(ia, cJSON_CreateRaw(num)) &&
                 cJSON_AddItemToArray(sa, cJSON_CreateNumber((double)scores[i * s->k + j]));
        }
    }
    if (ok && s->profile && prof) {
        cJSON *p = cJSON_AddObjectToObject(root, "profile");
        double n = (double)s->nq;
        ok = p != NULL;
        if (ok) {
            cJSON_AddNumberToObject(p, "queue_ms", 1e3 * (t_start - s->t_enqueued));
            cJSON_AddNumberToObject(p, "search_ms", 1e3 * prof->seconds);
            cJSON_AddNumberToObject(p, "generate_ms", 1e3 * prof->t_generate / n);
            cJSON_AddNumberToObject(p, "refine_ms", 1e3 * prof->t_refine / n);
            cJSON_AddNumberToObject(p, "score1_ms", 1e3 * prof->t_score1 / n);
            cJSON_AddNumberToObject(p, "fullbit_ms", 1e3 * prof->t_fullbit / n);
            cJSON_AddNumberToObject(p, "fullbit_wait_ms", 1e3 * prof->t_fullbit_wait / n);
            cJSON_AddNumberToObject(p, "rerank_ms", 1e3 * prof->t_rerank / n);
            cJSON_AddNumberToObject(p, "interaction_ms", 1e3 * prof->t_interaction / n);
            cJSON_AddNumberToObject(p, "n_scored1", (double)prof->n_scored1 / n);
            cJSON_AddNumberToObject(p, "n_rows", (double)prof->n_rows / n);
            cJSON_AddNumberToObject(p, "n_probed", (double)prof->n_probed / n);
            cJSON_AddNumberToObject(p, "n_walked", (double)prof->n_walked / n);
            cJSON_AddNumberToObject(p, "n_reranked", (double)prof->n_reranked / n);
            cJSON_AddNumberToObject(p, "tokens_refined", (double)prof->tokens_refined / n);
            cJSON_AddNumberToObject(p, "docs_touched", (double)prof->docs_touched / n);
            cJSON_AddNumberToObject(p, "n_refined", (double)prof->n_refined / n);
            cJSON_AddNumberToObject(p, "n_fullbit", (double)prof->n_fullbit / n);
            cJSON_AddNumberToObject(p, "bytes_up", (double)prof->bytes_up / n);
            cJSON_AddNumberToObject(p, "bytes_down", (double)prof->bytes_down / n);
            cJSON_AddStringToObject(p, "backend", prof->backend);
            cJSON_AddNumberToObject(p, "batch_queries", (double)batch_nq);
            /* the setting that ran: the parameters as given, then the tuned profile's
             * (recall), the index's calibrated defaults and the library's, with the
             * deeper depths of a filtered search; on a sharded index (each shard
             * resolves its own), the given ones over the library's defaults */
            chimera_search_params d = s->params;
            int resolved = ix && chimera_index_params_resolve(ix, s->k, &s->params,
                                                              s->filters != NULL, &d,
                                                              NULL) == CHIMERA_OK;
            if (!resolved) {
                d = s->params;
                chimera_search_params_default(s->k, &d);
            }
            cJSON *pp = cJSON_AddObjectToObject(p, "params");
            if (pp) {
                cJSON_AddNumberToObject(pp, "n_probe", d.n_probe);
                cJSON_AddNumberToObject(pp, "k_refine", d.k_refine);
                cJSON_AddNumberToObject(pp, "k_fullbit", d.k_fullbit);
                cJSON_AddNumberToObject(pp, "chunks", d.chunks);
                cJSON_AddStringToObject(pp, "impute", chimera_impute_name(d.impute));
                cJSON_AddStringToObject(pp, "probe", chimera_probe_name(d.probe));
                cJSON_AddNumberToObject(pp, "rerank_depth", d.rerank_depth);
                cJSON_AddNumberToObject(pp, "k_interaction",
                                        d.k_interaction < d.k_refine ? d.k_interaction : 0);
                /* unresolved, only when given: unset, each shard's calibrated scale
                 * applies */
                if (resolved || s->params.impute_scale > 0)
                    cJSON_AddNumberToObject(pp, "impute_scale", d.impute_scale);
            }
        }
    }
    srv_answer a = {0};
    if (ok) {
        srv_answer_json(&a, 200, root);
    } else {
        cJSON_Delete(root);
        srv_error e = {0};
        srv_fail(&e, 503, "OUT_OF_MEMORY", "out of memory building the answer");
        srv_answer_error(&a, &e);
    }
    answer(s, &a);
}

static void answer_failure(srv_search *s, int status, const char *code, const char *msg)
{
    srv_error e = {0};
    srv_fail(&e, status, code, "%s", msg);
    srv_answer a = {0};
    srv_answer_error(&a, &e);
    answer(s, &a);
}

/* Runs the requests of list[0..n) (one group) as one call; answers each; frees them. */
static void run_group(srv_batcher *b, srv_search **list, int n)
{
    int64_t nq = 0, ntok = 0;
    int any_filter = 0;
    for (int i = 0; i < n; i++) {
        nq += list[i]->nq;
        ntok += list[i]->n_tokens;
        any_filter |= list[i]->filters != NULL;
    }
    uint32_t k = list[0]->k, dim = b->ix->dim;
    float *tokens = n == 1 ? list[0]->tokens : malloc((size_t)ntok * dim * sizeof *tokens);
    int64_t *qlens = n == 1 ? list[0]->qlens : malloc((size_t)nq * sizeof *qlens);
    const chimera_filter **filters = any_filter ? calloc((size_t)nq, sizeof *filters) : NULL;
    int64_t *ids = malloc((size_t)nq * k * sizeof *ids);
    float *scores = malloc((size_t)nq * k * sizeof *scores);
    chimera_queries *q = NULL;
    chimera_error err = {0};
    chimera_status st = CHIMERA_ERR_NOMEM;
    chimera_search_profile prof = {0};
    double t_start = srv_now();
    if (!tokens || !qlens || (any_filter && !filters) || !ids || !scores) goto done;
    int64_t qo = 0, to = 0;
    for (int i = 0; i < n; i++) {
        srv_search *s = list[i];
        if (n > 1) {
            memcpy(tokens + (size_t)to * dim, s->tokens, (size_t)s->n_tokens * dim * sizeof *tokens);
            memcpy(qlens + qo, s->qlens, (size_t)s->nq * sizeof *qlens);
        }
        if (s->filters)
            for (int64_t j = 0; j < s->nq; j++) filters[qo + j] = s->filters[j];
        qo += s->nq;
        to += s->n_tokens;
    }
    st = chimera_queries_new(tokens, nq, dim, qlens, 0, &q, &err);
    if (st == CHIMERA_OK) {
        chimera_search_opts so;
        chimera_search_opts_default(&so);
        so.n_threads = b->cfg->search_threads;
        /* One query alone gets all threads (latency mode) once the load is that low for
         * a few calls in a row: the library pools one search session per mode, and a
         * batcher flipping between modes under load would rebuild it at every flip. */
        b->singles = nq == 1 ? b->singles + 1 : 0;
        b->last_nq = nq;
        so.latency_mode = b->singles > SINGLES_FOR_LATENCY;
        so.query_filters = (const chimera_filter *const *)filters;
        const srv_remote *r = b->ix->remote;
        st = r ? r->search(r->user, q, k, &list[0]->params, &so, ids, scores, &prof, &err)
               : chimera_index_search(b->ix->ix, q, k, &list[0]->params, &so, ids, scores, &prof, &err);
    }
done:
    if (st == CHIMERA_OK) {
        srv_metrics_batch(b->m, nq);
        int64_t off = 0;
        for (int i = 0; i < n; i++) {
            answer_results(list[i], b->ix->remote ? NULL : b->ix->ix, ids + off * k, scores + off * k, &prof, nq, t_start);
            off += list[i]->nq;
        }
    } else if (n > 1) {
        /* one request may be at fault: give each its own call and its own answer */
        for (int i = 0; i < n; i++) {
            srv_search *one = list[i];
            list[i] = NULL;
            run_group(b, &one, 1);
        }
    } else {
        char msg[300];
        snprintf(msg, sizeof msg, "search: %s", err.msg[0] ? err.msg : "out of memory");
        const srv_remote *r = b->ix->remote;
        int lost = srv_status_of(st) == 503 && r && r->healthy && !r->healthy(r->user);
        answer_failure(list[0], srv_status_of(st), lost ? "SHARDS_LOST"
                       : st == CHIMERA_ERR_NOMEM ? "OUT_OF_MEMORY" : "SEARCH_FAILED", msg);
    }
    b->last_end = srv_now();
    chimera_queries_free(q);
    if (n > 1) {
        free(tokens);
        free(qlens);
    }
    free(filters);
    free(ids);
    free(scores);
    for (int i = 0; i < n; i++) srv_search_free(list[i]);
}

/* Splits a taken queue into groups (in arrival order within each) and runs them, each
 * cut into calls of at most max_batch queries. */
static void run_all(srv_batcher *b, srv_search *head)
{
    while (head) {
        srv_search *lead = head, *group[256];
        int n = 0;
        int64_t nq = 0;
        /* take lead and every later request of its group, up to the batch size */
        for (srv_search **pp = &head; *pp;) {
            srv_search *s = *pp;
            if (n < 256 && (s == lead || (same_group(lead, s) && nq + s->nq <= b->cfg->max_batch))) {
                group[n++] = s;
                nq += s->nq;
                *pp = s->next;
                s->next = NULL;
            } else {
                pp = &s->next;
            }
        }
        run_group(b, group, n);
    }
}

static void *batcher_main(void *arg)
{
    srv_batcher *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->head && !b->stop) pthread_cond_wait(&b->cv, &b->mu);
        if (!b->head) break; /* stopping, nothing left */
        double window = 1e-6 * b->cfg->batch_window_us, first = b->head->t_enqueued, base;
        if (b->singles > SINGLES_FOR_LATENCY)
            base = first; /* one client at a time: nobody to wait for */
        else if (b->last_nq > 1)
            /* Under load, the clients the last call answered come back about now: the
             * window runs from its end, so they join the requests that queued during it
             * instead of forming a second, half-sized cohort that alternates with it. */
            base = (first > b->last_end ? first : b->last_end) + window;
        else
            base = first + window;
        /* A lone query after a call of several would run with one worker: the library
         * keys its pooled session by worker count, so that call would rebuild it (and
         * the next full one again). Company is near: it may wait two windows more. */
        int lone = b->last_nq > 1 && b->singles <= SINGLES_FOR_LATENCY;
        double deadline = lone ? base + 2 * window : base;
        for (;;) {
            double until = b->queued > 1 ? base : deadline, now = srv_now();
            if (b->stop || b->queued >= b->cfg->max_batch || now >= until) break;
            struct timespec ts;
            abs_deadline(&ts, until);
            pthread_cond_timedwait(&b->cv, &b->mu, &ts);
        }
        srv_search *list = b->head;
        b->head = b->tail = NULL;
        b->queued = 0;
        pthread_mutex_unlock(&b->mu);
        run_all(b, list);
        pthread_mutex_lock(&b->mu);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

int srv_batcher_start(srv_index *ix, const srv_config *cfg, srv_metrics *m, srv_batcher **out,
                      char *msg, size_t msg_len)
{
    srv_batcher *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(msg, msg_len, "out of memory");
        return -1;
    }
    b->ix = ix;
    b->cfg = cfg;
    b->m = m;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&b->thread, NULL, batcher_main, b) != 0) {
        pthread_cond_destroy(&b->cv);
        pthread_mutex_destroy(&b->mu);
        free(b);
        snprintf(msg, msg_len, "cannot start the batcher thread");
        return -1;
    }
    *out = b;
    return 0;
}

void srv_batcher_submit(srv_batcher *b, srv_search *s)
{
    s->t_enqueued = srv_now();
    s->next = NULL;
    pthread_mutex_lock(&b->mu);
    if (b->stop) {
        /* a request whose body was still arriving when the drain ended */
        pthread_mutex_unlock(&b->mu);
        answer_failure(s, 503, "SHUTTING_DOWN", "the server is shutting down");
        srv_search_free(s);
        return;
    }
    int was_empty = b->head == NULL;
    if (b->tail)
        b->tail->next = s;
    else
        b->head = s;
    b->tail = s;
    b->queued += s->nq;
    /* wake the batcher for the first request, the second (a lone one may be waiting for
     * company) and when the batch is full */
    if (was_empty || b->head->next == s || b->queued >= b->cfg->max_batch) pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

void srv_batcher_stop(srv_batcher *b)
{
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    int was = b->stop;
    b->stop = 1;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    if (!was) pthread_join(b->thread, NULL);
}

void srv_batcher_free(srv_batcher *b)
{
    if (!b) return;
    srv_batcher_stop(b);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}
