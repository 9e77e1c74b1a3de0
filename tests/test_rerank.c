/* The exact re-rank tier (chimera_build_opts.rerank, chimera_search_params.rerank_depth):
 *
 *   exact        with rerank_depth >= the documents and every cluster probed and kept,
 *                the search returns what chimera_corpus_search returns: the same ids and
 *                scores (within float summation order) against exact search over the
 *                vectors as stored (rounded to f16 / bf16), and scores within that
 *                rounding of exact search over the originals; for f32, bf16 and f16, at
 *                a dimension that is a multiple of 8 and one that is not (the widening
 *                kernels' tails)
 *   partial      a shallow rerank_depth returns the best k of the full-bit top by exact
 *                score: every score it returns is the document's exact score
 *   filtered     with a filter that allows a third of the documents, and one that
 *                excludes a third, the re-rank equals exact search over the allowed ones
 *   living       after adds (past a merge), deletes, updates, a compaction and a
 *                compaction with --recluster, the re-rank still equals exact search over
 *                the live documents, `check` passes, and the recluster kept the vectors
 *   errors       rerank_depth on an index without vectors, a depth past the cap and an
 *                unknown element type are refused, naming the remedy
 *   corrupt      a flipped byte in the vectors fails check and a verified open; a NaN
 *                written with valid checksums fails open (a sampled token) or check (any
 *                other), and a search that re-scores it fails naming the section
 *   info         chimera_index_info reports the element type and the bytes
 *   profiles     a stored profile's rerank_depth comes back from profile_get
 *   tune         a target of 0.99 on an index with vectors tunes with the re-rank on
 *                (rerank_depth = k_fullbit in the result) and reaches it; 0.9 does not
 *   kernels      every maxsim and widening variant the CPU runs against the scalar
 *                reference on awkward shapes (rows 1..32, dim not a multiple of 8 or
 *                odd, m_pad 8..64): maxima within the float rounding of the inner
 *                products, the widening bit for bit, a NaN or infinite value always
 *                reported; the AVX-512 BF16 kernel against the scalar one on the widened
 *                rows and the rounded query
 *   bf16         a bfloat16 index scores the query rounded to bfloat16 at every SIMD
 *                level (exact above, run under CHIMERA_SIMD=avx2 and scalar too) */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/alloc.h"
#include "core/cpu.h"
#include "core/rng.h"
#include "core/error.h"
#include "core/f16.h"
#include "data/synth.h"
#include "index/index.h"
#include "index/store.h"
#include "search/rerank.h"
#include "tmpdir.h"

#define K 10

typedef struct corpus {
    data_synth_corpus s;
    int64_t *off; /* n_docs + 1 */
    int64_t *ids; /* n_docs: 500 + 3 row */
} corpus;

static void corpus_make(corpus *c, int64_t n_docs, uint32_t dim, uint64_t seed)
{
    chimera_error err;
    memset(c, 0, sizeof *c);
    chimera_synth_opts so = {.n_docs = n_docs, .dim = dim, .n_queries = 16, .query_len = 12,
                             .seed = seed, .min_len = 4, .max_len = 40, .vocab = 3000,
                             .n_topics = 30};
    CHECK_OK(data_synth_generate(&so, &c->s, &err), &err);
    c->off = cm_malloc((size_t)(c->s.n_docs + 1) * sizeof *c->off);
    c->ids = cm_malloc((size_t)c->s.n_docs * sizeof *c->ids);
    c->off[0] = 0;
    for (int64_t d = 0; d < c->s.n_docs; d++) {
        c->off[d + 1] = c->off[d] + c->s.doclens[d];
        c->ids[d] = 500 + 3 * d;
    }
}

static void corpus_free(corpus *c)
{
    data_synth_free(&c->s);
    cm_free(c->off);
    cm_free(c->ids);
}

/* Documents [a, b) of c (borrowing c's arrays). */
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
    CHECK_OK(chimera_queries_new(c->s.queries, c->s.n_queries, c->s.dim, NULL, c->s.query_len,
                                 &q, &err), &err);
    return q;
}

/* Every value of c's tokens rounded to `type` and widened back: what the index stores. */
static float *rounded(const corpus *c, chimera_rerank type)
{
    size_t n = (size_t)c->s.n_tokens * c->s.dim;
    float *t = cm_malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) {
        float v = c->s.tokens[i];
        t[i] = type == CHIMERA_RERANK_F16    ? cm_f16_to_f32(cm_f32_to_f16(v))
               : type == CHIMERA_RERANK_BF16 ? cm_bf16_to_f32(cm_f32_to_bf16(v))
                                             : v;
    }
    return t;
}

/* c's queries as the tier scores them: bfloat16 vectors against the query rounded to
 * bfloat16 (rerank.h), the other types against the query as given. */
static chimera_queries *queries_as_scored(const corpus *c, chimera_rerank type, float **vals)
{
    chimera_error err;
    size_t n = (size_t)c->s.n_queries * c->s.query_len * c->s.dim;
    *vals = cm_malloc(n * sizeof **vals);
    for (size_t i = 0; i < n; i++) {
        float v = c->s.queries[i];
        (*vals)[i] = type == CHIMERA_RERANK_BF16 ? cm_bf16_to_f32(cm_f32_to_bf16(v)) : v;
    }
    chimera_queries *q = NULL;
    CHECK_OK(chimera_queries_new(*vals, c->s.n_queries, c->s.dim, NULL, c->s.query_len, &q, &err),
             &err);
    return q;
}

/* A search that reaches every document: every cluster probed, every document kept by
 * refinement and full-bit scored, and `depth` re-scored exactly. */
