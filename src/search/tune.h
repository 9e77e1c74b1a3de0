/* Target-recall tuning: the paper's backward procedure (paper §3.2) and two other walks
 * over search settings, each over an evaluation callback, so that they are independent
 * of how a search is run and measured. */
#ifndef CHIMERA_SEARCH_TUNE_H
#define CHIMERA_SEARCH_TUNE_H

#include "chimera.h"

/* Runs the search with `p` and measures recall and queries/s. */
typedef chimera_status (*sp_tune_eval_fn)(void *ctx, const chimera_search_params *p, double *recall,
                                          double *qps);

chimera_status sp_tune_backward(sp_tune_eval_fn eval, void *ctx, uint32_t k, double target,
                                uint32_t n_clusters, int64_t n_docs, chimera_tune_result *res);

/* Runs the search with `p` on the held-out queries: the mean and sample standard
 * deviation of their per-query recall, how many there are, and queries/s. */
typedef chimera_status (*sp_tune_check_fn)(void *ctx, const chimera_search_params *p,
                                           double *mean, double *sd, int64_t *n, double *qps);

/* The confidence interval of a mean recall of n queries (normal approximation, z: 1.96
 * for 95%). The spread used is at least that of k independent hits per query at the
 * observed rate (with one pseudo-miss: (hits + 1) / (n k + 2)), so a handful of perfect
 * queries does not give an interval of width zero. *need: the number of queries at which
 * the interval's half-width would be (1 - target) / 2. */
void sp_recall_interval(double mean, double sd, int64_t n, uint32_t k, double z, double target,
                        double *low, double *high, int64_t *need);

/* Tuning with a held-out check: the backward procedure on the tuning queries (eval),
 * its choice measured on the held-out ones (check); while the held-out interval's lower
 * bound misses `target`, the tuning target is raised by the shortfall and the walk
 * repeated (at most 6 times). Fills res as sp_tune_backward (the last walk's trials)
 * plus the held-out fields; res->reached is 1 only when the held-out lower bound meets
 * the target, and res->best is then the first (fastest) setting that did; otherwise
 * the setting with the highest held-out lower bound. */
chimera_status sp_tune_heldout(sp_tune_eval_fn eval, void *eval_ctx, sp_tune_check_fn check,
                               void *check_ctx, uint32_t k, double target, double z,
                               uint32_t n_clusters, int64_t n_docs, chimera_tune_result *res);

/* The modelled cost of a search per query, in nanoseconds of one core, from the counts
 * of its profile (prof, over n_queries queries of n_query_tokens tokens in all) and the
 * setting p that ran: a deterministic stand-in for its time, since a setting's measured
 * time on a shared machine varies by 2x between two runs while its counts do not.
 * dim is the index's token dimension, doc_len its mean document length in tokens,
 * n_clusters its centroids (K, which a probe not walking the graph scores). */
double sp_tune_cost(const chimera_search_profile *prof, const chimera_search_params *p,
                    int64_t n_queries, int64_t n_query_tokens, uint32_t dim, double doc_len,
                    uint32_t n_clusters);

/* Runs the search with `p` on the tuning queries and measures recall, its modelled cost
 * per query (sp_tune_cost) and its measured queries/s (reported, never chosen by). */
typedef chimera_status (*sp_tune_cost_fn)(void *ctx, const chimera_search_params *p,
                                          double *recall, double *cost, double *qps);

/* The same check around a walk upwards from `start` (cheap): each step raises n_probe
 * or k_fullbit by half (k_refine and k_interaction, 0: off, with it: they keep at least
 * the multiples of k_fullbit they have in start), whichever gains more recall on the
 * tuning queries per unit of added cost (both when neither gains), until the tuning
 * target is met. The setting checked on the held-out queries is then the cheapest of
 * all those measured (steps taken and steps passed over) that meet the tuning target;
 * on a held-out shortfall, a higher tuning target and more steps. It never measures a
 * setting more generous than needed, so it costs a fraction of the backward walk, whose
 * first trials are its most expensive ones (the build's calibration uses it). ceiling
 * (<= 0: unknown) is the tuning queries' recall at a generous setting: the walk stops
 * stepping once it is within 0.003 of it, gives up once a raised tuning target passes
 * it with no setting measured meeting it, and treats two steps without gain as the
 * plateau near it (three further below). Where it ends uncertified, the kept setting
 * grows by the held-out queries: n_probe or the depth doubles while a doubling gains
 * there, until the lower bound meets the target or the mean stands one standard error
 * above it (tune.c says why). res->points are the settings measured, each with
 * its modelled queries/s (1e9 / cost) as qps; res->qps is the held-out check's measured
 * rate of res->best. */
chimera_status sp_tune_grow_heldout(sp_tune_cost_fn eval, void *eval_ctx, sp_tune_check_fn check,
                                    void *check_ctx, uint32_t k, double target, double z,
                                    uint32_t n_clusters, int64_t n_docs,
                                    const chimera_search_params *start, double ceiling,
                                    chimera_tune_result *res);

/* Tuning in the covered form (k_fullbit = k_refine, no 1-bit pass: on the CPU the
 * faster form at a given recall), whose two knobs are n_probe and the depth D =
 * k_refine = k_fullbit. The fewest D meeting a target falls as n_probe rises, so a
 * staircase walks that frontier: at n_probe 64, D up a ladder of k x {1, 1.5, 2, 3, 4, 6,
 * ...} until the tuning target holds; then n_probe down its ladder {..., 8, 12, 16, 24,
 * 32, 48}, D raised where the target no longer holds, until D is out of room or the
 * frontier's cost has risen well past its cheapest point; up from 64 a rung at a time
 * while D can fall a rung and the cost falls; then a geometric bisection of D (a few
 * trials) at the cheapest point and at the n_probe halfway to each neighbouring rung. The
 * cheapest setting measured that meets the tuning target (by the modelled cost, so that
 * the choice does not move with a shared machine's noise) is checked on the held-out
 * queries, with sp_tune_heldout's raising of the tuning target and its two halvings.
 * res->points carry each setting's measured queries/s; res->best the held-out check's.
 * rerank: the evaluation re-ranks exactly (a target of 0.99 on an index with its
 * vectors). The walk then sets rerank_depth, to the top 4k by full-bit score (at most D),
 * and tries the top 2k at each pick; otherwise every setting's rerank_depth is 0. */
chimera_status sp_tune_frontier_heldout(sp_tune_cost_fn eval, void *eval_ctx,
                                        sp_tune_check_fn check, void *check_ctx, uint32_t k,
                                        double target, double z, uint32_t n_clusters,
                                        int64_t n_docs, int rerank, chimera_tune_result *res);

#endif
