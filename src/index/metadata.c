/* Document metadata kept in step with the index (metadata.h gives the protocol). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/fileio.h"
#include <cJSON.h>

#include "index/metadata.h"
#include "index/store.h"

struct ix_meta {
    meta_db *db;
    char *made; /* the database's path where this change created it, else NULL */
};

char *ix_meta_path(const char *dir) { return cm_path_join(dir, IX_META_FILE); }

/* meta.metadata.<key> of a manifest's meta (0: absent). */
static int64_t metadata_num(const cJSON *meta, const char *key)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(meta, "metadata");
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(md, key);
    return cJSON_IsNumber(g) && g->valuedouble >= 0 && g->valuedouble <= FMT_MAX_JSON_INT
               ? (int64_t)g->valuedouble : 0;
}

/* meta.metadata.gen of an index (0: no metadata change ever committed). */
static int64_t index_meta_gen(const ix_index *ix) { return metadata_num(ix_store_meta(ix->st), "gen"); }

/* Where the replay of a database at generation `from` starts: after *start (may be
 * NULL), the entries to replay. An import's "replace" makes every record, so replayed it repairs a
 * database of any age and what came before it does not matter. 0: the log cannot
 * repair it (it is older than meta.metadata.log_from, where the log begins). */
static int log_start(const ix_index *ix, int64_t from, double *start)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(ix_store_meta(ix->st), "metadata");
    const cJSON *log = cJSON_GetObjectItemCaseSensitive(md, "log"), *e;
    double at = (double)from;
    int replace = 0;
    cJSON_ArrayForEach(e, log)
    {
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(e, "gen");
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(e, "op");
        const cJSON *sec = cJSON_GetObjectItemCaseSensitive(e, "section");
        if (cJSON_IsNumber(g) && g->valuedouble > (double)from && cJSON_IsString(op) &&
            strcmp(op->valuestring, "replace") == 0 && cJSON_IsString(sec) &&
            ix_store_find(ix->st, sec->valuestring) >= 0) {
            at = g->valuedouble - 1;
            replace = 1;
        }
    }
    if (start) *start = at;
    return replace || from >= metadata_num(ix_store_meta(ix->st), "log_from");
}

static chimera_status too_old(int64_t from, const ix_index *ix, chimera_error *err)
{
    return cm_fail(err, CHIMERA_ERR_CORRUPT,
                   "the metadata database is at generation %lld, older than the index's log "
                   "reaches (%lld): it is not the database this index wrote (a copy put "
                   "back?); import the records again (chimera meta import)", (long long)from,
                   (long long)metadata_num(ix_store_meta(ix->st), "log_from"));
}

/* Replays the log entries after the database's generation: the records an import or
 * add stored, the ids a delete stored; and records the index's metadata generation.
 * A delete logged before its ids were stored (format < 0.8) is replayed by deleting
 * the rows of every id the index no longer holds. Inside a transaction of its own.
 * created: the database file was just made (it was missing), for the message. */
