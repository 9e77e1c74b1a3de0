/* The living index through the public API (chimera_index_add, _delete, _update,
 * _compact, _refresh): what a user relies on when the corpus changes.
 *
 *   recall       half of a corpus built, the other half added in 10 commits: Recall@10
 *                against exact search over the whole corpus within 0.02 of one build of
 *                everything at the same parameters (the appended segments are searched
 *                exactly as built ones); every added document is found by a query made
 *                of its own tokens; `check` passes after every commit
 *   merges       more than IX_MERGE_SEGMENTS adds and deletes: the appended segments and
 *                the deletion lists are merged, and search results before and after the
 *                merge are identical (same ids, same scores)
 *   delete       deleted ids never come back, whatever the query; an id deleted and
 *                added again is found with its new tokens
 *   update       the new version's score is returned, never the old one's: a document
 *                updated to another's tokens scores exactly as that one
 *   compact      keeps the live ids, drops the deleted, and search returns the same
 *                scores for the live documents
 *   refresh      a handle opened earlier sees its generation until refresh
 *   bad batches  wrong dimension, an id already present, an unknown id to update or
 *                delete, a negative id, no ids: refused with a message naming the
 *                problem, and the index unchanged (generation and files); a compact of
 *                an index with a damaged section refused, not laundered under new checksums
 *   no tokens    a batch of empty documents, a compact that would keep only empty ones:
 *                refused, the index unchanged and still opening */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/alloc.h"
#include "data/synth.h"
#include "tmpdir.h"

#define K 10

typedef struct corpus {
    data_synth_corpus s;
    int64_t *off; /* n_docs + 1 */
    int64_t *ids; /* n_docs: 1000 + row (not the row, so that ids and rows differ) */
} corpus;

static void corpus_make(corpus *c, int64_t n_docs, uint32_t dim, uint64_t seed)
{
    chimera_error err;
    memset(c, 0, sizeof *c);
    chimera_synth_opts so = {.n_docs = n_docs, .dim = dim, .n_queries = 60, .query_len = 12,
                             .seed = seed, .min_len = 8, .max_len = 60, .vocab = 5000,
                             .n_topics = 50};
    CHECK_OK(data_synth_generate(&so, &c->s, &err), &err);
    c->off = cm_malloc((size_t)(c->s.n_docs + 1) * sizeof *c->off);
    c->ids = cm_malloc((size_t)c->s.n_docs * sizeof *c->ids);
    c->off[0] = 0;
    for (int64_t d = 0; d < c->s.n_docs; d++) {
        c->off[d + 1] = c->off[d] + c->s.doclens[d];
        c->ids[d] = 1000 + d;
    }
}

static void corpus_free(corpus *c)
{
    data_synth_free(&c->s);
    cm_free(c->off);
    cm_free(c->ids);
}

/* Documents [a, b) of c as a corpus handle (borrowing c's arrays), with their ids. */
static chimera_corpus *slice(const corpus *c, int64_t a, int64_t b)
{
    chimera_error err;
    chimera_corpus *h = NULL;
    CHECK_OK(chimera_corpus_wrap(c->s.tokens + (size_t)c->off[a] * c->s.dim, c->off[b] - c->off[a],
                                 c->s.dim, c->s.doclens + a, b - a, c->ids + a, NULL, &h, &err),
             &err);
    return h;
}

static chimera_queries *queries(const corpus *c)
{
    chimera_error err;
    chimera_queries *q = NULL;
    CHECK_OK(chimera_queries_new(c->s.queries, c->s.n_queries, c->s.dim, NULL, c->s.query_len, &q,
                                 &err), &err);
    return q;
}

static const chimera_update_opts fast = {.no_sync = 1};

static void search(const char *dir, const chimera_queries *q, int64_t *ids, float *sc)
{
    chimera_error err;
    chimera_index *ix = NULL;
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    if (!ix) return;
    chimera_search_opts so = {.n_threads = 1};
    CHECK_OK(chimera_index_search(ix, q, K, NULL, &so, ids, sc, NULL, &err), &err);
    chimera_index_close(ix);
}

