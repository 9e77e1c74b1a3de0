/* Three walks over search settings, each against an evaluation callback: the backward
 * procedure (paper §3.2, below), the build calibration's walk up from a cheap setting
 * (sp_tune_grow_heldout), and the covered form's frontier (sp_tune_frontier_heldout,
 * `chimera tune` on the CPU).
 *
 * The backward tuning procedure (paper §3.2), automated:
 *
 *   1. start generous: n_probe and k_refine large, so candidate generation and
 *      refinement lose (almost) nothing;
 *   2. raise k_fullbit from k until the target recall is reached: the full-bit stage
 *      is the only one that can recover order among good candidates;
 *   3. shrink k_refine (never below k_fullbit) while the target holds;
 *   4. then shrink n_probe while the target holds and the search does not get clearly
 *      slower (fewer probes can cost more where a search widens them again);
 *   4a. try the covered form, k_fullbit = k_refine (no 1-bit pass): n_probe shrunk as
 *      in 4 (the deep list leaves it room), then both depths while the target holds;
 *      kept when measurably faster;
 *   4b. where k_refine is still 3 k_fullbit or more, try centroid interaction: three
 *      times k_refine, of which the interaction passes on as many as 1-bit scoring took
 *      before, then fewer while the target holds; kept when measurably faster;
 *   5. finally try fewer and more chunks for the chosen setting (throughput only).
 *
 * Each step keeps the cheapest setting that still reaches the target; every trial is
 * recorded. If even the generous setting misses the target (the quantisation bits cap
 * recall: B = 4 reaches ~0.95-0.98), the best setting found is reported with
 * reached = 0. Search cost falls in each knob (but for n_probe where a search widens
 * its probing, step 4), so the walk finds the fastest setting along this path, not a
 * global optimum over all combinations.
 *
 * The exact re-rank tier is not a step of these walks: for a target of 0.99 or more on
 * an index with its vectors, the evaluation callbacks (src/chimera.c, tune_rerank)
 * re-score every full-bit scored document exactly, so k_fullbit walks as the re-rank's
 * depth (the frontier walk sets a shallower re-rank itself, sp_tune_frontier_heldout).
 * The build's calibration (target 0.95) leaves it off: a default that reads the
 * stored vectors would make every default search pay for them. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "search/tune.h"
#include "core/alloc.h"

#define MAX_POINTS ((int)(sizeof ((chimera_tune_result *)0)->points / sizeof(chimera_tune_point)))
/* A measured rate below this fraction of another is slower beyond the noise of a shared
 * machine (runs of one setting spread +-10%); used where a step that should make a
 * search cheaper can make it dearer (step 4 below). */
#define TUNE_SLOWER 0.85

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

/* Step 4's shrinking of n_probe from *p (measured at *r, *q): by quarters (by one from 8
 * down) while the target holds and the search does not get clearly slower than the
 * fastest setting of the step; *p, *r, *q end at the last setting kept. */
