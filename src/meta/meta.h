/* Document metadata in SQLite, and filter predicates that turn it into id sets.
 *
 * What it is for: `chimera meta import` stores one record per document (keyed by the
 * document's id) in an SQLite database inside the index directory, and a search may take
 * a filter, an SQL expression with `?` parameters ("year >= ? AND lang = ?"), that is
 * evaluated here into the sorted set of matching ids. fast-plaid and NextPlaid filter the
 * same way. This module is the only one that includes sqlite3.h; it depends on core only.
 *
 * The database (one file; the caller chooses its path):
 *   meta        (id INTEGER PRIMARY KEY, <column> INTEGER|REAL|TEXT, ...): the records;
 *               at most META_MAX_COLUMNS columns besides id.
 *   meta_state  (key TEXT PRIMARY KEY, value INTEGER): 'format' (META_FORMAT_VERSION)
 *               and 'generation' (the index generation the rows match; 0 when new).
 *
 * Records (JSON Lines and CSV, meta_import.c has the details):
 *   - every record has an integer `id` in [0, 2^63-1]; ids are unique within an input;
 *   - other fields become columns named after them: [A-Za-z_][A-Za-z0-9_]*, at most 64
 *     characters, unique ignoring case (SQLite's names are case-insensitive), not `id`,
 *     `rowid`, `oid` or `_rowid_`;
 *   - a column's type is inferred from all its values in the input: INTEGER when all are
 *     integers or booleans (stored 0/1), REAL when numbers with at least one non-integer,
 *     TEXT otherwise (numbers and booleans in a TEXT column are stored as written:
 *     `2.50`, `true`); a column of nulls only is TEXT;
 *   - JSON arrays and objects are stored as TEXT holding their JSON (as written), so a
 *     filter can use json_extract(tags, '$[0]') or json_array_length(tags);
 *   - a malformed input (bad JSON or CSV, a missing, negative, fractional or duplicate id,
 *     a wrong field count, invalid UTF-8, a bad column name) fails with
 *     CHIMERA_ERR_FORMAT and "source:line: what" in the message, and nothing changes.
 *
 * Transactions: every function that changes the database runs inside a savepoint, so it
 * either applies whole or not at all. Between meta_db_begin and meta_db_commit those
 * savepoints join the caller's transaction, and the index writer can make rows and the
 * generation change together: begin, delete/upsert, set_generation(G+1), commit.
 *
 * Threads: the functions that use a handle's connection (everything but meta_filter_ids)
 * are for one thread at a time. meta_filter_ids opens its own read-only connection per
 * call, so any number of threads may filter at once, and a filter sees the last committed
 * state, never the changes of a transaction still open on the handle.
 *
 * Errors: every fallible function returns a chimera_status and writes the reason into the
 * caller's chimera_error (may be NULL); on failure, outputs are left empty (NULL / 0).
 */
#ifndef CHIMERA_META_META_H
#define CHIMERA_META_META_H

#include <stddef.h>
#include <stdint.h>

#include "chimera.h"

#define META_FORMAT_VERSION 1
#define META_MAX_COLUMNS 64           /* columns besides id */
#define META_MAX_NAME 64              /* characters in a column name */
#define META_FILTER_TIMEOUT_MS 2000   /* a filter's time limit when the caller passes 0 */
#define META_FILTER_MAX_LENGTH 16384  /* characters in a filter expression */
#define META_FILTER_MAX_ARGS 256      /* `?` parameters in a filter */

typedef struct meta_db meta_db;

typedef enum meta_input_format {
    META_INPUT_JSONL = 0, /* one JSON object per line */
    META_INPUT_CSV = 1,   /* RFC 4180 CSV with a header row naming the fields */
} meta_input_format;

