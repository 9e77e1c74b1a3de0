/* Tests of src/meta/: document metadata in SQLite and filter predicates.
 *
 * What this proves: JSON Lines and CSV imports type their columns from the data (INTEGER,
 * REAL for mixed integers and reals, TEXT for anything else, booleans as 0/1, nested
 * values as their JSON text, CSV "007" as text) and replace the whole table; every kind
 * of malformed input is refused with CHIMERA_ERR_FORMAT and "source:line" naming the
 * right line, and leaves the table exactly as it was; upserts replace whole rows, add
 * columns and refuse a string for a numeric column; row changes, generation and loads
 * inside the caller's transaction commit or roll back together (a failed load inside it
 * undoes only itself), and filters see only committed state; filter parameters bind as
 * documented; injection attempts (statement chaining, UNION through a closed
 * parenthesis, ATTACH, PRAGMA, load_extension, other tables, table-valued functions,
 * random(), named parameters) are refused with a message naming what, and change
 * nothing; a never-ending recursive CTE and a huge cross join stop at the time limit;
 * random predicates agree exactly with a brute-force three-valued evaluation in C over
 * the same records, imported from JSONL and from CSV; filters run from several threads
 * at once agree; and failing each allocation in turn never crashes or leaks. */
#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tmpdir.h"
#include "core/clock.h"
#include "meta/meta.h"
#include "core/alloc.h"

/* ---- helpers --------------------------------------------------------------------------- */

static meta_db *fresh_db(const char *name)
{
    char path[512];
    test_path(path, sizeof path, name);
    unlink(path);
    meta_db *db = NULL;
    chimera_error err = {0};
    CHECK_OK(meta_db_open(path, 1, &db, &err), &err);
    return db;
}

static chimera_status load(meta_db *db, meta_input_format fmt, meta_load_mode mode,
                           const char *text, meta_load_info *info, chimera_error *err)
{
    return meta_load_text(db, fmt, mode, text, strlen(text), "src", info, err);
}

/* A text dump of the whole database (schema and rows), through a separate connection, to
 * prove that something changed nothing. */
static void dump(meta_db *db, char *out, size_t cap)
{
    sqlite3 *c = NULL;
    out[0] = '\0';
    if (sqlite3_open_v2(meta_db_path(db), &c, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        snprintf(out, cap, "cannot open");
        sqlite3_close(c);
        return;
    }
    const char *sql[] = {"SELECT type || name || ifnull(sql, '') FROM sqlite_schema ORDER BY name",
                         "SELECT key || '=' || value FROM meta_state ORDER BY key",
                         "SELECT * FROM meta ORDER BY id"};
    size_t k = 0;
    for (int q = 0; q < 3; q++) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(c, sql[q], -1, &st, NULL) != SQLITE_OK) continue;
        while (sqlite3_step(st) == SQLITE_ROW) {
            for (int i = 0; i < sqlite3_column_count(st); i++) {
                const char *t = (const char *)sqlite3_column_text(st, i);
                int n = snprintf(out + k, cap - k, "%s[%d]|", t ? t : "NULL", sqlite3_column_type(st, i));
                if (n < 0 || (size_t)n >= cap - k) break;
                k += (size_t)n;
            }
        }
        sqlite3_finalize(st);
    }
    sqlite3_close(c);
}

/* Value of `expr` for the row with id `id`, as text with its storage class:
 * "INTEGER:5", "REAL:2.5", "TEXT:en", "NULL". */
