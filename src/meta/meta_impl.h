/* Private to src/meta/: the handle and the SQLite helpers its files share. */
#ifndef CHIMERA_META_META_IMPL_H
#define CHIMERA_META_META_IMPL_H

#include <sqlite3.h>

#include "meta/meta.h"

struct meta_db {
    sqlite3 *conn; /* read-write (or read-only when the file is write-protected) */
    char *path;
    int in_txn;    /* the caller's meta_db_begin is open */
};

/* Column types of the meta table. */
typedef enum meta_type { META_T_INTEGER = 1, META_T_REAL = 2, META_T_TEXT = 3 } meta_type;

typedef struct meta_column {
    char name[META_MAX_NAME + 1];
    meta_type type;
} meta_column;

/* How long a connection waits for another's lock before SQLITE_BUSY. */
#define META_BUSY_TIMEOUT_MS 10000

/* Turns an SQLite result code into a status (BUSY/LOCKED -> BUSY, NOMEM -> NOMEM,
 * CORRUPT/NOTADB -> CORRUPT, READONLY/IOERR/CANTOPEN/FULL -> IO, else INTERNAL) and
 * writes "what: <sqlite message>" into err. */
chimera_status meta_sqlite_fail(chimera_error *err, sqlite3 *conn, int rc, const char *what);

/* Runs SQL without results; fails with meta_sqlite_fail(what). */
chimera_status meta_exec(sqlite3 *conn, const char *sql, const char *what, chimera_error *err);

/* Savepoints: every change runs inside one, so it applies whole or not at all, on its own
 * or inside the caller's transaction. release commits the savepoint (and the transaction
 * when it began it); undo rolls back to it and releases it. */
chimera_status meta_savepoint_begin(meta_db *db, chimera_error *err);
chimera_status meta_savepoint_release(meta_db *db, chimera_error *err);
void meta_savepoint_undo(meta_db *db);

/* Reads the columns of the meta table besides id, in table order, into cols (capacity
 * META_MAX_COLUMNS); *n receives their count. */
chimera_status meta_read_columns(sqlite3 *conn, meta_column *cols, int *n, chimera_error *err);

/* Writes `name` as a quoted SQL identifier ("name", quotes doubled) into out (capacity
 * cap); returns the length, or -1 when it does not fit. */
int meta_quote_ident(const char *name, char *out, size_t cap);

/* Validates a column name: [A-Za-z_][A-Za-z0-9_]*, 1..META_MAX_NAME characters, not one
 * of SQLite's rowid aliases. Returns NULL when valid, else a static reason. */
const char *meta_check_name(const char *name, size_t len);

/* Parses s[0..n) by JSON's number grammar -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?:
 * returns 1 (an integer that fits int64: *i), 2 (any other number: *r), 0 (not a number)
 * or -1 (a number beyond double's range). Shared by the CSV reader and filter arguments,
 * so "007" or "+5" is text in both. */
int meta_parse_number(const char *s, size_t n, int64_t *i, double *r);

#endif
