/* What this proves about src/cluster (k-means, assignment, posting lists):
 * - flat spherical k-means never raises its objective from one Lloyd iteration to the
 *   next on fixed data, with d not a multiple of 8, and returns unit centroids;
 * - hierarchical k-means reaches an objective within a few percent of flat k-means on
 *   the same data (measured exactly against all centroids, not by its own estimate);
 * - results are bit-identical for the same seed with and without a thread pool (flat
 *   and hierarchical);
 * - degenerate inputs behave: k > n is a clear CHIMERA_ERR_INVALID_ARG, k == n and
 *   k == 1 work (k == 1 gives the normalised mean), duplicate points leave no NaN;
 * - exact assignment agrees with a brute-force dot-product loop; two-level assignment
 *   probing every coarse cluster is exact, and at default probing it finds the true
 *   nearest centroid for most tokens (ivf_assign_recall);
 * - every allocation failure inside k-means or assigner creation returns
 *   CHIMERA_ERR_NOMEM and frees what it took (leaks show in the sanitizer build);
 * - posting lists are a permutation of all token ids, each in its centroid's list,
 *   ascending, with consistent statistics.
 * Fixtures are clustered unit vectors generated from fixed seeds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cluster/assign.h"
#include "cluster/kmeans.h"
#include "cluster/postings.h"
#define CM_ALLOC_IMPL /* the fixtures use libc malloc; only the failure hook is wanted */
#include "core/alloc.h"
#include "core/pool.h"
#include "core/rng.h"

/* n unit vectors around n_blobs random unit centres with per-coordinate noise sigma. */
static float *clustered(int64_t n, uint32_t d, uint32_t n_blobs, double sigma, uint64_t seed)
{
    cm_rng r;
    cm_rng_seed(&r, seed, 1);
    float *centres = malloc(sizeof(float) * n_blobs * d);
    float *x = malloc(sizeof(float) * (size_t)n * d);
    for (uint32_t b = 0; b < n_blobs; b++) {
        double s = 0;
        for (uint32_t t = 0; t < d; t++) {
            centres[b * d + t] = (float)cm_rng_gauss(&r);
            s += centres[b * d + t] * centres[b * d + t];
        }
        for (uint32_t t = 0; t < d; t++) centres[b * d + t] /= (float)sqrt(s);
    }
    for (int64_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)cm_rng_below(&r, n_blobs);
        double s = 0;
        float *v = x + (size_t)i * d;
        for (uint32_t t = 0; t < d; t++) {
            v[t] = centres[b * d + t] + (float)(sigma * cm_rng_gauss(&r));
            s += v[t] * v[t];
        }
        for (uint32_t t = 0; t < d; t++) v[t] /= (float)sqrt(s);
    }
    free(centres);
    return x;
}

/* Mean cosine distance of x to its exact nearest centroid. */
static double exact_objective(const float *x, int64_t n, uint32_t d, const float *c, uint32_t k)
{
    ivf_assigner *a = NULL;
    chimera_error err;
    CHECK_OK(ivf_assigner_new(c, k, d, NULL, 0, NULL, NULL, &a, &err), &err);
    uint32_t *id = malloc(sizeof(uint32_t) * (size_t)n);
    float *ip = malloc(sizeof(float) * (size_t)n);
    ivf_assign(a, x, n, d, id, ip);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += 1.0 - ip[i];
    free(id);
    free(ip);
    ivf_assigner_free(a);
    return s / (double)n;
}

static float dotf(const float *a, const float *b, uint32_t d)
{
    double s = 0;
    for (uint32_t t = 0; t < d; t++) s += (double)a[t] * b[t];
    return (float)s;
}

static int unit_rows(const float *c, uint32_t k, uint32_t d)
{
    for (uint32_t j = 0; j < k; j++) {
        double s = 0;
        for (uint32_t t = 0; t < d; t++) s += (double)c[j * d + t] * c[j * d + t];
        if (!(fabs(s - 1.0) < 1e-4)) return 0;
    }
    return 1;
}

