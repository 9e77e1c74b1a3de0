/* Retrieval quality: Recall@k against an exact run, and MRR@10 / NDCG@10 against
 * qrels. Works on TREC runs read by data/trec.h, so any system's output is comparable. */
#ifndef CHIMERA_SEARCH_EVAL_H
#define CHIMERA_SEARCH_EVAL_H

#include "chimera.h"
#include "data/trec.h"

chimera_status sp_eval_recall(const data_trec_run *run, const data_trec_run *truth, uint32_t k,
                              double *recall, int64_t *n_queries, chimera_error *err);
chimera_status sp_eval_qrels(const data_trec_run *run, const data_trec_run *qrels, double *mrr10,
                             double *ndcg10, int64_t *n_queries, chimera_error *err);

/* Recall@k over integer ids (see chimera_results_eval_recall). */
double sp_eval_recall_ids(const int64_t *run, uint32_t run_k, const int64_t *truth,
                          uint32_t truth_k, int64_t n_queries, uint32_t k);

/* Top-k integer ids of queries "0".."n-1" of a run (see chimera_run_topk_ids). */
/* The mean and sample standard deviation of the per-query Recall@k that
 * sp_eval_recall_ids averages, over the *n queries that have a truth. */
void sp_eval_recall_stats(const int64_t *run, uint32_t run_k, const int64_t *truth,
                          uint32_t truth_k, int64_t n_queries, uint32_t k, double *mean,
                          double *sd, int64_t *n);

chimera_status sp_eval_run_ids(const data_trec_run *run, int64_t n_queries, uint32_t k,
                               int64_t *ids, chimera_error *err);

#endif
