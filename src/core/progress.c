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