static void test_flat_monotone(cm_pool *pool)
{
    const int64_t n = 20000;
    const uint32_t d = 37, k = 64;
    float *x = clustered(n, d, 40, 0.08, 11);
    ivf_kmeans_opts o = {0};
    o.mode = KMEANS_FLAT;
    o.n_iter = 15;
    o.init = KMEANS_INIT_RANDOM; /* random seeding leaves more for Lloyd to improve */
    o.pool = pool;
    ivf_kmeans_result r;
    chimera_error err;
    CHECK_OK(ivf_kmeans_train(x, n, d, d, k, &o, &r, &err), &err);
    CHECK(r.n_trace == 15);
    int mono = 1;
    for (uint32_t i = 1; i < r.n_trace; i++)
        if (r.trace[i] > r.trace[i - 1] + 1e-6) {
            mono = 0;
            fprintf(stderr, "objective rose at iteration %u: %.9f -> %.9f\n", i, r.trace[i - 1],
                    r.trace[i]);
        }
    CHECK(mono);
    CHECKF(r.trace[r.n_trace - 1] < r.trace[0], "first %.6f last %.6f", r.trace[0],
           r.trace[r.n_trace - 1]);
    CHECK(unit_rows(r.centroids, k, d));
    CHECK(r.coarse == NULL && r.n_coarse == 0);

    /* Same seed, no pool: bit-identical. */
    ivf_kmeans_result r2;
    o.pool = NULL;
    CHECK_OK(ivf_kmeans_train(x, n, d, d, k, &o, &r2, &err), &err);
    CHECK(memcmp(r.centroids, r2.centroids, sizeof(float) * k * d) == 0);
    ivf_kmeans_result_free(&r2);
    /* A different seed gives different centroids (the seed is used). */
    o.seed = 99;
    CHECK_OK(ivf_kmeans_train(x, n, d, d, k, &o, &r2, &err), &err);
    CHECK(memcmp(r.centroids, r2.centroids, sizeof(float) * k * d) != 0);
    ivf_kmeans_result_free(&r2);
    ivf_kmeans_result_free(&r);
    free(x);
}

