/* CUDA backend against the CPU backend and against a host reference of the GPU's own
 * arithmetic (docs/design.md §4). First, with or without a device, the CPU backend's
 * brute-force probe against a double-precision reference (cpu_probe_check). Without a
 * usable device the rest prints "skipped: no device" and passes.
 *
 * Fixture: a synthetic corpus indexed on disk by ix_build (dims 128 and 96, so dim_pad
 * 128 with and without padding), every 7th document marked deleted in the uploaded
 * bitmap. For each query, on two workers, with output buffers poisoned on the device
 * (CHIMERA_CUDA_POISON) and on the host:
 *   probe (brute)  ids identical to the CPU's, scores within PROBE_TOL (cuBLAS and the
 *                  CPU's float rescoring of its 8-bit candidates sum in different
 *                  orders); a differing id is accepted only at a tie (both scores
 *                  within PROBE_TOL);
 *   probe (graph)  recall of the brute-force probe ids >= GRAPH_RECALL;
 *   refine         for each imputation mode: against a host reference that uses the
 *                  GPU's probes and the same LUT arithmetic (quant_math.h): same
 *                  documents in the same order and partial sums within REF_TOL (order
 *                  swaps only at ties); against the CPU backend, whose 1-bit estimates use
 *                  the 4-bit query (popcount form), candidate overlap >= CPU_OVERLAP and
 *                  partial sums of common documents within CPU_TOL * m; no deleted doc;
 *   score1         against the host reference within REF_TOL, against the CPU within
 *                  CPU_TOL * m;
 *   score_ci       (centroid interaction) against the host reference within REF_TOL,
 *                  against the CPU within CPU_TOL * m;
 *   determinism    a second run of the whole query gives bit-identical outputs.
 * Also: upload refused with CHIMERA_ERR_DEVICE under a too-small memory budget, argument
 * errors, score1 of zero documents.
 *
 * Segments (split_check): the built index (one dense segment) is cut into two, documents
 * [0, D1) as a dense segment and [D1, D) as a sparse one (post_cid: only the clusters it
 * holds), posting lists partitioned and renumbered locally. Both backends must give the
 * same results on the split index as on the whole one: the estimates are per posting
 * entry and the reductions are maxima, so bit for bit (CPU always; CUDA with a device).
 * With a device, also refresh: upload the first segment alone, query, refresh with both
 * (bit-identical to the whole index again), refresh with a new bitmap (a document
 * deleted since no longer comes back), and refused refreshes (a changed segment, fewer
 * segments) that leave the engine working. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"
#include "data/corpus.h"
#include "data/synth.h"
#include "index/index.h"
#include "quant/quant_math.h"
#include "quant/rotation.h"
#include "tmpdir.h"
#include "core/alloc.h"

#define PROBE_TOL 1e-4
#define REF_TOL 2e-4      /* relative to 1 + |value|: fma contraction, S from cuBLAS */
#define CPU_TOL 0.05      /* per query token: 4-bit query rounding in the CPU estimates */
#define CPU_OVERLAP 0.8
#define GRAPH_RECALL 0.9

#define M 32
#define NP 16
#define KR 100

typedef struct fix {
    data_synth_corpus s;
    data_corpus c;
    ix_index ix;
    uint8_t *deleted;
    be_segment *segs; /* r.segments */
    be_resident r;
} fix;

