/* chimera eval: Recall@k of a run against exact truth, MRR@10/NDCG@10 against qrels. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cmd_eval(int argc, char **argv)
{
    const char *run_path = NULL, *truth_path = NULL, *qrels_path = NULL, *ks = "10,100";
    int json = 0;
    cli_opt opts[] = {
        {"--run", OPT_STR, &run_path, "the run to evaluate (TREC format)", 1, 0},
        {"--truth", OPT_STR, &truth_path, "exact run (from chimera exact)", 0, 0},
        {"-k", OPT_STR, &ks, "comma-separated cut-offs for Recall@k (default 10,100)", 0, 0},
        {"--qrels", OPT_STR, &qrels_path, "TREC qrels, for MRR@10 and NDCG@10", 0, 0},
        {"--json", OPT_FLAG, &json, "print one JSON object instead of a table", 0, 0},
    };
    int r = cli_parse("eval", "--run R.trec --truth T.trec [-k 10,100] [--qrels Q] [--json]",
                      argc, argv, 2, opts, sizeof opts / sizeof opts[0], NULL, 0, NULL);
    if (r) return r < 0 ? 2 : 0;
    if (!truth_path && !qrels_path) {
        fprintf(stderr, "chimera eval: give --truth, --qrels or both\n");
        return 2;
    }
    uint32_t kv[16];
    int nk = 0;
    for (const char *p = ks; *p && truth_path;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v <= 0 || v > 100000 || nk == 16 || (*end && *end != ',')) {
            fprintf(stderr, "chimera eval: -k '%s' is not a list of positive integers\n", ks);
            return 2;
        }
        kv[nk++] = (uint32_t)v;
        p = *end ? end + 1 : end;
    }
    chimera_error err;
    chimera_run *run = NULL, *truth = NULL, *qrels = NULL;
    int rc = 0;
    if (chimera_run_read(run_path, &run, &err) != CHIMERA_OK ||
        (truth_path && chimera_run_read(truth_path, &truth, &err) != CHIMERA_OK) ||
        (qrels_path && chimera_run_read_qrels(qrels_path, &qrels, &err) != CHIMERA_OK)) {
        rc = cli_fail("eval", &err);
        goto done;
    }
    /* a cut-off past either run's depth reads as a loss of recall (the run's) or is
     * measured against fewer documents (the truth's, k' = min(k, its hits)): say so */
    int64_t run_depth = chimera_run_depth(run), truth_depth = chimera_run_depth(truth);
    for (int i = 0; i < nk; i++) {
        int64_t want = truth_depth > 0 && truth_depth < kv[i] ? truth_depth : kv[i];
        if (want > run_depth)
            fprintf(stderr, "chimera eval: warning: %s holds at most %lld hits a query, so "
                    "Recall@%u counts the rest as missed\n", run_path, (long long)run_depth,
                    kv[i]);
        if (truth_depth > 0 && kv[i] > truth_depth)
            fprintf(stderr, "chimera eval: warning: %s holds at most %lld hits a query, so "
                    "Recall@%u is measured against those only\n", truth_path,
                    (long long)truth_depth, kv[i]);
    }
    double rec[16];
    int64_t nq = 0, nqr = 0;
    for (int i = 0; i < nk; i++)
        if (chimera_run_eval_recall(run, truth, kv[i], &rec[i], &nq, &err) != CHIMERA_OK) {
            rc = cli_fail("eval", &err);
            goto done;
        }
    double mrr = 0, ndcg = 0;
    if (qrels && chimera_run_eval_qrels(run, qrels, &mrr, &ndcg, &nqr, &err) != CHIMERA_OK) {
        rc = cli_fail("eval", &err);
        goto done;
    }
    if (json) {
        printf("{\"run\": \"%s\"", run_path);
        for (int i = 0; i < nk; i++) printf(", \"recall@%u\": %.6f", kv[i], rec[i]);
        if (truth) printf(", \"queries\": %lld", (long long)nq);
        if (qrels) printf(", \"mrr@10\": %.6f, \"ndcg@10\": %.6f, \"qrels_queries\": %lld", mrr, ndcg, (long long)nqr);
        printf("}\n");
    } else {
        printf("%-12s %s\n", "metric", "value");
        for (int i = 0; i < nk; i++) printf("Recall@%-5u %.4f\n", kv[i], rec[i]);
        if (qrels) printf("%-12s %.4f\n%-12s %.4f\n", "MRR@10", mrr, "NDCG@10", ndcg);
        if (truth) printf("(%lld queries in the truth run", (long long)nq);
        if (qrels) printf("%s%lld with relevant documents", truth ? "; " : "(", (long long)nqr);
        printf(")\n");
    }
done:
    chimera_run_free(run);
    chimera_run_free(truth);
    chimera_run_free(qrels);
    return rc;
}