static void check_index(const char *dir, const char *when)
{
    chimera_error err;
    chimera_index *ix = NULL;
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    if (!ix) return;
    chimera_status s = chimera_index_check(ix, &err);
    CHECKF(s == CHIMERA_OK, "check after %s: %s", when, err.msg);
    chimera_index_close(ix);
}

static uint64_t generation(const char *dir)
{
    chimera_index_info in;
    chimera_error err;
    CHECK_OK(chimera_index_info_read(dir, &in, &err), &err);
    return in.generation;
}

/* Half built, half added in 10 commits, against one build of everything. */
static void test_recall(const corpus *c, const char *dir_full)
{
    chimera_error err;
    char dir[512];
    test_path(dir, sizeof dir, "recall");
    int64_t D = c->s.n_docs, h = D / 2;
    chimera_build_opts bo = {.n_clusters = 128, .seed = 3, .no_sync = 1};
    chimera_corpus *base = slice(c, 0, h), *all = slice(c, 0, D);
    CHECK_OK(chimera_index_build(base, dir, &bo, NULL, &err), &err);
    CHECK_OK(chimera_index_build(all, dir_full, &bo, NULL, &err), &err);
    chimera_corpus_close(base);
    double drift = 0;
    for (int i = 0; i < 10; i++) {
        int64_t a = h + (D - h) * i / 10, b = h + (D - h) * (i + 1) / 10;
        chimera_corpus *part = slice(c, a, b);
        chimera_update_report rep;
        CHECK_OK(chimera_index_add(dir, part, &fast, &rep, &err), &err);
        CHECK(rep.docs_added == b - a && rep.n_docs == b);
        drift += rep.drift_below;
        chimera_corpus_close(part);
        check_index(dir, "an add");
    }
    chimera_index_info in;
    CHECK_OK(chimera_index_info_read(dir, &in, &err), &err);
    CHECKF(in.n_segments <= 1 + 8 + 1 && in.n_docs == D && in.format_major == 2,
           "after 10 adds: %u segments, %lld documents, format %u", in.n_segments,
           (long long)in.n_docs, in.format_major);
    /* exact truth over the whole corpus */
    chimera_queries *q = queries(c);
    int64_t nq = c->s.n_queries;
    int64_t *truth = cm_malloc((size_t)nq * K * sizeof *truth), *ids = cm_malloc((size_t)nq * K * sizeof *ids);
    float *tsc = cm_malloc((size_t)nq * K * sizeof *tsc), *sc = cm_malloc((size_t)nq * K * sizeof *sc);
    CHECK_OK(chimera_corpus_search(all, q, K, NULL, truth, tsc, &err), &err);
    search(dir, q, ids, sc);
    double r_living = chimera_results_eval_recall(ids, K, truth, K, nq, K);
    search(dir_full, q, ids, sc);
    double r_full = chimera_results_eval_recall(ids, K, truth, K, nq, K);
    printf("recall: Recall@10 %.4f after 10 adds onto half, %.4f one build of all; %u segments; "
           "mean drift %.3f below the build's p10\n", r_living, r_full, in.n_segments, drift / 10);
    CHECKF(r_living >= r_full - 0.02, "Recall@10 %.4f after adds, %.4f built at once", r_living,
           r_full);
    CHECK(r_full > 0.8); /* the comparison means something */
    /* recluster: centroids retrained over everything, the tokens rebuilt from their
     * codes; ids kept, one segment, and recall as a build from the vectors (within 0.03:
     * the codes lost B bits per dimension) */
    chimera_update_opts ro = {.no_sync = 1, .recluster = 1, .n_clusters = 128, .seed = 3};
    chimera_update_report rr;
    CHECK_OK(chimera_index_compact(dir, &ro, &rr, &err), &err);
    CHECK_OK(chimera_index_info_read(dir, &in, &err), &err);
    CHECK(in.n_segments == 1 && in.n_docs == D && in.format_major == 1 && in.n_clusters == 128);
    /* the base build's defaults went stale with the adds (half the documents are new);
     * the recluster measured new ones on its new centroids */
    CHECKF(in.n_calibrated > 0 && !in.calibration_stale,
           "after recluster: %d calibrated defaults, stale %d", in.n_calibrated,
           in.calibration_stale);
    check_index(dir, "recluster");
    search(dir, q, ids, sc);
    double r_re = chimera_results_eval_recall(ids, K, truth, K, nq, K);
    printf("recluster: Recall@10 %.4f (one build of the vectors: %.4f)\n", r_re, r_full);
    CHECKF(r_re >= r_full - 0.03, "Recall@10 %.4f after recluster, %.4f built from the vectors",
           r_re, r_full);
    /* every added document is found by its own tokens */
    int64_t found = 0, tried = 0;
    for (int64_t d = h; d < D; d += 37) {
        uint32_t m = (uint32_t)c->s.doclens[d] < 16 ? (uint32_t)c->s.doclens[d] : 16;
        chimera_queries *qd = NULL;
        CHECK_OK(chimera_queries_new(c->s.tokens + (size_t)c->off[d] * c->s.dim, 1, c->s.dim, NULL,
                                     m, &qd, &err), &err);
        int64_t one[K];
        float osc[K];
        chimera_index *ix = NULL;
        CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
        if (ix && qd) CHECK_OK(chimera_index_search(ix, qd, K, NULL, NULL, one, osc, NULL, &err), &err);
        found += one[0] == c->ids[d];
        tried++;
        chimera_index_close(ix);
        chimera_queries_free(qd);
    }
    CHECKF(found == tried, "%lld of %lld added documents found first by their own tokens",
           (long long)found, (long long)tried);
    chimera_queries_free(q);
    chimera_corpus_close(all);
    cm_free(truth);
    cm_free(ids);
    cm_free(tsc);
    cm_free(sc);
}

