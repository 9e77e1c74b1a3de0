/* chimera tune | bench: the target-recall tuner and the recall/throughput sweep. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Truth ids [nq x k]: from a TREC file, or exact search over the corpus. */
static int load_truth(const char *cmd, const char *truth_path, chimera_corpus *c,
                      chimera_queries *q, uint32_t k, int threads, int64_t **out)
{
    int64_t nq = chimera_queries_count(q);
    int64_t *ids = malloc((size_t)nq * k * sizeof *ids);
    float *sc = malloc((size_t)nq * k * sizeof *sc);
    chimera_error err;
    if (!ids || !sc) {
        free(ids);
        free(sc);
        fprintf(stderr, "chimera %s: out of memory\n", cmd);
        return 1;
    }
    if (truth_path) {
        chimera_run *run;
        if (chimera_run_read(truth_path, &run, &err) != CHIMERA_OK ||
            chimera_run_topk_ids(run, nq, k, ids, &err) != CHIMERA_OK) {
            free(ids);
            free(sc);
            return cli_fail(cmd, &err);
        }
        chimera_run_free(run);
    } else {
        chimera_exact_opts eo = {.n_threads = threads, .progress = cli_progress};
        if (chimera_corpus_search(c, q, k, &eo, ids, sc, &err) != CHIMERA_OK) {
            fprintf(stderr, "chimera %s: %s\n", cmd, err.msg);
            free(ids);
            free(sc);
            return 1;
        }
    }
    free(sc);
    *out = ids;
    return 0;
}

