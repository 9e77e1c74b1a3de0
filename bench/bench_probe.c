/* bench_probe: the CPU backend's graph probe on a built index against its brute probe.
 *
 * For every query token, the probe recall (share of the exact top-n_probe centroids by
 * inner product that the seeded graph walk returns) and the time of each probe call
 * per query: the graph probe's (seed sgemm plus the walks) and the brute probe's (the
 * full centroid-score sgemm plus the selection). Both through the backend, one thread,
 * one query at a time, as `chimera search --threads 1` runs them. --list sets the
 * walk's candidate list (be_config.graph_list; 0 = the backend's own rule), so the
 * rule can be checked against fixed lengths on the index at hand.
 *
 * Usage: bench_probe IDX --queries Q.npy --qlens L.npy [--nprobe 8,16,32] [--list 0,32,64]
 *                    [--reps R]
 * Q: float32 [total, dim]; L: int64 token counts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/npy.h"
#include "index/index.h"

#define MAX_VALUES 16

static int parse_list(const char *s, uint32_t *v)
{
    int n = 0;
    for (char *end; *s && n < MAX_VALUES; s = *end ? end + 1 : end) {
        v[n++] = (uint32_t)strtoul(s, &end, 10);
        if (end == s) return -1;
    }
    return n;
}

static int die(const char *what, const chimera_error *err)
{
    fprintf(stderr, "bench_probe: %s: %s\n", what, err->msg);
    return 1;
}

int main(int argc, char **argv)
{
    const char *idx = NULL, *qpath = NULL, *lpath = NULL;
    uint32_t nps[MAX_VALUES] = {8, 16, 32}, lists[MAX_VALUES] = {0};
    int n_np = 3, n_list = 1, reps = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--queries") && i + 1 < argc) qpath = argv[++i];
        else if (!strcmp(argv[i], "--qlens") && i + 1 < argc) lpath = argv[++i];
        else if (!strcmp(argv[i], "--nprobe") && i + 1 < argc) n_np = parse_list(argv[++i], nps);
        else if (!strcmp(argv[i], "--list") && i + 1 < argc) n_list = parse_list(argv[++i], lists);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (argv[i][0] != '-' && !idx) idx = argv[i];
        else {
            fprintf(stderr, "bench_probe: unknown or incomplete argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!idx || !qpath || !lpath || n_np < 1 || n_list < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_probe IDX --queries Q.npy --qlens L.npy [--nprobe 8,16,32] "
                        "[--list 0,32,64] [--reps R]\n");
        return 2;
    }
    chimera_error err;
    ix_index ix;
    if (ix_open(idx, 0, &ix, &err) != CHIMERA_OK) return die(idx, &err);
    cm_npy qn, ln;
    if (cm_npy_open(qpath, &qn, &err) != CHIMERA_OK) return die(qpath, &err);
    if (cm_npy_open(lpath, &ln, &err) != CHIMERA_OK) return die(lpath, &err);
    if (qn.dtype != CM_F32 || qn.ndim != 2 || qn.shape[1] != ix.dim || ln.dtype != CM_I64 ||
        ln.ndim != 1) {
        fprintf(stderr, "bench_probe: want float32 queries [total, %u] and int64 lengths\n",
                ix.dim);
        return 2;
    }
    const float *Q = qn.data;
    const int64_t *L = ln.data;
    int64_t nq = ln.shape[0], total = 0;
    uint32_t max_m = 0, max_np = 0;
    for (int64_t i = 0; i < nq; i++) {
        total += L[i];
        if ((uint32_t)L[i] > max_m) max_m = (uint32_t)L[i];
    }
    if (total != qn.shape[0] || max_m == 0) {
        fprintf(stderr, "bench_probe: the lengths sum to %lld, the queries hold %lld tokens\n",
                (long long)total, (long long)qn.shape[0]);
        return 2;
    }
    for (int i = 0; i < n_np; i++) max_np = nps[i] > max_np ? nps[i] : max_np;

    /* the probe reads the centroids and the graph; segment 0 stands for the postings */
    const ix_segment *s0 = &ix.segs[0];
    be_segment seg = {.doc_base = 0, .n_docs = s0->n_docs, .n_tokens = s0->n_tokens,
                      .n_lists = s0->n_lists, .post_cid = s0->post_cid,
                      .post_off = s0->post_off, .post_doc = s0->post_doc,
                      .c1_codes = s0->c1_codes, .c1_fact = s0->c1_fact,
                      .d1_codes = s0->d1_codes, .d1_fact = s0->d1_fact,
                      .tok_cid = s0->tok_cid, .doc_off = s0->doc_off};
    be_resident r = {.dim = ix.dim, .dim_pad = ix.dim_pad, .n_clusters = ix.n_clusters,
                     .degree = ix.degree, .n_entry = ix.n_entry, .n_docs = s0->n_docs,
                     .n_tokens = s0->n_tokens, .rot = &ix.rot, .centroids = ix.centroids,
                     .graph_adj = ix.g.adj, .graph_entry = ix.g.entry, .n_segments = 1,
                     .segments = &seg, .deleted = ix.deleted};
    size_t cells = (size_t)max_m * max_np;
    uint32_t *cb = cm_malloc(cells * sizeof *cb), *cg = cm_malloc(cells * sizeof *cg);
    if (!cb || !cg) return fprintf(stderr, "bench_probe: out of memory\n"), 1;
    printf("index %s: K = %u centroids, d = %u; %lld queries, %lld tokens (mean %.1f)\n", idx,
           ix.n_clusters, ix.dim, (long long)nq, (long long)total, (double)total / (double)nq);
    printf("%6s %8s %12s %14s %14s\n", "list", "n_probe", "probe recall", "graph ms/query",
           "brute ms/query");
    for (int li = 0; li < n_list; li++) {
        be_config cfg = {.n_workers = 1, .n_threads = 1, .max_m = max_m, .max_probe = max_np,
                         .max_refine = 16, .graph_list = lists[li]};
        cm_backend be;
        if (backend_new("cpu", &be, &err) != CHIMERA_OK) return die("backend", &err);
        if (be.iface->upload(be.ctx, &r, &cfg, &err) != CHIMERA_OK) return die("upload", &err);
        const struct cm_backend_i *f = be.iface;
        for (int pi = 0; pi < n_np; pi++) {
            uint32_t np = nps[pi];
            uint64_t found = 0, want = 0;
            double t_graph = 0.0, t_brute = 0.0;
            for (int rep = 0; rep < reps; rep++) {
                const float *q = Q;
                for (int64_t i = 0; i < nq; q += (size_t)L[i] * ix.dim, i++) {
                    uint32_t m = (uint32_t)L[i];
                    double t0 = cm_now();
                    if (f->query_begin(be.ctx, 0, q, m, &err) != CHIMERA_OK ||
                        f->probe(be.ctx, 0, np, 0, BE_PROBE_GRAPH, cg, NULL, &err) != CHIMERA_OK)
                        return die("graph probe", &err);
                    double t1 = cm_now();
                    t_graph += t1 - t0;
                    if (rep) continue; /* the brute probe once: it is the reference */
                    if (f->query_begin(be.ctx, 0, q, m, &err) != CHIMERA_OK ||
                        f->probe(be.ctx, 0, np, 0, BE_PROBE_BRUTE, cb, NULL, &err) != CHIMERA_OK)
                        return die("brute probe", &err);
                    t_brute += cm_now() - t1;
                    for (uint32_t j = 0; j < m; j++)
                        for (uint32_t a = 0; a < np; a++) {
                            uint32_t id = cb[j * np + a];
                            if (id == UINT32_MAX) continue;
                            want++;
                            for (uint32_t t = 0; t < np; t++)
                                if (cg[j * np + t] == id) {
                                    found++;
                                    break;
                                }
                        }
                }
            }
            printf("%6u %8u %12.4f %14.3f %14.3f\n", lists[li], np,
                   want ? (double)found / (double)want : 0.0, t_graph * 1e3 / ((double)nq * reps),
                   t_brute * 1e3 / (double)nq);
        }
        backend_free(&be);
    }
    cm_free(cb);
    cm_free(cg);
    cm_npy_close(&qn);
    cm_npy_close(&ln);
    ix_close(&ix);
    return 0;
}