/* Deletes, merges, re-adds, updates and compacts, checking search after each. */
static void test_changes(const corpus *c)
{
    chimera_error err;
    char dir[512];
    test_path(dir, sizeof dir, "changes");
    int64_t D = c->s.n_docs, nq = c->s.n_queries;
    chimera_build_opts bo = {.n_clusters = 128, .seed = 4, .no_sync = 1};
    chimera_corpus *base = slice(c, 0, D / 4);
    CHECK_OK(chimera_index_build(base, dir, &bo, NULL, &err), &err);
    chimera_corpus_close(base);
    /* 12 adds: the 9th finds 8 appended segments and merges them */
    for (int i = 0; i < 12; i++) {
        int64_t a = D / 4 + (D - D / 4) * i / 12, b = D / 4 + (D - D / 4) * (i + 1) / 12;
        chimera_corpus *part = slice(c, a, b);
        chimera_update_report rep;
        int64_t *before = NULL, *after = NULL;
        float *sb = NULL, *sa = NULL;
        chimera_queries *q = queries(c);
        if (i == 8) { /* results just before and after the merging add must agree on old docs */
            before = cm_malloc((size_t)nq * K * sizeof *before);
            sb = cm_malloc((size_t)nq * K * sizeof *sb);
            search(dir, q, before, sb);
        }
        CHECK_OK(chimera_index_add(dir, part, &fast, &rep, &err), &err);
        CHECKF((i == 8) == (rep.merged == 1), "add %d: merged = %d", i, rep.merged);
        CHECK(rep.n_segments <= 10);
        if (i == 8) {
            /* the merge itself changes nothing: search an index holding the merge alone by
             * deleting this add's documents again */
            int64_t n_new = b - a;
            CHECK_OK(chimera_index_delete(dir, c->ids + a, n_new, &fast, NULL, &err), &err);
            after = cm_malloc((size_t)nq * K * sizeof *after);
            sa = cm_malloc((size_t)nq * K * sizeof *sa);
            search(dir, q, after, sa);
            CHECK(memcmp(before, after, (size_t)nq * K * sizeof *after) == 0);
            CHECK(memcmp(sb, sa, (size_t)nq * K * sizeof *sa) == 0);
            /* and they come back, as new documents with the same ids */
            chimera_corpus *again = slice(c, a, b);
            CHECK_OK(chimera_index_add(dir, again, &fast, &rep, &err), &err);
            chimera_corpus_close(again);
        }
        chimera_queries_free(q);
        chimera_corpus_close(part);
        cm_free(before);
        cm_free(after);
        cm_free(sb);
        cm_free(sa);
    }
    check_index(dir, "12 adds");
    /* deletes in 10 commits: every third document. One list exists already (the delete
     * above), so the 8th delete finds 8 lists and merges them */
    int64_t n_del = 0, *del = cm_malloc((size_t)D * sizeof *del);
    for (int64_t d = 0; d < D; d += 3) del[n_del++] = c->ids[d];
    for (int i = 0; i < 10; i++) {
        int64_t a = n_del * i / 10, b = n_del * (i + 1) / 10;
        chimera_update_report rep;
        CHECK_OK(chimera_index_delete(dir, del + a, b - a, &fast, &rep, &err), &err);
        CHECK(rep.docs_deleted == b - a);
        CHECKF((i == 7) == (rep.merged == 1), "delete %d: merged = %d", i, rep.merged);
    }
    check_index(dir, "10 deletes");
    chimera_queries *q = queries(c);
    int64_t *ids = cm_malloc((size_t)nq * K * sizeof *ids);
    float *sc = cm_malloc((size_t)nq * K * sizeof *sc);
    search(dir, q, ids, sc);
    int64_t back = 0;
    for (int64_t i = 0; i < nq * K; i++) back += ids[i] >= 0 && (ids[i] - 1000) % 3 == 0;
    CHECKF(back == 0, "%lld deleted documents in search results", (long long)back);
    /* ids of the index = everything but the deleted */
    chimera_index *ix = NULL;
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    int64_t live = chimera_index_ids(ix, NULL, 0);
    CHECK(live == D - n_del && chimera_index_n_docs(ix) == live);
    chimera_index_close(ix);

    /* update: document u gets the tokens of document v (both live); a query made of v's
     * tokens then scores u exactly as v */
    int64_t u = 1, v = 2; /* rows 1 and 2: 1 % 3, 2 % 3 != 0, both live */
    chimera_corpus *upd = NULL;
    CHECK_OK(chimera_corpus_wrap(c->s.tokens + (size_t)c->off[v] * c->s.dim, c->s.doclens[v],
                                 c->s.dim, c->s.doclens + v, 1, c->ids + u, NULL, &upd, &err), &err);
    chimera_update_report rep;
    CHECK_OK(chimera_index_update(dir, upd, &fast, &rep, &err), &err);
    CHECK(rep.docs_added == 1 && rep.docs_deleted == 1);
    chimera_corpus_close(upd);
    uint32_t m = (uint32_t)c->s.doclens[v] < 16 ? (uint32_t)c->s.doclens[v] : 16;
    chimera_queries *qv = NULL;
    CHECK_OK(chimera_queries_new(c->s.tokens + (size_t)c->off[v] * c->s.dim, 1, c->s.dim, NULL, m,
                                 &qv, &err), &err);
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    int64_t top[K];
    float tsc[K];
    if (ix && qv) CHECK_OK(chimera_index_search(ix, qv, K, NULL, NULL, top, tsc, NULL, &err), &err);
    int iu = -1, iv = -1;
    for (int r = 0; r < K; r++) {
        if (top[r] == c->ids[u]) iu = r;
        if (top[r] == c->ids[v]) iv = r;
    }
    CHECKF(iu >= 0 && iv >= 0 && iu + iv == 1 && tsc[iu] == tsc[iv],
           "after update: ranks %d and %d, scores %g and %g (want the top two, equal)", iu, iv,
           iu >= 0 ? tsc[iu] : 0.0, iv >= 0 ? tsc[iv] : 0.0);
    chimera_index_close(ix);
    chimera_queries_free(qv);
    check_index(dir, "an update");

    /* compaction: same live ids, same scores for them */
    search(dir, q, ids, sc);
    CHECK_OK(chimera_index_compact(dir, &fast, &rep, &err), &err);
    CHECK(rep.merged == 1 && rep.n_segments == 1 && rep.n_deleted == 0);
    check_index(dir, "compact");
    chimera_index_info in;
    CHECK_OK(chimera_index_info_read(dir, &in, &err), &err);
    CHECK(in.format_major == 1 && in.n_docs == D - n_del && in.n_segments == 1);
    int64_t *ids2 = cm_malloc((size_t)nq * K * sizeof *ids2);
    float *sc2 = cm_malloc((size_t)nq * K * sizeof *sc2);
    search(dir, q, ids2, sc2);
    int64_t same = 0;
    for (int64_t i = 0; i < nq * K; i++) same += ids[i] == ids2[i] && sc[i] == sc2[i];
    /* renumbering may reorder exact ties at the k_refine cut, nothing else */
    CHECKF(same >= nq * K * 98 / 100, "after compaction %lld of %lld results unchanged",
           (long long)same, (long long)(nq * K));
    uint64_t g = generation(dir);
    CHECK_OK(chimera_index_compact(dir, &fast, &rep, &err), &err); /* nothing to do */
    CHECK(rep.merged == 0 && generation(dir) == g);
    chimera_queries_free(q);
    cm_free(ids);
    cm_free(sc);
    cm_free(ids2);
    cm_free(sc2);
    cm_free(del);
}

