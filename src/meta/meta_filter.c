/* Filter predicates: an SQL expression over the metadata, evaluated into an id set
 * (meta.h: meta_filter_ids).
 *
 * A filter comes from whoever calls search (a CLI flag, an HTTP request), so it is
 * treated as hostile. It must stay an expression and only read; four layers, each
 * sufficient against the classic attacks on its own:
 *   1. a lexical check before SQLite sees it: outside quoted strings and identifiers
 *      there may be no `;`, no comment, and no `)` that closes more than the filter
 *      opened. Then `SELECT id FROM meta WHERE (<expr>\n) ORDER BY id` cannot be turned
 *      into another statement (`1); DROP TABLE meta; --`) or grow a UNION that returns
 *      ids of its choosing (`1) UNION SELECT 42 --`); prepare's tail must also be empty;
 *   2. an authorizer (sqlite3_set_authorizer) active while the statement is prepared
 *      and run: SELECT, reads of table `meta` in the main database, recursive CTEs and
 *      the functions of an allow-list pass; anything else (PRAGMA, ATTACH, any write,
 *      sqlite_schema, meta_state, load_extension, fts3_tokenizer, random, ...) is
 *      refused at prepare time and named in the message;
 *   3. a fresh read-only connection per call, with ATTACH limited to 0 databases,
 *      defensive mode, no triggers or views, and no extension loading: nothing could
 *      write even if 1 and 2 let something through; it also makes concurrent filters
 *      independent (the authorizer and progress handler are per connection);
 *   4. a progress handler that interrupts the statement past the time limit, and
 *      limits on the filter's length, expression depth and value sizes (16 MiB), so a
 *      recursive CTE or a cross join of meta with itself ends in CHIMERA_ERR_CANCELLED.
 * Parameters are bound, never spliced into the SQL.
 *
 * XXX: the time limit bounds a hostile filter's CPU, not its temporary disk: an
 * ever-growing recursive CTE with UNION (not UNION ALL) spills its rows to SQLite's
 * temporary files for up to the limit. Denying SQLITE_RECURSIVE would close that, at
 * the price of recursive CTEs, which no filter seen so far needed; revisit if abused. */
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "meta/meta_impl.h"
#include "core/alloc.h"

#define META_FILTER_MAX_VALUE (16 << 20) /* bytes in a string or blob a filter makes */
#define META_FILTER_MAX_DEPTH 256        /* expression tree depth */
#define META_PROGRESS_OPS 1000           /* VM steps between clock checks (~10 us) */

static const char *const allowed_functions[] = {
    "abs",    "avg",       "coalesce", "count", "glob",   "ifnull",  "iif",
    "instr",  "json_array_length", "json_extract", "json_type", "json_valid", "length",
    "like",   "lower",     "ltrim",    "max",   "min",    "nullif",  "round",
    "rtrim",  "substr",    "substring", "sum",  "total",  "trim",    "typeof",
    "unicode", "upper",    "->",       "->>",
};

int meta_filter_allowed_function(const char *name)
{
    if (!name) return 0;
    for (size_t i = 0; i < sizeof allowed_functions / sizeof *allowed_functions; i++)
        if (sqlite3_stricmp(name, allowed_functions[i]) == 0) return 1;
    return 0;
}

typedef struct filter_ctx {
    char refused[128]; /* the first thing the authorizer refused */
    double deadline;
    int timed_out;
} filter_ctx;

static void refuse(filter_ctx *fc, const char *fmt, const char *arg)
{
    if (fc->refused[0]) return;
    snprintf(fc->refused, sizeof fc->refused, fmt, arg ? arg : "?");
}

