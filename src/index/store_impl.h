/* Private to src/index/store_*.c: the pieces the writer and the reader share. */
#ifndef CHIMERA_INDEX_STORE_IMPL_H
#define CHIMERA_INDEX_STORE_IMPL_H

#include <cJSON.h>

#include "chimera.h"

/* Reads `path` (at most FMT_MANIFEST_MAX_BYTES) and parses it as one JSON value with
 * nothing but whitespace after it. On success *out is a tree to cJSON_Delete.
 * @return CHIMERA_OK; CHIMERA_ERR_IO (cannot open or read; errno is kept in *err_no,
 *         which may be NULL), CHIMERA_ERR_CORRUPT (too large, not JSON),
 *         CHIMERA_ERR_NOMEM. */
chimera_status store_manifest_load(const char *path, cJSON **out, int *err_no,
                                   chimera_error *err);

/* XXH3-64 of the canonical text (cJSON_PrintUnformatted) of `root`; -1 when out of
 * memory (cJSON's allocator), 0 on success. */
int store_manifest_digest(const cJSON *root, uint64_t *digest);

#endif