static void test_hierarchical(cm_pool *pool)
{
    const int64_t n = 60000;
    const uint32_t d = 32, k = 1024;
    float *x = clustered(n, d, 300, 0.12, 12);
    ivf_kmeans_opts o = {0};
    o.pool = pool;
    o.mode = KMEANS_FLAT;
    ivf_kmeans_result flat, hier;
    chimera_error err;
    CHECK_OK(ivf_kmeans_train(x, n, d, d, k, &o, &flat, &err), &err);
    o.mode = KMEANS_HIERARCHICAL;
    CHECK_OK(ivf_kmeans_train(x, n, d, d, k, &o, &hier, &err), &err);
    CHECK(hier.n_coarse == 32);
    {
        ivf_kmeans_result serial;
        o.pool = NULL;
        CHECK_OK(ivf_kmeans_train(x, n, d, d, k, &o, &serial, &err), &err);
        CHECK(memcmp(serial.centroids, hier.centroids, sizeof(float) * k * d) == 0);
        CHECK(memcmp(serial.child_off, hier.child_off, sizeof(uint32_t) * (hier.n_coarse + 1)) == 0);
        ivf_kmeans_result_free(&serial);
        o.pool = pool;
    }
    CHECK(hier.child_off && hier.child_off[0] == 0 && hier.child_off[hier.n_coarse] == k);
    CHECK(unit_rows(hier.centroids, k, d));
    CHECK(unit_rows(hier.coarse, hier.n_coarse, d));
    double of = exact_objective(x, n, d, flat.centroids, k);
    double oh = exact_objective(x, n, d, hier.centroids, k);
    printf("k-means k=%u n=%lld: flat objective %.5f, hierarchical %.5f (%.2f%%)\n", k,
           (long long)n, of, oh, 100.0 * (oh - of) / of);
    CHECKF(oh <= of * 1.05, "hierarchical %.6f vs flat %.6f", oh, of);
    /* The fine-tune iterations should not make things worse. */
    CHECK(hier.n_trace == 2);
    CHECK(hier.n_trace < 2 || hier.trace[1] <= hier.trace[0] + 1e-4);

    /* Two-level assignment: probing all coarse clusters is exact. */
    ivf_assigner *ex = NULL, *all = NULL, *def = NULL;
    ivf_assign_opts ao = {0};
    ao.pool = pool;
    CHECK_OK(ivf_assigner_new(hier.centroids, k, d, NULL, 0, NULL, &ao, &ex, &err), &err);
    ao.n_probe_coarse = hier.n_coarse;
    CHECK_OK(ivf_assigner_new(hier.centroids, k, d, hier.coarse, hier.n_coarse, hier.child_off,
                              &ao, &all, &err),
             &err);
    ao.n_probe_coarse = 0;
    CHECK_OK(ivf_assigner_new(hier.centroids, k, d, hier.coarse, hier.n_coarse, hier.child_off,
                              &ao, &def, &err),
             &err);
    const int64_t na = 5000;
    uint32_t *i1 = malloc(sizeof(uint32_t) * na), *i2 = malloc(sizeof(uint32_t) * na);
    float *p1 = malloc(sizeof(float) * na), *p2 = malloc(sizeof(float) * na);
    ivf_assign(ex, x, na, d, i1, p1);
    ivf_assign(all, x, na, d, i2, p2);
    CHECK(memcmp(i1, i2, sizeof(uint32_t) * na) == 0);
    /* The default two-level search against a per-row reference (every coarse score,
     * the p = 8 best, then every child of those), and the same ids whatever the rows
     * per call: its blocks follow the call, the answer must not. */
    {
        ivf_assign(def, x, na, d, i1, p1);
        int64_t bad = 0, cut[] = {0, 1, 8, 1508, 3333, na};
        for (int c = 0; c + 1 < (int)(sizeof cut / sizeof *cut); c++)
            ivf_assign(def, x + (size_t)cut[c] * d, cut[c + 1] - cut[c], d, i2 + cut[c],
                       p2 + cut[c]);
        CHECK(memcmp(i1, i2, sizeof(uint32_t) * na) == 0);
        int64_t skipped = 0;
        for (int64_t i = 0; i < na; i++) {
            /* the 9 best coarse clusters, so that a row whose 8th and 9th are closer than
             * rounding (either may be probed) can be left out */
            const float *xi = x + (size_t)i * d;
            uint32_t top[9];
            float top_ip[9];
            for (int t = 0; t < 9; t++) top_ip[t] = -INFINITY, top[t] = 0;
            for (uint32_t m = 0; m < hier.n_coarse; m++) {
                float v = dotf(xi, hier.coarse + (size_t)m * d, d);
                int t = 9;
                while (t > 0 && v > top_ip[t - 1]) t--;
                if (t == 9) continue;
                memmove(top + t + 1, top + t, sizeof *top * (size_t)(8 - t));
                memmove(top_ip + t + 1, top_ip + t, sizeof *top_ip * (size_t)(8 - t));
                top[t] = m;
                top_ip[t] = v;
            }
            if (top_ip[7] - top_ip[8] < 1e-5f) {
                skipped++;
                continue;
            }
            float best = -INFINITY;
            for (int t = 0; t < 8; t++)
                for (uint32_t j = hier.child_off[top[t]]; j < hier.child_off[top[t] + 1]; j++) {
                    float v = dotf(xi, hier.centroids + (size_t)j * d, d);
                    if (v > best) best = v;
                }
            float got = dotf(xi, hier.centroids + (size_t)i1[i] * d, d);
            bad += fabsf(got - best) > 1e-5f || fabsf(p1[i] - best) > 1e-5f;
        }
        CHECK(skipped < na / 100);
        CHECKF(bad == 0, "two-level assignment: %lld of %lld rows differ from the reference",
               (long long)bad, (long long)na);
    }
    double rec = ivf_assign_recall(def, x, n, d, 4000, 5);
    printf("two-level assignment (p = 8 of %u coarse): recall of the nearest centroid %.4f\n",
           hier.n_coarse, rec);
    CHECKF(rec >= 0.95, "recall %.4f", rec);
    CHECK(ivf_assign_recall(all, x, n, d, 2000, 6) == 1.0);
    free(i1);
    free(i2);
    free(p1);
    free(p2);
    ivf_assigner_free(ex);
    ivf_assigner_free(all);
    ivf_assigner_free(def);
    ivf_kmeans_result_free(&flat);
    ivf_kmeans_result_free(&hier);
    free(x);
}

