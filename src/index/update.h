/* Changing a built index without rebuilding it (paper §3.3, "Handling updates"):
 * appending documents, deleting them by id, replacing them, and compacting.
 *
 * Storage (docs/format.md, "Segments" and "Deletions"). An index is a base segment
 * plus appended segments and tombstone lists, all in the one index directory:
 *   add      quantizes the new tokens against the existing centroids (assigned by
 *            two levels over the centroids, or exactly up to 4096 of them), writes them
 *            as a new segment "s<seq>_*" with its own posting lists (sparse: only the
 *            clusters it uses), and commits a manifest that lists it. Cost: the new
 *            tokens' assignment and encoding, and their bytes; nothing of the index is
 *            rewritten.
 *   delete   looks the ids up (each segment's id_order, a binary search) and writes
 *            the documents' numbers as one tombstone list "t<seq>_del". Cost: O(ids).
 *   update   both in one commit: the old documents tombstoned, the new ones appended
 *            under the same ids.
 *   compact  rewrites the whole index as one base segment without the deleted
 *            documents (streamed, one section at a time, nothing re-quantized), in a
 *            new directory swapped in like a build.
 * To keep searches from scanning many small segments, an add that would leave more
 * than IX_MERGE_SEGMENTS appended segments first merges them into one, and a delete
 * that would leave more than IX_MERGE_SEGMENTS tombstone lists merges those; both cost
 * what the appended part holds, never the base.
 *
 * Every change is one commit under the writer lock (index/store.h): the lock is held
 * from the read of the current index to the commit, so changes are applied one after
 * another and none is lost; readers never wait (they keep the generation they opened
 * until they open again, chimera_index_refresh). Before the commit's rename a crash
 * leaves the index as it was (plus files the next writer deletes); after it, the change
 * is durable (sections synced before the manifest, the manifest and directory synced).
 *
 * Drift. Appended tokens are assigned to centroids trained on the build's corpus; a
 * changed corpus fits them worse. Each add measures the similarity of every new token
 * to its centroid against the build's 10th percentile (meta.build.assign_sim_p10) and
 * accumulates the fraction below it in meta.drift; `chimera info` shows it and advises
 * a rebuild when it is well above the build's own 10%. */
#ifndef CHIMERA_INDEX_UPDATE_H
#define CHIMERA_INDEX_UPDATE_H

#include <stdint.h>

#include "chimera.h"
#include "data/corpus.h"
#include "index/defaults.h"

/* Appended segments (and tombstone lists) an index may gather before a change merges
 * them. */
#define IX_MERGE_SEGMENTS 8

typedef struct ix_update_opts {
    int no_sync;          /* skip fsyncs (tests, scratch indexes) */
    int missing_ok;       /* delete: ids not in the index are skipped, not an error;
                             update: they are added */
    int lock_timeout_ms;  /* as ix_store_write_opts */
    chimera_progress_fn progress;
    void *progress_user;
    chimera_cancel_fn cancel; /* polled between blocks of work; non-zero: CANCELLED */
    void *cancel_user;
    int n_threads;        /* add, update: threads for assignment and encoding (0: all CPUs) */
    int filter_timeout_ms;/* delete_where: the filter's time limit (0: META_FILTER_TIMEOUT_MS) */
} ix_update_opts;

typedef struct ix_update_report {
    int64_t docs_added, tokens_added, docs_deleted, ids_missing;
    uint64_t generation;      /* of the index after the call (unchanged when it did nothing) */
    double seconds;           /* whole call */
    double assign_seconds, encode_seconds, write_seconds;
    double drift_below;       /* added tokens whose centroid similarity is below the
                                 build's 10th percentile, as a fraction (-1: unknown) */
    int merged;               /* 1 when the commit merged appended segments or lists */
    double assign_recall;     /* added tokens given their exact nearest centroid (sample) */
    int meta_repaired;        /* metadata log entries replayed (metadata.h) */
    int64_t meta_records;     /* metadata records imported or upserted */
    int64_t n_docs, n_deleted;/* of the index after the call */
    uint32_t n_segments;
    uint64_t peak_rss;
} ix_update_report;