/* Sha-free identity of an index's files: the manifest's bytes (it names every section's
 * checksum) and the list of files in the directory. */
static char *snapshot(const char *dir)
{
    char cmd[700], *out = cm_calloc(1 << 20, 1);
    snprintf(cmd, sizeof cmd, "cd '%s' && ls -l --time-style=+ . && cat manifest.json", dir);
    FILE *p = popen(cmd, "r");
    if (p && out) {
        size_t n = fread(out, 1, (1 << 20) - 1, p);
        out[n] = '\0';
    }
    if (p) pclose(p);
    return out;
}

/* Asks to stop at its n-th poll. */
static int stop_at(void *user)
{
    int *n = user;
    return --*n <= 0;
}

static void test_bad_batches(const corpus *c, const corpus *other_dim)
{
    chimera_error err;
    char dir[512];
    test_path(dir, sizeof dir, "bad");
    chimera_build_opts bo = {.n_clusters = 64, .seed = 5, .no_sync = 1};
    chimera_corpus *base = slice(c, 0, 200);
    CHECK_OK(chimera_index_build(base, dir, &bo, NULL, &err), &err);
    chimera_corpus_close(base);
    chimera_corpus *more = slice(c, 200, 260);
    CHECK_OK(chimera_index_add(dir, more, &fast, NULL, &err), &err);
    chimera_corpus_close(more);
    char *before = snapshot(dir);
    struct {
        const char *what, *needle;
        chimera_status want;
        chimera_status got;
        char msg[600];
    } cases[12];
    int nc = 0;
#define CASE(w, n, st, call)                                                                   \
    do {                                                                                       \
        memset(&err, 0, sizeof err);                                                           \
        cases[nc].what = w;                                                                    \
        cases[nc].needle = n;                                                                  \
        cases[nc].want = st;                                                                   \
        cases[nc].got = (call);                                                                \
        snprintf(cases[nc].msg, sizeof cases[nc].msg, "%s", err.msg);                          \
        nc++;                                                                                  \
    } while (0)
    chimera_corpus *dup = slice(c, 150, 210); /* ids 1150..1209: 1150..1199 are in the index */
    CASE("an id already in the index", "already in the index", CHIMERA_ERR_INVALID_ARG,
         chimera_index_add(dir, dup, &fast, NULL, &err));
    chimera_corpus *fresh = slice(c, 300, 320);
    CASE("an id not in the index (update)", "not in the index", CHIMERA_ERR_INVALID_ARG,
         chimera_index_update(dir, fresh, &fast, NULL, &err));
    chimera_corpus *wrong = slice(other_dim, 0, 10);
    CASE("another dimension", "dimension", CHIMERA_ERR_DIM,
         chimera_index_add(dir, wrong, &fast, NULL, &err));
    chimera_corpus *noids = NULL;
    CHECK_OK(chimera_corpus_wrap(c->s.tokens + (size_t)c->off[400] * c->s.dim,
                                 c->off[410] - c->off[400], c->s.dim, c->s.doclens + 400, 10, NULL,
                                 NULL, &noids, &err), &err);
    CASE("no ids", "ids", CHIMERA_ERR_INVALID_ARG, chimera_index_add(dir, noids, &fast, NULL, &err));
    int64_t unknown[2] = {1001, 999999};
    CASE("an unknown id (delete)", "999999", CHIMERA_ERR_INVALID_ARG,
         chimera_index_delete(dir, unknown, 2, &fast, NULL, &err));
    int64_t neg[2] = {1002, -5};
    CASE("a negative id (delete)", "negative", CHIMERA_ERR_INVALID_ARG,
         chimera_index_delete(dir, neg, 2, &fast, NULL, &err));
    chimera_update_opts busy = {.no_sync = 1, .lock_timeout_ms = -1};
    CASE("nothing wrong (control)", "", CHIMERA_OK, chimera_index_delete(dir, NULL, 0, &busy, NULL, &err));
    /* cancelled at the first poll, and just before the commit (the add polls once per
     * 4096-token block in each of two passes, then once more) */
    int polls = 1, late = 3;
    chimera_update_opts cancel_first = {.no_sync = 1, .cancel = stop_at, .cancel_user = &polls};
    chimera_update_opts cancel_late = {.no_sync = 1, .cancel = stop_at, .cancel_user = &late};
    CASE("an add cancelled at once", "cancelled", CHIMERA_ERR_CANCELLED,
         chimera_index_add(dir, fresh, &cancel_first, NULL, &err));
    CASE("an add cancelled before its commit", "cancelled", CHIMERA_ERR_CANCELLED,
         chimera_index_add(dir, fresh, &cancel_late, NULL, &err));
    polls = 3;
    CASE("a compact cancelled", "cancelled", CHIMERA_ERR_CANCELLED,
         chimera_index_compact(dir, &cancel_first, NULL, &err));
#undef CASE
    for (int i = 0; i < nc; i++)
        CHECKF(cases[i].got == cases[i].want && strstr(cases[i].msg, cases[i].needle),
               "%s: %s (%s), expected %s naming '%s'", cases[i].what,
               chimera_status_str(cases[i].got), cases[i].msg, chimera_status_str(cases[i].want),
               cases[i].needle);
    char *after = snapshot(dir);
    CHECKF(before && after && strcmp(before, after) == 0, "a refused change altered the index");
    /* the corpus layer refuses NaN, empty documents and duplicate ids before any of this */
    float *nan_tok = cm_malloc((size_t)4 * c->s.dim * sizeof *nan_tok);
    memcpy(nan_tok, c->s.tokens, (size_t)4 * c->s.dim * sizeof *nan_tok);
    nan_tok[5] = NAN;
    int64_t lens[2] = {2, 2}, ids2[2] = {77777, 77777}, ids3[2] = {77777, 77778};
    chimera_corpus *bad = NULL;
    CHECK(chimera_corpus_wrap(nan_tok, 4, c->s.dim, lens, 2, ids3, NULL, &bad, &err) != CHIMERA_OK);
    CHECK(chimera_corpus_wrap(c->s.tokens, 4, c->s.dim, lens, 2, ids2, NULL, &bad, &err) != CHIMERA_OK);
    cm_free(nan_tok);
    chimera_corpus_close(dup);
    chimera_corpus_close(fresh);
    chimera_corpus_close(wrong);
    chimera_corpus_close(noids);
    cm_free(before);
    cm_free(after);
    check_index(dir, "refused changes");
    /* a damaged section: a compaction (which writes fresh checksums) refuses to copy it */
    char cmd[700], file[700] = "";
    snprintf(cmd, sizeof cmd, "ls -S '%s'/*.bin | head -n 1", dir);
    FILE *ls = popen(cmd, "r");
    if (ls && fgets(file, sizeof file, ls)) file[strcspn(file, "\n")] = '\0';
    if (ls) pclose(ls);
    FILE *f = fopen(file, "r+b");
    CHECKF(f != NULL, "no section file in %s", dir);
    if (f) {
        fseek(f, 0, SEEK_END);
        long at = ftell(f) / 2;
        fseek(f, at, SEEK_SET);
        int b = fgetc(f);
        fseek(f, at, SEEK_SET);
        fputc(b ^ 0x10, f);
        fclose(f);
        before = snapshot(dir);
        chimera_status cs = chimera_index_compact(dir, &fast, NULL, &err);
        CHECKF(cs == CHIMERA_ERR_CORRUPT && strstr(err.msg, "checksum"),
               "compact of a damaged index: %s (%s)", chimera_status_str(cs), err.msg);
        after = snapshot(dir);
        CHECKF(before && after && strcmp(before, after) == 0, "the refused compact altered the index");
        cm_free(before);
        cm_free(after);
        f = fopen(file, "r+b");
        if (f) {
            fseek(f, at, SEEK_SET);
            fputc(b, f);
            fclose(f);
        }
        check_index(dir, "the damage undone");
    }
}

