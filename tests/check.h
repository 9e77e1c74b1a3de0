/* Minimal test harness: plain executables, no framework (as LMDB's mtest and usearch's
 * expect()). A failed check prints file, line and expression (and the status name and
 * message for status checks) and the test carries on; check_report() prints the
 * closing "N passed, N failed" line and returns the exit code. */
#ifndef CHIMERA_TESTS_CHECK_H
#define CHIMERA_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "chimera.h"

static int check_passed_, check_failed_;

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (cond) {                                                                            \
            check_passed_++;                                                                   \
        } else {                                                                               \
            check_failed_++;                                                                   \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);           \
        }                                                                                      \
    } while (0)

/* Like CHECK, with a printf-style explanation. */
#define CHECKF(cond, ...)                                                                      \
    do {                                                                                       \
        if (cond) {                                                                            \
            check_passed_++;                                                                   \
        } else {                                                                               \
            check_failed_++;                                                                   \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);           \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fputc('\n', stderr);                                                               \
        }                                                                                      \
    } while (0)

/* Checks that a status expression equals `want`; `errp` (a chimera_error * or NULL)
 * supplies the message on failure. */
#define CHECK_STATUS(expr, want, errp)                                                         \
    do {                                                                                       \
        chimera_status check_s_ = (expr);                                                      \
        const chimera_error *check_e_ = (errp);                                                \
        if (check_s_ == (want)) {                                                              \
            check_passed_++;                                                                   \
        } else {                                                                               \
            check_failed_++;                                                                   \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s%s%s\n", __FILE__, __LINE__,    \
                    #expr, chimera_status_str(check_s_), chimera_status_str(want),             \
                    check_e_ ? ": " : "", check_e_ ? check_e_->msg : "");                      \
        }                                                                                      \
    } while (0)

#define CHECK_OK(expr, errp) CHECK_STATUS(expr, CHIMERA_OK, errp)

#define CHECK_NEAR(a, b, tol)                                                                  \
    do {                                                                                       \
        double check_a_ = (a), check_b_ = (b);                                                 \
        if (fabs(check_a_ - check_b_) <= (tol)) {                                              \
            check_passed_++;                                                                   \
        } else {                                                                               \
            check_failed_++;                                                                   \
            fprintf(stderr, "%s:%d: %s = %.9g, %s = %.9g, differ by more than %g\n",           \
                    __FILE__, __LINE__, #a, check_a_, #b, check_b_, (double)(tol));            \
        }                                                                                      \
    } while (0)

static inline int check_report(void)
{
    printf("%d passed, %d failed\n", check_passed_, check_failed_);
    return check_failed_ ? 1 : 0;
}

#endif
