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
 * fastest setting along this path, not a global optimum over all combinations.
 *
 * The exact re-rank tier is not a step of these walks: for a target of 0.99 or more on
 * an index with its vectors, the evaluation callbacks (src/chimera.c, tune_rerank)
 * re-score every full-bit scored document exactly, so k_fullbit walks as the re-rank's
 * depth. The build's calibration (target 0.95) leaves it off: a default that reads the
 * stored vectors would make every default search pay for them. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "search/tune.h"
#include "core/alloc.h"

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

/* ---- held-out validation -------------------------------------------------------------- */

void sp_recall_interval(double mean, double sd, int64_t n, uint32_t k, double z, double target,
                        double *low, double *high, int64_t *need)
{
    if (n <= 0) {
        *low = 0;
        *high = 1;
        *need = 0;
        return;
    }
    double hits = mean * (double)n * k, p = (hits + 1) / ((double)n * k + 2);
    double floor_sd = sqrt(p * (1 - p) / (double)k), s = sd > floor_sd ? sd : floor_sd;
    double half = z * s / sqrt((double)n);
    *low = mean - half < 0 ? 0 : mean - half;
    *high = mean + half > 1 ? 1 : mean + half;
    double room = (1 - target) / 2;
    double nn = room > 0 ? ceil((z * s / room) * (z * s / room)) : 1e18;
    *need = nn > 1e15 ? (int64_t)1e15 : (int64_t)nn;
}

chimera_status sp_tune_heldout(sp_tune_eval_fn eval, void *eval_ctx, sp_tune_check_fn check,
                               void *check_ctx, uint32_t k, double target, double z,
                               uint32_t n_clusters, int64_t n_docs, chimera_tune_result *res)
{
    chimera_tune_result *walk = cm_malloc(sizeof *walk);
    if (!walk) return CHIMERA_ERR_NOMEM;
    double t = target, best_low = -1;
    int have = 0, met = 0;
    chimera_search_params best = {0};
    double b_mean = 0, b_low = 0, b_high = 0, b_qps = 0, b_tune = 0;
    int64_t b_n = 0, b_need = 0;
    chimera_status s = CHIMERA_OK;
    for (int attempt = 0; attempt < 6 && !met; attempt++) {
        if ((s = sp_tune_backward(eval, eval_ctx, k, t, n_clusters, n_docs, walk)) != CHIMERA_OK)
            break;
        double mean, sd, qps, low, high;
        int64_t n, need;
        if ((s = check(check_ctx, &walk->best, &mean, &sd, &n, &qps)) != CHIMERA_OK) break;
        sp_recall_interval(mean, sd, n, k, z, target, &low, &high, &need);
        memcpy(res, walk, sizeof *res);
        if (low >= target || low > best_low) {
            best_low = low;
            best = walk->best;
            b_mean = mean;
            b_low = low;
            b_high = high;
            b_qps = qps;
            b_n = n;
            b_need = need;
            b_tune = t;
            have = 1;
        }
        if (low >= target) met = 1;
        /* the walk's own ceiling was below its target: a higher target finds nothing more */
        if (!walk->reached || t >= 1) break;
        t += target - low + 0.002;
        if (t > 1) t = 1;
    }
    cm_free(walk);
    if (s != CHIMERA_OK) return s;
    if (have) {
        res->best = best;
        res->recall = b_mean;
        res->qps = b_qps;
    }
    res->reached = met;
    res->heldout_recall = b_mean;
    res->heldout_low = b_low;
    res->heldout_high = b_high;
    res->n_heldout = b_n;
    res->heldout_need = b_need;
    res->tune_target = b_tune;
    return CHIMERA_OK;
}

/* ---- growing from a cheap setting (the build's calibration) ----------------------------- */

/* One step up: n_probe or k_fullbit (with k_refine kept at least 4 k_fullbit, the
 * default ratio) by half again, whichever gains more recall on the tuning queries; both
 * when neither gains (a plateau one knob alone does not leave). *r is p's recall.
 * Returns 0 when both knobs are at their caps. */