static int fix_make(fix *f, uint32_t dim, const char *name)
{
    chimera_error err = {0};
    memset(f, 0, sizeof *f);
    chimera_synth_opts o = {.n_docs = 800, .dim = dim, .n_queries = 6, .query_len = M,
                            .seed = 7, .min_len = 8, .max_len = 60};
    if (data_synth_generate(&o, &f->s, &err) != CHIMERA_OK ||
        data_corpus_wrap(&f->c, f->s.tokens, f->s.n_tokens, f->s.dim, f->s.doclens, f->s.n_docs,
                         NULL, NULL, &err) != CHIMERA_OK) {
        fprintf(stderr, "fixture: %s\n", err.msg);
        return -1;
    }
    char dir[512];
    test_path(dir, sizeof dir, name);
    ix_build_opts bo = {.n_clusters = 128, .seed = 3, .n_threads = 2, .no_sync = 1};
    if (ix_build(&f->c, dir, &bo, NULL, &err) != CHIMERA_OK ||
        ix_open(dir, 0, &f->ix, &err) != CHIMERA_OK) {
        fprintf(stderr, "index: %s\n", err.msg);
        return -1;
    }
    const ix_index *ix = &f->ix;
    size_t nb = (size_t)(ix->n_docs + 7) / 8;
    f->deleted = cm_calloc(nb ? nb : 1, 1);
    for (int64_t d = 0; d < ix->n_docs; d += 7) f->deleted[d >> 3] |= (uint8_t)(1u << (d & 7));
    f->segs = cm_calloc(ix->n_segs ? ix->n_segs : 1, sizeof *f->segs);
    for (uint32_t i = 0; i < ix->n_segs; i++) {
        const ix_segment *sg = &ix->segs[i];
        f->segs[i] = (be_segment){
            .doc_base = sg->doc_base, .n_docs = sg->n_docs, .n_tokens = sg->n_tokens,
            .n_lists = sg->n_lists, .post_cid = sg->post_cid, .post_off = sg->post_off,
            .post_doc = sg->post_doc, .c1_codes = sg->c1_codes, .c1_fact = sg->c1_fact,
            .d1_codes = sg->d1_codes, .d1_fact = sg->d1_fact, .tok_cid = sg->tok_cid,
            .doc_off = sg->doc_off};
    }
    f->r = (be_resident){.dim = ix->dim, .dim_pad = ix->dim_pad, .n_clusters = ix->n_clusters,
                         .degree = ix->degree, .n_entry = ix->n_entry, .n_docs = ix->n_docs,
                         .n_tokens = ix->n_tokens, .rot = &ix->rot, .centroids = ix->centroids,
                         .graph_adj = ix->g.adj, .graph_entry = ix->g.entry,
                         .n_segments = ix->n_segs, .segments = f->segs, .deleted = f->deleted};
    return 0;
}

static void fix_free(fix *f)
{
    ix_close(&f->ix);
    data_corpus_free(&f->c);
    data_synth_free(&f->s);
    cm_free(f->deleted);
    cm_free(f->segs);
}

/* ---- host reference of the GPU arithmetic ------------------------------------------- */

typedef struct ref_q {
    float *lut; /* [m][dim_pad*4] */
    float *S;   /* [K][m] */
} ref_q;

static void ref_begin(const fix *f, const float *q, ref_q *rq)
{
    const be_resident *r = &f->r;
    float *rot = cm_malloc(r->dim_pad * sizeof(float));
    rq->lut = cm_malloc((size_t)M * r->dim_pad * 4 * sizeof(float));
    rq->S = cm_malloc((size_t)r->n_clusters * M * sizeof(float));
    for (uint32_t j = 0; j < M; j++) {
        quant_rotate(r->rot, q + (size_t)j * r->dim, rot);
        qm_lut_build(rot, r->dim_pad, rq->lut + (size_t)j * r->dim_pad * 4);
    }
    for (uint32_t k = 0; k < r->n_clusters; k++)
        for (uint32_t j = 0; j < M; j++) {
            double s = 0;
            for (uint32_t d = 0; d < r->dim; d++)
                s += (double)r->centroids[(size_t)k * r->dim + d] * q[(size_t)j * r->dim + d];
            rq->S[(size_t)k * M + j] = (float)s;
        }
    cm_free(rot);
}

static void ref_end(ref_q *rq)
{
    cm_free(rq->lut);
    cm_free(rq->S);
}

typedef struct cand {
    float s;
    uint32_t d;
} cand;

static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return x->d < y->d ? -1 : x->d > y->d;
}

static int is_del(const fix *f, uint32_t d) { return (f->deleted[d >> 3] >> (d & 7)) & 1; }

