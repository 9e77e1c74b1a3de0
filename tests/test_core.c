/* Core utilities: the thread pool runs every task exactly once for any thread count;
 * top-k selection equals a full sort under the documented tie rule; the RNG is
 * deterministic per (seed, stream); float16 conversion is exact for every half value
 * and rounds to nearest-even; the allocation funnel's failure injection fails exactly
 * the n-th allocation; error prefixes keep the message. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/error.h"
#include "core/f16.h"
#include "core/pool.h"
#include "core/rng.h"
#include "core/topk.h"
#include "core/alloc.h"

typedef struct {
    _Atomic int *hits;
    _Atomic int64_t sum;
    int n_workers;
    _Atomic int bad_worker;
} pool_ctx;

static void pool_task(void *ctx, int64_t t, int worker)
{
    pool_ctx *c = ctx;
    atomic_fetch_add(&c->hits[t], 1);
    atomic_fetch_add(&c->sum, t);
    if (worker < 0 || worker >= c->n_workers) atomic_store(&c->bad_worker, 1);
}

static void test_pool(void)
{
    for (int threads = 1; threads <= 4; threads++) {
        cm_pool *p = cm_pool_new(threads);
        CHECK(p != NULL);
        CHECK(cm_pool_size(p) == threads);
        for (int64_t n = 0; n <= 1000; n += 333) {
            for (int rep = 0; rep < 3; rep++) {
                pool_ctx c = {cm_calloc((size_t)n + 1, sizeof(_Atomic int)), 0, threads, 0};
                cm_pool_run(p, n, pool_task, &c);
                int ok = 1;
                for (int64_t i = 0; i < n; i++) ok &= c.hits[i] == 1;
                CHECKF(ok, "threads=%d n=%lld: a task ran twice or never", threads, (long long)n);
                CHECK(c.sum == n * (n - 1) / 2);
                CHECK(!c.bad_worker);
                cm_free((void *)c.hits);
            }
        }
        cm_pool_free(p);
    }
}

typedef struct {
    float s;
    int64_t id;
} pair;

static int cmp_pair(const void *a, const void *b)
{
    const pair *x = a, *y = b;
    if (cm_rank_better(x->s, x->id, y->s, y->id)) return -1;
    if (cm_rank_better(y->s, y->id, x->s, x->id)) return 1;
    return 0;
}

/* cm_topsel keeps what cm_topk keeps, in the same order: streams of every length around
 * k and the buffer's size, few distinct scores (ties decided by id), -inf scores,
 * repeated pairs, and input sorted either way (quickselect's bad cases). */
static void test_topsel(void)
{
    cm_rng r;
    cm_rng_seed(&r, 11, 0);
    int bad = 0, trials = 0;
    for (int trial = 0; trial < 600; trial++, trials++) {
        uint32_t k = (uint32_t)cm_rng_below(&r, 70), cap = k + 1 + (uint32_t)cm_rng_below(&r, 2 * k + 2);
        uint32_t n = (uint32_t)cm_rng_below(&r, 4) == 0 ? (uint32_t)cm_rng_below(&r, k + 3)
                                                        : (uint32_t)cm_rng_below(&r, 20 * k + 40);
        int order = (int)cm_rng_below(&r, 4); /* random, ascending, descending, one value */
        float *hs = cm_malloc(((size_t)k + 1) * sizeof *hs), *ts = cm_malloc((size_t)cap * sizeof *ts);
        int64_t *hi = cm_malloc(((size_t)k + 1) * sizeof *hi), *ti = cm_malloc((size_t)cap * sizeof *ti);
        cm_topk h;
        cm_topsel t;
        cm_topk_init(&h, k, hs, hi);
        cm_topsel_init(&t, k, cap, ts, ti);
        for (uint32_t i = 0; i < n; i++) {
            float s = order == 0   ? (float)cm_rng_below(&r, 25)
                      : order == 1 ? (float)i
                      : order == 2 ? (float)(n - i)
                                   : 3.0f;
            if (cm_rng_below(&r, 10) == 0) s = -INFINITY;
            int64_t id = (int64_t)cm_rng_below(&r, order == 3 ? 50 : 100000);
            cm_topk_push(&h, s, id);
            cm_topsel_push(&t, s, id);
        }
        cm_topk_sort(&h);
        cm_topsel_sort(&t);
        int ok = h.n == t.n;
        for (uint32_t i = 0; ok && i < h.n; i++)
            ok = hs[i] == ts[i] && hi[i] == ti[i];
        if (!ok && bad++ < 5)
            fprintf(stderr, "topsel trial %d: k=%u cap=%u n=%u order=%d differs from cm_topk\n",
                    trial, k, cap, n, order);
        cm_free(hs);
        cm_free(ts);
        cm_free(hi);
        cm_free(ti);
    }
    CHECKF(bad == 0, "cm_topsel differs from cm_topk in %d of %d streams", bad, trials);
}

