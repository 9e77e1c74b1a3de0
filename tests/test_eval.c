/* Evaluation: Recall@k, MRR@10 and NDCG@10 on hand-made runs with known answers
 * (partial overlap, missing queries, short truth lists, repeated documents, string
 * ids), TREC writing and re-reading round trip, and malformed lines reported with
 * file:line. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "tmpdir.h"
#include "data/trec.h"
#include "search/eval.h"

static void put(const char *path, const char *text) { test_write_file(path, text, strlen(text)); }

static void test_recall(void)
{
    char rp[512], tp[512];
    test_path(rp, sizeof rp, "run.trec");
    test_path(tp, sizeof tp, "truth.trec");
    put(tp, "q1 Q0 a 1 9 t\nq1 Q0 b 2 8 t\nq1 Q0 c 3 7 t\nq1 Q0 d 4 6 t\n"
            "q2 Q0 x 1 5 t\nq3 Q0 z 1 1 t\nq3 Q0 y 2 0.5 t\n");
    /* q1: top-2 {a,b} vs run {b,e} -> 1/2; top-4 {a,b,c,d} vs {b,e,a,a} -> 2/4.
     * q2: truth has one hit, run has it at rank 2 -> @2: 1/1, @4: 1/1.
     * q3: missing from the run -> 0. */
    put(rp, "q1 Q0 e 2 3 r\nq1 Q0 b 1 4 r\nq1 Q0 a 3 2 r\nq1 Q0 a 4 1 r\n"
            "q2 Q0 w 1 2 r\nq2 Q0 x 2 1 r\nq9 Q0 x 1 1 r\n");
    data_trec_run run, truth;
    chimera_error err;
    CHECK_OK(data_trec_read(rp, 0, &run, &err), &err);
    CHECK_OK(data_trec_read(tp, 0, &truth, &err), &err);
    CHECK(run.n_q == 3 && truth.n_q == 3);
    double rec;
    int64_t nq;
    CHECK_OK(sp_eval_recall(&run, &truth, 2, &rec, &nq, &err), &err);
    CHECK(nq == 3);
    CHECK_NEAR(rec, (0.5 + 1.0 + 0.0) / 3, 1e-12);
    CHECK_OK(sp_eval_recall(&run, &truth, 4, &rec, &nq, &err), &err);
    CHECK_NEAR(rec, (0.5 + 1.0 + 0.0) / 3, 1e-12);
    CHECK_OK(sp_eval_recall(&run, &truth, 1, &rec, &nq, &err), &err);
    CHECK_NEAR(rec, (0.0 + 0.0 + 0.0) / 3, 1e-12);
    CHECK_OK(sp_eval_recall(&truth, &truth, 3, &rec, &nq, &err), &err);
    CHECK_NEAR(rec, 1.0, 1e-12);
    data_trec_free(&run);
    data_trec_free(&truth);
}

static void test_qrels(void)
{
    char rp[512], qp[512];
    test_path(rp, sizeof rp, "run.trec");
    test_path(qp, sizeof qp, "qrels.tsv");
    put(qp, "1 0 d3 1\n2 0 d9 2\n2 0 d8 1\n3 0 d1 0\n");
    /* query 1: relevant at rank 3 -> RR 1/3, NDCG = (1/log2 4)/1 = 0.5.
     * query 2: d8 (gain 1) at rank 1, d9 (gain 2) absent in top 10 ->
     *   RR 1, DCG = 1, IDCG = 2 + 1/log2 3. query 3 has no relevant doc: skipped. */
    put(rp, "1 Q0 d1 1 3 r\n1 Q0 d2 2 2 r\n1 Q0 d3 3 1 r\n2 Q0 d8 1 1 r\n");
    data_trec_run run, qrels;
    chimera_error err;
    CHECK_OK(data_trec_read(rp, 0, &run, &err), &err);
    CHECK_OK(data_trec_read(qp, 1, &qrels, &err), &err);
    double mrr, ndcg;
    int64_t nq;
    CHECK_OK(sp_eval_qrels(&run, &qrels, &mrr, &ndcg, &nq, &err), &err);
    CHECK(nq == 2);
    CHECK_NEAR(mrr, (1.0 / 3 + 1.0) / 2, 1e-12);
    CHECK_NEAR(ndcg, (0.5 + 1.0 / (2.0 + 1.0 / log2(3.0))) / 2, 1e-12);
    data_trec_free(&run);
    data_trec_free(&qrels);
}

static void test_io(void)
{
    char p[512];
    test_path(p, sizeof p, "w.trec");
    int64_t ids[6] = {5, 3, -1, 7, 8, 9};
    float sc[6] = {3.5f, 2.25f, -INFINITY, 1, 0.5f, 0.25f};
    chimera_error err;
    CHECK_OK(data_trec_write(p, 2, 3, ids, sc, "exact", &err), &err);
    data_trec_run run;
    CHECK_OK(data_trec_read(p, 0, &run, &err), &err);
    CHECK(run.n == 5 && run.n_q == 2);
    CHECK(strcmp(run.e[0].doc, "5") == 0 && run.e[0].rank == 1 && run.e[0].score == 3.5);
    CHECK(strcmp(run.e[1].doc, "3") == 0 && run.e[1].rank == 2);
    CHECK(strcmp(run.e[4].doc, "9") == 0 && run.e[4].rank == 3);
    data_trec_free(&run);
    put(p, "1 Q0 d1 1 3 r\n1 Q0 d2 two 2 r\n");
    CHECK_STATUS(data_trec_read(p, 0, &run, &err), CHIMERA_ERR_FORMAT, &err);
    CHECK(strstr(err.msg, "w.trec:2") != NULL);
    put(p, "1 Q0 d1 1 3\n");
    CHECK_STATUS(data_trec_read(p, 0, &run, &err), CHIMERA_ERR_FORMAT, &err);
    CHECK(strstr(err.msg, "expected 6 fields") != NULL);
    put(p, "1 Q0 d1 1 nan r\n");
    CHECK_STATUS(data_trec_read(p, 0, &run, &err), CHIMERA_ERR_FORMAT, &err);
    put(p, "\n\n");
    CHECK_OK(data_trec_read(p, 0, &run, &err), &err);
    CHECK(run.n == 0);
    double rec;
    CHECK_STATUS(sp_eval_recall(&run, &run, 10, &rec, NULL, &err), CHIMERA_ERR_EMPTY, &err);
    data_trec_free(&run);
}

int main(void)
{
    test_recall();
    test_qrels();
    test_io();
    return check_report();
}
