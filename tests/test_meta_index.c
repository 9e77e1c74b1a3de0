/* Document metadata kept in step with the index (index/metadata.h), through the public
 * API: chimera_index_meta_import, chimera_filter_sql, and add / delete / update /
 * compact carrying metadata.
 *   - a filter returns exactly the documents whose records satisfy it (checked against
 *     the records in C), and a search with it returns only those;
 *   - a delete removes its documents' records in the same commit; an add with records
 *     makes them filterable; compaction keeps the database;
 *   - the crash between the index's commit and the database's (simulated by putting the
 *     database file back as it was before the change): filters refuse to run on a
 *     database behind the index, and the next change replays what it missed (the
 *     delete, the add's records) and says so; a recluster after that crash keeps the
 *     records the database missed;
 *   - a malformed import changes nothing; hostile filters are refused;
 *   - a delete by filter (chimera_index_delete_where) removes exactly the live documents
 *     whose records match, judged after the replay of a crash's missed change (the
 *     records as they stand at its commit), and commits nothing when nothing matches;
 *     a refused filter or an index without metadata changes nothing;
 *   - a replay that adds records and then deletes their documents leaves no record;
 *   - a delete by filter keeps the matching records of ids not in the index (counted
 *     as missing), whether or not live documents matched beside them, and so does its
 *     replay after a crash (which deletes exactly the ids the delete stored);
 *   - a thousand changes carrying metadata leave the section count where it was (each
 *     change drops the sections of the changes the database already holds). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/alloc.h"
#include "data/synth.h"
#include "tmpdir.h"

#define ND 600

static char dir[512], dbpath[600];

static int year_of(int64_t id) { return 2000 + (int)(id % 25); }
static const char *lang_of(int64_t id) { return id % 3 == 0 ? "en" : id % 3 == 1 ? "de" : "fr"; }

static void write_records(const char *path, int64_t from, int64_t to)
{
    FILE *f = fopen(path, "w");
    for (int64_t i = from; f && i < to; i++)
        fprintf(f, "{\"id\": %lld, \"year\": %d, \"lang\": \"%s\"}\n", (long long)i, year_of(i),
                lang_of(i));
    if (f) fclose(f);
}

static void copy_file(const char *from, const char *to)
{
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    CHECK(system(cmd) == 0);
}

/* The ids chimera_filter_sql("year >= 2020 AND lang = 'en'") must give: the live ids
 * [0, n_live) minus `gone`, by their records. */
static int64_t expected(int64_t upto, const int64_t *gone, int n_gone, int64_t *out)
{
    int64_t n = 0;
    for (int64_t i = 0; i < upto; i++) {
        int del = 0;
        for (int g = 0; g < n_gone; g++) del |= gone[g] == i;
        if (!del && year_of(i) >= 2020 && strcmp(lang_of(i), "en") == 0) out[n++] = i;
    }
    return n;
}

/* Runs the filter on a fresh handle; returns its status and fills ids (via a search-free
 * route: a filter's ids are checked by searching with it and by its size through
 * chimera_index_search of each allowed document would be slow, so the filter is applied
 * to an id-listing search: k = all documents). */
static chimera_status filter_ids(int64_t *ids, int64_t *n, chimera_error *err)
{
    chimera_index *ix = NULL;
    *n = 0;
    chimera_status s = chimera_index_open(dir, NULL, &ix, err);
    if (s != CHIMERA_OK) return s;
    chimera_filter *f = NULL;
    const char *args[2] = {"2020", "en"};
    s = chimera_filter_sql(ix, "year >= ? AND lang = ?", args, 2, 0, &f, err);
    if (s == CHIMERA_OK) {
        /* every allowed document, found by a query of random tokens with k large */
        float q[4 * 32];
        for (int i = 0; i < 4 * 32; i++) q[i] = (float)((i * 7919) % 13) - 6.0f;
        chimera_queries *qq = NULL;
        chimera_queries_new(q, 1, 32, NULL, 4, &qq, err);
        int64_t r[ND];
        float sc[ND];
        chimera_search_opts so = {.n_threads = 1, .filter = f};
        s = chimera_index_search(ix, qq, ND, NULL, &so, r, sc, NULL, err);
        for (int i = 0; s == CHIMERA_OK && i < ND; i++)
            if (r[i] >= 0) ids[(*n)++] = r[i];
        chimera_queries_free(qq);
    }
    chimera_filter_free(f);
    chimera_index_close(ix);
    return s;
}