/* Appends the documents of `docs` (which must carry ids) to the index at dir. With
 * `replace` (update), every id must be in the index (or, with missing_ok, is added):
 * the old documents are deleted in the same commit. Without it, an id already in the
 * index is an error naming it.
 * @return CHIMERA_OK; _INVALID_ARG (no ids, an id already present or, for update,
 *         absent; more than 2^32 - 1 documents or tokens in all), _DIM (another
 *         dimension than the index's), the statuses of opening the index, _BUSY,
 *         _IO (a full disk: the index is as it was), _NOMEM. Nothing changes on error. */
chimera_status ix_add(const char *dir, const data_corpus *docs, int replace,
                      const char *meta_text, size_t meta_len, const char *meta_source,
                      const ix_update_opts *opts, ix_update_report *report, chimera_error *err);

/* Imports document metadata (index/metadata.h) from a JSON Lines (csv = 0) or CSV file
 * at path, replacing what the index had: one commit that stores the file in the index
 * and loads it into IDX/meta.sqlite. *n_records: how many records.
 * @return CHIMERA_OK; _FORMAT (a malformed line, named by file:line; nothing imported);
 *         the statuses of ix_add. */
chimera_status ix_meta_import(const char *dir, const char *path, int csv, const ix_update_opts *opts,
                              ix_update_report *report, int64_t *n_records, chimera_error *err);

/* Deletes the documents with the n given ids (duplicates in the list count once).
 * @return CHIMERA_OK (nothing committed when no id was found and missing_ok);
 *         _INVALID_ARG (an id not in the index, named, unless missing_ok; a negative
 *         id); the statuses of ix_add. */
chimera_status ix_delete(const char *dir, const int64_t *ids, int64_t n, const ix_update_opts *opts,
                         ix_update_report *report, chimera_error *err);

/* Deletes the documents whose metadata satisfies the filter expr (meta_filter_ids), the
 * filter evaluated under the writer lock on the records of the same state the delete
 * commits against, so no change of another writer falls between the two. Records of
 * ids not in the index are kept and counted (report->ids_missing).
 * @return CHIMERA_OK (nothing committed when nothing matched); _INVALID_ARG (the index
 *         has no metadata; the filter's errors); _CANCELLED (the filter's time limit);
 *         the statuses of ix_add. */
chimera_status ix_delete_where(const char *dir, const char *expr, const char *const *args,
                               int n_args, const ix_update_opts *opts, ix_update_report *report,
                               chimera_error *err);

/* Rewrites the index as one segment without its deleted documents (user ids kept;
 * internal numbers change). Nothing to do (one segment, nothing deleted): CHIMERA_OK
 * without a commit.
 * @return CHIMERA_OK; _EMPTY (every document is deleted: the result would be empty);
 *         the statuses of ix_add. */
chimera_status ix_compact(const char *dir, const ix_update_opts *opts, ix_update_report *report,
                          chimera_error *err);

typedef struct ix_recluster_opts {
    uint32_t n_clusters; /* 0: the build's default for the live token count */
    int n_threads;       /* 0: all CPUs */
    uint64_t seed;
    /* the rebuild's calibration of the default search parameters (ix_build_opts), so
     * that new centroids come with defaults measured on them; NULL: none */
    chimera_status (*calibrate)(void *user, const data_corpus *c, const char *dir,
                                ix_defaults *out, chimera_error *err);
    void *calibrate_user;
} ix_recluster_opts;

/* Retrains the centroids over the live documents and rebuilds the index from their
 * stored vectors when the index keeps them (build --rerank; the vectors are kept), else
 * from tokens reconstructed from their full-bit codes (recluster.c says how and what it
 * costs),
 * committing only if the index did not change meanwhile. Ids are kept.
 * @return CHIMERA_OK; _EMPTY (every document deleted); _CONFLICT (the index changed
 *         during the rebuild: nothing replaced); _NOMEM; the statuses of ix_build. */
chimera_status ix_recluster(const char *dir, const ix_update_opts *opts,
                            const ix_recluster_opts *ro, ix_update_report *report,
                            chimera_error *err);

#endif