static int authorize(void *user, int action, const char *a1, const char *a2, const char *dbname,
                     const char *inner)
{
    (void)inner;
    filter_ctx *fc = user;
    switch (action) {
    case SQLITE_SELECT:
    case SQLITE_RECURSIVE: return SQLITE_OK;
    case SQLITE_READ:
        /* A table used without naming a column (count(*)) is reported with an empty
         * column and no database; only main exists on this connection to hold a meta
         * (temp is empty and cannot be written, ATTACH is limited to 0). */
        if (a1 && strcmp(a1, "meta") == 0 && (!dbname || strcmp(dbname, "main") == 0)) return SQLITE_OK;
        refuse(fc, "reading table %s", a1);
        return SQLITE_DENY;
    case SQLITE_FUNCTION:
        if (meta_filter_allowed_function(a2)) return SQLITE_OK;
        refuse(fc, "the function %s()", a2);
        return SQLITE_DENY;
    case SQLITE_PRAGMA: refuse(fc, "PRAGMA %s", a1); return SQLITE_DENY;
    case SQLITE_ATTACH: refuse(fc, "ATTACH%s", ""); return SQLITE_DENY;
    case SQLITE_DETACH: refuse(fc, "DETACH%s", ""); return SQLITE_DENY;
    case SQLITE_INSERT:
    case SQLITE_UPDATE:
    case SQLITE_DELETE:
        /* a table-valued function (json_each, pragma_table_info) first registers itself
         * in the schema, which shows as an update of sqlite_master */
        if (a1 && strcmp(a1, "sqlite_master") == 0) refuse(fc, "a table-valued function%s", "");
        else refuse(fc, "writing table %s", a1);
        return SQLITE_DENY;
    case SQLITE_TRANSACTION:
    case SQLITE_SAVEPOINT: refuse(fc, "transaction control%s", ""); return SQLITE_DENY;
    default: break;
    }
    char what[32];
    snprintf(what, sizeof what, "%d", action);
    refuse(fc, "an SQL operation (authorizer action %s) other than reading", what);
    return SQLITE_DENY;
}

static int progress(void *user)
{
    filter_ctx *fc = user;
    if (cm_now() < fc->deadline) return 0;
    fc->timed_out = 1;
    return 1;
}

/* Layer 1 (see the top): no `;`, comments or stray `)` outside quotes; and a clear
 * message when the filter starts like a statement (SQLite would say "syntax error"). */
static chimera_status scan_expr(const char *e, chimera_error *err)
{
    static const char *const statements[] = {
        "ALTER", "ANALYZE", "ATTACH", "BEGIN", "COMMIT", "CREATE", "DELETE", "DETACH", "DROP",
        "END", "EXPLAIN", "INSERT", "PRAGMA", "REINDEX", "RELEASE", "REPLACE", "ROLLBACK",
        "SAVEPOINT", "SELECT", "UPDATE", "VACUUM", "VALUES", "WITH"};
    const char *w = e;
    while (*w == ' ' || *w == '\t' || *w == '\n' || *w == '\r') w++;
    size_t wl = 0;
    while ((w[wl] >= 'A' && w[wl] <= 'Z') || (w[wl] >= 'a' && w[wl] <= 'z')) wl++;
    if (wl && (w[wl] == '\0' || w[wl] == ' ' || w[wl] == '\t' || w[wl] == '\n' || w[wl] == '\r'))
        for (size_t i = 0; i < sizeof statements / sizeof *statements; i++)
            if (strlen(statements[i]) == wl && sqlite3_strnicmp(w, statements[i], (int)wl) == 0)
                return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                               "filter refused: %s starts a statement; a filter is an expression "
                               "(\"year >= ? AND lang = ?\")", statements[i]);

    int depth = 0, any = 0;
    for (const char *p = e; *p; p++) {
        char c = *p;
        long long col = (long long)(p - e) + 1;
        if (c == '\'' || c == '"' || c == '`' || c == '[') {
            char close = c == '[' ? ']' : c;
            const char *q = p + 1;
            for (;;) {
                if (!*q)
                    return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                                   "filter: the quote %c at column %lld is never closed", c, col);
                if (*q == close) {
                    if (close != ']' && q[1] == close) { /* doubled: an escaped quote */
                        q += 2;
                        continue;
                    }
                    break;
                }
                q++;
            }
            p = q;
            any = 1;
            continue;
        }
        if ((c == '-' && p[1] == '-') || (c == '/' && p[1] == '*'))
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                           "filter refused: a comment at column %lld (a filter is one expression)", col);
        if (c == ';')
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                           "filter refused: ';' at column %lld (a filter is one expression, not statements)", col);
        if (c == '(') depth++;
        if (c == ')' && --depth < 0)
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                           "filter refused: ')' at column %lld closes more than the filter opened", col);
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') any = 1;
    }
    if (depth > 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "filter: %d '(' never closed", depth);
    if (!any) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "filter: empty expression");
    return CHIMERA_OK;
}