static chimera_status shrink_probes(sp_tune_eval_fn eval, void *ctx, chimera_tune_result *res,
                                    double target, chimera_search_params *p, double *r,
                                    double *q)
{
    for (double fastest = *q;;) {
        uint32_t next = p->n_probe > 8 ? p->n_probe * 3 / 4 : p->n_probe - 1;
        if (next < 1 || next == p->n_probe) break;
        chimera_search_params t = *p;
        t.n_probe = next;
        double tr, tq;
        CM_TRY(trial(eval, ctx, &t, res, &tr, &tq));
        if (tr < target || tq < fastest * TUNE_SLOWER) break;
        *p = t;
        *r = tr;
        *q = tq;
        if (tq > fastest) fastest = tq;
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
    p.impute_scale = 0; /* the index's, which the result reports (not the library's 1) */
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
    /* 4. shrink n_probe by quarters (by one from 8 down) while the target holds and the
     * search does not get clearly slower than the fastest setting of this step: where
     * the probed clusters of fewer probes hold too few documents for k_fullbit (a
     * strongly clustered corpus), a search doubles its probing and refines again
     * (pipeline.h), so recall holds all the way down while each step costs more (one
     * probe ran 1.4-1.8x slower than 64 at the same recall on bench/RESULTS.md section
     * 5.21's d80-clust-small, k = 100). Against the fastest, not the step before, so
     * that small losses cannot add up. */
    CM_TRY(shrink_probes(eval, ctx, res, target, &p, &best_r, &best_q));
    best = p;
    /* 4a. the covered form: k_fullbit raised to k_refine, where the pipeline skips the
     * 1-bit pass (pipeline.h), n_probe shrunk as in 4, then both depths cut by factors
     * of ~0.8 while the target holds; kept when measurably faster. On the CPU a 1-bit
     * scored document costs 0.4-0.75x a full-bit one (bench/RESULTS.md 5.19, 5.20), so
     * scoring fewer documents once often beats filtering more of them first. */
    if (p.k_fullbit < p.k_refine) {
        chimera_search_params cv = p;
        cv.k_fullbit = cv.k_refine;
        double cv_q = 0, cv_r = 0;
        CM_TRY(trial(eval, ctx, &cv, res, &cv_r, &cv_q));
        int ok = cv_r >= target;
        if (ok) {
            /* probes first, while the deep list leaves recall to spare: cutting the list
             * first spends the margin that fewer probes need, and the walk ended at
             * n_probe 64 where 24 probes and a list a third as deep held the target at
             * over twice the speed (a real corpus, bench/RESULTS.md section 5.25) */
            CM_TRY(shrink_probes(eval, ctx, res, target, &cv, &cv_r, &cv_q));
            for (;;) {
                uint32_t next = (uint32_t)((double)cv.k_refine * 0.8);
                if (next < p.k_fullbit || next == cv.k_refine) break;
                chimera_search_params t = cv;
                t.k_refine = t.k_fullbit = next;
                CM_TRY(trial(eval, ctx, &t, res, &r, &q));
                if (r < target) break;
                cv = t;
                cv_q = q;
                cv_r = r;
            }
        }
        if (ok && cv_q > best_q * 1.03) {
            p = cv;
            best = cv;
            best_r = cv_r;
            best_q = cv_q;
        }
    }
    /* 4b. centroid interaction: refinement keeps three times the documents and only the
     * best of them by the interaction are 1-bit scored, as many as were before, then
     * fewer by factors of ~0.7 while the target holds; kept when measurably faster */
    if (p.k_refine < docs && p.k_refine >= 3 * p.k_fullbit) { /* else little to cut */
        chimera_search_params t = p;
        uint64_t kr = (uint64_t)p.k_refine * 3;
        t.k_refine = kr < docs ? (uint32_t)kr : docs;
        t.k_interaction = p.k_refine;
        chimera_search_params ci = t;
        double ci_q = 0, ci_r = 0;
        int ok = 0;
        for (;;) {
            CM_TRY(trial(eval, ctx, &t, res, &r, &q));
            if (r < target) break;
            ok = 1;
            ci = t;
            ci_q = q;
            ci_r = r;
            uint32_t next = (uint32_t)((double)t.k_interaction * 0.7);
            if (next < t.k_fullbit || next == t.k_interaction) break;
            t.k_interaction = next;
        }
        if (ok && ci_q > best_q * 1.03) {
            p = ci;
            best = ci;
            best_r = ci_r;
            best_q = ci_q;
        }
    }
    /* 5. chunks: the speed knob that does not change recall (much); none in the covered
     * form, which has no 1-bit chunks */
    uint32_t chunk_opts[] = {1, 2, 8};
    for (size_t i = 0; best.k_fullbit < best.k_refine && i < sizeof chunk_opts / sizeof chunk_opts[0]; i++) {
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

/* One setting's held-out check (its mean recall and interval, the measured rate) and the
 * tuning target it was found at. */
typedef struct heldout_check {
    chimera_search_params p;
    double mean, low, high, qps, tune_target;
    int64_t n, need;
} heldout_check;

static chimera_status run_check(sp_tune_check_fn check, void *ctx, const chimera_search_params *p,
                                uint32_t k, double z, double target, double tune_target,
                                heldout_check *h)
{
    double sd;
    h->p = *p;
    h->tune_target = tune_target;
    CM_TRY(check(ctx, p, &h->mean, &sd, &h->n, &h->qps));
    sp_recall_interval(h->mean, sd, h->n, k, z, target, &h->low, &h->high, &h->need);
    return CHIMERA_OK;
}

/* The checked setting as the result: res->best, recall and qps as checked, the held-out
 * fields and the tuning target. */
static void keep_check(chimera_tune_result *res, const heldout_check *h)
{
    res->best = h->p;
    res->recall = res->heldout_recall = h->mean;
    res->qps = h->qps;
    res->heldout_low = h->low;
    res->heldout_high = h->high;
    res->n_heldout = h->n;
    res->heldout_need = h->need;
    res->tune_target = h->tune_target;
}

chimera_status sp_tune_heldout(sp_tune_eval_fn eval, void *eval_ctx, sp_tune_check_fn check,
                               void *check_ctx, uint32_t k, double target, double z,
                               uint32_t n_clusters, int64_t n_docs, chimera_tune_result *res)
{
    chimera_tune_result *walk = cm_malloc(sizeof *walk);
    if (!walk) return CHIMERA_ERR_NOMEM;
    double t = target, best_low = -1, t_short = -1;
    int met = 0, have = 0;
    heldout_check b = {0}, h;
    chimera_status s = CHIMERA_OK;
    for (int attempt = 0; attempt < 6 && !met; attempt++) {
        if ((s = sp_tune_backward(eval, eval_ctx, k, t, n_clusters, n_docs, walk)) != CHIMERA_OK)
            break;
        if ((s = run_check(check, check_ctx, &walk->best, k, z, target, t, &h)) != CHIMERA_OK)
            break;
        memcpy(res, walk, sizeof *res);
        if (h.low >= target || h.low > best_low) {
            best_low = h.low;
            b = h;
            have = 1;
        }
        if (h.low >= target) met = 1;
        /* the walk's own ceiling was below its target: a higher target finds nothing more */
        if (!walk->reached || t >= 1) break;
        if (!met) {
            if (t_short < 0) t_short = t; /* the first target, which fell short */
            t += target - h.low + 0.002;
            if (t > 1) t = 1;
        }
    }
    /* The raise above takes the whole shortfall of one pick, whose held-out recall can
     * fall far below its tuning recall (a real corpus: 64 / 35 / 20 at 0.953 tuning,
     * 0.934 held out, so the target went 0.95 -> 0.981 and the walk kept n_probe 64 and
     * k_refine 313, bench/RESULTS.md section 5.25). Two halvings between the first
     * target, which fell short, and the one that met look for a cheaper setting that
     * meets it too (from the first: a raised target can fall short again where a lower
     * one picks a sturdier setting), and the faster by the held-out rate is kept. */
    for (int i = 0; s == CHIMERA_OK && met && t_short >= 0 && i < 2; i++) {
        double tm = 0.5 * (t_short + t);
        if ((s = sp_tune_backward(eval, eval_ctx, k, tm, n_clusters, n_docs, walk)) != CHIMERA_OK)
            break;
        if ((s = run_check(check, check_ctx, &walk->best, k, z, target, tm, &h)) != CHIMERA_OK)
            break;
        if (h.low >= target && walk->reached) { /* a walk short of its own target: no pick */
            t = tm;
            if (h.qps > b.qps) {
                b = h;
                memcpy(res, walk, sizeof *res);
            }
        } else {
            t_short = tm;
        }
    }
    cm_free(walk);
    if (s != CHIMERA_OK) return s;
    /* none kept only where every check's mean was NaN: the last walk's own result, with
     * the held-out fields zero as it left them */
    if (have) keep_check(res, &b);
    res->reached = met;
    return CHIMERA_OK;
}

/* ---- the cost model ------------------------------------------------------------------- */

/* Nanoseconds of one core per unit of work, measured on the CPU backend (4-bit full-bit
 * codes, AVX-512 VNNI: Intel Sapphire Rapids, the documents' terms since 0.14.1 on AMD
 * Zen 4) with `chimera search --profile --threads 1` over settings that move one count
 * at a time, on seven generated corpora of d = 64 to 256 (0.13-1.65M tokens;
 * bench/RESULTS.md section 5.20), each cost fitted as a fixed part and a part per
 * dimension. Only their ratios matter to a choice between settings, and those hold
 * across machines better than the times do (on Zen 4 the generate stage, the lazy rows
 * and the full S came within 15% of this model at 10^7 tokens, section 5.35):
 *   probe    per query token and probe selected from the scores of every centroid
 *            (the top-n_probe selection grows with the probes it must return, and
 *            since 0.12.0 each 1.25 candidates a probe are scored again in float from
 *            their rows: those scores are full S, below), every round of a probing
 *            that widened (chimera_search_profile.n_probed, less n_walked): 430 ns at
 *            d = 64, 490 at 256 before the float candidates, 810 at d = 128 with
 *            them (a real corpus, two threads: bench/RESULTS.md section 5.28); their
 *            part, a dot product and a row read, taken as proportional to d (one d
 *            measured);
 *   entry    per posting entry given a 1-bit estimate (computing it, grouping it by
 *            document): 12 ns at d = 64, 18 at 256;
 *   touched  per document seen in refinement (its slot, the k_refine selection);
 *   doc1     per document token 1-bit scored, a part per token and a part per query
 *            token: (10.1 + 0.044 d) + m (0.047 + 0.0063 d) ns for a query of m <= 32
 *            tokens, and beyond 32 that of 32 times m / 32 (the longest measured; the
 *            kernels take more query tokens in more passes of the same work);
 *   docB     the same at full bits: (6.6 + 0.155 d) + m (0.11 + 0.0050 d) ns. Both
 *            were refitted on a 2-core AMD EPYC (Zen 4, AVX-512 VNNI) from nine
 *            generated corpora at m = 4, 8, 16 and 32 (bench/cost_by_length.py,
 *            bench/RESULTS.md section 5.36): the kernels score 16 query tokens a vector
 *            (8 in the two-token form of m <= 8), so a document token's unpacking, its
 *            factors and the estimate's epilogue cost the same for 4 query tokens as
 *            for 16; at 4-8 query tokens a document costs 2-3x what section 5.20's
 *            price per pair (0.98 + 0.0099 d ns at full bits, fitted at m = 32) said,
 *            at 16 about as much, which made depth look cheap next to probes for the
 *            short queries. Both kernels take each query token's maximum with the same
 *            8-bit query, so a 1-bit scored document costs 0.5-1.1 of a full-bit one
 *            (measured), not the fifth its bytes suggest;
 *   S read   per document token full-bit scored against the centroid scores of every
 *            centroid (a query that did not walk), where S (K rows of m floats)
 *            outgrows the caches: the token's row is a random read. At 10^7 tokens (K
 *            = 99,328, S of 3-6 MiB at m = 8-16) a full-bit token cost 9-10 ns more
 *            than at K = 8,256 and at K = 33,152 (S of 1-2 MiB) nothing more (section
 *            5.36; the 1-bit kernel's difference, +4 and -1 ns, is within noise): 20 ns
 *            times the share of S beyond 2 MiB, 9.5 ns at K = 99,328 and m = 10. The
 *            2 MiB is where the measurements put the step, not a cache's size;
 *   pairCI   per pair of centroid interaction (a table lookup and a max, whatever d):
 *            0.4 ns at d = 96 and 384, on every refined document when it runs;
 *   row      per centroid-score row computed one by one for the scored documents'
 *            tokens (chimera_search_profile.n_rows), per query token and dimension:
 *            120 ns a row at 10 query tokens, d = 128, on 10^7 tokens (the random reads
 *            of a corpus far larger than the caches, which those rows come with, are in
 *            it too); a query that switched to scoring every centroid counts K rows,
 *            which keeps the cost continuous across that switch;
 *   walk     per query token and probe found by a walk of the centroid graph (on the
 *            CPU from ~25k centroids, for queries whose documents' tokens are few next
 *            to them; chimera_search_profile.n_walked) in place of probe's selection:
 *            1.08 us on 10^7 generated tokens (K = 99,328) and 1.64 us on a real
 *            corpus (K = 47,488), both d = 128, two threads (bench/RESULTS.md section
 *            5.26), and no part per dimension fitted (one d measured);
 *   seed     per row of the walks' seed sample (16 sqrt(K) centroids, cpu_backend.c),
 *            query token and dimension, for a query that walked: 0.065 ns on the real
 *            corpus, 0.041 on the generated one (what the generate stage took beyond
 *            its walks);
 *   full S   per centroid, query token and dimension, for a query whose probes were
 *            not walked (it scored every centroid, from the 8-bit centroids since
 *            0.12.0): 0.013 ns (the same real corpus, two threads: 0.96 ms a query of
 *            12 tokens; the float sgemm before it, batched, 2.3 ms: 0.031);
 *   rerank   per (document token, query token) pair and dimension of the exact re-rank
 *            (chimera_search_profile.n_reranked): 1.15-1.5 ms a query of 12 tokens at
 *            depth 300 on a real corpus of 78-token documents, d = 128 (bench/RESULTS.md
 *            section 5.15), 0.033-0.042 ns; at 12 query tokens 1.7x a full-bit document
 *            token, so a walk that tunes with the re-rank on (a target of 0.99) prices
 *            its depth at what it costs.
 * Walk, seed and full S are the same for every setting where no query walks (a small
 * index), and matter where probe=auto walks for shallow settings and scores every
 * centroid for deep ones (cpu_backend.c). Before them a walk was priced as a selection
 * and the full scores as nothing, so deep settings looked cheap next to shallow ones;
 * the K rows a walk that switched to the full S counts (row, above) still price that
 * switch at 7x the full S's cost. */
#define COST_PROBE 409.0
#define COST_PROBE_DIM 3.1
#define COST_ENTRY 10.6
#define COST_ENTRY_DIM 0.028
#define COST_TOUCHED 8.0
#define COST_TOK1 10.1
#define COST_TOK1_DIM 0.044
#define COST_PAIR1 0.047
#define COST_PAIR1_DIM 0.0063
#define COST_TOKB 6.6
#define COST_TOKB_DIM 0.155
#define COST_PAIRB 0.11
#define COST_PAIRB_DIM 0.0050
#define COST_S_READ 20.0
#define COST_S_NEAR_BYTES 2097152.0 /* 2 MiB */
#define COST_DOC_M_MAX 32.0
#define COST_PAIR_CI 0.4
#define COST_ROW_DIM 0.094
#define COST_WALK 1300.0
#define COST_SEED_DIM 0.05
#define COST_SEED_PER_ROOT 16.0 /* the seed sample: 16 sqrt(K) (cpu_backend.c) */
#define COST_FULL_S_DIM 0.013
#define COST_RERANK_DIM 0.04

double sp_tune_cost(const chimera_search_profile *prof, const chimera_search_params *p,
                    int64_t n_queries, int64_t n_query_tokens, uint32_t dim, double doc_len,
                    uint32_t n_clusters)
{
    if (n_queries <= 0) return 0;
    double nq = (double)n_queries, m = (double)n_query_tokens / nq, d = dim;
    /* the probes that ran, every round of a probing that widened (0 before 0.10.0's
     * count, or where none ran: the setting's) */
    double probed = prof->n_probed ? (double)prof->n_probed / nq : p->n_probe;
    double walked = (double)prof->n_walked / nq;
    if (walked > probed) walked = probed;
    double probe = (COST_PROBE + COST_PROBE_DIM * d) * m * (probed - walked) +
                   COST_WALK * m * walked;
    /* the shares of the queries that walked and that scored every centroid, by their
     * probes */
    double walk_share = probed > 0 ? walked / probed : 0;
    double full_share = probed > 0 ? 1 - walk_share : 0;
    double seed =
        COST_SEED_DIM * m * d * COST_SEED_PER_ROOT * sqrt((double)n_clusters) * walk_share;
    double full_s = COST_FULL_S_DIM * m * d * n_clusters * full_share;
    double entries = (COST_ENTRY + COST_ENTRY_DIM * d) * (double)prof->tokens_refined / nq;
    double touched = COST_TOUCHED * (double)prof->docs_touched / nq;
    double pairs = doc_len * m / nq; /* per document, over the queries */
    /* a document token's part per query token, to 32 query tokens (the longest measured)
     * and in proportion beyond; the random read of its row of S, for the queries that
     * scored every centroid, where S outgrows the caches */
    double md = m < COST_DOC_M_MAX ? m : COST_DOC_M_MAX, beyond = m > md ? m / md : 1;
    double s_bytes = 4.0 * m * n_clusters;
    double s_far = s_bytes > COST_S_NEAR_BYTES ? 1 - COST_S_NEAR_BYTES / s_bytes : 0;
    double tok1 = COST_TOK1 + COST_TOK1_DIM * d + (COST_PAIR1 + COST_PAIR1_DIM * d) * md;
    double tokB = COST_TOKB + COST_TOKB_DIM * d + (COST_PAIRB + COST_PAIRB_DIM * d) * md;
    tok1 *= beyond;
    tokB = tokB * beyond + COST_S_READ * s_far * full_share;
    /* the documents 1-bit scored as counted (none where full-bit scoring covered the
     * refined ones, pipeline.h); centroid interaction, where the setting asks for it,
     * reads every refined document */
    int ci = p->k_interaction && p->k_interaction < p->k_refine;
    double scored1 = (double)prof->n_scored1;
    double interaction = ci ? COST_PAIR_CI * pairs * (double)prof->n_refined : 0;
    double score1 = tok1 * doc_len / nq * scored1;
    double fullbit = tokB * doc_len / nq * (double)prof->n_fullbit;
    double rows = COST_ROW_DIM * m * d * (double)prof->n_rows / nq;
    double rerank = COST_RERANK_DIM * d * pairs * (double)prof->n_reranked;
    return probe + seed + full_s + entries + touched + interaction + score1 + fullbit + rows +
           rerank;
}

/* ---- the settings a walk has measured --------------------------------------------------- */

/* The grow walk and the frontier walk both choose among every setting they measured, by
 * modelled cost, and a setting that fell short on the held-out queries is never chosen
 * again. A setting is measured once per tune: the walks at raised targets and the
 * n_probe doubling meet settings already measured, and the counts a search reports are
 * the same on every run, so the stored recall and cost stand for a new trial. At most 8
 * walks (6 raises, 2 halvings) of ~30 ladder rungs, 3 bisections of ~6 trials and a
 * re-rank trial each, or the grow walk's 8 rounds of a few steps: the memo cannot fill,
 * so no later setting is ever dropped from the choice. */
#define MEMO_MAX 1024

typedef struct tune_memo {
    sp_tune_cost_fn eval;
    void *ctx;
    chimera_tune_result *res; /* its points: each setting as first measured */
    /* the points carry the modelled rate, 1e9 / cost, not the measured one: the build's
     * calibration, whose choice (and report) must not follow a shared machine's noise */
    int modelled_rate;
    chimera_search_params p[MEMO_MAX];
    double r[MEMO_MAX], cost[MEMO_MAX];
    unsigned char failed[MEMO_MAX]; /* checked on the held-out queries: fell short */
    int n;
} tune_memo;

static int same_setting(const chimera_search_params *a, const chimera_search_params *b)
{
    return a->n_probe == b->n_probe && a->k_refine == b->k_refine &&
           a->k_fullbit == b->k_fullbit && a->chunks == b->chunks && a->impute == b->impute &&
           a->probe == b->probe && a->rerank_depth == b->rerank_depth &&
           a->k_interaction == b->k_interaction && a->impute_scale == b->impute_scale &&
           a->recall == b->recall && a->chosen == b->chosen;
}

/* p's tuning recall and modelled cost, measured at its first use. */
static chimera_status memo_measure(tune_memo *m, const chimera_search_params *p, double *r,
                                   double *c)
{
    for (int i = 0; i < m->n; i++)
        if (same_setting(&m->p[i], p)) {
            *r = m->r[i];
            *c = m->cost[i];
            return CHIMERA_OK;
        }
    double qps;
    CM_TRY(m->eval(m->ctx, p, r, c, &qps));
    chimera_tune_result *res = m->res;
    if (res->n_points < MAX_POINTS) {
        chimera_tune_point *pt = &res->points[res->n_points++];
        pt->params = *p;
        pt->recall = *r;
        pt->qps = !m->modelled_rate ? qps : *c > 0 ? 1e9 / *c : 0;
    }
    if (m->n < MEMO_MAX) {
        m->p[m->n] = *p;
        m->r[m->n] = *r;
        m->cost[m->n] = *c;
        m->failed[m->n] = 0;
        m->n++;
    }
    return CHIMERA_OK;
}

/* The cheapest setting measured whose tuning recall meets t and that has not fallen
 * short on the held-out queries; -1 when none. */
static int memo_cheapest(const tune_memo *m, double t)
{
    int best = -1;
    for (int i = 0; i < m->n; i++)
        if (!m->failed[i] && m->r[i] >= t && (best < 0 || m->cost[i] < m->cost[best])) best = i;
    return best;
}

/* ---- growing from a cheap setting (the build's calibration) ----------------------------- */

/* The walk's choice between its two knobs, and the final choice among the settings it
 * measured, go by the modelled cost (sp_tune_cost), not by recall alone nor by measured
 * time. By recall alone, the knob that gains more wins even when it costs several times
 * as much: on a real corpus the walk raised n_probe to 92 where 16 probes and a deeper
 * k_fullbit gave the same recall 2-10x faster. By measured seconds, two settings within
 * noise of each other on a shared machine swapped places between builds. The counts a
 * search reports (posting entries, documents refined and scored) are exact, so the
 * choice is the same on every run of the same build. */

typedef struct grow_walk {
    tune_memo memo; /* every setting measured: the candidates of the final choice */
    double ratio[3]; /* per knob (1: n_probe, 2: k_fullbit): the last gain per cost */
    /* k_refine and k_interaction (0: off) per k_fullbit, the start's: a step of
     * k_fullbit raises them in proportion */
    double refine_per_fullbit, interaction_per_fullbit;
} grow_walk;

/* Gains smaller than this (under two hits in 320: k = 10 on 32 tuning queries) are noise
 * of the tuning sample, not a reason to pay for a step nor to prefer a knob. */
#define GROW_MIN_GAIN 0.005

static chimera_status grow_trial(grow_walk *g, const chimera_search_params *p, double *r,
                                 double *cost)
{
    return memo_measure(&g->memo, p, r, cost);
}

/* One step up: n_probe or k_fullbit (with k_refine and k_interaction kept at least the
 * start's multiples of it) by half again, whichever gains more recall per unit of added
 * cost on the tuning queries; both when neither gains (a plateau one knob alone does not leave).
 * *r, *c are p's recall and cost. Returns 0 when both knobs are at their caps. */
static int grow_step(grow_walk *g, chimera_search_params *p, double *r, double *c,
                     uint32_t cap_np, uint32_t cap_kf, uint32_t cap_kr, int *last,
                     chimera_status *s)
{
    chimera_search_params a = *p, b = *p;
    uint64_t np = (uint64_t)p->n_probe * 3 / 2 + 1, kf = (uint64_t)p->k_fullbit * 3 / 2 + 1;
    a.n_probe = np < cap_np ? (uint32_t)np : cap_np;
    b.k_fullbit = kf < cap_kf ? (uint32_t)kf : cap_kf;
    double kr = ceil(b.k_fullbit * g->refine_per_fullbit);
    if (b.k_refine < kr) b.k_refine = kr < cap_kr ? (uint32_t)kr : cap_kr;
    if (b.k_refine < b.k_fullbit) b.k_refine = b.k_fullbit;
    double ki = ceil(b.k_fullbit * g->interaction_per_fullbit);
    if (b.k_interaction && b.k_interaction < ki) b.k_interaction = ki < cap_kr ? (uint32_t)ki : cap_kr;
    int can[3] = {0, a.n_probe != p->n_probe, b.k_fullbit != p->k_fullbit || b.k_refine != p->k_refine};
    if (!can[1] && !can[2]) return 0;
    chimera_search_params *knob[3] = {NULL, &a, &b};
    double rk[3] = {0, -1, -1}, ck[3] = {0, 0, 0}, gk[3] = {0, 0, 0};
    /* The knob that won last time first: while one loss dominates (probing on a
     * clustered corpus, ranking at the bits' limit) it keeps winning, and a clear gain
     * at a rate per cost no worse than the other knob's last one is taken without
     * measuring the other knob: half the trials per step. */
    int first = *last == 1 || *last == 2 ? *last : 0, other = 3 - first;
    if (first && can[first]) {
        if ((*s = grow_trial(g, knob[first], &rk[first], &ck[first])) != CHIMERA_OK) return 0;
        double dc = ck[first] - *c > 1e-9 * *c ? ck[first] - *c : 1e-9 * *c + 1e-12;
        gk[first] = (rk[first] - *r) / dc;
        if (rk[first] >= *r + GROW_MIN_GAIN && (!can[other] || gk[first] >= g->ratio[other])) {
            g->ratio[first] = gk[first];
            *p = *knob[first];
            *r = rk[first];
            *c = ck[first];
            return 1;
        }
    }
    for (int i = 1; i <= 2; i++) {
        if (!can[i] || rk[i] >= 0) continue;
        if ((*s = grow_trial(g, knob[i], &rk[i], &ck[i])) != CHIMERA_OK) return 0;
        double dc = ck[i] - *c > 1e-9 * *c ? ck[i] - *c : 1e-9 * *c + 1e-12;
        gk[i] = (rk[i] - *r) / dc;
    }
    for (int i = 1; i <= 2; i++)
        if (can[i]) g->ratio[i] = gk[i];
    int ga = can[1] && rk[1] >= *r + GROW_MIN_GAIN, gb = can[2] && rk[2] >= *r + GROW_MIN_GAIN;
    int pick;
    if (!ga && !gb) {
        if (can[1] && can[2]) {
            chimera_search_params both = b;
            both.n_probe = a.n_probe;
            if ((*s = grow_trial(g, &both, r, c)) != CHIMERA_OK) return 0;
            *p = both;
            *last = 0;
            return 1;
        }
        pick = can[1] ? 1 : 2;
    } else if (ga && gb) {
        pick = gk[1] >= gk[2] ? 1 : 2;
    } else {
        pick = ga ? 1 : 2;
    }
    *p = *knob[pick];
    *r = rk[pick];
    *c = ck[pick];
    *last = pick;
    return 1;
}

chimera_status sp_tune_grow_heldout(sp_tune_cost_fn eval, void *eval_ctx, sp_tune_check_fn check,
                                    void *check_ctx, uint32_t k, double target, double z,
                                    uint32_t n_clusters, int64_t n_docs,
                                    const chimera_search_params *start, double ceiling,
                                    chimera_tune_result *res)
{
    memset(res, 0, sizeof *res);
    grow_walk *g = cm_malloc(sizeof *g);
    if (!g) return CHIMERA_ERR_NOMEM;
    memset(g, 0, sizeof *g);
    g->memo.eval = eval;
    g->memo.ctx = eval_ctx;
    g->memo.res = res;
    g->memo.modelled_rate = 1;
    uint32_t docs = n_docs > (1 << 24) ? (1u << 24) : (uint32_t)(n_docs > 0 ? n_docs : 1);
    uint32_t cap_np = n_clusters < 128 ? n_clusters : 128;
    uint64_t ckf = (uint64_t)k * 64;
    uint32_t cap_kf = ckf < docs ? (uint32_t)ckf : docs, cap_kr = docs;
    if (cap_kf < k) cap_kf = k;
    chimera_search_params p = *start;
    if (p.n_probe > cap_np) p.n_probe = cap_np;
    if (!p.n_probe) p.n_probe = 1;
    if (!p.k_fullbit) p.k_fullbit = k;
    if (p.k_fullbit > cap_kf) p.k_fullbit = cap_kf;
    if (p.k_refine > cap_kr) p.k_refine = cap_kr;
    if (p.k_refine < p.k_fullbit) p.k_refine = p.k_fullbit;
    if (p.k_interaction >= p.k_refine) p.k_interaction = 0;
    g->refine_per_fullbit = (double)p.k_refine / p.k_fullbit;
    g->interaction_per_fullbit = p.k_interaction ? (double)p.k_interaction / p.k_fullbit : 0;
    double r, c, t = target, best_low = -1, best_cost = 0;
    chimera_status s = grow_trial(g, &p, &r, &c);
    int met = 0, room = 1, last = 0, mean_met = 0;
    double flat = 0;
    for (int round = 0; s == CHIMERA_OK && round < 8 && !met; round++) {
        /* Two steps in a row that gain nothing near the ceiling (the recall of a generous
         * search: what the index's bits allow) mean the plateau, so stop paying for
         * steps; a flat stretch further below it is a knob that has not yet started to
         * matter (probing, on a clustered corpus), so the walk goes on. Once a held-out
         * mean has met the target (only its interval fell short), one flat step is the
         * plateau: the ceiling, a generous search's recall against its own candidates,
         * can overstate what deeper settings reach (a flat corpus of short documents:
         * ceiling 0.978, nine more trials at 0.948-0.956, bench/RESULTS.md sections 5.22, 5.24),
         * and the steps that gain nothing only make the setting dearer. */
        int cheapest;
        while ((cheapest = memo_cheapest(&g->memo, t)) < 0 && flat < 2) {
            double before = r;
            if (!(room = grow_step(g, &p, &r, &c, cap_np, cap_kf, cap_kr, &last, &s))) break;
            int near = ceiling <= 0 || r >= ceiling - 0.01;
            /* far below the ceiling, a third flat step ends it too: one knob at its cap
             * and the other not gaining */
            flat = r < before + GROW_MIN_GAIN ? flat + (mean_met ? 2 : near ? 1 : 0.75) : 0;
            if (ceiling > 0 && r >= ceiling - 0.003) break; /* as good as it gets */
        }
        if (s != CHIMERA_OK) break;
        if (flat >= 2) room = 0;
        /* the cheapest setting that meets the tuning target; when none does (the
         * ceiling, the plateau, the caps), the walk's own last one */
        chimera_search_params q = cheapest >= 0 ? g->memo.p[cheapest] : p;
        double q_cost = cheapest >= 0 ? g->memo.cost[cheapest] : c;
        heldout_check h;
        if ((s = run_check(check, check_ctx, &q, k, z, target, t, &h)) != CHIMERA_OK) break;
        double mean = h.mean, low = h.low;
        /* a later (dearer) setting replaces the kept one only when clearly better or
         * when it meets the target: bounds within noise of each other favour the cheaper */
        if (low >= target || low > best_low + 0.002) {
            best_low = low;
            keep_check(res, &h);
            best_cost = q_cost;
        }
        met = low >= target;
        if (met) break;
        mean_met = mean_met || mean >= target;
        if (cheapest >= 0) g->memo.failed[cheapest] = 1;
        if (!room || t >= 1) break;
        /* the held-out bound fell short: hold the tuning queries to more, by the
         * shortfall, and keep growing from here. Beyond what a generous search reaches on
         * them: when the held-out mean meets the target, only the interval is too wide
         * (few held-out queries for the spread of their recall) and more steps would only
         * make the setting dearer, so the walk stops (so too when the target itself is
         * beyond the ceiling; the held-out growth below then decides); when the mean
         * falls short of a target below the ceiling, grow on by the mean's shortfall, at
         * most to the ceiling (stopping there left a default at Recall@100 0.93 where a
         * dearer setting reached 0.97). */
        double next = t + target - low + 0.002;
        if (ceiling > 0 && next > ceiling - 0.003) {
            if (mean < target && target < ceiling - 0.003) {
                next = t + target - mean + 0.002; /* the mean's shortfall alone */
                if (next > ceiling - 0.003) next = ceiling - 0.003;
            } else if (memo_cheapest(&g->memo, next > 1 ? 1 : next) < 0) {
                break;
            }
        }
        t = next > 1 ? 1 : next;
    }
    /* Growing by the held-out queries. Where the walk ends uncertified, its tuning
     * queries no longer lead it: on flat steps (its tuning recall stuck below the raised
     * target whatever the knobs) while the held-out mean fell short, or at the ceiling
     * they report with the held-out mean at the target and its lower bound below. Both
     * stopped short of what the held-out queries still gained from:
     *   - deep19 (bench/RESULTS.md 5.34), build seed 4 of 1-8: the 32 k = 10 tuning
     *     queries scored 0.972 from 4 to 11 probes, while the 64 held-out ones got 0.934
     *     at 11, and fresh queries 0.944 at 11 against 0.955 at 44;
     *   - d64-short-flat with log-uniform query lengths (5.35): a ceiling of ~0.955 on
     *     the tuning queries stopped the k = 10 walk at 11 / 161 / 161, held out 0.9547
     *     (lower bound 0.9357), where queries of 4-16 tokens got 0.9325 and 547
     *     documents deep 0.960.
     * So the setting doubles its probes or its depth (k_fullbit, k_refine and
     * k_interaction, each up to its cap), whichever gains more held-out recall per
     * modelled cost, while a doubling gains at least two held-out hits (one is noise: on
     * deep19 40 -> 80 -> 128 probes gained one each) and half the mean's standard error
     * (on a corpus at its bits' ceiling, deep19 at k = 100, doublings gained 0.001-0.003
     * for twice the cost each, which fresh queries did not see), and until the lower
     * bound meets the target or, where the held-out queries are too few for that, the
     * mean stands one standard error above it (each doubling doubles the search's cost,
     * and a 95% bound from 64 queries of Recall@10 can ask for a mean of 0.99). A choice
     * made on the held-out queries biases their report up, by no more than what the
     * growth gained over the mean it started from. */
    while (s == CHIMERA_OK && !met && res->n_heldout > 0 &&
           res->heldout_recall - (res->heldout_recall - res->heldout_low) / z < target) {
        chimera_search_params q[2] = {res->best, res->best};
        double mean = res->heldout_recall, base_cost, rq, gain[2] = {-1, -1}, cost[2];
        heldout_check h[2];
        if ((s = grow_trial(g, &res->best, &rq, &base_cost)) != CHIMERA_OK) break;
        uint64_t np = (uint64_t)q[0].n_probe * 2, kf = (uint64_t)q[1].k_fullbit * 2;
        uint64_t kr = (uint64_t)q[1].k_refine * 2, ki = (uint64_t)q[1].k_interaction * 2;
        q[0].n_probe = np < cap_np ? (uint32_t)np : cap_np;
        q[1].k_fullbit = kf < cap_kf ? (uint32_t)kf : cap_kf;
        q[1].k_refine = kr < cap_kr ? (uint32_t)kr : cap_kr;
        if (q[1].k_refine < q[1].k_fullbit) q[1].k_refine = q[1].k_fullbit;
        q[1].k_interaction = ki < cap_kr ? (uint32_t)ki : cap_kr;
        if (q[1].k_interaction >= q[1].k_refine) q[1].k_interaction = 0;
        int pick = -1;
        for (int i = 0; i < 2 && s == CHIMERA_OK; i++) {
            if (same_setting(&q[i], &res->best)) continue;
            if ((s = grow_trial(g, &q[i], &rq, &cost[i])) != CHIMERA_OK ||
                (s = run_check(check, check_ctx, &q[i], k, z, target, t, &h[i])) != CHIMERA_OK)
                break;
            double hits2 = 2.0 / ((double)h[i].n * k), se = (mean - res->heldout_low) / z;
            if (h[i].mean < mean + (hits2 > se / 2 ? hits2 : se / 2) - 1e-9) continue;
            double dc = cost[i] - base_cost > 1e-9 * base_cost ? cost[i] - base_cost
                                                                : 1e-9 * base_cost + 1e-12;
            gain[i] = (h[i].mean - mean) / dc;
            if (pick < 0 || gain[i] > gain[pick]) pick = i;
        }
        if (s != CHIMERA_OK || pick < 0) break;
        keep_check(res, &h[pick]);
        best_cost = cost[pick];
        met = h[pick].low >= target;
    }
    /* More probes that cost less. Where the probed clusters of a small n_probe hold too
     * few documents for k_fullbit (a strongly clustered corpus: every cluster near a
     * query's tokens holds the same few documents), a search doubles its probing and
     * refines again each time (pipeline.h), so the walk's n_probe understates what runs,
     * and a setting that starts from the probing it widens to costs less for the same
     * recall (1.5-1.8x faster on two such corpora, bench/RESULTS.md section 5.21). So
     * n_probe doubles while the modelled cost falls and the tuning and held-out targets
     * hold: one trial where the search does not widen, as more probes then cost more. */
    while (s == CHIMERA_OK && met && res->best.n_probe < cap_np) {
        chimera_search_params q = res->best;
        q.n_probe = q.n_probe * 2 < cap_np ? q.n_probe * 2 : cap_np;
        double rq, cq;
        heldout_check h;
        if ((s = grow_trial(g, &q, &rq, &cq)) != CHIMERA_OK || rq < t || cq >= best_cost) break;
        if ((s = run_check(check, check_ctx, &q, k, z, target, t, &h)) != CHIMERA_OK) break;
        if (h.low < target) break;
        keep_check(res, &h);
        best_cost = cq;
    }
    cm_free(g);
    if (s != CHIMERA_OK) return s;
    res->reached = met;
    return CHIMERA_OK;
}

/* ---- the frontier walk (chimera tune) --------------------------------------------------- */

/* Why a staircase rather than the backward walk: the backward walk shrinks one knob at a
 * time from a generous start and stops at the first step that misses, so it ends where
 * its path first met the target's edge: on a real corpus 64 / 59 / 59 or 48 / 122 / 122
 * (k = 10), where 16 / 220 / 220 met the same held-out target at 1.5-2x their speed
 * (bench/RESULTS.md section 5.26). The frontier of the fewest D meeting the target at
 * each n_probe holds every such point, and it is monotone (more probes never need a
 * deeper list), so one pass down the n_probe ladder, raising D only, measures it in
 * about as many trials as the two ladders have rungs. */

static const uint32_t fr_probes[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128};
static const double fr_depths[] = {1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
#define FR_N_PROBES ((int)(sizeof fr_probes / sizeof fr_probes[0]))
#define FR_N_DEPTHS ((int)(sizeof fr_depths / sizeof fr_depths[0]))
#define FR_START_PROBES 64

typedef struct frontier {
    tune_memo memo; /* every setting measured: the walks at raised targets reuse them */
    uint32_t np_cap;               /* n_probe's rungs stop at it (the centroids, 128) */
    uint32_t depth[FR_N_DEPTHS];   /* D's rungs: k x fr_depths, capped at the documents */
    int n_depths;                  /* distinct rungs after the cap */
    uint32_t k;
    int rerank; /* the evaluation re-ranks exactly: the depth of that re-rank is a knob too */
} frontier;

/* The covered setting of n_probe np, depth d and re-rank depth rd (0: none). */
static chimera_search_params fr_params(uint32_t np, uint32_t d, uint32_t rd)
{
    chimera_search_params p;
    memset(&p, 0, sizeof p); /* padding too: the points a tune reports are whole bytes */
    p.n_probe = np;
    p.k_refine = p.k_fullbit = d;
    p.rerank_depth = rd;
    p.chunks = 4; /* no 1-bit chunks run in the covered form; the library's default */
    return p;
}

/* Recall and modelled cost of n_probe np at depth d with an exact re-rank of the top rd
 * (0: none), measured once per tune. */
static chimera_status fr_measure_rd(frontier *f, uint32_t np, uint32_t d, uint32_t rd, double *r,
                                    double *c)
{
    chimera_search_params p = fr_params(np, d, rd);
    return memo_measure(&f->memo, &p, r, c);
}

/* The walk's re-rank depth at depth d, where the evaluation re-ranks: the top 4k by
 * full-bit score, which held the recall of re-ranking all d on a real corpus (the true top
 * k sit within the first 1.5-3k of the 4-bit ranking, bench/RESULTS.md section 5.27) at a
 * fraction of its cost. */
static uint32_t fr_walk_rd(const frontier *f, uint32_t d)
{
    if (!f->rerank) return 0;
    uint64_t r = (uint64_t)f->k * 4;
    return r < d ? (uint32_t)r : d;
}

static chimera_status fr_measure(frontier *f, uint32_t np, uint32_t d, double *r, double *c)
{
    return fr_measure_rd(f, np, d, fr_walk_rd(f, d), r, c);
}

/* Whether n_probe np at depth rung j meets t. */
static chimera_status fr_meets(frontier *f, uint32_t np, int j, double t, int *ok, double *cost)
{
    double r;
    CM_TRY(fr_measure(f, np, f->depth[j], &r, cost));
    *ok = r >= t;
    return CHIMERA_OK;
}

/* The fewest-D search at n_probe np between depths lo (missing t, or assumed to by the
 * frontier's monotony) and hi (meeting it): geometric halving until the bracket is under
 * 12% wide. */
static chimera_status fr_bisect(frontier *f, uint32_t np, uint32_t lo, uint32_t hi, double t)
{
    double r, c;
    CM_TRY(fr_measure(f, np, hi, &r, &c));
    if (r < t) return CHIMERA_OK;
    while ((double)hi > 1.12 * lo) {
        uint32_t mid = (uint32_t)lround(sqrt((double)lo * hi));
        if (mid <= lo || mid >= hi) break;
        CM_TRY(fr_measure(f, np, mid, &r, &c));
        if (r >= t)
            hi = mid;
        else
            lo = mid;
    }
    return CHIMERA_OK;
}

/* One staircase at tuning target t (the walk described in tune.h). */
static chimera_status fr_walk(frontier *f, double t)
{
    int top = 0; /* the n_probe rung to start from: 64, or the cap */
    while (top + 1 < FR_N_PROBES && fr_probes[top + 1] <= f->np_cap &&
           fr_probes[top] < FR_START_PROBES)
        top++;
    /* per n_probe rung, the depth rung of the fewest D that met t (-1: not measured) */
    int jmin[FR_N_PROBES];
    for (int i = 0; i < FR_N_PROBES; i++) jmin[i] = -1;
    int last_d = f->n_depths - 1, j = 0, ok = 0;
    double c, best = INFINITY;
    /* the start: D up from k (the cheap trials first); where even the deepest list
     * misses, more probes at it */
    for (;;) {
        CM_TRY(fr_meets(f, fr_probes[top], j, t, &ok, &c));
        if (ok) break;
        if (j < last_d) {
            j++;
        } else if (top + 1 < FR_N_PROBES && fr_probes[top + 1] <= f->np_cap) {
            top++;
        } else {
            return CHIMERA_OK; /* out of reach at every setting: the caller reports it */
        }
    }
    jmin[top] = j;
    best = c;
    /* up the probes while the list can shorten: more probes, a rung less deep */
    for (int up = top, ju = j; ju > 0 && up + 1 < FR_N_PROBES && fr_probes[up + 1] <= f->np_cap;) {
        CM_TRY(fr_meets(f, fr_probes[up + 1], ju - 1, t, &ok, &c));
        if (!ok) break;
        jmin[++up] = --ju;
        if (c >= best) break;
        best = c;
    }
    /* down the probes from the start, D raised where the target no longer holds; stop
     * once two frontier points in a row cost well over the cheapest (D only rises from
     * here) or D has no rung left */
    int dear = 0;
    for (int i = top - 1; i >= 0 && dear < 2; i--) {
        for (;;) {
            CM_TRY(fr_meets(f, fr_probes[i], j, t, &ok, &c));
            if (ok || j == last_d) break;
            j++;
        }
        if (!ok) break;
        jmin[i] = j;
        if (c < best) best = c;
        dear = c > 1.3 * best ? dear + 1 : 0;
    }
    /* Between the rungs around the cheapest frontier point (n_probe rung i, depth rung
     * jb): the fewest D at its own n_probe, and at the n_probe halfway to each
     * neighbouring rung, each bracketed by the frontier's monotony */
    int ib = -1;
    double cb = INFINITY;
    for (int i = 0; i < FR_N_PROBES; i++) {
        if (jmin[i] < 0) continue;
        double r;
        CM_TRY(fr_measure(f, fr_probes[i], f->depth[jmin[i]], &r, &c));
        if (c < cb) {
            cb = c;
            ib = i;
        }
    }
    if (ib < 0) return CHIMERA_OK;
    int jb = jmin[ib];
    uint32_t np = fr_probes[ib], d = f->depth[jb];
    if (jb > 0) CM_TRY(fr_bisect(f, np, f->depth[jb - 1], d, t));
    if (ib > 0) {
        uint32_t mid = (fr_probes[ib - 1] + np) / 2;
        uint32_t hi = jmin[ib - 1] >= 0 ? f->depth[jmin[ib - 1]] : f->depth[last_d];
        if (mid > fr_probes[ib - 1] && mid < np) CM_TRY(fr_bisect(f, mid, d, hi > d ? hi : d, t));
    }
    if (ib + 1 < FR_N_PROBES && jmin[ib + 1] >= 0) {
        uint32_t mid = (np + fr_probes[ib + 1]) / 2, lo = f->depth[jmin[ib + 1]];
        if (mid > np && mid < fr_probes[ib + 1]) CM_TRY(fr_bisect(f, mid, lo < d ? lo : d, d, t));
    }
    return CHIMERA_OK;
}

/* The cheapest setting measured that meets t, after a re-rank of the top 2k instead of
 * the walk's 4k at the cheapest one (it reads half the vectors; measured, so kept only
 * where the tuning recall still meets t); -1 when none. */
static chimera_status fr_pick(frontier *f, double t, int *pick)
{
    int i = memo_cheapest(&f->memo, t);
    uint64_t r2 = (uint64_t)f->k * 2;
    if (i >= 0 && f->rerank && f->memo.p[i].rerank_depth > r2) {
        double r, c;
        const chimera_search_params *p = &f->memo.p[i];
        CM_TRY(fr_measure_rd(f, p->n_probe, p->k_fullbit, (uint32_t)r2, &r, &c));
        i = memo_cheapest(&f->memo, t);
    }
    *pick = i;
    return CHIMERA_OK;
}

/* The held-out check of measured setting i. */
static chimera_status fr_check(frontier *f, int i, sp_tune_check_fn check, void *check_ctx,
                               uint32_t k, double z, double target, double t, heldout_check *h)
{
    return run_check(check, check_ctx, &f->memo.p[i], k, z, target, t, h);
}

chimera_status sp_tune_frontier_heldout(sp_tune_cost_fn eval, void *eval_ctx,
                                        sp_tune_check_fn check, void *check_ctx, uint32_t k,
                                        double target, double z, uint32_t n_clusters,
                                        int64_t n_docs, int rerank, chimera_tune_result *res)
{
    memset(res, 0, sizeof *res);
    frontier *f = cm_malloc(sizeof *f);
    if (!f) return CHIMERA_ERR_NOMEM;
    memset(f, 0, sizeof *f);
    tune_memo *mo = &f->memo;
    mo->eval = eval;
    mo->ctx = eval_ctx;
    mo->res = res;
    f->k = k;
    f->rerank = rerank;
    f->np_cap = n_clusters < 1 ? 1 : n_clusters < 128 ? n_clusters : 128;
    uint64_t docs = n_docs > (1 << 24) ? (1u << 24) : (uint64_t)(n_docs > 0 ? n_docs : 1);
    if (docs < k) docs = k;
    for (int j = 0; j < FR_N_DEPTHS; j++) {
        uint64_t d = (uint64_t)ceil(k * fr_depths[j]);
        if (d > docs) d = docs;
        if (f->n_depths && f->depth[f->n_depths - 1] == d) continue; /* k = 1: 1.5 and 2 */
        f->depth[f->n_depths++] = (uint32_t)d;
        if (d == docs) break;
    }
    /* Held-out loop as sp_tune_heldout's: a pick whose held-out bound falls short raises
     * the tuning target by the shortfall; then two halvings between the first target that
     * fell short and the one that met look for a cheaper pick. The choice among checked
     * picks that meet the target goes by the modelled cost. */
    double t = target, t_short = -1, best_low = -1, b_cost = 0;
    int met = 0, have = 0;
    heldout_check b = {0}, h;
    chimera_status s = CHIMERA_OK;
    double t_checked = -1; /* the tuning target of the last check */
    for (int attempt = 0; attempt < 6 && !met && s == CHIMERA_OK; attempt++) {
        int i;
        if ((s = fr_walk(f, t)) != CHIMERA_OK || (s = fr_pick(f, t, &i)) != CHIMERA_OK) break;
        if (i < 0) {
            /* t is beyond every setting on the tuning queries (a raise by a whole
             * shortfall near the bits' cap): the most they reach, if above the last
             * target checked, is the last target worth a check */
            double top = -1;
            for (int m = 0; m < mo->n; m++)
                if (!mo->failed[m] && mo->r[m] > top) top = mo->r[m];
            if (!(top > t_checked)) break;
            t = top;
            if ((s = fr_pick(f, t, &i)) != CHIMERA_OK || i < 0) break;
        }
        t_checked = t;
        if ((s = fr_check(f, i, check, check_ctx, k, z, target, t, &h)) != CHIMERA_OK) break;
        if (h.low >= target || h.low > best_low) {
            best_low = h.low;
            b = h;
            b_cost = mo->cost[i];
            have = 1;
        }
        if (h.low >= target) {
            met = 1;
            break;
        }
        mo->failed[i] = 1;
        if (t >= 1) break;
        if (t_short < 0) t_short = t;
        t += target - h.low + 0.002;
        if (t > 1) t = 1;
    }
    for (int r = 0; s == CHIMERA_OK && met && t_short >= 0 && r < 2; r++) {
        double tm = 0.5 * (t_short + t);
        int i;
        if ((s = fr_walk(f, tm)) != CHIMERA_OK || (s = fr_pick(f, tm, &i)) != CHIMERA_OK) break;
        if (i < 0 || mo->cost[i] >= b_cost) { /* nothing cheaper to check at this target */
            t = tm;
            continue;
        }
        if ((s = fr_check(f, i, check, check_ctx, k, z, target, tm, &h)) != CHIMERA_OK) break;
        if (h.low >= target) {
            t = tm;
            b = h;
            b_cost = mo->cost[i];
        } else {
            mo->failed[i] = 1;
            t_short = tm;
        }
    }
    /* No check ran (every recall NaN; an out-of-reach target is checked above at the
     * most the tuning queries reach): the setting of the highest tuning recall, checked,
     * as the closest */
    if (s == CHIMERA_OK && !have && mo->n > 0) {
        int hi = 0;
        for (int i = 1; i < mo->n; i++)
            if (mo->r[i] > mo->r[hi] || (mo->r[i] == mo->r[hi] && mo->cost[i] < mo->cost[hi]))
                hi = i;
        if ((s = fr_check(f, hi, check, check_ctx, k, z, target, t, &b)) == CHIMERA_OK) have = 1;
    }
    cm_free(f);
    if (s != CHIMERA_OK) return s;
    if (have) keep_check(res, &b);
    res->reached = met;
    return CHIMERA_OK;
}