/* Refinement over the given probes, the GPU's arithmetic on the host. */
static uint32_t ref_refine(const fix *f, const ref_q *rq, const uint32_t *cid, const float *qc,
                           be_impute imp, uint32_t *docs, float *partial)
{
    const be_resident *r = &f->r;
    int64_t D = r->n_docs;
    uint32_t cb = r->dim_pad / 8;
    float *Mt = cm_malloc((size_t)D * M * sizeof(float));
    for (size_t i = 0; i < (size_t)D * M; i++) Mt[i] = -INFINITY;
    uint8_t *seen = cm_calloc((size_t)D, 1);
    float floor_[M];
    for (uint32_t j = 0; j < M; j++) {
        float mn = INFINITY;
        for (uint32_t p = 0; p < NP; p++) {
            uint32_t c = cid[j * NP + p];
            if (c >= r->n_clusters) continue;
            for (uint32_t si = 0; si < r->n_segments; si++) {
                const be_segment *sg = &r->segments[si];
                int64_t p0, n;
                be_segment_list(sg, c, &p0, &n);
                for (int64_t pos = p0; pos < p0 + n; pos++) {
                    float ip = qm_lut_ip(rq->lut + (size_t)j * r->dim_pad * 4,
                                         sg->c1_codes + (size_t)pos * cb, r->dim_pad);
                    float e = qm_est1(qc[j * NP + p], &sg->c1_fact[pos], ip);
                    uint32_t d = (uint32_t)(sg->doc_base + sg->post_doc[pos]);
                    seen[d] = 1;
                    if (e > Mt[(size_t)d * M + j]) Mt[(size_t)d * M + j] = e;
                    if (e < mn) mn = e;
                }
            }
        }
        floor_[j] = imp == BE_IMPUTE_ZERO ? 0.0f
                    : imp == BE_IMPUTE_MIN_SEEN ? (mn < INFINITY ? mn : 0.0f)
                                                : qc[j * NP + NP - 1];
    }
    cand *cs = cm_malloc((size_t)D * sizeof *cs);
    uint32_t n = 0;
    for (int64_t d = 0; d < D; d++) {
        if (!seen[d] || is_del(f, (uint32_t)d)) continue;
        float s = 0.0f;
        for (uint32_t j = 0; j < M; j++) {
            float v = Mt[(size_t)d * M + j];
            s += v > floor_[j] ? v : floor_[j]; /* max(estimate, floor), as the backends */
        }
        cs[n++] = (cand){s, (uint32_t)d};
    }
    qsort(cs, n, sizeof *cs, cand_cmp);
    if (n > KR) n = KR;
    for (uint32_t i = 0; i < n; i++) {
        docs[i] = cs[i].d;
        partial[i] = cs[i].s;
    }
    cm_free(cs);
    cm_free(seen);
    cm_free(Mt);
    return n;
}

static float ref_score1(const fix *f, const ref_q *rq, uint32_t d)
{
    const be_resident *r = &f->r;
    uint32_t cb = r->dim_pad / 8;
    const be_segment *sg = be_doc_segment(r, d);
    int64_t ld = d - sg->doc_base, t0 = sg->doc_off[ld], t1 = sg->doc_off[ld + 1];
    if (t1 == t0) return -INFINITY;
    float s = 0.0f;
    for (uint32_t j = 0; j < M; j++) {
        float mx = -INFINITY;
        for (int64_t t = t0; t < t1; t++) {
            float ip = qm_lut_ip(rq->lut + (size_t)j * r->dim_pad * 4, sg->d1_codes + (size_t)t * cb,
                                 r->dim_pad);
            float e = qm_est1(rq->S[(size_t)sg->tok_cid[t] * M + j], &sg->d1_fact[t], ip);
            if (e > mx) mx = e;
        }
        s += mx;
    }
    return s;
}

/* sum_j max over the document's tokens of S[cid_t][j]: the centroid-interaction score */
static float ref_ci(const fix *f, const ref_q *rq, uint32_t d)
{
    const be_resident *r = &f->r;
    const be_segment *sg = be_doc_segment(r, d);
    int64_t ld = d - sg->doc_base, t0 = sg->doc_off[ld], t1 = sg->doc_off[ld + 1];
    if (t1 == t0) return -INFINITY;
    float s = 0.0f;
    for (uint32_t j = 0; j < M; j++) {
        float mx = -INFINITY;
        for (int64_t t = t0; t < t1; t++) {
            float e = rq->S[(size_t)sg->tok_cid[t] * M + j];
            if (e > mx) mx = e;
        }
        s += mx;
    }
    return s;
}

/* ---- comparisons -------------------------------------------------------------------- */

static int near_rel(double a, double b, double tol) { return fabs(a - b) <= tol * (1.0 + fabs(b)); }

typedef struct run {
    uint32_t cid[M * NP];
    float qc[M * NP];
    uint32_t docs[3][KR];
    float partial[3][KR];
    uint32_t n[3];
    float s1[KR];
    float ci[KR];
} run;

static void poison_run(run *x) { memset(x, 0xff, sizeof *x); }

