/* chimera search: the 3-stage pipeline over an index, with timing and a per-stage
 * profile. */
#include <math.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "shards.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *sorted, int64_t n, double p)
{
    if (n == 0) return 0;
    int64_t i = (int64_t)ceil(p * (double)n) - 1;
    if (i < 0) i = 0;
    if (i >= n) i = n - 1;
    return sorted[i];
}

static int search_main(int argc, char **argv, const char *const *fargs, int n_fargs);

/* "QID DOCID" lines (whitespace separated; blank lines and lines starting with # are
 * skipped): query QID (0 .. nq-1) may return only its listed ids; a query with no line
 * returns nothing. *out: nq filters. Prints what is wrong and returns -1 on a bad file. */
static int read_per_query(const char *path, int64_t nq, chimera_filter ***out)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "chimera search: %s: cannot open: %s\n", path, strerror(errno));
        return -1;
    }
    int64_t *cnt = calloc((size_t)nq + 1, sizeof *cnt), n = 0, cap = 1024;
    int64_t *qid = malloc((size_t)cap * sizeof *qid), *did = malloc((size_t)cap * sizeof *did);
    chimera_filter **flt = calloc((size_t)nq + 1, sizeof *flt);
    char line[256];
    int64_t lineno = 0;
    int rc = cnt && qid && did && flt ? 0 : -1;
    if (rc) fprintf(stderr, "chimera search: out of memory\n");
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (*p == '\0' || *p == '#') continue;
        char *end;
        errno = 0;
        long long q = strtoll(p, &end, 10), d;
        if (end == p || errno) goto bad;
        p = end;
        d = strtoll(p, &end, 10);
        if (end == p || errno) goto bad;
        while (isspace((unsigned char)*end)) end++;
        if (*end || q < 0 || q >= nq || d < 0) goto bad;
        if (n == cap) {
            cap *= 2;
            int64_t *a = realloc(qid, (size_t)cap * sizeof *a), *b = a ? realloc(did, (size_t)cap * sizeof *b) : NULL;
            if (a) qid = a;
            if (b) did = b;
            if (!a || !b) {
                fprintf(stderr, "chimera search: out of memory\n");
                rc = -1;
                break;
            }
        }
        qid[n] = q;
        did[n++] = d;
        cnt[q]++;
        continue;
    bad:
        fprintf(stderr, "chimera search: %s:%lld: expected \"QID DOCID\" with 0 <= QID < %lld "
                        "and DOCID >= 0\n", path, (long long)lineno, (long long)nq);
        rc = -1;
    }
    fclose(f);
    /* bucket the ids by query: cnt becomes each query's start */
    int64_t *buf = rc == 0 ? malloc((size_t)(n + 1) * sizeof *buf) : NULL;
    if (rc == 0 && !buf) {
        fprintf(stderr, "chimera search: out of memory\n");
        rc = -1;
    }
    if (rc == 0) {
        int64_t acc = 0;
        for (int64_t q = 0; q < nq; q++) {
            int64_t c = cnt[q];
            cnt[q] = acc;
            acc += c;
        }
        cnt[nq] = acc;
        for (int64_t i = 0; i < n; i++) buf[cnt[qid[i]]++] = did[i];
        for (int64_t q = nq; q > 0; q--) cnt[q] = cnt[q - 1];
        cnt[0] = 0;
    }
    for (int64_t q = 0; rc == 0 && q < nq; q++) {
        chimera_error err;
        if (chimera_filter_new(buf + cnt[q], cnt[q + 1] - cnt[q], 0, &flt[q], &err) != CHIMERA_OK) {
            cli_fail("search", &err);
            rc = -1;
        }
    }
    free(buf);
    free(cnt);
    free(qid);
    free(did);
    if (rc) {
        for (int64_t q = 0; flt && q < nq; q++) chimera_filter_free(flt[q]);
        free(flt);
        return -1;
    }
    *out = flt;
    return 0;
}

