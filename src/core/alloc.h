/* The one allocation funnel.
 *
 * All library memory goes through these functions, so a test can make the n-th
 * allocation fail (cm_alloc_fail_after) and prove that every error path releases what
 * it took. After this header, malloc/calloc/realloc/free are poisoned (hnsw.c's trick):
 * include it after the system headers. cm_aligned_alloc returns 64-byte aligned memory
 * (cache line and AVX-512 width); free it with cm_free like anything else. */
#ifndef CHIMERA_CORE_ALLOC_H
#define CHIMERA_CORE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *cm_malloc(size_t n);
void *cm_calloc(size_t count, size_t size); /* NULL on overflow of count*size */
void *cm_realloc(void *p, size_t n);
void *cm_aligned_alloc(size_t alignment, size_t n); /* alignment: power of two >= 8 */
void cm_free(void *p);
char *cm_strdup(const char *s);

/* Multiplies with overflow check: returns 0 and sets *out on success, -1 on overflow. */
static inline int cm_mul_size(size_t a, size_t b, size_t *out)
{
    if (b != 0 && a > SIZE_MAX / b) return -1;
    *out = a * b;
    return 0;
}

/* Test hook: after `n` more successful allocations every allocation fails, until
 * cm_alloc_fail_after(-1) disarms it. Process-wide; for single-threaded tests only. */
void cm_alloc_fail_after(int64_t n);

#ifndef CM_ALLOC_IMPL
#pragma GCC poison malloc calloc realloc free strdup aligned_alloc posix_memalign
#endif

#endif