static chimera_status search_all(const char *dir, const chimera_queries *q, uint32_t depth,
                                 int64_t n_docs, int64_t *ids, float *sc, chimera_error *err)
{
    chimera_index *ix = NULL;
    CM_TRY(chimera_index_open(dir, NULL, &ix, err));
    chimera_index_info in;
    chimera_status s = chimera_index_info_read(dir, &in, err);
    chimera_search_params p = {.n_probe = in.n_clusters, .k_refine = (uint32_t)n_docs,
                               .k_fullbit = (uint32_t)n_docs, .rerank_depth = depth};
    chimera_search_opts so = {.n_threads = 2};
    if (s == CHIMERA_OK) s = chimera_index_search(ix, q, K, &p, &so, ids, sc, NULL, err);
    chimera_index_close(ix);
    return s;
}

/* Exact top-K over `tokens` (documents by `lens`, ids `dids`; n_docs of them). */
static void exact(const float *tokens, int64_t n_tok, uint32_t dim, const int64_t *lens,
                  const int64_t *dids, int64_t n_docs, const chimera_queries *q, int64_t *ids,
                  float *sc)
{
    chimera_error err;
    chimera_corpus *c = NULL;
    CHECK_OK(chimera_corpus_wrap(tokens, n_tok, dim, lens, n_docs, dids, NULL, &c, &err), &err);
    chimera_exact_opts eo = {.n_threads = 2};
    CHECK_OK(chimera_corpus_search(c, q, K, &eo, ids, sc, &err), &err);
    chimera_corpus_close(c);
}

/* Same ranking and scores within tol; a swapped pair is accepted only where the two
 * scores tie within tol (summation order may then decide either way). */
static int same_results(const int64_t *ia, const float *sa, const int64_t *ib, const float *sb,
                        int64_t nq, float tol, const char *what)
{
    int ok = 1;
    for (int64_t i = 0; i < nq * K; i++) {
        int score_ok = fabsf(sa[i] - sb[i]) <= tol * (1.0f + fabsf(sb[i]));
        int id_ok = ia[i] == ib[i] ||
                    (i % K + 1 < K && fabsf(sb[i] - sb[i + 1]) <= 2 * tol * (1.0f + fabsf(sb[i]))) ||
                    (i % K > 0 && fabsf(sb[i] - sb[i - 1]) <= 2 * tol * (1.0f + fabsf(sb[i])));
        if (!score_ok || !id_ok) {
            fprintf(stderr, "%s: query %lld rank %lld: id %lld score %.7g, expected id %lld "
                            "score %.7g\n", what, (long long)(i / K), (long long)(i % K),
                    (long long)ia[i], (double)sa[i], (long long)ib[i], (double)sb[i]);
            ok = 0;
            break;
        }
    }
    return ok;
}

static const char *type_name(chimera_rerank t) { return chimera_rerank_name(t); }

/* ---- exact ------------------------------------------------------------------------- */