static void test_degenerate(cm_pool *pool)
{
    chimera_error err;
    ivf_kmeans_result r;
    ivf_kmeans_opts o = {0};
    o.pool = pool;
    const uint32_t d = 13;
    float *x = clustered(500, d, 5, 0.1, 13);
    /* k > n: error, nothing allocated. */
    CHECK_STATUS(ivf_kmeans_train(x, 10, d, d, 11, &o, &r, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECK(r.centroids == NULL);
    CHECK(strstr(err.msg, "at least") != NULL);
    CHECK_STATUS(ivf_kmeans_train(x, 10, d, d, 0, &o, &r, &err), CHIMERA_ERR_INVALID_ARG, &err);
    /* k == n: every point its own cluster, objective ~ 0. */
    CHECK_OK(ivf_kmeans_train(x, 50, d, d, 50, &o, &r, &err), &err);
    CHECK(exact_objective(x, 50, d, r.centroids, 50) < 1e-5);
    ivf_kmeans_result_free(&r);
    /* k == 1: the normalised mean (of all points: lift the sample cap of 64 per
     * centroid, which would otherwise train on 64 of the 500). */
    o.max_points_per_centroid = 1000;
    CHECK_OK(ivf_kmeans_train(x, 500, d, d, 1, &o, &r, &err), &err);
    CHECK(r.n_train == 500);
    o.max_points_per_centroid = 0;
    double mean[13] = {0}, s = 0;
    for (int i = 0; i < 500; i++)
        for (uint32_t t = 0; t < d; t++) mean[t] += x[i * d + t];
    for (uint32_t t = 0; t < d; t++) s += mean[t] * mean[t];
    double maxdiff = 0;
    for (uint32_t t = 0; t < d; t++) {
        double diff = fabs(mean[t] / sqrt(s) - r.centroids[t]);
        if (diff > maxdiff) maxdiff = diff;
    }
    CHECKF(maxdiff < 1e-5, "k=1 centroid differs from the mean by %g", maxdiff);
    ivf_kmeans_result_free(&r);
    /* Duplicates: 400 points that are 8 distinct vectors, 20 clusters, both modes. */
    float *dup = malloc(sizeof(float) * 400 * d);
    for (int i = 0; i < 400; i++) memcpy(dup + i * d, x + (i % 8) * d, sizeof(float) * d);
    for (int mode = KMEANS_FLAT; mode <= KMEANS_HIERARCHICAL; mode++) {
        o.mode = (ivf_kmeans_mode)mode;
        CHECK_OK(ivf_kmeans_train(dup, 400, d, d, 20, &o, &r, &err), &err);
        int finite = 1;
        for (uint32_t i = 0; i < 20 * d; i++) finite &= isfinite(r.centroids[i]);
        CHECK(finite);
        CHECK(unit_rows(r.centroids, 20, d));
        CHECKF(exact_objective(dup, 400, d, r.centroids, 20) < 1e-5, "mode %d", mode);
        ivf_kmeans_result_free(&r);
    }
    /* Row stride larger than d (a view into wider rows). */
    o.mode = KMEANS_FLAT;
    float *wide = calloc(500 * 16, sizeof(float));
    for (int i = 0; i < 500; i++) memcpy(wide + i * 16, x + i * d, sizeof(float) * d);
    ivf_kmeans_result a, b;
    CHECK_OK(ivf_kmeans_train(x, 500, d, d, 7, &o, &a, &err), &err);
    CHECK_OK(ivf_kmeans_train(wide, 500, d, 16, 7, &o, &b, &err), &err);
    CHECK(memcmp(a.centroids, b.centroids, sizeof(float) * 7 * d) == 0);
    ivf_kmeans_result_free(&a);
    ivf_kmeans_result_free(&b);
    free(wide);
    free(dup);
    free(x);
}

static void test_assign_exact(cm_pool *pool)
{
    const int64_t n = 3000;
    const uint32_t d = 21, k = 2500; /* more than one IVF_TILE_COLS tile */
    float *x = clustered(n, d, 50, 0.2, 14);
    float *c = clustered(k, d, 50, 0.2, 15);
    ivf_assigner *a = NULL;
    ivf_assign_opts ao = {0};
    ao.pool = pool;
    chimera_error err;
    CHECK_OK(ivf_assigner_new(c, k, d, NULL, 0, NULL, &ao, &a, &err), &err);
    uint32_t *id = malloc(sizeof(uint32_t) * n);
    float *ip = malloc(sizeof(float) * n);
    ivf_assign(a, x, n, d, id, ip);
    int agree = 1;
    for (int64_t i = 0; i < n; i++) {
        double best = -1e30;
        uint32_t bj = 0;
        for (uint32_t j = 0; j < k; j++) {
            double s = 0;
            for (uint32_t t = 0; t < d; t++) s += (double)x[i * d + t] * c[j * d + t];
            if (s > best) {
                best = s;
                bj = j;
            }
        }
        if (id[i] != bj && fabs(ip[i] - best) > 1e-5) agree = 0;
        if (fabs(ip[i] - best) > 1e-5) agree = 0;
    }
    CHECK(agree);
    CHECK(ivf_assign_recall(a, x, n, d, 0, 1) == 1.0);
    ivf_assigner_free(a);
    CHECK_STATUS(ivf_assigner_new(c, 0, d, NULL, 0, NULL, &ao, &a, &err), CHIMERA_ERR_INVALID_ARG,
                 &err);
    CHECK(a == NULL);

    /* Postings from this assignment. */
    ivf_postings p;
    CHECK_OK(ivf_postings_build(id, n, k, &p, &err), &err);
    CHECK(p.offsets[0] == 0 && p.offsets[k] == n);
    char *seen = calloc((size_t)n, 1);
    int ok = 1;
    for (uint32_t j = 0; j < k; j++) {
        if (p.offsets[j] > p.offsets[j + 1]) ok = 0;
        for (int64_t q = p.offsets[j]; q < p.offsets[j + 1]; q++) {
            uint32_t t = p.ids[q];
            if (t >= n || seen[t] || id[t] != j) ok = 0;
            if (t < n) seen[t] = 1;
            if (q > p.offsets[j] && p.ids[q - 1] >= t) ok = 0;
        }
    }
    for (int64_t i = 0; i < n; i++) ok &= seen[i];
    CHECK(ok);
    ivf_postings_stats st;
    CHECK(ivf_postings_stats_get(&p, &st) == 0);
    CHECK(st.min <= st.median && st.median <= st.max);
    CHECK(st.imbalance >= 1.0 - 1e-9);
    CHECK(fabs(st.mean - (double)n / k) < 1e-9);
    ivf_postings_free(&p);
    /* Bad assignment is refused. */
    id[5] = k;
    CHECK_STATUS(ivf_postings_build(id, n, k, &p, &err), CHIMERA_ERR_INVALID_ARG, &err);
    /* Balanced case: imbalance exactly 1. */
    for (int64_t i = 0; i < 1000; i++) id[i] = (uint32_t)(i % 10);
    CHECK_OK(ivf_postings_build(id, 1000, 10, &p, &err), &err);
    CHECK(ivf_postings_stats_get(&p, &st) == 0);
    CHECK_NEAR(st.imbalance, 1.0, 1e-12);
    CHECK(st.min == 100 && st.max == 100 && st.n_empty == 0);
    ivf_postings_free(&p);
    free(seen);
    free(id);
    free(ip);
    free(c);
    free(x);
}

/* Every allocation failure becomes CHIMERA_ERR_NOMEM with nothing left allocated (the
 * sanitizer build reports any leak), for flat and hierarchical k-means and for
 * assigner creation. Single-threaded: the failure hook is process-wide. */
static void test_alloc_failures(void)
{
    const uint32_t d = 9;
    float *x = clustered(3000, d, 20, 0.1, 16);
    int flat_ok = 0, hier_ok = 0, failures = 0, bad = 0;
    for (int64_t fail = 0; fail < 400 && !(flat_ok && hier_ok); fail++) {
        for (int mode = KMEANS_FLAT; mode <= KMEANS_HIERARCHICAL; mode++) {
            ivf_kmeans_opts o = {0};
            o.mode = (ivf_kmeans_mode)mode;
            o.n_iter = 3;
            o.n_coarse = 6;
            ivf_kmeans_result r;
            chimera_error err;
            cm_alloc_fail_after(fail);
            chimera_status st = ivf_kmeans_train(x, 3000, d, d, 40, &o, &r, &err);
            cm_alloc_fail_after(-1);
            if (st == CHIMERA_OK) {
                if (mode == KMEANS_FLAT) flat_ok = 1; else hier_ok = 1;
                ivf_kmeans_result_free(&r);
            } else if (st == CHIMERA_ERR_NOMEM && r.centroids == NULL) {
                failures++;
            } else {
                bad++;
            }
        }
        ivf_assigner *a = NULL;
        chimera_error err;
        cm_alloc_fail_after(fail);
        chimera_status st = ivf_assigner_new(x, 40, d, NULL, 0, NULL, NULL, &a, &err);
        cm_alloc_fail_after(-1);
        if (st == CHIMERA_OK) ivf_assigner_free(a);
        else if (st != CHIMERA_ERR_NOMEM || a != NULL) bad++;
    }
    CHECK(flat_ok && hier_ok);
    CHECK(failures > 10);
    CHECK(bad == 0);
    free(x);
}

/* KMEANS_AUTO: flat Lloyd while it costs at most 2e10 multiply-adds (n_train x k x d x
 * iterations); past that, below 4096 clusters, the hierarchical training's centroids
 * returned flat (no coarse level); from 4096 clusters on, hierarchical with its level. */
static void test_auto_mode(cm_pool *pool)
{
    const int64_t n = 70000;
    const uint32_t d = 32;
    float *x = clustered(n, d, 300, 0.12, 13);
    chimera_error err;
    /* k = 512: 32,768 x 512 x 32 x 10 = 5.4e9, flat; k = 1024: 65,536 x 1024 x 32 x 10 =
     * 2.1e10, hierarchical returned flat; k = 4096: hierarchical, 64 coarse clusters */
    static const uint32_t ks[] = {512, 1024, 4096};
    for (int i = 0; i < 3; i++) {
        uint32_t k = ks[i];
        ivf_kmeans_opts o = {0};
        o.pool = pool;
        ivf_kmeans_result au, ref;
        CHECK_OK(ivf_kmeans_train(x, n, d, d, k, &o, &au, &err), &err);
        o.mode = i == 0 ? KMEANS_FLAT : KMEANS_HIERARCHICAL;
        CHECK_OK(ivf_kmeans_train(x, n, d, d, k, &o, &ref, &err), &err);
        CHECKF(memcmp(au.centroids, ref.centroids, sizeof(float) * k * d) == 0,
               "auto at k = %u trains as the %s mode", k, i == 0 ? "flat" : "hierarchical");
        if (i < 2) CHECK(au.n_coarse == 0 && !au.coarse && !au.child_off);
        else CHECK(au.n_coarse == 64 && au.coarse && au.child_off);
        CHECK(ref.n_coarse == (i == 0 ? 0u : i == 1 ? 32u : 64u));
        ivf_kmeans_result_free(&au);
        ivf_kmeans_result_free(&ref);
    }
    free(x);
}

int main(void)
{
    cm_pool *pool = cm_pool_new(2);
    CHECK(pool != NULL);
    test_flat_monotone(pool);
    test_hierarchical(pool);
    test_auto_mode(pool);
    test_degenerate(pool);
    test_assign_exact(pool);
    test_alloc_failures();
    cm_pool_free(pool);
    return check_report();
}
