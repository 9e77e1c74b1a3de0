/* Search filters resolved against an index (filter.h). */
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "search/filter.h"

chimera_status sp_filter_resolve(const ix_index *ix, const int64_t *ids, int64_t n, int exclude,
                                 sp_filter *out, chimera_error *err)
{
    memset(out, 0, sizeof *out);
    size_t nb = (size_t)(ix->n_docs + 7) / 8;
    out->allow = cm_calloc(nb ? nb : 1, 1);
    if (!out->allow) return cm_fail(err, CHIMERA_ERR_NOMEM, "search filter: out of memory");
    if (exclude) /* everything, then the listed ids off */
        for (size_t i = 0; i < nb; i++) out->allow[i] = (uint8_t)~ix->deleted[i];
    for (int64_t i = 0; i < n; i++) {
        int64_t d = ix_find_id(ix, ids[i]); /* -1: not in the index (or deleted) */
        if (d < 0) continue;
        if (exclude) out->allow[d >> 3] &= (uint8_t)~(1u << (d & 7));
        else out->allow[d >> 3] |= (uint8_t)(1u << (d & 7));
    }
    if (ix->n_docs % 8) out->allow[nb - 1] &= (uint8_t)((1u << (ix->n_docs % 8)) - 1);
    int64_t cnt = 0;
    for (size_t i = 0; i < nb; i++) cnt += __builtin_popcount(out->allow[i]);
    out->docs = cm_malloc((size_t)(cnt ? cnt : 1) * sizeof *out->docs);
    if (!out->docs) {
        sp_filter_free(out);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "search filter: out of memory");
    }
    for (int64_t d = 0; d < ix->n_docs; d++)
        if ((out->allow[d >> 3] >> (d & 7)) & 1) out->docs[out->n++] = (uint32_t)d;
    return CHIMERA_OK;
}

void sp_filter_free(sp_filter *f)
{
    cm_free(f->allow);
    cm_free(f->docs);
    memset(f, 0, sizeof *f);
}