int cmd_search(int argc, char **argv)
{
    /* --filter-args A B ...: every argument up to the next option, taken out first */
    int n_fargs = 0, n_rest = 0;
    const char **fargs = malloc((size_t)argc * sizeof *fargs);
    char **rest = malloc((size_t)(argc + 1) * sizeof *rest);
    if (!fargs || !rest) {
        free(fargs);
        free(rest);
        return 1;
    }
    for (int i = 0; i < argc; i++) {
        if (i >= 2 && strcmp(argv[i], "--filter-args") == 0) {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                fargs[n_fargs++] = argv[++i];
            continue;
        }
        rest[n_rest++] = argv[i];
    }
    rest[n_rest] = NULL;
    int rc = search_main(n_rest, rest, fargs, n_fargs);
    free(fargs);
    free(rest);
    return rc;
}

/* What a search runs on: one index, or the shards of a sharded one (shards.h). */
typedef struct search_target {
    chimera_index *ix;
    shard_set *set;
} search_target;

static chimera_status target_search(search_target *t, const chimera_queries *q, uint32_t k,
                                    const chimera_search_params *p, const chimera_search_opts *o,
                                    int64_t *ids, float *scores, chimera_search_profile *prof,
                                    chimera_error *err)
{
    return t->set ? shard_set_search(t->set, q, k, p, o, ids, scores, prof, err)
                  : chimera_index_search(t->ix, q, k, p, o, ids, scores, prof, err);
}

/* A failed search: the message, and for queries of the wrong dimension the file that
 * holds them. */
static int search_fail(const char *queries, const chimera_error *err)
{
    if (err->code == CHIMERA_ERR_DIM) {
        fprintf(stderr, "chimera search: %s: %s\n", queries, cli_message("search", err));
        return 1;
    }
    return cli_fail("search", err);
}