static chimera_status replay(meta_db *db, const ix_index *ix, int64_t from, int64_t to,
                             int created, int *n_replayed, chimera_error *err)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(ix_store_meta(ix->st), "metadata");
    const cJSON *log = cJSON_GetObjectItemCaseSensitive(md, "log"), *e;
    double start;
    if (!log_start(ix, from, &start)) {
        if (created)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "the metadata database (%s) is missing: import the records again "
                           "(chimera meta import)", IX_META_FILE);
        return too_old(from, ix, err);
    }
    CM_TRY(meta_db_begin(db, err));
    chimera_status s = CHIMERA_OK;
    int sweep = 0;
    cJSON_ArrayForEach(e, log)
    {
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(e, "gen");
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(e, "op");
        const cJSON *sec = cJSON_GetObjectItemCaseSensitive(e, "section");
        const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(e, "format");
        if (!cJSON_IsNumber(g) || g->valuedouble <= start || !cJSON_IsString(op)) continue;
        (*n_replayed)++;
        int is_delete = strcmp(op->valuestring, "delete") == 0;
        if (!cJSON_IsString(sec)) {
            sweep |= is_delete; /* an older delete, without its ids: below */
            continue;
        }
        const void *text;
        uint64_t bytes;
        int64_t at = ix_store_find(ix->st, sec->valuestring);
        const char *dtype = at >= 0 ? ix_store_section_at(ix->st, (uint32_t)at)->dtype : NULL;
        int ids_ok = dtype && strcmp(dtype, "i64") == 0 && cJSON_IsString(fmt) &&
                     strcmp(fmt->valuestring, "i64") == 0;
        if (ix_store_section(ix->st, sec->valuestring, &text, &bytes) != CHIMERA_OK ||
            (is_delete && (!ids_ok || bytes % sizeof(int64_t) != 0))) {
            s = cm_fail(err, CHIMERA_ERR_CORRUPT, "metadata: the log names section '%s', which "
                        "the index does not hold (or not as %s)", sec->valuestring,
                        is_delete ? "ids" : "records");
            break;
        }
        if (is_delete) {
            int64_t n_ids = (int64_t)(bytes / sizeof(int64_t));
            int64_t *ids = n_ids ? cm_malloc((size_t)bytes) : NULL;
            if (n_ids && !ids) {
                s = cm_fail(err, CHIMERA_ERR_NOMEM, "metadata: out of memory");
                break;
            }
            if (n_ids) memcpy(ids, text, (size_t)bytes); /* the mapping's alignment aside */
            s = meta_db_delete_ids(db, ids, n_ids, NULL, err);
            cm_free(ids);
            if (s != CHIMERA_OK) break;
            continue;
        }
        meta_input_format f = cJSON_IsString(fmt) && strcmp(fmt->valuestring, "csv") == 0
                                  ? META_INPUT_CSV : META_INPUT_JSONL;
        meta_load_mode mode = strcmp(op->valuestring, "replace") == 0 ? META_LOAD_REPLACE
                                                                      : META_LOAD_UPSERT;
        s = meta_load_text(db, f, mode, text, (size_t)bytes, sec->valuestring, NULL, err);
        if (s != CHIMERA_OK) break;
    }
    int64_t *ids = NULL, n = 0;
    /* On this connection: the rows the replay just wrote are not committed yet, and a
     * separate reader would neither see them nor, after a large write, get in at all. */
    if (s == CHIMERA_OK && sweep) s = meta_db_ids(db, &ids, &n, err);
    if (s == CHIMERA_OK && sweep) {
        int64_t k = 0;
        for (int64_t i = 0; i < n; i++)
            if (ix_find_id(ix, ids[i]) < 0) ids[k++] = ids[i];
        if (k) s = meta_db_delete_ids(db, ids, k, NULL, err);
    }
    cm_free(ids);
    if (s == CHIMERA_OK) s = meta_db_set_generation(db, to, err);
    if (s == CHIMERA_OK) return meta_db_commit(db, err);
    meta_db_rollback(db, NULL);
    return s;
}

chimera_status ix_meta_begin(const char *dir, const ix_index *ix, int flags, ix_meta **out,
                             int *repaired, chimera_error *err)
{
    int create = (flags & IX_META_CREATE) != 0;
    *out = NULL;
    if (repaired) *repaired = 0;
    char *path = ix_meta_path(dir);
    if (!path) return cm_fail(err, CHIMERA_ERR_NOMEM, "metadata: out of memory");
    struct stat sb;
    int missing = stat(path, &sb) != 0;
    if (!create && missing) {
        cm_free(path);
        return CHIMERA_OK; /* no metadata */
    }
    ix_meta *m = cm_calloc(1, sizeof *m);
    chimera_status s = m ? meta_db_open(path, create, &m->db, err)
                         : cm_fail(err, CHIMERA_ERR_NOMEM, "metadata: out of memory");
    int64_t have = 0, want = index_meta_gen(ix);
    if (s == CHIMERA_OK) s = meta_db_generation(m->db, &have, err);
    int n = 0;
    if (s == CHIMERA_OK && have != want && !(flags & IX_META_NO_REPLAY))
        s = replay(m->db, ix, have, want, missing, &n, err);
    if (repaired) *repaired = n;
    if (s == CHIMERA_OK) s = meta_db_begin(m->db, err);
    if (m && missing) { /* made for this change: ix_meta_end removes it unless committed */
        m->made = path;
        path = NULL;
    }
    cm_free(path);
    if (s != CHIMERA_OK) {
        cm_fail_prefix(err, "%s", dir);
        ix_meta_end(m, 0);
        return s;
    }
    *out = m;
    return CHIMERA_OK;
}