/* Changes that would leave a segment without tokens, which open refuses: a batch of
 * empty documents, and a compact once every document with tokens is deleted. Both are
 * refused by name, and the index stays as it was and opens. */
static void test_no_tokens_left(const corpus *c)
{
    chimera_error err;
    char dir[512];
    test_path(dir, sizeof dir, "notokens");
    enum { NT = 100, NE = 3 };
    int64_t lens[NT + NE], ids[NT + NE];
    for (int i = 0; i < NT + NE; i++) {
        lens[i] = i < NT ? c->s.doclens[i] : 0;
        ids[i] = i < NT ? c->ids[i] : 5000000 + i;
    }
    chimera_corpus_opts co = {.allow_empty = 1};
    chimera_corpus *h = NULL;
    CHECK_OK(chimera_corpus_wrap(c->s.tokens, c->off[NT], c->s.dim, lens, NT + NE, ids, &co, &h,
                                 &err), &err);
    chimera_build_opts bo = {.n_clusters = 16, .seed = 5, .no_sync = 1};
    CHECK_OK(chimera_index_build(h, dir, &bo, NULL, &err), &err);
    chimera_corpus_close(h);

    int64_t elens[2] = {0, 0}, eids[2] = {6000000, 6000001};
    CHECK_OK(chimera_corpus_wrap(c->s.tokens, 0, c->s.dim, elens, 2, eids, &co, &h, &err), &err);
    char *before = snapshot(dir);
    chimera_status st = chimera_index_add(dir, h, &fast, NULL, &err);
    CHECKF(st == CHIMERA_ERR_EMPTY && strstr(err.msg, "no tokens"),
           "a batch of empty documents: %s (%s)", chimera_status_str(st), err.msg);
    chimera_corpus_close(h);
    CHECK_OK(chimera_index_delete(dir, c->ids, NT, &fast, NULL, &err), &err);
    char *deleted = snapshot(dir);
    st = chimera_index_compact(dir, &fast, NULL, &err);
    CHECKF(st == CHIMERA_ERR_EMPTY && strstr(err.msg, "no tokens"),
           "a compact that leaves only empty documents: %s (%s)", chimera_status_str(st), err.msg);
    char *after = snapshot(dir);
    CHECKF(before && deleted && after && strcmp(before, deleted) != 0 && strcmp(deleted, after) == 0,
           "the refused compact altered the index");
    check_index(dir, "refused changes without tokens");
    cm_free(before);
    cm_free(deleted);
    cm_free(after);
}

