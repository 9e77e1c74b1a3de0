/* Error reporting inside the library.
 *
 * Every fallible internal function returns a chimera_status and, when it fails, writes
 * a message naming what was wrong (file, row, section, expected vs found) into a
 * caller-provided chimera_error. `err` may be NULL: the code is still returned. Nothing
 * here allocates, so reporting works when memory is exhausted. */
#ifndef CHIMERA_CORE_ERROR_H
#define CHIMERA_CORE_ERROR_H

#include "chimera.h"

#if defined(__GNUC__)
#define CM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CM_PRINTF(a, b)
#endif

/* Sets err (if any) to `code` with a printf-style message and returns `code`. */
chimera_status cm_fail(chimera_error *err, chimera_status code, const char *fmt, ...)
    CM_PRINTF(3, 4);

/* Prefixes the message already in err with "prefix: " (for adding context such as a
 * file name on the way up). Returns err->code, or CHIMERA_ERR_INTERNAL if err is NULL. */
chimera_status cm_fail_prefix(chimera_error *err, const char *fmt, ...) CM_PRINTF(2, 3);

/* Resets err to CHIMERA_OK with an empty message. */
void cm_error_clear(chimera_error *err);

/* Propagates a failing status. */
#define CM_TRY(expr)                                                                           \
    do {                                                                                       \
        chimera_status cm_try_s_ = (expr);                                                     \
        if (cm_try_s_ != CHIMERA_OK) return cm_try_s_;                                         \
    } while (0)

#endif
