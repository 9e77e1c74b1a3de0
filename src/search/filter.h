/* Search filters: a set of user ids a search may return (or must not), resolved against
 * one opened index into the bitmap and document list the pipeline takes (pipeline.h:
 * sp_filter). Resolution costs a binary search per listed id (index/index.h:
 * ix_find_id) plus a bitmap over the index's documents; an id the index does not hold
 * (never added, or deleted) is simply not allowed. */
#ifndef CHIMERA_SEARCH_FILTER_H
#define CHIMERA_SEARCH_FILTER_H

#include <stdint.h>

#include "chimera.h"
#include "index/index.h"
#include "search/pipeline.h"

/* Resolves ids[0..n) against ix: with exclude = 0 the allowed documents are those ids,
 * with exclude = 1 every document but those; deleted documents are never allowed.
 * @return CHIMERA_OK, CHIMERA_ERR_NOMEM. */
chimera_status sp_filter_resolve(const ix_index *ix, const int64_t *ids, int64_t n, int exclude,
                                 sp_filter *out, chimera_error *err);
void sp_filter_free(sp_filter *f);

#endif
