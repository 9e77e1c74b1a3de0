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

#endif