static void test_topk(void)
{
    cm_rng r;
    cm_rng_seed(&r, 7, 0);
    for (int trial = 0; trial < 200; trial++) {
        int n = (int)cm_rng_below(&r, 300), k = 1 + (int)cm_rng_below(&r, 50);
        pair *all = cm_malloc((size_t)(n + 1) * sizeof *all);
        float *hs = cm_malloc((size_t)k * sizeof *hs), *os = cm_malloc((size_t)k * sizeof *os);
        int64_t *hi = cm_malloc((size_t)k * sizeof *hi), *oi = cm_malloc((size_t)k * sizeof *oi);
        cm_topk h;
        cm_topk_init(&h, (uint32_t)k, hs, hi);
        for (int i = 0; i < n; i++) {
            /* few distinct scores, so ties are common */
            all[i].s = (float)cm_rng_below(&r, 20);
            all[i].id = (int64_t)cm_rng_below(&r, 1000);
            cm_topk_push(&h, all[i].s, all[i].id);
        }
        qsort(all, (size_t)n, sizeof *all, cmp_pair);
        cm_topk_emit(&h, oi, os);
        int ok = 1;
        for (int i = 0; i < k; i++) {
            if (i < n) ok &= oi[i] == all[i].id && os[i] == all[i].s;
            else ok &= oi[i] == -1 && os[i] == -INFINITY;
        }
        CHECKF(ok, "trial %d: top-%d of %d differs from the sorted order", trial, k, n);
        cm_free(all);
        cm_free(hs);
        cm_free(os);
        cm_free(hi);
        cm_free(oi);
    }
}

static void test_rng(void)
{
    cm_rng a, b, c, g_rng;
    cm_rng_seed(&g_rng, 42, 9);
    cm_rng_seed(&a, 42, 3);
    cm_rng_seed(&b, 42, 3);
    cm_rng_seed(&c, 42, 4);
    int same = 1, diff = 0;
    double mean = 0, var = 0;
    for (int i = 0; i < 20000; i++) {
        uint64_t x = cm_rng_next(&a);
        same &= x == cm_rng_next(&b);
        diff += x != cm_rng_next(&c);
        double g = cm_rng_gauss(&g_rng);
        mean += g;
        var += g * g;
    }
    CHECK(same);
    CHECK(diff > 19990);
    mean /= 20000;
    var = var / 20000 - mean * mean;
    CHECK_NEAR(mean, 0.0, 0.05); /* 7 standard errors */
    CHECK_NEAR(var, 1.0, 0.07);
    int in_range = 1;
    for (int i = 0; i < 10000; i++) in_range &= cm_rng_below(&a, 7) < 7;
    CHECK(in_range);
}

static void test_f16(void)
{
    int roundtrip = 1;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = cm_f16_to_f32((uint16_t)h);
        if (f != f) continue; /* NaN payloads need not survive */
        roundtrip &= cm_f32_to_f16(f) == h;
    }
    CHECK(roundtrip);
    CHECK(cm_f16_to_f32(0x3c00) == 1.0f);
    CHECK(cm_f16_to_f32(0xc000) == -2.0f);
    CHECK(cm_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(cm_f32_to_f16(65520.0f) == 0x7c00); /* rounds up to Inf */
    CHECK(cm_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00); /* tie -> even */
    CHECK(cm_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02);
    CHECK(cm_f32_to_f16(0x1p-25f) == 0x0000); /* tie with zero -> even (zero) */
}

static void test_alloc_injection(void)
{
    cm_alloc_fail_after(2);
    void *a = cm_malloc(8), *b = cm_malloc(8), *c = cm_malloc(8);
    CHECK(a && b && !c);
    cm_alloc_fail_after(-1);
    void *d = cm_malloc(8);
    CHECK(d != NULL);
    cm_free(a);
    cm_free(b);
    cm_free(d);
    size_t out;
    CHECK(cm_mul_size(SIZE_MAX / 2, 3, &out) == -1);
    CHECK(cm_calloc(SIZE_MAX / 2, 3) == NULL);
}

static void test_errors(void)
{
    chimera_error e;
    CHECK(cm_fail(&e, CHIMERA_ERR_DIM, "dim %d", 7) == CHIMERA_ERR_DIM);
    CHECK(strcmp(e.msg, "dim 7") == 0);
    cm_fail_prefix(&e, "file %s", "x.npy");
    CHECK(strcmp(e.msg, "file x.npy: dim 7") == 0);
    char longname[400];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    cm_fail_prefix(&e, "%s", longname);
    CHECK(strlen(e.msg) == sizeof e.msg - 1);
    CHECK(cm_fail(NULL, CHIMERA_ERR_IO, "x") == CHIMERA_ERR_IO);
    CHECK(strcmp(chimera_status_str(CHIMERA_ERR_CORRUPT), "CHIMERA_ERR_CORRUPT") == 0);
}

int main(void)
{
    test_pool();
    test_topk();
    test_topsel();
    test_rng();
    test_f16();
    test_alloc_injection();
    test_errors();
    return check_report();
}