static uint64_t generation_of(const char *d)
{
    chimera_index_info info;
    chimera_error err;
    CHECK_OK(chimera_index_info_read(d, &info, &err), &err);
    return info.generation;
}

/* The section files (*.bin) in index directory d. */
static int count_section_files(const char *d)
{
    DIR *dp = opendir(d);
    int n = 0;
    struct dirent *e;
    while (dp && (e = readdir(dp)) != NULL) {
        size_t len = strlen(e->d_name);
        n += len > 4 && strcmp(e->d_name + len - 4, ".bin") == 0;
    }
    if (dp) closedir(dp);
    return n;
}

/* Checks that chimera_filter_sql(expr) on the index at dir gives `want` documents. */
static void check_filter_count(const char *expr, int64_t want, const char *when)
{
    chimera_error err;
    chimera_index *ix = NULL;
    chimera_filter *f = NULL;
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    if (ix) CHECK_OK(chimera_filter_sql(ix, expr, NULL, 0, 0, &f, &err), &err);
    int64_t n = f ? chimera_filter_ids(f, NULL, 0, NULL) : -1;
    CHECKF(n == want, "%s: filter '%s' gives %lld documents, expected %lld", when, expr,
           (long long)n, (long long)want);
    chimera_filter_free(f);
    chimera_index_close(ix);
}

