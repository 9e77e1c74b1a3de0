/* What this proves about src/graph (centroid proximity graph):
 * - graph search at default parameters reaches Recall@n_probe >= 0.99 (n_probe = 8, 16,
 *   32, 64) against brute force on K = 65,536 clustered unit vectors (d = 128, 8192
 *   blobs of varying spread in a 32-dimensional latent subspace; the centroid set is
 *   generated directly rather than by running k-means), with the
 *   default (partitioned) kNN builder, and also on a small exact-kNN graph with d
 *   not a multiple of 8;
 * - built graphs pass graph_check (degree, ids in range, no self loops or duplicate
 *   edges, every node reachable from the entry points), and graph_check catches each
 *   of those defects when they are planted;
 * - brute force agrees with a naive double-precision loop;
 * - the build is identical with and without a thread pool (deterministic);
 * - allocation failures in build and searcher creation return CHIMERA_ERR_NOMEM and
 *   free what was taken;
 * - degenerate inputs behave: n = 1 (degree 0), n smaller than the degree (degree
 *   lowered to n - 1), duplicate vectors, k > n (padded results).
 * Fixtures come from fixed seeds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#define CM_ALLOC_IMPL /* the fixtures use libc malloc; only the failure hook is wanted */
#include "core/alloc.h"
#include "core/clock.h"
#include "core/pool.h"
#include "core/rng.h"
#include "graph/graph.h"

/* n clustered unit vectors: blob centres c_b ~ N(0, I_r) in an r-dimensional latent
 * space, points c_b + s_b N(0, I_r) with s_b uniform in [0.2, 0.6], mapped to R^d by a
 * fixed random basis, plus 0.01 isotropic noise per coordinate, normalised. Learned
 * embeddings (and so their k-means centroids) have an intrinsic dimension well below
 * d; r = d would be uniform-like data on which no graph beats brute force. The same
 * generator as bench/bench_ivf.c. */
static float *blobs(uint32_t n, uint32_t d, uint32_t r, uint32_t n_blobs, uint64_t seed)
{
    cm_rng g;
    cm_rng_seed(&g, seed, 2);
    float *basis = malloc(sizeof(float) * r * d), *c = malloc(sizeof(float) * n_blobs * r);
    float *spread = malloc(sizeof(float) * n_blobs), *z = malloc(sizeof(float) * r);
    for (uint32_t i = 0; i < r * d; i++) basis[i] = (float)(cm_rng_gauss(&g) / sqrt(d));
    for (uint32_t b = 0; b < n_blobs; b++) {
        for (uint32_t j = 0; j < r; j++) c[b * r + j] = (float)cm_rng_gauss(&g);
        spread[b] = (float)(0.2 + 0.4 * cm_rng_uniform(&g));
    }
    float *x = malloc(sizeof(float) * (size_t)n * d);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)cm_rng_below(&g, n_blobs);
        for (uint32_t j = 0; j < r; j++) z[j] = c[b * r + j] + spread[b] * (float)cm_rng_gauss(&g);
        float *v = x + (size_t)i * d;
        for (uint32_t t = 0; t < d; t++) v[t] = 0.01f * (float)cm_rng_gauss(&g);
        for (uint32_t j = 0; j < r; j++)
            for (uint32_t t = 0; t < d; t++) v[t] += z[j] * basis[j * d + t];
        double s = 0;
        for (uint32_t t = 0; t < d; t++) s += v[t] * v[t];
        for (uint32_t t = 0; t < d; t++) v[t] /= (float)sqrt(s);
    }
    free(basis);
    free(c);
    free(spread);
    free(z);
    return x;
}

/* nq query tokens near the data: random data points plus per-coordinate noise sigma,
 * renormalised (query tokens fall near the centroids of their clusters). */
static float *near(const float *v, uint32_t n, uint32_t d, int64_t nq, double sigma,
                   uint64_t seed)
{
    cm_rng r;
    cm_rng_seed(&r, seed, 3);
    float *q = malloc(sizeof(float) * (size_t)nq * d);
    for (int64_t i = 0; i < nq; i++) {
        const float *base = v + (size_t)cm_rng_below(&r, n) * d;
        double s = 0;
        for (uint32_t t = 0; t < d; t++) {
            q[i * d + t] = base[t] + (float)(sigma * cm_rng_gauss(&r));
            s += q[i * d + t] * q[i * d + t];
        }
        for (uint32_t t = 0; t < d; t++) q[i * d + t] /= (float)sqrt(s);
    }
    return q;
}