static void test_exact(chimera_rerank type, uint32_t dim)
{
    chimera_error err;
    corpus c;
    corpus_make(&c, 240, dim, 11 + dim);
    char dir[512], name[64];
    snprintf(name, sizeof name, "exact_%s_%u", type_name(type), dim);
    test_path(dir, sizeof dir, name);
    chimera_corpus *h = slice(&c, 0, c.s.n_docs);
    chimera_build_opts bo = {.n_clusters = 40, .seed = 3, .n_threads = 2, .no_sync = 1,
                             .rerank = type};
    CHECK_OK(chimera_index_build(h, dir, &bo, NULL, &err), &err);
    chimera_corpus_close(h);
    chimera_queries *q = queries(&c);
    int64_t nq = c.s.n_queries;
    int64_t *ids = cm_malloc((size_t)nq * K * sizeof *ids), *tid = cm_malloc((size_t)nq * K * sizeof *tid);
    float *sc = cm_malloc((size_t)nq * K * sizeof *sc), *tsc = cm_malloc((size_t)nq * K * sizeof *tsc);
    CHECK_OK(search_all(dir, q, (uint32_t)c.s.n_docs, c.s.n_docs, ids, sc, &err), &err);
    /* against exact search over the vectors as the index stores them (and the query as
     * the tier rounds it) */
    float *tok = rounded(&c, type), *qvals = NULL;
    chimera_queries *qs = queries_as_scored(&c, type, &qvals);
    exact(tok, c.s.n_tokens, dim, c.s.doclens, c.ids, c.s.n_docs, qs, tid, tsc);
    CHECKF(same_results(ids, sc, tid, tsc, nq, 2e-6f, name), "%s: re-rank != exact search over "
           "the stored vectors", name);
    /* and against the originals, within the element type's rounding: each inner product
     * is off by at most |q| |v| 2^-p (p: 11 for f16; for bf16 8, twice over: the
     * vectors' rounding and the query's), and a score sums m */
    exact(c.s.tokens, c.s.n_tokens, dim, c.s.doclens, c.ids, c.s.n_docs, q, tid, tsc);
    float tol = type == CHIMERA_RERANK_F32 ? 2e-6f : type == CHIMERA_RERANK_F16 ? 0x1p-11f * c.s.query_len
                                                                                : 0x1p-7f * c.s.query_len;
    int close = 1;
    for (int64_t i = 0; i < nq * K; i++) close &= fabsf(sc[i] - tsc[i]) <= tol;
    CHECKF(close, "%s: scores beyond the rounding of the stored type (%g)", name, (double)tol);
    if (type == CHIMERA_RERANK_F32)
        CHECKF(same_results(ids, sc, tid, tsc, nq, 2e-6f, name), "%s: f32 re-rank != exact", name);

    /* partial: a shallow depth returns exact scores of the documents it returns, both
     * when it covers k_fullbit (the 1-bit top goes to the re-rank, no full-bit scores),
     * when full-bit scores pick its documents from a deeper k_fullbit, and when it covers
     * k_refine too (every refined document re-ranked, no 1-bit scores either) */
    chimera_index *ix = NULL;
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    chimera_search_params p = {0};
    chimera_search_profile prof = {0};
    for (int deeper = 0; deeper < 3; deeper++) {
        p = (chimera_search_params){.rerank_depth = 2 * K, .k_fullbit = (deeper == 1 ? 4 : 2) * K,
                                    .k_refine = (deeper == 2 ? 2 : 8) * K};
        memset(&prof, 0, sizeof prof);
        CHECK_OK(chimera_index_search(ix, q, K, &p, NULL, ids, sc, &prof, &err), &err);
        CHECK(prof.n_reranked == (uint64_t)(nq * 2 * K) && prof.t_rerank > 0);
        CHECKF(deeper == 1 ? prof.n_fullbit >= (uint64_t)(nq * 4 * K) : prof.n_fullbit == 0,
               "%s: %llu documents full-bit scored with k_fullbit %u, rerank_depth %u", name,
               (unsigned long long)prof.n_fullbit, p.k_fullbit, p.rerank_depth);
        CHECKF(deeper == 2 ? prof.n_scored1 == 0 : prof.n_scored1 >= (uint64_t)(nq * 2 * K),
               "%s: %llu documents 1-bit scored with k_refine %u, k_fullbit %u, rerank_depth %u",
               name, (unsigned long long)prof.n_scored1, p.k_refine, p.k_fullbit, p.rerank_depth);
        int exact_scores = 1;
        for (int64_t i = 0; i < nq; i++)
            for (int r = 0; r < K; r++) {
                int64_t d = (ids[i * K + r] - 500) / 3; /* the row of the id */
                double s = 0;
                for (uint32_t j = 0; j < c.s.query_len; j++) {
                    const float *qt = qvals + ((size_t)i * c.s.query_len + j) * dim;
                    double best = -INFINITY;
                    for (int64_t t = c.off[d]; t < c.off[d + 1]; t++) {
                        double dot = 0;
                        for (uint32_t x = 0; x < dim; x++) dot += (double)qt[x] * tok[(size_t)t * dim + x];
                        if (dot > best) best = dot;
                    }
                    s += best;
                }
                if (fabs(s - sc[i * K + r]) > 1e-4 * (1 + fabs(s))) exact_scores = 0;
            }
        CHECKF(exact_scores, "%s: a shallow re-rank (k_fullbit %u) returned a score that is not "
               "exact", name, p.k_fullbit);
    }
    /* without it, the same index returns full-bit estimates (and n_reranked stays 0) */
    p.rerank_depth = 0;
    CHECK_OK(chimera_index_search(ix, q, K, &p, NULL, ids, sc, &prof, &err), &err);
    CHECK(prof.n_reranked == 0);
    CHECK_OK(chimera_index_check(ix, &err), &err);
    chimera_index_close(ix);

    chimera_index_info in;
    CHECK_OK(chimera_index_info_read(dir, &in, &err), &err);
    uint64_t want = (uint64_t)c.s.n_tokens * dim * (type == CHIMERA_RERANK_F32 ? 4 : 2);
    CHECK(in.rerank == type && in.bytes_rerank == want && in.bytes_host >= want);
    cm_free(tok);
    cm_free(qvals);
    chimera_queries_free(qs);
    cm_free(ids);
    cm_free(tid);
    cm_free(sc);
    cm_free(tsc);
    chimera_queries_free(q);
    corpus_free(&c);
}

/* ---- living ------------------------------------------------------------------------ */

/* The re-rank of dir against exact search over its live documents: `live` marks the rows
 * of c whose current version is in the index, `ver[row]` the row whose tokens it holds. */
static void check_live(const char *dir, const corpus *c, const uint8_t *live, const int64_t *ver,
                       const char *when)
{
    chimera_error err;
    chimera_queries *q = queries(c);
    int64_t nq = c->s.n_queries, n_live = 0, n_tok = 0;
    for (int64_t d = 0; d < c->s.n_docs; d++)
        if (live[d]) {
            n_live++;
            n_tok += c->s.doclens[ver[d]];
        }
    float *tok = cm_malloc((size_t)n_tok * c->s.dim * sizeof *tok);
    int64_t *lens = cm_malloc((size_t)n_live * sizeof *lens), *dids = cm_malloc((size_t)n_live * sizeof *dids);
    int64_t at = 0, nd = 0;
    for (int64_t d = 0; d < c->s.n_docs; d++) {
        if (!live[d]) continue;
        int64_t v = ver[d], len = c->s.doclens[v];
        memcpy(tok + (size_t)at * c->s.dim, c->s.tokens + (size_t)c->off[v] * c->s.dim,
               (size_t)len * c->s.dim * sizeof *tok);
        for (int64_t i = at * c->s.dim; i < (at + len) * c->s.dim; i++)
            tok[i] = cm_f16_to_f32(cm_f32_to_f16(tok[i]));
        lens[nd] = len;
        dids[nd++] = c->ids[d];
        at += len;
    }
    int64_t ids[16 * K], tid[16 * K];
    float sc[16 * K], tsc[16 * K];
    exact(tok, n_tok, c->s.dim, lens, dids, n_live, q, tid, tsc);
    chimera_index_info in;
    CHECK_OK(chimera_index_info_read(dir, &in, &err), &err);
    CHECK_OK(search_all(dir, q, (uint32_t)in.n_docs, in.n_docs, ids, sc, &err), &err);
    CHECKF(same_results(ids, sc, tid, tsc, nq, 2e-6f, when), "re-rank != exact over the live "
           "documents after %s", when);
    chimera_index *ix = NULL;
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    if (ix) {
        chimera_status s = chimera_index_check(ix, &err);
        CHECKF(s == CHIMERA_OK, "check after %s: %s", when, err.msg);
        chimera_index_close(ix);
    }
    CHECKF(in.rerank == CHIMERA_RERANK_F16 &&
           in.bytes_rerank == (uint64_t)in.n_tokens * c->s.dim * 2,
           "after %s: info says %s, %llu bytes of vectors for %lld tokens", when,
           chimera_rerank_name(in.rerank), (unsigned long long)in.bytes_rerank,
           (long long)in.n_tokens);
    cm_free(tok);
    cm_free(lens);
    cm_free(dids);
    chimera_queries_free(q);
}

