/* Tuned search profiles: the settings `chimera tune` found for a (k, target recall),
 * stored in the index's manifest ("meta.profiles", an array of objects) so that a later
 * search can ask for a recall instead of knobs. This file is the only reader and writer
 * of that array; everything else sees the typed struct below, and the manifest's JSON
 * stays private to src/index/. */
#ifndef CHIMERA_INDEX_PROFILE_H
#define CHIMERA_INDEX_PROFILE_H

#include <stdint.h>

#include "chimera.h"
#include "index/index.h"

/* One profile as stored. */
typedef struct ix_profile {
    uint32_t k;
    double target_recall;
    double measured_recall, qps; /* at params */
    int reached;                 /* 0: the target was out of reach; params are the closest */
    chimera_search_params params;
} ix_profile;

/* Which index an opened handle is: its manifest's generation and the identity of its
 * data (ix_store_data_id), recorded by a tune so that saving can refuse another index. */
void ix_profile_identity(const ix_index *ix, uint64_t *generation, uint64_t *data_id);

/* Stores p in the index at dir, replacing the profile with the same (k, target_recall).
 * A read-modify-write of the manifest under the writer lock (ix_store_update_meta): it
 * merges with what other writers committed meanwhile. data_id (0: not checked) is the
 * data the profile was measured on; if the index now holds other data (a rebuild), the
 * save is refused. generation is that of the index tuned, for the message only.
 * @return CHIMERA_OK, _CONFLICT (other data), the statuses of ix_store_update_meta. */
chimera_status ix_profile_save(const char *dir, const ix_profile *p, uint64_t data_id,
                               uint64_t generation, chimera_error *err);

/* The reached profile for top-k whose target is the smallest >= target_recall,
 * preferring this k, else the smallest k' >= k; its settings in *out. A profile is
 * stale, and skipped, once the documents added, deleted or updated since it was tuned
 * (meta.profiles[].changed_docs, counted by update.c) exceed a fifth of the index.
 * @return CHIMERA_OK; CHIMERA_ERR_EMPTY (none qualifies; a message only when a stale
 *         one would have); CHIMERA_ERR_CORRUPT
 *         (that profile holds a missing or out-of-range value: the message names it). */
chimera_status ix_profile_find(const ix_index *ix, uint32_t k, double target_recall,
                               chimera_search_params *out, chimera_error *err);

/* The profiles stored, in stored order, up to max into out (chimera_index_profile_list);
 * returns how many there are. */
int ix_profile_list(const ix_index *ix, chimera_profile_entry *out, int max);

/* Where in ix_profile_list's order the profile ix_profile_find takes lies; -1 when it
 * takes none (or the one it would take is damaged). */
int ix_profile_pick(const ix_index *ix, uint32_t k, double target_recall);

#endif