typedef enum meta_load_mode {
    META_LOAD_REPLACE = 0, /* the input becomes the whole table (old rows and columns go) */
    META_LOAD_UPSERT = 1,  /* each record replaces the row with its id or adds one; other
                              rows stay; new fields add columns; existing columns keep
                              their type (a string for an INTEGER or REAL column is
                              refused: re-import to change a column's type) */
} meta_load_mode;

/* What a load did (optional out-parameter). */
typedef struct meta_load_info {
    int64_t n_records;  /* records read and stored */
    int n_columns;      /* columns of the table afterwards, besides id */
    int n_new_columns;  /* of which added by this load */
} meta_load_info;

/* ---- the database ------------------------------------------------------------------- */

/* Opens the metadata database at `path`. With create != 0 a missing file is created with
 * an empty `meta` table and generation 0; with create == 0 it must exist.
 * @param out receives the handle; NULL on failure.
 * @return CHIMERA_OK; CHIMERA_ERR_IO (missing file without create, cannot open or
 *         create); CHIMERA_ERR_CORRUPT (not an SQLite database, or not one of ours);
 *         CHIMERA_ERR_VERSION (a newer metadata format); CHIMERA_ERR_NOMEM.
 * @note A write-protected file opens read-only: filters work, changes fail with
 *       CHIMERA_ERR_IO. A transaction left by a crash is rolled back by the open. */
chimera_status meta_db_open(const char *path, int create, meta_db **out, chimera_error *err);

/* Closes the handle (NULL is fine); a transaction still open is rolled back. */
void meta_db_close(meta_db *db);

/* The path the handle was opened with; valid until close. */
const char *meta_db_path(const meta_db *db);

/* Starts the caller's transaction (BEGIN IMMEDIATE: takes the write lock now, waiting up
 * to a few seconds for another writer). Changes made until meta_db_commit or
 * meta_db_rollback apply together or not at all.
 * @return CHIMERA_OK; CHIMERA_ERR_INVALID_ARG (a transaction is already open);
 *         CHIMERA_ERR_BUSY (another connection holds the write lock); CHIMERA_ERR_IO. */
chimera_status meta_db_begin(meta_db *db, chimera_error *err);

/* Commits the caller's transaction (durably: synchronous=FULL).
 * @return CHIMERA_OK; CHIMERA_ERR_INVALID_ARG (no transaction is open); CHIMERA_ERR_BUSY
 *         (readers kept the database past the busy timeout; the transaction stays open,
 *         so commit can be retried or rolled back); CHIMERA_ERR_IO. */
chimera_status meta_db_commit(meta_db *db, chimera_error *err);

/* Rolls the caller's transaction back; without one it does nothing. */
chimera_status meta_db_rollback(meta_db *db, chimera_error *err);

/* Whether the caller's transaction is open (1) or not (0). */
int meta_db_in_transaction(const meta_db *db);

/* The index generation recorded by the last committed (or, inside the caller's
 * transaction, the last set) meta_db_set_generation; 0 for a new database. */
chimera_status meta_db_generation(meta_db *db, int64_t *gen, chimera_error *err);
chimera_status meta_db_set_generation(meta_db *db, int64_t gen, chimera_error *err);

/* Number of records. */
chimera_status meta_db_count(meta_db *db, int64_t *n, chimera_error *err);

/* The ids of all records, ascending, as this handle sees them: inside the caller's
 * transaction its own uncommitted changes included (meta_filter_ids sees only what is
 * committed).
 * @param ids receives cm_malloc'd ids (free with cm_free); NULL when *n == 0. */
chimera_status meta_db_ids(meta_db *db, int64_t **ids, int64_t *n, chimera_error *err);

/* Deletes the rows of `ids` (ids without a row are ignored).
 * @param n_deleted optional: how many rows went. */
chimera_status meta_db_delete_ids(meta_db *db, const int64_t *ids, int64_t n,
                                  int64_t *n_deleted, chimera_error *err);

/* ---- loading records ---------------------------------------------------------------- */