static void test_living(void)
{
    chimera_error err;
    corpus c;
    corpus_make(&c, 300, 64, 77);
    const int64_t D = c.s.n_docs, base = 120;
    uint8_t *live = cm_calloc((size_t)D, 1);
    int64_t *ver = cm_malloc((size_t)D * sizeof *ver);
    for (int64_t d = 0; d < D; d++) ver[d] = d;
    char dir[512];
    test_path(dir, sizeof dir, "living");
    chimera_corpus *h = slice(&c, 0, base);
    chimera_build_opts bo = {.n_clusters = 32, .seed = 5, .n_threads = 2, .no_sync = 1,
                             .rerank = CHIMERA_RERANK_F16};
    CHECK_OK(chimera_index_build(h, dir, &bo, NULL, &err), &err);
    chimera_corpus_close(h);
    memset(live, 1, (size_t)base);
    chimera_update_opts uo = {.no_sync = 1, .n_threads = 2};
    /* ten adds of 18 documents: past IX_MERGE_SEGMENTS, so the appended segments merge */
    int merged = 0;
    for (int64_t a = base; a < D; a += 18) {
        int64_t b = a + 18 < D ? a + 18 : D;
        chimera_update_report rep;
        h = slice(&c, a, b);
        CHECK_OK(chimera_index_add(dir, h, &uo, &rep, &err), &err);
        chimera_corpus_close(h);
        merged |= rep.merged;
        memset(live + a, 1, (size_t)(b - a));
    }
    CHECK(merged);
    check_live(dir, &c, live, ver, "adds and a merge");
    /* delete a spread of documents, built and added */
    int64_t del[12];
    for (int i = 0; i < 12; i++) {
        int64_t row = 7 + 23 * i;
        del[i] = c.ids[row];
        live[row] = 0;
    }
    CHECK_OK(chimera_index_delete(dir, del, 12, &uo, NULL, &err), &err);
    check_live(dir, &c, live, ver, "deletes");
    /* update: documents 3 and 200 take the tokens of 150 and 40 */
    {
        const int64_t rows[2] = {3, 200}, from[2] = {150, 40};
        int64_t lens[2], ids[2], n_tok = 0;
        for (int i = 0; i < 2; i++) n_tok += c.s.doclens[from[i]];
        float *tok = cm_malloc((size_t)n_tok * c.s.dim * sizeof *tok);
        int64_t at = 0;
        for (int i = 0; i < 2; i++) {
            lens[i] = c.s.doclens[from[i]];
            ids[i] = c.ids[rows[i]];
            memcpy(tok + (size_t)at * c.s.dim, c.s.tokens + (size_t)c.off[from[i]] * c.s.dim,
                   (size_t)lens[i] * c.s.dim * sizeof *tok);
            at += lens[i];
            ver[rows[i]] = from[i];
        }
        chimera_corpus *u = NULL;
        CHECK_OK(chimera_corpus_wrap(tok, n_tok, c.s.dim, lens, 2, ids, NULL, &u, &err), &err);
        CHECK_OK(chimera_index_update(dir, u, &uo, NULL, &err), &err);
        chimera_corpus_close(u);
        cm_free(tok);
    }
    check_live(dir, &c, live, ver, "an update");
    CHECK_OK(chimera_index_compact(dir, &uo, NULL, &err), &err);
    check_live(dir, &c, live, ver, "a compaction");
    /* delete more, then recluster: rebuilt from the stored vectors, which it keeps */
    for (int i = 0; i < 12; i++) {
        int64_t row = 11 + 23 * i;
        del[i] = c.ids[row];
        live[row] = 0;
    }
    CHECK_OK(chimera_index_delete(dir, del, 12, &uo, NULL, &err), &err);
    chimera_update_opts ro = uo;
    ro.recluster = 1;
    ro.n_clusters = 24;
    CHECK_OK(chimera_index_compact(dir, &ro, NULL, &err), &err);
    chimera_index_info in;
    CHECK_OK(chimera_index_info_read(dir, &in, &err), &err);
    CHECK(in.n_clusters == 24 && in.n_segments == 1 && in.n_deleted == 0);
    check_live(dir, &c, live, ver, "a recluster");
    cm_free(live);
    cm_free(ver);
    corpus_free(&c);
}

/* ---- errors, corruption, profiles -------------------------------------------------- */

