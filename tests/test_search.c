/* The search pipeline (search/pipeline.h on the "cpu" backend) is checked against
 * references it does not share code with wherever possible. With exhaustive parameters
 * (every cluster probed, every document refined and re-scored, one chunk) its top-k is
 * the brute-force top-k of sp_fullbit_all, same ids in the same order up to ties within
 * 1e-5. At moderate parameters its Recall@10 against exact Chamfer search (search/exact.h)
 * is at least 0.9 on synthetic corpora of four shapes (d = 96 and 128, short and long
 * documents). With exhaustive parameters Recall@100 rises with the code width B = 2, 4, 8
 * and reaches 0.99 at B = 8, so the full-bit codes are what limits exhaustive quality.
 * Chunking: with k_fullbit = k_refine every chunk count 1..8 gives bit-identical results
 * and no document is 1-bit scored; with k_fullbit = k_refine - 1 (1-bit scored, one
 * candidate possibly not re-scored) the top k differs from that by at most one document
 * and scores no rank higher;
 * with k_fullbit < k_refine more chunks re-score a superset of what one chunk re-scores,
 * so each rank's score can only rise, and exactly min(k_fullbit, candidates) documents
 * are re-scored with one chunk. The same query gives identical ids and scores when
 * repeated, on one worker or two workers running concurrently, and in latency mode. Graph
 * and brute-force probing give Recall@10 within 0.02 on an index of 2048 clusters; every
 * imputation mode runs, and the probe-floor imputation is not worse than zero by more
 * than 0.02 at a small n_probe. Deleted documents are never returned, whatever the
 * parameters. Through the public API: an index built, opened and checked by chimera.h
 * reaches Recall@10 >= 0.9 at default parameters, queries of another dimension give
 * CHIMERA_ERR_DIM with a message naming both dimensions, and k = 0 or too many chunks
 * give CHIMERA_ERR_INVALID_ARG, as do thread counts over CHIMERA_MAX_THREADS and a graph
 * degree over 127; stored profiles with values no integer field holds are refused naming
 * the member. An engine for an index whose one document holds 2^32 - 1 tokens is made
 * (no scratch grows with document length) on the CPU and device paths. The device path
 * ("cpu-as-device": the pipeline computes its own centroid scores and rescores on a host
 * thread, as with the CUDA backend) returns the CPU backend's ids and scores bit for bit
 * (exhaustive: brute force's), and the same on two concurrent workers as on one. A probe
 * whose centroid scores are all -inf pads its output instead of reading unwritten heap
 * slots, and refinement then finds nothing. The CPU backend's brute probe is the float
 * top n_probe of centroid scores computed here in double, and its centroid scores (from
 * the 8-bit centroids) are within their error bound of those; its graph probe (seeded
 * walk, centroid scores computed lazily) finds >= 0.99 of the brute-force probe's
 * centroids per query token on two fresh corpora, with equal scores; the lazily computed
 * rows equal the full matrix's, 1-bit scores are equal, end-to-end top-10 overlap with
 * brute probing is >= 0.95 and latency mode returns the same results; a walk seeded with
 * the entry points is the unseeded walk. Measured recalls and timings are printed. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/clock.h"
#include "data/corpus.h"
#include "data/synth.h"
#include "graph/dot.h"
#include "graph/graph.h"
#include "index/index.h"
#include "index/store.h"
#include "quant/centroids8.h"
#include "quant/kernels.h"
#include "quant/quant_math.h"
#include "quant/rotation.h"
#include "search/exact.h"
#include "search/pipeline.h"
#include "tmpdir.h"
#include "core/alloc.h"

/* The long-document test asks for 4 TiB and needs NULL back, which AddressSanitizer
 * gives only with allocator_may_return_null (it otherwise stops the process). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

/* Two float sums of the same estimates in another association order (sgemm blocking of
 * the centroid scores) differ by ~1e-6 relative; scores are O(10). */
#define TIE_TOL 1e-5

#define TRUTH_K 100

/* ---- fixtures ---------------------------------------------------------------------- */

typedef struct bench {
    const char *name;
    data_synth_corpus s;
    data_corpus c;
    data_queries q;
    ix_index ix;
    int64_t *truth; /* [nq x TRUTH_K] exact top ids (rows: the corpus has no ids) */
    double build_s;
} bench;

static int bench_make(bench *b, const char *name, int64_t n_docs, uint32_t dim, uint32_t min_len,
                      uint32_t max_len, uint32_t n_clusters, uint32_t bits, uint64_t seed,
                      int64_t n_queries)
{
    memset(b, 0, sizeof *b);
    b->name = name;
    chimera_error err;
    chimera_synth_opts o = {.n_docs = n_docs, .dim = dim, .n_queries = n_queries, .seed = seed,
                            .min_len = min_len, .max_len = max_len};
    if (data_synth_generate(&o, &b->s, &err) != CHIMERA_OK ||
        data_corpus_wrap(&b->c, b->s.tokens, b->s.n_tokens, dim, b->s.doclens, b->s.n_docs, NULL,
                         NULL, &err) != CHIMERA_OK ||
        data_queries_new(&b->q, b->s.queries, b->s.n_queries, dim, NULL, b->s.query_len, &err) !=
            CHIMERA_OK) {
        fprintf(stderr, "%s: fixture: %s\n", name, err.msg);
        exit(2);
    }
    char dir[512];
    test_path(dir, sizeof dir, name);
    ix_build_opts bo = {.bits = bits, .n_clusters = n_clusters, .seed = seed, .no_sync = 1};
    double t0 = cm_now();
    chimera_status s = ix_build(&b->c, dir, &bo, NULL, &err);
    b->build_s = cm_now() - t0;
    CHECK_OK(s, &err);
    if (s != CHIMERA_OK) return 0;
    s = ix_open(dir, 1, &b->ix, &err);
    CHECK_OK(s, &err);
    if (s != CHIMERA_OK) return 0;
    CHECK_OK(ix_check(&b->ix, &err), &err);
    b->truth = cm_malloc((size_t)b->q.n * TRUTH_K * sizeof *b->truth);
    float *sc = cm_malloc((size_t)b->q.n * TRUTH_K * sizeof *sc);
    CHECK_OK(sp_exact_search(&b->c, &b->q, TRUTH_K, 0, NULL, NULL, b->truth, sc, &err), &err);
    cm_free(sc);
    printf("%-10s %5lld docs %6lld tokens d=%u K=%u B=%u: built in %.2fs\n", name,
           (long long)b->s.n_docs, (long long)b->s.n_tokens, dim, b->ix.n_clusters, bits,
           b->build_s);
    return 1;
}

static void bench_free(bench *b)
{
    if (b->ix.st) ix_close(&b->ix);
    cm_free(b->truth);
    data_queries_free(&b->q);
    data_corpus_free(&b->c);
    data_synth_free(&b->s);
}

static const float *query(const data_queries *q, int64_t i, uint32_t *m)
{
    *m = (uint32_t)(q->off[i + 1] - q->off[i]);
    return q->tokens + q->off[i] * q->dim;
}

/* Runs every query through one engine on `backend` (n_workers 1, `threads` per call).
 * ids/scores: [nq x p->k]. */
static chimera_status run_all_on(const char *backend, const ix_index *ix, const data_queries *q,
                                 const sp_params *p, int threads, int64_t *ids, float *scores,
                                 sp_stats *st)
{
    sp_engine *e;
    chimera_error err;
    chimera_status s = sp_engine_new(ix, backend, 1, threads, p, 64, &e, &err);
    CHECK_OK(s, &err);
    if (s != CHIMERA_OK) return s;
    for (int64_t i = 0; i < q->n && s == CHIMERA_OK; i++) {
        uint32_t m;
        const float *qt = query(q, i, &m);
        s = sp_search(e, 0, qt, m, p, ids + i * p->k, scores + i * p->k, st, &err);
        CHECK_OK(s, &err);
    }
    sp_engine_free(e);
    return s;
}

static chimera_status run_all(const ix_index *ix, const data_queries *q, const sp_params *p,
                              int threads, int64_t *ids, float *scores, sp_stats *st)
{
    return run_all_on("cpu", ix, q, p, threads, ids, scores, st);
}

/* Mean over queries of |top-k(run) ∩ top-k(truth)| / k. */
static double recall_at(const int64_t *ids, uint32_t stride, const int64_t *truth, int64_t nq,
                        uint32_t k)
{
    double sum = 0;
    for (int64_t i = 0; i < nq; i++) {
        int hit = 0;
        for (uint32_t r = 0; r < k; r++)
            for (uint32_t t = 0; t < k; t++)
                if (ids[i * stride + r] == truth[i * TRUTH_K + t]) {
                    hit++;
                    break;
                }
        sum += (double)hit / k;
    }
    return sum / (double)nq;
}

static double recall_of(const bench *b, const sp_params *p, uint32_t k, int64_t *n_fullbit)
{
    int64_t *ids = cm_malloc((size_t)b->q.n * p->k * sizeof *ids);
    float *sc = cm_malloc((size_t)b->q.n * p->k * sizeof *sc);
    sp_stats st = {0};
    double r = -1;
    if (run_all(&b->ix, &b->q, p, 1, ids, sc, &st) == CHIMERA_OK)
        r = recall_at(ids, p->k, b->truth, b->q.n, k);
    if (n_fullbit) *n_fullbit = (int64_t)st.n_fullbit;
    cm_free(ids);
    cm_free(sc);
    return r;
}

/* ---- exhaustive parameters equal brute force --------------------------------------- */

typedef struct { float s; int64_t d; } scored;

static int by_score(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return (x->d > y->d) - (x->d < y->d);
}

static void test_exhaustive(const bench *b, const char *backend)
{
    const ix_index *ix = &b->ix;
    uint32_t nd = (uint32_t)ix->n_docs;
    sp_params p = {.k = 20, .n_probe = ix->n_clusters, .k_refine = nd, .k_fullbit = nd,
                   .chunks = 1, .impute = BE_IMPUTE_PROBE_FLOOR, .probe = BE_PROBE_BRUTE};
    int64_t nq = b->q.n < 12 ? b->q.n : 12;
    int64_t *ids = cm_malloc((size_t)b->q.n * p.k * sizeof *ids);
    float *sc = cm_malloc((size_t)b->q.n * p.k * sizeof *sc);
    sp_stats st = {0};
    if (run_all_on(backend, ix, &b->q, &p, 1, ids, sc, &st) != CHIMERA_OK) goto done;
    CHECKF(st.n_fullbit == (uint64_t)b->q.n * nd, "exhaustive: %llu documents re-scored, want %llu",
           (unsigned long long)st.n_fullbit, (unsigned long long)b->q.n * nd);
    float *all = cm_malloc((size_t)nd * sizeof *all);
    scored *ref = cm_malloc((size_t)nd * sizeof *ref);
    int bad_rank = 0, bad_score = 0, swapped = 0;
    for (int64_t i = 0; i < nq; i++) {
        uint32_t m;
        const float *qt = query(&b->q, i, &m);
        chimera_error err;
        CHECK_OK(sp_fullbit_all(ix, qt, m, all, &err), &err);
        for (uint32_t d = 0; d < nd; d++) ref[d] = (scored){all[d], ix->segs[0].doc_ids[d]};
        qsort(ref, nd, sizeof *ref, by_score);
        for (uint32_t r = 0; r < p.k; r++) {
            int64_t got = ids[i * p.k + r];
            float gs = sc[i * p.k + r];
            bad_score += fabsf(gs - ref[r].s) > TIE_TOL;
            if (got == ref[r].d) continue;
            /* a tie: the document the pipeline put here scores as the reference's */
            swapped++;
            bad_rank += got < 0 || fabsf(all[got] - ref[r].s) > TIE_TOL;
        }
    }
    printf("exhaustive (%s): %lld queries, top-%u equal to brute force (%d tie swaps)\n",
           backend, (long long)nq, p.k, swapped);
    CHECKF(bad_rank == 0 && bad_score == 0, "exhaustive (%s): %d ranks and %d scores differ "
           "from brute force", backend, bad_rank, bad_score);
    cm_free(all);
    cm_free(ref);
done:
    cm_free(ids);
    cm_free(sc);
}

/* ---- centroid interaction ---------------------------------------------------------- */

/* S [K x m]: query qt's centroid scores as every backend's host stage computes them,
 * from the 8-bit centroids (quant/centroids8.h, quant_c8_scores). */
static void c8_scores_of(const ix_index *ix, const float *qt, uint32_t m, float *S)
{
    quant_qset qs;
    quant_c8_table *t = NULL;
    chimera_error err;
    CHECK_OK(quant_qset_init(&qs, ix->dim_pad, m, &err), &err);
    CHECK_OK(quant_c8_table_get(0, &ix->rot, ix->centroids, ix->n_clusters, &t, &err), &err);
    quant_qset_set(&qs, &ix->rot, qt, m);
    quant_c8_scores(NULL, &qs, t->codes, t->scale, t->sum, NULL, ix->n_clusters, S, m);
    quant_c8_table_release(t);
    quant_qset_free(&qs);
}

/* ci[d]: document d's centroid-interaction score for query qt (m tokens), computed from
 * its centroid scores S (c8_scores_of) in double (sum_j max_t S[c_t][j]); returns the
 * ki-th best of them, the selection's boundary (sorted: scratch of n_docs). */
static double interaction_edge(const ix_index *ix, const float *qt, uint32_t m, uint32_t ki,
                               double *ci, double *sorted)
{
    const ix_segment *sg = &ix->segs[0];
    uint32_t nd = (uint32_t)ix->n_docs;
    float *S = cm_malloc((size_t)ix->n_clusters * m * sizeof *S);
    c8_scores_of(ix, qt, m, S);
    for (uint32_t d = 0; d < nd; d++) {
        double s = 0;
        for (uint32_t j = 0; j < m; j++) {
            double best = -INFINITY;
            for (int64_t t = sg->doc_off[d]; t < sg->doc_off[d + 1]; t++) {
                double x = S[(size_t)sg->tok_cid[t] * m + j];
                best = x > best ? x : best;
            }
            s += best;
        }
        ci[d] = sorted[d] = s;
    }
    cm_free(S);
    for (uint32_t a = 0; a < ki; a++)
        for (uint32_t c = a + 1; c < nd; c++)
            if (sorted[c] > sorted[a]) {
                double x = sorted[a];
                sorted[a] = sorted[c];
                sorted[c] = x;
            }
    return sorted[ki - 1];
}