static int run_query(cm_backend *b, int worker, const float *q, run *x, chimera_error *err)
{
    const struct cm_backend_i *it = b->iface;
    poison_run(x);
    if (it->query_begin(b->ctx, worker, q, M, err) != CHIMERA_OK) return -1;
    if (it->probe(b->ctx, worker, NP, 0, BE_PROBE_BRUTE, x->cid, x->qc, err) != CHIMERA_OK)
        return -1;
    for (int imp = 0; imp < 3; imp++) {
        be_refine_stats st;
        if (it->refine(b->ctx, worker, KR, (be_floor){(be_impute)imp, 1.0f}, NULL, x->docs[imp], x->partial[imp], &x->n[imp],
                       &st, err) != CHIMERA_OK)
            return -1;
    }
    if (it->score1(b->ctx, worker, x->docs[0], x->n[0], x->s1, err) != CHIMERA_OK) return -1;
    if (it->score_ci(b->ctx, worker, x->docs[0], x->n[0], x->ci, err) != CHIMERA_OK) return -1;
    return 0;
}

static void compare_fixture(fix *f)
{
    chimera_error err = {0};
    cm_backend cpu, gpu;
    be_config cfg = {.n_workers = 2, .n_threads = 1, .max_m = M, .max_probe = 64,
                     .max_refine = 256, .device_memory_budget = 0};
    CHECK_OK(backend_new("cpu", &cpu, &err), &err);
    CHECK_OK(backend_new("cuda", &gpu, &err), &err);
    CHECK_OK(cpu.iface->upload(cpu.ctx, &f->r, &cfg, &err), &err);
    CHECK_OK(gpu.iface->upload(gpu.ctx, &f->r, &cfg, &err), &err);
    run *a = cm_malloc(sizeof *a), *g = cm_malloc(sizeof *g), *g2 = cm_malloc(sizeof *g2);
    double graph_hits = 0, graph_total = 0;
    for (int64_t qi = 0; qi < f->s.n_queries; qi++) {
        const float *q = f->s.queries + (size_t)qi * M * f->r.dim;
        int w = (int)(qi % 2);
        CHECK_OK(run_query(&cpu, w, q, a, &err) == 0 ? CHIMERA_OK : err.code, &err);
        CHECK_OK(run_query(&gpu, w, q, g, &err) == 0 ? CHIMERA_OK : err.code, &err);
        /* probe */
        for (int i = 0; i < M * NP; i++) {
            CHECKF(fabs(g->qc[i] - a->qc[i]) <= PROBE_TOL, "q%lld probe %d: %g vs %g", (long long)qi,
                   i, g->qc[i], a->qc[i]);
            if (g->cid[i] != a->cid[i])
                CHECKF(fabs(g->qc[i] - a->qc[i]) <= PROBE_TOL, "probe id %u vs %u not a tie",
                       g->cid[i], a->cid[i]);
        }
        /* refine and score1 against the host reference (with the GPU's probes) */
        ref_q rq;
        ref_begin(f, q, &rq);
        for (int imp = 0; imp < 3; imp++) {
            uint32_t rd[KR];
            float rp[KR];
            uint32_t rn = ref_refine(f, &rq, g->cid, g->qc, (be_impute)imp, rd, rp);
            CHECKF(g->n[imp] == rn, "impute %d: %u vs %u docs", imp, g->n[imp], rn);
            uint32_t n = g->n[imp] < rn ? g->n[imp] : rn;
            for (uint32_t i = 0; i < n; i++) {
                CHECKF(near_rel(g->partial[imp][i], rp[i], REF_TOL), "impute %d rank %u: %g vs %g",
                       imp, i, g->partial[imp][i], rp[i]);
                if (g->docs[imp][i] != rd[i])
                    CHECKF(i + 1 < n && near_rel(rp[i], rp[i + 1], REF_TOL) ? 1
                           : i > 0 && near_rel(rp[i], rp[i - 1], REF_TOL),
                           "impute %d rank %u: doc %u vs %u not a tie", imp, i, g->docs[imp][i], rd[i]);
                CHECK(!is_del(f, g->docs[imp][i]));
            }
            /* against the CPU backend */
            uint32_t common = 0;
            for (uint32_t i = 0; i < g->n[imp]; i++)
                for (uint32_t k = 0; k < a->n[imp]; k++)
                    if (g->docs[imp][i] == a->docs[imp][k]) {
                        common++;
                        CHECKF(fabs(g->partial[imp][i] - a->partial[imp][k]) <= CPU_TOL * M,
                               "impute %d doc %u: gpu %g cpu %g", imp, g->docs[imp][i],
                               g->partial[imp][i], a->partial[imp][k]);
                    }
            uint32_t nmax = a->n[imp] > g->n[imp] ? a->n[imp] : g->n[imp];
            CHECKF(common >= CPU_OVERLAP * nmax, "impute %d: %u of %u candidates shared", imp,
                   common, nmax);
        }
        for (uint32_t i = 0; i < g->n[0]; i++) {
            float rs = ref_score1(f, &rq, g->docs[0][i]);
            CHECKF(near_rel(g->s1[i], rs, REF_TOL), "score1 doc %u: %g vs %g", g->docs[0][i],
                   g->s1[i], rs);
        }
        float cs[KR];
        CHECK_OK(cpu.iface->score1(cpu.ctx, w, g->docs[0], g->n[0], cs, &err), &err);
        for (uint32_t i = 0; i < g->n[0]; i++)
            CHECKF(fabs(g->s1[i] - cs[i]) <= CPU_TOL * M, "score1 doc %u: gpu %g cpu %g",
                   g->docs[0][i], g->s1[i], cs[i]);
        for (uint32_t i = 0; i < g->n[0]; i++) {
            float rs = ref_ci(f, &rq, g->docs[0][i]);
            CHECKF(near_rel(g->ci[i], rs, REF_TOL), "score_ci doc %u: %g vs %g", g->docs[0][i],
                   g->ci[i], rs);
        }
        CHECK_OK(cpu.iface->score_ci(cpu.ctx, w, g->docs[0], g->n[0], cs, &err), &err);
        for (uint32_t i = 0; i < g->n[0]; i++)
            CHECKF(fabs(g->ci[i] - cs[i]) <= CPU_TOL * M, "score_ci doc %u: gpu %g cpu %g",
                   g->docs[0][i], g->ci[i], cs[i]);
        ref_end(&rq);
        /* determinism: the whole query again, on the other worker */
        CHECK_OK(run_query(&gpu, 1 - w, q, g2, &err) == 0 ? CHIMERA_OK : err.code, &err);
        CHECK(memcmp(g, g2, sizeof *g) == 0);
        /* graph probe recall against the brute-force ids */
        uint32_t gc[M * NP];
        float gq[M * NP];
        CHECK_OK(gpu.iface->query_begin(gpu.ctx, w, q, M, &err), &err);
        CHECK_OK(gpu.iface->probe(gpu.ctx, w, NP, 0, BE_PROBE_GRAPH, gc, gq, &err), &err);
        for (int j = 0; j < M; j++)
            for (int p = 0; p < NP; p++) {
                graph_total++;
                for (int k = 0; k < NP; k++)
                    if (gc[j * NP + p] == g->cid[j * NP + k]) {
                        graph_hits++;
                        break;
                    }
            }
    }
    CHECKF(graph_hits >= GRAPH_RECALL * graph_total, "graph probe recall %.3f",
           graph_hits / graph_total);
    /* argument errors and edge cases */
    uint32_t d1[1], n1;
    float p1[1];
    CHECK_STATUS(gpu.iface->refine(gpu.ctx, 0, 1000, (be_floor){BE_IMPUTE_ZERO, 1.0f}, NULL, d1, p1, &n1, NULL, &err),
                 CHIMERA_ERR_INVALID_ARG, &err);
    CHECK_STATUS(gpu.iface->query_begin(gpu.ctx, 5, f->s.queries, M, &err), CHIMERA_ERR_INVALID_ARG,
                 &err);
    CHECK_OK(gpu.iface->score1(gpu.ctx, 0, d1, 0, p1, &err), &err);
    CHECK_OK(gpu.iface->score_ci(gpu.ctx, 0, d1, 0, p1, &err), &err);
    CHECK_STATUS(gpu.iface->score_ci(gpu.ctx, 0, d1, 1000, p1, &err), CHIMERA_ERR_INVALID_ARG, &err);
    cm_free(a);
    cm_free(g);
    cm_free(g2);
    backend_free(&cpu);
    backend_free(&gpu);

    /* a budget too small is refused before anything is allocated */
    cm_backend small;
    be_config tiny = cfg;
    tiny.device_memory_budget = 4096;
    CHECK_OK(backend_new("cuda", &small, &err), &err);
    CHECK_STATUS(small.iface->upload(small.ctx, &f->r, &tiny, &err), CHIMERA_ERR_DEVICE, &err);
    CHECK(strstr(err.msg, "needs") != NULL);
    backend_free(&small);
}

