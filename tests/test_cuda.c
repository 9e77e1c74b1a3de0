/* CUDA backend against the CPU backend and against a host reference of the GPU's own
 * arithmetic (docs/design.md §4). First, with or without a device, the CPU backend's
 * brute-force probe against a double-precision reference (cpu_probe_check). Without a
 * usable device the rest prints "skipped: no device" and passes.
 *
 * Fixture: a synthetic corpus indexed on disk by ix_build (dims 128 and 96, so dim_pad
 * 128 with and without padding), every 7th document marked deleted in the uploaded
 * bitmap. For each query, on two workers, with output buffers poisoned on the device
 * (CHIMERA_CUDA_POISON) and on the host:
 *   probe (brute)  ids identical to the CPU's, scores within PROBE_TOL (cuBLAS and BLAS
 *                  sum in different orders); a differing id is accepted only at a tie
 *                  (both scores within PROBE_TOL);
 *   probe (graph)  recall of the brute-force probe ids >= GRAPH_RECALL;
 *   refine         for each imputation mode: against a host reference that uses the
 *                  GPU's probes and the same LUT arithmetic (quant_math.h): same
 *                  documents in the same order and partial sums within REF_TOL (order
 *                  swaps only at ties); against the CPU backend, whose 1-bit estimates use
 *                  the 4-bit query (popcount form), candidate overlap >= CPU_OVERLAP and
 *                  partial sums of common documents within CPU_TOL * m; no deleted doc;
 *   score1         against the host reference within REF_TOL, against the CPU within
 *                  CPU_TOL * m;
 *   determinism    a second run of the whole query gives bit-identical outputs.
 * Also: upload refused with CHIMERA_ERR_DEVICE under a too-small memory budget, argument
 * errors, score1 of zero documents. */
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
    f->r = (be_resident){.dim = ix->dim, .dim_pad = ix->dim_pad, .n_clusters = ix->n_clusters,
                         .degree = ix->degree, .n_entry = ix->n_entry, .n_docs = ix->n_docs,
                         .n_tokens = ix->n_tokens, .rot = &ix->rot, .centroids = ix->centroids,
                         .graph_adj = ix->g.adj, .graph_entry = ix->g.entry,
                         .post_off = ix->post_off, .post_doc = ix->post_doc,
                         .c1_codes = ix->c1_codes, .c1_fact = ix->c1_fact,
                         .d1_codes = ix->d1_codes, .d1_fact = ix->d1_fact,
                         .tok_cid = ix->tok_cid, .doc_off = ix->doc_off, .deleted = f->deleted};
    return 0;
}

static void fix_free(fix *f)
{
    ix_close(&f->ix);
    data_corpus_free(&f->c);
    data_synth_free(&f->s);
    cm_free(f->deleted);
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
            for (int64_t pos = r->post_off[c]; pos < r->post_off[c + 1]; pos++) {
                float ip = qm_lut_ip(rq->lut + (size_t)j * r->dim_pad * 4,
                                     r->c1_codes + (size_t)pos * cb, r->dim_pad);
                float e = qm_est1(qc[j * NP + p], &r->c1_fact[pos], ip);
                uint32_t d = r->post_doc[pos];
                seen[d] = 1;
                if (e > Mt[(size_t)d * M + j]) Mt[(size_t)d * M + j] = e;
                if (e < mn) mn = e;
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
    int64_t t0 = r->doc_off[d], t1 = r->doc_off[d + 1];
    if (t1 == t0) return -INFINITY;
    float s = 0.0f;
    for (uint32_t j = 0; j < M; j++) {
        float mx = -INFINITY;
        for (int64_t t = t0; t < t1; t++) {
            float ip = qm_lut_ip(rq->lut + (size_t)j * r->dim_pad * 4, r->d1_codes + (size_t)t * cb,
                                 r->dim_pad);
            float e = qm_est1(rq->S[(size_t)r->tok_cid[t] * M + j], &r->d1_fact[t], ip);
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
} run;

static void poison_run(run *x) { memset(x, 0xff, sizeof *x); }

static int run_query(cm_backend *b, int worker, const float *q, run *x, chimera_error *err)
{
    const struct cm_backend_i *it = b->iface;
    poison_run(x);
    if (it->query_begin(b->ctx, worker, q, M, err) != CHIMERA_OK) return -1;
    if (it->probe(b->ctx, worker, NP, BE_PROBE_BRUTE, x->cid, x->qc, err) != CHIMERA_OK) return -1;
    for (int imp = 0; imp < 3; imp++) {
        be_refine_stats st;
        if (it->refine(b->ctx, worker, KR, (be_impute)imp, x->docs[imp], x->partial[imp], &x->n[imp],
                       &st, err) != CHIMERA_OK)
            return -1;
    }
    if (it->score1(b->ctx, worker, x->docs[0], x->n[0], x->s1, err) != CHIMERA_OK) return -1;
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
        ref_end(&rq);
        /* determinism: the whole query again, on the other worker */
        CHECK_OK(run_query(&gpu, 1 - w, q, g2, &err) == 0 ? CHIMERA_OK : err.code, &err);
        CHECK(memcmp(g, g2, sizeof *g) == 0);
        /* graph probe recall against the brute-force ids */
        uint32_t gc[M * NP];
        float gq[M * NP];
        CHECK_OK(gpu.iface->query_begin(gpu.ctx, w, q, M, &err), &err);
        CHECK_OK(gpu.iface->probe(gpu.ctx, w, NP, BE_PROBE_GRAPH, gc, gq, &err), &err);
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
    CHECK_STATUS(gpu.iface->refine(gpu.ctx, 0, 1000, BE_IMPUTE_ZERO, d1, p1, &n1, NULL, &err),
                 CHIMERA_ERR_INVALID_ARG, &err);
    CHECK_STATUS(gpu.iface->query_begin(gpu.ctx, 5, f->s.queries, M, &err), CHIMERA_ERR_INVALID_ARG,
                 &err);
    CHECK_OK(gpu.iface->score1(gpu.ctx, 0, d1, 0, p1, &err), &err);
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
        CHECK_OK(cpu.iface->probe(cpu.ctx, 0, NP, BE_PROBE_BRUTE, cid, qc, &err), &err);
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
    each_fixture("cpu", cpu_probe_check);
    char status[256];
    int n = backend_cuda_device_count(status, sizeof status);
    if (!backend_cuda_compiled() || n == 0) {
        printf("skipped: no device (%s)\n", status);
        return check_report();
    }
    printf("device: %s\n", status);
    setenv("CHIMERA_CUDA_POISON", "1", 1);
    each_fixture("idx", compare_fixture);
    return check_report();
}
