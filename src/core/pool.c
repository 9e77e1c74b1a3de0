/* Thread pool: workers sleep on a condition variable between jobs; a job is published
 * with a generation number so a worker never runs the same job twice. */
#include <pthread.h>
#include <stdatomic.h>

#include "core/cpu.h"
#include "core/pool.h"
#include "core/alloc.h"

struct cm_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    uint64_t generation; /* bumped per job; guarded by mu */
    int shutdown;
    int active;          /* workers still inside the current job; guarded by mu */
    cm_task_fn fn;
    void *ctx;
    int64_t n_tasks;
    _Atomic int64_t next;
};

typedef struct {
    cm_pool *pool;
    int index;
} worker_arg;

static void drain(cm_pool *p, int worker)
{
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= p->n_tasks) break;
        p->fn(p->ctx, t, worker);
    }
}

static void *worker_main(void *argp)
{
    worker_arg *arg = argp;
    cm_pool *p = arg->pool;
    int index = arg->index;
    uint64_t seen = 0;
    cm_free(arg);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->shutdown && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->shutdown) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        drain(p, index);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

cm_pool *cm_pool_new(int n_threads)
{
    if (n_threads <= 0) n_threads = cm_cpu_count();
    cm_pool *p = cm_calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (n_threads > 1) {
        p->threads = cm_calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) {
            p->n_threads = 1;
            cm_pool_free(p);
            return NULL;
        }
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *arg = cm_malloc(sizeof *arg);
        if (arg) *arg = (worker_arg){p, i};
        if (!arg || pthread_create(&p->threads[i - 1], NULL, worker_main, arg) != 0) {
            cm_free(arg);
            p->n_threads = i; /* join only the workers already started */
            cm_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void cm_pool_free(cm_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->shutdown = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i - 1], NULL);
    cm_free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    cm_free(p);
}

int cm_pool_size(const cm_pool *p) { return p ? p->n_threads : 1; }

void cm_pool_run(cm_pool *p, int64_t n_tasks, cm_task_fn fn, void *ctx)
{
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    p->active = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    drain(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->active > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
