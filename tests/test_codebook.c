/* The shards' public API (chimera.h, "Shards"): corpus slices keep ids and offsets and
 * check only their own values; the sample of stream 0 is a sorted set of real rows and
 * is reproducible; a codebook survives bytes and files unchanged, and every damaged or
 * truncated copy is refused; a Lloyd step accumulated in parts and summed equals the
 * step over all points, and the update moves exactly the centroids with members; an
 * index built with chimera_codebook_train's codebook searches exactly like a plain
 * build, and shards built with it return exactly the single index's exhaustive
 * results once merged; wrong shapes are refused by name. Fresh random data each run
 * (the seed is printed). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "chimera.h"
#include "tmpdir.h"

static uint64_t rng_state;

static uint64_t next(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}

static float unif(void) { return (float)((next() >> 11) * 0x1.0p-53) * 2.0f - 1.0f; }

/* n_docs documents of 3..12 unit tokens of dimension d, around a few topics. */
static float *make_corpus(int64_t n_docs, uint32_t d, int64_t **lens_out, int64_t *nt_out)
{
    int64_t *lens = malloc((size_t)n_docs * sizeof *lens), nt = 0;
    for (int64_t i = 0; i < n_docs; i++) nt += lens[i] = 3 + (int64_t)(next() % 10);
    float *x = malloc((size_t)nt * d * sizeof *x), topic[8][64];
    for (int t = 0; t < 8; t++)
        for (uint32_t j = 0; j < d; j++) topic[t][j] = unif();
    for (int64_t r = 0; r < nt; r++) {
        int t = (int)(next() % 8);
        double s = 0;
        for (uint32_t j = 0; j < d; j++) {
            float v = topic[t][j] + 0.6f * unif();
            x[(size_t)r * d + j] = v;
            s += (double)v * v;
        }
        for (uint32_t j = 0; j < d; j++) x[(size_t)r * d + j] /= (float)sqrt(s);
    }
    *lens_out = lens;
    *nt_out = nt;
    return x;
}