/* Exhaustive probing and refinement with k_interaction = KI: the documents scored further
 * are the KI best by the centroid-interaction score, computed here in double from the
 * centroid scores the search uses (c8_scores_of: the library's 8-bit rows, which
 * test_graph_probe checks against double), sum_j max_t S[c_t][j], so every returned
 * document is among them (within a
 * rounding tolerance at the boundary), its score is its full-bit score (sp_fullbit_all),
 * and no document clearly inside that set with a clearly higher full-bit score than the
 * last returned is missing. k_interaction >= k_refine changes nothing. */
static void test_interaction(const bench *b)
{
    enum { KI = 40 };
    const ix_index *ix = &b->ix;
    uint32_t nd = (uint32_t)ix->n_docs;
    sp_params p = {.k = 10, .n_probe = ix->n_clusters, .k_refine = nd, .k_fullbit = KI,
                   .chunks = 2, .impute = BE_IMPUTE_PROBE_FLOOR, .probe = BE_PROBE_BRUTE,
                   .k_interaction = KI};
    int64_t nq = b->q.n < 12 ? b->q.n : 12;
    data_queries q = b->q;
    q.n = nq;
    int64_t *ids = cm_malloc((size_t)nq * p.k * sizeof *ids), *ids0 = cm_malloc((size_t)nq * p.k * sizeof *ids0);
    float *sc = cm_malloc((size_t)nq * p.k * sizeof *sc), *sc0 = cm_malloc((size_t)nq * p.k * sizeof *sc0);
    float *all = cm_malloc((size_t)nd * sizeof *all);
    double *ci = cm_malloc((size_t)nd * sizeof *ci), *sorted = cm_malloc((size_t)nd * sizeof *sorted);
    sp_stats st = {0};
    if (run_all(ix, &q, &p, 1, ids, sc, &st) != CHIMERA_OK) goto done;
    /* k_fullbit = KI covers what the interaction keeps: all of it re-scored, none 1-bit */
    CHECKF(st.n_fullbit == (uint64_t)nq * KI && st.n_scored1 == 0 &&
           st.n_refined == (uint64_t)nq * nd,
           "interaction: %llu documents re-scored (%llu 1-bit) of %llu refined, want %lld (0) "
           "of %lld", (unsigned long long)st.n_fullbit, (unsigned long long)st.n_scored1,
           (unsigned long long)st.n_refined, (long long)nq * KI, (long long)nq * nd);
    int outside = 0, bad_score = 0, missed = 0;
    for (int64_t i = 0; i < nq; i++) {
        uint32_t m;
        const float *qt = query(&q, i, &m);
        chimera_error err;
        CHECK_OK(sp_fullbit_all(ix, qt, m, all, &err), &err);
        double edge = interaction_edge(ix, qt, m, KI, ci, sorted), tol = 1e-4 * (1 + fabs(edge));
        float last = sc[i * p.k + p.k - 1];
        for (uint32_t r = 0; r < p.k; r++) {
            int64_t d = ids[i * p.k + r];
            if (d < 0 || d >= nd) {
                outside++;
                continue;
            }
            outside += ci[d] < edge - tol;
            bad_score += fabsf(sc[i * p.k + r] - all[d]) > TIE_TOL;
        }
        for (uint32_t d = 0; d < nd; d++) {
            if (ci[d] <= edge + tol || all[d] <= last + TIE_TOL) continue;
            int found = 0;
            for (uint32_t r = 0; r < p.k; r++) found |= ids[i * p.k + r] == d;
            missed += !found;
        }
    }
    printf("interaction: %lld queries, top-%u of the %d best by centroid interaction\n",
           (long long)nq, p.k, KI);
    CHECKF(outside == 0 && bad_score == 0 && missed == 0,
           "interaction: %d results outside the selection, %d scores not full-bit, %d missed",
           outside, bad_score, missed);
    /* k_fullbit below k_interaction: the KI kept are 1-bit scored, the best half of them
     * re-scored, and what is returned still comes from the KI */
    sp_params half = p;
    half.k_fullbit = KI / 2;
    sp_stats sh = {0};
    if (run_all(ix, &q, &half, 1, ids0, sc0, &sh) == CHIMERA_OK) {
        int out_h = 0;
        for (int64_t i = 0; i < nq; i++) {
            uint32_t m;
            const float *qt = query(&q, i, &m);
            double edge = interaction_edge(ix, qt, m, KI, ci, sorted), tol = 1e-4 * (1 + fabs(edge));
            for (uint32_t r = 0; r < p.k; r++) {
                int64_t d = ids0[i * p.k + r];
                out_h += d < 0 || d >= nd || ci[d] < edge - tol;
            }
        }
        /* (two chunks: a few more than k_fullbit may be re-scored) */
        CHECKF(sh.n_scored1 == (uint64_t)nq * KI && sh.n_fullbit >= (uint64_t)nq * (KI / 2) &&
                   sh.n_fullbit < (uint64_t)nq * KI && out_h == 0,
               "interaction, k_fullbit %u: %llu 1-bit scored, %llu re-scored, %d outside",
               KI / 2, (unsigned long long)sh.n_scored1, (unsigned long long)sh.n_fullbit, out_h);
    }
    /* at or above k_refine: off, the same results as without it */
    sp_params off = p, at = p;
    off.k_interaction = 0;
    at.k_interaction = nd;
    sp_stats s0 = {0}, s1 = {0};
    if (run_all(ix, &q, &off, 1, ids0, sc0, &s0) == CHIMERA_OK &&
        run_all(ix, &q, &at, 1, ids, sc, &s1) == CHIMERA_OK)
        CHECK(memcmp(ids, ids0, (size_t)nq * p.k * sizeof *ids) == 0 &&
              memcmp(sc, sc0, (size_t)nq * p.k * sizeof *sc) == 0 && s1.t_interaction == 0 &&
              s1.n_scored1 == (uint64_t)nq * nd);
done:
    cm_free(ids);
    cm_free(ids0);
    cm_free(sc);
    cm_free(sc0);
    cm_free(all);
    cm_free(ci);
    cm_free(sorted);
}

/* ---- recall against exact search --------------------------------------------------- */

static const sp_params moderate = {.k = 10, .n_probe = 16, .k_refine = 200, .k_fullbit = 50,
                                   .chunks = 4, .impute = BE_IMPUTE_PROBE_FLOOR,
                                   .probe = BE_PROBE_AUTO};

static void test_recall_shape(const bench *b)
{
    double t0 = cm_now();
    int64_t nf = 0;
    double r = recall_of(b, &moderate, 10, &nf);
    double el = cm_now() - t0;
    printf("%-10s Recall@10 %.3f at n_probe %u k_refine %u k_fullbit %u chunks %u "
           "(%.1f ms/query, %.1f re-scored)\n",
           b->name, r, moderate.n_probe, moderate.k_refine, moderate.k_fullbit, moderate.chunks,
           1e3 * el / (double)b->q.n, (double)nf / (double)b->q.n);
    CHECKF(r >= 0.9, "%s: Recall@10 %.3f < 0.9", b->name, r);
}

static void test_recall_bits(void)
{
    double rec[3];
    const uint32_t bits[3] = {2, 4, 8};
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "bits%u", bits[i]);
        bench b;
        /* short documents keep the (slow) B = 8 encoding within the time budget */
        if (!bench_make(&b, name, 400, 64, 4, 16, 64, bits[i], 21, 20)) {
            bench_free(&b);
            return;
        }
        uint32_t nd = (uint32_t)b.ix.n_docs;
        sp_params p = {.k = TRUTH_K, .n_probe = b.ix.n_clusters, .k_refine = nd, .k_fullbit = nd,
                       .chunks = 1, .impute = BE_IMPUTE_PROBE_FLOOR, .probe = BE_PROBE_BRUTE};
        rec[i] = recall_of(&b, &p, TRUTH_K, NULL);
        printf("B=%u exhaustive Recall@100 %.4f\n", bits[i], rec[i]);
        bench_free(&b);
    }
    CHECKF(rec[0] <= rec[1] && rec[1] <= rec[2], "Recall@100 by B: %.4f %.4f %.4f", rec[0],
           rec[1], rec[2]);
    CHECKF(rec[2] >= 0.99, "B=8 Recall@100 %.4f < 0.99", rec[2]);
    CHECKF(rec[0] < 0.99, "B=2 Recall@100 %.4f: the corpus does not tell the widths apart", rec[0]);
}

/* ---- chunks ------------------------------------------------------------------------ */

static void test_chunks(const bench *b)
{
    int64_t nq = b->q.n;
    uint32_t k = 10;
    size_t n = (size_t)nq * k;
    int64_t *ids1 = cm_malloc(n * sizeof *ids1), *ids = cm_malloc(n * sizeof *ids);
    float *sc1 = cm_malloc(n * sizeof *sc1), *sc = cm_malloc(n * sizeof *sc);
    /* k_fullbit == k_refine: the host re-scores everything refinement kept and no 1-bit
     * score is needed (none is computed), so the chunk count changes nothing */
    sp_params p = moderate;
    p.k_fullbit = p.k_refine = 120;
    p.chunks = 1;
    sp_stats sc_st = {0};
    run_all(&b->ix, &b->q, &p, 1, ids1, sc1, &sc_st);
    CHECKF(sc_st.n_scored1 == 0 && sc_st.n_fullbit == sc_st.n_refined && sc_st.t_score1 == 0,
           "k_fullbit == k_refine: %llu 1-bit scored, %llu of %llu re-scored",
           (unsigned long long)sc_st.n_scored1, (unsigned long long)sc_st.n_fullbit,
           (unsigned long long)sc_st.n_refined);
    int differ = 0;
    for (uint32_t c = 2; c <= 8; c++) {
        p.chunks = c;
        run_all(&b->ix, &b->q, &p, 1, ids, sc, NULL);
        differ += memcmp(ids, ids1, n * sizeof *ids) != 0 || memcmp(sc, sc1, n * sizeof *sc) != 0;
    }
    CHECKF(differ == 0, "k_fullbit == k_refine: %d of 7 chunk counts change the results", differ);
    /* One document fewer: the 1-bit path re-scores all but at most one of the same
     * candidates, so its top k lacks at most one of those documents and no rank scores
     * above theirs. */
    p.k_fullbit = p.k_refine - 1;
    for (uint32_t c = 1; c <= 4; c++) {
        p.chunks = c;
        sp_stats st = {0};
        run_all(&b->ix, &b->q, &p, 1, ids, sc, &st);
        int64_t above = 0, q_bad = 0;
        for (int64_t i = 0; i < nq; i++) {
            int missing = 0;
            for (uint32_t r = 0; r < k; r++) {
                above += sc[i * k + r] > sc1[i * k + r];
                int found = 0;
                for (uint32_t r1 = 0; r1 < k; r1++) found |= ids[i * k + r] == ids1[i * k + r1];
                missing += !found;
            }
            q_bad += missing > 1;
        }
        /* (a query whose refinement kept under 120 documents is covered again) */
        CHECKF(above == 0 && q_bad == 0 && st.n_scored1 > 0 && st.n_scored1 <= st.n_refined,
               "k_fullbit = k_refine - 1, chunks %u: %lld ranks above, %lld queries with more "
               "than one document not in the covered result", c, (long long)above,
               (long long)q_bad);
    }
    /* k_fullbit < k_refine: chunk c > 1 re-scores a superset of chunk 1's documents. The
     * second setting (one probe, a deep candidate list, a small k_fullbit) orders
     * refinement's candidates less like their 1-bit scores, so early chunks pick a few
     * documents that later ones push out. */
    const sp_params lt[2] = {
        {.k = 10, .n_probe = 16, .k_refine = 120, .k_fullbit = 30, .chunks = 1},
        {.k = 10, .n_probe = 1, .k_refine = 400, .k_fullbit = 10, .chunks = 1},
    };
    for (int li = 0; li < 2; li++) {
        p = lt[li];
        sp_stats st1 = {0};
        run_all(&b->ix, &b->q, &p, 1, ids1, sc1, &st1);
        CHECKF(st1.n_fullbit == (uint64_t)nq * p.k_fullbit, "one chunk re-scored %llu, want %llu",
               (unsigned long long)st1.n_fullbit, (unsigned long long)nq * p.k_fullbit);
        printf("chunks (n_probe %u, k_refine %u, k_fullbit %u): re-scored per query / queries "
               "whose top-%u differs from 1 chunk:",
               p.n_probe, p.k_refine, p.k_fullbit, k);
        for (uint32_t c = 2; c <= 8; c++) {
            p.chunks = c;
            sp_stats st = {0};
            run_all(&b->ix, &b->q, &p, 1, ids, sc, &st);
            int64_t lower = 0, q_diff = 0;
            for (int64_t i = 0; i < nq; i++) {
                int d = 0;
                for (uint32_t r = 0; r < k; r++) {
                    lower += sc[i * k + r] < sc1[i * k + r];
                    d |= ids[i * k + r] != ids1[i * k + r];
                }
                q_diff += d;
            }
            printf(" c%u %.2f/%lld", c, (double)st.n_fullbit / (double)nq, (long long)q_diff);
            CHECKF(lower == 0, "chunks %u: %lld ranks score below the one-chunk result", c,
                   (long long)lower);
            CHECK(st.n_fullbit >= st1.n_fullbit && st.n_fullbit <= (uint64_t)nq * p.k_refine);
        }
        printf(" (1 chunk: %.2f)\n", (double)st1.n_fullbit / (double)nq);
    }
    cm_free(ids1);
    cm_free(ids);
    cm_free(sc1);
    cm_free(sc);
}

/* ---- determinism ------------------------------------------------------------------- */

typedef struct half_job {
    sp_engine *e;
    const data_queries *q;
    const sp_params *p;
    int worker;
    int64_t *ids;
    float *sc;
    chimera_status s;
} half_job;

/* Worker w searches queries w, w + 2, w + 4, ... */
static void *half_main(void *arg)
{
    half_job *j = arg;
    chimera_error err;
    j->s = CHIMERA_OK;
    for (int64_t i = j->worker; i < j->q->n && j->s == CHIMERA_OK; i += 2) {
        uint32_t m;
        const float *qt = query(j->q, i, &m);
        j->s = sp_search(j->e, j->worker, qt, m, j->p, j->ids + i * j->p->k, j->sc + i * j->p->k,
                         NULL, &err);
    }
    return NULL;
}

/* Every query on engine e's two workers at once (half_main); 1 when both succeeded. */
static int run_halves(sp_engine *e, const data_queries *q, const sp_params *p, int64_t *ids,
                      float *sc)
{
    half_job j[2];
    pthread_t th[2];
    for (int w = 0; w < 2; w++) {
        j[w] = (half_job){e, q, p, w, ids, sc, CHIMERA_OK};
        pthread_create(&th[w], NULL, half_main, &j[w]);
    }
    for (int w = 0; w < 2; w++) pthread_join(th[w], NULL);
    return j[0].s == CHIMERA_OK && j[1].s == CHIMERA_OK;
}