static int search_main(int argc, char **argv, const char *const *fargs, int n_fargs)
{
    const char *queries = NULL, *qlens = NULL, *out = NULL, *backend = NULL;
    uint32_t k = 10, threads = 0;
    chimera_search_params sp = {0};
    int profile = 0, latency = 0, verify = 0;
    /* NULL until given: a tuned profile's impute and probe apply unless given
     * (chimera_search_params.chosen) */
    const char *impute_s = NULL, *probe_s = NULL, *subset = NULL, *exclude = NULL;
    const char *per_query = NULL, *filter_expr = NULL;
    int64_t batch = 0;
    double want_recall = 0, impute_scale = 0;
    cli_opt opts[] = {
        {"--queries", OPT_STR, &queries, "queries .npy [n, m, dim] or [total, dim]", 1, 0},
        {"--qlens", OPT_STR, &qlens, "query lengths .npy, for [total, dim] queries", 0, 0},
        {"-k", OPT_U32, &k, "results per query (default 10)", 0, 0},
        {"--out", OPT_STR, &out,
         "output TREC run (left out: the results are timed, not written)", 0, 0},
        {"--nprobe", OPT_COUNT, &sp.n_probe,
         "clusters probed per query token (default: the index's calibrated value for k, else "
         "8 for k <= 10 and 16 above)", 0, 0},
        {"--k-refine", OPT_COUNT, &sp.k_refine,
         "documents kept by refinement (default: the index's calibrated value, else "
         "4 k_fullbit)", 0, 0},
        {"--k-fullbit", OPT_COUNT, &sp.k_fullbit,
         "documents re-scored at full precision (default: the index's calibrated value, "
         "else max(4k, 40))", 0, 0},
        {"--k-interaction", OPT_U32, &sp.k_interaction,
         "1-bit score only the best N refined documents by centroid interaction (default: "
         "the index's calibrated value with its k_refine, else off)", 0, 0},
        {"--chunks", OPT_COUNT, &sp.chunks, "document-scoring chunks (default 4)", 0, 0},
        {"--rerank-depth", OPT_U32, &sp.rerank_depth,
         "re-score the top N by exact Chamfer over the stored vectors (build --rerank; "
         "default 0: off)", 0, 0},
        {"--impute", OPT_STR, &impute_s, "refinement floor: probe (default), zero, min", 0, 0},
        {"--impute-scale", OPT_F64, &impute_scale,
         "the probe floor's scale in (0, 1] (default: the index's calibrated scale, else 1)",
         0, 0},
        {"--probe", OPT_STR, &probe_s, "centroid search: auto (default), brute, graph", 0, 0},
        {"--threads", OPT_THREADS, &threads, "threads (default: all CPUs)", 0, 0},
        {"--batch", OPT_COUNT64, &batch, "queries per call (default: all)", 0, 0},
        {"--latency", OPT_FLAG, &latency, "one query at a time with all threads", 0, 0},
        {"--backend", OPT_STR, &backend, "cpu, cuda or auto (default)", 0, 0},
        {"--profile", OPT_FLAG, &profile, "print per-stage times, candidates and bytes", 0, 0},
        {"--recall", OPT_F64, &want_recall, "use the tuned profile for this target recall", 0, 0},
        {"--verify", OPT_FLAG, &verify, "verify every section checksum before searching", 0, 0},
        {"--subset", OPT_STR, &subset, "return only these document ids (.npy int64 or text)", 0, 0},
        {"--exclude", OPT_STR, &exclude, "never return these document ids (.npy int64 or text)", 0, 0},
        {"--filter", OPT_STR, &filter_expr,
         "SQL expression over the metadata (chimera meta import), ? bound to --filter-args "
         "(every argument up to the next option)", 0, 0},
        {"--subset-per-query", OPT_STR, &per_query,
         "per-query allowed ids: text lines \"QID DOCID\" (QID: the query's number from 0)", 0, 0},
    };
    const char *pos[1];
    int np = 0;
    int r = cli_parse("search", "IDX --queries Q.npy [-k K] [--out run.trec] [--nprobe N ...] "
                      "[--filter EXPR [--filter-args A ...]]",
                      argc, argv, 2, opts, sizeof opts / sizeof opts[0], pos, 1, &np);
    if (r) return r < 0 ? 2 : 0;
    if (np != 1) {
        fprintf(stderr, "chimera search: give the index directory\n");
        return 2;
    }
    /* given, even as the default value, they are the user's over a tuned profile's */
    if (impute_s) sp.chosen |= CHIMERA_CHOSE_IMPUTE;
    if (probe_s) sp.chosen |= CHIMERA_CHOSE_PROBE;
    if (impute_s && chimera_impute_parse(impute_s, &sp.impute) != CHIMERA_OK) {
        fprintf(stderr, "chimera search: --impute must be probe, zero or min\n");
        return 2;
    }
    int scale_given = 0; /* not given: 0, the index's calibrated scale */
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (strcmp(opts[i].name, "--impute-scale") == 0) scale_given = opts[i].seen;
    if (scale_given && !(impute_scale > 0 && impute_scale <= 1)) {
        fprintf(stderr, "chimera search: --impute-scale %g: expected a value in (0, 1]\n",
                impute_scale);
        return 2;
    }
    sp.impute_scale = (float)impute_scale;
    if (probe_s && chimera_probe_parse(probe_s, &sp.probe) != CHIMERA_OK) {
        fprintf(stderr, "chimera search: --probe must be auto, brute or graph\n");
        return 2;
    }
    chimera_backend be;
    if (cli_backend("search", backend, &be)) return 2;
    if (k == 0 || k > (1u << 24)) { /* a search refines at most 2^24 documents */
        fprintf(stderr, "chimera search: -k %u: expected 1..%u\n", k, 1u << 24);
        return 2;
    }
    if ((subset != NULL) + (exclude != NULL) + (per_query != NULL) + (filter_expr != NULL) > 1) {
        fprintf(stderr, "chimera search: --subset, --exclude, --subset-per-query and --filter are "
                        "alternatives\n");
        return 2;
    }
    if (n_fargs && !filter_expr) {
        fprintf(stderr, "chimera search: --filter-args without --filter\n");
        return 2;
    }
    chimera_error err;
    chimera_index *ix = NULL;
    chimera_queries *q = NULL;
    chimera_filter *filter = NULL, **qf = NULL;
    if (subset || exclude) {
        int64_t *fids = NULL, nf = 0;
        if (chimera_ids_read(subset ? subset : exclude, &fids, &nf, &err) != CHIMERA_OK)
            return cli_fail("search", &err);
        chimera_status fs = chimera_filter_new(fids, nf, exclude != NULL, &filter, &err);
        chimera_ids_free(fids);
        if (fs == CHIMERA_OK && subset && nf == 0) /* allowed, and likely not meant */
            fprintf(stderr, "chimera search: note: %s lists no ids: every query returns "
                    "nothing\n", subset);
        if (fs != CHIMERA_OK) return cli_fail("search", &err);
    }
    shard_set set = {0};
    search_target tgt = {0};
    if (shards_is_layout(pos[0])) {
        /* a sharded index: every shard in turn, merged (chimera-mpi search runs them at
         * once, one process each) */
        if (filter_expr || want_recall > 0 || verify) {
            fprintf(stderr, "chimera search: %s is sharded: --filter, --recall and --verify "
                            "work on single indexes (search a shard's directory for them)\n",
                    pos[0]);
            chimera_filter_free(filter);
            return 2;
        }
        if (shard_set_open(pos[0], 1, 0, &set, &err)) {
            chimera_filter_free(filter);
            return cli_fail("search", &err);
        }
        tgt.set = &set;
        ix = set.ix[0]; /* for the parameters' defaults: every shard's are alike */
    } else {
        chimera_open_opts oo = {.verify = verify};
        if (chimera_index_open(pos[0], &oo, &ix, &err) != CHIMERA_OK) {
            chimera_filter_free(filter);
            return cli_fail("search", &err);
        }
        tgt.ix = ix;
    }
    if (chimera_queries_read(queries, qlens, &q, &err) != CHIMERA_OK) {
        if (tgt.set) shard_set_close(&set);
        else chimera_index_close(ix);
        chimera_filter_free(filter);
        return cli_fail("search", &err);
    }
    if (filter_expr && chimera_filter_sql(ix, filter_expr, fargs, n_fargs, 0, &filter, &err) !=
                           CHIMERA_OK) {
        chimera_queries_free(q);
        chimera_index_close(ix);
        return cli_fail("search", &err);
    }
    int64_t nq = chimera_queries_count(q);
    int64_t *ids = malloc((size_t)nq * k * sizeof *ids);
    float *scores = malloc((size_t)nq * k * sizeof *scores);
    double *lat = malloc((size_t)nq * sizeof *lat);
    int rc = 0;
    if (!ids || !scores || !lat) {
        fprintf(stderr, "chimera search: out of memory\n");
        rc = 1;
        goto done;
    }
    if (per_query && read_per_query(per_query, nq, &qf) != 0) {
        rc = 1;
        goto done;
    }
    chimera_search_opts so = {.n_threads = (int)threads, .latency_mode = latency, .backend = be,
                              .filter = filter,
                              .query_filters = (const chimera_filter *const *)qf};
    chimera_search_profile prof = {0};
    /* The search is given the flags (and --recall's target): the library fills the rest
     * from the tuned profile, the index's calibrated defaults and its own, and gives
     * queries with a filter deeper depths when those were left to it. What it runs is
     * resolved here the same way, to be printed. */
    chimera_search_params run = sp;
    run.recall = want_recall;
    int filtered = filter || qf;
    chimera_search_params shown_f = {0};
    if (chimera_index_params_resolve(ix, k, &run, 0, &sp, &err) != CHIMERA_OK ||
        (filtered && chimera_index_params_resolve(ix, k, &run, 1, &shown_f, &err) != CHIMERA_OK)) {
        fprintf(stderr, "chimera search: %s: %s\n", pos[0], err.msg);
        rc = 1;
        goto done;
    }
    /* flags the resolution moved (the depths keep k <= k_fullbit <= k_refine, probing is
     * capped at the clusters): said, since the summary line shows only the result */
    {
        const struct {
            const char *flag;
            uint32_t given, ran;
        } moved[] = {{"--nprobe", run.n_probe, sp.n_probe},
                     {"--k-fullbit", run.k_fullbit, sp.k_fullbit},
                     {"--k-refine", run.k_refine, sp.k_refine},
                     {"--k-interaction", run.k_interaction, sp.k_interaction}};
        for (size_t i = 0; i < sizeof moved / sizeof *moved; i++)
            if (moved[i].given && moved[i].given != moved[i].ran)
                fprintf(stderr, "chimera search: note: %s %u runs as %u%s\n", moved[i].flag,
                        moved[i].given, moved[i].ran,
                        i == 0   ? " (the index's clusters)"
                        : i == 1 ? " (at least k and --rerank-depth)"
                        : i == 2 ? " (at least k_fullbit)"
                        : moved[i].ran == 0 ? " (off: not below k_refine)"
                                            : " (at least k_fullbit)");
    }
    chimera_search_params unset = {0};
    int calibrated = chimera_index_params_default(ix, k, &unset);
    /* --recall: which stored profile qualified (any k' >= k, the smallest target >= the
     * one asked), said with the results, since it may be another k's or target's */
    char picked[80] = "";
    int pick = want_recall > 0 ? chimera_index_profile_pick(ix, k, want_recall) : -1;
    if (pick >= 0) {
        int cap = pick + 1;
        chimera_profile_entry *e = malloc((size_t)cap * sizeof *e);
        if (e && chimera_index_profile_list(ix, e, cap) >= cap)
            snprintf(picked, sizeof picked, " (the profile for k=%u, recall %.3f)", e[pick].k,
                     e[pick].target_recall);
        free(e);
    }
    /* A sharded index is searched with shard 0's setting on every shard, as chimera-mpi
     * does; with a filter (--subset, --exclude, --subset-per-query: every query has one)
     * its filtered setting. */
    if (tgt.set) {
        run = filtered ? shown_f : sp;
        run.recall = 0;
    }
    /* Warm-up: a few queries first, then the longest one, so the timed run does not pay
     * for the first touch of the mapped index and the engine set-up, which later queries
     * never see (an engine sized for the first few queries is made anew by the first
     * longer one). */
    {
        int64_t longest = 0;
        for (int64_t i = 1; i < nq; i++)
            if (chimera_queries_len(q, i) > chimera_queries_len(q, longest)) longest = i;
        const int64_t start[2] = {0, longest}, count[2] = {nq < 8 ? nq : 8, 1};
        for (int pass = 0; pass < 2 && nq > 0; pass++) {
            chimera_queries *w = NULL;
            chimera_search_profile wp = {0};
            if (chimera_queries_slice(q, start[pass], count[pass], &w, &err) != CHIMERA_OK) {
                rc = cli_fail("search", &err);
                goto done;
            }
            chimera_status s = target_search(&tgt, w, k, &run, &so, ids, scores, &wp, &err);
            chimera_queries_free(w);
            if (s != CHIMERA_OK) {
                rc = search_fail(queries, &err);
                goto done;
            }
        }
    }
    if (batch <= 0 || batch > nq) batch = nq;
    chimera_search_profile total = {0};
    double t0 = cli_now();
    for (int64_t b0 = 0; b0 < nq; b0 += batch) {
        int64_t nb = nq - b0 < batch ? nq - b0 : batch;
        chimera_queries *sl = NULL;
        if (chimera_queries_slice(q, b0, nb, &sl, &err) != CHIMERA_OK) {
            rc = cli_fail("search", &err);
            goto done;
        }
        prof.latency = lat + b0;
        chimera_status s =
            target_search(&tgt, sl, k, &run, &so, ids + b0 * k, scores + b0 * k, &prof, &err);
        chimera_queries_free(sl);
        if (s != CHIMERA_OK) {
            rc = search_fail(queries, &err);
            goto done;
        }
        shard_profile_add(&total, &prof);
    }
    double el = cli_now() - t0;
    if (out && chimera_results_write(out, nq, k, ids, scores, "chimera", &err) != CHIMERA_OK) {
        rc = cli_fail("search", &err);
        goto done;
    }
    qsort(lat, (size_t)nq, sizeof *lat, cmp_double);
    double mean = 0;
    for (int64_t i = 0; i < nq; i++) mean += lat[i];
    mean /= (double)nq;
    char rr[160] = "";
    int o = 0;
    if (sp.k_interaction) o = snprintf(rr, sizeof rr, " k_interaction=%u", sp.k_interaction);
    if (sp.rerank_depth)
        o += snprintf(rr + o, sizeof rr - (size_t)o, " rerank_depth=%u", sp.rerank_depth);
    if (sp.impute == CHIMERA_IMPUTE_PROBE && sp.impute_scale != 1.0f)
        o += snprintf(rr + o, sizeof rr - (size_t)o, " impute_scale=%.2f",
                      (double)sp.impute_scale);
    if (filtered && (shown_f.k_refine != sp.k_refine || shown_f.k_fullbit != sp.k_fullbit))
        o += snprintf(rr + o, sizeof rr - (size_t)o, " (with a filter k_refine=%u k_fullbit=%u)",
                      shown_f.k_refine, shown_f.k_fullbit);
    printf("search: %lld queries, k=%u, n_probe=%u k_refine=%u k_fullbit=%u chunks=%u%s%s, %s "
           "backend, %s mode: %.3fs, %.1f queries/s; latency ms mean %.2f p50 %.2f p95 %.2f p99 "
           "%.2f\n",
           (long long)nq, k, sp.n_probe, sp.k_refine, sp.k_fullbit, sp.chunks, rr, picked,
           total.backend,
           latency ? "latency" : "throughput", el, (double)nq / el, 1e3 * mean,
           1e3 * pct(lat, nq, 0.50), 1e3 * pct(lat, nq, 0.95), 1e3 * pct(lat, nq, 0.99));
    if (profile) {
        double n = (double)nq;
        prof = total;
        printf("parameters: %s\n", want_recall > 0 ? "the tuned profile (--recall), flags over it"
                                    : calibrated ? "the index's calibrated defaults for this k, "
                                                   "flags over them"
                                                 : "the library's defaults, flags over them");
        printf("profile (per query): generate %.3f ms, refine %.3f ms, centroid interaction "
               "%.3f ms, 1-bit scoring %.3f ms, full-bit %.3f ms (waited %.3f ms after the "
               "device finished)\n",
               1e3 * prof.t_generate / n, 1e3 * prof.t_refine / n, 1e3 * prof.t_interaction / n,
               1e3 * prof.t_score1 / n, 1e3 * prof.t_fullbit / n, 1e3 * prof.t_fullbit_wait / n);
        if (sp.rerank_depth)
            printf("exact re-rank (per query): %.3f ms, %.1f documents re-scored exactly "
                   "(rerank_depth %u)\n", 1e3 * prof.t_rerank / n, prof.n_reranked / n,
                   sp.rerank_depth);
        printf("candidates (per query): %.0f posting entries estimated, %.0f documents touched, "
               "%.0f refined, %.0f 1-bit scored, %.1f full-bit scored (k_fullbit %u), %.0f "
               "centroid-score rows computed one by one, %.1f clusters probed per query token "
               "(n_probe %u; more where probing widened), %.1f of them by a graph walk\n",
               prof.tokens_refined / n, prof.docs_touched / n, prof.n_refined / n,
               prof.n_scored1 / n, prof.n_fullbit / n, filtered ? shown_f.k_fullbit : sp.k_fullbit,
               prof.n_rows / n, prof.n_probed / n, sp.n_probe, prof.n_walked / n);
        printf("host/device traffic (per query): %.1f KiB up, %.1f KiB down\n",
               prof.bytes_up / n / 1024.0, prof.bytes_down / n / 1024.0);
    }
done:
    free(ids);
    free(scores);
    free(lat);
    chimera_queries_free(q);
    if (tgt.set) shard_set_close(&set);
    else chimera_index_close(ix);
    chimera_filter_free(filter);
    for (int64_t i = 0; qf && i < nq; i++) chimera_filter_free(qf[i]);
    free(qf);
    return rc;
}