static void test_errors(void)
{
    chimera_error err;
    corpus c;
    corpus_make(&c, 80, 32, 5);
    char dir[512];
    test_path(dir, sizeof dir, "plain");
    chimera_corpus *h = slice(&c, 0, c.s.n_docs);
    chimera_build_opts bo = {.n_clusters = 16, .n_threads = 1, .no_sync = 1};
    CHECK_OK(chimera_index_build(h, dir, &bo, NULL, &err), &err);
    bo.rerank = (chimera_rerank)7;
    CHECK_STATUS(chimera_index_build(h, dir, &bo, NULL, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECK(strstr(err.msg, "rerank") != NULL);
    chimera_corpus_close(h);
    chimera_rerank t;
    CHECK(chimera_rerank_parse("bf16", &t) == CHIMERA_OK && t == CHIMERA_RERANK_BF16);
    CHECK(chimera_rerank_parse("f64", &t) == CHIMERA_ERR_INVALID_ARG);
    CHECK(chimera_rerank_name(CHIMERA_RERANK_NONE) && !chimera_rerank_name((chimera_rerank)4));
    chimera_queries *q = queries(&c);
    chimera_index *ix = NULL;
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    int64_t ids[16 * K];
    float sc[16 * K];
    chimera_search_params p = {.rerank_depth = 20};
    CHECK_STATUS(chimera_index_search(ix, q, K, &p, NULL, ids, sc, NULL, &err),
                 CHIMERA_ERR_INVALID_ARG, &err);
    CHECKF(strstr(err.msg, "stores none") && strstr(err.msg, "--rerank"), "message: %s", err.msg);
    chimera_index_info in;
    CHECK_OK(chimera_index_info_read(dir, &in, &err), &err);
    CHECK(in.rerank == CHIMERA_RERANK_NONE && in.bytes_rerank == 0);
    chimera_index_close(ix);

    /* a profile's rerank_depth round-trips; the search then refuses it here too */
    test_path(dir, sizeof dir, "prof");
    h = slice(&c, 0, c.s.n_docs);
    bo.rerank = CHIMERA_RERANK_BF16;
    CHECK_OK(chimera_index_build(h, dir, &bo, NULL, &err), &err);
    chimera_corpus_close(h);
    chimera_tune_result res;
    memset(&res, 0, sizeof res);
    res.best = (chimera_search_params){.n_probe = 4, .k_refine = 40, .k_fullbit = 30,
                                       .chunks = 2, .rerank_depth = 30};
    res.recall = 0.999;
    res.reached = 1;
    CHECK_OK(chimera_index_profile_save(dir, K, 0.99, &res, &err), &err);
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    chimera_search_params got;
    CHECK_OK(chimera_index_profile_get(ix, K, 0.99, &got, &err), &err);
    CHECK(got.rerank_depth == 30 && got.k_fullbit == 30);
    p.rerank_depth = (1u << 24) + 1;
    CHECK_STATUS(chimera_index_search(ix, q, K, &p, NULL, ids, sc, NULL, &err),
                 CHIMERA_ERR_INVALID_ARG, &err);
    CHECK_OK(chimera_index_search(ix, q, K, &got, NULL, ids, sc, NULL, &err), &err);
    /* tune: 0.99 with the re-rank, 0.9 without */
    int64_t truth[16 * K];
    float tsc[16 * K];
    exact(c.s.tokens, c.s.n_tokens, c.s.dim, c.s.doclens, c.ids, c.s.n_docs, q, truth, tsc);
    chimera_tune_result tr;
    chimera_search_opts so = {.n_threads = 2, .backend = CHIMERA_BACKEND_CPU};
    CHECK_OK(chimera_index_tune(ix, q, truth, K, K, 0.99, &so, &tr, &err), &err);
    /* on the CPU the re-rank's depth is the walk's: the top 2K or 4K by full-bit score, at
     * most the full-bit depth (the backward walk on a device re-ranks all of it) */
    CHECKF(tr.reached && tr.recall >= 0.99 && tr.best.rerank_depth >= K &&
               tr.best.rerank_depth <= tr.best.k_fullbit &&
               (tr.best.rerank_depth == 2 * K || tr.best.rerank_depth == 4 * K ||
                tr.best.rerank_depth == tr.best.k_fullbit),
           "tune 0.99: reached %d, recall %.4f, k_fullbit %u, rerank_depth %u", tr.reached,
           tr.recall, tr.best.k_fullbit, tr.best.rerank_depth);
    for (int i = 0; i < tr.n_points; i++)
        CHECK(tr.points[i].params.rerank_depth >= 1 &&
              tr.points[i].params.rerank_depth <= tr.points[i].params.k_fullbit);
    CHECK_OK(chimera_index_tune(ix, q, truth, K, K, 0.9, &so, &tr, &err), &err);
    CHECK(tr.best.rerank_depth == 0);
    chimera_index_close(ix);
    chimera_queries_free(q);
    corpus_free(&c);
}

/* Rewrites src into dst through the store (valid checksums) with value `v` (f16 bits)
 * at element `at` of section `sec`. */
static chimera_status rewrite(const char *src, const char *dst, const char *sec, uint64_t at,
                              uint16_t v, chimera_error *err)
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
        uint8_t *copy = cm_malloc(sd->bytes + 1);
        memcpy(copy, sd->data, sd->bytes);
        if (strcmp(sec, sd->name) == 0) memcpy(copy + at * 2, &v, 2);
        s = ix_store_writer_add_typed(w, sd->name, sd->dtype ? &ty : NULL, copy, sd->bytes, err);
        cm_free(copy);
    }
    cJSON *meta = cJSON_Duplicate(ix_store_meta(st), 1);
    if (s == CHIMERA_OK) s = ix_store_writer_commit(w, meta, err);
    else ix_store_writer_abort(w);
    cJSON_Delete(meta);
    ix_store_close(st);
    return s;
}