chimera_status ix_meta_delete(ix_meta *m, const int64_t *ids, int64_t n, chimera_error *err)
{
    return meta_db_delete_ids(m->db, ids, n, NULL, err);
}

chimera_status ix_meta_select(ix_meta *m, const char *expr, const char *const *args, int n_args,
                              int timeout_ms, int64_t **ids, int64_t *n, chimera_error *err)
{
    return meta_filter_ids(m->db, expr, args, n_args, timeout_ms, ids, n, err);
}

chimera_status ix_meta_load(ix_meta *m, meta_input_format fmt, meta_load_mode mode,
                            const char *text, size_t len, const char *source,
                            meta_load_info *info, chimera_error *err)
{
    return meta_load_text(m->db, fmt, mode, text, len, source, info, err);
}

chimera_status ix_meta_prepare(ix_meta *m, cJSON *meta, uint64_t new_gen, const char *op,
                               const char *format, const char *section, chimera_error *err)
{
    cJSON *md = cJSON_GetObjectItemCaseSensitive(meta, "metadata");
    if (!md) md = cJSON_AddObjectToObject(meta, "metadata");
    cJSON *log = cJSON_GetObjectItemCaseSensitive(md, "log");
    if (!log) log = cJSON_AddArrayToObject(md, "log");
    cJSON *e = cJSON_CreateObject();
    if (!md || !log || !e) {
        cJSON_Delete(e);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "metadata: out of memory");
    }
    cJSON_AddNumberToObject(e, "gen", (double)new_gen);
    cJSON_AddStringToObject(e, "op", op);
    if (format) cJSON_AddStringToObject(e, "format", format);
    if (section) cJSON_AddStringToObject(e, "section", section);
    cJSON_AddItemToArray(log, e);
    cJSON_DeleteItemFromObjectCaseSensitive(md, "gen");
    cJSON_AddNumberToObject(md, "gen", (double)new_gen);
    return meta_db_set_generation(m->db, (int64_t)new_gen, err);
}

void ix_meta_end(ix_meta *m, int committed)
{
    if (!m) return;
    if (m->db && meta_db_in_transaction(m->db)) {
        if (committed) meta_db_commit(m->db, NULL); /* a failure: replayed next time */
        else meta_db_rollback(m->db, NULL);
    }
    meta_db_close(m->db);
    /* a database this change made, and the change failed: leave it missing, as it was
     * (an add whose metadata was refused must not leave an empty one in the index) */
    if (m->made && !committed) unlink(m->made);
    cm_free(m->made);
    cm_free(m);
}

void ix_meta_clear_log(cJSON *meta)
{
    cJSON *md = cJSON_GetObjectItemCaseSensitive(meta, "metadata");
    if (!md) return;
    cJSON_DeleteItemFromObjectCaseSensitive(md, "log");
    cJSON_DeleteItemFromObjectCaseSensitive(md, "log_from");
    cJSON_AddNumberToObject(md, "log_from", (double)metadata_num(meta, "gen"));
}

chimera_status ix_meta_filter(const char *dir, const ix_index *ix, const char *expr,
                              const char *const *args, int n_args, int timeout_ms,
                              int64_t **ids, int64_t *n, chimera_error *err)
{
    *ids = NULL;
    *n = 0;
    char *path = ix_meta_path(dir);
    if (!path) return cm_fail(err, CHIMERA_ERR_NOMEM, "metadata: out of memory");
    struct stat sb;
    if (stat(path, &sb) != 0) {
        cm_free(path);
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "%s has no document metadata to filter on (chimera meta import)", dir);
    }
    meta_db *db = NULL;
    chimera_status s = meta_db_open(path, 0, &db, err);
    cm_free(path);
    int64_t have = 0, want = index_meta_gen(ix);
    if (s == CHIMERA_OK) s = meta_db_generation(db, &have, err);
    if (s == CHIMERA_OK && have < want && !log_start(ix, have, NULL))
        s = too_old(have, ix, err);
    else if (s == CHIMERA_OK && have < want)
        s = cm_fail(err, CHIMERA_ERR_CONFLICT,
                    "%s: the metadata database is behind the index (a change was interrupted "
                    "after its commit); the next change to the index repairs it, e.g. chimera "
                    "compact %s", dir, dir);
    if (s == CHIMERA_OK) s = meta_filter_ids(db, expr, args, n_args, timeout_ms, ids, n, err);
    meta_db_close(db);
    return s;
}