/* Binds args[i] to parameter i+1: a JSON number as INTEGER or REAL, else TEXT. */
static int bind_arg(sqlite3_stmt *st, int idx, const char *a)
{
    int64_t iv = 0;
    double rv = 0;
    size_t n = strlen(a);
    switch (meta_parse_number(a, n, &iv, &rv)) {
    case 1: return sqlite3_bind_int64(st, idx, iv);
    case 2: return sqlite3_bind_double(st, idx, rv);
    default: return sqlite3_bind_text(st, idx, a, (int)n, SQLITE_STATIC);
    }
}

static chimera_status open_reader(const meta_db *db, int timeout_ms, sqlite3 **out, chimera_error *err)
{
    sqlite3 *c = NULL;
    int rc = sqlite3_open_v2(db->path, &c, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        chimera_status s = meta_sqlite_fail(err, c, rc, db->path);
        sqlite3_close_v2(c);
        return s;
    }
    sqlite3_db_config(c, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
    sqlite3_db_config(c, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
    sqlite3_db_config(c, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, NULL);
    sqlite3_db_config(c, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, NULL);
    sqlite3_db_config(c, SQLITE_DBCONFIG_ENABLE_VIEW, 0, NULL);
    sqlite3_limit(c, SQLITE_LIMIT_ATTACHED, 0);
    sqlite3_limit(c, SQLITE_LIMIT_SQL_LENGTH, META_FILTER_MAX_LENGTH + 64);
    sqlite3_limit(c, SQLITE_LIMIT_VARIABLE_NUMBER, META_FILTER_MAX_ARGS);
    sqlite3_limit(c, SQLITE_LIMIT_EXPR_DEPTH, META_FILTER_MAX_DEPTH);
    sqlite3_limit(c, SQLITE_LIMIT_LENGTH, META_FILTER_MAX_VALUE);
    sqlite3_busy_timeout(c, timeout_ms);
    *out = c;
    return CHIMERA_OK;
}

chimera_status meta_filter_ids(meta_db *db, const char *expr, const char *const *args,
                               int n_args, int timeout_ms, int64_t **ids, int64_t *n,
                               chimera_error *err)
{
    if (ids) *ids = NULL;
    if (n) *n = 0;
    if (!db || !expr || !ids || !n)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "meta_filter_ids: NULL argument");
    if (n_args < 0 || n_args > META_FILTER_MAX_ARGS || (n_args > 0 && !args))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "filter: %d arguments (at most %d)", n_args,
                       META_FILTER_MAX_ARGS);
    for (int i = 0; i < n_args; i++)
        if (!args[i]) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "filter: argument %d is NULL", i + 1);
    if (timeout_ms < 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "filter: time limit %d ms < 0", timeout_ms);
    if (timeout_ms == 0) timeout_ms = META_FILTER_TIMEOUT_MS;
    size_t elen = strlen(expr);
    if (elen > META_FILTER_MAX_LENGTH)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "filter: %zu characters (at most %d)", elen,
                       META_FILTER_MAX_LENGTH);
    CM_TRY(scan_expr(expr, err));

    static const char head[] = "SELECT id FROM meta WHERE (", foot[] = "\n) ORDER BY id";
    char *sql = cm_malloc(sizeof head + elen + sizeof foot);
    if (!sql) return cm_fail(err, CHIMERA_ERR_NOMEM, "filter: out of memory");
    memcpy(sql, head, sizeof head - 1);
    memcpy(sql + sizeof head - 1, expr, elen);
    memcpy(sql + sizeof head - 1 + elen, foot, sizeof foot);

    filter_ctx fc = {{0}, cm_now() + timeout_ms / 1000.0, 0};
    sqlite3 *c = NULL;
    sqlite3_stmt *st = NULL;
    int64_t *out = NULL, count = 0, cap = 0;
    chimera_status s = open_reader(db, timeout_ms, &c, err);
    if (s != CHIMERA_OK) goto done;
    /* The authorizer stays set while the statement runs: if the schema changes under
     * it, SQLite prepares it again inside sqlite3_step, and that must be checked too. */
    sqlite3_set_authorizer(c, authorize, &fc);
    sqlite3_progress_handler(c, META_PROGRESS_OPS, progress, &fc);
    const char *tail = NULL;
    int rc = sqlite3_prepare_v2(c, sql, -1, &st, &tail);
    if (rc != SQLITE_OK) {
        if (fc.timed_out)
            s = cm_fail(err, CHIMERA_ERR_CANCELLED, "filter: stopped after its time limit (%d ms)", timeout_ms);
        else if ((rc & 0xff) == SQLITE_AUTH || fc.refused[0])
            s = cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                        "filter refused: %s is not allowed (a filter may only read table meta "
                        "and call a fixed set of functions such as lower, abs, like)",
                        fc.refused[0] ? fc.refused : sqlite3_errmsg(c));
        else if ((rc & 0xff) == SQLITE_ERROR || (rc & 0xff) == SQLITE_TOOBIG || (rc & 0xff) == SQLITE_RANGE)
            s = cm_fail(err, CHIMERA_ERR_INVALID_ARG, "filter: %s", sqlite3_errmsg(c));
        else
            s = meta_sqlite_fail(err, c, rc, "filter");
        goto done;
    }
    while (tail && (*tail == ' ' || *tail == '\n' || *tail == '\t' || *tail == '\r')) tail++;
    if (!st || (tail && *tail) || !sqlite3_stmt_readonly(st) || sqlite3_column_count(st) != 1) {
        s = cm_fail(err, CHIMERA_ERR_INVALID_ARG, "filter refused: not a single read-only expression");
        goto done;
    }
    int n_params = sqlite3_bind_parameter_count(st);
    for (int i = 1; i <= n_params; i++) {
        const char *name = sqlite3_bind_parameter_name(st, i);
        if (name) {
            s = cm_fail(err, CHIMERA_ERR_INVALID_ARG, "filter: parameter %.40s: only plain '?' parameters are allowed", name);
            goto done;
        }
    }
    if (n_params != n_args) {
        s = cm_fail(err, CHIMERA_ERR_INVALID_ARG, "filter has %d '?' parameter%s but %d argument%s given",
                    n_params, n_params == 1 ? "" : "s", n_args, n_args == 1 ? " was" : "s were");
        goto done;
    }
    for (int i = 0; i < n_args; i++) {
        rc = bind_arg(st, i + 1, args[i]);
        if (rc != SQLITE_OK) {
            s = meta_sqlite_fail(err, c, rc, "filter: binding an argument");
            goto done;
        }
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == cap) {
            int64_t nc = cap ? 2 * cap : 256;
            int64_t *no = cm_realloc(out, (size_t)nc * sizeof *no);
            if (!no) {
                s = cm_fail(err, CHIMERA_ERR_NOMEM, "filter: out of memory (%lld ids)", (long long)count);
                goto done;
            }
            out = no;
            cap = nc;
        }
        out[count++] = sqlite3_column_int64(st, 0);
    }
    if (rc != SQLITE_DONE) {
        int prim = rc & 0xff;
        if (fc.timed_out || prim == SQLITE_INTERRUPT)
            s = cm_fail(err, CHIMERA_ERR_CANCELLED,
                        "filter: stopped after its time limit (%d ms); simplify it or allow more time",
                        timeout_ms);
        else if (prim == SQLITE_ERROR || prim == SQLITE_TOOBIG || prim == SQLITE_MISMATCH ||
                 prim == SQLITE_RANGE || prim == SQLITE_AUTH)
            s = cm_fail(err, CHIMERA_ERR_INVALID_ARG, "filter: %s%s%s", sqlite3_errmsg(c),
                        fc.refused[0] ? ": refused " : "", fc.refused);
        else
            s = meta_sqlite_fail(err, c, rc, "filter");
    }
done:
    sqlite3_finalize(st);
    if (c) sqlite3_close_v2(c);
    cm_free(sql);
    if (s != CHIMERA_OK) {
        cm_free(out);
        return s;
    }
    if (count == 0) {
        cm_free(out);
        out = NULL;
    }
    *ids = out;
    *n = count;
    return CHIMERA_OK;
}