/* A handle keeps its generation until refresh, and searches see the new one after. */
static void test_refresh(const corpus *c)
{
    chimera_error err;
    char dir[512];
    test_path(dir, sizeof dir, "refresh");
    chimera_build_opts bo = {.n_clusters = 64, .seed = 6, .no_sync = 1};
    chimera_corpus *base = slice(c, 0, 300);
    CHECK_OK(chimera_index_build(base, dir, &bo, NULL, &err), &err);
    chimera_corpus_close(base);
    chimera_index *ix = NULL;
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    if (!ix) return;
    uint64_t g0 = chimera_index_generation(ix);
    int changed = -1;
    CHECK_OK(chimera_index_refresh(ix, &changed, &err), &err);
    CHECK(changed == 0 && chimera_index_generation(ix) == g0);
    chimera_corpus *more = slice(c, 300, 400);
    CHECK_OK(chimera_index_add(dir, more, &fast, NULL, &err), &err);
    chimera_corpus_close(more);
    CHECK(chimera_index_n_docs(ix) == 300); /* the old view */
    CHECK_OK(chimera_index_refresh(ix, &changed, &err), &err);
    CHECK(changed == 1 && chimera_index_generation(ix) == g0 + 1 && chimera_index_n_docs(ix) == 400);
    int64_t del[1] = {c->ids[350]};
    CHECK_OK(chimera_index_delete(dir, del, 1, &fast, NULL, &err), &err);
    CHECK_OK(chimera_index_refresh(ix, &changed, &err), &err);
    CHECK(changed == 1 && chimera_index_n_docs(ix) == 399);
    /* a tuned profile survives small changes and goes stale past a fifth of the index */
    chimera_tune_result tr = {.best = {.n_probe = 5, .k_refine = 100, .k_fullbit = 30},
                              .recall = 0.97, .reached = 1};
    CHECK_OK(chimera_index_profile_save(dir, K, 0.95, &tr, &err), &err);
    chimera_corpus *few = slice(c, 400, 440); /* 40 of 399: a tenth */
    CHECK_OK(chimera_index_add(dir, few, &fast, NULL, &err), &err);
    chimera_corpus_close(few);
    CHECK_OK(chimera_index_refresh(ix, &changed, &err), &err);
    chimera_search_params got;
    CHECK_OK(chimera_index_profile_get(ix, K, 0.95, &got, &err), &err);
    CHECK(got.n_probe == 5);
    chimera_corpus *many = slice(c, 440, 520);
    CHECK_OK(chimera_index_add(dir, many, &fast, NULL, &err), &err);
    chimera_corpus_close(many);
    CHECK_OK(chimera_index_refresh(ix, &changed, &err), &err);
    chimera_status ps = chimera_index_profile_get(ix, K, 0.95, &got, &err);
    CHECKF(ps == CHIMERA_ERR_EMPTY && strstr(err.msg, "stale"), "profile after 120 of 519 "
           "documents changed: %s (%s)", chimera_status_str(ps), err.msg);
    chimera_index_close(ix);
}

int main(void)
{
    corpus c, c32;
    corpus_make(&c, 1500, 64, 21);
    corpus_make(&c32, 20, 32, 22);
    char full[512];
    test_path(full, sizeof full, "full");
    test_recall(&c, full);
    test_changes(&c);
    test_bad_batches(&c, &c32);
    test_no_tokens_left(&c);
    test_refresh(&c);
    corpus_free(&c);
    corpus_free(&c32);
    return check_report();
}