static void test_corrupt(void)
{
    chimera_error err;
    corpus c;
    corpus_make(&c, 200, 32, 9);
    char dir[512], bad[512], path[600];
    test_path(dir, sizeof dir, "healthy");
    chimera_corpus *h = slice(&c, 0, c.s.n_docs);
    chimera_build_opts bo = {.n_clusters = 16, .n_threads = 1, .no_sync = 1,
                             .rerank = CHIMERA_RERANK_F16};
    CHECK_OK(chimera_index_build(h, dir, &bo, NULL, &err), &err);
    chimera_corpus_close(h);
    chimera_queries *q = queries(&c);
    int64_t ids[16 * K];
    float sc[16 * K];

    /* a NaN at token 0 (open samples it): open refuses the index, naming the section */
    test_path(bad, sizeof bad, "nan0");
    CHECK_OK(rewrite(dir, bad, "vectors_f16", 5, 0x7e00u, &err), &err);
    chimera_index *ix = NULL;
    CHECK_STATUS(chimera_index_open(bad, NULL, &ix, &err), CHIMERA_ERR_CORRUPT, &err);
    CHECKF(strstr(err.msg, "vectors_f16") != NULL, "message: %s", err.msg);
    chimera_index_close(ix);
    ix = NULL;

    /* a NaN in a token open does not sample: check finds it, and a search that
     * re-scores its document fails naming the section */
    test_path(bad, sizeof bad, "nan1");
    CHECK_OK(rewrite(dir, bad, "vectors_f16", 32 + 3, 0x7e00u, &err), &err);
    CHECK_OK(chimera_index_open(bad, NULL, &ix, &err), &err);
    if (ix) {
        CHECK_STATUS(chimera_index_check(ix, &err), CHIMERA_ERR_CORRUPT, &err);
        CHECKF(strstr(err.msg, "vectors_f16") != NULL, "message: %s", err.msg);
        chimera_search_params p = {.n_probe = 16, .k_refine = 200, .k_fullbit = 200,
                                   .rerank_depth = 200};
        CHECK_STATUS(chimera_index_search(ix, q, K, &p, NULL, ids, sc, NULL, &err),
                     CHIMERA_ERR_CORRUPT, &err);
        CHECKF(strstr(err.msg, "vectors_f16") != NULL, "message: %s", err.msg);
        chimera_index_close(ix);
        ix = NULL;
    }

    /* a flipped byte in the file (checksums now disagree): check and a verified open */
    snprintf(path, sizeof path, "%s/vectors_f16.bin", dir);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    if (fd >= 0) {
        uint8_t b;
        CHECK(pread(fd, &b, 1, 64 + 1001) == 1);
        b ^= 0x10;
        CHECK(pwrite(fd, &b, 1, 64 + 1001) == 1);
        close(fd);
    }
    chimera_open_opts vo = {.verify = 1};
    CHECK_STATUS(chimera_index_open(dir, &vo, &ix, &err), CHIMERA_ERR_CORRUPT, &err);
    CHECKF(strstr(err.msg, "vectors_f16") != NULL, "message: %s", err.msg);
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    if (ix) {
        CHECK_STATUS(chimera_index_check(ix, &err), CHIMERA_ERR_CORRUPT, &err);
        CHECKF(strstr(err.msg, "vectors_f16") != NULL, "message: %s", err.msg);
        chimera_index_close(ix);
    }
    chimera_queries_free(q);
    corpus_free(&c);
}

/* ---- filtered ---------------------------------------------------------------------- */

/* With a filter, the re-rank (its depth covering k_fullbit: the path without full-bit
 * scores) equals exact search over the allowed documents only: a selective filter (a
 * third of the documents allowed: scored directly) and a wide one (a third excluded). */
