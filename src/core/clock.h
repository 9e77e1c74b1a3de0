/* Wall-clock time and peak memory, for the timings that builds and searches report. */
#ifndef CHIMERA_CORE_CLOCK_H
#define CHIMERA_CORE_CLOCK_H

#include <stdint.h>

double cm_now(void);               /* monotonic seconds */
uint64_t cm_peak_rss_bytes(void);  /* this process's peak resident set so far */

#endif