static void test_determinism(const bench *b)
{
    const sp_params *p = &moderate;
    size_t n = (size_t)b->q.n * p->k;
    int64_t *a = cm_malloc(n * sizeof *a), *c = cm_malloc(n * sizeof *c);
    float *as = cm_malloc(n * sizeof *as), *cs = cm_malloc(n * sizeof *cs);
    chimera_error err;
    /* the same query twice on one engine */
    sp_engine *e;
    CHECK_OK(sp_engine_new(&b->ix, "cpu", 1, 1, p, 64, &e, &err), &err);
    if (!e) goto done;
    int rep_diff = 0;
    for (int64_t i = 0; i < b->q.n; i++) {
        uint32_t m;
        const float *qt = query(&b->q, i, &m);
        CHECK_OK(sp_search(e, 0, qt, m, p, a + i * p->k, as + i * p->k, NULL, &err), &err);
        int64_t id2[64];
        float s2[64];
        CHECK_OK(sp_search(e, 0, qt, m, p, id2, s2, NULL, &err), &err);
        rep_diff += memcmp(id2, a + i * p->k, p->k * sizeof *id2) != 0 ||
                    memcmp(s2, as + i * p->k, p->k * sizeof *s2) != 0;
    }
    sp_engine_free(e);
    CHECKF(rep_diff == 0, "%d queries differ when repeated", rep_diff);
    /* two workers, concurrently */
    CHECK_OK(sp_engine_new(&b->ix, "cpu", 2, 1, p, 64, &e, &err), &err);
    if (!e) goto done;
    CHECK(run_halves(e, &b->q, p, c, cs));
    sp_engine_free(e);
    CHECK(memcmp(a, c, n * sizeof *a) == 0 && memcmp(as, cs, n * sizeof *as) == 0);
    /* latency mode: one worker, two threads per device call */
    memset(c, 0, n * sizeof *c);
    run_all(&b->ix, &b->q, p, 2, c, cs, NULL);
    CHECK(memcmp(a, c, n * sizeof *a) == 0 && memcmp(as, cs, n * sizeof *as) == 0);
    /* The covered form (every candidate full-bit scored) in latency mode splits the
     * full-bit stage over a pool, in parts with heaps of their own: the same documents and
     * scores bit for bit as one thread, at k = 10 and 50 with two and three threads
     * (uneven parts); every query split there, none with one thread. */
    cm_free(c);
    cm_free(cs);
    c = cm_malloc((size_t)b->q.n * 50 * sizeof *c);
    cs = cm_malloc((size_t)b->q.n * 50 * sizeof *cs);
    int64_t *c1 = cm_malloc((size_t)b->q.n * 50 * sizeof *c1);
    float *cs1 = cm_malloc((size_t)b->q.n * 50 * sizeof *cs1);
    for (uint32_t k = 10; k <= 50; k += 40)
        for (int threads = 2; threads <= 3; threads++) {
            sp_params cov = *p;
            cov.k = k;
            cov.k_refine = cov.k_fullbit = 240;
            sp_stats st1 = {0}, stn = {0};
            size_t nk = (size_t)b->q.n * k;
            run_all(&b->ix, &b->q, &cov, 1, c1, cs1, &st1);
            run_all(&b->ix, &b->q, &cov, threads, c, cs, &stn);
            CHECKF(memcmp(c1, c, nk * sizeof *c) == 0 && memcmp(cs1, cs, nk * sizeof *cs) == 0,
                   "covered form, k = %u, %d threads in latency mode: results differ from one "
                   "thread's", k, threads);
            CHECKF(st1.n_fullbit == stn.n_fullbit && st1.n_split == 0 &&
                       stn.n_split == (uint64_t)b->q.n,
                   "covered form, k = %u: %llu documents re-scored by one thread, %llu by %d; "
                   "%llu and %llu of %lld queries split", k, (unsigned long long)st1.n_fullbit,
                   (unsigned long long)stn.n_fullbit, threads, (unsigned long long)st1.n_split,
                   (unsigned long long)stn.n_split, (long long)b->q.n);
        }
    cm_free(c1);
    cm_free(cs1);
done:
    cm_free(a);
    cm_free(c);
    cm_free(as);
    cm_free(cs);
}

/* ---- the device path: the pipeline's own centroid scores ---------------------------- */

/* "cpu-as-device" is the CPU backend without host centroid scores, so the pipeline runs
 * as with the CUDA backend: it computes the rows of S its full-bit stage needs itself
 * (once a query, in blocks, from the shared 8-bit centroids) and rescores on a host
 * thread. Chunked and covered searches on it must return what the CPU backend returns,
 * whose S comes from the same 8-bit rows: the same ids and scores bit for bit, as many
 * documents re-scored; and two workers searching concurrently (each with its own rows)
 * exactly what one worker returns. Also with centroid interaction, with a filter of
 * every third document, and with a filter of five (the direct path). */
static void test_device_path(const bench *b)
{
    const ix_index *ix = &b->ix;
    uint32_t nd = (uint32_t)ix->n_docs;
    sp_filter third = {cm_calloc((nd + 7) / 8, 1), cm_malloc(nd * sizeof(uint32_t)), 0},
              five = {cm_calloc((nd + 7) / 8, 1), cm_malloc(nd * sizeof(uint32_t)), 0};
    for (uint32_t d = 0; d < nd; d++) {
        sp_filter *f = d % 3 == 0 ? &third : NULL;
        if (f) {
            f->allow[d >> 3] |= (uint8_t)(1u << (d & 7));
            f->docs[f->n++] = d;
        }
        if (d % (nd / 5) == 1 && five.n < 5) {
            five.allow[d >> 3] |= (uint8_t)(1u << (d & 7));
            five.docs[five.n++] = d;
        }
    }
    sp_params base = {.k = 10, .n_probe = 8, .k_refine = 120, .k_fullbit = 30, .chunks = 4,
                      .impute = BE_IMPUTE_PROBE_FLOOR, .probe = BE_PROBE_BRUTE};
    sp_params ps[5] = {base, base, base, base, base};
    ps[1].k_refine = ps[1].k_fullbit = 60; /* covered: every candidate re-scored */
    ps[2].k_interaction = 60;
    ps[3].filter = &third;
    ps[4].filter = &five;
    size_t n = (size_t)b->q.n * 10;
    int64_t *ic = cm_malloc(n * sizeof *ic), *id = cm_malloc(n * sizeof *id),
            *id2 = cm_malloc(n * sizeof *id2);
    float *sc = cm_malloc(n * sizeof *sc), *sd = cm_malloc(n * sizeof *sd),
          *sd2 = cm_malloc(n * sizeof *sd2);
    for (int v = 0; v < 5; v++) {
        const sp_params *p = &ps[v];
        sp_stats stc = {0}, std = {0};
        if (run_all(ix, &b->q, p, 1, ic, sc, &stc) != CHIMERA_OK ||
            run_all_on("cpu-as-device", ix, &b->q, p, 1, id, sd, &std) != CHIMERA_OK)
            break;
        int bad_score = 0, bad_rank = 0;
        for (size_t r = 0; r < n; r++) {
            bad_score += memcmp(&sd[r], &sc[r], sizeof *sd) != 0;
            bad_rank += id[r] != ic[r];
        }
        printf("device path (k_refine %u, k_fullbit %u, k_interaction %u, filter of %lld): "
               "%lld queries as on the cpu backend, %llu documents re-scored\n", p->k_refine,
               p->k_fullbit, p->k_interaction, p->filter ? (long long)p->filter->n : -1LL,
               (long long)b->q.n, (unsigned long long)std.n_fullbit);
        CHECKF(bad_score == 0 && bad_rank == 0,
               "device path: %d scores and %d ranks differ from the cpu backend's", bad_score,
               bad_rank);
        CHECKF(std.n_fullbit == stc.n_fullbit && std.n_fullbit > 0,
               "device path: %llu documents re-scored, cpu %llu",
               (unsigned long long)std.n_fullbit, (unsigned long long)stc.n_fullbit);
        /* the clusters probed: n_probe a query token where nothing widens (no room was
         * given), none on a filter's direct path (both filters here are small enough to
         * take it), the same on either path */
        uint64_t want_probed = p->filter ? 0 : (uint64_t)b->q.n * p->n_probe;
        CHECKF(stc.n_probed == want_probed && std.n_probed == want_probed,
               "clusters probed: cpu %llu, device path %llu, expected %llu",
               (unsigned long long)stc.n_probed, (unsigned long long)std.n_probed,
               (unsigned long long)want_probed);
        /* the rows of S computed one by one: none after a brute probe on the CPU backend
         * (S in full); on the device path the host stage's own, each at most once a
         * query, and at least one a query that re-scored anything */
        CHECKF(stc.n_rows == 0 && std.n_rows >= (uint64_t)b->q.n &&
               std.n_rows <= (uint64_t)b->q.n * ix->n_clusters,
               "centroid rows computed one by one: cpu %llu, device path %llu (%lld queries, "
               "K %u)", (unsigned long long)stc.n_rows, (unsigned long long)std.n_rows,
               (long long)b->q.n, ix->n_clusters);
        sp_engine *e;
        chimera_error err;
        CHECK_OK(sp_engine_new(ix, "cpu-as-device", 2, 1, p, 64, &e, &err), &err);
        if (!e) break;
        CHECK(run_halves(e, &b->q, p, id2, sd2));
        sp_engine_free(e);
        CHECKF(memcmp(id, id2, n * sizeof *id) == 0 && memcmp(sd, sd2, n * sizeof *sd) == 0,
               "device path: two concurrent workers differ from one");
    }
    cm_free(ic);
    cm_free(id);
    cm_free(id2);
    cm_free(sc);
    cm_free(sd);
    cm_free(sd2);
    cm_free(third.allow);
    cm_free(third.docs);
    cm_free(five.allow);
    cm_free(five.docs);
}

/* ---- probe and imputation modes ---------------------------------------------------- */

static void test_probe_modes(const bench *b)
{
    sp_params p = {.k = 10, .n_probe = 16, .k_refine = 200, .k_fullbit = 50, .chunks = 4,
                   .impute = BE_IMPUTE_PROBE_FLOOR, .probe = BE_PROBE_BRUTE};
    double t0 = cm_now();
    double rb = recall_of(b, &p, 10, NULL);
    double t1 = cm_now();
    p.probe = BE_PROBE_GRAPH;
    double rg = recall_of(b, &p, 10, NULL);
    double t2 = cm_now();
    printf("probe modes (K=%u, n_probe 16): Recall@10 brute %.3f (%.1f ms/query), graph %.3f "
           "(%.1f ms/query)\n",
           b->ix.n_clusters, rb, 1e3 * (t1 - t0) / (double)b->q.n, rg,
           1e3 * (t2 - t1) / (double)b->q.n);
    CHECKF(fabs(rb - rg) <= 0.02, "graph probing Recall@10 %.3f vs brute force %.3f", rg, rb);
}

/* The documented bound (quant/kernels.h, quant_c8_scores) on a lazily computed centroid
 * score <q_j, c_k>: half a step of the 8-bit row of c_k (scale[k] / 2) against the
 * rotated query token's L1 norm, half a step of the 8-bit query token (delta_j / 2)
 * against the row's, plus float rounding. c8l1[k] = sum_i |scale[k] codes_ki|; qj: the
 * rotated query token. */
static double c8_bound(const float *scale, const double *c8l1, uint32_t k, const float *qj,
                       uint32_t dim_pad)
{
    float lo = qj[0], hi = qj[0];
    double l1q = 0.0;
    for (uint32_t i = 0; i < dim_pad; i++) {
        lo = qj[i] < lo ? qj[i] : lo;
        hi = qj[i] > hi ? qj[i] : hi;
        l1q += fabs(qj[i]);
    }
    double delta = (double)(hi - lo) / 255.0;
    return 0.5 * scale[k] * l1q + 0.5 * delta * c8l1[k] + 1e-5 * (1.0 + l1q);
}

/* The one-segment resident of a built index, for the tests that drive a backend
 * directly (seg must outlive r). */
static void resident_of(const ix_index *ix, be_segment *seg, be_resident *r)
{
    const ix_segment *s0 = &ix->segs[0];
    *seg = (be_segment){.doc_base = 0, .n_docs = s0->n_docs, .n_tokens = s0->n_tokens,
                        .n_lists = s0->n_lists, .post_cid = s0->post_cid,
                        .post_off = s0->post_off, .post_doc = s0->post_doc,
                        .c1_codes = s0->c1_codes, .c1_fact = s0->c1_fact,
                        .d1_codes = s0->d1_codes, .d1_fact = s0->d1_fact,
                        .tok_cid = s0->tok_cid, .doc_off = s0->doc_off};
    *r = (be_resident){.dim = ix->dim, .dim_pad = ix->dim_pad, .n_clusters = ix->n_clusters,
                       .degree = ix->degree, .n_entry = ix->n_entry, .n_docs = ix->n_docs,
                       .n_tokens = ix->n_tokens, .rot = &ix->rot, .centroids = ix->centroids,
                       .graph_adj = ix->g.adj, .graph_entry = ix->g.entry, .n_segments = 1,
                       .segments = seg, .deleted = ix->deleted};
}

/* The CPU backend's two probes on the backend directly, against the centroid scores in
 * double (Sref): the brute probe is each query token's exact top n_probe of Sref, best
 * first, ties to the smaller id, with those scores (within float rounding), and its
 * centroid scores S (every row, from the 8-bit centroids) within c8_bound of Sref; the
 * graph walk finds at least 0.99 of the brute probe's centroids, with their scores; a
 * graph-probed query computes only the rows of S that scoring reads, lazily, the same
 * values as the brute probe's full S bit for bit; so 1-bit scores of the same documents
 * after either probe are equal. */
