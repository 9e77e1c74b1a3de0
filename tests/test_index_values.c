/* An index whose checksums are all valid but whose values are wrong never gives a
 * search result that looks like an answer. A small index is built, then rewritten
 * through the store (so every checksum is recomputed and only value validation can
 * catch the change) with one tamper each: a negative user id, a posting document out
 * of range, a duplicate user id, a NaN centroid, a NaN factor in each factor section
 * (one token, and a whole section), the meta's `bits` changed (4 -> 3, 4 -> 2; 2 -> 1
 * and 2 -> 3 on a B = 2 index), every document deleted (with and without the meta's
 * n_deleted agreeing), a bitmap padding bit set, and random bytes in each code section.
 * Each must fail chimera_index_check with a message naming the section (open already,
 * for the cheap invariants), and a search of it through the public API must either fail
 * (CHIMERA_ERR_CORRUPT naming the section, or CHIMERA_ERR_EMPTY when nothing is left to
 * search) or return exactly what the healthy index returns. The healthy index opens,
 * checks and searches (with and without checksum verification) identically. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/error.h"
#include "core/rng.h"
#include "data/synth.h"
#include "index/index.h"
#include "index/store.h"
#include "search/pipeline.h"
#include "tmpdir.h"
#include "core/alloc.h"

#define NQ 12
#define K 10

typedef struct fixture {
    data_synth_corpus s;
    chimera_corpus *c;
    chimera_queries *q;
    char dir[512];
    int64_t ids[NQ * K];
    float scores[NQ * K];
    int64_t n_docs;
} fixture;

static int fixture_make(fixture *f, const char *name, uint32_t bits, uint64_t seed)
{
    memset(f, 0, sizeof *f);
    chimera_error err;
    chimera_synth_opts o = {.n_docs = 300, .dim = 64, .n_queries = NQ, .seed = seed,
                            .min_len = 6, .max_len = 30, .query_len = 8};
    if (data_synth_generate(&o, &f->s, &err) != CHIMERA_OK) {
        fprintf(stderr, "synth: %s\n", err.msg);
        exit(2);
    }
    int64_t *ids = cm_malloc((size_t)f->s.n_docs * sizeof *ids);
    for (int64_t i = 0; i < f->s.n_docs; i++) ids[i] = 5000 + 3 * i;
    CHECK_OK(chimera_corpus_wrap(f->s.tokens, f->s.n_tokens, f->s.dim, f->s.doclens,
                                 f->s.n_docs, ids, NULL, &f->c, &err), &err);
    cm_free(ids);
    CHECK_OK(chimera_queries_new(f->s.queries, NQ, f->s.dim, NULL, f->s.query_len, &f->q, &err),
             &err);
    f->n_docs = f->s.n_docs;
    test_path(f->dir, sizeof f->dir, name);
    /* uncalibrated: the reference run below searches with the library's defaults */
    chimera_build_opts bo = {.bits = bits, .n_clusters = 48, .seed = seed, .n_threads = 2,
                             .no_sync = 1, .no_calibrate = 1};
    chimera_status s = chimera_index_build(f->c, f->dir, &bo, NULL, &err);
    CHECK_OK(s, &err);
    if (s != CHIMERA_OK) return 0;
    /* the healthy index: opens (verified or not), checks, and gives the reference run */
    for (int verify = 0; verify < 2; verify++) {
        chimera_open_opts oo = {.verify = verify};
        chimera_index *ix;
        CHECK_OK(chimera_index_open(f->dir, &oo, &ix, &err), &err);
        if (!ix) return 0;
        CHECK_OK(chimera_index_check(ix, &err), &err);
        int64_t ids2[NQ * K];
        float sc2[NQ * K];
        CHECK_OK(chimera_index_search(ix, f->q, K, NULL, NULL, verify ? ids2 : f->ids,
                                      verify ? sc2 : f->scores, NULL, &err), &err);
        if (verify)
            CHECK(memcmp(ids2, f->ids, sizeof ids2) == 0 &&
                  memcmp(sc2, f->scores, sizeof sc2) == 0);
        chimera_index_close(ix);
    }
    return 1;
}

