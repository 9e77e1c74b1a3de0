/* bench_ivf: fine-grained IVF and centroid-graph benchmark.
 *
 * Synthetic clustered unit vectors (n points, d dims, around n_blobs random centres
 * with per-blob spread) stand in for token embeddings. Measures: hierarchical k-means
 * time for K centroids; two-level assignment of all points (time, and the fraction
 * that get their exact nearest centroid); posting-list balance; graph build time;
 * brute-force (sgemm) centroid search throughput; graph search throughput and
 * Recall@n_probe against brute force over the same centroids for several n_probe.
 * Query tokens are data points plus noise (sigma 0.05 per coordinate, renormalised).
 *
 * Usage: bench_ivf [--n N] [--k K] [--d D] [--blobs B] [--nq NQ] [--threads T]
 *                  [--centroids-only]   (skip k-means: centroids = K blob points)
 *                  [--intrinsic R (latent dimension, default d/4)] [--itopk L] [--width W] [--degree G] [--knn 0|1|2 (auto|exact|partition)]
 * Defaults: n = 2,000,000, K = 65,536, d = 128, blobs = 8192, nq = 20,000, T = 2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cluster/assign.h"
#include "cluster/kmeans.h"
#include "cluster/postings.h"
#include "core/blas.h"
#include "core/clock.h"
#include "core/cpu.h"
#include "core/pool.h"
#include "core/rng.h"
#include "graph/graph.h"

/* The generator: n_blobs blob centres c_b ~ N(0, I_r) in an r-dimensional latent
 * space, points z = c_b + s_b * N(0, I_r) with s_b uniform in [0.2, 0.6], mapped to
 * R^d by a fixed random r x d basis, plus isotropic noise 0.01 per coordinate, then
 * normalised. r = d/4 by default: learned embeddings have an intrinsic dimension far
 * below d, and uniform-on-the-sphere data (r = d) would make every method look like
 * brute force. */
typedef struct gen {
    float *x, *centres, *basis;
    float *spread;
    uint32_t d, r, n_blobs;
    uint64_t seed;
} gen;

static void gen_task(void *ctx, int64_t task, int worker)
{
    (void)worker;
    gen *g = ctx;
    float z[1024];
    for (int64_t i = task * 4096; i < (task + 1) * 4096; i++) {
        cm_rng r;
        cm_rng_seed(&r, g->seed, (uint64_t)i + 1);
        uint32_t b = (uint32_t)cm_rng_below(&r, g->n_blobs);
        for (uint32_t j = 0; j < g->r; j++)
            z[j] = g->centres[(size_t)b * g->r + j] + g->spread[b] * (float)cm_rng_gauss(&r);
        float *v = g->x + (size_t)i * g->d;
        for (uint32_t t = 0; t < g->d; t++) v[t] = 0.01f * (float)cm_rng_gauss(&r);
        for (uint32_t j = 0; j < g->r; j++) {
            const float *bj = g->basis + (size_t)j * g->d;
            for (uint32_t t = 0; t < g->d; t++) v[t] += z[j] * bj[t];
        }
        double s = 0;
        for (uint32_t t = 0; t < g->d; t++) s += (double)v[t] * v[t];
        for (uint32_t t = 0; t < g->d; t++) v[t] /= (float)sqrt(s);
    }
}

/* n clustered unit vectors (generated in blocks of 4096 rows; the extra rows of the
 * last block exist and are unused). */
static float *make_points(int64_t n, uint32_t d, uint32_t r, uint32_t n_blobs, uint64_t seed,
                          cm_pool *pool)
{
    int64_t nr = (n + 4095) / 4096 * 4096;
    gen g = {malloc(sizeof(float) * (size_t)nr * d), malloc(sizeof(float) * (size_t)n_blobs * r),
             malloc(sizeof(float) * (size_t)r * d), malloc(sizeof(float) * n_blobs), d, r,
             n_blobs, seed};
    cm_rng rng;
    cm_rng_seed(&rng, seed, 0);
    for (size_t i = 0; i < (size_t)r * d; i++) g.basis[i] = (float)(cm_rng_gauss(&rng) / sqrt(d));
    for (uint32_t b = 0; b < n_blobs; b++) {
        for (uint32_t j = 0; j < r; j++) g.centres[(size_t)b * r + j] = (float)cm_rng_gauss(&rng);
        g.spread[b] = (float)(0.2 + 0.4 * cm_rng_uniform(&rng));
    }
    cm_pool_run(pool, nr / 4096, gen_task, &g);
    free(g.centres);
    free(g.basis);
    free(g.spread);
    return g.x;
}

