/* Progress reporting for long work (index build, k-means, exact search).
 *
 * The library never draws on a terminal itself: it calls the caller's
 * chimera_progress_fn (the CLI draws a bar when stderr is a terminal and stays quiet
 * otherwise). cm_progress_add is safe from any worker thread and calls back at most
 * about 200 times per phase, so it can sit in a loop over blocks. The callback must be
 * thread-safe. */
#ifndef CHIMERA_CORE_PROGRESS_H
#define CHIMERA_CORE_PROGRESS_H

#include <stdatomic.h>
#include <stdint.h>

#include "chimera.h"

typedef struct cm_progress {
    chimera_progress_fn fn; /* may be NULL: reporting is then free */
    void *user;
    const char *phase;
    uint64_t total;
    _Atomic uint64_t done;
} cm_progress;

void cm_progress_begin(cm_progress *p, chimera_progress_fn fn, void *user, const char *phase,
                       uint64_t total);
void cm_progress_add(cm_progress *p, uint64_t n);
void cm_progress_end(cm_progress *p); /* reports the phase complete */

/* Cancellation for a call that takes a chimera_cancel_fn: cm_watch_progress is a
 * chimera_progress_fn (user = the cm_watch) that forwards to the caller's progress
 * callback, if any, and polls the caller's cancel callback, so every progress point of
 * every stage below becomes a cancellation point without the stages knowing. Once the
 * cancel callback has returned non-zero the watch stays stopped (and is not polled
 * again: progress points reached from several threads at once poll it one at a time,
 * and a thread that finds a poll under way skips its own). Stages that loop check
 * cm_watch_flag (one atomic load) to skip the rest of their work; callers check
 * cm_watch_stopped (which also polls) between stages and return CHIMERA_ERR_CANCELLED.
 * A NULL watch never stops. */
typedef struct cm_watch {
    chimera_progress_fn fn;
    void *user;
    chimera_cancel_fn cancel;
    void *cancel_user;
    _Atomic int stop;
    _Atomic int polling; /* a thread is in the cancel callback */
} cm_watch;

void cm_watch_init(cm_watch *w, chimera_progress_fn fn, void *user, chimera_cancel_fn cancel,
                   void *cancel_user);
void cm_watch_progress(void *w, const char *phase, double fraction);
int cm_watch_stopped(cm_watch *w); /* polls the cancel callback, then reports the flag */
int cm_watch_flag(cm_watch *w);    /* the flag only: no callback */

#endif