static void test_filtered(void)
{
    chimera_error err;
    corpus c;
    corpus_make(&c, 240, 32, 21);
    char dir[512];
    test_path(dir, sizeof dir, "filtered");
    chimera_corpus *h = slice(&c, 0, c.s.n_docs);
    chimera_build_opts bo = {.n_clusters = 24, .seed = 5, .n_threads = 2, .no_sync = 1,
                             .rerank = CHIMERA_RERANK_F16};
    CHECK_OK(chimera_index_build(h, dir, &bo, NULL, &err), &err);
    chimera_corpus_close(h);
    chimera_index_info in;
    CHECK_OK(chimera_index_info_read(dir, &in, &err), &err);
    chimera_index *ix = NULL;
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    chimera_queries *q = queries(&c);
    int64_t nq = c.s.n_queries, n_docs = c.s.n_docs;
    uint32_t dim = c.s.dim;
    float *tok = rounded(&c, CHIMERA_RERANK_F16);
    float *sub = cm_malloc((size_t)c.s.n_tokens * dim * sizeof *sub);
    int64_t *lens = cm_malloc((size_t)n_docs * sizeof *lens), *dids = cm_malloc((size_t)n_docs * sizeof *dids);
    int64_t *listed = cm_malloc((size_t)n_docs * sizeof *listed), n_listed = 0;
    for (int64_t d = 0; d < n_docs; d += 3) listed[n_listed++] = c.ids[d];
    int64_t ids[16 * K], tid[16 * K];
    float sc[16 * K], tsc[16 * K];
    for (int exclude = 0; exclude < 2 && ix; exclude++) {
        chimera_filter *f = NULL;
        CHECK_OK(chimera_filter_new(listed, n_listed, exclude, &f, &err), &err);
        int64_t n_allowed = 0, at = 0;
        for (int64_t d = 0; d < n_docs; d++) {
            if ((d % 3 == 0) == exclude) continue;
            memcpy(sub + (size_t)at * dim, tok + (size_t)c.off[d] * dim,
                   (size_t)c.s.doclens[d] * dim * sizeof *sub);
            at += c.s.doclens[d];
            lens[n_allowed] = c.s.doclens[d];
            dids[n_allowed++] = c.ids[d];
        }
        exact(sub, at, dim, lens, dids, n_allowed, q, tid, tsc);
        chimera_search_params p = {.n_probe = in.n_clusters, .k_refine = (uint32_t)n_docs,
                                   .k_fullbit = (uint32_t)n_docs, .rerank_depth = (uint32_t)n_docs};
        chimera_search_opts so = {.n_threads = 2, .filter = f};
        chimera_search_profile prof = {0};
        CHECK_OK(chimera_index_search(ix, q, K, &p, &so, ids, sc, &prof, &err), &err);
        CHECKF(same_results(ids, sc, tid, tsc, nq, 2e-6f, exclude ? "excluded" : "listed"),
               "filtered re-rank (%s a third) != exact over the allowed documents",
               exclude ? "excluding" : "allowing");
        CHECKF(prof.n_fullbit == 0 && prof.n_reranked > 0, "filtered re-rank: %llu full-bit "
               "scored, %llu re-ranked", (unsigned long long)prof.n_fullbit,
               (unsigned long long)prof.n_reranked);
        /* the depths left to the index: the depth raises them, and a filtered query is
         * not deepened past it (the re-rank covers its candidates, as unfiltered) */
        p = (chimera_search_params){.n_probe = in.n_clusters, .rerank_depth = (uint32_t)n_docs};
        memset(&prof, 0, sizeof prof);
        CHECK_OK(chimera_index_search(ix, q, K, &p, &so, ids, sc, &prof, &err), &err);
        CHECKF(same_results(ids, sc, tid, tsc, nq, 2e-6f, exclude ? "excluded" : "listed") &&
                   prof.n_fullbit == 0,
               "filtered re-rank, default depths (%s a third): %llu full-bit scored",
               exclude ? "excluding" : "allowing", (unsigned long long)prof.n_fullbit);
        chimera_filter_free(f);
    }
    chimera_index_close(ix);
    cm_free(tok);
    cm_free(sub);
    cm_free(lens);
    cm_free(dids);
    cm_free(listed);
    chimera_queries_free(q);
    corpus_free(&c);
}

/* ---- kernels ----------------------------------------------------------------------- */

/* Kernel cases start from floors some rows beat in every third query column (-inf in
 * the others), in both maxima; bound[j] is column j's largest sum of |products| over the
 * rows, the scale of what two orders of summation may differ by. */
static void maxsim_setup(const float *rows, uint32_t n, uint32_t d, const float *qt, uint32_t mp,
                         float *mx0, float *mx1, float *bound)
{
    for (uint32_t j = 0; j < mp; j++) {
        mx0[j] = mx1[j] = j % 3 ? -INFINITY : 0.01f;
        bound[j] = 0;
        for (uint32_t t = 0; t < n; t++) {
            float b = 0;
            for (uint32_t i = 0; i < d; i++) b += fabsf(rows[(size_t)t * d + i] * qt[(size_t)i * mp + j]);
            if (b > bound[j]) bound[j] = b;
        }
    }
}

/* Two kernels' maxima agree within the float rounding of d-term sums. */
static int maxima_close(const float *mx0, const float *mx1, const float *bound, uint32_t d,
                        uint32_t mp)
{
    int close = 1;
    for (uint32_t j = 0; j < mp; j++)
        close &= fabsf(mx0[j] - mx1[j]) <= 2.0f * (float)d * 0x1p-24f * bound[j] + 1e-30f;
    return close;
}

/* The AVX-512 BF16 kernel against its scalar twin (sp_maxsim_scalar on the widened rows
 * and the query rounded to bfloat16): the same exact products, summed in another order.
 * The rows are allocated to their last element, so that a read past an odd dimension's
 * last value (the kernel reads pairs) shows under ASan. */
static void test_bf16_kernel(void)
{
    if (!cm_cpu_supports_bf16_dot()) {
        printf("kernels: bf16 dot skipped: no AVX-512 BF16 on this CPU\n");
        return;
    }
    cm_rng r;
    cm_rng_seed(&r, 43, 1);
    static const uint32_t dims[] = {1, 2, 7, 45, 96, 131};
    static const uint32_t mps[] = {8, 16, 24, 32, 40, 64};
    /* every row-block path: 16, 12, 8 or 6 rows at a time, then fours, two and one */
    static const uint32_t ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 16, 19, 23, 31, 32};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (size_t mi = 0; mi < sizeof mps / sizeof mps[0]; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                uint32_t d = dims[di], mp = mps[mi], n = ns[ni], np = (d + 1) / 2;
                uint16_t *h = cm_malloc((size_t)n * d * sizeof *h);
                float *rows = cm_malloc((size_t)n * d * sizeof *rows);
                float *qt = cm_malloc((size_t)d * mp * sizeof *qt);
                uint32_t *qp = cm_malloc((size_t)np * mp * sizeof *qp);
                float mx0[64], mx1[64], bound[64];
                for (size_t i = 0; i < (size_t)n * d; i++) {
                    h[i] = cm_f32_to_bf16((float)cm_rng_uniform(&r) - 0.5f);
                    rows[i] = cm_bf16_to_f32(h[i]);
                }
                for (size_t i = 0; i < (size_t)d * mp; i++)
                    qt[i] = cm_bf16_to_f32(cm_f32_to_bf16((float)cm_rng_uniform(&r) - 0.5f));
                sp_bf16_pairs(qt, d, mp, qp);
                maxsim_setup(rows, n, d, qt, mp, mx0, mx1, bound);
                float bad0 = 0, bad1 = 0;
                sp_maxsim_scalar(rows, n, d, qt, mp, mx0, &bad0);
                sp_maxsim_bf16_avx512(h, n, d, qp, mp, mx1, &bad1);
                CHECKF(bad0 == 0 && bad1 == 0 && maxima_close(mx0, mx1, bound, d, mp),
                       "maxsim bf16 vs scalar: n %u, dim %u, m_pad %u", n, d, mp);
                /* a NaN in the last row's last value, and an infinity, are reported */
                for (int kind = 0; kind < 2; kind++) {
                    h[(size_t)n * d - 1] = kind ? 0x7f80 : 0x7fc0;
                    bad1 = 0;
                    sp_maxsim_bf16_avx512(h, n, d, qp, mp, mx1, &bad1);
                    CHECKF(isnan(bad1), "maxsim bf16: a %s value went unreported (n %u, dim %u)",
                           kind ? "infinite" : "NaN", n, d);
                }
                cm_free(h);
                cm_free(rows);
                cm_free(qt);
                cm_free(qp);
            }
}