static void fixture_free(fixture *f)
{
    chimera_queries_free(f->q);
    chimera_corpus_close(f->c);
    data_synth_free(&f->s);
}

/* ---- rewriting with valid checksums -------------------------------------------------- */

typedef struct tamper {
    const char *what;
    const char *key;      /* meta member to set (NULL: none) */
    double value;         /* its value; NAN removes the member */
    const char *section;  /* section to edit (NULL: none) */
    void (*edit)(void *data, uint64_t bytes, const fixture *f);
    const char *needle;   /* the section (or word) every message must name */
    int open_fails;       /* 1: a cheap invariant, open must refuse it */
    chimera_status check; /* what chimera_index_check must return when open succeeds */
} tamper;

/* Rewrites the index at src into dst through the store, with t's changes. */
static chimera_status rewrite(const char *src, const char *dst, const tamper *t,
                              const fixture *f, chimera_error *err)
{
    store *st;
    CM_TRY(ix_store_open(src, 1, &st, err));
    ix_store_write_opts wo = {.no_sync = 1};
    ix_store_writer *w;
    chimera_status s = ix_store_writer_begin(dst, &wo, &w, err);
    if (s != CHIMERA_OK) {
        ix_store_close(st);
        return s;
    }
    for (uint32_t i = 0; i < ix_store_n_sections(st) && s == CHIMERA_OK; i++) {
        const ix_store_section_desc *sd = ix_store_section_at(st, i);
        ix_store_type ty = {sd->dtype, sd->ndim, {0}};
        memcpy(ty.shape, sd->shape, sizeof ty.shape);
        const void *data = sd->data;
        void *copy = NULL;
        if (t->section && strcmp(t->section, sd->name) == 0) {
            copy = cm_malloc(sd->bytes + 1);
            memcpy(copy, sd->data, sd->bytes);
            t->edit(copy, sd->bytes, f);
            data = copy;
        }
        s = ix_store_writer_add_typed(w, sd->name, sd->dtype ? &ty : NULL, data, sd->bytes, err);
        cm_free(copy);
    }
    cJSON *meta = cJSON_Duplicate(ix_store_meta(st), 1);
    if (t->key && isnan(t->value)) cJSON_DeleteItemFromObjectCaseSensitive(meta, t->key);
    else if (t->key) cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(meta, t->key), t->value);
    if (s == CHIMERA_OK)
        s = ix_store_writer_commit(w, meta, err);
    else
        ix_store_writer_abort(w);
    cJSON_Delete(meta);
    ix_store_close(st);
    return s;
}

/* ---- the edits ----------------------------------------------------------------------- */

static uint16_t f16_nan(void) { return 0x7e00u; }

static void ed_id_negative(void *p, uint64_t n, const fixture *f)
{
    (void)n, (void)f;
    ((int64_t *)p)[7] = -3;
}
static void ed_id_duplicate(void *p, uint64_t n, const fixture *f)
{
    (void)n, (void)f;
    ((int64_t *)p)[9] = ((int64_t *)p)[2];
}
static void ed_post_doc_range(void *p, uint64_t n, const fixture *f)
{
    ((uint32_t *)p)[n / 8] = (uint32_t)f->n_docs;
}
static void ed_centroid_nan(void *p, uint64_t n, const fixture *f)
{
    (void)f;
    ((float *)p)[n / 4 / 2 + 3] = NAN;
}
/* one token's factor: token n/2 of the section (not one of open's samples, which are
 * multiples of N/64), alpha (used by every estimate) */