/* Mean Recall@k of graph results against brute force; a graph result counts when it
 * is in the exact top k or ties the exact k-th inner product. */
static double recall(const uint32_t *gid, const float *gip, const uint32_t *bid, const float *bip,
                     int64_t nq, uint32_t k)
{
    double hit = 0;
    for (int64_t i = 0; i < nq; i++) {
        const uint32_t *g = gid + i * k, *b = bid + i * k;
        float kth = bip[i * k + k - 1];
        for (uint32_t a = 0; a < k; a++) {
            int found = gip[i * k + a] >= kth - 1e-6f && g[a] != UINT32_MAX;
            for (uint32_t c = 0; c < k && !found; c++) found = g[a] == b[c];
            hit += found;
        }
    }
    return hit / ((double)nq * k);
}

static double measure(const graph *g, const float *v, uint32_t d, const float *q, int64_t nq,
                      uint32_t k, const graph_search_params *sp, cm_pool *pool, double *qps)
{
    chimera_error err;
    graph_searcher *s = NULL;
    CHECK_OK(graph_searcher_new(g, v, d, sp, k, cm_pool_size(pool), &s, &err), &err);
    if (!s) return 0;
    uint32_t *gid = malloc(sizeof(uint32_t) * nq * k), *bid = malloc(sizeof(uint32_t) * nq * k);
    float *gip = malloc(sizeof(float) * nq * k), *bip = malloc(sizeof(float) * nq * k);
    double t0 = cm_now();
    graph_search_batch(s, pool, q, nq, d, k, gid, gip);
    if (qps) *qps = (double)nq / (cm_now() - t0);
    uint64_t ns, nd, ne;
    graph_searcher_counters(s, &ns, &nd, &ne);
    printf("    (%.0f inner products, %.0f expansions per search)\n", (double)nd / ns, (double)ne / ns);
    CHECK_OK(graph_brute_force(v, g->n, d, q, nq, d, k, pool, bid, bip, &err), &err);
    double r = recall(gid, gip, bid, bip, nq, k);
    free(gid);
    free(bid);
    free(gip);
    free(bip);
    graph_searcher_free(s);
    return r;
}

static void test_small_exact(cm_pool *pool)
{
    const uint32_t n = 3000, d = 30;
    float *v = blobs(n, d, 10, 40, 21);
    float *q = near(v, n, d, 300, 0.05, 22);
    graph g;
    chimera_error err;
    graph_build_opts o = {0};
    o.pool = pool;
    CHECK_OK(graph_build(v, n, d, &o, &g, &err), &err);
    CHECK(g.degree == 32 && g.n == n && g.n_entry == 64);
    graph_check_stats st;
    CHECK_OK(graph_check(&g, &st, &err), &err);
    CHECK(st.n_reachable == n);
    double r = measure(&g, v, d, q, 300, 10, NULL, pool, NULL);
    printf("n=%u d=%u exact kNN: Recall@10 = %.4f\n", n, d, r);
    CHECKF(r >= 0.99, "recall %.4f", r);

    /* Brute force against a naive loop. */
    uint32_t bid[10];
    float bip[10];
    CHECK_OK(graph_brute_force(v, n, d, q, 1, d, 10, NULL, bid, bip, &err), &err);
    double prev = 1e30;
    int ok = 1;
    for (int a = 0; a < 10; a++) {
        double s = 0;
        for (uint32_t t = 0; t < d; t++) s += (double)q[t] * v[(size_t)bid[a] * d + t];
        if (fabs(s - bip[a]) > 1e-5 || s > prev + 1e-6) ok = 0;
        prev = s;
    }
    int better = 0; /* nothing outside the top 10 beats the 10th */
    for (uint32_t j = 0; j < n; j++) {
        double s = 0;
        for (uint32_t t = 0; t < d; t++) s += (double)q[t] * v[(size_t)j * d + t];
        int in = 0;
        for (int a = 0; a < 10; a++) in |= bid[a] == j;
        if (!in && s > bip[9] + 1e-5) better = 1;
    }
    CHECK(ok && !better);

    /* Planted defects are caught. */
    uint32_t saved = g.adj[5 * g.degree + 3];
    g.adj[5 * g.degree + 3] = 5;
    CHECK_STATUS(graph_check(&g, NULL, &err), CHIMERA_ERR_CORRUPT, &err);
    CHECK(strstr(err.msg, "self loop") != NULL);
    g.adj[5 * g.degree + 3] = n;
    CHECK_STATUS(graph_check(&g, NULL, &err), CHIMERA_ERR_CORRUPT, &err);
    g.adj[5 * g.degree + 3] = g.adj[5 * g.degree + 2];
    CHECK_STATUS(graph_check(&g, NULL, &err), CHIMERA_ERR_CORRUPT, &err);
    CHECK(strstr(err.msg, "twice") != NULL);
    g.adj[5 * g.degree + 3] = saved;
    CHECK_OK(graph_check(&g, NULL, &err), &err);
    graph_free(&g);

    /* Unreachable nodes: two disconnected rings, entry only in the first. */
    graph h = {0};
    h.n = 8;
    h.degree = 1;
    uint32_t adj[8] = {1, 2, 3, 0, 5, 6, 7, 4}, entry[1] = {0};
    h.adj = adj;
    h.entry = entry;
    h.n_entry = 1;
    CHECK_STATUS(graph_check(&h, &st, &err), CHIMERA_ERR_CORRUPT, &err);
    CHECK(st.n_reachable == 4);
    CHECK(strstr(err.msg, "unreachable") != NULL);
    free(v);
    free(q);
}

