/* The metadata database: open/create, transactions, generation, row deletion (meta.h).
 *
 * One SQLite file, two tables (meta.h has the schema). Settings and why:
 *   - rollback journal (SQLite's default, not WAL): the database stays one file when
 *     closed, and needs no shared-memory file beside it, so it can live in an index
 *     directory that is copied or replaced as a whole; readers wait only while a commit
 *     writes (busy timeout META_BUSY_TIMEOUT_MS);
 *   - synchronous=FULL: a commit is on disk when meta_db_commit returns, which the index
 *     writer needs before it commits its manifest;
 *   - defensive mode, untrusted schema, no extension loading: the file is ours, but
 *     nothing in it should be able to run code or corrupt it through SQL.
 * Every change runs in a savepoint of its own (meta_savepoint_*), joined to the caller's
 * transaction when one is open, so a failed call leaves nothing behind. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "meta/meta_impl.h"
#include "core/alloc.h"

/* ---- helpers shared by the module ------------------------------------------------- */

chimera_status meta_sqlite_fail(chimera_error *err, sqlite3 *conn, int rc, const char *what)
{
    chimera_status s;
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED: s = CHIMERA_ERR_BUSY; break;
    case SQLITE_NOMEM: s = CHIMERA_ERR_NOMEM; break;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: s = CHIMERA_ERR_CORRUPT; break;
    case SQLITE_READONLY:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_FULL:
    case SQLITE_PERM: s = CHIMERA_ERR_IO; break;
    default: s = CHIMERA_ERR_INTERNAL; break;
    }
    const char *msg = conn ? sqlite3_errmsg(conn) : sqlite3_errstr(rc);
    return cm_fail(err, s, "%s: %s", what, msg);
}

chimera_status meta_exec(sqlite3 *conn, const char *sql, const char *what, chimera_error *err)
{
    int rc = sqlite3_exec(conn, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? CHIMERA_OK : meta_sqlite_fail(err, conn, rc, what);
}

chimera_status meta_savepoint_begin(meta_db *db, chimera_error *err)
{
    /* Outside the caller's transaction, BEGIN IMMEDIATE takes the write lock up front: a
     * deferred transaction that reads and then writes can fail with BUSY at once (no
     * waiting) when another connection is writing. */
    if (!db->in_txn) return meta_exec(db->conn, "BEGIN IMMEDIATE", "begin", err);
    return meta_exec(db->conn, "SAVEPOINT meta_sp", "savepoint", err);
}

chimera_status meta_savepoint_release(meta_db *db, chimera_error *err)
{
    if (!db->in_txn) return meta_exec(db->conn, "COMMIT", "commit", err);
    return meta_exec(db->conn, "RELEASE meta_sp", "release savepoint", err);
}

void meta_savepoint_undo(meta_db *db)
{
    if (!db->in_txn) {
        if (!sqlite3_get_autocommit(db->conn)) sqlite3_exec(db->conn, "ROLLBACK", NULL, NULL, NULL);
        return;
    }
    sqlite3_exec(db->conn, "ROLLBACK TO meta_sp; RELEASE meta_sp", NULL, NULL, NULL);
}

int meta_quote_ident(const char *name, char *out, size_t cap)
{
    size_t k = 0;
    if (cap < 3) return -1;
    out[k++] = '"';
    for (const char *p = name; *p; p++) {
        size_t need = *p == '"' ? 2 : 1;
        if (k + need + 2 > cap) return -1;
        out[k++] = *p;
        if (*p == '"') out[k++] = '"';
    }
    out[k++] = '"';
    out[k] = '\0';
    return (int)k;
}

const char *meta_check_name(const char *name, size_t len)
{
    if (len == 0) return "an empty name";
    if (len > META_MAX_NAME) return "longer than 64 characters";
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        int alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
        int digit = c >= '0' && c <= '9';
        if (!alpha && !(digit && i > 0))
            return "not a name: [A-Za-z_][A-Za-z0-9_]* is allowed";
    }
    static const char *const reserved[] = {"rowid", "oid", "_rowid_"};
    for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
        if (strlen(reserved[i]) == len && sqlite3_strnicmp(name, reserved[i], (int)len) == 0)
            return "reserved by SQLite (an alias of the row id)";
    return NULL;
}