static void ed_f1_one_nan(void *p, uint64_t n, const fixture *f)
{
    (void)f;
    uint64_t rows = n / 6;
    ((uint16_t *)p)[3 * (rows / 2 + 1) + 1] = f16_nan();
}
static void ed_f1_all_nan(void *p, uint64_t n, const fixture *f)
{
    (void)f;
    for (uint64_t i = 0; i < n / 6; i++) ((uint16_t *)p)[3 * i + 1] = f16_nan();
}
static void ed_fB_one_nan(void *p, uint64_t n, const fixture *f)
{
    (void)f;
    uint64_t rows = n / 8;
    float nan = NAN;
    memcpy((uint8_t *)p + 8 * (rows / 2 + 1), &nan, 4); /* kappa */
}
static void ed_fB_all_nan(void *p, uint64_t n, const fixture *f)
{
    (void)f;
    float nan = NAN;
    for (uint64_t i = 0; i < n / 8; i++) memcpy((uint8_t *)p + 8 * i, &nan, 4);
}
static void ed_fB_implausible(void *p, uint64_t n, const fixture *f)
{
    (void)f;
    /* f_error (f16) far above what kappa allows, on every token */
    for (uint64_t i = 0; i < n / 8; i++) ((uint16_t *)((uint8_t *)p + 8 * i))[3] = 0x7000u;
}
static void ed_all_deleted(void *p, uint64_t n, const fixture *f)
{
    memset(p, 0xff, n);
    if (f->n_docs % 8) ((uint8_t *)p)[n - 1] = (uint8_t)((1u << (f->n_docs % 8)) - 1u);
}
static void ed_padding_bit(void *p, uint64_t n, const fixture *f)
{
    (void)f;
    ((uint8_t *)p)[n - 1] |= 0x80u; /* 300 docs: bits 4..7 of the last byte are padding */
}
static void ed_random(void *p, uint64_t n, const fixture *f)
{
    (void)f;
    cm_rng r;
    cm_rng_seed(&r, 77, 0);
    for (uint64_t i = 0; i < n; i++) ((uint8_t *)p)[i] = (uint8_t)cm_rng_next(&r);
}

static void test_pipeline_checks(const fixture *f);

/* ---- the run ------------------------------------------------------------------------- */

static void run_case(const fixture *f, const tamper *t)
{
    char bad[600];
    snprintf(bad, sizeof bad, "%s-bad", f->dir);
    chimera_error err;
    chimera_status s = rewrite(f->dir, bad, t, f, &err);
    CHECKF(s == CHIMERA_OK, "%s: rewrite: %s", t->what, err.msg);
    if (s != CHIMERA_OK) return;
    chimera_index *ix = NULL;
    memset(&err, 0, sizeof err);
    s = chimera_index_open(bad, NULL, &ix, &err);
    if (t->open_fails) {
        CHECKF(s == CHIMERA_ERR_CORRUPT && strstr(err.msg, t->needle),
               "%s: open gave %s: %s (expected CHIMERA_ERR_CORRUPT naming '%s')", t->what,
               chimera_status_str(s), err.msg, t->needle);
        printf("  %-30s open %s: %s\n", t->what, chimera_status_str(s), err.msg);
        if (s == CHIMERA_OK) chimera_index_close(ix);
        return;
    }
    CHECKF(s == CHIMERA_OK, "%s: open gave %s: %s", t->what, chimera_status_str(s), err.msg);
    if (s != CHIMERA_OK) return;
    chimera_error cerr, serr;
    chimera_status cs = chimera_index_check(ix, &cerr);
    CHECKF(cs == t->check && strstr(cerr.msg, t->needle),
           "%s: check gave %s: %s (expected %s naming '%s')", t->what, chimera_status_str(cs),
           cerr.msg, chimera_status_str(t->check), t->needle);
    /* search: an error naming the section, or exactly the healthy answer */
    int64_t ids[NQ * K];
    float sc[NQ * K];
    s = chimera_index_search(ix, f->q, K, NULL, NULL, ids, sc, NULL, &serr);
    if (s == CHIMERA_OK)
        CHECKF(memcmp(ids, f->ids, sizeof ids) == 0 && memcmp(sc, f->scores, sizeof sc) == 0,
               "%s: search succeeded with results that differ from the healthy index's",
               t->what);
    else
        CHECKF((s == CHIMERA_ERR_CORRUPT || s == CHIMERA_ERR_EMPTY) &&
                   strstr(serr.msg, "section '"),
               "%s: search gave %s: %s", t->what, chimera_status_str(s),
               serr.msg);
    printf("  %-30s open ok, check %s, search %s%s%s\n", t->what, chimera_status_str(cs),
           chimera_status_str(s), s ? ": " : "", s ? serr.msg : "");
    chimera_index_close(ix);
}

