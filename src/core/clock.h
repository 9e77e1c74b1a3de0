/* Wall-clock time and peak memory, for the timings that builds and searches report. */
#ifndef CHIMERA_CORE_CLOCK_H
#define CHIMERA_CORE_CLOCK_H

#include <stdint.h>

double cm_now(void);               /* monotonic seconds */
double cm_thread_cpu_now(void);    /* CPU seconds of the calling thread (benchmarks on a
                                      shared machine: time spent descheduled is not counted) */
uint64_t cm_peak_rss_bytes(void);  /* this process's peak resident set so far */

#endif