static void test_graph_probe(const bench *b)
{
    const ix_index *ix = &b->ix;
    const ix_segment *s0 = &ix->segs[0];
    be_segment seg;
    be_resident r;
    resident_of(ix, &seg, &r);
    /* NR documents hold fewer tokens than there are centroids: the rows stay lazy */
    enum { NP_MAX = 32, NR = 16 };
    be_config cfg = {.n_workers = 1, .n_threads = 1, .max_m = 64, .max_probe = NP_MAX,
                     .max_refine = NR};
    cm_backend be;
    chimera_error err;
    CHECK_OK(backend_new("cpu", &be, &err), &err);
    CHECK_OK(be.iface->upload(be.ctx, &r, &cfg, &err), &err);
    const struct cm_backend_i *f = be.iface;
    uint32_t K = ix->n_clusters, mm = cfg.max_m;
    size_t np_all = (size_t)mm * NP_MAX;
    uint32_t *cb = cm_malloc(np_all * sizeof *cb), *cg = cm_malloc(np_all * sizeof *cg);
    float *qb = cm_malloc(np_all * sizeof *qb), *qg = cm_malloc(np_all * sizeof *qg);
    float *Sb = cm_malloc((size_t)K * mm * sizeof *Sb);
    float *Sref = cm_malloc((size_t)K * mm * sizeof *Sref);
    float *qrot = cm_malloc((size_t)mm * ix->dim_pad * sizeof *qrot);
    int8_t *c8 = cm_malloc((size_t)K * ix->dim_pad);
    float *c8s = cm_malloc((size_t)K * sizeof *c8s);
    int32_t *c8sum = cm_malloc((size_t)K * sizeof *c8sum);
    double *c8l1 = cm_calloc(K, sizeof *c8l1);
    quant_c8_encode(&ix->rot, ix->centroids, K, c8, c8s, c8sum);
    for (uint32_t k = 0; k < K; k++)
        for (uint32_t i = 0; i < ix->dim_pad; i++)
            c8l1[k] += fabs((double)c8s[k] * c8[(size_t)k * ix->dim_pad + i]);
    uint32_t docs[NR], dg[NR], n_b, n_g;
    float s1b[NR], s1g[NR];
    scored *col = cm_malloc((size_t)K * sizeof *col);
    static const uint32_t nps[] = {4, 8, 16, 32};
    for (size_t pi = 0; pi < sizeof nps / sizeof *nps; pi++) {
        uint32_t np = nps[pi];
        uint64_t found = 0, total = 0;
        int bad_qc = 0, bad_rows = 0, bad_lazy = 0, bad_s1 = 0, bad_sel = 0;
        double max_rel = 0.0; /* the largest 8-bit row error over its bound */
        for (int64_t i = 0; i < b->q.n; i++) {
            uint32_t m;
            const float *q = query(&b->q, i, &m);
            CHECK_OK(f->query_begin(be.ctx, 0, q, m, &err), &err);
            CHECK_OK(f->probe(be.ctx, 0, np, 0, BE_PROBE_BRUTE, cb, qb, &err), &err);
            CHECK_OK(f->refine(be.ctx, 0, NR, (be_floor){BE_IMPUTE_PROBE_FLOOR, 1.0f}, NULL, docs, NULL, &n_b, NULL,
                               &err), &err);
            memcpy(Sb, f->host_centroid_scores(be.ctx, 0), (size_t)K * m * sizeof *Sb);
            quant_rotate_n(&ix->rot, m, q, ix->dim, qrot, ix->dim_pad);
            for (uint32_t k = 0; k < K; k++)
                for (uint32_t j = 0; j < m; j++) {
                    double x = 0.0;
                    for (uint32_t a = 0; a < ix->dim; a++)
                        x += (double)ix->centroids[(size_t)k * ix->dim + a] * q[(size_t)j * ix->dim + a];
                    size_t at = (size_t)k * m + j;
                    Sref[at] = (float)x;
                    double e = fabs((double)Sb[at] - x),
                           bnd = c8_bound(c8s, c8l1, k, qrot + (size_t)j * ix->dim_pad, ix->dim_pad);
                    bad_rows += e > bnd;
                    max_rel = fmax(max_rel, e / bnd);
                }
            /* the brute probe is each column's exact top n_probe of Sref, best first, ties
             * to the smaller id: a differing id only at a tie within float rounding */
            for (uint32_t j = 0; j < m; j++) {
                for (uint32_t k = 0; k < K; k++) col[k] = (scored){Sref[(size_t)k * m + j], k};
                qsort(col, K, sizeof *col, by_score);
                for (uint32_t a = 0; a < np; a++) {
                    uint32_t got = cb[j * np + a];
                    float tol = 1e-5f * (1.0f + fabsf(col[a].s));
                    bad_sel += fabsf(qb[j * np + a] - col[a].s) > tol ||
                               (got != (uint32_t)col[a].d &&
                                (got >= K || fabsf(Sref[(size_t)got * m + j] - col[a].s) > tol));
                }
            }
            CHECK_OK(f->score1(be.ctx, 0, docs, n_b, s1b, &err), &err);
            CHECK_OK(f->query_begin(be.ctx, 0, q, m, &err), &err);
            CHECK_OK(f->probe(be.ctx, 0, np, 0, BE_PROBE_GRAPH, cg, qg, &err), &err);
            for (uint32_t j = 0; j < m; j++)
                for (uint32_t a = 0; a < np; a++) {
                    uint32_t id = cg[j * np + a];
                    for (uint32_t t = 0; t < np; t++)
                        if (cb[j * np + t] == id) {
                            found++;
                            if (fabsf(qg[j * np + a] - qb[j * np + t]) >
                                1e-4f * (1.0f + fabsf(qb[j * np + t])))
                                bad_qc++;
                            break;
                        }
                }
            total += (uint64_t)m * np;
            CHECK_OK(f->refine(be.ctx, 0, NR, (be_floor){BE_IMPUTE_PROBE_FLOOR, 1.0f}, NULL, dg, NULL, &n_g, NULL,
                               &err), &err);
            /* score the brute probe's documents: rows refinement did not ask for */
            CHECK_OK(f->score1(be.ctx, 0, docs, n_b, s1g, &err), &err);
            const float *S = f->host_centroid_scores(be.ctx, 0);
            for (int pass = 0; pass < 2; pass++) {
                const uint32_t *ds = pass ? dg : docs;
                for (uint32_t c = 0; c < (pass ? n_g : n_b); c++) {
                    for (int64_t t = s0->doc_off[ds[c]]; t < s0->doc_off[ds[c] + 1]; t++) {
                        size_t row = (size_t)s0->tok_cid[t] * m;
                        bad_lazy += memcmp(S + row, Sb + row, m * sizeof *S) != 0;
                    }
                    if (!pass && memcmp(&s1g[c], &s1b[c], sizeof *s1g) != 0) bad_s1++;
                }
            }
        }
        double rec = (double)found / (double)total;
        printf("graph probe (K=%u, n_probe %u): probe recall %.4f over %llu (token, centroid)\n",
               K, np, rec, (unsigned long long)total);
        CHECKF(bad_sel == 0, "brute probe: %d of its centroids or scores are not the exact "
               "top %u of the centroid scores", bad_sel, np);
        CHECKF(rec >= 0.99, "graph probe recall %.4f at n_probe %u (want >= 0.99)", rec, np);
        CHECKF(bad_qc == 0, "graph probe: %d centroid scores differ from brute force", bad_qc);
        printf("8-bit centroid rows (n_probe %u): largest error %.3f of its bound\n", np, max_rel);
        CHECKF(bad_rows == 0, "centroid scores: %d values differ from the float ones by more "
               "than the 8-bit rows' bound", bad_rows);
        /* a bound that no error comes near would not catch a wrong scale or offset */
        CHECKF(max_rel > 0.05, "8-bit centroid rows: largest error only %.4f of the bound", max_rel);
        CHECKF(bad_lazy == 0, "lazy centroid rows: %d differ from the brute probe's", bad_lazy);
        CHECKF(bad_s1 == 0, "1-bit scores after a graph probe: %d differ", bad_s1);
    }
    backend_free(&be);
    cm_free(col);
    cm_free(cb);
    cm_free(cg);
    cm_free(qb);
    cm_free(qg);
    cm_free(Sb);
    cm_free(Sref);
    cm_free(qrot);
    cm_free(c8);
    cm_free(c8s);
    cm_free(c8sum);
    cm_free(c8l1);
}

/* With one list length for both, graph_search_seeded from the graph's own entry points
 * (scores computed) is graph_search; from seeds given with their scores it finds the
 * same top n_probe as from the entry points on at least 0.99 of them (the seeds only
 * move the start). By default a seeded walk keeps a shorter list (test_graph_probe
 * checks its recall). */
static void test_seeded_walk(const bench *b)
{
    const ix_index *ix = &b->ix;
    graph_searcher *gs;
    chimera_error err;
    graph_search_params gp = {.itopk = 64};
    CHECK_OK(graph_searcher_new(&ix->g, ix->centroids, ix->dim, &gp, 8, 1, &gs, &err), &err);
    uint32_t a[8], c[8], seeds[4];
    float ia[8], ic[8], sip[4];
    int diff = 0, n = 0, same = 0;
    for (int64_t i = 0; i < b->q.n; i++) {
        uint32_t m;
        const float *q = query(&b->q, i, &m);
        for (uint32_t j = 0; j < m; j++, n++) {
            const float *qj = q + (size_t)j * ix->dim;
            graph_search(gs, 0, qj, 8, a, ia);
            graph_search_seeded(gs, 0, qj, 8, ix->g.entry, NULL, ix->g.n_entry, c, ic);
            diff += memcmp(a, c, sizeof a) != 0 || memcmp(ia, ic, sizeof ia) != 0;
            for (int e = 0; e < 4; e++) { /* seeds: an arbitrary stride of centroids */
                seeds[e] = (uint32_t)((i * 131 + j * 17 + (uint32_t)e * 509) % ix->n_clusters);
                sip[e] = graph_dot_scalar(qj, ix->centroids + (size_t)seeds[e] * ix->dim, ix->dim);
            }
            graph_search_seeded(gs, 0, qj, 8, seeds, sip, 4, c, ic);
            for (int x = 0; x < 8; x++)
                for (int y = 0; y < 8; y++)
                    if (c[x] == a[y]) {
                        same++;
                        break;
                    }
        }
    }
    graph_searcher_free(gs);
    CHECKF(diff == 0, "seeded walk from the entry points: %d of %d searches differ", diff, n);
    CHECKF(same >= 0.99 * 8 * n, "seeded walk: %d of %d results as from the entry points", same,
           8 * n);
}

/* probe=auto chooses per query, by the depth of the refine that follows, not once by
 * the engine's deepest: on an engine sized for every document, a shallow query walks the
 * graph (the same centroids as BE_PROBE_GRAPH, and scoring then computes rows of S one
 * by one) and a deep one, or one of unknown depth, probes by brute force (S in full, no
 * rows counted). Below the centroid threshold every depth probes by brute force. Walked
 * probes are counted (probes_walked), the others not. */
static void test_probe_auto_depth(const bench *b)
{
    be_segment seg;
    be_resident r;
    resident_of(&b->ix, &seg, &r);
    enum { NP = 8, NQ = 4 };
    uint32_t nd = (uint32_t)b->ix.n_docs, doc0 = 0;
    static uint32_t got[64 * NP], ref[64 * NP];
    float sc;
    for (int run = 0; run < 4; run++) {
        /* low: the threshold at one centroid; else the backend's own, above this K; in
         * throughput mode and in latency mode (the walks spread over a pool) */
        int low = run < 2, threads = run % 2 ? 2 : 1;
        be_config cfg = {.n_workers = 1, .n_threads = threads, .max_m = 64, .max_probe = NP,
                         .max_refine = nd, .graph_auto_k = low ? 1 : 0};
        cm_backend be;
        chimera_error err;
        CHECK_OK(backend_new("cpu", &be, &err), &err);
        CHECK_OK(be.iface->upload(be.ctx, &r, &cfg, &err), &err);
        const struct cm_backend_i *f = be.iface;
        int bad_ids = 0, bad_rows = 0;
        uint32_t depths[3] = {1, nd, 0};
        for (int i = 0; i < NQ; i++)
            for (int d = 0; d < 3; d++) {
                uint32_t m;
                const float *q = query(&b->q, i, &m);
                int walks = low && d == 0;
                CHECK_OK(f->query_begin(be.ctx, 0, q, m, &err), &err);
                uint64_t rows0 = f->rows_computed(be.ctx, 0), w0 = f->probes_walked(be.ctx, 0);
                CHECK_OK(f->probe(be.ctx, 0, NP, depths[d], BE_PROBE_AUTO, got, NULL, &err), &err);
                uint64_t rows1 = f->rows_computed(be.ctx, 0);
                bad_rows += f->probes_walked(be.ctx, 0) - w0 != (walks ? (uint64_t)m * NP : 0);
                CHECK_OK(f->score1(be.ctx, 0, &doc0, 1, &sc, &err), &err);
                /* a walk's rows come with scoring, none at the probe */
                bad_rows += (f->rows_computed(be.ctx, 0) > rows1) != walks;
                bad_rows += rows1 != rows0;
                CHECK_OK(f->query_begin(be.ctx, 0, q, m, &err), &err);
                CHECK_OK(f->probe(be.ctx, 0, NP, 0, walks ? BE_PROBE_GRAPH : BE_PROBE_BRUTE, ref,
                                  NULL, &err), &err);
                bad_ids += memcmp(got, ref, (size_t)m * NP * sizeof *got) != 0;
            }
        CHECKF(bad_ids == 0 && bad_rows == 0,
               "probe=auto by depth (threshold %s, K %u, %d threads): %d of %d probes differ "
               "from the mode expected, %d counts of rows or walked probes otherwise",
               low ? "1" : "default", b->ix.n_clusters, threads, bad_ids, 3 * NQ, bad_rows);
        backend_free(&be);
    }
}

/* End to end, graph against brute probing: per query the top 10 ids overlap by at least
 * 0.95 on average, in throughput and in latency mode (the walk spread over the pool),
 * and the two modes of the graph path return the same ids. */