static void test_determinism(cm_pool *pool)
{
    const uint32_t n = 6000, d = 16;
    float *v = blobs(n, d, 8, 30, 23);
    graph a, b;
    chimera_error err;
    graph_build_opts o = {0};
    o.knn = GRAPH_KNN_PARTITION;
    o.partition_size = 512;
    o.pool = pool;
    CHECK_OK(graph_build(v, n, d, &o, &a, &err), &err);
    o.pool = NULL;
    CHECK_OK(graph_build(v, n, d, &o, &b, &err), &err);
    CHECK(a.degree == b.degree);
    CHECK(memcmp(a.adj, b.adj, sizeof(uint32_t) * n * a.degree) == 0);
    CHECK_OK(graph_check(&a, NULL, &err), &err);
    graph_free(&a);
    graph_free(&b);
    free(v);
}

static void test_degenerate(cm_pool *pool)
{
    chimera_error err;
    graph g;
    graph_build_opts o = {0};
    o.pool = pool;
    const uint32_t d = 7;
    float *v = blobs(100, d, 4, 3, 24);
    /* n = 1. */
    CHECK_OK(graph_build(v, 1, d, &o, &g, &err), &err);
    CHECK(g.degree == 0 && g.n_entry == 1);
    CHECK_OK(graph_check(&g, NULL, &err), &err);
    graph_searcher *s = NULL;
    CHECK_OK(graph_searcher_new(&g, v, d, NULL, 4, 1, &s, &err), &err);
    uint32_t ids[8];
    float ips[8];
    CHECK(graph_search(s, 0, v + d, 4, ids, ips) == 1);
    CHECK(ids[0] == 0 && ids[1] == UINT32_MAX && isinf(ips[3]));
    graph_searcher_free(s);
    graph_free(&g);
    /* n = 5 < degree: degree 4, i.e. complete, and search is exact. */
    CHECK_OK(graph_build(v, 5, d, &o, &g, &err), &err);
    CHECK(g.degree == 4);
    CHECK_OK(graph_check(&g, NULL, &err), &err);
    CHECK_OK(graph_searcher_new(&g, v, d, NULL, 4, 1, &s, &err), &err);
    CHECK(graph_search(s, 0, v + 50 * d, 4, ids, ips) == 4);
    uint32_t bid[4];
    float bip[4];
    CHECK_OK(graph_brute_force(v, 5, d, v + 50 * d, 1, d, 4, NULL, bid, bip, &err), &err);
    CHECK(memcmp(ids, bid, sizeof bid) == 0);
    graph_searcher_free(s);
    graph_free(&g);
    /* Duplicates: 100 copies of 4 vectors; both kNN builders. */
    float *dup = malloc(sizeof(float) * 400 * d);
    for (int i = 0; i < 400; i++) memcpy(dup + i * d, v + (i % 4) * d, sizeof(float) * d);
    for (int mode = GRAPH_KNN_EXACT; mode <= GRAPH_KNN_PARTITION; mode++) {
        o.knn = (graph_knn_mode)mode;
        CHECK_OK(graph_build(dup, 400, d, &o, &g, &err), &err);
        CHECK_OK(graph_check(&g, NULL, &err), &err);
        CHECK_OK(graph_searcher_new(&g, dup, d, NULL, 8, 1, &s, &err), &err);
        CHECK(graph_search(s, 0, v + 2 * d, 8, ids, NULL) == 8);
        graph_searcher_free(s);
        graph_free(&g);
    }
    o.knn = GRAPH_KNN_AUTO;
    /* Bad arguments. */
    CHECK_STATUS(graph_build(v, 0, d, &o, &g, &err), CHIMERA_ERR_INVALID_ARG, &err);
    o.degree = 16;
    o.intermediate_degree = 8;
    CHECK_STATUS(graph_build(v, 100, d, &o, &g, &err), CHIMERA_ERR_INVALID_ARG, &err);
    free(dup);
    free(v);
}

