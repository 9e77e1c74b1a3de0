/* Binary search over sorted arrays, shared by the index and the device backends (a
 * segment's sparse posting lists: index/index.h, backend/backend.h). */
#ifndef CHIMERA_CORE_BSEARCH_H
#define CHIMERA_CORE_BSEARCH_H

#include <stdint.h>

/* The position of `key` in v[0..n) (increasing), or n when it is absent. */
static inline uint32_t cm_find_u32(const uint32_t *v, uint32_t n, uint32_t key)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (v[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && v[lo] == key ? lo : n;
}

#endif