static int grow_step(sp_tune_eval_fn eval, void *ctx, chimera_tune_result *res,
                     chimera_search_params *p, double *r, double *q, uint32_t cap_np,
                     uint32_t cap_kf, uint32_t cap_kr, int *last, chimera_status *s)
{
    chimera_search_params a = *p, b = *p;
    uint64_t np = (uint64_t)p->n_probe * 3 / 2 + 1, kf = (uint64_t)p->k_fullbit * 3 / 2 + 1;
    a.n_probe = np < cap_np ? (uint32_t)np : cap_np;
    b.k_fullbit = kf < cap_kf ? (uint32_t)kf : cap_kf;
    uint64_t kr = (uint64_t)b.k_fullbit * 4;
    if (b.k_refine < kr) b.k_refine = kr < cap_kr ? (uint32_t)kr : cap_kr;
    if (b.k_refine < b.k_fullbit) b.k_refine = b.k_fullbit;
    int can_a = a.n_probe != p->n_probe;
    int can_b = b.k_fullbit != p->k_fullbit || b.k_refine != p->k_refine;
    if (!can_a && !can_b) return 0;
    double ra = -1, rb = -1, qa = 0, qb = 0;
    /* The knob that gained last time first: while one loss dominates (probing on a
     * clustered corpus, ranking at the bits' limit) it keeps gaining, and a clear gain
     * (0.005) is taken without measuring the other knob, half the trials per step. */
    if (*last == 2 && can_b) {
        if ((*s = trial(eval, ctx, &b, res, &rb, &qb)) != CHIMERA_OK) return 0;
        if (rb >= *r + 0.005) {
            *p = b;
            *r = rb;
            *q = qb;
            return 1;
        }
    } else if (*last == 1 && can_a) {
        if ((*s = trial(eval, ctx, &a, res, &ra, &qa)) != CHIMERA_OK) return 0;
        if (ra >= *r + 0.005) {
            *p = a;
            *r = ra;
            *q = qa;
            return 1;
        }
    }
    if (can_a && ra < 0 && (*s = trial(eval, ctx, &a, res, &ra, &qa)) != CHIMERA_OK) return 0;
    if (can_b && rb < 0 && (*s = trial(eval, ctx, &b, res, &rb, &qb)) != CHIMERA_OK) return 0;
    if (ra <= *r && rb <= *r && can_a && can_b) {
        chimera_search_params c = b;
        c.n_probe = a.n_probe;
        if ((*s = trial(eval, ctx, &c, res, r, q)) != CHIMERA_OK) return 0;
        *p = c;
        *last = 0;
    } else if (ra >= rb) {
        *p = a;
        *r = ra;
        *q = qa;
        *last = 1;
    } else {
        *p = b;
        *r = rb;
        *q = qb;
        *last = 2;
    }
    return 1;
}

chimera_status sp_tune_grow_heldout(sp_tune_eval_fn eval, void *eval_ctx, sp_tune_check_fn check,
                                    void *check_ctx, uint32_t k, double target, double z,
                                    uint32_t n_clusters, int64_t n_docs,
                                    const chimera_search_params *start, double ceiling,
                                    chimera_tune_result *res)
{
    memset(res, 0, sizeof *res);
    uint32_t docs = n_docs > (1 << 24) ? (1u << 24) : (uint32_t)(n_docs > 0 ? n_docs : 1);
    uint32_t cap_np = n_clusters < 128 ? n_clusters : 128;
    uint64_t ckf = (uint64_t)k * 64;
    uint32_t cap_kf = ckf < docs ? (uint32_t)ckf : docs, cap_kr = docs;
    if (cap_kf < k) cap_kf = k;
    chimera_search_params p = *start;
    if (p.n_probe > cap_np) p.n_probe = cap_np;
    if (p.k_fullbit > cap_kf) p.k_fullbit = cap_kf;
    if (p.k_refine > cap_kr) p.k_refine = cap_kr;
    if (p.k_refine < p.k_fullbit) p.k_refine = p.k_fullbit;
    double r, q, t = target, best_low = -1;
    chimera_status s = trial(eval, eval_ctx, &p, res, &r, &q);
    if (s != CHIMERA_OK) return s;
    int met = 0, room = 1, flat = 0, last = 0;
    for (int round = 0; round < 8 && !met; round++) {
        /* Two steps in a row that gain nothing near the ceiling (the recall of a generous
         * search: what the index's bits allow) mean the plateau, so stop paying for
         * steps; a flat stretch further below it is a knob that has not yet started to
         * matter (probing, on a clustered corpus), so the walk goes on. */
        while (r < t && flat < 2) {
            double before = r;
            if (!(room = grow_step(eval, eval_ctx, res, &p, &r, &q, cap_np, cap_kf, cap_kr, &last,
                                   &s)))
                break;
            int near = ceiling <= 0 || r >= ceiling - 0.01;
            flat = near && r < before + 0.002 ? flat + 1 : 0;
            if (ceiling > 0 && ceiling < t && r >= ceiling - 0.003) break; /* as good as it gets */
        }
        if (s != CHIMERA_OK) return s;
        if (flat >= 2) room = 0;
        double mean, sd, hq, low, high;
        int64_t n, need;
        if ((s = check(check_ctx, &p, &mean, &sd, &n, &hq)) != CHIMERA_OK) return s;
        sp_recall_interval(mean, sd, n, k, z, target, &low, &high, &need);
        /* a later (dearer) setting replaces the kept one only when clearly better or
         * when it meets the target: bounds within noise of each other favour the cheaper */
        if (low >= target || low > best_low + 0.002) {
            best_low = low;
            res->best = p;
            res->recall = mean;
            res->qps = hq;
            res->heldout_recall = mean;
            res->heldout_low = low;
            res->heldout_high = high;
            res->n_heldout = n;
            res->heldout_need = need;
            res->tune_target = t;
        }
        met = low >= target;
        if (met || !room || t >= 1) break;
        /* the held-out bound fell short: hold the tuning queries to more, by the
         * shortfall, and keep growing from here */
        t += target - low + 0.002;
        if (t > 1) t = 1;
    }
    res->reached = met;
    return CHIMERA_OK;
}
