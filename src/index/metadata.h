/* Document metadata beside an index: the SQLite database IDX/meta.sqlite (src/meta/),
 * kept in step with the index's commits.
 *
 * The database is derived state. Every change that alters metadata (an import, an add
 * or update bringing records, a delete) also stores what it did in the index itself, in
 * the same manifest commit: the records as a section ("m<seq>_meta" for an import,
 * "s<seq>_meta" beside an added segment), or the ids whose records a delete removed
 * ("d<seq>_ids", i64), and an entry of meta.metadata.log
 * ({"gen", "op": "replace" | "upsert" | "delete", "format", "section"}), and records the
 * generation of that commit as meta.metadata.gen. The database records the same number
 * once it holds the change. The order is: database transaction opened and changed,
 * manifest committed, database committed. A crash between the last two leaves the
 * database behind the index (its generation smaller than metadata.gen): the next writer
 * of the index replays the log entries after the database's generation (re-loading the
 * stored records, deleting the stored ids; a delete logged by an older version, without
 * its ids, by deleting the rows of every id the index no longer holds) and says so;
 * filters refuse to run on a database that is behind rather than miss documents. A
 * crash before the manifest commit rolls the database back with the change. A
 * compaction copies the (repaired) database into the new index and clears the log. So
 * does every other in-place change of an index with a database, once the database
 * holds the log (it replays first): it drops every metadata-change section and leaves
 * in the log only its own entry, if it has one. meta.metadata.log_from records where
 * the log starts; a database older than that cannot be replayed (writers and filters
 * refuse it as CORRUPT) unless a later import's "replace" entry is in the log, which
 * makes every record; an import, which replaces all records, repairs it. */
#ifndef CHIMERA_INDEX_METADATA_H
#define CHIMERA_INDEX_METADATA_H

#include <stdint.h>

#include "chimera.h"
#include "index/index.h"
#include "meta/meta.h"

#define IX_META_FILE "meta.sqlite"

typedef struct ix_meta ix_meta;

/* ix_meta_begin's flags */
#define IX_META_CREATE 1    /* make a missing database */
#define IX_META_NO_REPLAY 2 /* the change replaces every record: what the database is
                               behind does not matter (an import; the database stays
                               behind until the change commits) */

/* Opens the database of the index at dir (opened as ix, under the writer lock) for a
 * change: replays what it is behind (committed at once; *repaired counts the entries
 * replayed), then begins the change's transaction. Without IX_META_CREATE, *out is
 * NULL when the index has none.
 * @return CHIMERA_OK; CHIMERA_ERR_CORRUPT (the database is older than the log reaches:
 *         not the one this index wrote, e.g. a copy put back; an import repairs it); the
 *         statuses of meta_db_open and of loading stored records. */
chimera_status ix_meta_begin(const char *dir, const ix_index *ix, int flags, ix_meta **out,
                             int *repaired, chimera_error *err);

/* Row changes inside the change's transaction. */
chimera_status ix_meta_delete(ix_meta *m, const int64_t *ids, int64_t n, chimera_error *err);
/* The ids whose records satisfy expr (meta_filter_ids), as the database stands at the
 * change's start (replayed, nothing of the change written yet). */
chimera_status ix_meta_select(ix_meta *m, const char *expr, const char *const *args, int n_args,
                              int timeout_ms, int64_t **ids, int64_t *n, chimera_error *err);
chimera_status ix_meta_load(ix_meta *m, meta_input_format fmt, meta_load_mode mode,
                            const char *text, size_t len, const char *source,
                            meta_load_info *info, chimera_error *err);

/* Before the manifest commit of generation new_gen: sets meta.metadata (gen = new_gen,
 * the log entry appended) in the manifest's meta being written, and the database's
 * generation. section (may be NULL) names the stored records; format "jsonl" or "csv". */
struct cJSON; /* the manifest's JSON stays private to src/index/ (store.h) */
chimera_status ix_meta_prepare(ix_meta *m, struct cJSON *meta, uint64_t new_gen, const char *op,
                               const char *format, const char *section, chimera_error *err);

/* After the manifest commit (committed = 1: commit the database; 0: roll it back), and
 * closes. A failed database commit after a committed manifest is not an error of the
 * change: the next writer replays it. A database ix_meta_begin created is removed when
 * the change does not commit. NULL is a no-op. */
void ix_meta_end(ix_meta *m, int committed);

/* Empties the log once the database holds what it describes (a compaction, which does
 * not carry its sections over; any change, which drops them): meta.metadata.log_from
 * records the generation it now starts after, below which a database cannot be
 * replayed. */
void ix_meta_clear_log(struct cJSON *meta);

/* The path of the database of the index at dir (cm_malloc'd). */
char *ix_meta_path(const char *dir);

/* The ids whose metadata satisfies expr (meta_filter_ids), from the database of the
 * index at dir as ix sees it: CHIMERA_ERR_CONFLICT when the database is behind ix (an
 * interrupted change, repaired by the next writer), CHIMERA_ERR_CORRUPT when it is too
 * old for the log to repair (an import does); an index without metadata is
 * CHIMERA_ERR_INVALID_ARG ("no metadata: chimera meta import"). */
chimera_status ix_meta_filter(const char *dir, const ix_index *ix, const char *expr,
                              const char *const *args, int n_args, int timeout_ms,
                              int64_t **ids, int64_t *n, chimera_error *err);

#endif