static float *near(const float *v, int64_t n, uint32_t d, int64_t nq, double sigma, uint64_t seed)
{
    cm_rng r;
    cm_rng_seed(&r, seed, 3);
    float *q = malloc(sizeof(float) * (size_t)nq * d);
    for (int64_t i = 0; i < nq; i++) {
        const float *base = v + (size_t)cm_rng_below(&r, (uint64_t)n) * d;
        double s = 0;
        for (uint32_t t = 0; t < d; t++) {
            q[i * d + t] = base[t] + (float)(sigma * cm_rng_gauss(&r));
            s += (double)q[i * d + t] * q[i * d + t];
        }
        for (uint32_t t = 0; t < d; t++) q[i * d + t] /= (float)sqrt(s);
    }
    return q;
}

static double recall(const uint32_t *gid, const float *gip, const uint32_t *bid, const float *bip,
                     int64_t nq, uint32_t k, uint32_t kb)
{
    double hit = 0;
    for (int64_t i = 0; i < nq; i++) {
        float kth = bip[i * kb + k - 1];
        for (uint32_t a = 0; a < k; a++) {
            uint32_t g = gid[i * k + a];
            int found = g != UINT32_MAX && gip[i * k + a] >= kth - 1e-6f;
            for (uint32_t c = 0; c < k && !found; c++) found = g == bid[i * kb + c];
            hit += found;
        }
    }
    return hit / ((double)nq * k);
}

/* Process CPU seconds (user + system, all threads): on a shared machine wall time
 * depends on what else runs, CPU time much less. */
