/* Evaluation metrics (see eval.h).
 *
 * Recall@k follows the paper: |R ∩ R'| / k with R the system's top-k and R' the exact
 * top-k of the same query. Where the exact run holds fewer than k hits for a query
 * (tiny corpora) the denominator is that count, so a perfect run scores 1. Document
 * ids are compared as strings. NDCG uses the qrels grades as gains with the log2
 * discount and the ideal ordering of that query's qrels. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "search/eval.h"
#include "core/alloc.h"

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

chimera_status sp_eval_recall(const data_trec_run *run, const data_trec_run *truth, uint32_t k,
                              double *recall, int64_t *n_queries, chimera_error *err)
{
    if (k == 0) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "recall: k must be > 0");
    const char **a = cm_malloc((size_t)k * sizeof *a), **b = cm_malloc((size_t)k * sizeof *b);
    if (!a || !b) {
        cm_free(a);
        cm_free(b);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "recall: out of memory");
    }
    double sum = 0;
    int64_t nq = 0;
    for (int64_t t = 0; t < truth->n_q; t++) {
        int64_t t0 = truth->q_off[t], nt = truth->q_off[t + 1] - t0;
        if (nt > k) nt = k;
        if (nt == 0) continue;
        nq++;
        int64_t r = data_trec_find(run, truth->e[t0].qid);
        if (r < 0) continue;
        int64_t r0 = run->q_off[r], nr = run->q_off[r + 1] - r0;
        if (nr > k) nr = k;
        for (int64_t i = 0; i < nt; i++) b[i] = truth->e[t0 + i].doc;
        for (int64_t i = 0; i < nr; i++) a[i] = run->e[r0 + i].doc;
        qsort(a, (size_t)nr, sizeof *a, cmp_str);
        qsort(b, (size_t)nt, sizeof *b, cmp_str);
        int64_t i = 0, j = 0, hit = 0;
        while (i < nr && j < nt) {
            int c = strcmp(a[i], b[j]);
            if (c == 0) {
                hit++;
                /* a run that repeats a document must not count it twice */
                while (i + 1 < nr && strcmp(a[i + 1], a[i]) == 0) i++;
                i++;
                j++;
            } else if (c < 0) {
                i++;
            } else {
                j++;
            }
        }
        sum += (double)hit / (double)nt;
    }
    cm_free(a);
    cm_free(b);
    if (nq == 0) return cm_fail(err, CHIMERA_ERR_EMPTY, "recall: the truth run has no queries");
    *recall = sum / (double)nq;
    if (n_queries) *n_queries = nq;
    return CHIMERA_OK;
}

static int cmp_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

chimera_status sp_eval_qrels(const data_trec_run *run, const data_trec_run *qrels, double *mrr10,
                             double *ndcg10, int64_t *n_queries, chimera_error *err)
{
    double mrr = 0, ndcg = 0;
    int64_t nq = 0;
    double gains[10];
    for (int64_t t = 0; t < qrels->n_q; t++) {
        int64_t t0 = qrels->q_off[t], t1 = qrels->q_off[t + 1], nrel = 0;
        for (int64_t i = t0; i < t1; i++) nrel += qrels->e[i].rank > 0;
        if (nrel == 0) continue;
        nq++;
        /* ideal DCG from the best 10 grades */
        int n = 0;
        double all[10];
        for (int64_t i = t0; i < t1; i++) {
            double g = (double)qrels->e[i].rank;
            if (g <= 0) continue;
            if (n < 10) {
                all[n++] = g;
                qsort(all, (size_t)n, sizeof *all, cmp_desc);
            } else if (g > all[9]) {
                all[9] = g;
                qsort(all, 10, sizeof *all, cmp_desc);
            }
        }
        double idcg = 0;
        for (int i = 0; i < n; i++) idcg += all[i] / log2(i + 2.0);
        int64_t r = data_trec_find(run, qrels->e[t0].qid);
        if (r < 0) continue;
        int64_t r0 = run->q_off[r], nr = run->q_off[r + 1] - r0;
        if (nr > 10) nr = 10;
        double dcg = 0, rr = 0;
        for (int64_t i = 0; i < nr; i++) {
            gains[i] = 0;
            for (int64_t j = t0; j < t1; j++)
                if (strcmp(qrels->e[j].doc, run->e[r0 + i].doc) == 0) gains[i] = (double)qrels->e[j].rank;
            if (gains[i] > 0 && rr == 0) rr = 1.0 / (double)(i + 1);
            if (gains[i] > 0) dcg += gains[i] / log2((double)i + 2.0);
        }
        mrr += rr;
        ndcg += dcg / idcg;
    }
    if (nq == 0)
        return cm_fail(err, CHIMERA_ERR_EMPTY, "qrels: no query has a relevant document");
    *mrr10 = mrr / (double)nq;
    *ndcg10 = ndcg / (double)nq;
    if (n_queries) *n_queries = nq;
    return CHIMERA_OK;
}