int cmd_tune(int argc, char **argv)
{
    const char *queries = NULL, *qlens = NULL, *truth = NULL, *tokens = NULL, *doclens = NULL;
    const char *ids_path = NULL, *backend = NULL;
    double target = 0.95, heldout = 0.5;
    uint32_t k = 100, threads = 0, n_pseudo = 200;
    int64_t seed = 0;
    int no_save = 0;
    cli_opt opts[] = {
        {"--queries", OPT_STR, &queries, "your queries .npy (else pseudo-queries from the corpus)", 0, 0},
        {"--qlens", OPT_STR, &qlens, "query lengths .npy, for [total, dim] queries", 0, 0},
        {"--truth", OPT_STR, &truth, "their exact top-k (TREC, from chimera exact); default: "
                                     "computed by exact search over the corpus", 0, 0},
        {"--tokens", OPT_STR, &tokens, "corpus tokens (default: the source the build recorded)", 0, 0},
        {"--doclens", OPT_STR, &doclens, "corpus doclens, with --tokens", 0, 0},
        {"--ids", OPT_STR, &ids_path, "corpus document ids, with --tokens (as given to build)", 0, 0},
        {"--pseudo", OPT_COUNT, &n_pseudo,
         "pseudo-queries to sample without --queries (default 200)", 0, 0},
        {"--target-recall", OPT_F64, &target, "Recall@k to reach (default 0.95)", 0, 0},
        {"-k", OPT_COUNT, &k, "k of Recall@k (default 100)", 0, 0},
        {"--heldout", OPT_F64, &heldout, "fraction of the queries held out to check (default 0.5)", 0, 0},
        {"--seed", OPT_I64, &seed, "seed of the split and the pseudo-queries (default 0)", 0, 0},
        {"--threads", OPT_THREADS, &threads, "threads (default: all CPUs)", 0, 0},
        {"--backend", OPT_STR, &backend, "cpu, cuda or auto (default)", 0, 0},
        {"--no-save", OPT_FLAG, &no_save, "do not store the profile in the index", 0, 0},
    };
    const char *pos[1];
    int np = 0;
    int r = cli_parse("tune", "IDX [--queries Q.npy [--truth T.trec]] [--target-recall 0.95] [-k 100]",
                      argc, argv, 2, opts, sizeof opts / sizeof opts[0], pos, 1, &np);
    if (r) return r < 0 ? 2 : 0;
    chimera_backend be;
    if (cli_backend("tune", backend, &be)) return 2;
    if (np != 1) {
        fprintf(stderr, "chimera tune: give the index directory\n");
        return 2;
    }
    if (k == 0 || !(target > 0 && target <= 1)) {
        fprintf(stderr, "chimera tune: --target-recall %g, -k %u: need 0 < --target-recall <= 1 "
                        "and -k > 0\n", target, k);
        return 2;
    }
    if (!(heldout > 0 && heldout < 1)) {
        fprintf(stderr, "chimera tune: --heldout %g, expected a fraction in (0, 1)\n", heldout);
        return 2;
    }
    if (!tokens != !doclens || (ids_path && !tokens)) {
        fprintf(stderr, "chimera tune: --tokens and --doclens go together (--ids with them)\n");
        return 2;
    }
    if (truth && !queries) {
        fprintf(stderr, "chimera tune: --truth is the truth of --queries; give both\n");
        return 2;
    }
    chimera_error err;
    chimera_index *ix = NULL;
    chimera_corpus *c = NULL;
    chimera_queries *q = NULL;
    int64_t *tids = NULL;
    chimera_tune_result *res = NULL;
    int rc = 0;
    if (chimera_index_open(pos[0], NULL, &ix, &err) != CHIMERA_OK) return cli_fail("tune", &err);
    if (queries && chimera_queries_read(queries, qlens, &q, &err) != CHIMERA_OK) {
        rc = cli_fail("tune", &err);
        goto done;
    }
    if (q && chimera_queries_dim(q) != chimera_index_dim(ix)) {
        fprintf(stderr, "chimera tune: %s: queries have dimension %u, the index %s has %u\n",
                queries, chimera_queries_dim(q), pos[0], chimera_index_dim(ix));
        rc = 1;
        goto done;
    }
    /* the corpus: for exact truth, or for pseudo-queries */
    if (!truth || !q) {
        chimera_status cs = tokens ? chimera_corpus_open(tokens, doclens, ids_path, NULL, &c, &err)
                                   : chimera_index_source_open(ix, &c, &err);
        if (cs != CHIMERA_OK) {
            if (!tokens)
                fprintf(stderr, "chimera tune: %s: %s\n  (exact truth needs the corpus: give "
                                "--tokens T.npy --doclens L.npy [--ids I], the files the index "
                                "was built from, or --truth T.trec from chimera exact)\n",
                        pos[0], err.msg);
            else
                cli_fail("tune", &err);
            rc = 1;
            goto done;
        }
    }
    if (!q && chimera_corpus_sample_queries(c, n_pseudo, 0, (uint64_t)seed, &q, &err) != CHIMERA_OK) {
        rc = cli_fail("tune", &err);
        goto done;
    }
    if (!truth)
        printf("exact truth: %lld queries over %s (%lld documents)\n",
               (long long)chimera_queries_count(q), tokens ? tokens : "the index's source",
               (long long)chimera_corpus_n_docs(c));
    if ((rc = load_truth("tune", truth, c, q, k, (int)threads, &tids)) != 0) goto done;
    chimera_search_opts so = {.n_threads = (int)threads, .backend = be};
    res = malloc(sizeof *res);
    if (!res) {
        fprintf(stderr, "chimera tune: out of memory\n");
        rc = 1;
        goto done;
    }
    if (chimera_index_tune_heldout(ix, q, tids, k, k, target, heldout, (uint64_t)seed, &so, res,
                                   &err) != CHIMERA_OK) {
        fprintf(stderr, "chimera tune: %s\n", err.msg);
        rc = 1;
        goto done;
    }
    printf("tuning on %lld %squeries (the last walk of the tuning target %.4f):\n",
           (long long)res->n_tune, queries ? "" : "pseudo-", res->tune_target);
    /* k_interaction: "-" where off (0, or not below k_refine) */
    printf("%-8s %-8s %-13s %-9s %-7s %-10s %-9s\n", "n_probe", "k_refine", "k_interaction",
           "k_fullbit", "chunks", "Recall@k", "queries/s");
    for (int i = 0; i < res->n_points; i++) {
        const chimera_tune_point *p = &res->points[i];
        char ki[16] = "-";
        if (p->params.k_interaction && p->params.k_interaction < p->params.k_refine)
            snprintf(ki, sizeof ki, "%u", p->params.k_interaction);
        printf("%-8u %-8u %-13s %-9u %-7u %-10.4f %-9.1f\n", p->params.n_probe,
               p->params.k_refine, ki, p->params.k_fullbit, p->params.chunks, p->recall, p->qps);
    }
    char depth[120];
    cli_extra_flags(&res->best, depth, sizeof depth);
    printf("held-out Recall@%u %.4f, 95%% interval [%.4f, %.4f] on %lld queries, at --nprobe %u "
           "--k-refine %u --k-fullbit %u --chunks %u%s, %.1f queries/s\n",
           k, res->heldout_recall, res->heldout_low, res->heldout_high, (long long)res->n_heldout,
           res->best.n_probe, res->best.k_refine, res->best.k_fullbit, res->best.chunks, depth,
           res->qps);
    int too_small = res->heldout_need > res->n_heldout;
    if (too_small)
        printf("the query set is too small for target %.3f: the interval is %.4f wide at this "
               "spread; about %lld held-out queries (%lld in all at --heldout %.2f) would "
               "narrow it to +-%.4f\n", target, res->heldout_high - res->heldout_low,
               (long long)res->heldout_need, (long long)ceil((double)res->heldout_need / heldout),
               heldout, (1 - target) / 2);
    if (!res->reached) {
        printf("target not reached: the held-out lower bound %.4f is below %.3f%s; nothing "
               "stored\n", res->heldout_low, target,
               too_small ? " (more queries narrow the interval)"
                         : " (the index's bits may cap recall: chimera build --bits 8)");
        goto done;
    }
    printf("target met: held-out lower bound %.4f >= %.3f\n", res->heldout_low, target);
    if (!no_save) {
        chimera_index_close(ix); /* the manifest is replaced; reopen-safe either way */
        ix = NULL;
        if (chimera_index_profile_save(pos[0], k, target, res, &err) != CHIMERA_OK) {
            rc = cli_fail("tune", &err);
            goto done;
        }
        printf("stored as the profile for k=%u, recall %.3f: chimera search %s --recall %.3f -k %u\n",
               k, target, pos[0], target, k);
    }
done:
    free(res);
    free(tids);
    chimera_queries_free(q);
    chimera_corpus_close(c);
    chimera_index_close(ix);
    return rc;
}