static void test_graph_end_to_end(const bench *b)
{
    sp_params p = {.k = 10, .n_probe = 8, .k_refine = 160, .k_fullbit = 40, .chunks = 4,
                   .impute = BE_IMPUTE_PROBE_FLOOR, .probe = BE_PROBE_BRUTE};
    size_t n = (size_t)b->q.n * p.k;
    int64_t *ib = cm_malloc(n * sizeof *ib), *ig = cm_malloc(n * sizeof *ig),
            *il = cm_malloc(n * sizeof *il);
    float *sb = cm_malloc(n * sizeof *sb), *sg = cm_malloc(n * sizeof *sg),
          *sl = cm_malloc(n * sizeof *sl);
    sp_stats stb = {0}, stg = {0};
    CHECK_OK(run_all(&b->ix, &b->q, &p, 1, ib, sb, &stb), NULL);
    p.probe = BE_PROBE_GRAPH;
    CHECK_OK(run_all(&b->ix, &b->q, &p, 1, ig, sg, &stg), NULL);
    /* rows of S computed one by one: none with S in full (brute); after a graph probe
     * those of the refined documents' tokens, each at most once a query, and here (160
     * refined documents hold more tokens than K) a switch to the full S, counted K */
    /* every probe walked with the graph, none by brute force, each round counted */
    CHECKF(stb.n_walked == 0 && stg.n_walked == stg.n_probed &&
               stg.n_probed >= (uint64_t)b->q.n * p.n_probe,
           "walked probes: brute %llu, graph %llu of %llu", (unsigned long long)stb.n_walked,
           (unsigned long long)stg.n_walked, (unsigned long long)stg.n_probed);
    CHECKF(stb.n_rows == 0 && stg.n_rows >= (uint64_t)b->q.n * b->ix.n_clusters &&
           stg.n_rows <= 2 * (uint64_t)b->q.n * b->ix.n_clusters,
           "centroid rows computed one by one: brute %llu, graph %llu (%lld queries, K %u)",
           (unsigned long long)stb.n_rows, (unsigned long long)stg.n_rows, (long long)b->q.n,
           b->ix.n_clusters);
    CHECK_OK(run_all(&b->ix, &b->q, &p, 2, il, sl, NULL), NULL);
    double sum = 0;
    int diff_lat = 0;
    for (int64_t i = 0; i < b->q.n; i++) {
        int hit = 0;
        for (uint32_t r = 0; r < p.k; r++) {
            for (uint32_t t = 0; t < p.k; t++)
                if (ig[i * p.k + r] == ib[i * p.k + t]) {
                    hit++;
                    break;
                }
            if (il[i * p.k + r] != ig[i * p.k + r] &&
                fabsf(sl[i * p.k + r] - sg[i * p.k + r]) > 1e-4f * (1.0f + fabsf(sg[i * p.k + r])))
                diff_lat++;
        }
        sum += (double)hit / p.k;
    }
    double ov = sum / (double)b->q.n;
    printf("graph vs brute probing end to end (K=%u): top-10 overlap %.3f; latency mode: %d "
           "results differ\n", b->ix.n_clusters, ov, diff_lat);
    CHECKF(ov >= 0.95, "graph probing: top-10 overlap with brute %.3f (want >= 0.95)", ov);
    CHECKF(diff_lat == 0, "graph probing: %d results differ in latency mode", diff_lat);
    { /* few enough documents that S stays lazy: the backend's rows are counted */
        sp_params few = p;
        few.k_refine = few.k_fullbit = 12;
        sp_stats stf = {0};
        CHECK_OK(run_all(&b->ix, &b->q, &few, 1, ig, sg, &stf), NULL);
        CHECKF(stf.n_rows >= (uint64_t)b->q.n && stf.n_rows <= (uint64_t)b->q.n * b->ix.n_clusters,
               "graph probe, 12 documents: %llu rows for %lld queries",
               (unsigned long long)stf.n_rows, (long long)b->q.n);
    }
    cm_free(ib);
    cm_free(ig);
    cm_free(il);
    cm_free(sb);
    cm_free(sg);
    cm_free(sl);
}

/* The default imputation (the n_probe-th centroid score as the floor, each cell counted
 * as max(estimate, floor), docs/algorithms.md §3.1) must not recall worse than a zero floor:
 * a document seen with low estimates must not rank below one never seen. */
static void test_impute_modes(const bench *b)
{
    const char *names[3] = {"probe-floor", "zero", "min-seen"};
    double r[3];
    for (int mode = 0; mode < 3; mode++) {
        sp_params p = {.k = 10, .n_probe = 2, .k_refine = 30, .k_fullbit = 20, .chunks = 2,
                       .impute = (be_impute)mode, .probe = BE_PROBE_BRUTE};
        r[mode] = recall_of(b, &p, 10, NULL);
        CHECKF(r[mode] >= 0.5, "impute %s: Recall@10 %.3f", names[mode], r[mode]);
    }
    printf("impute modes (%s, n_probe 2, k_refine 30): Recall@10 %s %.3f, %s %.3f, %s %.3f\n",
           b->name, names[0], r[0], names[1], r[1], names[2], r[2]);
    CHECKF(r[BE_IMPUTE_PROBE_FLOOR] >= r[BE_IMPUTE_ZERO] - 0.02,
           "probe-floor imputation %.3f is worse than zero %.3f", r[0], r[1]);
}

/* The probe floor's scale (be_probe_floor, chimera_search_params.impute_scale). The
 * floor itself: qc at scale 1 bit for bit, qc - (1 - s)|qc| otherwise, never above qc,
 * rising with s, non-finite qc kept. In refinement, with every touched document
 * returned: a scale near 0 ranks and scores as the zero floor where the query's floors
 * are positive; each document's partial score rises with the scale, and below 1 some
 * fall (the scale is applied). */
static void test_floor_scale(const bench *b)
{
    const float qcs[] = {0.73f, -0.41f, 0.0f, 3e-8f, -2.5f};
    for (size_t i = 0; i < sizeof qcs / sizeof *qcs; i++) {
        float qc = qcs[i], prev = -INFINITY;
        CHECK(be_probe_floor(qc, 1.0f) == qc);
        for (float sc = 0.1f; sc < 1.0f; sc += 0.1f) {
            float f = be_probe_floor(qc, sc);
            CHECKF(f <= qc && f >= prev && fabsf(f - (qc - (1.0f - sc) * fabsf(qc))) <= 1e-7f,
                   "floor(%g, %g) = %g", (double)qc, (double)sc, (double)f);
            prev = f;
        }
    }
    CHECK(be_probe_floor(-INFINITY, 0.5f) == -INFINITY && isnan(be_probe_floor(NAN, 0.5f)));

    const ix_index *ix = &b->ix;
    be_segment seg;
    be_resident r;
    resident_of(ix, &seg, &r);
    enum { NP = 4 };
    uint32_t nd = (uint32_t)ix->n_docs;
    be_config cfg = {.n_workers = 1, .n_threads = 1, .max_m = 64, .max_probe = NP,
                     .max_refine = nd};
    cm_backend be;
    chimera_error err;
    CHECK_OK(backend_new("cpu", &be, &err), &err);
    CHECK_OK(be.iface->upload(be.ctx, &r, &cfg, &err), &err);
    const struct cm_backend_i *f = be.iface;
    static const float scales[3] = {1e-30f, 0.5f, 1.0f};
    uint32_t *docs = cm_malloc((size_t)nd * sizeof *docs), *dz = cm_malloc((size_t)nd * sizeof *dz);
    float *part = cm_malloc((size_t)nd * sizeof *part), *pz = cm_malloc((size_t)nd * sizeof *pz);
    float *by_doc = cm_malloc((size_t)3 * nd * sizeof *by_doc);
    float *qc = cm_malloc((size_t)64 * NP * sizeof *qc);
    int compared_zero = 0, bad_zero = 0, bad_order = 0, lowered = 0;
    for (int64_t i = 0; i < b->q.n && i < 16; i++) {
        uint32_t m;
        const float *q = query(&b->q, i, &m);
        CHECK_OK(f->query_begin(be.ctx, 0, q, m, &err), &err);
        CHECK_OK(f->probe(be.ctx, 0, NP, 0, BE_PROBE_BRUTE, NULL, qc, &err), &err);
        int positive = 1;
        for (uint32_t j = 0; j < m; j++) positive &= qc[(size_t)j * NP + NP - 1] > 0.0f;
        for (size_t t = 0; t < (size_t)3 * nd; t++) by_doc[t] = NAN;
        uint32_t n_s[3], n_z;
        for (int si = 0; si < 3; si++) {
            CHECK_OK(f->refine(be.ctx, 0, nd, (be_floor){BE_IMPUTE_PROBE_FLOOR, scales[si]}, NULL,
                               docs, part, &n_s[si], NULL, &err), &err);
            for (uint32_t c = 0; c < n_s[si]; c++) by_doc[(size_t)si * nd + docs[c]] = part[c];
            if (si == 0 && positive) {
                CHECK_OK(f->refine(be.ctx, 0, nd, (be_floor){BE_IMPUTE_ZERO, 1.0f}, NULL, dz, pz,
                                   &n_z, NULL, &err), &err);
                compared_zero++;
                if (n_z != n_s[0]) bad_zero++;
                for (uint32_t c = 0; c < n_z && n_z == n_s[0]; c++)
                    if (dz[c] != docs[c] || fabsf(pz[c] - part[c]) > 1e-5f * (1.0f + fabsf(pz[c])))
                        bad_zero++;
            }
        }
        CHECK(n_s[0] == n_s[1] && n_s[1] == n_s[2]); /* every touched document, each time */
        for (uint32_t d = 0; d < nd; d++) {
            float a = by_doc[d], h = by_doc[nd + d], o = by_doc[(size_t)2 * nd + d];
            if (isnan(a) != isnan(o) || isnan(h) != isnan(o)) bad_order++;
            if (isnan(o)) continue;
            float tol = 1e-5f * (1.0f + fabsf(o));
            if (a > h + tol || h > o + tol) bad_order++;
            lowered += h < o - tol;
        }
    }
    printf("floor scale (%s, n_probe %d): %d queries compared with the zero floor, %d "
           "documents scored lower at scale 0.5 than at 1\n", b->name, NP, compared_zero, lowered);
    CHECKF(compared_zero > 0 && bad_zero == 0, "scale ~0 against the zero floor: %d of %d differ",
           bad_zero, compared_zero);
    CHECKF(bad_order == 0, "%d documents whose partial score does not rise with the scale",
           bad_order);
    CHECK(lowered > 0);
    cm_free(docs);
    cm_free(dz);
    cm_free(part);
    cm_free(pz);
    cm_free(by_doc);
    cm_free(qc);
    backend_free(&be);
}

/* Refinement against a dense reference: each query token's probed lists estimated with
 * the same list kernel, max-reduced per (document, token) in an n_docs x m table and
 * summed as max(M, floor), for each floor (the probe floor, zero, the least estimate
 * seen). With k_refine = n_docs every touched document comes back
 * once with that partial score, best first, whatever order the backend reduces in and
 * however its tables grow: the fixture has thousands of documents, and with every
 * cluster probed a 64-token query sends millions of estimates into them. */
static void test_refine_reference(const bench *b)
{
    const ix_index *ix = &b->ix;
    const ix_segment *s0 = &ix->segs[0];
    be_segment seg;
    be_resident r;
    resident_of(ix, &seg, &r);
    enum { MM = 64 };
    uint32_t nd = (uint32_t)ix->n_docs, K = ix->n_clusters, dim = ix->dim;
    uint32_t cb = qm_code1_bytes(ix->dim_pad);
    be_config cfg = {.n_workers = 1, .n_threads = 1, .max_m = MM, .max_probe = K,
                     .max_refine = nd};
    cm_backend be;
    chimera_error err;
    CHECK_OK(backend_new("cpu", &be, &err), &err);
    CHECK_OK(be.iface->upload(be.ctx, &r, &cfg, &err), &err);
    const struct cm_backend_i *f = be.iface;
    quant_qset qs;
    CHECK_OK(quant_qset_init(&qs, ix->dim_pad, MM, &err), &err);
    const quant_kernels *kt = quant_kernels_active();
    float *q64 = cm_malloc((size_t)MM * dim * sizeof *q64);
    uint32_t *cids = cm_malloc((size_t)MM * K * sizeof *cids);
    float *qc = cm_malloc((size_t)MM * K * sizeof *qc);
    float *ref = cm_malloc((size_t)nd * MM * sizeof *ref);
    float *want = cm_malloc((size_t)nd * sizeof *want);
    float *est = cm_malloc((size_t)s0->n_tokens * sizeof *est);
    float *part = cm_malloc((size_t)nd * sizeof *part);
    uint32_t *docs = cm_malloc((size_t)nd * sizeof *docs);
    uint64_t most = 0;
    int bad_n = 0, bad_doc = 0, bad_score = 0, bad_order = 0, cases = 0;
    for (int qi = 0; qi < 4; qi++) {
        uint32_t m;
        const float *q;
        if (qi < 3) {
            q = query(&b->q, qi, &m);
        } else { /* 64 tokens: the queries' tokens one after another */
            m = MM;
            for (uint32_t t = 0, i = 0; t < MM; i++) {
                uint32_t mi;
                const float *qq = query(&b->q, i % b->q.n, &mi);
                for (uint32_t a = 0; a < mi && t < MM; a++, t++)
                    memcpy(q64 + (size_t)t * dim, qq + (size_t)a * dim, dim * sizeof *q64);
            }
            q = q64;
        }
        quant_qset_set(&qs, &ix->rot, q, m);
        uint32_t nps[2] = {4, K};
        const be_floor floors[3] = {{BE_IMPUTE_PROBE_FLOOR, 0.5f}, {BE_IMPUTE_ZERO, 1.0f},
                                    {BE_IMPUTE_MIN_SEEN, 1.0f}};
        for (int c2 = 0; c2 < 6; c2++) {
            int pi = c2 / 3, fi = c2 % 3;
            uint32_t np = nps[pi], n_out;
            CHECK_OK(f->query_begin(be.ctx, 0, q, m, &err), &err);
            CHECK_OK(f->probe(be.ctx, 0, np, 0, BE_PROBE_BRUTE, cids, qc, &err), &err);
            CHECK_OK(f->refine(be.ctx, 0, nd, floors[fi], NULL, docs, part, &n_out, NULL, &err),
                     &err);
            for (size_t t = 0; t < (size_t)nd * m; t++) ref[t] = -INFINITY;
            uint64_t gathered = 0;
            float fl[MM];
            for (uint32_t j = 0; j < m; j++) {
                float min_seen = INFINITY;
                for (uint32_t p = 0; p < np; p++) {
                    uint32_t cid = cids[(size_t)j * np + p];
                    int64_t p0, n;
                    if (cid >= K) continue;
                    ix_segment_list(s0, cid, &p0, &n);
                    quant_est1_list(kt, &qs, j, s0->c1_codes + (size_t)p0 * cb, s0->c1_fact + p0,
                                    (size_t)n, qc[(size_t)j * np + p], est);
                    gathered += (uint64_t)n;
                    for (int64_t t = 0; t < n; t++) {
                        float *cell = &ref[(size_t)s0->post_doc[p0 + t] * m + j];
                        if (est[t] > *cell) *cell = est[t];
                        if (est[t] < min_seen) min_seen = est[t];
                    }
                }
                fl[j] = fi == 0   ? be_probe_floor(qc[(size_t)j * np + np - 1], 0.5f)
                        : fi == 1 ? 0.0f
                                  : (min_seen < INFINITY ? min_seen : 0.0f);
            }
            most = gathered > most ? gathered : most;
            uint32_t n_want = 0;
            for (uint32_t d = 0; d < nd; d++) {
                want[d] = NAN;
                int seen = 0;
                for (uint32_t j = 0; j < m; j++) seen |= ref[(size_t)d * m + j] > -INFINITY;
                if (!seen || ((ix->deleted[d >> 3] >> (d & 7)) & 1)) continue;
                float sum = 0.0f;
                for (uint32_t j = 0; j < m; j++)
                    sum += ref[(size_t)d * m + j] > fl[j] ? ref[(size_t)d * m + j] : fl[j];
                want[d] = sum;
                n_want++;
            }
            cases++;
            bad_n += n_out != n_want;
            for (uint32_t c = 0; c < n_out; c++) {
                uint32_t d = docs[c];
                if (d >= nd || isnan(want[d])) {
                    bad_doc++;
                    continue;
                }
                bad_score += fabsf(part[c] - want[d]) > 1e-5f * (1.0f + fabsf(want[d]));
                want[d] = NAN; /* each document once */
                if (c > 0 && (part[c] > part[c - 1] || (part[c] == part[c - 1] && d < docs[c - 1])))
                    bad_order++;
            }
        }
    }
    printf("refinement against a dense reference (%s, %u documents): %d cases, up to %llu "
           "estimates gathered\n", b->name, nd, cases, (unsigned long long)most);
    CHECKF(bad_n == 0, "refinement: %d of %d cases return another number of documents", bad_n,
           cases);
    CHECKF(bad_doc == 0, "refinement: %d documents returned twice or never touched", bad_doc);
    CHECKF(bad_score == 0, "refinement: %d partial scores differ from the reference", bad_score);
    CHECKF(bad_order == 0, "refinement: %d out of order", bad_order);
    /* the fixture must reach what the test is about */
    CHECKF(nd > 8192 && most > 2000000, "refinement fixture: %u documents, %llu estimates: "
           "too few", nd, (unsigned long long)most);
    quant_qset_free(&qs);
    cm_free(q64);
    cm_free(cids);
    cm_free(qc);
    cm_free(ref);
    cm_free(want);
    cm_free(est);
    cm_free(part);
    cm_free(docs);
    backend_free(&be);
}