static void test_slice(const chimera_corpus *c, const float *x, uint32_t d, const int64_t *lens)
{
    chimera_error err;
    chimera_corpus *s = NULL;
    int64_t nd = chimera_corpus_n_docs(c);
    int64_t a = nd / 3, n = nd / 4;
    CHECK_OK(chimera_corpus_slice(c, a, n, 1, &s, &err), &err);
    CHECK(chimera_corpus_n_docs(s) == n);
    int64_t tok = 0;
    for (int64_t i = a; i < a + n; i++) tok += lens[i];
    CHECK(chimera_corpus_n_tokens(s) == tok);
    CHECK(chimera_corpus_doc_start(s, 0) == 0 && chimera_corpus_doc_start(s, n) == tok);
    CHECK(chimera_corpus_doc_start(c, a) >= 0 && chimera_corpus_doc_start(s, n + 1) == -1);
    /* a slice's first token is the corpus's row doc_start(a) */
    float row[64];
    CHECK_STATUS(chimera_corpus_sample_tokens(s, tok, 1, 0, NULL, &err), CHIMERA_ERR_INVALID_ARG,
                 &err);
    float *all = malloc((size_t)tok * d * sizeof *all);
    CHECK_OK(chimera_corpus_sample_tokens(s, tok, 1, 0, all, &err), &err); /* every row */
    memcpy(row, x + (size_t)chimera_corpus_doc_start(c, a) * d, d * sizeof *row);
    CHECK(memcmp(all, row, d * sizeof *row) == 0);
    free(all);
    chimera_corpus_close(s);
    CHECK_STATUS(chimera_corpus_slice(c, nd - 2, 3, 0, &s, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECK(s == NULL);
    CHECK_STATUS(chimera_corpus_slice(c, -1, 1, 0, &s, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECK_STATUS(chimera_corpus_slice(c, 0, 0, 0, &s, &err), CHIMERA_ERR_INVALID_ARG, &err);
}

static void test_sample(const chimera_corpus *c, const float *x, uint32_t d)
{
    chimera_error err;
    int64_t n = 200, nt = chimera_corpus_n_tokens(c);
    float *a = malloc((size_t)n * d * sizeof *a), *b = malloc((size_t)n * d * sizeof *b);
    CHECK_OK(chimera_corpus_sample_tokens(c, n, 9, 0, a, &err), &err);
    CHECK_OK(chimera_corpus_sample_tokens(c, n, 9, 0, b, &err), &err);
    CHECK(memcmp(a, b, (size_t)n * d * sizeof *a) == 0);
    CHECK_OK(chimera_corpus_sample_tokens(c, n, 9, 1, b, &err), &err);
    CHECK(memcmp(a, b, (size_t)n * d * sizeof *a) != 0); /* another stream */
    /* every sampled row is a corpus row, in increasing row order */
    int64_t last = -1, found = 0;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t r = last + 1; r < nt; r++)
            if (memcmp(a + (size_t)i * d, x + (size_t)r * d, d * sizeof *a) == 0) {
                last = r;
                found++;
                break;
            }
    }
    CHECKF(found == n, "%lld of %lld sampled rows found in order", (long long)found, (long long)n);
    CHECK_STATUS(chimera_corpus_sample_tokens(c, nt + 1, 9, 0, a, &err), CHIMERA_ERR_INVALID_ARG, &err);
    free(a), free(b);
    /* the build's sample: 64 per centroid up to 2^21 rows, then 2^21 rows down to 32 per
     * centroid, never more than the corpus */
    const int64_t big = (int64_t)1 << 40;
    CHECK(chimera_codebook_sample_size(1000, big) == 64000);
    CHECK(chimera_codebook_sample_size(32768, big) == (int64_t)1 << 21);
    CHECK(chimera_codebook_sample_size(40000, big) == (int64_t)1 << 21);
    CHECK(chimera_codebook_sample_size(65536, big) == (int64_t)1 << 21);
    CHECK(chimera_codebook_sample_size(99328, big) == (int64_t)99328 * 32);
    CHECK(chimera_codebook_sample_size(1000, 5000) == 5000);
    CHECK(chimera_codebook_sample_size(1000, 0) == 0);
}

static void test_bytes(const chimera_codebook *cb)
{
    chimera_error err;
    void *buf = NULL;
    size_t n = 0;
    CHECK_OK(chimera_codebook_to_bytes(cb, &buf, &n, &err), &err);
    chimera_codebook *back = NULL;
    CHECK_OK(chimera_codebook_from_bytes(buf, n, &back, &err), &err);
    CHECK(chimera_codebook_n_clusters(back) == chimera_codebook_n_clusters(cb));
    CHECK(chimera_codebook_dim(back) == chimera_codebook_dim(cb));
    CHECK(chimera_codebook_seed(back) == chimera_codebook_seed(cb));
    void *buf2 = NULL;
    size_t n2 = 0;
    CHECK_OK(chimera_codebook_to_bytes(back, &buf2, &n2, &err), &err);
    CHECK(n2 == n && memcmp(buf, buf2, n) == 0);
    chimera_free(buf2);
    chimera_codebook_free(back);
    /* every truncation, and a flipped bit at 64 random places, is refused */
    int refused = 0, tried = 0;
    for (size_t m = 0; m < n; m += 1 + n / 200, tried++)
        refused += chimera_codebook_from_bytes(buf, m, &back, &err) == CHIMERA_ERR_FORMAT && !back;
    CHECKF(refused == tried, "%d of %d truncations refused", refused, tried);
    unsigned char *bad = malloc(n);
    refused = 0;
    for (int t = 0; t < 64; t++) {
        memcpy(bad, buf, n);
        size_t at = next() % n;
        bad[at] ^= (unsigned char)(1u << (next() % 8));
        chimera_status s = chimera_codebook_from_bytes(bad, n, &back, &err);
        refused += (s == CHIMERA_ERR_FORMAT || s == CHIMERA_ERR_VALUE) && !back;
        chimera_codebook_free(back);
        back = NULL;
    }
    CHECKF(refused == 64, "%d of 64 damaged copies refused", refused);
    free(bad);
    /* a file: the same bytes back; a missing one: an I/O error naming it */
    char path[512];
    snprintf(path, sizeof path, "%s/cb.bin", test_tmpdir());
    CHECK_OK(chimera_codebook_save(cb, path, &err), &err);
    CHECK_OK(chimera_codebook_load(path, &back, &err), &err);
    CHECK_OK(chimera_codebook_to_bytes(back, &buf2, &n2, &err), &err);
    CHECK(n2 == n && memcmp(buf, buf2, n) == 0);
    chimera_free(buf2);
    chimera_codebook_free(back);
    snprintf(path, sizeof path, "%s/none.bin", test_tmpdir());
    CHECK_STATUS(chimera_codebook_load(path, &back, &err), CHIMERA_ERR_IO, &err);
    CHECK(strstr(err.msg, "none.bin") != NULL);
    chimera_free(buf);
}

/* A Lloyd step in three parts, summed, equals the step over all points. */
static void test_lloyd(chimera_codebook *cb, const float *pts, int64_t n)
{
    chimera_error err;
    const uint32_t k = chimera_codebook_n_clusters(cb), d = chimera_codebook_dim(cb);
    double *all = calloc((size_t)k * d, sizeof *all), *part = calloc((size_t)k * d, sizeof *part);
    int64_t *call = calloc(k, sizeof *call), *cpart = calloc(k, sizeof *cpart);
    double sim_all = 0, sim_part = 0;
    CHECK_OK(chimera_codebook_accumulate(cb, pts, n, 2, all, call, &sim_all, &err), &err);
    int64_t cut[4] = {0, n / 3, n / 3 + n / 5, n};
    for (int p = 0; p < 3; p++)
        CHECK_OK(chimera_codebook_accumulate(cb, pts + (size_t)cut[p] * d, cut[p + 1] - cut[p], 1,
                                             part, cpart, &sim_part, &err), &err);
    int64_t total = 0, members = 0;
    double maxdiff = 0;
    int counts_equal = 1;
    for (uint32_t c = 0; c < k; c++) {
        counts_equal &= call[c] == cpart[c];
        total += call[c];
        members += call[c] > 0;
        for (uint32_t j = 0; j < d; j++) {
            double e = fabs(all[(size_t)c * d + j] - part[(size_t)c * d + j]);
            if (e > maxdiff) maxdiff = e;
        }
    }
    CHECK(counts_equal && total == n);
    CHECKF(maxdiff < 1e-9, "sums differ by %g", maxdiff);
    CHECK_NEAR(sim_all, sim_part, 1e-6 * n);
    /* the update moves the centroids with members (to unit vectors) and keeps the rest */
    uint32_t kept = chimera_codebook_update(cb, part, cpart);
    CHECK(kept == k - (uint32_t)members);
    /* a step never lowers the mean similarity on the same points */
    memset(part, 0, (size_t)k * d * sizeof *part);
    memset(cpart, 0, k * sizeof *cpart);
    double sim_after = 0;
    CHECK_OK(chimera_codebook_accumulate(cb, pts, n, 0, part, cpart, &sim_after, &err), &err);
    CHECKF(sim_after >= sim_all - 1e-6 * n, "similarity %g -> %g", sim_all, sim_after);
    CHECK_STATUS(chimera_codebook_accumulate(cb, pts, n, -1, part, cpart, NULL, &err),
                 CHIMERA_ERR_INVALID_ARG, &err);
    CHECK_STATUS(chimera_codebook_accumulate(cb, pts, n, 1, NULL, cpart, NULL, &err),
                 CHIMERA_ERR_INVALID_ARG, &err);
    free(all), free(part), free(call), free(cpart);
}

static void search_all(const char *dir, const chimera_queries *q, uint32_t k, uint32_t nclus,
                       int64_t nd, int64_t *ids, float *scores)
{
    chimera_error err;
    chimera_index *ix = NULL;
    CHECK_OK(chimera_index_open(dir, NULL, &ix, &err), &err);
    chimera_search_params p = {.n_probe = nclus, .k_refine = (uint32_t)nd,
                               .k_fullbit = (uint32_t)nd};
    chimera_search_opts so = {.n_threads = 1};
    CHECK_OK(chimera_index_search(ix, q, k, &p, &so, ids, scores, NULL, &err), &err);
    chimera_index_close(ix);
}

/* Shards built with the corpus's codebook, merged, give the single index's results;
 * the codebook index equals a plain build. */
static void test_build(const chimera_corpus *c, chimera_codebook *cb)
{
    chimera_error err;
    const char *tmp = test_tmpdir();
    char plain[512], one[512], shard[3][512];
    snprintf(plain, sizeof plain, "%s/plain", tmp);
    snprintf(one, sizeof one, "%s/one", tmp);
    chimera_build_opts bo = {.n_threads = 2, .no_sync = 1, .no_calibrate = 1, .seed = 77};
    CHECK_OK(chimera_index_build(c, plain, &bo, NULL, &err), &err);
    bo.codebook = cb;
    CHECK_OK(chimera_index_build(c, one, &bo, NULL, &err), &err);
    const int64_t nd = chimera_corpus_n_docs(c);
    const uint32_t k = 10, K = chimera_codebook_n_clusters(cb);
    chimera_queries *q = NULL;
    CHECK_OK(chimera_corpus_sample_queries(c, 12, 0, 5, &q, &err), &err);
    int64_t ids[3][12 * 10], want[12 * 10], plain_ids[12 * 10];
    float sc[3][12 * 10], want_sc[12 * 10], plain_sc[12 * 10];
    search_all(plain, q, k, K, nd, plain_ids, plain_sc);
    search_all(one, q, k, K, nd, want, want_sc);
    CHECK(memcmp(plain_ids, want, sizeof want) == 0 && memcmp(plain_sc, want_sc, sizeof want_sc) == 0);
    int64_t cut[4] = {0, nd / 4, nd / 2 + 3, nd};
    for (int s = 0; s < 3; s++) {
        chimera_corpus *part = NULL;
        snprintf(shard[s], sizeof shard[s], "%s/shard%d", tmp, s);
        CHECK_OK(chimera_corpus_slice(c, cut[s], cut[s + 1] - cut[s], 1, &part, &err), &err);
        CHECK_OK(chimera_index_build(part, shard[s], &bo, NULL, &err), &err);
        chimera_corpus_close(part);
        search_all(shard[s], q, k, K, nd, ids[s], sc[s]);
    }
    /* merge: per query, the best k over the three lists (ties by id) */
    int same = 1;
    for (int i = 0; i < 12; i++) {
        int h[3] = {0, 0, 0};
        for (uint32_t r = 0; r < k; r++) {
            int b = -1;
            for (int s = 0; s < 3; s++) {
                if (h[s] >= (int)k || ids[s][i * k + h[s]] < 0) continue;
                if (b < 0 || sc[s][i * k + h[s]] > sc[b][i * k + h[b]] ||
                    (sc[s][i * k + h[s]] == sc[b][i * k + h[b]] &&
                     ids[s][i * k + h[s]] < ids[b][i * k + h[b]]))
                    b = s;
            }
            same &= b >= 0 && ids[b][i * k + h[b]] == want[i * k + r] &&
                    sc[b][i * k + h[b]] == want_sc[i * k + r];
            if (b >= 0) h[b]++;
        }
    }
    CHECK(same);
    /* wrong shapes */
    chimera_corpus *other = NULL;
    float t[2 * 8] = {1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
    int64_t l[1] = {2};
    CHECK_OK(chimera_corpus_wrap(t, 2, 8, l, 1, NULL, NULL, &other, &err), &err);
    char bad[512];
    snprintf(bad, sizeof bad, "%s/bad", tmp);
    CHECK_STATUS(chimera_index_build(other, bad, &bo, NULL, &err), CHIMERA_ERR_DIM, &err);
    chimera_corpus_close(other);
    bo.n_clusters = K + 1;
    CHECK_STATUS(chimera_index_build(c, bad, &bo, NULL, &err), CHIMERA_ERR_INVALID_ARG, &err);
    chimera_queries_free(q);
}

int main(void)
{
    uint64_t seed = (uint64_t)time(NULL) ^ 0x9e3779b97f4a7c15ULL;
    if (getenv("CHIMERA_TEST_SEED")) seed = strtoull(getenv("CHIMERA_TEST_SEED"), NULL, 10);
    rng_state = seed | 1;
    printf("test_codebook: seed %llu\n", (unsigned long long)seed);
    const uint32_t d = 24;
    int64_t *lens, nt;
    const int64_t nd = 900;
    float *x = make_corpus(nd, d, &lens, &nt);
    chimera_error err;
    chimera_corpus *c = NULL;
    CHECK_OK(chimera_corpus_wrap(x, nt, d, lens, nd, NULL, NULL, &c, &err), &err);
    test_slice(c, x, d, lens);
    test_sample(c, x, d);
    chimera_build_opts bo = {.n_threads = 2, .seed = 77};
    chimera_codebook *cb = NULL;
    CHECK_OK(chimera_codebook_train(c, &bo, &cb, &err), &err);
    CHECK(chimera_codebook_n_clusters(cb) == chimera_default_n_clusters(nt));
    CHECK(chimera_codebook_dim(cb) == d && chimera_codebook_seed(cb) == 77);
    test_bytes(cb);
    test_build(c, cb);
    test_lloyd(cb, x, nt);
    /* points: too few for the clusters, or not finite */
    chimera_codebook *p = NULL;
    CHECK_STATUS(chimera_codebook_train_points(x, 10, d, 11, 0, NULL, &p, &err),
                 CHIMERA_ERR_INVALID_ARG, &err);
    x[5] = NAN;
    CHECK_STATUS(chimera_codebook_train_points(x, 100, d, 4, 0, NULL, &p, &err), CHIMERA_ERR_VALUE, &err);
    CHECK(p == NULL);
    /* a NaN in a slice is found by the slice that holds it, not by the others */
    chimera_corpus *s = NULL;
    CHECK_STATUS(chimera_corpus_slice(c, 0, 2, 1, &s, &err), CHIMERA_ERR_VALUE, &err);
    CHECK_OK(chimera_corpus_slice(c, 2, 5, 1, &s, &err), &err);
    chimera_corpus_close(s);
    chimera_codebook_free(cb);
    chimera_corpus_close(c);
    free(x), free(lens);
    return check_report();
}
