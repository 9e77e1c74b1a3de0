/* Allocation funnel (see alloc.h). The failure-injection counter is the only mutable
 * process-wide state in the library, and exists only for tests. */
#define CM_ALLOC_IMPL
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

static _Atomic int64_t fail_countdown = -1;

static int should_fail(void)
{
    int64_t c = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
    if (c < 0) return 0;
    if (c == 0) return 1;
    atomic_fetch_sub_explicit(&fail_countdown, 1, memory_order_relaxed);
    return 0;
}

void cm_alloc_fail_after(int64_t n) { atomic_store(&fail_countdown, n < 0 ? -1 : n); }

void *cm_malloc(size_t n)
{
    if (should_fail()) return NULL;
    return malloc(n ? n : 1);
}

void *cm_calloc(size_t count, size_t size)
{
    size_t total;
    if (cm_mul_size(count, size, &total) != 0) return NULL;
    if (should_fail()) return NULL;
    return calloc(total ? total : 1, 1);
}

void *cm_realloc(void *p, size_t n)
{
    if (should_fail()) return NULL;
    return realloc(p, n ? n : 1);
}

void *cm_aligned_alloc(size_t alignment, size_t n)
{
    if (should_fail()) return NULL;
    void *p = NULL;
    if (alignment < sizeof(void *)) alignment = sizeof(void *);
    if (posix_memalign(&p, alignment, n ? n : 1) != 0) return NULL;
    return p;
}

void cm_free(void *p) { free(p); }

char *cm_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = cm_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}