/* The CPU backend's brute-force probe (the reference the GPU's is compared with above)
 * against the double-precision S of ref_begin: for every query token, the NP best
 * centroids best first (ties by smaller id), each score within PROBE_TOL; a differing id
 * is accepted only at a tie. Runs with or without a device. */
static void cpu_probe_check(fix *f)
{
    chimera_error err = {0};
    cm_backend cpu;
    be_config cfg = {.n_workers = 1, .n_threads = 1, .max_m = M, .max_probe = 64,
                     .max_refine = 256, .device_memory_budget = 0};
    CHECK_OK(backend_new("cpu", &cpu, &err), &err);
    CHECK_OK(cpu.iface->upload(cpu.ctx, &f->r, &cfg, &err), &err);
    uint32_t K = f->r.n_clusters, *order = cm_malloc(K * sizeof *order);
    uint32_t cid[M * NP];
    float qc[M * NP];
    int bad = 0;
    for (int64_t qi = 0; qi < f->s.n_queries; qi++) {
        const float *q = f->s.queries + (size_t)qi * M * f->r.dim;
        CHECK_OK(cpu.iface->query_begin(cpu.ctx, 0, q, M, &err), &err);
        CHECK_OK(cpu.iface->probe(cpu.ctx, 0, NP, 0, BE_PROBE_BRUTE, cid, qc, &err), &err);
        ref_q rq;
        ref_begin(f, q, &rq);
        for (uint32_t j = 0; j < M; j++) {
            /* reference order: a partial selection sort by (score desc, id asc) */
            for (uint32_t k = 0; k < K; k++) order[k] = k;
            for (uint32_t p = 0; p < NP; p++) {
                uint32_t best = p;
                for (uint32_t k = p + 1; k < K; k++) {
                    float a = rq.S[(size_t)order[k] * M + j], b = rq.S[(size_t)order[best] * M + j];
                    if (a > b || (a == b && order[k] < order[best])) best = k;
                }
                uint32_t t = order[p];
                order[p] = order[best];
                order[best] = t;
                float want = rq.S[(size_t)order[p] * M + j], got = qc[j * NP + p];
                if (fabs(got - want) > PROBE_TOL ||
                    (cid[j * NP + p] != order[p] &&
                     fabs(rq.S[(size_t)cid[j * NP + p] * M + j] - want) > PROBE_TOL))
                    bad++;
            }
        }
        ref_end(&rq);
    }
    CHECKF(bad == 0, "cpu probe: %d of %lld entries differ from the reference", bad,
           (long long)(f->s.n_queries * M * NP));
    printf("cpu probe (K=%u, dim %u): %lld queries x %d tokens x %d probes, %d differ from "
           "the reference\n", K, f->r.dim, (long long)f->s.n_queries, M, NP, bad);
    cm_free(order);
    backend_free(&cpu);
}