/* ---- deletion ---------------------------------------------------------------------- */

static void test_deleted(const bench *b)
{
    const ix_index *ix = &b->ix;
    int64_t nq = b->q.n, nd = ix->n_docs;
    uint32_t k = 10;
    size_t n = (size_t)nq * k;
    int64_t *ids = cm_malloc(n * sizeof *ids);
    float *sc = cm_malloc(n * sizeof *sc);
    uint8_t *del = cm_calloc((size_t)(nd + 7) / 8, 1);
    sp_params p = moderate;
    run_all(ix, &b->q, &p, 1, ids, sc, NULL);
    /* delete every query's top 3 and every 7th document */
    int64_t n_del = 0;
    for (int64_t i = 0; i < (int64_t)n; i++)
        if (i % k < 3 && ids[i] >= 0) del[ids[i] >> 3] |= (uint8_t)(1u << (ids[i] & 7));
    for (int64_t d = 0; d < nd; d += 7) del[d >> 3] |= (uint8_t)(1u << (d & 7));
    for (int64_t d = 0; d < nd; d++) n_del += (del[d >> 3] >> (d & 7)) & 1;
    ix_index v = *ix;
    v.deleted = del;
    const sp_params variants[3] = {
        moderate,
        {.k = 10, .n_probe = 4, .k_refine = 20, .k_fullbit = 10, .chunks = 3},
        {.k = 10, .n_probe = ix->n_clusters, .k_refine = (uint32_t)nd, .k_fullbit = (uint32_t)nd,
         .chunks = 1, .probe = BE_PROBE_BRUTE},
    };
    for (int vi = 0; vi < 3; vi++) {
        run_all(&v, &b->q, &variants[vi], 1, ids, sc, NULL);
        int64_t returned = 0, short_lists = 0;
        for (int64_t i = 0; i < (int64_t)n; i++) {
            if (ids[i] < 0) {
                short_lists++;
                continue;
            }
            returned += (del[ids[i] >> 3] >> (ids[i] & 7)) & 1;
        }
        CHECKF(returned == 0, "variant %d: %lld deleted documents returned", vi, (long long)returned);
        CHECKF(short_lists == 0, "variant %d: %lld result slots empty", vi, (long long)short_lists);
    }
    /* the brute-force reference scores deleted documents -inf */
    float *all = cm_malloc((size_t)nd * sizeof *all);
    uint32_t m;
    const float *qt = query(&b->q, 0, &m);
    chimera_error err;
    CHECK_OK(sp_fullbit_all(&v, qt, m, all, &err), &err);
    int64_t wrong = 0;
    for (int64_t d = 0; d < nd; d++)
        wrong += (((del[d >> 3] >> (d & 7)) & 1) != 0) != (all[d] == -INFINITY);
    CHECK(wrong == 0);
    printf("deletion: %lld of %lld documents deleted, none returned\n", (long long)n_del,
           (long long)nd);
    cm_free(all);
    cm_free(del);
    cm_free(ids);
    cm_free(sc);
}

/* ---- public API -------------------------------------------------------------------- */

/* Results b against a (k per query, n in all): the same ids, except that two documents
 * whose scores are within the tolerance may swap, and scores within 1e-4 relative.
 * @return how many differ. */
static int results_differ(const int64_t *ia, const float *sa, const int64_t *ib,
                          const float *sb, size_t n, size_t k)
{
    int bad = 0;
    for (size_t r = 0; r < n; r++) {
        if (fabsf(sa[r] - sb[r]) > 1e-4f * (1.0f + fabsf(sb[r]))) bad++;
        else if (ia[r] != ib[r]) {
            /* a swap: the other document must sit next to it with a tied score */
            size_t r2 = (r % k < k - 1 && ia[r] == ib[r + 1]) ? r + 1 : (r % k > 0 ? r - 1 : r);
            if (ia[r] != ib[r2] || fabsf(sb[r2] - sb[r]) > 1e-4f * (1.0f + fabsf(sb[r]))) bad++;
        }
    }
    return bad;
}

/* Throughput mode (a worker a thread, blocks of queries) gives the results of one query
 * at a time (latency mode: the centroid scores, the walks and document scoring split over
 * a pool), on queries of mixed lengths (1 .. query_len tokens): the same ids, except that
 * two documents whose scores are within the tolerance may swap, and scores within 1e-4
 * relative. Latency mode with two threads rescores on a host thread of its own, chunk
 * by chunk as the worker scores them, where one thread a worker rescores each chunk
 * itself: the same steps, so the same results. */
static void test_batched(const bench *b, chimera_index *ix)
{
    int64_t nq = b->s.n_queries;
    uint32_t d = b->s.dim, ql = b->s.query_len;
    int64_t *lens = cm_malloc((size_t)nq * sizeof *lens), total = 0;
    for (int64_t i = 0; i < nq; i++) lens[i] = 1 + (i * 7) % ql;
    float *tok = cm_malloc((size_t)nq * ql * d * sizeof(float));
    for (int64_t i = 0; i < nq; i++) {
        memcpy(tok + (size_t)total * d, b->s.queries + (size_t)i * ql * d,
               (size_t)lens[i] * d * sizeof(float));
        total += lens[i];
    }
    chimera_queries *q;
    chimera_error err;
    CHECK_OK(chimera_queries_new(tok, nq, d, lens, 0, &q, &err), &err);
    size_t n = (size_t)nq * 10;
    int64_t *ia = cm_malloc(n * sizeof *ia), *ib = cm_malloc(n * sizeof *ib);
    float *sa = cm_malloc(n * sizeof *sa), *sb = cm_malloc(n * sizeof *sb);
    chimera_search_opts through = {.n_threads = 2}, one = {.n_threads = 1, .latency_mode = 1},
                        two = {.n_threads = 2, .latency_mode = 1};
    int bad = 0, bad_host = 0;
    if (q) {
        CHECK_OK(chimera_index_search(ix, q, 10, NULL, &through, ia, sa, NULL, &err), &err);
        CHECK_OK(chimera_index_search(ix, q, 10, NULL, &one, ib, sb, NULL, &err), &err);
        bad = results_differ(ia, sa, ib, sb, n, 10);
        /* the two-thread latency mode against the one-thread one, chunks as the library's
         * default and many (each chunk rescored before the next is scored) */
        for (uint32_t chunks = 4; chunks <= 16; chunks *= 4) {
            chimera_search_params p = {0};
            chimera_search_params_default(10, &p);
            p.chunks = chunks;
            chimera_search_profile pa = {0}, pb = {0};
            CHECK_OK(chimera_index_search(ix, q, 10, &p, &one, ia, sa, &pa, &err), &err);
            CHECK_OK(chimera_index_search(ix, q, 10, &p, &two, ib, sb, &pb, &err), &err);
            bad_host += results_differ(ia, sa, ib, sb, n, 10);
            /* the same rescoring steps: as many documents rescored (each chunk's top
             * share of k_fullbit, at many chunks a few more than k_fullbit a query) */
            CHECKF(pa.n_fullbit == pb.n_fullbit,
                   "latency mode, %u chunks: %llu documents rescored inline, %llu on a host "
                   "thread", chunks, (unsigned long long)pa.n_fullbit,
                   (unsigned long long)pb.n_fullbit);
        }
    }
    CHECKF(bad == 0, "batched search: %d of %zu results differ from one query at a time", bad, n);
    CHECKF(bad_host == 0, "latency mode: %d results differ between rescoring on a host thread "
           "and on the worker's", bad_host);
    printf("batched vs one at a time: %lld queries of 1..%u tokens, %d of %zu results differ; "
           "host thread vs inline: %d differ\n", (long long)nq, ql, bad, n, bad_host);
    chimera_queries_free(q);
    cm_free(lens);
    cm_free(tok);
    cm_free(ia);
    cm_free(ib);
    cm_free(sa);
    cm_free(sb);
}

/* A stored profile is file content: values no uint32_t/int holds (1e300, -5, 3.7, an
 * impute mode of 7) or a missing member make chimera_index_profile_get fail with
 * CHIMERA_ERR_CORRUPT naming the member, where it used to convert them (undefined
 * behaviour for the out-of-range ones) and search with whatever came out. */

/* ix_store_update_meta edit: replace the whole meta object with `user` (a cJSON object). */
static chimera_status replace_meta(cJSON *meta, const store *current, void *user, chimera_error *err)
{
    (void)current;
    (void)err;
    cJSON *child;
    while ((child = meta->child) != NULL) cJSON_Delete(cJSON_DetachItemViaPointer(meta, child));
    for (const cJSON *c = ((const cJSON *)user)->child; c; c = c->next)
        cJSON_AddItemToObject(meta, c->string, cJSON_Duplicate(c, 1));
    return CHIMERA_OK;
}

static void test_profile_values(const char *dir)
{
    chimera_error err;
    chimera_tune_result res;
    memset(&res, 0, sizeof res);
    res.best = (chimera_search_params){.n_probe = 8, .k_refine = 100, .k_fullbit = 20,
                                       .chunks = 2, .impute = 1, .probe = 2,
                                       .k_interaction = 40};
    res.reached = 1;
    res.recall = 0.95;
    CHECK_OK(chimera_index_profile_save(dir, 10, 0.9, &res, &err), &err);
    chimera_index *h = NULL;
    chimera_search_params p;
    CHECK_OK(chimera_index_open(dir, NULL, &h, &err), &err);
    if (h) {
        CHECK_OK(chimera_index_profile_get(h, 10, 0.9, &p, &err), &err);
        CHECK(p.n_probe == 8 && p.k_refine == 100 && p.k_fullbit == 20 && p.chunks == 2 &&
              p.impute == 1 && p.probe == 2 && p.k_interaction == 40);
        chimera_index_close(h);
    }
    /* a profile without k_interaction (tuned without it, or by an older library) says
     * off explicitly (k_interaction = k_refine), so no calibrated value replaces it */
    {
        chimera_tune_result r2 = res;
        r2.best.k_interaction = 0;
        CHECK_OK(chimera_index_profile_save(dir, 10, 0.9, &r2, &err), &err);
        h = NULL;
        CHECK_OK(chimera_index_open(dir, NULL, &h, &err), &err);
        if (h) {
            CHECK_OK(chimera_index_profile_get(h, 10, 0.9, &p, &err), &err);
            CHECKF(p.k_interaction == p.k_refine, "profile without k_interaction: %u (k_refine %u)",
                   p.k_interaction, p.k_refine);
            chimera_index_close(h);
        }
        CHECK_OK(chimera_index_profile_save(dir, 10, 0.9, &res, &err), &err);
    }
    struct {
        const char *key;
        double value; /* NAN: remove the member */
    } cases[] = {{"n_probe", 1e300}, {"k_refine", -5},  {"chunks", 3.7},
                 {"impute", 7},      {"k_fullbit", 4294967296.0}, {"probe", NAN},
                 {"k_interaction", 0}, {"k_interaction", 1e9}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        store *st;
        CHECK_OK(ix_store_info(dir, &st, &err), &err);
        cJSON *meta = cJSON_Duplicate(ix_store_meta(st), 1);
        ix_store_close(st);
        cJSON *prof = cJSON_GetArrayItem(cJSON_GetObjectItem(meta, "profiles"), 0);
        if (isnan(cases[i].value)) cJSON_DeleteItemFromObject(prof, cases[i].key);
        else cJSON_SetNumberValue(cJSON_GetObjectItem(prof, cases[i].key), cases[i].value);
        CHECK_OK(ix_store_update_meta(dir, NULL, replace_meta, meta, &err), &err);
        cJSON_Delete(meta);
        h = NULL;
        CHECK_OK(chimera_index_open(dir, NULL, &h, &err), &err);
        if (!h) continue;
        chimera_status s = chimera_index_profile_get(h, 10, 0.9, &p, &err);
        char want[64];
        snprintf(want, sizeof want, "'%s'", cases[i].key);
        CHECKF(s == CHIMERA_ERR_CORRUPT && strstr(err.msg, want),
               "profile with %s = %g: %s: %s", cases[i].key, cases[i].value,
               chimera_status_str(s), err.msg);
        chimera_index_close(h);
        CHECK_OK(chimera_index_profile_save(dir, 10, 0.9, &res, &err), &err); /* restore */
    }
}

