/* Rate-limited progress callbacks (see progress.h). */
#include "core/progress.h"

void cm_progress_begin(cm_progress *p, chimera_progress_fn fn, void *user, const char *phase,
                       uint64_t total)
{
    p->fn = fn;
    p->user = user;
    p->phase = phase;
    p->total = total ? total : 1;
    atomic_store(&p->done, 0);
    if (fn) fn(user, phase, 0.0);
}

void cm_progress_add(cm_progress *p, uint64_t n)
{
    if (!p || !p->fn) return;
    uint64_t before = atomic_fetch_add_explicit(&p->done, n, memory_order_relaxed);
    uint64_t after = before + n;
    uint64_t step = p->total / 200 ? p->total / 200 : 1;
    if (before / step != after / step && after < p->total)
        p->fn(p->user, p->phase, (double)after / (double)p->total);
}

void cm_progress_end(cm_progress *p)
{
    if (p && p->fn) p->fn(p->user, p->phase, 1.0);
}

void cm_watch_init(cm_watch *w, chimera_progress_fn fn, void *user, chimera_cancel_fn cancel,
                   void *cancel_user)
{
    w->fn = fn;
    w->user = user;
    w->cancel = cancel;
    w->cancel_user = cancel_user;
    atomic_store(&w->stop, 0);
    atomic_store(&w->polling, 0);
}

int cm_watch_flag(cm_watch *w)
{
    return w && atomic_load_explicit(&w->stop, memory_order_relaxed);
}

int cm_watch_stopped(cm_watch *w)
{
    if (!w) return 0;
    /* One poller at a time: two threads that both saw the flag clear would otherwise
     * both call the callback, the second after the first was told to stop. The flag is
     * set before the poll is released, so the next poller sees it and does not call. */
    if (w->cancel && !cm_watch_flag(w) && !atomic_exchange(&w->polling, 1)) {
        if (!atomic_load(&w->stop) && w->cancel(w->cancel_user)) atomic_store(&w->stop, 1);
        atomic_store(&w->polling, 0);
    }
    return cm_watch_flag(w);
}

void cm_watch_progress(void *user, const char *phase, double fraction)
{
    cm_watch *w = user;
    if (w->fn) w->fn(w->user, phase, fraction);
    cm_watch_stopped(w);
}