/* ---- segments ------------------------------------------------------------------------ */

/* The fixture's index cut into two segments at document D1 (see the header comment). */
typedef struct split {
    be_segment seg[2];
    int64_t *post_off[2];
    uint32_t *post_doc[2];
    uint8_t *c1_codes[2];
    quant_f1 *c1_fact[2];
    uint32_t *post_cid_b;
    int64_t *doc_off_b;
    be_resident r;   /* both segments */
    be_resident r_a; /* the first alone (documents [0, D1)) */
} split;

static void split_free(split *sp)
{
    for (int i = 0; i < 2; i++) {
        cm_free(sp->post_off[i]);
        cm_free(sp->post_doc[i]);
        cm_free(sp->c1_codes[i]);
        cm_free(sp->c1_fact[i]);
    }
    cm_free(sp->post_cid_b);
    cm_free(sp->doc_off_b);
}

static int split_make(const fix *f, split *sp)
{
    memset(sp, 0, sizeof *sp);
    const be_resident *r = &f->r;
    if (r->n_segments != 1 || r->segments[0].post_cid) return -1; /* a built index */
    const be_segment *s0 = &r->segments[0];
    uint32_t K = r->n_clusters, cb = r->dim_pad / 8;
    int64_t D = s0->n_docs, N = s0->n_tokens, D1 = D / 2 + 3, T1 = s0->doc_off[D1];
    for (int i = 0; i < 2; i++) {
        sp->post_off[i] = cm_malloc((size_t)(K + 1) * sizeof(int64_t));
        sp->post_doc[i] = cm_malloc((size_t)N * sizeof(uint32_t));
        sp->c1_codes[i] = cm_malloc((size_t)N * cb);
        sp->c1_fact[i] = cm_malloc((size_t)N * sizeof(quant_f1));
    }
    sp->post_cid_b = cm_malloc((size_t)K * sizeof(uint32_t));
    sp->doc_off_b = cm_malloc((size_t)(D - D1 + 1) * sizeof(int64_t));
    int64_t n[2] = {0, 0};
    uint32_t nl_b = 0;
    sp->post_off[0][0] = sp->post_off[1][0] = 0;
    for (uint32_t k = 0; k < K; k++) {
        int64_t p0, len, before_b = n[1];
        be_segment_list(s0, k, &p0, &len);
        for (int64_t t = p0; t < p0 + len; t++) {
            uint32_t d = s0->post_doc[t];
            int i = d >= D1;
            sp->post_doc[i][n[i]] = i ? (uint32_t)(d - D1) : d;
            memcpy(sp->c1_codes[i] + (size_t)n[i] * cb, s0->c1_codes + (size_t)t * cb, cb);
            sp->c1_fact[i][n[i]] = s0->c1_fact[t];
            n[i]++;
        }
        sp->post_off[0][k + 1] = n[0];
        if (n[1] > before_b) { /* the second segment lists only the clusters it holds */
            sp->post_cid_b[nl_b] = k;
            sp->post_off[1][++nl_b] = n[1];
        }
    }
    if (n[0] != T1 || n[1] != N - T1) return -1; /* every token in exactly one list */
    for (int64_t d = 0; d <= D - D1; d++) sp->doc_off_b[d] = s0->doc_off[D1 + d] - T1;
    /* keys: content identities, distinct per segment (backend.h: be_segment.key) */
    sp->seg[0] = (be_segment){.key = 1, .doc_base = 0, .n_docs = D1, .n_tokens = T1, .n_lists = K,
                              .post_off = sp->post_off[0], .post_doc = sp->post_doc[0],
                              .c1_codes = sp->c1_codes[0], .c1_fact = sp->c1_fact[0],
                              .d1_codes = s0->d1_codes, .d1_fact = s0->d1_fact,
                              .tok_cid = s0->tok_cid, .doc_off = s0->doc_off};
    sp->seg[1] = (be_segment){.key = 2, .doc_base = D1, .n_docs = D - D1, .n_tokens = N - T1,
                              .n_lists = nl_b, .post_cid = sp->post_cid_b,
                              .post_off = sp->post_off[1], .post_doc = sp->post_doc[1],
                              .c1_codes = sp->c1_codes[1], .c1_fact = sp->c1_fact[1],
                              .d1_codes = s0->d1_codes + (size_t)T1 * cb,
                              .d1_fact = s0->d1_fact + T1, .tok_cid = s0->tok_cid + T1,
                              .doc_off = sp->doc_off_b};
    sp->r = *r;
    sp->r.n_segments = 2;
    sp->r.segments = sp->seg;
    sp->r_a = sp->r;
    sp->r_a.n_segments = 1;
    sp->r_a.n_docs = D1;
    sp->r_a.n_tokens = T1;
    return 0;
}

