/* Exact-search throughput against the machine's sgemm peak, measured side by side.
 *
 *   bench_exact [n_docs=12500] [n_queries=256] [threads=0 (all)]
 *
 * Generates a synthetic corpus in memory (~80 tokens per document, d = 128, 32-token
 * queries), then reports: sgemm GFLOP/s for a square 2048^3 product and for exact
 * search's own shape (512 document rows x 4096 query rows x 128), each on one thread and
 * on all threads (independent products per thread, as exact search runs them); and
 * exact search's queries/s and GFLOP/s, with the ratio to the measured peak. */
#include <stdio.h>
#include <stdlib.h>

#include "core/blas.h"
#include "core/clock.h"
#include "core/pool.h"
#include "data/synth.h"
#include "search/exact.h"
#include "core/alloc.h"

typedef struct {
    int m, n, k, reps;
    float **a, **b, **c;
} gemm_job;

static void gemm_task(void *ctx, int64_t t, int w)
{
    gemm_job *j = ctx;
    (void)t;
    for (int r = 0; r < j->reps; r++)
        cm_sgemm_nt(j->m, j->n, j->k, 1.0f, j->a[w], j->k, j->b[w], j->k, 0.0f, j->c[w], j->n);
}

/* GFLOP/s of `threads` concurrent products of shape m x n x k. */
static double gemm_rate(cm_pool *pool, int m, int n, int k)
{
    int nw = cm_pool_size(pool);
    gemm_job j = {m, n, k, 1, cm_malloc(nw * sizeof(float *)), cm_malloc(nw * sizeof(float *)),
                  cm_malloc(nw * sizeof(float *))};
    for (int w = 0; w < nw; w++) {
        j.a[w] = cm_aligned_alloc(64, (size_t)m * k * 4);
        j.b[w] = cm_aligned_alloc(64, (size_t)n * k * 4);
        j.c[w] = cm_aligned_alloc(64, (size_t)m * n * 4);
        for (size_t i = 0; i < (size_t)m * k; i++) j.a[w][i] = (float)(i % 7) * 0.1f;
        for (size_t i = 0; i < (size_t)n * k; i++) j.b[w][i] = (float)(i % 5) * 0.1f;
    }
    cm_pool_run(pool, nw, gemm_task, &j); /* warm up */
    double flop_per = 2.0 * m * n * k, best = 0;
    j.reps = (int)(2e10 / flop_per) + 1;
    for (int trial = 0; trial < 3; trial++) {
        double t0 = cm_now();
        cm_pool_run(pool, nw, gemm_task, &j);
        double rate = flop_per * j.reps * nw / (cm_now() - t0) * 1e-9;
        best = rate > best ? rate : best;
    }
    for (int w = 0; w < nw; w++) {
        cm_free(j.a[w]);
        cm_free(j.b[w]);
        cm_free(j.c[w]);
    }
    cm_free(j.a);
    cm_free(j.b);
    cm_free(j.c);
    return best;
}

int main(int argc, char **argv)
{
    int64_t n_docs = argc > 1 ? atoll(argv[1]) : 12500, nq = argc > 2 ? atoll(argv[2]) : 256;
    int threads = argc > 3 ? atoi(argv[3]) : 0;
    cm_pool *one = cm_pool_new(1), *all = cm_pool_new(threads);
    printf("blas core %s, %d threads\n", cm_blas_corename(), cm_pool_size(all));
    printf("%-34s %10s %10s\n", "sgemm (GFLOP/s, best of 3)", "1 thread", "all");
    double sq1 = gemm_rate(one, 2048, 2048, 2048), sqa = gemm_rate(all, 2048, 2048, 2048);
    double sk1 = gemm_rate(one, 512, 4096, 128), ska = gemm_rate(all, 512, 4096, 128);
    printf("%-34s %10.1f %10.1f\n", "2048 x 2048 x 2048", sq1, sqa);
    printf("%-34s %10.1f %10.1f\n", "512 x 4096 x 128 (exact's shape)", sk1, ska);

    chimera_synth_opts o = {.n_docs = n_docs, .dim = 128, .n_queries = nq, .seed = 1};
    data_synth_corpus s;
    chimera_error err;
    double t0 = cm_now();
    if (data_synth_generate(&o, &s, &err) != CHIMERA_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("corpus: %lld docs, %lld tokens, %lld queries x %u tokens (generated in %.1fs)\n",
           (long long)s.n_docs, (long long)s.n_tokens, (long long)s.n_queries, s.query_len,
           cm_now() - t0);
    data_corpus c;
    data_queries q;
    if (data_corpus_wrap(&c, s.tokens, s.n_tokens, 128, s.doclens, s.n_docs, NULL, NULL, &err) ||
        data_queries_new(&q, s.queries, s.n_queries, 128, NULL, s.query_len, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int64_t *ids = cm_malloc((size_t)nq * 100 * sizeof *ids);
    float *sc = cm_malloc((size_t)nq * 100 * sizeof *sc);
    double flops = 2.0 * (double)s.n_tokens * (double)(nq * s.query_len) * 128;
    printf("%-10s %8s %10s %10s %10s\n", "threads", "k", "seconds", "queries/s", "GFLOP/s");
    int counts[2] = {1, cm_pool_size(all)};
    for (int i = 0; i < (counts[1] > 1 ? 2 : 1); i++) {
        t0 = cm_now();
        if (sp_exact_search(&c, &q, 100, counts[i], NULL, NULL, ids, sc, &err) != CHIMERA_OK) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        double el = cm_now() - t0;
        double peak = i == 0 ? sk1 : ska;
        printf("%-10d %8d %10.2f %10.1f %10.1f  (%.0f%% of the sgemm rate at that shape)\n",
               counts[i], 100, el, (double)nq / el, flops / el * 1e-9, 100 * flops / el * 1e-9 / peak);
    }
    cm_free(ids);
    cm_free(sc);
    data_queries_free(&q);
    data_corpus_free(&c);
    data_synth_free(&s);
    cm_pool_free(one);
    cm_pool_free(all);
    return 0;
}