static void test_tampers_b4(void)
{
    fixture f;
    if (!fixture_make(&f, "b4", 4, 21)) return;
    const chimera_status C = CHIMERA_ERR_CORRUPT;
    const tamper cases[] = {
        {"negative user id", NULL, 0, "doc_ids", ed_id_negative, "doc_ids", 1, C},
        {"posting document out of range", NULL, 0, "post_doc", ed_post_doc_range, "post_doc", 1, C},
        /* the ids no longer follow the stored id order, which open checks */
        {"duplicate user id", NULL, 0, "doc_ids", ed_id_duplicate, "id_order", 1, C},
        {"NaN centroid", NULL, 0, "centroids", ed_centroid_nan, "centroids", 1, C},
        {"NaN in one c1_fact row", NULL, 0, "c1_fact", ed_f1_one_nan, "c1_fact", 0, C},
        {"NaN in one d1_fact row", NULL, 0, "d1_fact", ed_f1_one_nan, "d1_fact", 0, C},
        {"NaN in one dB_fact row", NULL, 0, "dB_fact", ed_fB_one_nan, "dB_fact", 0, C},
        {"NaN in all of c1_fact", NULL, 0, "c1_fact", ed_f1_all_nan, "c1_fact", 1, C},
        {"NaN in all of d1_fact", NULL, 0, "d1_fact", ed_f1_all_nan, "d1_fact", 1, C},
        {"NaN in all of dB_fact", NULL, 0, "dB_fact", ed_fB_all_nan, "dB_fact", 1, C},
        {"implausible dB_fact f_error", NULL, 0, "dB_fact", ed_fB_implausible, "dB_fact", 1, C},
        {"bits 4 -> 3 in the meta", "bits", 3, NULL, NULL, "dB_codes", 1, C},
        {"bits 4 -> 2 in the meta", "bits", 2, NULL, NULL, "dB_codes", 1, C},
        {"all deleted, meta says 0", NULL, 0, "deleted", ed_all_deleted, "deleted", 1, C},
        {"all deleted, meta agrees", "n_deleted", 300, "deleted", ed_all_deleted, "deleted", 0,
         CHIMERA_ERR_EMPTY},
        {"all deleted, no n_deleted", "n_deleted", NAN, "deleted", ed_all_deleted, "deleted", 0,
         CHIMERA_ERR_EMPTY},
        {"bitmap padding bit set", NULL, 0, "deleted", ed_padding_bit, "deleted", 1, C},
        {"random dB_codes", NULL, 0, "dB_codes", ed_random, "dB_codes", 1, C},
        {"random d1_codes", NULL, 0, "d1_codes", ed_random, "d1_codes", 1, C},
        {"random c1_codes", NULL, 0, "c1_codes", ed_random, "c1_codes", 1, C},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&f, &cases[i]);
    test_pipeline_checks(&f);
    fixture_free(&f);
}

static void test_tampers_b2(void)
{
    fixture f;
    if (!fixture_make(&f, "b2", 2, 22)) return;
    const chimera_status C = CHIMERA_ERR_CORRUPT;
    const tamper cases[] = {
        {"bits 2 -> 1 in the meta", "bits", 1, NULL, NULL, "dB_codes", 1, C},
        {"bits 2 -> 3 in the meta", "bits", 3, NULL, NULL, "dB_codes", 1, C},
        {"random dB_codes (B = 2)", NULL, 0, "dB_codes", ed_random, "dB_codes", 1, C},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&f, &cases[i]);
    fixture_free(&f);
}

/* ---- the pipeline's own checks, on in-memory views ------------------------------------ */

/* Open refuses whole sections of bad factors, so the search-time check of the full-bit
 * factors is driven on a view whose dB_fact is replaced in memory: every query must
 * fail with CHIMERA_ERR_CORRUPT naming dB_fact, and the untouched view must give the
 * public API's answer. (Bad 1-bit factors cannot be driven this way on the CPU: its
 * half-float decoder turns Inf/NaN into large finite values, which only skew candidate
 * selection; the full-bit re-scoring then scores the candidates from dB_fact.) */