/* ---- bench ------------------------------------------------------------------------- */

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* bench's k_fullbit for k at multiple mul: at least 20 */
static uint32_t bench_fullbit(uint32_t k, uint32_t mul) { return k * mul > 20 ? k * mul : 20; }

int cmd_bench(int argc, char **argv)
{
    const char *queries = NULL, *truth = NULL, *ks = "10,100", *csv = "bench.csv";
    const char *tokens = NULL, *doclens = NULL, *backend = NULL;
    uint32_t threads = 0;
    int latency = 0;
    cli_opt opts[] = {
        {"--queries", OPT_STR, &queries, "queries .npy", 1, 0},
        {"--truth", OPT_STR, &truth, "their exact top-k (TREC, >= the largest k)", 0, 0},
        {"-k", OPT_STR, &ks, "cut-offs (default 10,100)", 0, 0},
        {"--csv", OPT_STR, &csv, "CSV output (default bench.csv)", 0, 0},
        {"--tokens", OPT_STR, &tokens, "corpus tokens: times exact search as the reference", 0, 0},
        {"--doclens", OPT_STR, &doclens, "corpus doclens, with --tokens", 0, 0},
        {"--threads", OPT_THREADS, &threads, "threads (default: all CPUs)", 0, 0},
        {"--latency", OPT_FLAG, &latency, "latency mode (one query at a time)", 0, 0},
        {"--backend", OPT_STR, &backend, "cpu, cuda or auto (default)", 0, 0},
    };
    const char *pos[1];
    int np = 0;
    int r = cli_parse("bench", "IDX --queries Q.npy --truth T.trec [-k 10,100] [--csv F]", argc,
                      argv, 2, opts, sizeof opts / sizeof opts[0], pos, 1, &np);
    if (r) return r < 0 ? 2 : 0;
    chimera_backend be;
    if (cli_backend("bench", backend, &be)) return 2;
    uint32_t kv[4];
    int nk = 0;
    for (const char *p = ks; *p && nk < 4;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v <= 0 || v > 10000) {
            fprintf(stderr, "chimera bench: bad -k '%s'\n", ks);
            return 2;
        }
        kv[nk++] = (uint32_t)v;
        p = *end == ',' ? end + 1 : end;
    }
    if (np != 1 || nk == 0 || (!truth && !(tokens && doclens))) {
        fprintf(stderr, "chimera bench: give IDX, --queries, and --truth or --tokens/--doclens\n");
        return 2;
    }
    uint32_t kmax = 0;
    for (int i = 0; i < nk; i++) kmax = kv[i] > kmax ? kv[i] : kmax;
    chimera_error err = {0};
    chimera_index *ix = NULL;
    chimera_queries *q = NULL;
    chimera_corpus *c = NULL;
    int64_t *tids = NULL, *ids = NULL;
    float *sc = NULL;
    double *lat = NULL;
    FILE *f = NULL;
    int rc = 0;
    if (chimera_index_open(pos[0], NULL, &ix, &err) != CHIMERA_OK ||
        chimera_queries_read(queries, NULL, &q, &err) != CHIMERA_OK ||
        (tokens && chimera_corpus_open(tokens, doclens, NULL, NULL, &c, &err) != CHIMERA_OK)) {
        rc = cli_fail("bench", &err);
        goto done;
    }
    int64_t nq = chimera_queries_count(q);
    double exact_qps = 0;
    if (c) { /* exact search: the reference point (and the truth when none is given) */
        int64_t *eids = malloc((size_t)nq * kmax * sizeof *eids);
        float *esc = malloc((size_t)nq * kmax * sizeof *esc);
        chimera_exact_opts eo = {.n_threads = (int)threads, .progress = cli_progress};
        double t0 = cli_now();
        chimera_status s = eids && esc ? chimera_corpus_search(c, q, kmax, &eo, eids, esc, &err)
                                       : CHIMERA_ERR_NOMEM;
        exact_qps = (double)nq / (cli_now() - t0);
        free(esc);
        if (s != CHIMERA_OK) {
            free(eids);
            fprintf(stderr, "chimera bench: exact search failed: %s\n", err.msg);
            rc = 1;
            goto done;
        }
        if (!truth) tids = eids;
        else free(eids);
    }
    if (!tids && (rc = load_truth("bench", truth, NULL, q, kmax, (int)threads, &tids)) != 0) goto done;
    ids = malloc((size_t)nq * kmax * sizeof *ids);
    sc = malloc((size_t)nq * kmax * sizeof *sc);
    lat = malloc((size_t)nq * sizeof *lat);
    f = fopen(csv, "w");
    if (!ids || !sc || !lat || !f) {
        fprintf(stderr, "chimera bench: cannot allocate or open %s\n", csv);
        rc = 1;
        goto done;
    }
    fprintf(f, "system,k,n_probe,k_refine,k_fullbit,chunks,recall,qps,lat_mean_ms,lat_p50_ms,"
               "lat_p95_ms,lat_p99_ms,generate_ms,refine_ms,score1_ms,fullbit_ms\n");
    printf("%-4s %-7s %-8s %-9s %-6s %-8s %-9s %-8s %-8s %-8s %-8s\n", "k", "n_probe", "k_refine",
           "k_fullbit", "chunks", "recall", "QPS", "mean ms", "p50 ms", "p95 ms", "p99 ms");
    if (c)
        for (int i = 0; i < nk; i++) {
            printf("%-4u %-43s %-9.1f (exact search)\n", kv[i], "exact", exact_qps);
            fprintf(f, "exact,%u,,,,,1.0,%.3f,,,,,,,,\n", kv[i], exact_qps);
        }
    static const uint32_t probes[] = {4, 8, 16, 32};
    static const uint32_t fmul[] = {1, 2, 4, 8};
    chimera_search_opts so = {.n_threads = (int)threads, .latency_mode = latency, .backend = be};
    for (int ki = 0; ki < nk; ki++)
        for (size_t pi = 0; pi < sizeof probes / sizeof probes[0]; pi++)
            for (size_t fi = 0; fi < sizeof fmul / sizeof fmul[0]; fi++) {
                uint32_t k = kv[ki];
                chimera_search_params sp = {.n_probe = probes[pi]};
                sp.k_fullbit = bench_fullbit(k, fmul[fi]);
                /* a small k's first multiples all floor at 20: one setting, measured once */
                if (fi > 0 && bench_fullbit(k, fmul[fi - 1]) == sp.k_fullbit) continue;
                sp.k_refine = sp.k_fullbit * 5;
                chimera_search_profile prof = {.latency = lat};
                if (chimera_index_search(ix, q, k, &sp, &so, ids, sc, &prof, &err) != CHIMERA_OK) {
                    fprintf(stderr, "chimera bench: %s\n", err.msg);
                    rc = 1;
                    goto done;
                }
                chimera_search_params_default(k, &sp);
                double rec = chimera_results_eval_recall(ids, k, tids, kmax, nq, k);
                qsort(lat, (size_t)nq, sizeof *lat, cmp_d);
                double mean = 0;
                for (int64_t i = 0; i < nq; i++) mean += lat[i];
                mean = 1e3 * mean / (double)nq;
                double p50 = 1e3 * lat[(nq - 1) / 2], p95 = 1e3 * lat[(int64_t)(0.95 * (nq - 1))],
                       p99 = 1e3 * lat[(int64_t)(0.99 * (nq - 1))], qps = (double)nq / prof.seconds;
                printf("%-4u %-7u %-8u %-9u %-6u %-8.4f %-9.1f %-8.2f %-8.2f %-8.2f %-8.2f\n", k,
                       sp.n_probe, sp.k_refine, sp.k_fullbit, sp.chunks, rec, qps, mean, p50, p95, p99);
                double n = (double)nq;
                fprintf(f, "chimera,%u,%u,%u,%u,%u,%.6f,%.3f,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f,%.4f,%.4f\n",
                        k, sp.n_probe, sp.k_refine, sp.k_fullbit, sp.chunks, rec, qps, mean, p50,
                        p95, p99, 1e3 * prof.t_generate / n, 1e3 * prof.t_refine / n,
                        1e3 * prof.t_score1 / n, 1e3 * prof.t_fullbit / n);
            }
    printf("wrote %s (plot it with: python3 bench/plot_sweep.py %s out.png)\n", csv, csv);
done:
    if (f) fclose(f);
    free(tids);
    free(ids);
    free(sc);
    free(lat);
    chimera_corpus_close(c);
    chimera_queries_free(q);
    chimera_index_close(ix);
    return rc;
}
