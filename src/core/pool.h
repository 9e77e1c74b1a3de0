/* A fixed pool of worker threads running parallel-for jobs.
 *
 * cm_pool_run(pool, n, fn, ctx) calls fn(ctx, task, worker) once for every task in
 * [0, n), spread over the pool's threads (the caller takes part as worker 0), and
 * returns when all are done. Tasks are claimed from an atomic counter, so uneven tasks
 * balance themselves. `worker` is in [0, cm_pool_size()) and is how a task finds the
 * scratch buffers preallocated for its thread: nothing in a hot loop allocates.
 * A pool runs one job at a time; calling cm_pool_run from inside a task is a bug.
 * A NULL pool is a pool of one: cm_pool_size(NULL) is 1 and cm_pool_run(NULL, ...) runs
 * the tasks inline, in order, as worker 0 (so does a one-thread pool, or a job of one
 * task). Callers with an optional pool therefore call cm_pool_run unconditionally. */
#ifndef CHIMERA_CORE_POOL_H
#define CHIMERA_CORE_POOL_H

#include <stdint.h>

typedef struct cm_pool cm_pool;
typedef void (*cm_task_fn)(void *ctx, int64_t task, int worker);

/* n_threads <= 0 means one per online CPU. Returns NULL when out of memory or threads. */
cm_pool *cm_pool_new(int n_threads);
void cm_pool_free(cm_pool *pool);
int cm_pool_size(const cm_pool *pool);
void cm_pool_run(cm_pool *pool, int64_t n_tasks, cm_task_fn fn, void *ctx);

#endif