chimera_status meta_read_columns(sqlite3 *conn, meta_column *cols, int *n, chimera_error *err)
{
    *n = 0;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(conn, "SELECT name, type, pk FROM pragma_table_info('meta')", -1,
                                &st, NULL);
    if (rc != SQLITE_OK) return meta_sqlite_fail(err, conn, rc, "reading the columns");
    int have_id = 0, count = 0;
    chimera_status s = CHIMERA_OK;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        const char *type = (const char *)sqlite3_column_text(st, 1);
        int pk = sqlite3_column_int(st, 2);
        if (!name || !type) {
            s = cm_fail(err, CHIMERA_ERR_CORRUPT, "table meta: a column without a name or type");
            break;
        }
        if (strcmp(name, "id") == 0) {
            if (!pk || sqlite3_stricmp(type, "INTEGER") != 0) {
                s = cm_fail(err, CHIMERA_ERR_CORRUPT, "table meta: id is not the INTEGER PRIMARY KEY");
                break;
            }
            have_id = 1;
            continue;
        }
        if (count == META_MAX_COLUMNS || meta_check_name(name, strlen(name))) {
            s = cm_fail(err, CHIMERA_ERR_CORRUPT, "table meta: unexpected column '%.64s'", name);
            break;
        }
        meta_column *c = &cols[count++];
        snprintf(c->name, sizeof c->name, "%s", name);
        if (sqlite3_stricmp(type, "INTEGER") == 0) c->type = META_T_INTEGER;
        else if (sqlite3_stricmp(type, "REAL") == 0) c->type = META_T_REAL;
        else if (sqlite3_stricmp(type, "TEXT") == 0) c->type = META_T_TEXT;
        else {
            s = cm_fail(err, CHIMERA_ERR_CORRUPT, "table meta: column %s has type '%.32s'", name, type);
            break;
        }
    }
    if (s == CHIMERA_OK && rc != SQLITE_DONE) s = meta_sqlite_fail(err, conn, rc, "reading the columns");
    sqlite3_finalize(st);
    if (s == CHIMERA_OK && !have_id)
        s = cm_fail(err, CHIMERA_ERR_CORRUPT, "no table meta with an id column");
    if (s == CHIMERA_OK) *n = count;
    return s;
}

/* ---- open / close ------------------------------------------------------------------- */

/* Runs `sql` expecting one integer (or no row: *found = 0). */
static chimera_status query_int(sqlite3 *conn, const char *sql, int64_t *v, int *found,
                                const char *what, chimera_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(conn, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) return meta_sqlite_fail(err, conn, rc, what);
    rc = sqlite3_step(st);
    *found = rc == SQLITE_ROW;
    if (rc == SQLITE_ROW) *v = sqlite3_column_int64(st, 0);
    chimera_status s = CHIMERA_OK;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) s = meta_sqlite_fail(err, conn, rc, what);
    sqlite3_finalize(st);
    return s;
}

/* Creates the schema in an empty database (inside BEGIN IMMEDIATE, re-checked there, so
 * two processes creating at once end with one schema). */
static chimera_status create_schema(sqlite3 *conn, chimera_error *err)
{
    CM_TRY(meta_exec(conn, "BEGIN IMMEDIATE", "creating the metadata database", err));
    int64_t n_tables = 0;
    int found = 0;
    chimera_status s = query_int(conn, "SELECT count(*) FROM sqlite_schema", &n_tables, &found,
                                 "creating the metadata database", err);
    if (s == CHIMERA_OK && n_tables == 0) {
        char sql[256];
        snprintf(sql, sizeof sql,
                 "CREATE TABLE meta(id INTEGER PRIMARY KEY);"
                 "CREATE TABLE meta_state(key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
                 "INSERT INTO meta_state VALUES('format', %d), ('generation', 0);",
                 META_FORMAT_VERSION);
        s = meta_exec(conn, sql, "creating the metadata database", err);
    }
    if (s == CHIMERA_OK) s = meta_exec(conn, "COMMIT", "creating the metadata database", err);
    if (s != CHIMERA_OK) sqlite3_exec(conn, "ROLLBACK", NULL, NULL, NULL);
    return s;
}

