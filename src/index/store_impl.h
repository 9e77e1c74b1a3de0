/* Private to src/index/store_*.c: the pieces the writer and the reader share. */
#ifndef CHIMERA_INDEX_STORE_IMPL_H
#define CHIMERA_INDEX_STORE_IMPL_H

#include <stdint.h>

#include <cJSON.h>

#include "chimera.h"

/* Reads `path` (relative to the directory descriptor `dirfd`, or AT_FDCWD; at most
 * FMT_MANIFEST_MAX_BYTES) and parses it as one JSON value with nothing but whitespace
 * after it. `shown` is the path messages name. On success *out is a tree to cJSON_Delete.
 * @return CHIMERA_OK; CHIMERA_ERR_IO (cannot open or read; errno is kept in *err_no,
 *         which may be NULL), CHIMERA_ERR_CORRUPT (too large, not JSON),
 *         CHIMERA_ERR_NOMEM. */
chimera_status ix_store_manifest_loadat(int dirfd, const char *path, const char *shown, cJSON **out,
                                        int *err_no, chimera_error *err);
chimera_status ix_store_manifest_load(const char *path, cJSON **out, int *err_no,
                                      chimera_error *err);

/* XXH3-64 of the canonical text (cJSON_PrintUnformatted) of `root`; -1 when out of
 * memory (cJSON's allocator), 0 on success. */
int ix_store_manifest_digest(const cJSON *root, uint64_t *digest);

/* The manifest member "generation" (format 1.1): an integer in [0, 2^53]; 0 when
 * absent (format 1.0). Returns 0 on success, -1 when it is present but malformed. */
int ix_store_manifest_generation(const cJSON *root, uint64_t *gen);

/* 1 when `name` is "manifest.json.tmp-XXXXXX" (cm_writer's temporary name for the
 * manifest: ix_store_update_meta writes one inside the index, and a killed update leaves
 * it there). */
int ix_store_is_manifest_tmp(const char *name);

/* Marks a build's temporary directory as live: an flock on it, held (by the returned
 * descriptor) until the writer closes it. -1 with errno on failure. */
int ix_store_tmpdir_claim(const char *tmp_dir);

/* With the writer lock of `dir` held (dir without trailing slashes): removes what
 * killed writers left, and nothing else:
 *   - inside dir, when it is an index: "manifest.json.tmp-XXXXXX" files (only a lock
 *     holder writes them, so every one found is stale);
 *   - beside it, "<dir>.tmp-XXXXXX" directories that no live build claims
 *     (ix_store_tmpdir_claim), except, when dir is not an index, those holding a complete
 *     index (after an interrupted replace it may be the only copy);
 *   - beside it, "<dir>.old-XXXXXX" directories, only when dir is an index (they are
 *     created and removed under the lock, so one found is stale; when dir is missing one
 *     may be the only copy of the previous index, which ix_store_open reports).
 * Inside those directories only manifest.json, its temporary files and *.bin files are
 * removed; a directory holding anything else is left in place. Best effort: a failure
 * leaves the leftover (which never stops a later build: see classify_target). Returns
 * the number of leftovers removed. */
int ix_store_clean_stale(const char *dir, int dir_is_index);

/* 1 when the writer lock file of the index at dir exists (store_lock.c): someone wrote
 * or is writing there, so a missing dir may be mid-replace rather than mistyped. */
int ix_store_lock_file_exists(const char *dir);

#endif