static void cell(meta_db *db, const char *col, int64_t id, char *out, size_t cap)
{
    sqlite3 *c = NULL;
    snprintf(out, cap, "none");
    if (sqlite3_open_v2(meta_db_path(db), &c, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        sqlite3_close(c);
        return;
    }
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT typeof(\"%s\"), \"%s\" FROM meta WHERE id = %lld", col, col,
             (long long)id);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(c, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        const char *v = (const char *)sqlite3_column_text(st, 1);
        if (strcmp(t, "null") == 0) snprintf(out, cap, "NULL");
        else snprintf(out, cap, "%s:%s", strcmp(t, "integer") == 0 ? "INTEGER" : strcmp(t, "real") == 0 ? "REAL" : "TEXT", v ? v : "");
    }
    sqlite3_finalize(st);
    sqlite3_close(c);
}

/* Declared type of a column ("INTEGER", "REAL", "TEXT"; "" if absent). */
static void decl_type(meta_db *db, const char *col, char *out, size_t cap)
{
    sqlite3 *c = NULL;
    out[0] = '\0';
    if (sqlite3_open_v2(meta_db_path(db), &c, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        sqlite3_close(c);
        return;
    }
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(c, "SELECT type FROM pragma_table_info('meta') WHERE name = ?", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, col, -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW) snprintf(out, cap, "%s", (const char *)sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    sqlite3_close(c);
}

#define CHECK_CELL(db, col, id, want)                                                          \
    do {                                                                                       \
        char got_[256];                                                                        \
        cell(db, col, id, got_, sizeof got_);                                                  \
        CHECKF(strcmp(got_, want) == 0, "%s of id %d: got %s, want %s", col, (int)(id), got_, want); \
    } while (0)

#define CHECK_TYPE(db, col, want)                                                              \
    do {                                                                                       \
        char got_[64];                                                                         \
        decl_type(db, col, got_, sizeof got_);                                                 \
        CHECKF(strcmp(got_, want) == 0, "column %s: type %s, want %s", col, got_, want);       \
    } while (0)

/* Runs a filter and compares its ids with want[0..n_want). */
static void expect_ids(meta_db *db, const char *expr, const char *const *args, int n_args,
                       const int64_t *want, int64_t n_want)
{
    int64_t *ids = NULL, n = -1;
    chimera_error err = {0};
    chimera_status s = meta_filter_ids(db, expr, args, n_args, 0, &ids, &n, &err);
    CHECKF(s == CHIMERA_OK, "filter '%s': %s %s", expr, chimera_status_str(s), err.msg);
    int same = s == CHIMERA_OK && n == n_want;
    for (int64_t i = 0; same && i < n; i++) same = ids[i] == want[i];
    CHECKF(same, "filter '%s': %lld ids, want %lld", expr, (long long)n, (long long)n_want);
    cm_free(ids);
}

/* ---- open ---------------------------------------------------------------------------- */

static void test_open(void)
{
    chimera_error err = {0};
    char path[512];
    meta_db *db = NULL;
    CHECK_STATUS(meta_db_open(test_path(path, sizeof path, "missing.db"), 0, &db, &err), CHIMERA_ERR_IO, &err);
    CHECK(db == NULL);
    static const char junk[] = "this is not a database, not at all........"
                               "..................................................................";
    test_write_file(test_path(path, sizeof path, "junk.db"), junk, sizeof junk - 1);
    CHECK_STATUS(meta_db_open(path, 1, &db, &err), CHIMERA_ERR_CORRUPT, &err);
    CHECK(db == NULL);
    /* an SQLite database that is someone else's */
    sqlite3 *c = NULL;
    test_path(path, sizeof path, "other.db");
    CHECK(sqlite3_open(path, &c) == SQLITE_OK);
    CHECK(sqlite3_exec(c, "CREATE TABLE t(x)", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(c);
    CHECK_STATUS(meta_db_open(path, 1, &db, &err), CHIMERA_ERR_CORRUPT, &err);
    CHECK(strstr(err.msg, "not a Chimera metadata database") != NULL);
    /* a newer format */
    db = fresh_db("newer.db");
    CHECK(sqlite3_open(meta_db_path(db), &c) == SQLITE_OK);
    CHECK(sqlite3_exec(c, "UPDATE meta_state SET value = 99 WHERE key = 'format'", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(c);
    snprintf(path, sizeof path, "%s", meta_db_path(db));
    meta_db_close(db);
    db = NULL;
    CHECK_STATUS(meta_db_open(path, 0, &db, &err), CHIMERA_ERR_VERSION, &err);
    /* new: empty, generation 0; reopens */
    db = fresh_db("new.db");
    int64_t g = -1, n = -1;
    CHECK_OK(meta_db_generation(db, &g, &err), &err);
    CHECK(g == 0);
    CHECK_OK(meta_db_count(db, &n, &err), &err);
    CHECK(n == 0);
    snprintf(path, sizeof path, "%s", meta_db_path(db));
    meta_db_close(db);
    CHECK_OK(meta_db_open(path, 0, &db, &err), &err);
    meta_db_close(db);
    meta_db_close(NULL);
}

/* ---- typed imports ------------------------------------------------------------------- */

static void test_import_jsonl(void)
{
    meta_db *db = fresh_db("jsonl.db");
    chimera_error err = {0};
    meta_load_info info;
    const char *text =
        "\xEF\xBB\xBF{\"id\": 3, \"year\": 2020, \"score\": 1, \"lang\": \"en\", \"ok\": true, \"mix\": 5,"
        " \"tags\": [\"a\", {\"b\": null}], \"nul\": null}\r\n"
        "\n"
        "   \t\n"
        "{\"id\":1,\"year\":1999,\"score\":2.5,\"lang\":\"fr\",\"ok\":false,\"mix\":\"five\",\"tags\":{},"
        "\"esc\":\"q\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\"}\n"
        "{\"id\": 0, \"score\": -1e2, \"mix\": 2.50, \"Big\": 123456789012345678901234}\n"
        "{\"id\": 9223372036854775807}";
    CHECK_OK(load(db, META_INPUT_JSONL, META_LOAD_REPLACE, text, &info, &err), &err);
    CHECK(info.n_records == 4);
    CHECK(info.n_columns == 9);
    CHECK_TYPE(db, "year", "INTEGER");
    CHECK_TYPE(db, "score", "REAL");
    CHECK_TYPE(db, "lang", "TEXT");
    CHECK_TYPE(db, "ok", "INTEGER");
    CHECK_TYPE(db, "mix", "TEXT");
    CHECK_TYPE(db, "tags", "TEXT");
    CHECK_TYPE(db, "nul", "TEXT");
    CHECK_TYPE(db, "esc", "TEXT");
    CHECK_TYPE(db, "Big", "REAL");
    CHECK_CELL(db, "year", 3, "INTEGER:2020");
    CHECK_CELL(db, "year", 0, "NULL");
    CHECK_CELL(db, "score", 3, "REAL:1.0");
    CHECK_CELL(db, "score", 1, "REAL:2.5");
    CHECK_CELL(db, "score", 0, "REAL:-100.0");
    CHECK_CELL(db, "ok", 3, "INTEGER:1");
    CHECK_CELL(db, "ok", 1, "INTEGER:0");
    CHECK_CELL(db, "mix", 3, "TEXT:5");
    CHECK_CELL(db, "mix", 1, "TEXT:five");
    CHECK_CELL(db, "mix", 0, "TEXT:2.50");
    CHECK_CELL(db, "tags", 3, "TEXT:[\"a\", {\"b\": null}]");
    CHECK_CELL(db, "tags", 1, "TEXT:{}");
    CHECK_CELL(db, "nul", 3, "NULL");
    CHECK_CELL(db, "esc", 1, "TEXT:q\"\\/\b\f\n\r\t\xC3\xA9\xF0\x9F\x98\x80");
    CHECK_CELL(db, "Big", 0, "REAL:1.23456789012346e+23");
    CHECK_CELL(db, "lang", INT64_MAX, "NULL");
    /* nested values are usable from filters */
    const int64_t want3[] = {3};
    expect_ids(db, "json_extract(tags, '$[0]') = ?", (const char *[]){"a"}, 1, want3, 1);
    expect_ids(db, "tags ->> '$[0]' = 'a'", NULL, 0, want3, 1);
    /* a second import replaces everything: rows and columns */
    CHECK_OK(load(db, META_INPUT_JSONL, META_LOAD_REPLACE, "{\"id\": 7, \"only\": 1}\n", &info, &err), &err);
    CHECK(info.n_records == 1 && info.n_columns == 1);
    CHECK_TYPE(db, "year", "");
    CHECK_TYPE(db, "only", "INTEGER");
    int64_t n = 0;
    CHECK_OK(meta_db_count(db, &n, &err), &err);
    CHECK(n == 1);
    meta_db_close(db);
}

static void test_import_csv(void)
{
    meta_db *db = fresh_db("csv.db");
    chimera_error err = {0};
    meta_load_info info;
    const char *text =
        "\xEF\xBB\xBFid,year,score,zip,title,note\r\n"
        "5,2021,1,007,\"Hello, \"\"world\"\"\",\r\n"
        "\r\n"
        "2,1999,2.5,12345,\"two\nlines\",\"\"\n"
        "9,,1e3,+5,plain,x\n"
        "11,-4,-0.5,.5,1.,\"3\"";
    CHECK_OK(load(db, META_INPUT_CSV, META_LOAD_REPLACE, text, &info, &err), &err);
    CHECK(info.n_records == 4 && info.n_columns == 5);
    CHECK_TYPE(db, "year", "INTEGER");
    CHECK_TYPE(db, "score", "REAL");
    CHECK_TYPE(db, "zip", "TEXT");
    CHECK_TYPE(db, "title", "TEXT");
    CHECK_TYPE(db, "note", "TEXT");
    CHECK_CELL(db, "year", 5, "INTEGER:2021");
    CHECK_CELL(db, "year", 9, "NULL");
    CHECK_CELL(db, "year", 11, "INTEGER:-4");
    CHECK_CELL(db, "score", 9, "REAL:1000.0");
    CHECK_CELL(db, "zip", 5, "TEXT:007");
    CHECK_CELL(db, "zip", 2, "TEXT:12345");
    CHECK_CELL(db, "zip", 9, "TEXT:+5");
    CHECK_CELL(db, "title", 5, "TEXT:Hello, \"world\"");
    CHECK_CELL(db, "title", 2, "TEXT:two\nlines");
    CHECK_CELL(db, "title", 11, "TEXT:1.");
    CHECK_CELL(db, "note", 5, "NULL");
    CHECK_CELL(db, "note", 2, "TEXT:");
    CHECK_CELL(db, "note", 11, "TEXT:3");
    /* files through the wrappers */
    char path[512];
    test_path(path, sizeof path, "m.csv");
    test_write_file(path, "id,a\n1,x\n", 9);
    CHECK_OK(meta_import_csv(db, path, &info, &err), &err);
    CHECK(info.n_records == 1);
    test_path(path, sizeof path, "m.jsonl");
    test_write_file(path, "{\"id\":4,\"b\":1}\n", 15);
    CHECK_OK(meta_import_jsonl(db, path, &info, &err), &err);
    CHECK(info.n_records == 1);
    CHECK_STATUS(meta_import_jsonl(db, test_path(path, sizeof path, "nope.jsonl"), &info, &err),
                 CHIMERA_ERR_IO, &err);
    meta_db_close(db);
}

/* ---- malformed inputs ------------------------------------------------------------------ */

typedef struct bad_case {
    meta_input_format fmt;
    const char *text;
    size_t len; /* 0: strlen */
    int line;
    const char *needle;
} bad_case;

static void test_malformed(void)
{
    meta_db *db = fresh_db("bad.db");
    chimera_error err = {0};
    CHECK_OK(load(db, META_INPUT_JSONL, META_LOAD_REPLACE,
                  "{\"id\": 1, \"year\": 2000}\n{\"id\": 2, \"lang\": \"en\"}\n", NULL, &err), &err);
    char before[8192], after[8192];
    dump(db, before, sizeof before);
    char many[4096];
    size_t k = (size_t)snprintf(many, sizeof many, "{\"id\":1}\n{\"id\":2");
    for (int c = 0; c < 65; c++) k += (size_t)snprintf(many + k, sizeof many - k, ",\"c%d\":1", c);
    snprintf(many + k, sizeof many - k, "}\n");
    char deep[200];
    k = (size_t)snprintf(deep, sizeof deep, "{\"id\":1}\n\n{\"id\":2,\"d\":");
    for (int i = 0; i < 40; i++) deep[k++] = '[';
    for (int i = 0; i < 40; i++) deep[k++] = ']';
    snprintf(deep + k, sizeof deep - k, "}\n");
    const bad_case cases[] = {
        {META_INPUT_JSONL, "{\"id\":1}\n{\"id\":2}\n{\"id\":3,}\n", 0, 3, "expected a field name"},
        {META_INPUT_JSONL, "{\"id\":1}\n{\"x\":2}\n", 0, 2, "no id field"},
        {META_INPUT_JSONL, "{\"id\":1}\n{\"id\":-2}\n", 0, 2, "negative"},
        {META_INPUT_JSONL, "{\"id\":1}\n{\"id\":5}\n\n{\"id\":1}\n{\"id\":5}\n", 0, 4, "duplicate id 1 (first on line 1)"},
        {META_INPUT_JSONL, "{\"id\":1.5}\n", 0, 1, "not an integer"},
        {META_INPUT_JSONL, "{\"id\":1e2}\n", 0, 1, "not an integer"},
        {META_INPUT_JSONL, "{\"id\":\"3\"}\n", 0, 1, "a string, not an integer"},
        {META_INPUT_JSONL, "{\"id\":true}\n", 0, 1, "a boolean"},
        {META_INPUT_JSONL, "{\"id\":9223372036854775808}\n", 0, 1, "out of range"},
        {META_INPUT_JSONL, "{\"id\":1} x\n", 0, 1, "text after the object"},
        {META_INPUT_JSONL, "[1,2]\n", 0, 1, "expected a JSON object"},
        {META_INPUT_JSONL, "{\"id\":1}\n{\"id\":2,\"t\":\"\xC3\x28\"}\n", 0, 2, "invalid UTF-8"},
        {META_INPUT_JSONL, "{\"id\":1}\n{\"id\":2,\"t\":\"\xED\xA0\x80\"}\n", 0, 2, "invalid UTF-8"},
        {META_INPUT_JSONL, "{\"id\":1}\n{\"id\":2,\"t\":\"\xC0\xAF\"}\n", 0, 2, "invalid UTF-8"},
        {META_INPUT_JSONL, "\xFF\xFE{\0\"\0i\0d\0\"\0", 12, 1, "UTF-16"},
        {META_INPUT_JSONL, "{\"id\":1}\n{\0\"\0", 13, 2, "NUL byte"},
        {META_INPUT_JSONL, "{\"id\":1,\"a-b\":1}\n", 0, 1, "field name 'a-b'"},
        {META_INPUT_JSONL, "{\"id\":1,\"9x\":1}\n", 0, 1, "field name '9x'"},
        {META_INPUT_JSONL, "{\"id\":1,\"ID\":1}\n", 0, 1, "same as id"},
        {META_INPUT_JSONL, "{\"id\":1,\"rowid\":1}\n", 0, 1, "reserved"},
        {META_INPUT_JSONL, "{\"id\":1,\"id\":2}\n", 0, 1, "id appears twice"},
        {META_INPUT_JSONL, "{\"id\":1,\"a\":1,\"a\":2}\n", 0, 1, "'a' appears twice"},
        {META_INPUT_JSONL, "{\"id\":1,\"Year\":1,\"year\":2}\n", 0, 1, "appears twice"},
        {META_INPUT_JSONL, many, 0, 2, "at most 64"},
        {META_INPUT_JSONL, deep, 0, 3, "nested deeper"},
        {META_INPUT_JSONL, "{\"id\":1,\"s\":\"a\\u0000b\"}\n", 0, 1, "\\u0000"},
        {META_INPUT_JSONL, "{\"id\":1,\"s\":\"\\ud800\"}\n", 0, 1, "surrogate"},
        {META_INPUT_JSONL, "{\"id\":1,\"s\":\"\\x\"}\n", 0, 1, "bad escape"},
        {META_INPUT_JSONL, "{\"id\":1,\"s\":\"abc}\n", 0, 1, "unterminated string"},
        {META_INPUT_JSONL, "{\"id\":1,\"s\":\"a\tb\"}\n", 0, 1, "control character"},
        {META_INPUT_JSONL, "{\"id\":1,\"n\":1e999}\n", 0, 1, "out of range"},
        {META_INPUT_JSONL, "{\"id\":1,\"n\":01}\n", 0, 1, "malformed number"},
        {META_INPUT_JSONL, "{\"id\":1,\"n\":tru}\n", 0, 1, "expected a value"},
        {META_INPUT_JSONL, "{\"id\":1,\"n\":NaN}\n", 0, 1, "expected a value"},
        {META_INPUT_JSONL, "\n\n", 0, 0, "no records"},
        {META_INPUT_CSV, "id,a,b\n1,2,3\n2,3\n", 0, 3, "2 fields, but the header has 3"},
        {META_INPUT_CSV, "id,a\n1,2\n\n2,\"open\n\nstill open\n", 0, 4, "never closed"},
        {META_INPUT_CSV, "id,a\n1,ab\"c\n", 0, 2, "a quote inside unquoted field"},
        {META_INPUT_CSV, "id,a\n1,\"ab\"c\n", 0, 2, "text after a closing quote"},
        {META_INPUT_CSV, "a,b\n1,2\n", 0, 2, "no id field"},
        {META_INPUT_CSV, "id,,b\n1,2,3\n", 0, 1, "header field 2 is empty"},
        {META_INPUT_CSV, "id,a,A\n1,2,3\n", 0, 2, "appears twice"},
        {META_INPUT_CSV, "id,a b\n1,2\n", 0, 2, "field name 'a b'"},
        {META_INPUT_CSV, "id,a\nabc,2\n", 0, 2, "a string, not an integer"},
        {META_INPUT_CSV, "id,a\n007,2\n", 0, 2, "not an integer"},
        {META_INPUT_CSV, "id,a\n1,2\n1,3\n", 0, 3, "duplicate id 1"},
        {META_INPUT_CSV, "id,a\n1,x\xFF\n", 0, 2, "invalid UTF-8"},
        {META_INPUT_CSV, "id,a\n", 0, 0, "no records"},
        {META_INPUT_CSV, "", 0, 1, "no header row"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const bad_case *c = &cases[i];
        size_t len = c->len ? c->len : strlen(c->text);
        err.msg[0] = '\0';
        chimera_status s = meta_load_text(db, c->fmt, META_LOAD_REPLACE, c->text, len, "src", NULL, &err);
        CHECKF(s == CHIMERA_ERR_FORMAT, "case %zu: %s (%s)", i, chimera_status_str(s), err.msg);
        char where[32];
        if (c->line) snprintf(where, sizeof where, "src:%d: ", c->line);
        else snprintf(where, sizeof where, "src: ");
        CHECKF(strncmp(err.msg, where, strlen(where)) == 0, "case %zu: message '%s' does not start with '%s'",
               i, err.msg, where);
        CHECKF(strstr(err.msg, c->needle) != NULL, "case %zu: message '%s' lacks '%s'", i, err.msg, c->needle);
        /* the same input as an upsert fails the same way (except an empty one, fine there) */
        if (c->line) {
            s = meta_load_text(db, c->fmt, META_LOAD_UPSERT, c->text, len, "src", NULL, &err);
            CHECKF(s == CHIMERA_ERR_FORMAT, "case %zu (upsert): %s", i, chimera_status_str(s));
        }
        dump(db, after, sizeof after);
        CHECKF(strcmp(before, after) == 0, "case %zu changed the database", i);
    }
    meta_db_close(db);
}

/* ---- upserts, transactions, generation ------------------------------------------------ */

static void test_upsert(void)
{
    meta_db *db = fresh_db("upsert.db");
    chimera_error err = {0};
    meta_load_info info;
    CHECK_OK(load(db, META_INPUT_JSONL, META_LOAD_REPLACE,
                  "{\"id\":1,\"year\":2000,\"lang\":\"en\"}\n{\"id\":2,\"year\":2010,\"lang\":\"de\"}\n", NULL, &err), &err);
    const char *up = "{\"id\":2,\"year\":2011}\n{\"id\":3,\"lang\":\"fr\",\"stars\":4.5,\"year\":2.5}\n";
    CHECK_OK(meta_db_upsert_jsonl_records(db, up, strlen(up), "batch", &info, &err), &err);
    CHECK(info.n_records == 2 && info.n_columns == 3 && info.n_new_columns == 1);
    CHECK_CELL(db, "year", 2, "INTEGER:2011");
    CHECK_CELL(db, "lang", 2, "NULL"); /* the whole row was replaced */
    CHECK_CELL(db, "lang", 1, "TEXT:en");
    CHECK_CELL(db, "stars", 3, "REAL:4.5");
    CHECK_CELL(db, "year", 3, "REAL:2.5"); /* a real in an INTEGER column stays numeric */
    CHECK_TYPE(db, "stars", "REAL");
    /* a number for a TEXT column is stored as written; a string for a numeric one is refused */
    const char *ok = "{\"id\":4,\"lang\":12}";
    CHECK_OK(meta_db_upsert_jsonl_records(db, ok, strlen(ok), "batch", NULL, &err), &err);
    CHECK_CELL(db, "lang", 4, "TEXT:12");
    char before[8192], after[8192];
    dump(db, before, sizeof before);
    const char *bad = "{\"id\":5,\"year\":1}\n{\"id\":6,\"year\":\"old\"}\n";
    CHECK_STATUS(meta_db_upsert_jsonl_records(db, bad, strlen(bad), "batch", NULL, &err), CHIMERA_ERR_FORMAT, &err);
    CHECK(strstr(err.msg, "batch:2: field 'year' is a string, but the column is INTEGER") != NULL);
    dump(db, after, sizeof after);
    CHECK(strcmp(before, after) == 0);
    /* an empty upsert is fine */
    CHECK_OK(meta_db_upsert_jsonl_records(db, "", 0, "batch", &info, &err), &err);
    CHECK(info.n_records == 0);
    meta_db_close(db);
}

static void test_transactions(void)
{
    meta_db *db = fresh_db("txn.db");
    chimera_error err = {0};
    char path[512];
    snprintf(path, sizeof path, "%s", meta_db_path(db));
    CHECK_OK(load(db, META_INPUT_JSONL, META_LOAD_REPLACE,
                  "{\"id\":1,\"x\":1}\n{\"id\":2,\"x\":2}\n{\"id\":3,\"x\":3}\n", NULL, &err), &err);
    char before[8192], after[8192];
    dump(db, before, sizeof before);
    const int64_t all[] = {1, 2, 3}, del[] = {2, 42};
    int64_t g = -1, n = -1, gone = -1;

    CHECK_STATUS(meta_db_commit(db, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECK_OK(meta_db_rollback(db, &err), &err); /* nothing open: nothing to do */
    CHECK_OK(meta_db_begin(db, &err), &err);
    CHECK(meta_db_in_transaction(db));
    CHECK_STATUS(meta_db_begin(db, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECK_OK(meta_db_delete_ids(db, del, 2, &gone, &err), &err);
    CHECK(gone == 1);
    const char *up = "{\"id\":7,\"x\":7,\"y\":\"new\"}";
    CHECK_OK(meta_db_upsert_jsonl_records(db, up, strlen(up), "b", NULL, &err), &err);
    /* a failing load inside the transaction undoes only itself */
    const char *bad = "{\"id\":8,\"x\":8}\n{\"id\":8}\n";
    CHECK_STATUS(meta_db_upsert_jsonl_records(db, bad, strlen(bad), "b", NULL, &err), CHIMERA_ERR_FORMAT, &err);
    CHECK_STATUS(load(db, META_INPUT_CSV, META_LOAD_REPLACE, "id,x\n1,\"\n", NULL, &err), CHIMERA_ERR_FORMAT, &err);
    CHECK(meta_db_in_transaction(db));
    CHECK_OK(meta_db_set_generation(db, 5, &err), &err);
    CHECK_OK(meta_db_generation(db, &g, &err), &err);
    CHECK(g == 5);
    CHECK_OK(meta_db_count(db, &n, &err), &err);
    CHECK(n == 3);
    /* filters see the last commit only */
    expect_ids(db, "1", NULL, 0, all, 3);
    CHECK_OK(meta_db_rollback(db, &err), &err);
    CHECK(!meta_db_in_transaction(db));
    CHECK_OK(meta_db_generation(db, &g, &err), &err);
    CHECK(g == 0);
    dump(db, after, sizeof after);
    CHECK(strcmp(before, after) == 0);

    /* the same, committed */
    CHECK_OK(meta_db_begin(db, &err), &err);
    CHECK_OK(meta_db_delete_ids(db, del, 2, &gone, &err), &err);
    CHECK_OK(meta_db_upsert_jsonl_records(db, up, strlen(up), "b", NULL, &err), &err);
    CHECK_STATUS(meta_db_upsert_jsonl_records(db, bad, strlen(bad), "b", NULL, &err), CHIMERA_ERR_FORMAT, &err);
    CHECK_OK(meta_db_set_generation(db, 5, &err), &err);
    CHECK_OK(meta_db_commit(db, &err), &err);
    const int64_t now[] = {1, 3, 7};
    expect_ids(db, "1", NULL, 0, now, 3);
    expect_ids(db, "y IS NOT NULL", NULL, 0, now + 2, 1);
    CHECK_STATUS(meta_db_set_generation(db, -1, &err), CHIMERA_ERR_INVALID_ARG, &err);

    /* close with a transaction open: rolled back */
    CHECK_OK(meta_db_begin(db, &err), &err);
    CHECK_OK(meta_db_delete_ids(db, now, 3, NULL, &err), &err);
    CHECK_OK(meta_db_set_generation(db, 6, &err), &err);
    meta_db_close(db);
    CHECK_OK(meta_db_open(path, 0, &db, &err), &err);
    CHECK_OK(meta_db_generation(db, &g, &err), &err);
    CHECK(g == 5);
    expect_ids(db, "1", NULL, 0, now, 3);
    /* changes outside a transaction commit on their own */
    CHECK_OK(meta_db_delete_ids(db, now, 1, &gone, &err), &err);
    CHECK(gone == 1);
    CHECK_OK(meta_db_set_generation(db, 9, &err), &err);
    meta_db_close(db);
    CHECK_OK(meta_db_open(path, 0, &db, &err), &err);
    CHECK_OK(meta_db_generation(db, &g, &err), &err);
    CHECK(g == 9);
    expect_ids(db, "1", NULL, 0, now + 1, 2);
    meta_db_close(db);
}

/* ---- filters ------------------------------------------------------------------------------ */

static meta_db *filter_fixture(const char *name)
{
    meta_db *db = fresh_db(name);
    chimera_error err = {0};
    CHECK_OK(load(db, META_INPUT_JSONL, META_LOAD_REPLACE,
                  "{\"id\":1,\"year\":2019,\"lang\":\"en\",\"zip\":\"007\",\"w\":0.5}\n"
                  "{\"id\":2,\"year\":2020,\"lang\":\"en\",\"zip\":\"100\",\"w\":1.5}\n"
                  "{\"id\":3,\"year\":2021,\"lang\":\"fr\",\"zip\":\"7\",\"w\":2}\n"
                  "{\"id\":4,\"year\":2022,\"lang\":\"EN\"}\n"
                  "{\"id\":10,\"lang\":\"it's\"}\n", NULL, &err), &err);
    return db;
}

static void test_filter_params(void)
{
    meta_db *db = filter_fixture("params.db");
    chimera_error err = {0};
    int64_t *ids = NULL, n = 0;
    const int64_t i2[] = {2}, i23[] = {2, 3}, i124[] = {1, 2, 4}, i1[] = {1}, i3[] = {3}, i10[] = {10};
    expect_ids(db, "year >= ? AND lang = ?", (const char *[]){"2020", "en"}, 2, i2, 1);
    expect_ids(db, "year >= ? AND w < ?", (const char *[]){"2020", "2.5"}, 2, i23, 2);
    expect_ids(db, "lower(lang) = ?", (const char *[]){"en"}, 1, i124, 3);
    expect_ids(db, "lang LIKE 'en'", NULL, 0, i124, 3);
    expect_ids(db, "zip = ?", (const char *[]){"007"}, 1, i1, 1); /* "007" binds as text */
    expect_ids(db, "zip = ?", (const char *[]){"7"}, 1, i3, 1);   /* 7 vs TEXT column: '7' */
    expect_ids(db, "year = ?", (const char *[]){"2021.0"}, 1, i3, 1);
    expect_ids(db, "lang = ?", (const char *[]){"it's"}, 1, i10, 1);
    expect_ids(db, "lang = 'it''s'", NULL, 0, i10, 1);
    expect_ids(db, "year > (SELECT avg(year) FROM meta)", NULL, 0, (const int64_t[]){3, 4}, 2);
    expect_ids(db, "id IN (SELECT id FROM meta WHERE w > 1)", NULL, 0, i23, 2);
    expect_ids(db, "\"year\" BETWEEN ? AND ? AND [lang] = `lang`", (const char *[]){"2019", "2020"}, 2,
               (const int64_t[]){1, 2}, 2);
    expect_ids(db, "year > 3000", NULL, 0, NULL, 0);
    CHECK_OK(meta_filter_ids(db, "year > 3000", NULL, 0, 0, &ids, &n, &err), &err);
    CHECK(ids == NULL && n == 0);
    /* wrong argument counts, named parameters, bad calls */
    CHECK_STATUS(meta_filter_ids(db, "year >= ? AND lang = ?", (const char *[]){"1"}, 1, 0, &ids, &n, &err),
                 CHIMERA_ERR_INVALID_ARG, &err);
    CHECK(strstr(err.msg, "2 '?' parameters but 1 argument was given") != NULL);
    CHECK_STATUS(meta_filter_ids(db, "year >= 1", (const char *[]){"1"}, 1, 0, &ids, &n, &err),
                 CHIMERA_ERR_INVALID_ARG, &err);
    CHECK(strstr(err.msg, "0 '?' parameters but 1 argument") != NULL);
    const char *named[] = {":y = 1", "@y = 1", "$y = 1", "?2 = 1"};
    for (int i = 0; i < 4; i++) {
        CHECK_STATUS(meta_filter_ids(db, named[i], (const char *[]){"1", "1"}, 2, 0, &ids, &n, &err),
                     CHIMERA_ERR_INVALID_ARG, &err);
        CHECKF(strstr(err.msg, "only plain '?'") != NULL, "%s: %s", named[i], err.msg);
    }
    CHECK_STATUS(meta_filter_ids(db, "year = ?", (const char *[]){NULL}, 1, 0, &ids, &n, &err),
                 CHIMERA_ERR_INVALID_ARG, &err);
    CHECK_STATUS(meta_filter_ids(db, "year = 1", NULL, 0, -5, &ids, &n, &err), CHIMERA_ERR_INVALID_ARG, &err);
    /* errors SQLite finds */
    CHECK_STATUS(meta_filter_ids(db, "year >=", NULL, 0, 0, &ids, &n, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECK(strstr(err.msg, "syntax error") != NULL);
    CHECK_STATUS(meta_filter_ids(db, "colour = 1", NULL, 0, 0, &ids, &n, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECK(strstr(err.msg, "no such column: colour") != NULL);
    CHECK_STATUS(meta_filter_ids(db, "abs(-9223372036854775807 - 1) > 0", NULL, 0, 0, &ids, &n, &err),
                 CHIMERA_ERR_INVALID_ARG, &err);
    CHECK(strstr(err.msg, "integer overflow") != NULL);
    CHECK_STATUS(meta_filter_ids(db, "   ", NULL, 0, 0, &ids, &n, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECK(ids == NULL && n == 0);
    meta_db_close(db);
}

typedef struct attack {
    const char *expr;
    chimera_status want;
    const char *needle;
} attack;

static void test_injection(void)
{
    meta_db *db = filter_fixture("attack.db");
    char before[8192], after[8192];
    dump(db, before, sizeof before);
    char cwd_x[512], tmp_x[512];
    test_path(tmp_x, sizeof tmp_x, "x");
    snprintf(cwd_x, sizeof cwd_x, "x");
    int cwd_had_x = access(cwd_x, F_OK) == 0;
    char attach[600], vacuum[600];
    snprintf(attach, sizeof attach, "ATTACH '%s' AS y", tmp_x);
    snprintf(vacuum, sizeof vacuum, "1) IS NULL; VACUUM INTO '%s'; SELECT (1", tmp_x);
    const attack attacks[] = {
        {"1); DROP TABLE meta; --", CHIMERA_ERR_INVALID_ARG, "')' at column 2 closes more than"},
        {"1); DROP TABLE meta; SELECT (1", CHIMERA_ERR_INVALID_ARG, "refused"},
        {"year = 1; DELETE FROM meta", CHIMERA_ERR_INVALID_ARG, "';'"},
        {vacuum, CHIMERA_ERR_INVALID_ARG, "refused"},
        {"1) UNION SELECT 42 --", CHIMERA_ERR_INVALID_ARG, "closes more than"},
        {"1) UNION SELECT 42 /*", CHIMERA_ERR_INVALID_ARG, "closes more than"},
        {"1 /* hidden */", CHIMERA_ERR_INVALID_ARG, "comment"},
        {"load_extension('x') IS NULL", CHIMERA_ERR_INVALID_ARG, "load_extension()"},
        {"load_extension('x')", CHIMERA_ERR_INVALID_ARG, "load_extension()"},
        {attach, CHIMERA_ERR_INVALID_ARG, "ATTACH starts a statement"},
        {"PRAGMA writable_schema = 1", CHIMERA_ERR_INVALID_ARG, "PRAGMA starts a statement"},
        {"delete from meta", CHIMERA_ERR_INVALID_ARG, "DELETE starts a statement"},
        {"(ATTACH 'x' AS y)", CHIMERA_ERR_INVALID_ARG, "syntax error"},
        {"(SELECT count(*) FROM sqlite_master) > 0", CHIMERA_ERR_INVALID_ARG, "sqlite_master"},
        {"(SELECT count(*) FROM sqlite_schema) > 0", CHIMERA_ERR_INVALID_ARG, "sqlite_"},
        {"(SELECT max(name) FROM sqlite_master) IS NOT NULL", CHIMERA_ERR_INVALID_ARG, "sqlite_master"},
        {"(SELECT value FROM meta_state WHERE key = 'generation') = 0", CHIMERA_ERR_INVALID_ARG, "meta_state"},
        {"(SELECT count(*) FROM meta_state) = 2", CHIMERA_ERR_INVALID_ARG, "meta_state"},
        {"(SELECT count(*) FROM temp.meta) >= 0", CHIMERA_ERR_INVALID_ARG, "meta"},
        {"(SELECT count(*) FROM pragma_table_info('meta')) > 0", CHIMERA_ERR_INVALID_ARG, "table-valued function"},
        {"(SELECT count(*) FROM json_each('[1,2]')) > 0", CHIMERA_ERR_INVALID_ARG, "table-valued function"},
        {"writefile('x', 'y') IS NULL", CHIMERA_ERR_INVALID_ARG, "writefile"},
        {"fts3_tokenizer('simple') IS NOT NULL", CHIMERA_ERR_INVALID_ARG, "fts3_tokenizer"},
        {"random() > 0", CHIMERA_ERR_INVALID_ARG, "random()"},
        {"length(zeroblob(1000000000)) > 0", CHIMERA_ERR_INVALID_ARG, "zeroblob()"},
        {"printf('%s', lang) = 'en'", CHIMERA_ERR_INVALID_ARG, "printf()"},
        {"sqlite_version() > '3'", CHIMERA_ERR_INVALID_ARG, "sqlite_version()"},
        {"'unterminated", CHIMERA_ERR_INVALID_ARG, "never closed"},
        {"((1)", CHIMERA_ERR_INVALID_ARG, "never closed"},
        {"", CHIMERA_ERR_INVALID_ARG, "empty"},
    };
    for (size_t i = 0; i < sizeof attacks / sizeof *attacks; i++) {
        int64_t *ids = NULL, n = -1;
        chimera_error err = {0};
        chimera_status s = meta_filter_ids(db, attacks[i].expr, NULL, 0, 0, &ids, &n, &err);
        CHECKF(s == attacks[i].want, "'%s': %s (%s)", attacks[i].expr, chimera_status_str(s), err.msg);
        CHECKF(strstr(err.msg, attacks[i].needle) != NULL, "'%s': message '%s' lacks '%s'", attacks[i].expr,
               err.msg, attacks[i].needle);
        CHECK(ids == NULL && n == 0);
        dump(db, after, sizeof after);
        CHECKF(strcmp(before, after) == 0, "'%s' changed the database", attacks[i].expr);
    }
    CHECK(access(tmp_x, F_OK) != 0);
    CHECK(cwd_had_x || access(cwd_x, F_OK) != 0);

    /* time limits: a recursive CTE that never ends, and a cross join of 5^8 rows ... */
    const char *slow[] = {
        "id IN (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c WHERE x < 0)",
        "(SELECT count(*) FROM meta a, meta b, meta c, meta d, meta e, meta f, meta g, meta h, meta i,"
        " meta j, meta k, meta l, meta m, meta n) > 0",
    };
    for (int i = 0; i < 2; i++) {
        int64_t *ids = NULL, n = -1;
        chimera_error err = {0};
        double t0 = cm_now();
        chimera_status s = meta_filter_ids(db, slow[i], NULL, 0, 200, &ids, &n, &err);
        double dt = cm_now() - t0;
        CHECKF(s == CHIMERA_ERR_CANCELLED, "slow %d: %s (%s)", i, chimera_status_str(s), err.msg);
        CHECK(strstr(err.msg, "time limit (200 ms)") != NULL);
        CHECKF(dt >= 0.19 && dt < 3.0, "slow %d stopped after %.3f s", i, dt);
        CHECK(ids == NULL && n == 0);
    }
    /* ... while a recursive CTE that ends is fine */
    expect_ids(db, "id IN (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3) SELECT x FROM c)",
               NULL, 0, (const int64_t[]){1, 2, 3}, 3);
    dump(db, after, sizeof after);
    CHECK(strcmp(before, after) == 0);
    CHECK(meta_filter_allowed_function("LOWER") && !meta_filter_allowed_function("load_extension"));
    meta_db_close(db);
}

/* ---- random predicates against a brute-force evaluation -------------------------------- */

enum { N_REC = 300 };

typedef struct rec {
    int64_t id;
    int has_x, has_y, has_z;
    int64_t x;
    const char *y;
    double z;
} rec;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Three-valued logic: 0 false, 1 true, 2 unknown (SQL's NULL). */
typedef struct pred {
    char sql[1024];
    const char *args[16];
    char argbuf[16][32];
    int n_args;
} pred;

static const char *const ys[] = {"apple", "b", "banana", "Cherry", "c"};

static int cmp3(int op, int c) /* c: <0, 0, >0 */
{
    switch (op) {
    case 0: return c >= 0;
    case 1: return c < 0;
    case 2: return c == 0;
    case 3: return c != 0;
    case 4: return c > 0;
    default: return c <= 0;
    }
}

/* Builds a random predicate into p (appending) and evaluates it over every record into
 * val[N_REC]. */
static void gen_pred(pred *p, const rec *recs, int *val, int depth)
{
    static const char *const ops[] = {">=", "<", "=", "!=", ">", "<="};
    int kind = depth >= 3 ? 0 : (int)(rnd() % 5);
    size_t len = strlen(p->sql);
    if (kind <= 1 || p->n_args >= 14) { /* a comparison */
        int col = (int)(rnd() % 3), op = (int)(rnd() % 6);
        char *a = p->argbuf[p->n_args];
        if (col == 0) snprintf(a, 32, "%d", (int)(rnd() % 24) - 2);
        else if (col == 1) snprintf(a, 32, "%s", ys[rnd() % 5]);
        else snprintf(a, 32, "%.17g", (double)((int)(rnd() % 40) - 10) / 4.0);
        p->args[p->n_args++] = a;
        snprintf(p->sql + len, sizeof p->sql - len, "%s %s ?", col == 0 ? "x" : col == 1 ? "y" : "z", ops[op]);
        for (int i = 0; i < N_REC; i++) {
            const rec *r = &recs[i];
            int has = col == 0 ? r->has_x : col == 1 ? r->has_y : r->has_z;
            if (!has) {
                val[i] = 2;
                continue;
            }
            int c;
            if (col == 0) {
                int64_t v = atoll(a);
                c = (r->x > v) - (r->x < v);
            } else if (col == 1) {
                c = strcmp(r->y, a);
            } else {
                double v = strtod(a, NULL);
                c = (r->z > v) - (r->z < v);
            }
            val[i] = cmp3(op, c);
        }
        return;
    }
    int *l = cm_malloc(N_REC * sizeof *l), *rv = cm_malloc(N_REC * sizeof *rv);
    if (!l || !rv) exit(2);
    if (kind == 4) { /* NOT */
        snprintf(p->sql + len, sizeof p->sql - len, "NOT (");
        gen_pred(p, recs, l, depth + 1);
        len = strlen(p->sql);
        snprintf(p->sql + len, sizeof p->sql - len, ")");
        for (int i = 0; i < N_REC; i++) val[i] = l[i] == 2 ? 2 : !l[i];
    } else {
        int is_and = kind == 2;
        snprintf(p->sql + len, sizeof p->sql - len, "(");
        gen_pred(p, recs, l, depth + 1);
        len = strlen(p->sql);
        snprintf(p->sql + len, sizeof p->sql - len, is_and ? ") AND (" : ") OR (");
        gen_pred(p, recs, rv, depth + 1);
        len = strlen(p->sql);
        snprintf(p->sql + len, sizeof p->sql - len, ")");
        for (int i = 0; i < N_REC; i++) {
            int a = l[i], b = rv[i];
            if (is_and) val[i] = (a == 0 || b == 0) ? 0 : (a == 1 && b == 1) ? 1 : 2;
            else val[i] = (a == 1 || b == 1) ? 1 : (a == 0 && b == 0) ? 0 : 2;
        }
    }
    cm_free(l);
    cm_free(rv);
}

static void test_random_predicates(void)
{
    static rec recs[N_REC];
    char *jsonl = cm_malloc(N_REC * 128), *csv = cm_malloc(N_REC * 128);
    if (!jsonl || !csv) exit(2);
    size_t jk = 0, ck = (size_t)sprintf(csv, "y,id,x,z\n");
    for (int i = 0; i < N_REC; i++) {
        rec *r = &recs[i];
        r->id = (int64_t)i * 3 + (int64_t)(rnd() % 3);
        r->has_x = rnd() % 8 != 0;
        r->has_y = rnd() % 8 != 0;
        r->has_z = rnd() % 8 != 0;
        r->x = (int64_t)(rnd() % 20);
        r->y = ys[rnd() % 5];
        r->z = (double)((int)(rnd() % 40) - 10) / 4.0;
        jk += (size_t)sprintf(jsonl + jk, "{\"id\": %lld", (long long)r->id);
        if (r->has_x) jk += (size_t)sprintf(jsonl + jk, ", \"x\": %lld", (long long)r->x);
        else if (rnd() % 2) jk += (size_t)sprintf(jsonl + jk, ", \"x\": null");
        if (r->has_y) jk += (size_t)sprintf(jsonl + jk, ", \"y\": \"%s\"", r->y);
        if (r->has_z) jk += (size_t)sprintf(jsonl + jk, ", \"z\": %.17g", r->z);
        jk += (size_t)sprintf(jsonl + jk, "}\n");
        ck += (size_t)sprintf(csv + ck, "%s,%lld,", r->has_y ? r->y : "", (long long)r->id);
        if (r->has_x) ck += (size_t)sprintf(csv + ck, "%lld", (long long)r->x);
        ck += (size_t)sprintf(csv + ck, ",");
        /* integral z as "-3.0", so that it reads as a real (the column stays REAL either way) */
        if (r->has_z) ck += (size_t)sprintf(csv + ck, r->z == (double)(int64_t)r->z ? "%.1f" : "%.17g", r->z);
        ck += (size_t)sprintf(csv + ck, "\r\n");
    }
    chimera_error err = {0};
    for (int f = 0; f < 2; f++) {
        meta_db *db = fresh_db(f ? "rand_csv.db" : "rand_jsonl.db");
        if (f) CHECK_OK(meta_load_text(db, META_INPUT_CSV, META_LOAD_REPLACE, csv, ck, "csv", NULL, &err), &err);
        else CHECK_OK(meta_load_text(db, META_INPUT_JSONL, META_LOAD_REPLACE, jsonl, jk, "jsonl", NULL, &err), &err);
        CHECK_TYPE(db, "x", "INTEGER");
        CHECK_TYPE(db, "y", "TEXT");
        CHECK_TYPE(db, "z", "REAL");
        int mismatches = 0, nonempty = 0;
        for (int t = 0; t < 300; t++) {
            pred p;
            memset(&p, 0, sizeof p);
            int val[N_REC];
            gen_pred(&p, recs, val, t < 100 ? 2 : 0);
            int64_t want[N_REC], n_want = 0;
            for (int i = 0; i < N_REC; i++)
                if (val[i] == 1) want[n_want++] = recs[i].id;
            int64_t *ids = NULL, n = -1;
            chimera_status s = meta_filter_ids(db, p.sql, p.args, p.n_args, 0, &ids, &n, &err);
            int same = s == CHIMERA_OK && n == n_want;
            for (int64_t i = 0; same && i < n; i++) same = ids[i] == want[i];
            if (!same && mismatches++ < 5)
                fprintf(stderr, "predicate %s (%d args): %s %s, %lld ids, want %lld\n", p.sql, p.n_args,
                        chimera_status_str(s), err.msg, (long long)n, (long long)n_want);
            nonempty += n_want > 0 && n_want < N_REC;
            cm_free(ids);
        }
        CHECKF(mismatches == 0, "%d of 300 random predicates disagree (%s)", mismatches, f ? "csv" : "jsonl");
        CHECKF(nonempty > 100, "only %d predicates select a proper subset", nonempty);
        meta_db_close(db);
    }
    cm_free(jsonl);
    cm_free(csv);
}

/* ---- threads and allocation failures --------------------------------------------------- */

typedef struct thread_arg {
    meta_db *db;
    int ok;
} thread_arg;

static void *filter_thread(void *p)
{
    thread_arg *a = p;
    a->ok = 1;
    for (int i = 0; i < 30; i++) {
        int64_t *ids = NULL, n = 0;
        chimera_error err = {0};
        const char *args[] = {"2020"};
        if (meta_filter_ids(a->db, "year >= ?", args, 1, 0, &ids, &n, &err) != CHIMERA_OK || n != 3 ||
            ids[0] != 2 || ids[2] != 4)
            a->ok = 0;
        cm_free(ids);
    }
    return NULL;
}

static void test_threads(void)
{
    meta_db *db = filter_fixture("threads.db");
    pthread_t th[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i].db = db;
        CHECK(pthread_create(&th[i], NULL, filter_thread, &args[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].ok);
    }
    meta_db_close(db);
}

static void test_alloc_failures(void)
{
    const char *text = "{\"id\":1,\"a\":\"x\",\"b\":[1,2]}\n{\"id\":2,\"a\":\"y\",\"b\":2}\n";
    const char *csv = "id,a,b\n1,\"x\",3\n2,\"y\"\"\",4\n";
    int ok_import = 0, ok_filter = 0;
    for (int k = 0; k < 200 && !(ok_import && ok_filter); k++) {
        chimera_error err = {0};
        char path[64];
        snprintf(path, sizeof path, "alloc%d.db", k);
        meta_db *db = NULL;
        char full[512];
        unlink(test_path(full, sizeof full, path));
        cm_alloc_fail_after(k);
        chimera_status s = meta_db_open(full, 1, &db, &err);
        if (s == CHIMERA_OK) {
            s = load(db, META_INPUT_JSONL, META_LOAD_REPLACE, text, NULL, &err);
            if (s == CHIMERA_OK) s = load(db, META_INPUT_CSV, META_LOAD_UPSERT, csv, NULL, &err);
            if (s == CHIMERA_OK) ok_import = 1;
            int64_t *ids = NULL, n = 0;
            s = meta_filter_ids(db, "a = ? OR b > 3", (const char *[]){"x"}, 1, 0, &ids, &n, &err);
            if (s == CHIMERA_OK && ok_import) {
                ok_filter = 1;
                cm_alloc_fail_after(-1);
                CHECK(n == 2 && ids[0] == 1 && ids[1] == 2);
            } else if (s == CHIMERA_OK) {
                cm_free(ids);
                ids = NULL;
            }
            cm_free(ids);
        }
        cm_alloc_fail_after(-1);
        if (s != CHIMERA_OK) CHECKF(s == CHIMERA_ERR_NOMEM, "allocation %d: %s %s", k, chimera_status_str(s), err.msg);
        meta_db_close(db);
    }
    CHECK(ok_import && ok_filter);
}

int main(void)
{
    test_open();
    test_import_jsonl();
    test_import_csv();
    test_malformed();
    test_upsert();
    test_transactions();
    test_filter_params();
    test_injection();
    test_random_predicates();
    test_threads();
    test_alloc_failures();
    return check_report();
}