/* Checks that the database is ours and of a format we read. */
static chimera_status check_schema(sqlite3 *conn, const char *path, chimera_error *err)
{
    int64_t format = 0;
    int found = 0;
    int64_t n_state = 0;
    CM_TRY(query_int(conn,
                     "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'meta_state'",
                     &n_state, &found, "reading the schema", err));
    if (n_state == 0)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s: not a Chimera metadata database", path);
    CM_TRY(query_int(conn, "SELECT value FROM meta_state WHERE key = 'format'", &format, &found,
                     "reading the format", err));
    if (!found) return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s: no format in meta_state", path);
    if (format > META_FORMAT_VERSION || format < 1)
        return cm_fail(err, CHIMERA_ERR_VERSION,
                       "%s: metadata format %lld; this Chimera reads format %d", path,
                       (long long)format, META_FORMAT_VERSION);
    meta_column cols[META_MAX_COLUMNS];
    int n = 0;
    chimera_status s = meta_read_columns(conn, cols, &n, err);
    if (s != CHIMERA_OK) return cm_fail_prefix(err, "%s", path);
    return CHIMERA_OK;
}

chimera_status meta_db_open(const char *path, int create, meta_db **out, chimera_error *err)
{
    if (!out) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "meta_db_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "meta_db_open: no path");
    struct stat sb;
    if (!create && stat(path, &sb) != 0)
        return cm_fail(err, CHIMERA_ERR_IO, "%s: %s", path, strerror(errno));
    meta_db *db = cm_calloc(1, sizeof *db);
    if (!db) return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", path);
    db->path = cm_strdup(path);
    if (!db->path) {
        cm_free(db);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", path);
    }
    int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX;
    int rc = sqlite3_open_v2(path, &db->conn, flags, NULL);
    chimera_status s = CHIMERA_OK;
    if (rc != SQLITE_OK) {
        s = meta_sqlite_fail(err, db->conn, rc, path);
        goto done;
    }
    sqlite3_db_config(db->conn, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
    sqlite3_db_config(db->conn, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
    sqlite3_db_config(db->conn, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, NULL);
    sqlite3_db_config(db->conn, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, NULL);
    sqlite3_db_config(db->conn, SQLITE_DBCONFIG_ENABLE_VIEW, 0, NULL);
    sqlite3_busy_timeout(db->conn, META_BUSY_TIMEOUT_MS);
    s = meta_exec(db->conn, "PRAGMA synchronous = FULL", path, err);
    if (s != CHIMERA_OK) goto done;
    int64_t n_tables = 0;
    int found = 0;
    /* The first read also rolls back a hot journal left by a crash, and tells a file
     * that is not a database (SQLITE_NOTADB) from one that is. */
    s = query_int(db->conn, "SELECT count(*) FROM sqlite_schema", &n_tables, &found, path, err);
    if (s != CHIMERA_OK) goto done;
    if (n_tables == 0) {
        if (!create) {
            s = cm_fail(err, CHIMERA_ERR_CORRUPT, "%s: an empty database, not Chimera metadata", path);
            goto done;
        }
        s = create_schema(db->conn, err);
        if (s != CHIMERA_OK) {
            cm_fail_prefix(err, "%s", path);
            goto done;
        }
    }
    s = check_schema(db->conn, path, err);
done:
    if (s != CHIMERA_OK) {
        meta_db_close(db);
        return s;
    }
    *out = db;
    return CHIMERA_OK;
}

void meta_db_close(meta_db *db)
{
    if (!db) return;
    if (db->conn) sqlite3_close_v2(db->conn); /* rolls back an open transaction */
    cm_free(db->path);
    cm_free(db);
}

const char *meta_db_path(const meta_db *db)
{
    return db->path;
}

/* ---- transactions and generation -------------------------------------------------- */

chimera_status meta_db_begin(meta_db *db, chimera_error *err)
{
    if (db->in_txn) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "%s: a transaction is already open", db->path);
    CM_TRY(meta_exec(db->conn, "BEGIN IMMEDIATE", "begin", err));
    db->in_txn = 1;
    return CHIMERA_OK;
}

chimera_status meta_db_commit(meta_db *db, chimera_error *err)
{
    if (!db->in_txn) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "%s: no transaction to commit", db->path);
    chimera_status s = meta_exec(db->conn, "COMMIT", "commit", err);
    if (s == CHIMERA_OK || sqlite3_get_autocommit(db->conn)) db->in_txn = 0;
    if (s != CHIMERA_OK) cm_fail_prefix(err, "%s", db->path);
    return s;
}

chimera_status meta_db_rollback(meta_db *db, chimera_error *err)
{
    if (!db->in_txn) return CHIMERA_OK;
    db->in_txn = 0;
    if (sqlite3_get_autocommit(db->conn)) return CHIMERA_OK; /* SQLite already rolled back */
    chimera_status s = meta_exec(db->conn, "ROLLBACK", "rollback", err);
    if (s != CHIMERA_OK) cm_fail_prefix(err, "%s", db->path);
    return s;
}

