/* chimera gen | exact: make a synthetic corpus; exact (ground-truth) search. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cmd_gen(int argc, char **argv)
{
    const char *out = NULL;
    chimera_synth_opts o = {0};
    int64_t seed = 0;
    cli_opt opts[] = {
        {"--out", OPT_STR, &out, "output directory (created if missing)", 1, 0},
        {"--docs", OPT_COUNT64, &o.n_docs, "number of documents (default 10000)", 0, 0},
        {"--dim", OPT_COUNT, &o.dim, "token dimension (default 128)", 0, 0},
        {"--queries", OPT_COUNT64, &o.n_queries, "number of queries (default 100)", 0, 0},
        {"--query-len", OPT_COUNT, &o.query_len, "tokens per query (default 32)", 0, 0},
        {"--seed", OPT_I64, &seed, "random seed (default 0)", 0, 0},
        {"--vocab", OPT_COUNT, &o.vocab, "vocabulary size (default 30000)", 0, 0},
        {"--topics", OPT_COUNT, &o.n_topics, "number of topics (default 200)", 0, 0},
        {"--min-len", OPT_COUNT, &o.min_len, "shortest document (default 16)", 0, 0},
        {"--max-len", OPT_COUNT, &o.max_len, "longest document (default 300)", 0, 0},
        {"--topic-weight", OPT_F64, &o.topic_weight,
         "pull of a token towards its topic (default 0.35; -1: flat; 1-2: strongly clustered)", 0, 0},
        {"--query-noise", OPT_F64, &o.query_noise,
         "context noise of query tokens (default 0.35)", 0, 0},
    };
    int r = cli_parse("gen", "--out DIR [--docs N --dim D --queries Q --seed S]", argc, argv, 2,
                      opts, sizeof opts / sizeof opts[0], NULL, 0, NULL);
    if (r) return r < 0 ? 2 : 0;
    if (o.n_docs < 0 || o.n_queries < 0) {
        fprintf(stderr, "chimera gen: --docs and --queries must be positive\n");
        return 2;
    }
    o.seed = (uint64_t)seed;
    o.progress = cli_progress;
    chimera_error err;
    double t0 = cli_now();
    if (chimera_synth_write(out, &o, &err) != CHIMERA_OK) return cli_fail("gen", &err);
    chimera_corpus *c;
    chimera_corpus_opts co = {.skip_value_check = 1};
    char tok[4096], len[4096];
    snprintf(tok, sizeof tok, "%s/tokens.npy", out);
    snprintf(len, sizeof len, "%s/doclens.npy", out);
    if (chimera_corpus_open(tok, len, NULL, &co, &c, &err) != CHIMERA_OK) return cli_fail("gen", &err);
    printf("wrote %s: %lld documents, %lld tokens, dim %u, %lld queries in %.1fs\n", out,
           (long long)chimera_corpus_n_docs(c), (long long)chimera_corpus_n_tokens(c),
           chimera_corpus_dim(c), (long long)(o.n_queries ? o.n_queries : 100), cli_now() - t0);
    chimera_corpus_close(c);
    return 0;
}

int cmd_exact(int argc, char **argv)
{
    const char *tokens = NULL, *doclens = NULL, *ids_path = NULL, *queries = NULL, *qlens = NULL;
    const char *out = NULL;
    uint32_t k = 0, threads = 0;
    int allow_empty = 0;
    cli_opt opts[] = {
        {"--tokens", OPT_STR, &tokens, "token matrix .npy [n_tokens, dim] (float32/16)", 1, 0},
        {"--doclens", OPT_STR, &doclens, "document lengths .npy [n_docs] (int32/64)", 1, 0},
        {"--ids", OPT_STR, &ids_path, "document ids (.npy int64 or text, one per line)", 0, 0},
        {"--queries", OPT_STR, &queries, "queries .npy [n, m, dim] or [total, dim]", 1, 0},
        {"--qlens", OPT_STR, &qlens, "query lengths .npy, for [total, dim] queries", 0, 0},
        {"-k", OPT_U32, &k, "results per query", 1, 0},
        {"--out", OPT_STR, &out, "output TREC run", 1, 0},
        {"--threads", OPT_THREADS, &threads, "worker threads (default: all CPUs)", 0, 0},
        {"--allow-empty", OPT_FLAG, &allow_empty, "accept empty documents (never returned)", 0, 0},
    };
    int r = cli_parse("exact",
                      "--tokens T.npy --doclens L.npy --queries Q.npy -k K --out truth.trec", argc,
                      argv, 2, opts, sizeof opts / sizeof opts[0], NULL, 0, NULL);
    if (r) return r < 0 ? 2 : 0;
    if (k == 0) {
        fprintf(stderr, "chimera exact: -k must be at least 1\n");
        return 2;
    }
    chimera_error err;
    chimera_corpus *c = NULL;
    chimera_queries *q = NULL;
    chimera_corpus_opts co = {.allow_empty = allow_empty};
    if (chimera_corpus_open(tokens, doclens, ids_path, &co, &c, &err) != CHIMERA_OK)
        return cli_fail("exact", &err);
    if (chimera_queries_read(queries, qlens, &q, &err) != CHIMERA_OK) {
        chimera_corpus_close(c);
        return cli_fail("exact", &err);
    }
    int64_t nq = chimera_queries_count(q), qtok = 0;
    for (int64_t i = 0; i < nq; i++) qtok += chimera_queries_len(q, i);
    int64_t *ids = malloc((size_t)nq * k * sizeof *ids);
    float *scores = malloc((size_t)nq * k * sizeof *scores);
    int rc = 0;
    if (!ids || !scores) {
        fprintf(stderr, "chimera exact: out of memory for %lld x %u results\n", (long long)nq, k);
        rc = 1;
        goto done;
    }
    chimera_exact_opts eo = {.n_threads = (int)threads, .progress = cli_progress};
    double t0 = cli_now();
    chimera_status s = chimera_corpus_search(c, q, k, &eo, ids, scores, &err);
    double el = cli_now() - t0;
    if (s != CHIMERA_OK) {
        fprintf(stderr, "chimera exact: %s\n", err.msg);
        rc = 1;
        goto done;
    }
    if (chimera_results_write(out, nq, k, ids, scores, "exact", &err) != CHIMERA_OK) {
        rc = cli_fail("exact", &err);
        goto done;
    }
    double flops = 2.0 * (double)chimera_corpus_n_tokens(c) * (double)qtok * chimera_corpus_dim(c);
    printf("exact: %lld queries x %lld documents (%lld tokens, dim %u), k=%u: %.2fs, %.1f "
           "queries/s, %.1f GFLOP/s, peak RSS %.0f MiB -> %s\n",
           (long long)nq, (long long)chimera_corpus_n_docs(c),
           (long long)chimera_corpus_n_tokens(c), chimera_corpus_dim(c), k, el, (double)nq / el,
           flops / el * 1e-9, cli_peak_rss_mib(), out);
done:
    free(ids);
    free(scores);
    chimera_queries_free(q);
    chimera_corpus_close(c);
    return rc;
}
