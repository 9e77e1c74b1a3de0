/* Calibrated default search parameters and the recorded source of an index, kept in the
 * manifest's meta ("defaults", "source"; docs/format.md). The build measures the
 * defaults (the calibration itself is a series of searches, done by the caller through
 * ix_build_opts.calibrate, since src/index/ does not search); this file writes them at
 * the build's commit, counts the documents changed since (update.c), and reads them
 * back for a search and for `chimera info`. The source is what the build read (paths,
 * sizes, modification times), so that a tune can compute exact truth without being told
 * where the corpus is, and can refuse files that changed. */
#ifndef CHIMERA_INDEX_DEFAULTS_H
#define CHIMERA_INDEX_DEFAULTS_H

#include <stdint.h>

#include "chimera.h"
#include "index/index.h"

/* Measures the defaults of the index just written to `dir` (an openable index, not yet
 * committed) into *out (out->n = 0: none). */
typedef chimera_status (*ix_calibrate_fn)(void *user, const char *dir, ix_defaults *out,
                                          chimera_error *err); /* ix_build_opts.calibrate */

struct cJSON;
/* meta.defaults from d (nothing when d->n == 0); 0 when out of memory. */
int ix_defaults_to_meta(struct cJSON *meta, const ix_defaults *d);
/* meta.source from the files the build read (paths made absolute; a file that cannot be
 * stat'ed records no source); 0 when out of memory. */
int ix_source_to_meta(struct cJSON *meta, const char *tokens, const char *doclens,
                      const char *ids);
/* A change committed `changed` documents: counted in meta.defaults.changed_docs. */
void ix_defaults_note_change(struct cJSON *meta, int64_t changed);
/* Reads meta.defaults (values range-checked; an entry that fails is skipped); *stale: 1
 * when changed_docs exceeds a fifth of the live documents. */
void ix_defaults_read(const struct cJSON *meta, int64_t live_docs, ix_defaults *out, int *stale);

/* The calibrated setting for top-k of ix: that of the smallest calibrated k' >= k, else
 * the largest with k_fullbit and k_refine scaled by k / k'. 0 (and *out untouched)
 * when the index has none, or they are stale. */
int ix_defaults_find(const ix_index *ix, uint32_t k, chimera_search_params *out);

/* 0: meta records no source; 1: it does; 2: it does, but documents were added, deleted
 * or updated since the build (n_deleted: the index's), so exact truth over it would be
 * wrong (ix_source_get refuses it, info says so). */
int ix_source_state(const struct cJSON *meta, int64_t n_deleted);

/* The source the build recorded, checked against the files as they are now and against
 * the index (no document added, deleted or updated since the build). Paths are
 * cm_malloc'd (*ids NULL when none was used).
 * @return CHIMERA_OK, _EMPTY (none recorded), _CONFLICT (changed: the message says
 *         what), _NOMEM. */
chimera_status ix_source_get(const ix_index *ix, char **tokens, char **doclens, char **ids,
                             chimera_error *err);

#endif