/* Searching with a tuned profile through params.recall (test_profile_values stored one
 * for k = 10 at 0.9: 8 / 100 / 20, chunks 2, impute zero, probe graph, k_interaction
 * 40): unset fields come from it, set ones win, its depths deepen for a filtered query
 * as the index's defaults do (an explicit k_fullbit does not), the search runs what
 * chimera_index_params_resolve says, and a missing profile or a bad target is named. */
static void test_profile_search(const char *dir, const chimera_queries *q, int64_t n_docs)
{
    chimera_error err;
    chimera_index *h = NULL;
    CHECK_OK(chimera_index_open(dir, NULL, &h, &err), &err);
    if (!h) return;
    const int64_t nq = chimera_queries_count(q);
    int64_t *ia = cm_malloc((size_t)nq * 10 * sizeof *ia), *ib = cm_malloc((size_t)nq * 10 * sizeof *ib);
    float *sa = cm_malloc((size_t)nq * 10 * sizeof *sa), *sb = cm_malloc((size_t)nq * 10 * sizeof *sb);
    int64_t *odd = cm_malloc((size_t)(n_docs / 2 + 1) * sizeof *odd);
    int64_t n_odd = 0;
    for (int64_t d = 1; d < n_docs; d += 2) odd[n_odd++] = d;
    chimera_filter *even = NULL; /* every document but the odd ones: not selective */
    CHECK_OK(chimera_filter_new(odd, n_odd, 1, &even, &err), &err);
    if (!ia || !ib || !sa || !sb || !even) goto done;
    chimera_search_params r, in = {.recall = 0.9};
    CHECK_OK(chimera_index_params_resolve(h, 10, &in, 0, &r, &err), &err);
    CHECKF(r.n_probe == 8 && r.k_refine == 100 && r.k_fullbit == 20 && r.chunks == 2 &&
           r.impute == 1 && r.probe == 2 && r.k_interaction == 40 && r.recall == 0.9,
           "profile resolved to %u / %u / %u chunks %u impute %d probe %d k_interaction %u",
           r.n_probe, r.k_refine, r.k_fullbit, r.chunks, (int)r.impute, (int)r.probe,
           r.k_interaction);
    chimera_search_params rf;
    CHECK_OK(chimera_index_params_resolve(h, 10, &in, 1, &rf, &err), &err);
    /* twice k_fullbit, at most the k_interaction documents 1-bit scored */
    CHECKF(rf.k_fullbit == 40 && rf.k_refine == 100 && rf.n_probe == 8,
           "profile, filtered: %u / %u / %u", rf.n_probe, rf.k_refine, rf.k_fullbit);
    /* without the profile's interaction (k_interaction >= k_refine: off) the doubling
     * alone; with a k_interaction of 30, capped by the documents 1-bit scored */
    chimera_search_params off = {.recall = 0.9, .k_interaction = 100}, ci = {.recall = 0.9,
                                                                           .k_interaction = 30};
    CHECK_OK(chimera_index_params_resolve(h, 10, &off, 1, &r, &err), &err);
    CHECKF(r.k_fullbit == 40 && r.k_interaction == 0, "filtered, interaction off: %u (%u)",
           r.k_fullbit, r.k_interaction);
    CHECK_OK(chimera_index_params_resolve(h, 10, &ci, 1, &r, &err), &err);
    CHECKF(r.k_fullbit == 30 && r.k_interaction == 30, "filtered, k_interaction 30: %u (%u)",
           r.k_fullbit, r.k_interaction);
    /* the profile's k_interaction comes only with its k_refine: a caller's own k_refine
     * runs without the profile's interaction */
    chimera_search_params kr = {.recall = 0.9, .k_refine = 400};
    CHECK_OK(chimera_index_params_resolve(h, 10, &kr, 0, &r, &err), &err);
    CHECKF(r.k_refine == 400 && r.k_interaction == 0 && r.k_fullbit == 20,
           "own k_refine over the profile: %u / %u, k_interaction %u", r.k_refine, r.k_fullbit,
           r.k_interaction);
    /* impute and probe: a value set wins, and so does the default value when chosen */
    chimera_search_params im = {.recall = 0.9, .chosen = CHIMERA_CHOSE_IMPUTE};
    CHECK_OK(chimera_index_params_resolve(h, 10, &im, 0, &r, &err), &err);
    CHECKF(r.impute == CHIMERA_IMPUTE_PROBE && r.probe == 2, "impute chosen: %d, probe %d",
           (int)r.impute, (int)r.probe);
    im = (chimera_search_params){.recall = 0.9, .impute = CHIMERA_IMPUTE_MIN,
                                 .chosen = CHIMERA_CHOSE_PROBE};
    CHECK_OK(chimera_index_params_resolve(h, 10, &im, 0, &r, &err), &err);
    CHECKF(r.impute == CHIMERA_IMPUTE_MIN && r.probe == CHIMERA_PROBE_AUTO,
           "impute min, probe chosen: %d, probe %d", (int)r.impute, (int)r.probe);
    chimera_search_params own = {.recall = 0.9, .n_probe = 3, .k_fullbit = 25};
    CHECK_OK(chimera_index_params_resolve(h, 10, &own, 1, &r, &err), &err);
    CHECKF(r.n_probe == 3 && r.k_fullbit == 25 && r.k_refine == 100,
           "flags over the profile, filtered: %u / %u / %u", r.n_probe, r.k_refine, r.k_fullbit);
    /* the search runs the resolved setting, with and without the filter */
    for (int f = 0; f < 2; f++) {
        chimera_search_opts so = {.n_threads = 2, .filter = f ? even : NULL};
        chimera_search_profile pa = {0}, pb = {0};
        CHECK_OK(chimera_index_params_resolve(h, 10, &in, f, &r, &err), &err);
        r.recall = 0;
        CHECK_OK(chimera_index_search(h, q, 10, &in, &so, ia, sa, &pa, &err), &err);
        CHECK_OK(chimera_index_search(h, q, 10, &r, &so, ib, sb, &pb, &err), &err);
        CHECKF(memcmp(ia, ib, (size_t)nq * 10 * sizeof *ia) == 0 &&
               memcmp(sa, sb, (size_t)nq * 10 * sizeof *sa) == 0 && pa.n_fullbit == pb.n_fullbit,
               "filter %d: the profile's search differs from its resolved setting's", f);
        /* every query has far more than 40 allowed candidates: the filtered ones re-score
         * the deeper depth (about k_fullbit a query: a few more where scores tie) */
        uint64_t want = (uint64_t)nq * (f ? 40 : 20);
        CHECKF(pa.n_fullbit >= want && pa.n_fullbit < want + (uint64_t)nq * 5,
               "filter %d: %llu full-bit scored for %lld queries", f,
               (unsigned long long)pa.n_fullbit, (long long)nq);
        for (int64_t i = 0; f && i < nq * 10; i++)
            CHECKF(ia[i] < 0 || ia[i] % 2 == 0, "filtered result %lld", (long long)ia[i]);
    }
    /* no profile qualifies (0.9 < 0.99): named, outputs untouched */
    for (int64_t i = 0; i < nq * 10; i++) ia[i] = 777;
    chimera_search_params hi = {.recall = 0.99};
    chimera_status s = chimera_index_search(h, q, 10, &hi, NULL, ia, sa, NULL, &err);
    CHECKF(s == CHIMERA_ERR_EMPTY && strstr(err.msg, "no tuned profile") &&
           strstr(err.msg, "0.990") && ia[0] == 777 && ia[nq * 10 - 1] == 777,
           "recall 0.99 without a profile: %s: %s", chimera_status_str(s), err.msg);
    s = chimera_index_params_resolve(h, 100, &in, 0, &r, &err); /* none for k = 100 */
    CHECKF(s == CHIMERA_ERR_EMPTY && strstr(err.msg, "k=100"), "k = 100: %s: %s",
           chimera_status_str(s), err.msg);
    const double bad[] = {1.5, -0.1, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        chimera_search_params b = {.recall = bad[i]};
        s = chimera_index_search(h, q, 10, &b, NULL, ia, sa, NULL, &err);
        CHECKF(s == CHIMERA_ERR_INVALID_ARG && strstr(err.msg, "recall"),
               "recall %g: %s: %s", bad[i], chimera_status_str(s), err.msg);
    }
    CHECK(chimera_index_params_resolve(h, 0, NULL, 0, &r, NULL) == CHIMERA_ERR_INVALID_ARG);
    CHECK(chimera_index_params_resolve(NULL, 10, NULL, 0, &r, NULL) == CHIMERA_ERR_INVALID_ARG);
done:
    chimera_filter_free(even);
    cm_free(odd);
    cm_free(ia);
    cm_free(ib);
    cm_free(sa);
    cm_free(sb);
    chimera_index_close(h);
}

static void test_public_api(const bench *b)
{
    chimera_error err;
    chimera_corpus *c;
    CHECK_OK(chimera_corpus_wrap(b->s.tokens, b->s.n_tokens, b->s.dim, b->s.doclens, b->s.n_docs,
                                 NULL, NULL, &c, &err), &err);
    if (!c) return;
    char dir[512];
    test_path(dir, sizeof dir, "api");
    chimera_build_opts bo = {.n_clusters = 128, .seed = 3, .no_sync = 1};
    CHECK_OK(chimera_index_build(c, dir, &bo, NULL, &err), &err);
    chimera_index *ix;
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    chimera_queries *q, *q32;
    CHECK_OK(chimera_queries_new(b->s.queries, b->s.n_queries, b->s.dim, NULL, b->s.query_len, &q,
                                 &err), &err);
    float *tok32 = cm_calloc((size_t)2 * 8 * 32, sizeof(float));
    for (int i = 0; i < 16; i++) tok32[i * 32] = 1.0f;
    CHECK_OK(chimera_queries_new(tok32, 2, 32, NULL, 8, &q32, &err), &err);
    if (!ix || !q || !q32) goto done;
    CHECK_OK(chimera_index_check(ix, &err), &err);
    int64_t nq = chimera_queries_count(q);
    int64_t *ids = cm_malloc((size_t)nq * 10 * sizeof *ids), *truth = cm_malloc((size_t)nq * 10 * sizeof *truth);
    float *sc = cm_malloc((size_t)nq * 10 * sizeof *sc);
    CHECK_OK(chimera_corpus_search(c, q, 10, NULL, truth, sc, &err), &err);
    CHECK_OK(chimera_index_search(ix, q, 10, NULL, NULL, ids, sc, NULL, &err), &err);
    double hit = 0;
    for (int64_t i = 0; i < nq; i++)
        for (int r = 0; r < 10; r++)
            for (int t = 0; t < 10; t++) hit += ids[i * 10 + r] == truth[i * 10 + t];
    double rec = hit / (double)(nq * 10);
    printf("public API: Recall@10 %.3f at default parameters\n", rec);
    CHECKF(rec >= 0.9, "public API: Recall@10 %.3f", rec);
    /* wrong dimension */
    for (int i = 0; i < 20; i++) ids[i] = 12345;
    chimera_status s = chimera_index_search(ix, q32, 10, NULL, NULL, ids, sc, NULL, &err);
    char want[64];
    snprintf(want, sizeof want, "the index %u", b->s.dim);
    CHECKF(s == CHIMERA_ERR_DIM && strstr(err.msg, "dimension 32") && strstr(err.msg, want),
           "wrong dimension: %s: %s", chimera_status_str(s), err.msg);
    CHECK(ids[0] == 12345 && ids[19] == 12345);
    /* k = 0, too many chunks, bad modes */
    s = chimera_index_search(ix, q, 0, NULL, NULL, ids, sc, NULL, &err);
    CHECKF(s == CHIMERA_ERR_INVALID_ARG && err.msg[0], "k = 0: %s",
           chimera_status_str(s));
    chimera_search_params bad = {.chunks = 65};
    s = chimera_index_search(ix, q, 10, &bad, NULL, ids, sc, NULL, NULL);
    CHECKF(s == CHIMERA_ERR_INVALID_ARG, "chunks 65: %s", chimera_status_str(s));
    bad = (chimera_search_params){.impute = 3};
    CHECK(chimera_index_search(ix, q, 10, &bad, NULL, ids, sc, NULL, NULL) == CHIMERA_ERR_INVALID_ARG);
    bad = (chimera_search_params){.probe = -1};
    CHECK(chimera_index_search(ix, q, 10, &bad, NULL, ids, sc, NULL, NULL) == CHIMERA_ERR_INVALID_ARG);
    /* thread counts outside 0..CHIMERA_MAX_THREADS, and a graph degree the graph build
     * cannot take, are refused at the boundary naming the value */
    chimera_search_opts many = {.n_threads = CHIMERA_MAX_THREADS + 1};
    s = chimera_index_search(ix, q, 10, NULL, &many, ids, sc, NULL, &err);
    CHECKF(s == CHIMERA_ERR_INVALID_ARG && strstr(err.msg, "n_threads 1025"),
           "search with 1025 threads: %s: %s", chimera_status_str(s), err.msg);
    many.n_threads = -2;
    CHECK(chimera_index_search(ix, q, 10, NULL, &many, ids, sc, NULL, NULL) == CHIMERA_ERR_INVALID_ARG);
    chimera_exact_opts eo = {.n_threads = 100000};
    s = chimera_corpus_search(c, q, 10, &eo, truth, sc, &err);
    CHECKF(s == CHIMERA_ERR_INVALID_ARG && strstr(err.msg, "n_threads 100000"),
           "exact search with 100000 threads: %s: %s", chimera_status_str(s), err.msg);
    char dir2[512];
    test_path(dir2, sizeof dir2, "api-refused");
    chimera_build_opts bt = {.n_clusters = 16, .n_threads = 5000, .no_sync = 1};
    s = chimera_index_build(c, dir2, &bt, NULL, &err);
    CHECKF(s == CHIMERA_ERR_INVALID_ARG && strstr(err.msg, "n_threads 5000"),
           "build with 5000 threads: %s: %s", chimera_status_str(s), err.msg);
    bt = (chimera_build_opts){.n_clusters = 16, .graph_degree = 128, .no_sync = 1};
    s = chimera_index_build(c, dir2, &bt, NULL, &err);
    CHECKF(s == CHIMERA_ERR_INVALID_ARG && strstr(err.msg, "graph degree 128"),
           "build with degree 128: %s: %s", chimera_status_str(s), err.msg);
    test_profile_values(dir);
    test_profile_search(dir, q, b->s.n_docs);
    /* the handle still works after the errors */
    CHECK_OK(chimera_index_search(ix, q, 10, NULL, NULL, ids, sc, NULL, &err), &err);
    test_batched(b, ix);
    cm_free(ids);
    cm_free(truth);
    cm_free(sc);
done:
    cm_free(tok32);
    chimera_queries_free(q);
    chimera_queries_free(q32);
    chimera_index_close(ix);
    chimera_corpus_close(c);
}