int meta_db_in_transaction(const meta_db *db)
{
    return db->in_txn;
}

chimera_status meta_db_generation(meta_db *db, int64_t *gen, chimera_error *err)
{
    *gen = 0;
    int found = 0;
    int64_t v = 0;
    CM_TRY(query_int(db->conn, "SELECT value FROM meta_state WHERE key = 'generation'", &v, &found,
                     "reading the generation", err));
    if (!found) return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s: no generation in meta_state", db->path);
    *gen = v;
    return CHIMERA_OK;
}

chimera_status meta_db_set_generation(meta_db *db, int64_t gen, chimera_error *err)
{
    if (gen < 0) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "generation %lld < 0", (long long)gen);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db->conn,
                                "INSERT OR REPLACE INTO meta_state(key, value) VALUES('generation', ?)",
                                -1, &st, NULL);
    if (rc != SQLITE_OK) return meta_sqlite_fail(err, db->conn, rc, "setting the generation");
    sqlite3_bind_int64(st, 1, gen);
    rc = sqlite3_step(st);
    chimera_status s = rc == SQLITE_DONE ? CHIMERA_OK
                                         : meta_sqlite_fail(err, db->conn, rc, "setting the generation");
    sqlite3_finalize(st);
    return s;
}

chimera_status meta_db_count(meta_db *db, int64_t *n, chimera_error *err)
{
    *n = 0;
    int found = 0;
    return query_int(db->conn, "SELECT count(*) FROM meta", n, &found, "counting records", err);
}

chimera_status meta_db_ids(meta_db *db, int64_t **ids, int64_t *n, chimera_error *err)
{
    *ids = NULL;
    *n = 0;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db->conn, "SELECT id FROM meta ORDER BY id", -1, &st, NULL);
    if (rc != SQLITE_OK) return meta_sqlite_fail(err, db->conn, rc, "listing records");
    int64_t *v = NULL, len = 0, cap = 0;
    chimera_status s = CHIMERA_OK;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (len == cap) {
            int64_t *grown = cm_realloc(v, (size_t)(cap ? 2 * cap : 1024) * sizeof *v);
            if (!grown) {
                s = cm_fail(err, CHIMERA_ERR_NOMEM, "listing records: out of memory");
                break;
            }
            v = grown;
            cap = cap ? 2 * cap : 1024;
        }
        v[len++] = sqlite3_column_int64(st, 0);
    }
    if (s == CHIMERA_OK && rc != SQLITE_DONE) s = meta_sqlite_fail(err, db->conn, rc, "listing records");
    sqlite3_finalize(st);
    if (s != CHIMERA_OK || len == 0) {
        cm_free(v);
        return s;
    }
    *ids = v;
    *n = len;
    return CHIMERA_OK;
}

chimera_status meta_db_delete_ids(meta_db *db, const int64_t *ids, int64_t n,
                                  int64_t *n_deleted, chimera_error *err)
{
    if (n_deleted) *n_deleted = 0;
    if (n < 0 || (n > 0 && !ids))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "meta_db_delete_ids: bad id list");
    if (n == 0) return CHIMERA_OK;
    CM_TRY(meta_savepoint_begin(db, err));
    sqlite3_stmt *st = NULL;
    int64_t gone = 0;
    int rc = sqlite3_prepare_v2(db->conn, "DELETE FROM meta WHERE id = ?", -1, &st, NULL);
    chimera_status s = CHIMERA_OK;
    if (rc != SQLITE_OK) s = meta_sqlite_fail(err, db->conn, rc, "deleting records");
    for (int64_t i = 0; s == CHIMERA_OK && i < n; i++) {
        sqlite3_bind_int64(st, 1, ids[i]);
        rc = sqlite3_step(st);
        if (rc != SQLITE_DONE) s = meta_sqlite_fail(err, db->conn, rc, "deleting records");
        gone += sqlite3_changes(db->conn);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    if (s == CHIMERA_OK) s = meta_savepoint_release(db, err);
    if (s != CHIMERA_OK) {
        meta_savepoint_undo(db);
        return cm_fail_prefix(err, "%s", db->path);
    }
    if (n_deleted) *n_deleted = gone;
    return CHIMERA_OK;
}