static int always_cancel(void *user)
{
    (void)user;
    return 1;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void check_filter(int64_t upto, const int64_t *gone, int n_gone, const char *when)
{
    int64_t want[ND], got[ND], nw = expected(upto, gone, n_gone, want), ng = 0;
    chimera_error err;
    chimera_status s = filter_ids(got, &ng, &err);
    CHECKF(s == CHIMERA_OK, "%s: filter: %s", when, err.msg);
    qsort(got, (size_t)ng, sizeof *got, cmp_i64);
    CHECKF(ng == nw && memcmp(got, want, (size_t)nw * sizeof *want) == 0,
           "%s: the filter gave %lld documents, the records say %lld", when, (long long)ng,
           (long long)nw);
}

int main(void)
{
    chimera_error err;
    data_synth_corpus s;
    chimera_synth_opts so = {.n_docs = ND, .dim = 32, .n_queries = 4, .query_len = 4, .seed = 9,
                             .min_len = 4, .max_len = 30, .vocab = 2000, .n_topics = 20};
    CHECK_OK(data_synth_generate(&so, &s, &err), &err);
    int64_t *ids = cm_malloc(ND * sizeof *ids), *off = cm_malloc((ND + 1) * sizeof *off);
    off[0] = 0;
    for (int64_t i = 0; i < ND; i++) ids[i] = i, off[i + 1] = off[i] + s.doclens[i];
    test_path(dir, sizeof dir, "idx");
    snprintf(dbpath, sizeof dbpath, "%s/meta.sqlite", dir);
    char recs[600], recs2[600], bad[600], saved[600], replayed[600];
    test_path(recs, sizeof recs, "meta.jsonl");
    test_path(recs2, sizeof recs2, "more.jsonl");
    test_path(bad, sizeof bad, "bad.jsonl");
    test_path(saved, sizeof saved, "saved.sqlite");
    test_path(replayed, sizeof replayed, "replayed.sqlite");
    chimera_corpus *base = NULL;
    const int64_t NB = 500;
    CHECK_OK(chimera_corpus_wrap(s.tokens, off[NB], s.dim, s.doclens, NB, ids, NULL, &base, &err), &err);
    chimera_build_opts bo = {.n_clusters = 16, .seed = 1, .no_sync = 1};
    CHECK_OK(chimera_index_build(base, dir, &bo, NULL, &err), &err);
    chimera_corpus_close(base);
    chimera_update_opts fast = {.no_sync = 1};
    chimera_update_report rep;

    /* no metadata yet */
    int64_t tmp[ND], nt;
    CHECK_STATUS(filter_ids(tmp, &nt, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECK(strstr(err.msg, "meta import") != NULL);
    CHECK_STATUS(chimera_index_delete_where(dir, "year > 1", NULL, 0, &fast, &rep, &err),
                 CHIMERA_ERR_INVALID_ARG, &err);
    CHECK(strstr(err.msg, "meta import") != NULL);
    CHECK(generation_of(dir) == 1);
    /* refused metadata leaves an index without metadata as it was: no database made for
     * an add whose records are malformed (the documents are not added either), nor for a
     * malformed import */
    {
        FILE *f = fopen(bad, "w");
        fprintf(f, "{\"id\": %d, \"year\": 1990}\nnot json\n", (int)NB);
        fclose(f);
        chimera_corpus *one = NULL;
        CHECK_OK(chimera_corpus_wrap(s.tokens + (size_t)off[NB] * s.dim, s.doclens[NB], s.dim,
                                     s.doclens + NB, 1, ids + NB, NULL, &one, &err), &err);
        chimera_update_opts bad_meta = {.no_sync = 1, .metadata = bad};
        CHECK_STATUS(chimera_index_add(dir, one, &bad_meta, &rep, &err), CHIMERA_ERR_FORMAT,
                     &err);
        chimera_corpus_close(one);
        CHECKF(access(dbpath, F_OK) != 0, "a refused add left %s", dbpath);
        CHECK_STATUS(chimera_index_meta_import(dir, bad, 0, &fast, &rep, &err),
                     CHIMERA_ERR_FORMAT, &err);
        CHECKF(access(dbpath, F_OK) != 0, "a refused import left %s", dbpath);
        CHECK(generation_of(dir) == 1);
    }
    /* import, filter */
    write_records(recs, 0, NB);
    CHECK_OK(chimera_index_meta_import(dir, recs, 0, &fast, &rep, &err), &err);
    CHECK(rep.meta_records == NB);
    check_filter(NB, NULL, 0, "import");
    /* a malformed import changes nothing */
    FILE *f = fopen(bad, "w");
    fprintf(f, "{\"id\": 1, \"year\": 1990}\n{\"id\": 2, \"year\": \n");
    fclose(f);
    CHECK_STATUS(chimera_index_meta_import(dir, bad, 0, &fast, &rep, &err), CHIMERA_ERR_FORMAT, &err);
    CHECKF(strstr(err.msg, ":2") != NULL, "a malformed line is not named by number: %s", err.msg);
    check_filter(NB, NULL, 0, "a refused import");
    /* hostile filters */
    {
        chimera_index *ix = NULL;
        CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
        const char *hostile[] = {"1); DROP TABLE meta; --", "load_extension('x')",
                                 "1 = 1; ATTACH 'x' AS y"};
        for (int i = 0; ix && i < 3; i++) {
            chimera_filter *hf = NULL;
            chimera_status hs = chimera_filter_sql(ix, hostile[i], NULL, 0, 0, &hf, &err);
            CHECKF(hs == CHIMERA_ERR_INVALID_ARG && !hf, "filter '%s' gave %s", hostile[i],
                   chimera_status_str(hs));
        }
        chimera_index_close(ix);
        check_filter(NB, NULL, 0, "hostile filters");
    }

    /* delete: the records go in the same commit */
    int64_t gone2[2] = {75, 135}; /* en, years 2000 and 2010: not matching either way */
    CHECK_OK(chimera_index_delete(dir, gone2, 2, &fast, &rep, &err), &err);
    check_filter(NB, gone2, 2, "delete");

    /* crash between the index's commit and the database's: the database put back as it
     * was before a delete */
    int64_t gone3[3] = {gone2[0], gone2[1], 21}; /* id 21: en, year 2021: matching */
    copy_file(dbpath, saved);
    CHECK_OK(chimera_index_delete(dir, &gone3[2], 1, &fast, &rep, &err), &err);
    copy_file(saved, dbpath);
    CHECK_STATUS(filter_ids(tmp, &nt, &err), CHIMERA_ERR_CONFLICT, &err);
    CHECK(strstr(err.msg, "behind") != NULL);
    CHECK_OK(chimera_index_compact(dir, &fast, &rep, &err), &err); /* any change repairs */
    CHECKF(rep.meta_repaired == 1, "compact replayed %d metadata changes, expected 1",
           rep.meta_repaired);
    check_filter(NB, gone3, 3, "repaired delete");
    /* id 21 added again, without records: the old record must not describe it */
    chimera_corpus *again = NULL;
    CHECK_OK(chimera_corpus_wrap(s.tokens + (size_t)off[21] * s.dim, s.doclens[21], s.dim,
                                 s.doclens + 21, 1, ids + 21, NULL, &again, &err), &err);
    CHECK_OK(chimera_index_add(dir, again, &fast, &rep, &err), &err);
    chimera_corpus_close(again);
    check_filter(NB, gone3, 3, "an id deleted and added again without records");

    /* add with records; then the same crash after it */
    chimera_corpus *more = NULL;
    CHECK_OK(chimera_corpus_wrap(s.tokens + (size_t)off[NB] * s.dim, off[ND] - off[NB], s.dim,
                                 s.doclens + NB, ND - NB, ids + NB, NULL, &more, &err), &err);
    write_records(recs2, NB, ND);
    chimera_update_opts with_meta = {.no_sync = 1, .metadata = recs2};
    copy_file(dbpath, saved);
    CHECK_OK(chimera_index_add(dir, more, &with_meta, &rep, &err), &err);
    check_filter(ND, gone3, 3, "add with records");
    copy_file(saved, dbpath);
    CHECK_STATUS(filter_ids(tmp, &nt, &err), CHIMERA_ERR_CONFLICT, &err);
    int64_t none = 999999;
    chimera_update_opts lenient = {.no_sync = 1, .missing_ok = 1};
    CHECK_OK(chimera_index_delete(dir, &none, 1, &lenient, &rep, &err), &err); /* no commit */
    CHECKF(rep.meta_repaired == 1, "a delete of nothing replayed %d metadata changes, "
           "expected 1", rep.meta_repaired);
    CHECK_OK(chimera_index_compact(dir, &fast, &rep, &err), &err);
    CHECK(rep.meta_repaired == 0);
    check_filter(ND, gone3, 3, "repaired add");
    /* the crash once more, then a recluster: the documents NB..ND deleted and added
     * again with their records, the database put back as it was before that add; the
     * recluster repairs the database under the lock before its rebuild carries it over,
     * so their records are not lost */
    int64_t back[ND - 500];
    for (int64_t i = NB; i < ND; i++) back[i - NB] = ids[i];
    CHECK_OK(chimera_index_delete(dir, back, ND - NB, &fast, &rep, &err), &err);
    copy_file(dbpath, saved);
    CHECK_OK(chimera_index_add(dir, more, &with_meta, &rep, &err), &err);
    copy_file(saved, dbpath);
    CHECK_STATUS(filter_ids(tmp, &nt, &err), CHIMERA_ERR_CONFLICT, &err);
    /* a recluster rebuilds the index and keeps the metadata */
    chimera_update_opts rc = {.no_sync = 1, .recluster = 1, .n_clusters = 16, .seed = 2};
    CHECK_OK(chimera_index_compact(dir, &rc, &rep, &err), &err);
    check_filter(ND, gone3, 3, "recluster");
    /* delete by filter, after the crash once more (the delete of id 45, en and 2020,
     * missed by the database): the replay removes 45's record first, so the filter's
     * matches are the live matching documents and none is reported missing */
    const char *fargs[2] = {"2020", "en"};
    int64_t want[ND], gone4[4] = {gone3[0], gone3[1], gone3[2], 45};
    int64_t n_match = expected(ND, gone4, 4, want);
    uint64_t gen = generation_of(dir);
    CHECK_STATUS(chimera_index_delete_where(dir, "1); DROP TABLE meta; --", NULL, 0, &fast, &rep, &err),
                 CHIMERA_ERR_INVALID_ARG, &err);
    CHECK_STATUS(chimera_index_delete_where(dir, "year >= ?", fargs, 2, &fast, &rep, &err),
                 CHIMERA_ERR_INVALID_ARG, &err); /* one '?' for two arguments */
    CHECK(generation_of(dir) == gen);
    copy_file(dbpath, saved);
    CHECK_OK(chimera_index_delete(dir, &gone4[3], 1, &fast, &rep, &err), &err);
    copy_file(saved, dbpath);
    int64_t live = rep.n_docs - rep.n_deleted;
    CHECK_OK(chimera_index_delete_where(dir, "year >= ? AND lang = ?", fargs, 2, &fast, &rep, &err), &err);
    CHECKF(rep.docs_deleted == n_match && rep.ids_missing == 0 && rep.meta_repaired == 1,
           "delete by filter: %lld deleted (want %lld), %lld missing, %d replayed",
           (long long)rep.docs_deleted, (long long)n_match, (long long)rep.ids_missing,
           rep.meta_repaired);
    CHECK(rep.n_docs - rep.n_deleted == live - n_match);
    CHECK_OK(filter_ids(tmp, &nt, &err), &err);
    CHECKF(nt == 0, "after the delete by filter, the filter still matches %lld", (long long)nt);
    gen = generation_of(dir);
    CHECK_OK(chimera_index_delete_where(dir, "year >= ? AND lang = ?", fargs, 2, &fast, &rep, &err), &err);
    CHECK(rep.docs_deleted == 0 && generation_of(dir) == gen); /* nothing matched: no commit */
    /* an add with records, its database commit lost; the next change replays it; the
     * delete of its document, its database commit lost too: the record the replay
     * wrote must go, or it would describe the id when it is added again */
    int64_t w = want[0];
    chimera_corpus *one = NULL;
    CHECK_OK(chimera_corpus_wrap(s.tokens + (size_t)off[w] * s.dim, s.doclens[w], s.dim,
                                 s.doclens + w, 1, ids + w, NULL, &one, &err), &err);
    write_records(recs2, w, w + 1);
    copy_file(dbpath, saved);
    CHECK_OK(chimera_index_add(dir, one, &with_meta, &rep, &err), &err);
    copy_file(saved, dbpath);
    CHECK_OK(chimera_index_delete(dir, &none, 1, &lenient, &rep, &err), &err); /* no commit */
    CHECK(rep.meta_repaired == 1);
    copy_file(dbpath, replayed);
    CHECK_OK(chimera_index_delete(dir, &w, 1, &fast, &rep, &err), &err);
    /* a database older than the index's log reaches (put back from before both) cannot
     * be repaired: refused, the index untouched */
    copy_file(saved, dbpath);
    gen = generation_of(dir);
    CHECK_STATUS(chimera_index_compact(dir, &fast, &rep, &err), CHIMERA_ERR_CORRUPT, &err);
    CHECKF(strstr(err.msg, "older than the index's log") && strstr(err.msg, "meta import") &&
           generation_of(dir) == gen, "a database too old to replay: %s", err.msg);
    copy_file(replayed, dbpath);
    CHECK_OK(chimera_index_compact(dir, &fast, &rep, &err), &err);
    CHECKF(rep.meta_repaired == 1, "compact replayed %d metadata changes, expected 1",
           rep.meta_repaired);
    CHECK_OK(chimera_index_add(dir, one, &fast, &rep, &err), &err); /* without records */
    chimera_corpus_close(one);
    CHECK_OK(filter_ids(tmp, &nt, &err), &err);
    CHECKF(nt == 0, "a record replayed and then deleted still describes id %lld (%lld matches)",
           (long long)w, (long long)nt);
    /* records of ids not in the index (the deleted ones and one never added) match too:
     * counted as missing and kept, whether or not live documents matched beside them */
    write_records(recs, 0, ND);
    f = fopen(recs, "a");
    fprintf(f, "{\"id\": 100020, \"year\": 2020, \"lang\": \"en\"}\n");
    fclose(f);
    CHECK_OK(chimera_index_meta_import(dir, recs, 0, &fast, &rep, &err), &err);
    int64_t n_records = expected(ND, NULL, 0, want) + 1;
    copy_file(dbpath, saved);
    CHECK_OK(chimera_index_delete_where(dir, "year >= ? AND lang = ?", fargs, 2, &fast, &rep, &err), &err);
    int64_t missing = rep.ids_missing;
    CHECKF(rep.docs_deleted > 0 && missing >= 1 && rep.docs_deleted + missing == n_records,
           "delete by filter over records of absent ids: %lld deleted + %lld missing != %lld",
           (long long)rep.docs_deleted, (long long)missing, (long long)n_records);
    /* and after the crash before the database's commit, the replay does the same */
    for (int crash = 0; crash < 2; crash++) {
        if (crash) copy_file(saved, dbpath);
        CHECK_OK(chimera_index_delete_where(dir, "year >= ? AND lang = ?", fargs, 2, &fast, &rep, &err),
                 &err);
        CHECKF(rep.docs_deleted == 0 && rep.ids_missing == missing && rep.meta_repaired == crash,
               "%s: the records of absent ids were not kept: %lld missing the second time, %lld "
               "the first (%d replayed)", crash ? "replayed" : "committed",
               (long long)rep.ids_missing, (long long)missing, rep.meta_repaired);
    }
    /* a cancel after the filter: nothing changes */
    gen = generation_of(dir);
    chimera_update_opts stop = {.no_sync = 1, .cancel = always_cancel};
    CHECK_STATUS(chimera_index_delete_where(dir, "year > 0", NULL, 0, &stop, &rep, &err),
                 CHIMERA_ERR_CANCELLED, &err);
    CHECK(generation_of(dir) == gen);
    /* the filter's time limit is the caller's */
    chimera_update_opts neg = {.no_sync = 1, .filter_timeout_ms = -1};
    CHECK_STATUS(chimera_index_delete_where(dir, "year > 0", NULL, 0, &neg, &rep, &err),
                 CHIMERA_ERR_INVALID_ARG, &err);
    /* Many changes that carry metadata: each one's records or deleted ids are stored
     * as a section, which the next change drops once the database holds it, so the
     * manifest stays far below FMT_MAX_SECTIONS (1024) however long the index lives. */
    int files_before = count_section_files(dir);
    gen = generation_of(dir);
    const int ROUNDS = 520; /* 1040 changes: past the section limit if each left one */
    for (int r = 0; r < ROUNDS && check_failed_ == 0; r++) {
        int64_t id = 300000 + r, at = r % ND;
        chimera_corpus *doc = NULL;
        CHECK_OK(chimera_corpus_wrap(s.tokens + (size_t)off[at] * s.dim, s.doclens[at], s.dim,
                                     s.doclens + at, 1, &id, NULL, &doc, &err), &err);
        write_records(recs2, id, id + 1);
        CHECK_OK(chimera_index_add(dir, doc, &with_meta, &rep, &err), &err);
        chimera_corpus_close(doc);
        CHECK_OK(chimera_index_delete(dir, &id, 1, &fast, &rep, &err), &err);
    }
    int files_after = count_section_files(dir);
    CHECKF(generation_of(dir) == gen + 2 * (uint64_t)ROUNDS && files_after <= files_before + 40,
           "%d adds and deletes with metadata: generation %llu (expected %llu), %d section "
           "files (%d before)", ROUNDS, (unsigned long long)generation_of(dir),
           (unsigned long long)(gen + 2 * (uint64_t)ROUNDS), files_after, files_before);
    check_filter_count("id >= 300000", 0, "after adds and deletes with metadata");
    /* a database older than the log reaches (put back from before those changes): filters
     * and writers refuse it, naming the repair; an import repairs it, and so does the
     * replay of that import when its database commit is lost (the replace makes every
     * record, whatever came before) */
    copy_file(saved, dbpath);
    CHECK_STATUS(filter_ids(tmp, &nt, &err), CHIMERA_ERR_CORRUPT, &err);
    CHECK(strstr(err.msg, "meta import") != NULL);
    CHECK_STATUS(chimera_index_compact(dir, &fast, &rep, &err), CHIMERA_ERR_CORRUPT, &err);
    write_records(recs, 0, ND);
    CHECK_OK(chimera_index_meta_import(dir, recs, 0, &fast, &rep, &err), &err);
    check_filter_count("id >= 0", ND, "an import over a database too old to replay");
    copy_file(saved, dbpath);
    CHECK_OK(chimera_index_compact(dir, &fast, &rep, &err), &err);
    CHECKF(rep.meta_repaired == 1, "the import's replay: %d entries", rep.meta_repaired);
    check_filter_count("id >= 0", ND, "the replay of an import over a database too old");
    /* a missing database: the records' only copy is gone; named, and not made empty */
    CHECK(remove(dbpath) == 0);
    write_records(recs2, 0, 1);
    chimera_update_opts meta_only = {.no_sync = 1, .metadata = recs2};
    int64_t keep_one = 0;
    CHECK_OK(chimera_corpus_wrap(s.tokens, s.doclens[0], s.dim, s.doclens, 1, &keep_one, NULL,
                                 &base, &err), &err);
    chimera_update_opts up = meta_only;
    CHECK_STATUS(chimera_index_update(dir, base, &up, &rep, &err), CHIMERA_ERR_CORRUPT, &err);
    CHECKF(strstr(err.msg, "missing") && access(dbpath, F_OK) != 0,
           "an update with records over a missing database: %s", err.msg);
    chimera_corpus_close(base);
    CHECK_OK(chimera_index_meta_import(dir, recs, 0, &fast, &rep, &err), &err);
    check_filter_count("id >= 0", ND, "an import after the database went missing");
    /* the database survived the compaction, and the index checks */
    chimera_index *ix = NULL;
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    if (ix) CHECK_OK(chimera_index_check(ix, &err), &err);
    chimera_index_close(ix);
    chimera_corpus_close(more);
    cm_free(ids);
    cm_free(off);
    data_synth_free(&s);
    return check_report();
}