/* The refinement table grows when a query touches more documents than it holds; it must
 * grow for the longest query the engine accepts, not the current one: a short query that
 * grows it, then a long one, must give the same results as the long one alone (ASan
 * catches the overflow a wrong size causes). */
static void test_table_growth(void)
{
    bench b;
    if (!bench_make(&b, "growth", 6000, 32, 8, 16, 64, 4, 9, 4)) {
        bench_free(&b);
        return;
    }
    chimera_error err;
    sp_params p = {.k = 10, .n_probe = 64, .k_refine = 200, .k_fullbit = 50, .chunks = 2,
                   .impute = BE_IMPUTE_PROBE_FLOOR, .probe = BE_PROBE_BRUTE};
    sp_engine *a = NULL, *fresh = NULL;
    CHECK_OK(sp_engine_new(&b.ix, "cpu", 1, 1, &p, 32, &a, &err), &err);
    CHECK_OK(sp_engine_new(&b.ix, "cpu", 1, 1, &p, 32, &fresh, &err), &err);
    if (a && fresh) {
        uint32_t m;
        const float *q0 = query(&b.q, 0, &m), *q1 = query(&b.q, 1, &m);
        int64_t i1[10], i2[10], i3[10];
        float s1[10], s2[10], s3[10];
        sp_stats st = {0};
        /* 3 tokens of query 0 with every cluster probed: > 4096 documents touched */
        CHECK_OK(sp_search(a, 0, q0, 3, &p, i1, s1, &st, &err), &err);
        CHECKF(st.docs_touched > 4096, "only %llu documents touched; the table did not grow",
               (unsigned long long)st.docs_touched);
        CHECK_OK(sp_search(a, 0, q1, m, &p, i2, s2, NULL, &err), &err);
        CHECK_OK(sp_search(fresh, 0, q1, m, &p, i3, s3, NULL, &err), &err);
        CHECK(memcmp(i2, i3, sizeof i2) == 0 && memcmp(s2, s3, sizeof s2) == 0);
    }
    sp_engine_free(a);
    sp_engine_free(fresh);
    bench_free(&b);
}

/* An index may hold 2^32 - 1 tokens, all in one document. The engine's per-document
 * scratch is then (2^32 - 1 + 1) x max_m floats; computed in 32 bits the "+ 1" wrapped
 * to 0 and the engine started with a 1-byte buffer that the first re-scoring of that
 * document would overrun. An index whose doc_off claims such a document (the rest is a
 * real index; nothing is searched) must be refused for want of memory, not accepted.
 * Where the machine hands out 4 TiB on request (overcommit), there is nothing to see. */
static void test_long_document(const bench *b)
{
    void *probe = cm_malloc((size_t)1 << 42);
    if (probe) {
        cm_free(probe);
        printf("long document: skipped (this machine grants a 4 TiB allocation)\n");
        return;
    }
    ix_index ix = b->ix;
    ix_segment seg = b->ix.segs[0]; /* a private copy: the bench's index stays as it is */
    int64_t off[2] = {0, (int64_t)UINT32_MAX};
    ix.n_docs = 1;
    ix.n_segs = 1;
    ix.segs = &seg;
    seg.n_docs = 1;
    seg.doc_off = off;
    ix.max_doc_len = (int64_t)UINT32_MAX;
    sp_params p = {.k = 10, .n_probe = 4, .k_refine = 20, .k_fullbit = 10, .chunks = 1};
    sp_engine *e = NULL;
    chimera_error err = {0};
    /* no scratch grows with the longest document (the host computes centroid scores by
     * centroid, not by document token), so where a 4 TiB allocation fails the engine is
     * made all the same, on either path */
    for (int v = 0; v < 2; v++) {
        chimera_status s = sp_engine_new(&ix, v ? "cpu-as-device" : "cpu", 1, 1, &p,
                                         QUANT_QTOK_MAX, &e, &err);
        CHECKF(s == CHIMERA_OK && e, "a 2^32-1 token document: engine gave %s (%s)",
               chimera_status_str(s), err.msg);
        sp_engine_free(e);
        e = NULL;
    }
}

/* Brute-force probing keeps centroids whose score beats -inf. Centroids of huge
 * magnitude (finite, so an index may hold them) overflow every score to -inf; the
 * probe then found nothing, and it used to hand out its never-written heap slots as
 * centroid ids and scores (an uninitialised read valgrind reports). Every slot must be
 * a real centroid or the padding UINT32_MAX / -inf, and refinement must find nothing. */
static void test_probe_unfilled(const bench *b)
{
    const ix_index *ix = &b->ix;
    size_t nc = (size_t)ix->n_clusters * ix->dim;
    float *cent = cm_malloc(nc * sizeof *cent), *q = cm_malloc((size_t)4 * ix->dim * sizeof *q);
    for (size_t i = 0; i < nc; i++) cent[i] = -3e38f;
    for (size_t i = 0; i < (size_t)4 * ix->dim; i++) q[i] = 1.0f;
    be_segment seg;
    be_resident r;
    resident_of(ix, &seg, &r);
    r.centroids = cent;
    be_config cfg = {.n_workers = 1, .n_threads = 1, .max_m = 4, .max_probe = 8, .max_refine = 16};
    cm_backend be;
    chimera_error err;
    CHECK_OK(backend_new("cpu", &be, &err), &err);
    CHECK_OK(be.iface->upload(be.ctx, &r, &cfg, &err), &err);
    CHECK_OK(be.iface->query_begin(be.ctx, 0, q, 4, &err), &err);
    uint32_t cids[4 * 8];
    float qc[4 * 8];
    memset(cids, 0, sizeof cids);
    CHECK_OK(be.iface->probe(be.ctx, 0, 8, 0, BE_PROBE_BRUTE, cids, qc, &err), &err);
    int padded = 1;
    for (int i = 0; i < 4 * 8; i++) padded &= cids[i] == UINT32_MAX && qc[i] == -INFINITY;
    CHECKF(padded, "probe over -inf scores: cid %u score %g (want padding)", cids[0], qc[0]);
    uint32_t docs[16], n_out = 99;
    float partial[16];
    CHECK_OK(be.iface->refine(be.ctx, 0, 16, (be_floor){BE_IMPUTE_ZERO, 1.0f}, NULL, docs, partial, &n_out, NULL, &err),
             &err);
    CHECKF(n_out == 0, "refine after an empty probe found %u documents", n_out);
    backend_free(&be);
    cm_free(cent);
    cm_free(q);
}

/* Probing widens when the probed clusters hold fewer documents than k_fullbit: two tokens
 * of a query with one cluster each reach a few dozen documents, so a top-100 search
 * without room to widen returns fewer than 100; with room it returns 100, and exactly
 * what a search probing the first doubling of n_probe that holds k_fullbit documents
 * (or the room) returns. */
static void test_widen(const bench *b)
{
    sp_params p = {.k = 100, .n_probe = 1, .k_refine = 400, .k_fullbit = 200, .chunks = 2,
                   .impute = BE_IMPUTE_PROBE_FLOOR, .probe = BE_PROBE_BRUTE};
    sp_params mx = p;
    mx.n_probe = 64;
    sp_engine *e = NULL;
    chimera_error err;
    CHECK_OK(sp_engine_new(&b->ix, "cpu", 1, 1, &mx, 64, &e, &err), &err);
    if (!e) return;
    int64_t ids[100], ref[100];
    float sc[100], rsc[100];
    int short_narrow = 0, widened = 0;
    for (int64_t i = 0; i < 10 && i < b->q.n; i++) {
        uint32_t m;
        const float *q = query(&b->q, i, &m);
        m = m < 2 ? m : 2;
        /* no room: as many results as the one probed cluster per token holds */
        sp_params narrow = p;
        sp_stats st = {0};
        CHECK_OK(sp_search(e, 0, q, m, &narrow, ids, sc, &st, &err), &err);
        int got = 0;
        for (int r = 0; r < 100; r++) got += ids[r] >= 0;
        if (got < 100) short_narrow++;
        CHECKF(st.n_probed == 1, "query %lld: %llu clusters probed without room, n_probe 1",
               (long long)i, (unsigned long long)st.n_probed);
        /* the reference: the first doubling whose refinement holds k_fullbit documents */
        sp_params at = p;
        uint64_t rounds_touched = 0; /* what each round's refinement touched, summed */
        for (;;) {
            memset(&st, 0, sizeof st);
            CHECK_OK(sp_search(e, 0, q, m, &at, ref, rsc, &st, &err), &err);
            rounds_touched += st.docs_touched;
            if (st.n_refined >= p.k_fullbit || at.n_probe >= 64) break;
            at.n_probe *= 2;
        }
        widened += at.n_probe > 1;
        sp_params wide = p;
        wide.n_probe_room = 64;
        memset(&st, 0, sizeof st);
        CHECK_OK(sp_search(e, 0, q, m, &wide, ids, sc, &st, &err), &err);
        /* every round counts: 1 + 2 + ... + at.n_probe probes, and the documents each
         * round's refinement touched */
        CHECKF(st.n_probed == 2 * (uint64_t)at.n_probe - 1 && st.docs_touched == rounds_touched,
               "query %lld: widened to %u, %llu clusters probed (expected %u), %llu documents "
               "touched (the rounds one by one: %llu)", (long long)i, at.n_probe,
               (unsigned long long)st.n_probed, 2 * at.n_probe - 1,
               (unsigned long long)st.docs_touched, (unsigned long long)rounds_touched);
        got = 0;
        for (int r = 0; r < 100; r++) got += ids[r] >= 0;
        CHECKF(got == 100, "query %lld: %d results of 100 with room to widen", (long long)i, got);
        CHECKF(memcmp(ids, ref, sizeof ids) == 0 && memcmp(sc, rsc, sizeof sc) == 0,
               "query %lld: the widened search differs from n_probe %u's", (long long)i,
               at.n_probe);
    }
    CHECKF(short_narrow > 0 && widened > 0, "%d of 10 queries short without room, %d widened: "
           "the fixture does not exercise widening", short_narrow, widened);
    /* a filter of three documents in four, too many for the direct path: refinement
     * probes deeper, n_probe x sqrt(documents / allowed) clusters (pipeline.h), once */
    uint32_t nd = (uint32_t)b->ix.n_docs;
    sp_filter most = {cm_calloc((nd + 7) / 8, 1), cm_malloc(nd * sizeof(uint32_t)), 0};
    for (uint32_t d = 0; d < nd; d++)
        if (d % 4 != 0) {
            most.allow[d >> 3] |= (uint8_t)(1u << (d & 7));
            most.docs[most.n++] = d;
        }
    sp_params fp = {.k = 10, .n_probe = 8, .k_refine = 100, .k_fullbit = 30, .chunks = 2,
                    .impute = BE_IMPUTE_PROBE_FLOOR, .probe = BE_PROBE_BRUTE,
                    .n_probe_room = 64, .filter = &most};
    uint32_t deep = (uint32_t)ceil(8 * sqrt((double)nd / (double)most.n));
    for (int64_t i = 0; i < 10 && i < b->q.n && most.n > 4 * fp.k_refine; i++) {
        uint32_t m;
        const float *q = query(&b->q, i, &m);
        sp_stats st = {0};
        CHECK_OK(sp_search(e, 0, q, m, &fp, ids, sc, &st, &err), &err);
        CHECKF(st.n_probed == deep && st.n_refined > 0,
               "query %lld: %llu clusters probed with a filter of %lld of %u (expected %u)",
               (long long)i, (unsigned long long)st.n_probed, (long long)most.n, nd, deep);
    }
    CHECK(most.n > 4 * fp.k_refine); /* else the direct path: the fixture misses the case */
    cm_free(most.allow);
    cm_free(most.docs);
    sp_engine_free(e);
}

int main(void)
{
    double t0 = cm_now();
    /* four shapes; the first also serves the tests that need one index */
    bench sh[4];
    int ok[4];
    ok[0] = bench_make(&sh[0], "d96-short", 800, 96, 8, 40, 192, 4, 1, 30);
    ok[1] = bench_make(&sh[1], "d128-short", 800, 128, 8, 40, 192, 4, 2, 30);
    ok[2] = bench_make(&sh[2], "d96-long", 90, 96, 100, 300, 128, 4, 3, 30);
    ok[3] = bench_make(&sh[3], "d128-long", 90, 128, 100, 300, 128, 4, 4, 30);
    for (int i = 0; i < 4; i++)
        if (ok[i]) test_recall_shape(&sh[i]);
    if (ok[0]) {
        test_exhaustive(&sh[0], "cpu");
        test_exhaustive(&sh[0], "cpu-as-device");
        test_device_path(&sh[0]);
        test_chunks(&sh[0]);
        test_interaction(&sh[0]);
        test_determinism(&sh[0]);
        test_impute_modes(&sh[0]);
        test_floor_scale(&sh[0]);
        test_deleted(&sh[0]);
        test_public_api(&sh[0]);
        test_long_document(&sh[0]);
        test_probe_unfilled(&sh[0]);
    }
    if (ok[2]) {
        test_exhaustive(&sh[2], "cpu");
        test_device_path(&sh[2]);
        test_interaction(&sh[2]);
    }
    for (int i = 0; i < 4; i++) bench_free(&sh[i]);
    test_recall_bits();
    bench pm;
    if (bench_make(&pm, "probe", 1000, 64, 8, 40, 2048, 2, 5, 30)) {
        test_probe_modes(&pm);
        test_graph_probe(&pm);
        test_graph_end_to_end(&pm);
        test_probe_auto_depth(&pm);
        test_seeded_walk(&pm);
        test_widen(&pm);
    }
    bench_free(&pm);
    /* fresh data of another shape and seed: d = 128, 4-bit codes */
    if (bench_make(&pm, "probe128", 1500, 128, 8, 60, 1024, 4, 11, 20)) {
        test_graph_probe(&pm);
        test_graph_end_to_end(&pm);
    }
    bench_free(&pm);
    /* many short documents: refinement against its reference */
    if (bench_make(&pm, "refine", 9000, 32, 4, 8, 256, 2, 13, 10)) test_refine_reference(&pm);
    bench_free(&pm);
    test_table_growth();
    printf("total %.1fs\n", cm_now() - t0);
    return check_report();
}