static void test_pipeline_checks(const fixture *f)
{
    ix_index ix;
    chimera_error err;
    CHECK_OK(ix_open(f->dir, 0, &ix, &err), &err);
    if (!ix.st) return;
    size_t N = (size_t)ix.n_tokens;
    quant_f1 *c1 = cm_malloc(N * sizeof *c1), *d1 = cm_malloc(N * sizeof *d1);
    quant_fB *dB = cm_malloc(N * sizeof *dB);
    /* kind 4: kind 3 with k_refine = k_fullbit, where the host re-scores every candidate
     * without a 1-bit pass (pipeline.h); kind 5: that with 200 of them and NaN factors in
     * every other document, in latency mode with two threads, where the re-scoring is
     * split over a pool: the query must name the document one thread names (the first
     * bad candidate, whichever part holds it) */
    for (int kind = 0; kind < 6; kind = kind ? kind + 1 : 3) {
        memcpy(c1, ix.segs[0].c1_fact, N * sizeof *c1);
        memcpy(d1, ix.segs[0].d1_fact, N * sizeof *d1);
        memcpy(dB, ix.segs[0].dB_fact, N * sizeof *dB);
        const char *needle = NULL;
        for (size_t t = 0; t < N; t++) {
            if (kind == 1) c1[t].kappa = 0x7c00u; /* +inf */
            if (kind == 2) d1[t].kappa = 0x7c00u;
            if (kind == 3 || kind == 4) dB[t].kappa = NAN;
        }
        for (int64_t d = 1; kind == 5 && d < ix.segs[0].n_docs; d += 2)
            for (int64_t t = ix.segs[0].doc_off[d]; t < ix.segs[0].doc_off[d + 1]; t++)
                dB[t].kappa = NAN;
        if (kind == 1) needle = "c1_fact";
        if (kind == 2) needle = "d1_fact";
        if (kind >= 3) needle = "dB_fact";
        ix_index v = ix;
        ix_segment seg = ix.segs[0];
        v.segs = &seg;
        seg.c1_fact = c1;
        seg.d1_fact = d1;
        seg.dB_fact = dB;
        chimera_search_params d = {0};
        chimera_search_params_default(K, &d); /* what the reference run used */
        sp_params p = {.k = K, .n_probe = d.n_probe, .k_refine = d.k_refine,
                       .k_fullbit = d.k_fullbit, .chunks = d.chunks};
        if (kind == 4) p.k_refine = p.k_fullbit;
        if (kind == 5) p.k_refine = p.k_fullbit = 200;
        sp_engine *e, *e1 = NULL;
        CHECK_OK(sp_engine_new(&v, "cpu", 1, kind == 5 ? 2 : 1, &p, 64, &e, &err), &err);
        if (kind == 5) CHECK_OK(sp_engine_new(&v, "cpu", 1, 1, &p, 64, &e1, &err), &err);
        if (!e) continue;
        int failed = 0, named = 0, same = 0;
        for (int64_t i = 0; i < NQ; i++) {
            int64_t ids[K];
            float sc[K];
            const float *qi = f->s.queries + (size_t)i * f->s.query_len * f->s.dim;
            chimera_error err1 = {0};
            if (e1) sp_search(e1, 0, qi, f->s.query_len, &p, ids, sc, NULL, &err1);
            memset(&err, 0, sizeof err);
            chimera_status s = sp_search(e, 0, qi, f->s.query_len, &p, ids, sc, NULL, &err);
            same += e1 && strcmp(err.msg, err1.msg) == 0;
            if (kind == 0) {
                CHECK_OK(s, &err);
                CHECK(memcmp(ids, f->ids + i * K, sizeof ids) == 0);
            } else {
                failed += s == CHIMERA_ERR_CORRUPT;
                named += needle && strstr(err.msg, needle) != NULL;
            }
        }
        if (kind > 0)
            CHECKF(failed == NQ && named == NQ, "%s: %d of %d queries failed, %d named it",
                   needle, failed, NQ, named);
        if (kind == 5)
            CHECKF(same == NQ, "split re-scoring: %d of %d queries named the document one "
                   "thread names", same, NQ);
        sp_engine_free(e);
        sp_engine_free(e1);
    }
    cm_free(c1);
    cm_free(d1);
    cm_free(dB);
    ix_close(&ix);
}

int main(void)
{
    test_tampers_b4();
    test_tampers_b2();
    return check_report();
}
