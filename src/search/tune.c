/* The backward tuning procedure (paper §3.2), automated:
 *
 *   1. start generous: n_probe and k_refine large, so candidate generation and
 *      refinement lose (almost) nothing;
 *   2. raise k_fullbit from k until the target recall is reached: the full-bit stage
 *      is the only one that can recover order among good candidates;
 *   3. shrink k_refine (never below k_fullbit) while the target holds;
 *   4. then shrink n_probe while the target holds;
 *   5. finally try fewer and more chunks for the chosen setting (throughput only).
 *
 * Each step keeps the cheapest setting that still reaches the target; every trial is
 * recorded. If even the generous setting misses the target (the quantisation bits cap
 * recall: B = 4 reaches ~0.95-0.98), the best setting found is reported with
 * reached = 0. Search cost falls monotonically in each knob, so the walk finds the
 * fastest setting along this path, not a global optimum over all combinations. */
#include <string.h>

#include "core/error.h"
#include "search/tune.h"

#define MAX_POINTS ((int)(sizeof ((chimera_tune_result *)0)->points / sizeof(chimera_tune_point)))

static chimera_status trial(sp_tune_eval_fn eval, void *ctx, const chimera_search_params *p,
                            chimera_tune_result *res, double *recall, double *qps)
{
    CM_TRY(eval(ctx, p, recall, qps));
    if (res->n_points < MAX_POINTS) {
        chimera_tune_point *pt = &res->points[res->n_points++];
        pt->params = *p;
        pt->recall = *recall;
        pt->qps = *qps;
    }
    return CHIMERA_OK;
}

chimera_status sp_tune_backward(sp_tune_eval_fn eval, void *ctx, uint32_t k, double target,
                                uint32_t n_clusters, int64_t n_docs, chimera_tune_result *res)
{
    memset(res, 0, sizeof *res);
    uint32_t docs = n_docs > (1 << 24) ? (1u << 24) : (uint32_t)n_docs;
    chimera_search_params p = {0};
    chimera_search_params_default(k, &p);
    p.n_probe = n_clusters < 64 ? n_clusters : 64;
    p.k_refine = p.k_refine * 4 < docs ? p.k_refine * 4 : docs;
    if (p.k_refine < k) p.k_refine = k;
    double r, q, best_r = -1, best_q = 0;
    chimera_search_params best = p;

    /* 2. k_fullbit: k, 2k, 3k, 4k, 6k, 8k, 12k, 16k, ... up to k_refine */
    uint32_t steps[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
    int reached = 0;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        uint64_t f = (uint64_t)steps[i] * k;
        if (f > p.k_refine) f = p.k_refine;
        p.k_fullbit = (uint32_t)f;
        CM_TRY(trial(eval, ctx, &p, res, &r, &q));
        if (r > best_r) {
            best_r = r;
            best_q = q;
            best = p;
        }
        if (r >= target) {
            reached = 1;
            best = p;
            best_r = r;
            best_q = q;
            break;
        }
        if (f == p.k_refine) break;
    }
    if (!reached) {
        res->best = best;
        res->recall = best_r;
        res->qps = best_q;
        res->reached = 0;
        return CHIMERA_OK;
    }
    /* 3. shrink k_refine by factors of ~0.7 while the target holds */
    p = best;
    for (;;) {
        uint32_t next = (uint32_t)((double)p.k_refine * 0.7);
        if (next < p.k_fullbit || next == p.k_refine) break;
        chimera_search_params t = p;
        t.k_refine = next;
        CM_TRY(trial(eval, ctx, &t, res, &r, &q));
        if (r < target) break;
        p = t;
        best = t;
        best_r = r;
        best_q = q;
    }
    /* 4. shrink n_probe by halves (then by one quarter) while the target holds */
    for (;;) {
        uint32_t next = p.n_probe > 8 ? p.n_probe * 3 / 4 : p.n_probe - 1;
        if (next < 1 || next == p.n_probe) break;
        chimera_search_params t = p;
        t.n_probe = next;
        CM_TRY(trial(eval, ctx, &t, res, &r, &q));
        if (r < target) break;
        p = t;
        best = t;
        best_r = r;
        best_q = q;
    }
    /* 5. chunks: the speed knob that does not change recall (much) */
    uint32_t chunk_opts[] = {1, 2, 8};
    for (size_t i = 0; i < sizeof chunk_opts / sizeof chunk_opts[0]; i++) {
        chimera_search_params t = best;
        t.chunks = chunk_opts[i];
        CM_TRY(trial(eval, ctx, &t, res, &r, &q));
        if (r >= target && q > best_q * 1.03) {
            best = t;
            best_r = r;
            best_q = q;
        }
    }
    res->best = best;
    res->recall = best_r;
    res->qps = best_q;
    res->reached = 1;
    return CHIMERA_OK;
}