static void test_large(cm_pool *pool)
{
    const uint32_t n = 65536, d = 128;
    const int64_t nq = 1500;
    float *v = blobs(n, d, 32, 8192, 25);
    float *q = near(v, n, d, nq, 0.05, 26);
    graph g;
    chimera_error err;
    graph_build_opts o = {0};
    o.pool = pool;
    double tb = cm_now();
    CHECK_OK(graph_build(v, n, d, &o, &g, &err), &err);
    printf("K=%u d=%u: graph build %.2f s (kNN %.2f s, prune+merge %.2f s, %u repair edges)\n", n,
           d, cm_now() - tb, g.knn_seconds, g.prune_seconds, g.n_repair_edges);
    graph_check_stats st;
    CHECK_OK(graph_check(&g, &st, &err), &err);
    CHECK(st.n_reachable == n);
    static const uint32_t probes[] = {8, 16, 32, 64};
    for (int i = 0; i < 4; i++) {
        double qps = 0;
        double rc = measure(&g, v, d, q, nq, probes[i], NULL, pool, &qps);
        printf("  n_probe=%2u: Recall@n_probe = %.4f, %.0f query tokens/s\n", probes[i], rc, qps);
        CHECKF(rc >= 0.99, "n_probe %u recall %.4f", probes[i], rc);
    }
    graph_free(&g);
    free(v);
    free(q);
}

/* Allocation failures in graph build and searcher creation return CHIMERA_ERR_NOMEM
 * and free everything (the sanitizer build reports leaks). Single-threaded. */
static void test_alloc_failures(void)
{
    const uint32_t n = 1500, d = 12;
    float *v = blobs(n, d, 6, 20, 27);
    int ok[3] = {0, 0, 0}, failures = 0, bad = 0;
    for (int64_t fail = 0; fail < 200 && !(ok[0] && ok[1] && ok[2]); fail++) {
        for (int mode = GRAPH_KNN_EXACT; mode <= GRAPH_KNN_PARTITION; mode++) {
            graph_build_opts o = {0};
            o.knn = (graph_knn_mode)mode;
            o.partition_size = 300;
            graph g;
            chimera_error err;
            cm_alloc_fail_after(fail);
            chimera_status st = graph_build(v, n, d, &o, &g, &err);
            cm_alloc_fail_after(-1);
            if (st == CHIMERA_OK) {
                ok[mode - 1] = 1;
                if (mode == GRAPH_KNN_EXACT) {
                    graph_searcher *s = NULL;
                    cm_alloc_fail_after(fail);
                    chimera_status s2 = graph_searcher_new(&g, v, d, NULL, 8, 2, &s, &err);
                    cm_alloc_fail_after(-1);
                    if (s2 == CHIMERA_OK) { ok[2] = 1; graph_searcher_free(s); }
                    else if (s2 != CHIMERA_ERR_NOMEM || s) bad++;
                }
                graph_free(&g);
            } else if (st == CHIMERA_ERR_NOMEM && g.adj == NULL) {
                failures++;
            } else {
                bad++;
            }
        }
    }
    CHECK(ok[0] && ok[1] && ok[2]);
    CHECK(failures > 10);
    CHECK(bad == 0);
    free(v);
}

int main(void)
{
    cm_pool *pool = cm_pool_new(2);
    CHECK(pool != NULL);
    test_small_exact(pool);
    test_determinism(pool);
    test_degenerate(pool);
    test_alloc_failures();
    test_large(pool);
    cm_pool_free(pool);
    return check_report();
}