static void test_kernels(void)
{
    if (!cm_cpu_supports(CM_SIMD_AVX2)) {
        printf("kernels: skipped: no AVX2 on this CPU\n");
        return;
    }
    cm_rng r;
    cm_rng_seed(&r, 42, 1);
    static const uint32_t dims[] = {1, 7, 45, 96, 130};
    static const uint32_t mps[] = {8, 16, 24, 32, 40, 64};
    /* every row-block path: 12, 6, 4 or 3 rows at a time, then fours, two and one */
    static const uint32_t ns[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 19, 23, 24, 25};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (size_t mi = 0; mi < sizeof mps / sizeof mps[0]; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                uint32_t d = dims[di], mp = mps[mi], n = ns[ni];
                float *rows = cm_malloc((size_t)n * d * sizeof *rows);
                float *qt = cm_malloc((size_t)d * mp * sizeof *qt);
                float mx0[64], mx1[64], bound[64];
                for (size_t i = 0; i < (size_t)n * d; i++) rows[i] = (float)cm_rng_uniform(&r) - 0.5f;
                for (size_t i = 0; i < (size_t)d * mp; i++) qt[i] = (float)cm_rng_uniform(&r) - 0.5f;
                maxsim_setup(rows, n, d, qt, mp, mx0, mx1, bound);
                float bad0 = 0, bad1 = 0;
                sp_maxsim_scalar(rows, n, d, qt, mp, mx0, &bad0);
                sp_maxsim_avx2(rows, n, d, qt, mp, mx1, &bad1);
                CHECKF(bad0 == 0 && bad1 == 0 && maxima_close(mx0, mx1, bound, d, mp),
                       "maxsim avx2 vs scalar: n %u, dim %u, m_pad %u", n, d, mp);
                /* a NaN in the last row, and an infinity, are reported */
                for (int kind = 0; kind < 2; kind++) {
                    rows[(size_t)(n - 1) * d + d / 2] = kind ? INFINITY : NAN;
                    bad0 = bad1 = 0;
                    sp_maxsim_scalar(rows, n, d, qt, mp, mx0, &bad0);
                    sp_maxsim_avx2(rows, n, d, qt, mp, mx1, &bad1);
                    CHECKF(isnan(bad0) && isnan(bad1), "maxsim: a %s value went unreported (n %u, "
                           "dim %u)", kind ? "infinite" : "NaN", n, d);
                }
                cm_free(rows);
                cm_free(qt);
            }
    /* widening: every half and bfloat16 pattern, bit for bit */
    uint16_t *h = cm_malloc(65536 * sizeof *h + 6);
    float *a = cm_malloc(65539 * sizeof *a), *b = cm_malloc(65539 * sizeof *b);
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    h[65536] = h[65537] = h[65538] = 0x3c00; /* a tail past a multiple of 8 */
    int same = 1;
    sp_f16_widen_avx2(h, 65539, a);
    for (uint32_t i = 0; i < 65539; i++) { /* F16C quiets a signalling NaN: any NaN will do */
        b[i] = cm_f16_to_f32(h[i]);
        same &= memcmp(&a[i], &b[i], 4) == 0 || (isnan(a[i]) && isnan(b[i]));
    }
    CHECKF(same, "f16 widening: avx2 differs from the scalar conversion");
    same = 1;
    sp_bf16_widen_avx2(h, 65539, a);
    for (uint32_t i = 0; i < 65539; i++) {
        b[i] = cm_bf16_to_f32(h[i]);
        same &= memcmp(&a[i], &b[i], 4) == 0;
    }
    CHECKF(same, "bf16 widening: avx2 differs from the scalar conversion");
    /* narrowing rounds to nearest even, and a NaN stays NaN */
    CHECK(cm_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80 && cm_f32_to_bf16(1.0f + 0x1.8p-7f) == 0x3f82 &&
          isnan(cm_bf16_to_f32(cm_f32_to_bf16(NAN))) &&
          cm_f32_to_bf16(INFINITY) == 0x7f80);
    cm_free(h);
    cm_free(a);
    cm_free(b);
}

int main(void)
{
    test_kernels();
    test_bf16_kernel();
    static const chimera_rerank types[3] = {CHIMERA_RERANK_F32, CHIMERA_RERANK_BF16,
                                            CHIMERA_RERANK_F16};
    for (int i = 0; i < 3; i++) test_exact(types[i], 96);
    test_exact(CHIMERA_RERANK_F16, 45); /* not a multiple of 8: the widening's tails */
    test_exact(CHIMERA_RERANK_BF16, 45);
    test_living();
    test_filtered();
    test_errors();
    test_corrupt();
    return check_report();
}