/* Every query on backend `a` and backend `b` (same worker) gives bit-identical runs. */
static void same_runs(const fix *f, cm_backend *a, cm_backend *b, const char *what)
{
    chimera_error err = {0};
    run *x = cm_malloc(sizeof *x), *y = cm_malloc(sizeof *y);
    for (int64_t qi = 0; qi < f->s.n_queries; qi++) {
        const float *q = f->s.queries + (size_t)qi * M * f->r.dim;
        CHECK_OK(run_query(a, 0, q, x, &err) == 0 ? CHIMERA_OK : err.code, &err);
        CHECK_OK(run_query(b, 0, q, y, &err) == 0 ? CHIMERA_OK : err.code, &err);
        CHECKF(memcmp(x, y, sizeof *x) == 0, "%s: query %lld differs", what, (long long)qi);
    }
    cm_free(x);
    cm_free(y);
}

static void split_check(fix *f, int gpu)
{
    chimera_error err = {0};
    split sp;
    if (split_make(f, &sp) != 0) {
        CHECKF(0, "split: the fixture is not one dense segment or its lists are inconsistent");
        split_free(&sp);
        return;
    }
    be_config cfg = {.n_workers = 1, .n_threads = 1, .max_m = M, .max_probe = 64,
                     .max_refine = 256, .device_memory_budget = 0};
    const char *name = gpu ? "cuda" : "cpu";
    cm_backend whole, two;
    CHECK_OK(backend_new(name, &whole, &err), &err);
    CHECK_OK(backend_new(name, &two, &err), &err);
    CHECK_OK(whole.iface->upload(whole.ctx, &f->r, &cfg, &err), &err);
    CHECK_OK(two.iface->upload(two.ctx, &sp.r, &cfg, &err), &err);
    same_runs(f, &whole, &two, gpu ? "cuda split" : "cpu split");
    backend_free(&two);
    if (!gpu) {
        backend_free(&whole);
        split_free(&sp);
        return;
    }

    /* refresh: the first segment alone, then both */
    cm_backend grow;
    CHECK_OK(backend_new("cuda", &grow, &err), &err);
    CHECK_OK(grow.iface->upload(grow.ctx, &sp.r_a, &cfg, &err), &err);
    run *x = cm_malloc(sizeof *x);
    CHECK_OK(run_query(&grow, 0, f->s.queries, x, &err) == 0 ? CHIMERA_OK : err.code, &err);
    for (uint32_t i = 0; i < x->n[0]; i++) CHECK(x->docs[0][i] < sp.r_a.n_docs);
    CHECK(grow.iface->refresh != NULL);
    CHECK_OK(grow.iface->refresh(grow.ctx, &sp.r, &err), &err);
    same_runs(f, &whole, &grow, "cuda refresh");

    /* refused: a segment that differs from the uploaded one (other content, so another
     * key), fewer segments */
    be_segment changed[2] = {sp.seg[0], sp.seg[1]};
    changed[0].post_doc = sp.post_doc[1];
    changed[0].key = 3;
    be_resident bad = sp.r;
    bad.segments = changed;
    CHECK_STATUS(grow.iface->refresh(grow.ctx, &bad, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECK_STATUS(grow.iface->refresh(grow.ctx, &sp.r_a, &err), CHIMERA_ERR_INVALID_ARG, &err);
    same_runs(f, &whole, &grow, "cuda after a refused refresh");

    /* a new bitmap: the best document of the first query is deleted */
    CHECK_OK(run_query(&grow, 0, f->s.queries, x, &err) == 0 ? CHIMERA_OK : err.code, &err);
    if (x->n[0] > 0) {
        uint32_t top = x->docs[0][0];
        size_t nb = (size_t)(f->r.n_docs + 7) / 8;
        uint8_t *del = cm_malloc(nb);
        memcpy(del, f->deleted, nb);
        del[top >> 3] |= (uint8_t)(1u << (top & 7));
        be_resident rd = sp.r;
        rd.deleted = del;
        CHECK_OK(grow.iface->refresh(grow.ctx, &rd, &err), &err);
        CHECK_OK(run_query(&grow, 0, f->s.queries, x, &err) == 0 ? CHIMERA_OK : err.code, &err);
        for (int imp = 0; imp < 3; imp++)
            for (uint32_t i = 0; i < x->n[imp]; i++)
                CHECKF(x->docs[imp][i] != top, "impute %d: deleted document %u returned", imp, top);
        cm_free(del);
    }
    cm_free(x);
    backend_free(&grow);
    backend_free(&whole);
    split_free(&sp);
}

/* What runs with or without a device, and what needs one, on one fixture each. */
static void cpu_checks(fix *f)
{
    cpu_probe_check(f);
    split_check(f, 0);
}

static void gpu_checks(fix *f)
{
    compare_fixture(f);
    split_check(f, 1);
}

/* Runs fn on the fixture of each dimension (index directories PREFIX128, PREFIX96). */
static void each_fixture(const char *prefix, void (*fn)(fix *))
{
    static const uint32_t dims[] = {128, 96};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        fix f;
        char name[32];
        snprintf(name, sizeof name, "%s%u", prefix, dims[i]);
        if (fix_make(&f, dims[i], name) != 0) {
            CHECK(0);
            continue;
        }
        fn(&f);
        fix_free(&f);
    }
}

int main(void)
{
    each_fixture("cpu", cpu_checks);
    char status[256];
    int n = backend_cuda_device_count(status, sizeof status);
    if (!backend_cuda_compiled() || n == 0) {
        printf("skipped: no device (%s)\n", status);
        return check_report();
    }
    printf("device: %s\n", status);
    setenv("CHIMERA_CUDA_POISON", "1", 1);
    each_fixture("idx", gpu_checks);
    return check_report();
}