/* Loads the records of `text` (len bytes; need not be NUL-terminated) in format `fmt`,
 * replacing the table or upserting into it (`mode`). `source` names the input in
 * messages ("source:line: ..."). All or nothing.
 * @param info optional: what was loaded.
 * @return CHIMERA_OK; CHIMERA_ERR_FORMAT (a malformed record, with its line; or, for
 *         META_LOAD_REPLACE, an input without records, which would silently erase all
 *         metadata); CHIMERA_ERR_INVALID_ARG; CHIMERA_ERR_IO (cannot write: a read-only
 *         file); CHIMERA_ERR_BUSY; CHIMERA_ERR_NOMEM. */
chimera_status meta_load_text(meta_db *db, meta_input_format fmt, meta_load_mode mode,
                              const char *text, size_t len, const char *source,
                              meta_load_info *info, chimera_error *err);

/* meta_load_text over a whole file (read into memory; source = path). */
chimera_status meta_load_file(meta_db *db, meta_input_format fmt, meta_load_mode mode,
                              const char *path, meta_load_info *info, chimera_error *err);

/* `chimera meta import`: the file's records replace the whole table. */
chimera_status meta_import_jsonl(meta_db *db, const char *path, meta_load_info *info,
                                 chimera_error *err);
chimera_status meta_import_csv(meta_db *db, const char *path, meta_load_info *info,
                               chimera_error *err);

/* For add / update: upserts JSON Lines records held in memory (each replaces the whole
 * row of its id: fields it lacks become NULL). */
chimera_status meta_db_upsert_jsonl_records(meta_db *db, const char *text, size_t len,
                                            const char *source, meta_load_info *info,
                                            chimera_error *err);

/* ---- filters ------------------------------------------------------------------------ */

/* Evaluates the filter expression `expr` over the committed records and returns the ids
 * of those for which it is true, ascending.
 *
 * The expression is compiled as `SELECT id FROM meta WHERE (<expr>) ORDER BY id` on a
 * fresh read-only connection, and must be an expression: no `;`, no comments, balanced
 * parentheses outside quotes (so it cannot close the WHERE's parenthesis). An SQLite
 * authorizer allows only reading the table `meta` (subqueries over it included) and the
 * functions of meta_filter_allowed_function(); PRAGMA, ATTACH, writes, other tables
 * (sqlite_schema, meta_state), load_extension, random() and the rest are refused.
 * Parameters are plain `?`s bound in order to args[0..n_args): an argument written as a
 * JSON number is bound as an INTEGER ("-12"; "007" and "+5" stay text) or a REAL ("2.5",
 * "1e3"), anything else as TEXT; a column's affinity converts as SQLite compares.
 * The query runs for at most timeout_ms milliseconds (0: META_FILTER_TIMEOUT_MS).
 *
 * @param ids receives cm_malloc'd ids (free with cm_free); NULL when *n == 0.
 * @return CHIMERA_OK; CHIMERA_ERR_INVALID_ARG (a syntax error, with SQLite's message; a
 *         refused operation, named; a `;`, comment or unbalanced parenthesis; a wrong
 *         number of arguments or a named parameter; a run-time error such as integer
 *         overflow); CHIMERA_ERR_CANCELLED (the time limit passed); CHIMERA_ERR_IO,
 *         CHIMERA_ERR_BUSY, CHIMERA_ERR_NOMEM. Nothing in the database changes, ever. */
chimera_status meta_filter_ids(meta_db *db, const char *expr, const char *const *args,
                               int n_args, int timeout_ms, int64_t **ids, int64_t *n,
                               chimera_error *err);

/* Whether a filter may call the SQL function `name` (case-insensitive): abs, avg,
 * coalesce, count, glob, ifnull, iif, instr, json_array_length, json_extract, json_type,
 * json_valid, length, like, lower, ltrim, max, min, nullif, round, rtrim, substr,
 * substring, sum, total, trim, typeof, unicode, upper, and the -> and ->> operators. */
int meta_filter_allowed_function(const char *name);

#endif
