/* Search sessions: the per-search scratch of an opened index, pooled so that any number
 * of threads may search one index at once.
 *
 * A session is one engine (pipeline.h: backend state and per-worker scratch, sized for
 * its maxima) plus the thread pool that runs its workers. A search takes an idle
 * session that fits it (same backend, worker and thread counts; maxima at least the
 * call's), or makes one, runs its queries on it and puts it back. Sessions are never
 * shared by two searches, so a search touches nothing another one writes: the index
 * is read-only after open, and each call's error, results and measurements are its own.
 *
 * Why pooled inside the library rather than a searcher object the caller creates: the
 * public search call stays what it was (one handle, one call), callers need no
 * per-thread bookkeeping, and a single-threaded caller pays nothing new — its one
 * session is reused from call to call as the single cached engine was, so a device
 * upload still happens once per index and configuration. The pool grows to the number
 * of searches that ran at once and stays there until the index is closed; an idle
 * session that no longer fits is freed when a search needs a new one, so mixed
 * configurations do not pile up (at most one idle session per concurrent caller).
 *
 * XXX: every session holds its own backend, so on a GPU each concurrent search keeps
 * its own copy of the index's device sections. Sharing one upload between sessions
 * needs the backend interface to separate resident data from per-worker state. */
#ifndef CHIMERA_SEARCH_SESSION_H
#define CHIMERA_SEARCH_SESSION_H

#include <stdint.h>

#include "chimera.h"
#include "data/corpus.h"
#include "index/index.h"
#include "search/pipeline.h"

/* How a call's queries are scheduled. */
typedef struct sp_run_opts {
    const char *backend; /* "auto", "cpu" or "cuda" */
    int n_threads;       /* >= 1 */
    int latency_mode;    /* 1: one query at a time with all threads; 0: queries spread over
                            the threads */
} sp_run_opts;

typedef struct sp_sessions sp_sessions;

/* An empty session pool over an opened index (which must outlive it). */
chimera_status sp_sessions_new(const ix_index *ix, sp_sessions **out, chimera_error *err);

/* Moves the idle sessions of `from` (a view of an index) to `to` (a newer view of the
 * same index), each engine taking only what changed (sp_engine_refresh: on a GPU, the
 * appended segments and the new deletion bitmap instead of the whole index); those that
 * cannot follow are freed. Sessions busy in a search stay with `from`. */
void sp_sessions_adopt(sp_sessions *to, sp_sessions *from);

/* Frees every session. No search may be running on the pool. NULL is a no-op. */
void sp_sessions_free(sp_sessions *s);

/* Searches every query of q with p (validated by the caller; max_m: the longest query)
 * on a session of the pool: ids and scores [q->n x p->k] as sp_search gives them.
 * filters (may be NULL): query i's filter, filters[i] (NULL: none), in place of
 * p->filter.
 * profile (may be NULL) receives the sums of the per-query measurements, the wall
 * time and the backend; its latency array, when set, one entry per query.
 * Safe to call from any number of threads at once on one pool.
 * @return CHIMERA_OK or the first error of a query (its message in err), _NOMEM. */
chimera_status sp_sessions_search(sp_sessions *s, const data_queries *q, const sp_params *p,
                                  const sp_filter *const *filters, uint32_t max_m,
                                  const sp_run_opts *o, int64_t *ids, float *scores,
                                  chimera_search_profile *profile, chimera_error *err);

#endif
