/* The centroids at 8 bits a coordinate (quant_c8_encode), made once and shared.
 *
 * Every centroid score a search uses for its estimates comes from these rows
 * (quant_c8_scores): the CPU backend's S, in full or row by row, and the host rows of a
 * backend that keeps S on its device, so that every backend's full-bit scores are the
 * same numbers. Encoding costs ~1 us a centroid (the rotation), ~0.1 s at K = 10^5,
 * and an engine is made anew when a query outgrows it or the index changes, so a table
 * is shared by every holder of the same centroids (a key: the index's checksums of
 * rotation, centroids and graph), counted, and the last one released is kept until
 * another is made: an engine made right after its predecessor was freed finds it. A
 * key of 0 gets a table of its own. Thread-safe. */
#ifndef CHIMERA_QUANT_CENTROIDS8_H
#define CHIMERA_QUANT_CENTROIDS8_H

#include <stdint.h>

#include "chimera.h"
#include "quant/rotation.h"

typedef struct quant_c8_table {
    uint64_t key;
    uint32_t n, dim_pad;
    int8_t *codes;  /* [n x dim_pad] */
    float *scale;   /* [n] */
    int32_t *sum;   /* [n] */
    int refs;
    struct quant_c8_table *next;
} quant_c8_table;

/* The table of the n centroids c [n x rot->dim] under `key`: found, or encoded (outside
 * any lock: another holder's lookup never waits for it). Returns CHIMERA_OK or
 * CHIMERA_ERR_NOMEM. */
chimera_status quant_c8_table_get(uint64_t key, const quant_rotation *rot, const float *c,
                                  uint32_t n, quant_c8_table **out, chimera_error *err);

/* An empty table of n rows of dim_pad codes, not shared (key 0), for the caller to fill;
 * NULL when out of memory. */
quant_c8_table *quant_c8_table_new(uint32_t n, uint32_t dim_pad);

/* Gives back a table from _get or _new (NULL: nothing). */
void quant_c8_table_release(quant_c8_table *t);

#endif