double sp_eval_recall_ids(const int64_t *run, uint32_t run_k, const int64_t *truth,
                          uint32_t truth_k, int64_t n_queries, uint32_t k)
{
    double sum = 0;
    int64_t nq = 0;
    for (int64_t i = 0; i < n_queries; i++) {
        const int64_t *t = truth + i * truth_k, *r = run + i * run_k;
        uint32_t nt = 0;
        for (uint32_t j = 0; j < k && j < truth_k; j++) nt += t[j] >= 0;
        if (nt == 0) continue;
        nq++;
        uint32_t hit = 0;
        for (uint32_t a = 0; a < k && a < run_k; a++) {
            if (r[a] < 0) continue;
            int dup = 0;
            for (uint32_t b = 0; b < a; b++) dup |= r[b] == r[a];
            if (dup) continue;
            for (uint32_t j = 0; j < nt; j++)
                if (t[j] == r[a]) {
                    hit++;
                    break;
                }
        }
        sum += (double)hit / nt;
    }
    return nq ? sum / (double)nq : 0.0;
}

chimera_status sp_eval_run_ids(const data_trec_run *run, int64_t n_queries, uint32_t k,
                               int64_t *ids, chimera_error *err)
{
    for (int64_t i = 0; i < n_queries * (int64_t)k; i++) ids[i] = -1;
    char qid[32];
    for (int64_t i = 0; i < n_queries; i++) {
        snprintf(qid, sizeof qid, "%lld", (long long)i);
        int64_t r = data_trec_find(run, qid);
        if (r < 0) continue;
        int64_t r0 = run->q_off[r], n = run->q_off[r + 1] - r0;
        for (int64_t j = 0; j < n && j < k; j++) {
            char *end;
            errno = 0;
            long long v = strtoll(run->e[r0 + j].doc, &end, 10);
            if (errno || *end || v < 0)
                return cm_fail(err, CHIMERA_ERR_FORMAT, "run: document id '%s' is not an integer",
                               run->e[r0 + j].doc);
            ids[i * k + j] = v;
        }
    }
    return CHIMERA_OK;
}

void sp_eval_recall_stats(const int64_t *run, uint32_t run_k, const int64_t *truth,
                          uint32_t truth_k, int64_t n_queries, uint32_t k, double *mean,
                          double *sd, int64_t *n)
{
    double sum = 0, sum2 = 0;
    int64_t nq = 0;
    for (int64_t i = 0; i < n_queries; i++) {
        /* one query at a time, so that the per-query recall is the one
         * sp_eval_recall_ids averages */
        const int64_t *t = truth + i * truth_k;
        int any = 0;
        for (uint32_t j = 0; j < k && j < truth_k; j++) any |= t[j] >= 0;
        if (!any) continue;
        double r = sp_eval_recall_ids(run + i * run_k, run_k, t, truth_k, 1, k);
        sum += r;
        sum2 += r * r;
        nq++;
    }
    *n = nq;
    *mean = nq ? sum / (double)nq : 0;
    double var = nq > 1 ? (sum2 - sum * sum / (double)nq) / (double)(nq - 1) : 0;
    *sd = var > 0 ? sqrt(var) : 0;
}