static double cpu_now(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

static void progress(void *user, const char *phase, double f)
{
    (void)user;
    (void)phase;
    (void)f;
}

int main(int argc, char **argv)
{
    int64_t n = 2000000, nq = 20000;
    uint32_t K = 65536, d = 128, n_blobs = 8192, itopk = 0, width = 0, degree = 0;
    int threads = 2, centroids_only = 0, knn = 0;
    uint32_t intrinsic = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "0";
        if (!strcmp(a, "--n")) n = atoll(v), i++;
        else if (!strcmp(a, "--k")) K = (uint32_t)atol(v), i++;
        else if (!strcmp(a, "--d")) d = (uint32_t)atol(v), i++;
        else if (!strcmp(a, "--blobs")) n_blobs = (uint32_t)atol(v), i++;
        else if (!strcmp(a, "--nq")) nq = atoll(v), i++;
        else if (!strcmp(a, "--threads")) threads = atoi(v), i++;
        else if (!strcmp(a, "--itopk")) itopk = (uint32_t)atol(v), i++;
        else if (!strcmp(a, "--width")) width = (uint32_t)atol(v), i++;
        else if (!strcmp(a, "--degree")) degree = (uint32_t)atol(v), i++;
        else if (!strcmp(a, "--knn")) knn = atoi(v), i++;
        else if (!strcmp(a, "--intrinsic")) intrinsic = (uint32_t)atol(v), i++;
        else if (!strcmp(a, "--centroids-only")) centroids_only = 1;
        else {
            fprintf(stderr, "unknown argument %s\n", a);
            return 2;
        }
    }
    cm_pool *pool = cm_pool_new(threads);
    chimera_error err;
    printf("bench_ivf: n=%lld K=%u d=%u intrinsic=%u blobs=%u nq=%lld threads=%d simd=%s "
           "blas=%s%s\n",
           (long long)n, K, d, intrinsic ? intrinsic : d / 4, n_blobs, (long long)nq, threads,
           cm_simd_level_name(cm_simd_level_get()), cm_blas_corename(),
           getenv("OPENBLAS_CORETYPE") ? " (OPENBLAS_CORETYPE set)" : "");
    double t0 = cm_now();
    if (!intrinsic) intrinsic = d / 4;
    if (intrinsic > 1024) intrinsic = 1024;
    float *x = make_points(centroids_only ? K : n, d, intrinsic, n_blobs, 42, pool);
    if (centroids_only) n = K;
    printf("data: %.2f s to generate\n", cm_now() - t0);
    double cpu_start = cpu_now(), wall_start = cm_now();

    float *cent = x;
    ivf_kmeans_result km;
    memset(&km, 0, sizeof km);
    if (!centroids_only) {
        ivf_kmeans_opts ko = {0};
        ko.mode = KMEANS_HIERARCHICAL;
        ko.pool = pool;
        ko.progress = progress;
        t0 = cm_now();
        double c0 = cpu_now();
        if (ivf_kmeans_train(x, n, d, d, K, &ko, &km, &err) != CHIMERA_OK) {
            fprintf(stderr, "kmeans: %s\n", err.msg);
            return 1;
        }
        double tk = cm_now() - t0, ck = cpu_now() - c0;
        printf("kmeans (hierarchical, %u coarse, %lld training points): %.2f s wall, %.2f s CPU, "
               "objective (mean 1 - <x,c>) %.5f, %u empty clusters repaired\n",
               km.n_coarse, (long long)km.n_train, tk, ck, km.objective, km.n_empty_repaired);
        for (uint32_t i = 0; i < km.n_trace; i++)
            printf("  fine-tune iteration %u: objective %.5f\n", i, km.trace[i]);
        cent = km.centroids;

        ivf_assigner *as = NULL;
        ivf_assign_opts ao = {0};
        ao.pool = pool;
        ivf_assigner_new(km.centroids, K, d, km.coarse, km.n_coarse, km.child_off, &ao, &as, &err);
        uint32_t *ids = malloc(sizeof(uint32_t) * (size_t)n);
        float *ips = malloc(sizeof(float) * (size_t)n);
        t0 = cm_now();
        c0 = cpu_now();
        ivf_assign(as, x, n, d, ids, ips);
        double ta = cm_now() - t0, ca = cpu_now() - c0;
        double rec = ivf_assign_recall(as, x, n, d, 20000, 7);
        printf("assign (two-level, p=8): %.2f s wall, %.2f s CPU for %lld points (%.0f points/s "
               "wall); exact nearest centroid for %.4f of a 20000-point sample\n",
               ta, ca, (long long)n, (double)n / ta, rec);
        ivf_postings p;
        ivf_postings_stats st;
        ivf_postings_build(ids, n, K, &p, &err);
        ivf_postings_stats_get(&p, &st);
        printf("postings: min %lld median %lld max %lld mean %.1f empty %u imbalance %.3f\n",
               (long long)st.min, (long long)st.median, (long long)st.max, st.mean, st.n_empty,
               st.imbalance);
        ivf_postings_free(&p);
        ivf_assigner_free(as);
        free(ids);
        free(ips);
    }

    graph g;
    graph_build_opts go = {0};
    go.pool = pool;
    go.degree = degree;
    go.knn = (graph_knn_mode)knn;
    t0 = cm_now();
    double c1 = cpu_now();
    if (graph_build(cent, K, d, &go, &g, &err) != CHIMERA_OK) {
        fprintf(stderr, "graph: %s\n", err.msg);
        return 1;
    }
    double tg = cm_now() - t0, cg = cpu_now() - c1;
    graph_check_stats cs;
    chimera_status cst = graph_check(&g, &cs, &err);
    printf("graph build: %.2f s wall, %.2f s CPU (kNN %.2f s, prune/reverse/repair %.2f s "
           "wall), degree %u, %u repair edges, check %s, %u/%u reachable\n",
           tg, cg, g.knn_seconds, g.prune_seconds, g.degree, g.n_repair_edges, chimera_status_str(cst),
           cs.n_reachable, K);

    float *q = near(x, n, d, nq, 0.05, 99);
    const uint32_t kmax = 64;
    uint32_t *bid = malloc(sizeof(uint32_t) * (size_t)nq * kmax);
    float *bip = malloc(sizeof(float) * (size_t)nq * kmax);
    t0 = cm_now();
    c1 = cpu_now();
    graph_brute_force(cent, K, d, q, nq, d, kmax, pool, bid, bip, &err);
    double tb = cm_now() - t0, cb = cpu_now() - c1;
    printf("brute force (sgemm + top-64): %.0f query tokens/s wall (%.1f GFLOP/s), %.0f per CPU "
           "second\n",
           (double)nq / tb, 2.0 * nq * K * d / tb * 1e-9, (double)nq / cb);

    static const uint32_t probes[] = {8, 16, 32, 64};
    uint32_t *gid = malloc(sizeof(uint32_t) * (size_t)nq * kmax);
    float *gip = malloc(sizeof(float) * (size_t)nq * kmax);
    printf("graph search (itopk %s, width %u):\n", itopk ? "set" : "default", width ? width : 1);
    for (int i = 0; i < 4; i++) {
        uint32_t k = probes[i];
        graph_search_params sp = {itopk, width, 0};
        graph_searcher *s = NULL;
        graph_searcher_new(&g, cent, d, &sp, k, cm_pool_size(pool), &s, &err);
        t0 = cm_now();
        c1 = cpu_now();
        graph_search_batch(s, pool, q, nq, d, k, gid, gip);
        double ts = cm_now() - t0, cs2 = cpu_now() - c1;
        uint64_t ns, nd, ne;
        graph_searcher_counters(s, &ns, &nd, &ne);
        printf("  n_probe=%2u: Recall@n_probe %.4f, %7.0f query tokens/s wall, %7.0f per CPU "
               "second (%.1fx brute force per CPU second), %.0f inner products and %.0f "
               "expansions per token\n",
               k, recall(gid, gip, bid, bip, nq, k, kmax), (double)nq / ts, (double)nq / cs2,
               cb / cs2,
               (double)nd / ns, (double)ne / ns);
        graph_searcher_free(s);
    }
    printf("peak RSS %.2f GiB; after data generation %.1f s wall, %.1f s CPU (%.2f cores of 2 "
           "on average: the machine is shared)\n",
           cm_peak_rss_bytes() / 1073741824.0, cm_now() - wall_start, cpu_now() - cpu_start,
           (cpu_now() - cpu_start) / (cm_now() - wall_start));
    free(gid);
    free(gip);
    free(bid);
    free(bip);
    free(q);
    graph_free(&g);
    ivf_kmeans_result_free(&km);
    free(x);
    cm_pool_free(pool);
    return 0;
}
